"""TileLang's thread all-reduce form (`T.comm_reducer` + `T.tvm_thread_allreduce`, its
GEMV example), lowered onto the reduction machinery, on the emulator with every check,
against torch; what stays unsupported is a clear error."""

import math

import pytest
import torch

import core
import core.language as T
from core.errors import KernelDefinitionError
from core.target import DTYPES
from harness.check.compare import assert_close
from harness.check.case import Status, run_case
from harness.gen.inputs import random_tensor
from harness.gen.strategies import FLOATS
from suites.core.test_gemm import assert_every_barrier_necessary


def gemv_allreduce(N, K, BLOCK_N, reduce_threads, dtype="float16", accum_dtype="float32",
                   TILE_K=None):
    """examples/gemv/example_gemv.py's splitk_gemv_vectorized_tvm, in our words: a
    (BLOCK_N, reduce_threads) thread block, each thread a strided slice of K for row
    bn * BLOCK_N + tn, the partial sums combined over tk by the thread all-reduce."""
    TILE_K = TILE_K or 128 // DTYPES[dtype].bits
    BLOCK_K = reduce_threads * TILE_K

    @T.prim_func
    def gemv(A: T.Tensor((K,), dtype), B: T.Tensor((N, K), dtype), C: T.Tensor((N,), dtype)):
        with T.Kernel(T.ceildiv(N, BLOCK_N), threads=(BLOCK_N, reduce_threads)) as bn:
            tn = T.get_thread_binding(0)
            tk = T.get_thread_binding(1)
            A_local = T.alloc_local((TILE_K,), dtype)
            B_local = T.alloc_local((TILE_K,), dtype)
            C_accum = T.alloc_local((1,), accum_dtype)
            T.clear(C_accum)
            for bk in T.serial(T.ceildiv(K, BLOCK_K)):
                for k in T.serial(TILE_K):
                    A_local[k] = T.if_then_else(bk * BLOCK_K + tk * TILE_K + k < K,
                                                A[bk * BLOCK_K + tk * TILE_K + k], 0)
                    B_local[k] = T.if_then_else(
                        bn * BLOCK_N + tn < N and bk * BLOCK_K + tk * TILE_K + k < K,
                        B[bn * BLOCK_N + tn, bk * BLOCK_K + tk * TILE_K + k], 0)
                for k in T.serial(TILE_K):
                    C_accum[0] += A_local[k].astype(accum_dtype) * B_local[k].astype(accum_dtype)
            C_reduced = T.alloc_local((1,), accum_dtype)
            with T.attr(T.comm_reducer(lambda x, y: x + y, [T.cast(0, accum_dtype)]),
                        "reduce_scope", T.reinterpret(T.uint64(0), dtype="handle")):
                T.evaluate(T.tvm_thread_allreduce(T.uint32(1), C_accum[0], True,
                                                  C_reduced[0], tk, dtype="handle"))
            # every tk holds the sum; one of them stores it (TileLang's example lets all
            # reduce_threads store the same value, a write-write race the emulator reports)
            if tk == 0 and bn * BLOCK_N + tn < N:
                C[bn * BLOCK_N + tn] = C_reduced[0]

    return gemv


@pytest.mark.parametrize("N, K, BLOCK_N, reduce_threads", [
    (64, 256, 2, 32),        # the reduction is one whole simdgroup... of strided lanes
    (37, 200, 4, 8),         # ragged N and K; a butterfly over bits 2..4
    (20, 1000, 1, 128),      # across 4 simdgroups: butterfly + threadgroup stage
    (24, 300, 8, 64)])       # bits 3..8: in-simd shuffles then 16 simdgroups
def test_gemv_example_port(run, N, K, BLOCK_N, reduce_threads):
    kernel = core.compile(gemv_allreduce(N, K, BLOCK_N, reduce_threads))
    a, b = random_tensor((K,), "float16", 4), random_tensor((N, K), "float16", 5)
    c = torch.zeros(N, dtype=torch.float16)
    run(kernel, a, b, c)
    assert_close(c, b.double() @ a.double(), dtype="float16", reduction_length=K,
                 op_class="accumulation")


def allreduce_kernel(threads, kind_fn, identity, dims, dtype="float32",
                     accum_dtype="float32"):
    """Every thread contributes f(tid); out[tid] = the all-reduce over `dims`."""
    total = math.prod(threads)

    @T.prim_func
    def allreduce(X: T.Tensor((total,), dtype), O: T.Tensor((total,), accum_dtype)):
        with T.Kernel(1, threads=threads) as _:
            tx = T.get_thread_binding(0)
            ty = T.get_thread_binding(1)
            tz = T.get_thread_binding(2)
            tid = tx + ty * threads[0] + (tz * threads[0] * threads[1] if len(threads) > 2
                                          else 0)
            v = T.alloc_local((1,), accum_dtype)
            r = T.alloc_local((1,), accum_dtype)
            v[0] = T.cast(X[tid], accum_dtype)
            with T.attr(T.comm_reducer(kind_fn, [T.cast(identity, accum_dtype)]),
                        "reduce_scope", T.reinterpret(T.uint64(0), dtype="handle")):
                T.evaluate(T.tvm_thread_allreduce(T.uint32(1), v[0], True, r[0],
                                                  *[(tx, ty, tz)[d] for d in dims],
                                                  dtype="handle"))
            O[tid] = r[0]

    return allreduce


def torch_allreduce(x, threads, dims, kind):
    shape = tuple(reversed(threads))               # [z][y][x] of the linear thread id
    t = x.double().reshape(shape)
    axes = tuple(len(threads) - 1 - d for d in dims)
    if kind == "sum":
        r = t.sum(dim=axes, keepdim=True)
    else:
        r = t.amax(dim=axes, keepdim=True) if kind == "max" else t.amin(dim=axes, keepdim=True)
    return r.expand(shape).reshape(-1)


KINDS = {"sum": (lambda x, y: x + y, 0),
         "max": (lambda x, y: T.max(x, y), -3.0e38),
         "min": (lambda x, y: T.min(x, y), 3.0e38)}


@pytest.mark.parametrize("kind", ["sum", "max", "min"])
@pytest.mark.parametrize("threads, dims", [
    ((32, 4), (0,)),           # one whole simdgroup: simd_sum/max/min
    ((8, 16), (0,)),           # lanes 0..7 of each simdgroup: a butterfly
    ((4, 64), (1,)),           # bits 2..8: shuffles, then 8 simdgroups through the stage
    ((2, 4, 16), (1, 2)),      # two thread dims at once
    ((64, 2), (1,)),           # bits 6: across simdgroups only
    ((16, 16), (0, 1))])       # every thread
def test_allreduce_kinds_and_thread_ranges(run, kind, threads, dims):
    fn, ident = KINDS[kind]
    kernel = core.compile(allreduce_kernel(threads, fn, ident, dims))
    total = math.prod(threads)
    x = random_tensor((total,), "float32", 2)
    out = torch.zeros(total)
    run(kernel, x, out)
    assert_close(out, torch_allreduce(x, threads, dims, kind), dtype="float32",
                 reduction_length=total, op_class="accumulation")


def test_int32_allreduce_sum(run):
    kernel = core.compile(allreduce_kernel((8, 32), lambda x, y: x + y, 0, (1,),
                                           dtype="int32", accum_dtype="int32"))
    x = random_tensor((256,), "int32", 3, low=-1000, high=1000)
    out = torch.zeros(256, dtype=torch.int32)
    run(kernel, x, out)
    assert torch.equal(out, torch_allreduce(x, (8, 32), (1,), "sum").to(torch.int32))


def _compile_error(threads=(8, 16), fn=lambda x, y: x + y, ident=0, dims=(1,)):
    with pytest.raises(KernelDefinitionError) as err:
        core.compile(allreduce_kernel(threads, fn, ident, dims))
    return str(err.value)


def test_unsupported_combiner_is_a_clear_error():
    msg = _compile_error(fn=lambda x, y: x * y, ident=1)
    assert "T.comm_reducer" in msg and "allowed: x + y, T.max(x, y), T.min(x, y)" in msg


def test_wrong_sum_identity_is_a_clear_error():
    assert "identity of x + y must be 0" in _compile_error(ident=1)


def test_non_power_of_two_thread_range_is_a_clear_error():
    msg = _compile_error(threads=(8, 12), dims=(1,))
    assert "T.tvm_thread_allreduce" in msg and "powers of two" in msg
    msg = _compile_error(threads=(6, 16), dims=(1,))       # a stride of 6 threads
    assert "powers of two" in msg


def test_allreduce_outside_its_scope_is_a_clear_error():
    with pytest.raises(KernelDefinitionError, match=r"T.tvm_thread_allreduce.*reduce_scope"):
        @T.prim_func
        def bare(O: T.Tensor((32,), "float32")):
            with T.Kernel(1, threads=32):
                tx = T.get_thread_binding(0)
                r = T.alloc_local((1,), "float32")
                T.evaluate(T.tvm_thread_allreduce(T.uint32(1), T.float32(1), True, r[0], tx,
                                                  dtype="handle"))
                O[tx] = r[0]


def test_other_attr_is_a_clear_error():
    with pytest.raises(KernelDefinitionError, match=r"T.attr.*'pragma_unroll' is not "
                                                    r"supported"):
        @T.prim_func
        def other(O: T.Tensor((32,), "float32")):
            with T.Kernel(1, threads=32):
                tx = T.get_thread_binding(0)
                with T.attr(0, "pragma_unroll", 1):
                    O[tx] = 1.0


def test_every_barrier_of_an_allreduce_is_necessary():
    N, K = 24, 300
    func = gemv_allreduce(N, K, 8, 64)                     # 16 simdgroups: the stage
    args = (random_tensor((K,), "float16", 6), random_tensor((N, K), "float16", 7),
            torch.zeros(N, dtype=torch.float16))
    assert assert_every_barrier_necessary(func, None, args) >= 1


def test_allreduces_in_a_loop_reuse_the_stage_safely():
    """One all-reduce per row in a serial loop (the gemv family's form): the stage is
    written again in the next iteration, after every thread read this one's partials."""
    res = run_case("gemv", {"M": 6, "N": 5, "K": 130, "bM": 4, "bN": 1, "bK": 64,
                            "threads": 128, "dtype": "float32", "out_dtype": "float32",
                            "form": "allreduce"})
    assert res.status == Status.PASS, res.message
    assert res.msl.count("threadgroup_barrier") >= 2


def gemv_allreduce_exact(N, K, BLOCK_N, reduce_threads, dtype="float16",
                         accum_dtype="float32"):
    """The same example closer to its text: 128 bits per thread per step and no masking
    (N and K multiples of the block), the all-reduce, then the store. Its
    `for k in T.vectorized(TILE_K)` is written T.serial: metaltile rejects explicit vector
    loops (docs/language.md) and vectorizes the proven-safe accesses itself."""
    TILE_K = 128 // DTYPES[dtype].bits
    BLOCK_K = reduce_threads * TILE_K

    @T.prim_func
    def gemv(A: T.Tensor((K,), dtype), B: T.Tensor((N, K), dtype), C: T.Tensor((N,), dtype)):
        with T.Kernel(T.ceildiv(N, BLOCK_N), threads=(BLOCK_N, reduce_threads)) as bn:
            tn = T.get_thread_binding(0)
            tk = T.get_thread_binding(1)
            A_local = T.alloc_local((TILE_K,), dtype)
            B_local = T.alloc_local((TILE_K,), dtype)
            C_accum = T.alloc_local((1,), accum_dtype)
            T.clear(C_accum)
            for bk in T.serial(T.ceildiv(K, BLOCK_K)):
                for k in T.serial(TILE_K):
                    A_local[k] = A[bk * BLOCK_K + tk * TILE_K + k]
                    B_local[k] = B[bn * BLOCK_N + tn, bk * BLOCK_K + tk * TILE_K + k]
                for k in T.serial(TILE_K):
                    C_accum[0] += A_local[k].astype(accum_dtype) * B_local[k].astype(accum_dtype)
            C_reduced = T.alloc_local((1,), accum_dtype)
            with T.attr(T.comm_reducer(lambda x, y: x + y, [T.cast(0, accum_dtype)]),
                        "reduce_scope", T.reinterpret(T.uint64(0), dtype="handle")):
                T.evaluate(T.tvm_thread_allreduce(T.uint32(1), C_accum[0], True,
                                                  C_reduced[0], tk, dtype="handle"))
            if tk == 0:
                C[bn * BLOCK_N + tn] = C_reduced[0]

    return gemv


@pytest.mark.parametrize("dtype", FLOATS)
def test_gemv_example_vectorized_port(run, dtype):
    N, K, BLOCK_N, reduce_threads = 16, 512, 4, 32
    kernel = core.compile(gemv_allreduce_exact(N, K, BLOCK_N, reduce_threads, dtype))
    a, b = random_tensor((K,), dtype, 8), random_tensor((N, K), dtype, 9)
    c = torch.zeros(N, dtype=getattr(torch, dtype))
    run(kernel, a, b, c)
    assert_close(c, b.double() @ a.double(), dtype=dtype, reduction_length=K,
                 op_class="accumulation")


def test_evaluate_of_anything_else_is_a_clear_error():
    with pytest.raises(KernelDefinitionError, match=r"T.evaluate.*takes only "
                                                    r"T.tvm_thread_allreduce"):
        @T.prim_func
        def other(O: T.Tensor((32,), "float32")):
            with T.Kernel(1, threads=32):
                tx = T.get_thread_binding(0)
                T.evaluate(O[tx] + 1.0)
                O[tx] = 1.0


def test_two_values_at_once_is_a_clear_error():
    with pytest.raises(KernelDefinitionError, match=r"T.tvm_thread_allreduce.*one value"):
        @T.prim_func
        def two(O: T.Tensor((32,), "float32")):
            with T.Kernel(1, threads=32):
                tx = T.get_thread_binding(0)
                r = T.alloc_local((2,), "float32")
                with T.attr(T.comm_reducer(lambda x, y: x + y, [T.float32(0)]),
                            "reduce_scope", T.reinterpret(T.uint64(0), dtype="handle")):
                    T.evaluate(T.tvm_thread_allreduce(T.uint32(2), T.float32(1),
                                                      T.float32(2), True, r[0], r[1], tx,
                                                      dtype="handle"))
                O[tx] = r[0]
