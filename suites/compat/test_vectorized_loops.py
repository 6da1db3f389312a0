"""T.vectorized / T.Vectorized loops (core/language/loops.py) on the emulator, against torch.

TileLang's split-K GEMV (examples/gemv/example_gemv.py, `splitk_gemv_vectorized`: a
T.vectorized load of each thread's K slice, atomics into shared memory; its two-store body
runs serially), one-store vectorized loops that become vector loads and stores, one that
cannot (unaligned reads) and stays scalar with the same results, and the refused forms.
"""

import pytest
import torch

import core
import core.language as T
from core.errors import KernelDefinitionError
from harness.check.compare import assert_close
from harness.gen.inputs import random_tensor


def splitk_gemv_vectorized(N, K, BLOCK_N, reduce_threads, dtype="float16",
                           accum_dtype="float32"):
    MAX_TRANSACTION_SIZE_IN_BITS = 128
    TILE_K = MAX_TRANSACTION_SIZE_IN_BITS // 16
    BLOCK_K = reduce_threads * TILE_K

    @T.prim_func
    def main(A: T.Tensor((K,), dtype), B: T.Tensor((N, K), dtype),
             C: T.Tensor((N,), dtype)):
        with T.Kernel(T.ceildiv(N, BLOCK_N), threads=(BLOCK_N, reduce_threads)) as bn:
            tn = T.get_thread_binding(0)
            tk = T.get_thread_binding(1)
            A_local = T.alloc_local((TILE_K,), dtype)
            B_local = T.alloc_local((TILE_K,), dtype)
            C_shared = T.alloc_shared((BLOCK_N,), accum_dtype)
            C_accum = T.alloc_local((1,), accum_dtype)
            if tk == 0:
                C_shared[tn] = 0
            T.clear(C_accum)
            for bk in T.serial(T.ceildiv(K, BLOCK_K)):
                for k in T.vectorized(TILE_K):
                    A_local[k] = A[bk * BLOCK_K + tk * TILE_K + k]
                    B_local[k] = B[bn * BLOCK_N + tn, bk * BLOCK_K + tk * TILE_K + k]
                for k in T.serial(TILE_K):
                    C_accum[0] += A_local[k].astype(accum_dtype) * B_local[k].astype(accum_dtype)
            T.atomic_add(C_shared[tn], C_accum[0])
            # TileLang lets every tk store the (equal) sum: a write-write race the emulator
            # reports; one of them stores it
            if tk == 0:
                C[bn * BLOCK_N + tn] = C_shared[tn]

    return main


def test_tilelang_splitk_gemv_vectorized(run):
    N, K = 64, 512
    kernel = core.compile(splitk_gemv_vectorized(N, K, BLOCK_N=8, reduce_threads=16),
                          out_idx=[2])
    a, b = random_tensor((K,), "float16", 1), random_tensor((N, K), "float16", 2)
    expect = (b.double() @ a.double())
    assert_close(run(kernel, a, b), expect, dtype=torch.float16, reduction_length=K,
                 op_class="accumulation", what="split-K GEMV")


def copy_rows(M, N, lanes, offset, dtype="float16"):
    @T.prim_func
    def rows(A: T.Tensor((M, N + offset), dtype), B: T.Tensor((M, N), dtype)):
        with T.Kernel(M, threads=N // lanes) as bx:
            t = T.get_thread_binding()
            x = T.alloc_local((lanes,), dtype)
            for k in T.Vectorized(lanes):
                x[k] = A[bx, offset + t * lanes + k]
            for k in T.vectorized(lanes):
                B[bx, t * lanes + k] = x[k] * 2

    return rows


@pytest.mark.parametrize("offset", [0, 1])
def test_one_store_loops_become_vector_accesses_where_proven(run, offset):
    # offset 1: the reads start one half past a 4-lane boundary, so they stay scalar (the
    # aligned stores still vectorize)
    M, N = 6, 256
    kernel = core.compile(copy_rows(M, N, 4, offset), out_idx=[1])
    assert ("*(const device half4*)(A" in kernel.msl) == (offset == 0)
    assert "*(device half4*)(B" in kernel.msl
    a = random_tensor((M, N + offset), "float16", 3)
    assert_close(run(kernel, a), a[:, offset:] * 2, op_class="exact",
                 what=f"vectorized copy offset {offset}")


def test_refused_forms():
    with pytest.raises(KernelDefinitionError, match=r"T.vectorized.*compile-time constant"):
        @T.prim_func
        def dynamic(A: T.Tensor((64,), "float32"), n: T.int32):
            with T.Kernel(1, threads=1):
                for k in T.vectorized(n):
                    A[k] = 0.0
    with pytest.raises(KernelDefinitionError, match=r"T.vectorized.*annotations"):
        @T.prim_func
        def annotated(A: T.Tensor((64,), "float32")):
            with T.Kernel(1, threads=1):
                for k in T.vectorized(4, annotations={"pragma": 1}):
                    A[k] = 0.0
