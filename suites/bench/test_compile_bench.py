"""Compile time per kernel, DSL to MSL text, cold (no cache) and cached.

Skipped by default (pyproject's addopts has --benchmark-skip); run with
    python -m pytest suites/bench/test_compile_bench.py --benchmark-only
Reference: TileLang 0.1.15 lowers comparable kernels in ~40-100 ms.
"""

import pytest

import core
import core.language as T
from harness.gen import copy as copy_family

pytestmark = pytest.mark.bench


def elementwise():
    M, N = T.dynamic("M"), T.dynamic("N")

    @T.prim_func
    def add(A: T.Tensor((M, N), "float16"), B: T.Tensor((M, N), "float16"),
            C: T.Tensor((M, N), "float16"), alpha: T.float32):
        with T.Kernel(T.ceildiv(N, 64), T.ceildiv(M, 32), threads=128) as (bx, by):
            a = T.alloc_fragment((32, 64), "float32")
            b = T.alloc_fragment((32, 64), "float32")
            T.copy(A[by * 32, bx * 64], a)
            T.copy(B[by * 32, bx * 64], b)
            for i, j in T.Parallel(32, 64):
                a[i, j] = a[i, j] * alpha + b[i, j]
            T.copy(a, C[by * 32, bx * 64])
    return add


def transpose():
    """The copy family's transpose through threadgroup memory (harness/gen/copy.py)."""
    return copy_family.build({"M": 1024, "N": 1024, "dtype": "float32", "mode": "transpose",
                              "bM": 32, "bN": 32, "threads": 256}).func


def gemm(M=1024, N=1024, K=1024, block_M=64, block_N=64, block_K=32, dtype="float16"):
    """TileLang's naive Parallel + Serial GEMM."""
    @T.prim_func
    def main(A: T.Tensor((M, K), dtype), B: T.Tensor((K, N), dtype),
             C: T.Tensor((M, N), dtype)):
        with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=128) as (bx, by):
            A_shared = T.alloc_shared((block_M, block_K), dtype)
            B_shared = T.alloc_shared((block_K, block_N), dtype)
            C_local = T.alloc_fragment((block_M, block_N), "float32")
            T.clear(C_local)
            for ko in T.Pipelined(T.ceildiv(K, block_K), num_stages=3):
                T.copy(A[by * block_M, ko * block_K], A_shared)
                T.copy(B[ko * block_K, bx * block_N], B_shared)
                for i, j in T.Parallel(block_M, block_N):
                    for k in T.Serial(block_K):
                        C_local[i, j] += T.cast(A_shared[i, k], "float32") * \
                            T.cast(B_shared[k, j], "float32")
            T.copy(C_local, C[by * block_M, bx * block_N])
    return main


KERNELS = {"elementwise": elementwise, "transpose": transpose, "naive_gemm": gemm}


@pytest.mark.parametrize("name", sorted(KERNELS))
def test_compile_cold(benchmark, name):
    build = KERNELS[name]
    benchmark(lambda: core.compile(build(), cache=False).msl)


@pytest.mark.parametrize("name", sorted(KERNELS))
def test_compile_cached(benchmark, name):
    build = KERNELS[name]
    core.compile(build())
    benchmark(lambda: core.compile(build()).msl)
