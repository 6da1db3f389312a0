"""TileLang's warp-level intrinsics (core/language/warp.py) on the emulator, against torch.

T.shfl_xor / shfl_down / shfl_up / shfl_sync (every width, constant and per-lane deltas,
every dtype class), T.warp_reduce_sum/max/min/bitand/bitor (TileLang's own test kernel),
T.ballot / ballot_sync / any_sync / all_sync / activemask (full, partial and divergent
simdgroups), T.get_lane_idx / get_warp_idx (1-D, 2-D threads, other warp sizes), a
hand-written butterfly all-reduce, and each refused use with its message.
"""

import pytest
import torch

import core
import core.language as T
from core.errors import KernelDefinitionError
from harness.check.compare import assert_close
from harness.gen.inputs import random_tensor
from harness.gen.strategies import FLOATS

SHFL = {"xor": T.shfl_xor, "down": T.shfl_down, "up": T.shfl_up, "sync": T.shfl_sync}


def shuffled(kind, x, amounts, width):
    """CUDA's __shfl_*_sync(x, amount, width) for every thread of a 1-D threadgroup."""
    out = x.clone()
    for t in range(x.shape[0]):
        lane, a = t % 32, int(amounts[t])
        group = lane - lane % width
        if kind == "xor":
            src = lane ^ a if (lane ^ a) < group + width else lane
        elif kind == "down":
            src = lane + a if lane % width + a < width else lane
        elif kind == "up":
            src = lane - a if lane % width >= a else lane
        else:
            src = group + a % width
        out[t] = x[t - lane + src]
    return out


def shuffle_kernel(kind, n, dtype, amount, width=32):
    fn = SHFL[kind]

    @T.prim_func
    def shuffle(A: T.Tensor((n,), dtype), B: T.Tensor((n,), dtype)):
        with T.Kernel(1, threads=n):
            tx = T.get_thread_binding()
            B[tx] = fn(A[tx], amount(tx), width=width)

    return shuffle


@pytest.mark.parametrize("kind", ["xor", "down", "up", "sync"])
@pytest.mark.parametrize("width", [32, 16, 4])
def test_shuffles_with_constant_amounts(run, kind, width):
    amount = {"xor": 3, "down": 2, "up": 5, "sync": 37}[kind]  # sync: srcLane % width
    if kind == "xor" and width == 4:
        amount = 6          # leaves the group of 4 for lanes whose target lies above it
    kernel = core.compile(shuffle_kernel(kind, 64, "int32", lambda tx: amount, width),
                          out_idx=[1])
    form = {"xor": "simd_shuffle_xor(", "down": "simd_shuffle_down(",
            "up": "simd_shuffle_up(", "sync": "simd_shuffle("}[kind]
    assert (form if width == 32 else "simd_shuffle(") in kernel.msl
    a = random_tensor((64,), "int32", 1)
    assert_close(run(kernel, a), shuffled(kind, a, [amount] * 64, width),
                 what=f"shfl_{kind} width {width}")


@pytest.mark.parametrize("kind", ["xor", "down", "up", "sync"])
def test_shuffles_with_per_lane_amounts(run, kind):
    # CUDA lets every lane pick its own delta; MSL's simd_shuffle_up/down/xor do not, so
    # these become simd_shuffle with the source lane computed
    kernel = core.compile(shuffle_kernel(kind, 64, "int32", lambda tx: tx % 5), out_idx=[1])
    assert "simd_shuffle(" in kernel.msl
    a = random_tensor((64,), "int32", 2)
    assert_close(run(kernel, a), shuffled(kind, a, [t % 5 for t in range(64)], 32),
                 what=f"shfl_{kind} per-lane delta")


@pytest.mark.parametrize("dtype", FLOATS + ("int64", "uint8"))
def test_shuffles_move_every_dtype_exactly(run, dtype):
    kernel = core.compile(shuffle_kernel("xor", 32, dtype, lambda tx: 7), out_idx=[1])
    a = random_tensor((32,), dtype, 3, low=-2 ** 40 if dtype == "int64" else -50)
    assert_close(run(kernel, a), shuffled("xor", a, [7] * 32, 32), op_class="exact",
                 what=f"shfl_xor {dtype}")


def test_tilelang_shfl_sync_broadcast(run):
    # TileLang's testing/python/language/test_tilelang_language_warp_sync.py kernel
    @T.prim_func
    def main(A: T.Tensor((32,), "int32")):
        with T.Kernel(1, threads=32):
            tx = T.get_thread_binding()
            val = tx * 10
            broadcast = T.shfl_sync(val, 31)
            A[tx] = broadcast

    a = torch.zeros(32, dtype=torch.int32)
    run(core.compile(main), a)
    assert_close(a, torch.full((32,), 310, dtype=torch.int32), what="shfl_sync broadcast")


def test_butterfly_all_reduce_by_hand(run):
    # the classic CUDA warp sum: five shfl_xor steps, every lane ends with the total
    n = 128

    @T.prim_func
    def warp_sum(A: T.Tensor((n,), "float32"), B: T.Tensor((n,), "float32")):
        with T.Kernel(1, threads=n):
            tx = T.get_thread_binding()
            v = T.alloc_local((1,), "float32")
            v[0] = A[tx]
            for k in T.unroll(5):
                v[0] = v[0] + T.shfl_xor(v[0], 16 >> k)
            B[tx] = v[0]

    kernel = core.compile(warp_sum, out_idx=[1])
    a = random_tensor((n,), "float32", 4)
    expect = a.double().view(4, 32).sum(1, keepdim=True).expand(4, 32).reshape(n)
    assert_close(run(kernel, a), expect, dtype=torch.float32, reduction_length=32,
                 op_class="accumulation", what="butterfly")


WARP_REDUCE = {"sum": T.warp_reduce_sum, "max": T.warp_reduce_max,
               "min": T.warp_reduce_min, "bitand": T.warp_reduce_bitand,
               "bitor": T.warp_reduce_bitor}


def warp_reduce_kernel(op, dtype, threads=32):
    # TileLang's testing/python/language/test_tilelang_language_warp_reduce.py kernel, with
    # the threadgroup size a parameter (each simdgroup reduces its own 32 lanes)
    fn = WARP_REDUCE[op]

    @T.prim_func
    def main(x: T.Tensor((threads,), dtype)):
        with T.Kernel(1, threads=threads):
            tx = T.get_thread_binding(0)
            local_val = T.alloc_local([1], dtype)
            local_val[0] = x[tx]
            reduced_val = T.alloc_local([1], dtype)
            reduced_val[0] = fn(local_val[0])
            x[tx] = reduced_val[0]

    return main


def warp_reduced(op, x):
    groups = x.view(-1, 32)
    if op == "sum":
        r = groups.double().sum(1)
    elif op == "max":
        r = groups.amax(1)
    elif op == "min":
        r = groups.amin(1)
    else:
        r = groups[:, 0].clone()
        for i in range(1, 32):
            r = r & groups[:, i] if op == "bitand" else r | groups[:, i]
    return r[:, None].expand(groups.shape).reshape(x.shape)


@pytest.mark.parametrize("op,dtype", [(op, d) for op in ("sum", "max", "min")
                                      for d in FLOATS + ("int32",)]
                         + [(op, d) for op in ("bitand", "bitor") for d in ("int32", "uint32")])
@pytest.mark.parametrize("threads", [32, 96])
def test_warp_reduce(run, op, dtype, threads):
    kernel = core.compile(warp_reduce_kernel(op, dtype, threads))
    simd = {"sum": "simd_sum(", "max": "simd_max(", "min": "simd_min(", "bitand": "simd_and(",
            "bitor": "simd_or("}[op]
    assert simd in kernel.msl
    x = random_tensor((threads,), dtype, 5, low=0, high=100)
    expect = warp_reduced(op, x)
    run(kernel, x)
    floating_sum = op == "sum" and x.dtype.is_floating_point
    assert_close(x, expect.to(x.dtype) if op == "sum" else expect, dtype=x.dtype,
                 reduction_length=32, op_class="accumulation" if floating_sum else "exact",
                 what=f"warp_reduce_{op} {dtype}")


def test_votes_and_ballots(run):
    n = 48          # a full simdgroup and a partial one of 16 lanes

    @T.prim_func
    def votes(A: T.Tensor((n,), "int32"), B: T.Tensor((n, 5), "int64")):
        with T.Kernel(1, threads=n):
            tx = T.get_thread_binding()
            B[tx, 0] = T.cast(T.ballot(A[tx] > 0), "int64")
            B[tx, 1] = T.cast(T.ballot_sync(A[tx], mask=0xFFFFFFFF), "int64")
            B[tx, 2] = T.cast(T.any_sync(A[tx] > 40), "int64")
            B[tx, 3] = T.cast(T.all_sync(A[tx] > -45, T.activemask()), "int64")
            B[tx, 4] = T.cast(T.activemask(), "int64")

    kernel = core.compile(votes, out_idx=[1])
    for form in ("ulong(simd_ballot(", "simd_any(", "simd_all(",
                 "ulong(simd_active_threads_mask())"):
        assert form in kernel.msl
    a = random_tensor((n,), "int32", 6)
    out = run(kernel, a)
    expect = torch.zeros((n, 5), dtype=torch.int64)
    for g in range(2):
        lanes = range(32 * g, min(n, 32 * g + 32))
        ballot = sum(1 << (t % 32) for t in lanes if a[t] > 0)
        nonzero = sum(1 << (t % 32) for t in lanes if a[t] != 0)
        for t in lanes:
            expect[t] = torch.tensor([ballot, nonzero, int(any(a[u] > 40 for u in lanes)),
                                      int(all(a[u] > -45 for u in lanes)),
                                      (1 << len(lanes)) - 1])
    assert_close(out, expect, what="votes")


def test_activemask_and_ballot_in_a_divergent_branch(run):
    @T.prim_func
    def branch(A: T.Tensor((32,), "int32"), B: T.Tensor((32,), "int64")):
        with T.Kernel(1, threads=32):
            tx = T.get_thread_binding()
            B[tx] = T.int64(0)
            if A[tx] % 2 == 0:
                B[tx] = T.cast(T.activemask(), "int64") + T.cast(T.ballot(tx < 8), "int64") * \
                    T.int64(1 << 32)

    kernel = core.compile(branch, out_idx=[1])
    a = random_tensor((32,), "int32", 7)
    even = [t for t in range(32) if a[t] % 2 == 0]
    mask = sum(1 << t for t in even)
    low = sum(1 << t for t in even if t < 8)
    expect = torch.tensor([mask + (low << 32) if t in even else 0 for t in range(32)])
    assert_close(run(kernel, a), expect, what="activemask in a branch")


@pytest.mark.parametrize("threads,warp_size", [(64, None), ((16, 8), None), ((16, 8), 16),
                                               (96, 8)])
def test_lane_and_warp_indices(run, threads, warp_size):
    dims = threads if isinstance(threads, tuple) else (threads,)
    n = 1
    for d in dims:
        n *= d

    @T.prim_func
    def ids(B: T.Tensor((n, 3), "int32")):
        with T.Kernel(1, threads=threads):
            tx = T.get_thread_binding(0)
            ty = T.get_thread_binding(1)
            t = ty * dims[0] + tx
            B[t, 0] = T.get_lane_idx(warp_size)
            B[t, 1] = T.get_warp_idx(warp_size)
            B[t, 2] = T.get_warp_idx_sync(warp_size)

    out = run(core.compile(ids, out_idx=[0]))
    ws = warp_size or 32
    t = torch.arange(n, dtype=torch.int32)
    assert_close(out, torch.stack([t % ws, t // ws, t // ws], 1), what="lane/warp ids")


def test_lane_index_agrees_with_shuffle_lanes(run):
    # get_lane_idx is the lane simd functions use: every lane reads lane 0's index of its
    # own simdgroup with shfl_sync, and its warp index matches the source's
    @T.prim_func
    def agree(B: T.Tensor((96, 2), "int32")):
        with T.Kernel(1, threads=96):
            tx = T.get_thread_binding()
            B[tx, 0] = T.shfl_sync(T.get_lane_idx(), 0)
            B[tx, 1] = T.shfl_sync(tx, 0) - T.get_warp_idx() * 32

    out = run(core.compile(agree, out_idx=[0]))
    assert_close(out, torch.zeros((96, 2), dtype=torch.int32), what="lane 0")


def _compile_one(body, dtype="float32", n=32):
    @T.prim_func
    def bad(A: T.Tensor((n,), dtype), B: T.Tensor((n,), dtype)):
        with T.Kernel(1, threads=n):
            tx = T.get_thread_binding()
            B[tx] = body(A[tx], tx)

    return core.compile(bad)


@pytest.mark.parametrize("body,dtype,match", [
    (lambda v, tx: T.shfl_xor(v, 1, mask=0xFFFF), "float32",
     r"T.shfl_xor .*mask=65535: Metal's simdgroup functions .* take no lane mask"),
    (lambda v, tx: T.shfl_down(v, 1, width=48), "float32",
     r"T.shfl_down .*width=48 must be a compile-time power of two"),
    (lambda v, tx: T.shfl_up(v, 1, width=tx), "float32",
     r"T.shfl_up .*width=.* must be a compile-time power of two"),
    (lambda v, tx: T.shfl_xor(v, 32), "float32", r"T.shfl_xor .*mask 32 must lie in \[0, 32\)"),
    (lambda v, tx: T.shfl_down(v, 1.5), "float32", r"T.shfl_down .*the lane argument .* integer"),
    (lambda v, tx: T.warp_reduce_sum(v), "int64",
     r"T.warp_reduce_sum .*dtype int64: MSL's simd reductions take 32-bit"),
    (lambda v, tx: T.warp_reduce_bitor(v), "float32",
     r"T.warp_reduce_bitor .*a bitwise reduction takes integers, not float32"),
    (lambda v, tx: T.cast(T.any_sync(v), "float32"), "float32",
     r"T.any_sync .*the predicate must be an integer or bool, not float32"),
    (lambda v, tx: T.cast(T.ballot_sync(tx < 3, tx), "float32"), "float32",
     r"T.ballot_sync .*mask=.*take no lane mask"),
])
def test_refused_uses_name_the_construct(body, dtype, match):
    with pytest.raises(KernelDefinitionError, match=match):
        _compile_one(body, dtype)


def test_lane_index_outside_a_kernel_is_refused():
    with pytest.raises(KernelDefinitionError, match=r"T.get_lane_idx: is only allowed inside"):
        T.get_lane_idx()
