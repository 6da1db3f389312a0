"""Eager JIT dispatch (pytest-benchmark; skipped in the default run).

    python -m pytest suites/bench/test_eager_bench.py --benchmark-only

The cache hit: a second call with the same shapes and parameters finds its compiled
specialization (argument binding, T.const values from the shapes, key lookup) in under
1 ms, the issue's target; the kernel's run is not part of it. Trace + compile of a new
specialization is timed by `harness bench` (multikernel/eager-host-loop-f16).
"""

import pytest

import core
import core.language as T
from harness.gen.inputs import random_tensor

pytestmark = pytest.mark.bench


@core.jit
def add(A, B, block_M: int, block_N: int, dtype=T.float16):
    M, N = T.const("M, N")
    A: T.Tensor((M, N), dtype)
    B: T.Tensor((M, N), dtype)
    C = T.empty((M, N), dtype)
    with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=128) as (bx, by):
        a = T.alloc_fragment((block_M, block_N), dtype)
        b = T.alloc_fragment((block_M, block_N), dtype)
        T.copy(A[by * block_M, bx * block_N], a)
        T.copy(B[by * block_M, bx * block_N], b)
        for i, j in T.Parallel(block_M, block_N):
            a[i, j] = a[i, j] + b[i, j]
        T.copy(a, C[by * block_M, bx * block_N])
    return C


def test_cache_hit_under_1ms(benchmark):
    a, b = random_tensor((256, 256), "float16", 1), random_tensor((256, 256), "float16", 2)
    first = add.specialize(a, b, 32, 64)
    kernel = benchmark(lambda: add.specialize(a, b, 32, 64, dtype=T.float16))
    assert kernel is first
    assert benchmark.stats.stats.median < 1e-3, benchmark.stats.stats.median


def test_trace_and_compile(benchmark):
    a, b = random_tensor((256, 256), "float16", 3), random_tensor((256, 256), "float16", 4)

    def cold():
        add._kernels.clear()
        return core.compile(add.get_tir(a, b, 32, 64), out_idx=[2], cache=False).msl

    benchmark(cold)
