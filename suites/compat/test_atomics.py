"""T.atomic_add / atomic_max / atomic_min in TileLang's style, on the emulator with every
check (the `run` fixture fails on any finding), against torch.

Scalar form on device memory (every dtype and op MSL can do, ragged row counts), on
threadgroup memory (int32, uint32, float32), return_prev, the tile form from a fragment and
from shared memory (split-K partial sums), atomic_addx2/x4, the barrier planner's view of
atomics, the emulator's race finding for a plain store racing atomics, and every rejected
combination with its message.
"""

import pytest
import torch

import core
import core.language as T
from core.errors import KernelDefinitionError
from core.target import DTYPES
from harness.check.compare import assert_close
from harness.gen.inputs import random_tensor
from harness.gen.strategies import FLOATS, HALVES

KINDS = ("add", "max", "min")
ATOMIC = {"add": T.atomic_add, "max": T.atomic_max, "min": T.atomic_min}
DEVICE_DTYPES = FLOATS + ("int32", "uint32")


def rand(shape, dtype, seed):
    if dtype == "int32":
        return random_tensor(shape, "int32", seed, low=-100, high=100)
    if dtype == "uint32":
        return random_tensor(shape, "uint32", seed, low=0, high=200)
    return random_tensor(shape, dtype, seed)


def combine(kind, init, x, dim=0):
    """init (op)= reduce of x over dim, in float64 / int64, rounded once."""
    wide = torch.float64 if init.dtype.is_floating_point else torch.int64
    x, init = x.to(wide), init.to(wide)
    if kind == "add":
        return init + x.sum(dim)
    if kind == "max":
        return torch.maximum(init, x.amax(dim))
    return torch.minimum(init, x.amin(dim))


def column_atomics(kind, M, N, bM, dtype, threads=64):
    """S[j] (op)= A[i, j] for every row i: one atomic per element, rows split over
    threadgroups (the last one ragged)."""
    op = ATOMIC[kind]

    @T.prim_func
    def columns(A: T.Tensor((M, N), dtype), S: T.Tensor((N,), dtype)):
        with T.Kernel(T.ceildiv(M, bM), threads=threads) as bx:
            for i, j in T.Parallel(bM, N):
                if bx * bM + i < M:
                    op(S[j], A[bx * bM + i, j])

    return columns


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("dtype", DEVICE_DTYPES)
def test_scalar_atomics_on_device_memory(run, kind, dtype):
    # 16-bit adds round at every update, so they get few terms (a split-K pattern: one
    # partial per threadgroup); the others many.
    M = 6 if dtype in HALVES and kind == "add" else 37
    N = 24
    kernel = core.compile(column_atomics(kind, M, N, 4, dtype))
    a, s = rand((M, N), dtype, 10), rand((N,), dtype, 11)
    expect = combine(kind, s, a)
    run(kernel, a, s)
    op_class = "accumulation" if kind == "add" else "exact"
    assert_close(s, expect.to(s.dtype) if dtype != "uint32" else expect, dtype=s.dtype,
                 reduction_length=M, op_class=op_class, what=f"atomic_{kind} {dtype}")


def test_native_and_compare_exchange_forms_in_the_msl():
    add = core.compile(column_atomics("add", 8, 8, 4, "float32")).msl
    assert "atomic_fetch_add_explicit((device atomic_float*)&S[" in add
    mx = core.compile(column_atomics("max", 8, 8, 4, "float32")).msl
    assert "tl_atomic_max_device_float((device atomic_uint*)&S[" in mx
    assert "atomic_compare_exchange_weak_explicit" in mx
    half = core.compile(column_atomics("add", 8, 8, 4, "float16")).msl
    assert "tl_atomic_add_device_half((device atomic_uint*)S + (" in half
    imax = core.compile(column_atomics("max", 8, 8, 4, "int32")).msl
    assert "atomic_fetch_max_explicit((device atomic_int*)&S[" in imax


@pytest.mark.parametrize("kind, dtype", [(k, d) for k in KINDS
                                          for d in ("int32", "uint32", "float32")] +
                         [(k, d) for k in ("max", "min") for d in HALVES])
def test_scalar_atomics_on_threadgroup_memory(run, kind, dtype):
    """A per-threadgroup histogram-like accumulation in shared memory, then copied out: the
    planner must put a barrier between the atomics and the copy, none among the atomics."""
    M, N, bM, threads = 45, 16, 16, 128
    op = ATOMIC[kind]
    init = {"add": 0, "max": -1000, "min": 1000}[kind]
    if dtype == "uint32":
        init = {"add": 0, "max": 0, "min": 1000}[kind]

    @T.prim_func
    def tiles(A: T.Tensor((M, N), dtype), S: T.Tensor((T.ceildiv(M, bM), N), dtype)):
        with T.Kernel(T.ceildiv(M, bM), threads=threads) as bx:
            acc = T.alloc_shared((N,), dtype)
            T.fill(acc, init)
            for i, j in T.Parallel(bM, N):
                if bx * bM + i < M:
                    op(acc[j], A[bx * bM + i, j])
            T.copy(acc, S[bx, 0])

    kernel = core.compile(tiles)
    assert kernel.msl.count("threadgroup_barrier") == 2   # after the fill, after the atomics
    if dtype == "float32":  # atomic_float on device memory only
        assert f"tl_atomic_{kind}_threadgroup_float(" in kernel.msl
    a = rand((M, N), dtype, 12)
    out = torch.zeros((3, N), dtype=a.dtype)
    run(kernel, a, out)
    G = -(-M // bM)
    wide = torch.float64 if DTYPES[dtype].is_float else torch.int64
    pad = torch.full((G * bM - M, N), init, dtype=wide)
    padded = torch.cat([a.to(pad.dtype), pad]).reshape(G, bM, N)
    base = torch.full((G, N), init, dtype=pad.dtype)
    if kind == "add":
        padded = torch.cat([a.to(pad.dtype), torch.zeros_like(pad)]).reshape(G, bM, N)
    expect = combine(kind, base, padded, dim=1)
    assert_close(out, expect.to(out.dtype) if dtype != "uint32" else expect, dtype=out.dtype,
                 reduction_length=bM, op_class="accumulation" if kind == "add" else "exact")


def test_return_prev_hands_out_unique_tickets(run):
    n = 200

    @T.prim_func
    def tickets(Counter: T.Tensor((1,), "int32"), Out: T.Tensor((n,), "int32")):
        with T.Kernel(T.ceildiv(n, 64), threads=64) as bx:
            for i in T.Parallel(64):
                if bx * 64 + i < n:
                    Out[bx * 64 + i] = T.atomic_add(Counter[0], 1, return_prev=True)

    counter = torch.zeros(1, dtype=torch.int32)
    out = torch.full((n,), -1, dtype=torch.int32)
    run(core.compile(tickets), counter, out)
    assert counter.item() == n
    assert sorted(out.tolist()) == list(range(n))


@pytest.mark.parametrize("dtype", FLOATS)
def test_split_k_partial_sums_combined_with_tile_atomic_add(run, dtype):
    """TileLang's split-K GEMM: each K split computes a partial C tile in a fragment and
    adds it into C with one tile-form T.atomic_add (ragged M and N, masked at the edges)."""
    M, N, K, bM, bN, bK, splits = 20, 28, 64, 16, 16, 16, 2

    @T.prim_func
    def splitk(A: T.Tensor((M, K), dtype), B: T.Tensor((K, N), dtype),
               C: T.Tensor((M, N), "float32")):
        with T.Kernel(T.ceildiv(N, bN), T.ceildiv(M, bM), splits, threads=128) as (bx, by, bz):
            A_s = T.alloc_shared((bM, bK), dtype)
            B_s = T.alloc_shared((bK, bN), dtype)
            C_l = T.alloc_fragment((bM, bN), "float32")
            T.clear(C_l)
            for k in T.Pipelined(K // (bK * splits), num_stages=1):
                T.copy(A[by * bM, bz * (K // splits) + k * bK], A_s)
                T.copy(B[bz * (K // splits) + k * bK, bx * bN], B_s)
                T.gemm(A_s, B_s, C_l)
            T.atomic_add(C[by * bM, bx * bN], C_l)

    a, b = rand((M, K), dtype, 13), rand((K, N), dtype, 14)
    c = torch.zeros(M, N)
    run(core.compile(splitk), a, b, c)
    assert_close(c, a.double() @ b.double(), dtype="float32" if dtype == "float32" else dtype,
                 reduction_length=K, op_class="accumulation")


@pytest.mark.parametrize("kind", ("max", "min"))
def test_tile_atomic_from_shared_memory(run, kind):
    M, N, bM = 30, 12, 8

    @T.prim_func
    def tile_minmax(A: T.Tensor((M, N), "float32"), R: T.Tensor((bM, N), "float32")):
        with T.Kernel(T.ceildiv(M, bM), threads=32) as bx:
            s = T.alloc_shared((bM, N), "float32")
            T.fill(s, -1e30 if kind == "max" else 1e30)
            T.copy(A[bx * bM, 0], s)
            ATOMIC[kind](R, s)

    a = random_tensor((M, N), "float32", 4)
    r = random_tensor((bM, N), "float32", 5)
    G = -(-M // bM)
    padded = torch.cat([a, torch.zeros(G * bM - M, N)]).reshape(G, bM, N)  # masked loads: 0
    expect = combine(kind, r, padded, dim=0)
    run(core.compile(tile_minmax), a, r)
    assert_close(r, expect.float(), op_class="exact")


@pytest.mark.parametrize("lanes", (2, 4))
def test_atomic_addx2_and_x4(run, lanes):
    M, N = 10, 16
    addx = T.atomic_addx2 if lanes == 2 else T.atomic_addx4

    @T.prim_func
    def vec_add(A: T.Tensor((M, N), "float32"), S: T.Tensor((N,), "float32")):
        with T.Kernel(M, threads=32) as bx:
            for j in T.Parallel(N // lanes):
                addx(S[j * lanes], A[bx, j * lanes])

    a, s = random_tensor((M, N), "float32", 6), random_tensor((N,), "float32", 7)
    expect = s.double() + a.double().sum(0)
    run(core.compile(vec_add), a, s)
    assert_close(s, expect, reduction_length=M, op_class="accumulation")


def test_plain_store_racing_atomics_is_a_race_finding():
    """The emulator checks atomics: a threadgroup zeroing the accumulator while the others
    add into it is reported (nothing orders threadgroups within a dispatch)."""
    N = 8

    @T.prim_func
    def racy(A: T.Tensor((4, N), "float32"), S: T.Tensor((N,), "float32")):
        with T.Kernel(4, threads=32) as bx:
            for j in T.Parallel(N):
                if bx == 0:
                    S[j] = 0.0
                else:
                    T.atomic_add(S[j], A[bx, j])

    kernel = core.compile(racy)
    kernel(random_tensor((4, N), "float32", 8), torch.zeros(N), backend="emu")
    races = [f for f in kernel.last_run.findings if f.kind == "race"]
    assert races and "atomic" in races[0].detail, kernel.last_run.findings


@pytest.mark.parametrize("make, message", [
    (lambda: _bad_dst("local", "float32"), "atomics update device (T.Tensor) or threadgroup"),
    (lambda: _bad_dst("global", "int8"), "int8 has no atomic add"),
    (lambda: _bad_dst("global", "int64"), "int64 has no atomic add"),
    (lambda: _bad_dst("global", "float16", n=7), "even number of elements"),
    (lambda: _bad_dst("shared", "bfloat16", n=5), "even number of elements"),
    (lambda: _bad_dst("global", "float32", memory_order="acquire"), "relaxed only"),
    (lambda: _bad_dst("global", "float32", tile=True, return_prev=True), "scalar form"),
])
def test_unsupported_atomics_are_clear_errors(make, message):
    with pytest.raises(KernelDefinitionError) as err:
        make()
    assert message in str(err.value) and "T.atomic_add" in str(err.value)


def _bad_dst(scope, dtype, n=8, memory_order=None, tile=False, return_prev=False):
    @T.prim_func
    def bad(A: T.Tensor((n,), dtype), S: T.Tensor((n,), dtype)):
        with T.Kernel(1, threads=32):
            if scope == "local":
                acc = T.alloc_local((n,), dtype)
            elif scope == "shared":
                acc = T.alloc_shared((n,), dtype)
            else:
                acc = S
            if tile:
                T.atomic_add(acc, A, return_prev=return_prev)
            else:
                for i in T.Parallel(n):
                    T.atomic_add(acc[i], A[i], memory_order=memory_order)
    return core.compile(bad)


def test_scalar_atomics_from_a_replicated_reduction_add_once(run):
    """A reduction's result is held by every thread of its combining group; an atomic of it
    in a T.Parallel is made by one replica only (else the sum would count each replica)."""
    M, N, parts = 8, 64, 3

    @T.prim_func
    def partial_rows(X: T.Tensor((parts, M, N), "float32"), Y: T.Tensor((M,), "float32")):
        with T.Kernel(parts, threads=128) as bp:
            x = T.alloc_fragment((M, N), "float32")
            s = T.alloc_fragment((M,), "float32")
            T.copy(X[bp, 0, 0], x)
            T.reduce_sum(x, s, dim=1)
            for i in T.Parallel(M):
                T.atomic_add(Y[i], s[i])

    x = random_tensor((parts, M, N), "float32", 9)
    y = torch.zeros(M)
    run(core.compile(partial_rows), x, y)
    assert_close(y, x.double().sum((0, 2)), reduction_length=parts * N,
                 op_class="accumulation")


@pytest.mark.parametrize("dtype", HALVES)
def test_16_bit_atomic_add_on_threadgroup_memory(run, dtype):
    """A threadgroup array of 16-bit elements updated by atomics is declared as 32-bit words
    (the compare-exchange works on the word holding the element)."""
    N, parts = 10, 3

    @T.prim_func
    def tg_add(X: T.Tensor((parts, N), dtype), Y: T.Tensor((N,), dtype)):
        with T.Kernel(1, threads=32):
            acc = T.alloc_shared((N,), dtype)
            T.clear(acc)
            for p, j in T.Parallel(parts, N):
                T.atomic_add(acc[j], X[p, j])
            T.copy(acc, Y)

    kernel = core.compile(tg_add, out_idx=[1])
    assert "threadgroup uint acc_words[5];" in kernel.msl
    x = rand((parts, N), dtype, 15)
    y = run(kernel, x)
    assert_close(y, x.double().sum(0), dtype=dtype, reduction_length=parts,
                 op_class="accumulation")
