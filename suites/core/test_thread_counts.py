"""Thread counts that are not powers of two: any multiple of the simdgroup width up to the
threadgroup limit (96, 384, 896 = MLX's fit for hidden size 3584), end to end on the
emulator against the torch oracles (`run` fixture: every run race-checked).

Copies and elementwise T.Parallel loops deal runs round-robin and mask the last round; the
T.reduce family combines a group that is the partial top bit range of the thread count
(all threads, or all threads with the same low bits) with one simd reduction per
simdgroup, then lane c of every simdgroup reads partial c if c is below the count of
simdgroups (28 at 896) else the identity, and one more simd reduction. Thread counts that
are neither powers of two nor whole simdgroups (48) are refused where a combining group
would need the missing lanes, with a clear error.
"""

import pytest
import torch

import core
import core.language as T
from core.errors import LoweringError, MetaltileError
from harness.check.barriers import check_barriers
from harness.check.compare import assert_close
from harness.check.case import Status, run_case
from harness.gen.strategies import HALVES
from oracles import norm
from suites.core.test_gemm import matmul
from suites.core.test_reduce import (check_reductions, online_softmax, rand, rmsnorm_kernel,
                                     softmax_kernel)


# ---- the T.reduce family ------------------------------------------------------------------

# (M, N, bM, threads, dim): how the inputs of one output spread over the threads
SPREADS = {
    "row-over-3-simdgroups": (4, 384, 1, 96, 1),
    "row-over-12-simdgroups": (3, 1536, 1, 384, 1),
    "row-over-28-simdgroups": (2, 3584, 1, 896, 1),
    "rows-in-masked-rounds": (5, 1000, 2, 384, 1),      # 500 runs over 384 threads
    "rows-across-thread-boundaries": (8, 256, 4, 96, 1),  # row 1: threads 64..95, 0..31
    "rows-in-16-lane-groups": (24, 64, 12, 96, 1),      # 6 holders of 16 threads each
    "columns-over-even-threads": (96, 8, 96, 96, 0),    # groups: threads with one low bit
    "columns-ragged": (70, 24, 64, 384, 0),
}


@pytest.mark.parametrize("spread", list(SPREADS))
def test_reductions(spread, run):
    M, N, bM, threads, dim = SPREADS[spread]
    check_reductions(run, M, N, bM, threads, "float32", dim)


@pytest.mark.parametrize("dtype", [*HALVES, "int32"])
def test_reductions_at_896_threads(dtype, run):
    kernel = check_reductions(run, 3, 3584, 1, 896, dtype, 1)
    # 28 simdgroups: lane c of each reads partial c (c < 28), no loop over the partials
    assert "< 28)" in kernel.msl


def test_cross_simdgroup_step_reads_each_partial_once(run):
    # one simd reduction per simdgroup, one slot per simdgroup, a barrier, then the first
    # simdgroup combines the 28 slots with one more simd reduction (lane c < 28 reading
    # slot c), writes the result to one more slot, and every thread reads it behind a 2nd
    # barrier (cheaper than 27 more simd reductions, core/transform/lower_reduce.py)
    kernel = check_reductions(run, 2, 3584, 1, 896, "float32", 1)
    msl = kernel.msl
    assert msl.count("threadgroup_barrier") == 2 * 5      # two per reduction
    assert "simd_shuffle_xor" not in msl
    assert "reduce.across_simdgroups=first_simdgroup_combines" in kernel.decisions
    stats = kernel.last_run.stats[0]
    groups, simdgroups = 2, 896 // 32
    assert stats["threadgroup_bytes_written"] == 5 * groups * (simdgroups + 1) * 4
    # the first simdgroup's 28 lanes read the partials, every thread the result: the last
    # result, which only the holder's store reads, the emulator's C++ compiler may move
    # into that store's `if` (no barrier after it), so its 896 reads can be 1
    most = 5 * groups * (simdgroups + 896) * 4
    assert most - groups * 895 * 4 <= stats["threadgroup_bytes_read"] <= most
    assert stats["simd_reduce_ops"] == 5 * groups * (simdgroups + 1)


@pytest.mark.parametrize("threads", [96, 384])
def test_fragment_into_local_destination(threads, run):
    # the column sums are held by 2 holders (threads with bit 0 clear / set): every thread
    # gets all of them through the stage
    M, N = threads, 8

    @T.prim_func
    def to_local(A: T.Tensor((M, N), "float32"), Out: T.Tensor((threads, N), "float32")):
        with T.Kernel(1, threads=threads):
            x = T.alloc_fragment((M, N), "float32")
            r = T.alloc_local((N,), "float32")
            T.copy(A, x)
            T.reduce_sum(x, r, dim=0)
            for t in T.Parallel(threads):
                for j in T.serial(N):
                    Out[t, j] = r[j]

    a = rand((M, N), "float32", 1)
    kernel = core.compile(to_local, out_idx=[1])
    assert_close(run(kernel, a), a.sum(0).expand(threads, -1), reduction_length=M)


def test_shared_source_and_destination(run):
    # a shared tile reduces through a fragment of its shape; the 2 row sums go back to a
    # shared buffer written once (by one replica of the one holder)
    M, N, threads = 2, 1000, 384

    @T.prim_func
    def shared_sums(A: T.Tensor((M, N), "float32"), Out: T.Tensor((M,), "float32")):
        with T.Kernel(1, threads=threads):
            a_s = T.alloc_shared((M, N), "float32")
            s_s = T.alloc_shared((M,), "float32")
            T.copy(A, a_s)
            T.reduce_sum(a_s, s_s, dim=1)
            T.copy(s_s, Out)

    a = rand((M, N), "float32", 2)
    kernel = core.compile(shared_sums, out_idx=[1])
    assert_close(run(kernel, a), a.sum(1), reduction_length=N, op_class="accumulation")


def test_weight_fragment_read_as_a_broadcast(run):
    # w[j] is read in T.Parallel(2, 768) at 384 threads: row 0 runs on threads 0..191, row 1
    # on 192..383, so w takes the partial top range of bits 6..8: 64 holders (the threads'
    # low 6 bits) of 6 replicas each, and every read is of a slot the thread holds
    M, N, threads = 4, 768, 384

    @T.prim_func
    def scale(X: T.Tensor((M, N), "float32"), W: T.Tensor((N,), "float32"),
              Y: T.Tensor((M, N), "float32")):
        with T.Kernel(T.ceildiv(M, 2), threads=threads) as bx:
            x = T.alloc_fragment((2, N), "float32")
            w = T.alloc_fragment((N,), "float32")
            T.copy(X[bx * 2, 0], x)
            T.copy(W, w)
            for i, j in T.Parallel(2, N):
                x[i, j] = x[i, j] * w[j]
            T.copy(x, Y[bx * 2, 0])

    x, w = rand((M, N), "float32", 3), rand((N,), "float32", 4)
    kernel = core.compile(scale, out_idx=[2])
    assert_close(run(kernel, x, w), x.double() * w.double(), "float32")
    assert "threadgroup" not in kernel.msl.split("{", 1)[1]     # no staging: reads are local


@pytest.mark.parametrize("threads", [96, 896])
def test_reducer_over_whole_simdgroups(threads, run):
    # T.alloc_reducer + T.finalize_reducer: each simdgroup's lane 0 publishes, every thread
    # folds the threads / 32 partials
    N = 2000

    @T.prim_func
    def total(A: T.Tensor((N,), "float32"), Out: T.Tensor((1,), "float32")):
        with T.Kernel(1, threads=threads):
            acc = T.alloc_reducer((1,), "float32", op="sum")
            T.clear(acc)
            for t in T.Parallel(threads):
                for k in T.serial(T.ceildiv(N, threads)):
                    if k * threads + t < N:
                        acc[0] += A[k * threads + t]
            T.finalize_reducer(acc)
            for t in T.Parallel(threads):
                if t == 0:
                    Out[0] = acc[0]

    a = rand((N,), "float32", 5)
    kernel = core.compile(total, out_idx=[1])
    assert_close(run(kernel, a), a.sum().reshape(1), reduction_length=N,
                 op_class="accumulation")


# ---- softmax-like kernels -----------------------------------------------------------------

@pytest.mark.parametrize("dtype", ["float32", "float16"])
@pytest.mark.parametrize("shape", [(6, 384, 1, 96), (4, 1536, 2, 384), (4, 3584, 1, 896),
                                   (3, 1000, 1, 896)],
                         ids=["96", "384", "896", "896-masked-round"])
def test_softmax(dtype, shape, run):
    M, N = shape[:2]
    a = rand((M, N), dtype, 6)
    kernel = core.compile(softmax_kernel(*shape, dtype), out_idx=[1])
    assert_close(run(kernel, a), norm.softmax(a), dtype, op_class="transcendental")


@pytest.mark.parametrize("threads", [96, 896])
def test_online_softmax(threads, run):
    M, N = 4, 1792                      # 4 K tiles of 448: 112 runs over the threads
    a = rand((M, N), "float32", 7)
    kernel = core.compile(online_softmax(M, N, 1, 448, threads, "float32"), out_idx=[1, 2])
    lse, b = run(kernel, a)
    assert_close(lse, torch.logsumexp(a.double(), 1), "float32", reduction_length=N,
                 op_class="transcendental")
    assert_close(b, norm.softmax(a), "float32", op_class="transcendental")


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_rmsnorm_at_mlx_geometry(dtype, run):
    # hidden size 3584 = 896 threads x 4: one 4-vector per thread, no idle lane
    M, N = 8, 3584
    x, w = rand((M, N), dtype, 8), rand((N,), dtype, 9)
    kernel = core.compile(rmsnorm_kernel(M, N, 1, 896, dtype), out_idx=[2])
    assert_close(run(kernel, x, w), norm.rmsnorm(x, w, 1e-6, out_dtype=dtype), dtype,
                 op_class="transcendental")
    assert "max_total_threads_per_threadgroup(896)" in kernel.msl


@pytest.mark.backend("emu")
@pytest.mark.parametrize("build,args", [
    (lambda: softmax_kernel(4, 3584, 1, 896, "float32"), lambda: [rand((4, 3584), "float32", 10)]),
    (lambda: softmax_kernel(8, 256, 4, 96, "float32"), lambda: [rand((8, 256), "float32", 11)]),
], ids=["softmax-896", "softmax-96-rows-across-threads"])
def test_every_barrier_is_necessary(build, args, run):
    func, inputs = build(), args()
    kernel = core.compile(func, out_idx=[1])
    run(kernel, *inputs)
    # two per reduction: the partials' and the combined result's (the first simdgroup
    # combines: 28 or 3 simdgroups, core/transform/lower_reduce.py `_plan_once`)
    assert kernel.msl.count("threadgroup_barrier") == 4
    report = check_barriers(kernel, inputs)
    assert report.ok, report.summary()


@pytest.mark.backend("emu")
@pytest.mark.parametrize("family,params", [
    ("rmsnorm", {"M": 3, "N": 3584, "dtype": "bfloat16", "eps": 1e-6, "weight": "shared",
                 "bM": 1, "threads": 896}),
    ("rmsnorm", {"M": 9, "N": 150, "dtype": "float16", "eps": 1e-5, "weight": "global",
                 "bM": 4, "threads": 96}),
    ("layernorm", {"M": 5, "N": 1536, "dtype": "float16", "eps": 1e-5, "bM": 2,
                   "threads": 384}),
    ("softmax", {"M": 7, "N": 1000, "dtype": "float32", "scale": 0.125, "bM": 2,
                 "threads": 896}),
    ("reduce", {"M": 37, "N": 150, "dim": 0, "kind": "absmax", "dtype": "float16",
                "out_dtype": "float32", "clear": False, "keepdim": True, "dst": "fragment",
                "block": 8, "threads": 96}),
    ("reduce", {"M": 6, "N": 1000, "dim": 1, "kind": "min", "dtype": "int32",
                "out_dtype": "int32", "clear": True, "keepdim": False, "dst": "local",
                "block": 2, "threads": 384}),
    ("reduce", {"M": 4, "N": 3584, "dim": -1, "kind": "sum", "dtype": "float32",
                "out_dtype": "float32", "clear": True, "keepdim": False, "dst": "fragment",
                "block": 1, "threads": 896, "combine": "atomic", "splits": 4}),
], ids=["rmsnorm-896-shared-weight", "rmsnorm-96-rows-across-threads", "layernorm-384",
        "softmax-896-masked-round", "reduce-columns-96", "reduce-local-384",
        "reduce-atomic-896"])
def test_families_at_whole_simdgroup_counts(family, params, backend):
    # the harness's own path (build, run with every check, compare, barrier necessity)
    result = run_case(family, params, backend=backend, barriers=True)
    assert result.status == Status.PASS, f"{family} {params}: {result.status}\n{result.message}"


# ---- copies and elementwise loops ---------------------------------------------------------

@pytest.mark.parametrize("threads", [96, 384, 896])
@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_copies_and_elementwise(threads, dtype, run):
    # global -> shared -> fragment -> global with an elementwise loop between, a ragged
    # edge tile and a tile whose runs fill the threads unevenly (masked last round)
    M, N, bM, bN = 50, 200, 16, 100

    @T.prim_func
    def axpy(A: T.Tensor((M, N), dtype), B: T.Tensor((M, N), dtype),
             C: T.Tensor((M, N), dtype)):
        with T.Kernel(T.ceildiv(N, bN), T.ceildiv(M, bM), threads=threads) as (bx, by):
            a_s = T.alloc_shared((bM, bN), dtype)
            a = T.alloc_fragment((bM, bN), "float32")
            b = T.alloc_fragment((bM, bN), "float32")
            T.copy(A[by * bM, bx * bN], a_s)
            T.copy(a_s, a)
            T.copy(B[by * bM, bx * bN], b)
            for i, j in T.Parallel(bM, bN):
                b[i, j] = 2.0 * a[i, j] + b[i, j]
            T.copy(b, C[by * bM, bx * bN])

    a, b = rand((M, N), dtype, 12), rand((M, N), dtype, 13)
    kernel = core.compile(axpy, out_idx=[2])
    want = (2.0 * a.double() + b.double()).to(a.dtype)
    assert_close(run(kernel, a, b), want, dtype)


# ---- T.gemm -------------------------------------------------------------------------------

def test_gemm_over_three_simdgroups(run):
    # a (48, 32) tile is 6 x 4 matrices: 2 x 4 per simdgroup for 3 simdgroups
    M, N, K = 96, 64, 64
    a, b = rand((M, K), "float16", 14), rand((K, N), "float16", 15)
    kernel = core.compile(matmul(M, N, K, 48, 32, 32, threads=96), out_idx=[2])
    assert_close(run(kernel, a, b), a.double() @ b.double(), "float32", reduction_length=K,
                 op_class="accumulation")


# ---- what stays refused -------------------------------------------------------------------

def row_over_partial_simdgroup():
    # a row of 48 runs spreads over all 48 threads: lanes 48..63 of the second simdgroup
    # do not exist, so there is no butterfly or simd reduction over them
    @T.prim_func
    def k(A: T.Tensor((2, 192), "float32"), Out: T.Tensor((2,), "float32")):
        with T.Kernel(2, threads=48) as bx:
            x = T.alloc_fragment((1, 192), "float32")
            s = T.alloc_fragment((1,), "float32")
            T.copy(A[bx, 0], x)
            T.reduce_sum(x, s, dim=1)
            T.copy(s, Out[bx])
    return k


def reducer_over_partial_simdgroup():
    @T.prim_func
    def k(A: T.Tensor((48,), "float32"), Out: T.Tensor((1,), "float32")):
        with T.Kernel(1, threads=48):
            acc = T.alloc_reducer((1,), "float32", op="sum")
            T.clear(acc)
            for t in T.Parallel(48):
                acc[0] += A[t]
            T.finalize_reducer(acc)
            Out[0] = acc[0]
    return k


def gemm_tiles_do_not_split():
    return matmul(64, 64, 64, 32, 32, 32, threads=96)


REFUSED = {
    "row over a partial simdgroup": (
        row_over_partial_simdgroup,
        r"kernel 'k'.*T.reduce_sum.*48 threads, not a multiple of 64 nor of the simdgroup "
        r"width 32"),
    "reducer over a partial simdgroup": (
        reducer_over_partial_simdgroup,
        r"T.finalize_reducer.*48 threads.*power of two below 32 or whole simdgroups"),
    "gemm tiles over 3 simdgroups": (
        gemm_tiles_do_not_split,
        r"kernel 'gemm'.*gemm accumulator 'C_local'.*4 x 4 8x8 tiles.*3 simdgroups \(96 "
        r"threads\)"),
}


@pytest.mark.parametrize("name", list(REFUSED))
def test_refused_with_a_clear_error(name):
    build, pattern = REFUSED[name]
    with pytest.raises(LoweringError, match=pattern) as info:
        core.compile(build(), out_idx=[-1])
    assert isinstance(info.value, MetaltileError)
