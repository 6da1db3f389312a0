"""Copies between global, shared, fragment and local memory, with tile origins, dtype
conversion, masked edge tiles and transposes through threadgroup memory."""

import pytest
import torch

import core
import core.language as T
from harness.check.compare import assert_close
from harness.gen.inputs import random_tensor
from harness.gen.strategies import FLOATS


@pytest.mark.parametrize("M,N", [(64, 64), (50, 70)])
@pytest.mark.parametrize("dtype", [*FLOATS, "int32"])
def test_transpose_through_shared(M, N, dtype, run_family):
    # the copy family's "transpose": T.copy into shared, F[i, j] = S[j, i], T.copy out
    kernel, _, _ = run_family("copy", {"M": M, "N": N, "dtype": dtype, "mode": "transpose",
                                       "bM": 32, "bN": 32, "threads": 128})
    assert kernel.msl.count("threadgroup_barrier") == 1


@pytest.mark.parametrize("src,dst", [("float16", "float32"), ("float32", "float16"),
                                     ("float32", "bfloat16"), ("int32", "float32")])
def test_copy_converts_dtype(src, dst, run):
    M, N, bM, bN = 48, 40, 16, 8

    @T.prim_func
    def convert(A: T.Tensor((M, N), src), B: T.Tensor((M, N), dst)):
        with T.Kernel(T.ceildiv(N, bN), T.ceildiv(M, bM), threads=64) as (bx, by):
            S = T.alloc_shared((bM, bN), src)
            T.copy(A[by * bM:(by + 1) * bM, bx * bN:(bx + 1) * bN], S, coalesced_width=4)
            T.copy(S, B[by * bM, bx * bN])
    a = (random_tensor((M, N), "float32", 2) * 8).to(getattr(torch, src))
    assert_close(run(core.compile(convert, out_idx=[1]), a), a.to(getattr(torch, dst)), dst)


def test_global_to_global_and_local():
    N = 96

    @T.prim_func
    def k(A: T.Tensor((N, 4), "float32"), B: T.Tensor((N, 4), "float32"),
          C: T.Tensor((N, 4), "float32")):
        with T.Kernel(N // 32, threads=32) as bx:
            T.copy(A[bx * 32, 0], B[bx * 32:(bx + 1) * 32, 0:4])
            L = T.alloc_local((4,), "float32")
            for r in T.Serial(32):
                T.copy(A[bx * 32 + r, 0:4], L)
                for c in range(4):
                    L[c] = L[c] * 2.0
                T.copy(L, C[bx * 32 + r, 0:4])
    # Every thread writes the same C row in the per-thread (local) loop, as the kernel is
    # written: same values, but a race by Metal's rules, which the checker must report.
    kernel = core.compile(k, out_idx=[1, 2])
    a = random_tensor((N, 4), "float32", 3)
    b, c = kernel(a, backend="emu")
    findings = kernel.last_run.findings
    assert findings and all(f.kind == "race" and "'C'" in f.buffer_or_offset for f in findings)
    assert_close(b, a)
    assert_close(c, a * 2)


def test_fill_clear_and_shared_fragment_roundtrip(run):
    @T.prim_func
    def k(A: T.Tensor((16, 64), "float32"), B: T.Tensor((16, 64), "float32")):
        with T.Kernel(1, threads=64):
            S = T.alloc_shared((16, 64), "float32")
            F = T.alloc_fragment((16, 64), "float32")
            G = T.alloc_fragment((16, 64), "float32")
            T.clear(F)
            T.fill(S, 1.5)
            T.copy(A, G)
            for i, j in T.Parallel(16, 64):
                F[i, j] = F[i, j] + G[i, j]
            T.copy(F, S)
            for i, j in T.Parallel(16, 64):
                G[i, j] = S[i, 63 - j]
            T.copy(G, B)
    a = random_tensor((16, 64), "float32", 4)
    assert_close(run(core.compile(k, out_idx=[1]), a), a.flip(1))


def test_pipelined_tile_loop_double_buffer_sync(run):
    M, K, bK = 32, 256, 32

    @T.prim_func
    def rowsum(A: T.Tensor((M, K), "float32"), B: T.Tensor((M, bK), "float32")):
        with T.Kernel(1, threads=128):
            S = T.alloc_shared((M, bK), "float32")
            acc = T.alloc_fragment((M, bK), "float32")
            T.clear(acc)
            for ko in T.Pipelined(K // bK, num_stages=2):
                T.copy(A[0, ko * bK], S)
                for i, j in T.Parallel(M, bK):
                    acc[i, j] = acc[i, j] + S[i, bK - 1 - j]
            T.copy(acc, B)
    a = random_tensor((M, K), "float32", 5)
    ref = a.reshape(M, K // bK, bK).sum(1).flip(1)
    kernel = core.compile(rowsum, out_idx=[1])
    assert_close(run(kernel, a), ref, reduction_length=K // bK)
    # one barrier before the reads (copy -> Parallel), one at the loop top (WAR across
    # iterations), both reached by every thread
    assert kernel.msl.count("threadgroup_barrier") == 2
