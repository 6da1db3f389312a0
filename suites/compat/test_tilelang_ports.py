"""TileLang's own Metal tests and examples, ported in our own words: the same constructs
and call patterns (`@jit` factories with `T.dtype` defaults, `dtype.as_torch()`,
`"int" in dtype`, outputs passed in, `kernel_source`), sizes cut for the emulator and made
ragged, results against torch with every emulator check on.

    TileLang source                                   here
    testing/python/metal/test_metal_codegen.py        test_simt_gemm (f32, f16, int32)
    testing/python/metal/test_metal_codegen_linux.py  test_simt_gemm_source
    testing/python/metal/test_metal_bf16_codegen.py   test_gemm_jit_with_target_options
    examples/gemv/example_gemv.py (naive_gemv)        test_naive_gemv
    examples/quickstart.py (with its use_swizzle)     test_quickstart_gemm_relu_swizzled

Not here (part B of issue 15): the shared-memory accumulator tests (test_metal_gemm_v2*,
test_metal_address_space, test_metal_simdgroup_store) and the split-k GEMVs (atomics).
"""

from __future__ import annotations

import pytest
import torch

import core
import core.language as T
from harness.check.compare import assert_close
from harness.gen.inputs import random_tensor
from harness.gen.strategies import HALVES


@core.jit
def simt_matmul(M, N, K, block_M, block_N, block_K, dtype=T.float32, accum_dtype=T.float32):
    @T.prim_func
    def gemm(A: T.Tensor((M, K), dtype), B: T.Tensor((K, N), dtype),
             C: T.Tensor((M, N), dtype)):
        with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=128) as (bx, by):
            A_shared = T.alloc_shared((block_M, block_K), dtype, scope="shared")
            B_shared = T.alloc_shared((block_K, block_N), dtype, scope="shared")
            C_local = T.alloc_fragment((block_M, block_N), accum_dtype)
            T.clear(C_local)
            for ko in T.Pipelined(T.ceildiv(K, block_K), num_stages=0):
                T.copy(A[by * block_M, ko * block_K], A_shared, coalesced_width=2)
                T.copy(B[ko * block_K, bx * block_N], B_shared, coalesced_width=2)
                for i, j in T.Parallel(block_M, block_N):
                    for k in T.Serial(block_K):
                        C_local[i, j] += A_shared[i, k] * B_shared[k, j]
            T.copy(C_local, C[by * block_M, bx * block_N], coalesced_width=2)
    return gemm


@pytest.mark.parametrize("dtype", [T.float32, T.float16, T.int32])
def test_simt_gemm(run, dtype):
    M, N, K = 40, 56, 48   # ragged against the 16 x 16 x 16 blocks
    kernel = simt_matmul(M, N, K, 16, 16, 16, dtype=dtype)   # float32 accumulation
    torch_dtype = dtype.as_torch()
    if "int" in dtype:
        a = random_tensor((M, K), str(dtype), 1, low=0, high=100)
        b = random_tensor((K, N), str(dtype), 2, low=0, high=100)
    else:
        a, b = random_tensor((M, K), str(dtype), 3), random_tensor((K, N), str(dtype), 4)
    c = torch.zeros(M, N, dtype=torch_dtype)
    run(kernel, a, b, c)    # the output is passed in, as TileLang's test does
    assert_close(c, a.double() @ b.double(), dtype, reduction_length=K,
                 op_class="exact" if "int" in dtype else "accumulation")
    assert kernel.kernel_source is not None


@pytest.mark.parametrize("dtype", [T.float32, T.float16, T.int32])
def test_simt_gemm_source(dtype):
    src = simt_matmul(1024, 1024, 1024, 16, 16, 16, dtype=dtype) \
        .kernel_source
    assert "kernel void" in src or "[[kernel" in src


@core.jit(out_idx=[2], target="metal", execution_backend="torch")
def repro_gemm(dtype: str):
    M, N, K, threads = 32, 64, 16, 64

    @T.prim_func
    def main(A: T.Tensor((M, K), dtype), B: T.Tensor((K, N), dtype),
             C: T.Tensor((M, N), "float32")):
        with T.Kernel(1, 1, threads=threads) as (_bx, _by):
            A_shared = T.alloc_shared((M, K), dtype, "shared")
            B_shared = T.alloc_shared((K, N), dtype, "shared")
            C_local = T.alloc_fragment((M, N), "float32")
            T.clear(C_local)
            T.copy(A, A_shared)
            T.copy(B, B_shared)
            T.gemm(A_shared, B_shared, C_local)
            T.copy(C_local, C)
    return main


@pytest.mark.parametrize("dtype", HALVES)
def test_gemm_jit_with_target_options(run, dtype):
    kernel = repro_gemm(dtype)
    if dtype == "bfloat16":
        assert "simdgroup_bfloat8x8" in kernel.kernel_source
    a = random_tensor((32, 16), dtype, 5)
    b = random_tensor((16, 64), dtype, 6)
    assert_close(run(kernel, a, b), a.double() @ b.double(), "float32", reduction_length=16,
                 op_class="accumulation")


@core.jit(out_idx=[2])
def naive_gemv(N: int, K: int, BLOCK_N: int, BLOCK_K: int, dtype: T.dtype = T.float16,
               accum_dtype: T.dtype = T.float):
    @T.prim_func
    def gemv(A: T.Tensor((K,), dtype), B: T.Tensor((N, K), dtype), C: T.Tensor((N,), dtype)):
        with T.Kernel(T.ceildiv(N, BLOCK_N), threads=BLOCK_N) as bn:
            tn = T.get_thread_binding(0)
            A_shared = T.alloc_shared((BLOCK_K,), dtype)
            B_shared = T.alloc_shared((BLOCK_N, BLOCK_K), dtype)
            C_reg = T.alloc_local((1,), accum_dtype)
            T.clear(C_reg)
            for bk in T.serial(T.ceildiv(K, BLOCK_K)):
                if tn == 0:   # one thread stages the shared vector (no duplicate writes)
                    for tk in T.serial(BLOCK_K):
                        A_shared[tk] = A[bk * BLOCK_K + tk]
                for tk in T.serial(BLOCK_K):
                    B_shared[tn, tk] = B[bn * BLOCK_N + tn, bk * BLOCK_K + tk]
                for tk in T.serial(BLOCK_K):
                    C_reg[0] += A_shared[tk].astype(accum_dtype) * \
                        B_shared[tn, tk].astype(accum_dtype)
            C[bn * BLOCK_N + tn] = C_reg[0]
    return gemv


def test_naive_gemv(run):
    N, K = 96, 128   # N a multiple of BLOCK_N, K of BLOCK_K, as the example assumes
    kernel = naive_gemv(N, K, 32, 16)
    a, b = random_tensor((K,), "float16", 7), random_tensor((N, K), "float16", 8)
    assert_close(run(kernel, a, b), b.double() @ a.double(), "float16", reduction_length=K,
                 op_class="accumulation")


@core.jit(out_idx=[2])
def quickstart_matmul(M, N, K, block_M, block_N, block_K, swizzle=True):
    dtype, accum_dtype = T.float16, T.float32

    @T.prim_func
    def matmul(A: T.Tensor((M, K), dtype), B: T.Tensor((K, N), dtype),
               C: T.Tensor((M, N), dtype)):
        with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=128) as (bx, by):
            A_shared = T.alloc_shared((block_M, block_K), dtype)
            B_shared = T.alloc_shared((block_K, block_N), dtype)
            C_local = T.alloc_fragment((block_M, block_N), accum_dtype)
            T.use_swizzle(panel_size=10, enable=swizzle)
            T.clear(C_local)
            for ko in T.Pipelined(T.ceildiv(K, block_K), num_stages=3):
                T.copy(A[by * block_M, ko * block_K], A_shared)
                T.copy(B[ko * block_K, bx * block_N], B_shared)
                T.gemm(A_shared, B_shared, C_local)
            for i, j in T.Parallel(block_M, block_N):
                C_local[i, j] = T.max(C_local[i, j], 0)
            T.copy(C_local, C[by * block_M, bx * block_N])
    return matmul


@pytest.mark.parametrize("swizzle", [True, False])
def test_quickstart_gemm_relu_swizzled(run, swizzle):
    # 128 x 128 blocks need a 64 KiB float32 staging buffer (chunked epilogues: part B);
    # 32 x 32 blocks on a 12 x 11 grid keep the panel of 10 meaningful.
    M, N, K = 352, 376, 64
    kernel = quickstart_matmul(M, N, K, 32, 32, 32, swizzle=swizzle)
    a, b = random_tensor((M, K), "float16", 9), random_tensor((K, N), "float16", 10)
    assert_close(run(kernel, a, b), torch.relu(a.double() @ b.double()), "float16",
                 reduction_length=K, op_class="accumulation")
