"""T.cumsum / T.cummax (core/language/scan.py): TileLang's inclusive scans, against torch.

1-D and 2-D threadgroup tiles along either dim, forward and reverse, in place and into
another tile; a fragment source (staged through threadgroup memory, as TileLang does);
tiles of a larger buffer; float16 / bfloat16 / int32; thread counts below one simdgroup,
one simdgroup per line and several simdgroups sharing a line (the threadgroup step); and
the refused forms, each naming the construct.
"""

import pytest
import torch

import core
import core.language as T
from core.errors import KernelDefinitionError
from harness.check.compare import assert_close
from harness.gen.inputs import random_tensor
from harness.gen.strategies import HALVES


def _scan(kind, x, dim, reverse):
    if reverse:
        x = x.flip(dim)
    y = x.cumsum(dim) if kind == "sum" else x.cummax(dim).values
    return y.flip(dim) if reverse else y


def _check(run, kernel, a, kind, dim, reverse, dtype, seed_what):
    out = run(kernel, a)
    want = _scan(kind, a.double() if a.is_floating_point() else a, dim, reverse)
    if kind == "max" or not a.is_floating_point():
        assert_close(out, want.to(out.dtype), op_class="exact", what=seed_what)
    else:
        assert_close(out, want, dtype=getattr(torch, dtype), reduction_length=a.shape[dim],
                     op_class="accumulation", what=seed_what)


def _shared_1d(n, threads, kind, reverse, dtype="float32"):
    @T.prim_func
    def scan1d(A: T.Tensor((n,), dtype), B: T.Tensor((n,), dtype)):
        with T.Kernel(1, threads=threads):
            S = T.alloc_shared((n,), dtype)
            T.copy(A, S)
            if kind == "sum":
                T.cumsum(S, reverse=reverse)
            else:
                T.cummax(S, dim=0, reverse=reverse)
            T.copy(S, B)
    return core.compile(scan1d, out_idx=[1])


@pytest.mark.parametrize("kind", ["sum", "max"])
@pytest.mark.parametrize("n,threads,reverse", [
    (256, 128, False),   # four simdgroups share the line: the threadgroup step
    (100, 64, True),     # a ragged last chunk, reversed
    (70, 16, False),     # fewer threads than a simdgroup
    (33, 32, True),      # one simdgroup, two segments
    (100, 48, False),    # a partial last simdgroup, which takes no part
])
def test_1d_shared(run, kind, n, threads, reverse):
    kernel = _shared_1d(n, threads, kind, reverse)
    a = random_tensor((n,), "float32", n + threads)
    _check(run, kernel, a, kind, 0, reverse, "float32", f"cum{kind} n={n}")
    builtin = "simd_prefix_inclusive_sum" if kind == "sum" else "simd_shuffle_up"
    assert builtin in kernel.msl


@pytest.mark.parametrize("kind", ["sum", "max"])
@pytest.mark.parametrize("shape,dim,threads,reverse", [
    ((8, 64), 1, 128, False),   # 8 rows over 4 simdgroups: two rounds
    ((64, 8), 0, 128, True),    # columns, reversed
    ((2, 96), -1, 256, False),  # 2 rows, 4 simdgroups each (negative dim)
    ((40, 3), 0, 64, False),    # 3 columns of 40, 2 simdgroups: a partial last round
])
def test_2d_shared(run, kind, shape, dim, threads, reverse):
    M, N = shape

    @T.prim_func
    def scan2d(A: T.Tensor((M, N), "float32"), B: T.Tensor((M, N), "float32")):
        with T.Kernel(1, threads=threads):
            S = T.alloc_shared((M, N), "float32")
            D = T.alloc_shared((M, N), "float32")
            T.copy(A, S)
            if kind == "sum":
                T.cumsum(src=S, dst=D, dim=dim, reverse=reverse)
            else:
                T.cummax(S, D, dim, reverse)
            T.copy(D, B)

    kernel = core.compile(scan2d, out_idx=[1])
    a = random_tensor(shape, "float32", M * N + dim)
    _check(run, kernel, a, kind, dim % 2, reverse, "float32", f"cum{kind} {shape} dim={dim}")


@pytest.mark.parametrize("kind", ["sum", "max"])
def test_fragment_source_is_staged(run, kind):
    M, N = 16, 64

    @T.prim_func
    def frag(A: T.Tensor((M, N), "float32"), B: T.Tensor((M, N), "float32")):
        with T.Kernel(1, threads=128):
            F = T.alloc_fragment((M, N), "float32")
            T.copy(A, F)
            for i, j in T.Parallel(M, N):
                F[i, j] = F[i, j] * 2.0
            if kind == "sum":
                T.cumsum(F, dim=1)
            else:
                T.cummax(F, dim=1)
            for i, j in T.Parallel(M, N):
                F[i, j] = F[i, j] + 1.0
            T.copy(F, B)

    kernel = core.compile(frag, out_idx=[1])
    a = random_tensor((M, N), "float32", 7)
    out = run(kernel, a)
    assert_close(out, _scan(kind, a.double() * 2, 1, False) + 1.0, dtype=torch.float32,
                 reduction_length=N, op_class="accumulation", what=f"fragment cum{kind}")


def test_tile_of_a_larger_buffer(run):
    M, N = 8, 64

    @T.prim_func
    def tile(A: T.Tensor((M, N), "float32"), B: T.Tensor((M, N), "float32")):
        with T.Kernel(1, threads=64):
            S = T.alloc_shared((M, N), "float32")
            T.copy(A, S)
            T.cumsum(S[2:6, 16:48], dim=1)
            T.copy(S, B)

    kernel = core.compile(tile, out_idx=[1])
    a = random_tensor((M, N), "float32", 3)
    want = a.double().clone()
    want[2:6, 16:48] = want[2:6, 16:48].cumsum(1)
    assert_close(run(kernel, a), want, dtype=torch.float32, reduction_length=32,
                 op_class="accumulation", what="tile cumsum")


@pytest.mark.parametrize("dtype", [*HALVES, "int32"])
@pytest.mark.parametrize("kind", ["sum", "max"])
def test_dtypes(run, dtype, kind):
    n, threads = 160, 64
    kernel = _shared_1d(n, threads, kind, False, dtype)
    a = random_tensor((n,), dtype, 11)
    if dtype == "int32":
        a = a % 1000
    _check(run, kernel, a, kind, 0, False, dtype, f"cum{kind} {dtype}")


def _refused(match, body):
    with pytest.raises(KernelDefinitionError, match=match):
        body()


def test_device_tensor_is_refused():
    def body():
        @T.prim_func
        def dev(A: T.Tensor((64,), "float32")):
            with T.Kernel(1, threads=64):
                T.cumsum(A)
    _refused(r"T.cumsum.*'A' is in 'global' memory", body)


def test_three_dims_are_refused():
    def body():
        @T.prim_func
        def three(A: T.Tensor((2, 4, 8), "float32")):
            with T.Kernel(1, threads=64):
                S = T.alloc_shared((2, 4, 8), "float32")
                T.copy(A, S)
                T.cummax(S, dim=2)
    _refused(r"T.cummax.*3-D operand", body)


def test_dim_out_of_range_is_refused():
    def body():
        @T.prim_func
        def bad_dim(A: T.Tensor((4, 8), "float32")):
            with T.Kernel(1, threads=64):
                S = T.alloc_shared((4, 8), "float32")
                T.copy(A, S)
                T.cumsum(S, dim=2)
    _refused(r"T.cumsum.*dim=2 is out of range", body)


def test_shape_mismatch_is_refused():
    def body():
        @T.prim_func
        def mismatch(A: T.Tensor((4, 8), "float32")):
            with T.Kernel(1, threads=64):
                S = T.alloc_shared((4, 8), "float32")
                D = T.alloc_shared((8, 4), "float32")
                T.copy(A, S)
                T.cumsum(S, D, dim=1)
    _refused(r"T.cumsum.*extents .* must be equal", body)


def test_64_bit_values_are_refused():
    def body():
        @T.prim_func
        def wide(A: T.Tensor((64,), "int64")):
            with T.Kernel(1, threads=64):
                S = T.alloc_shared((64,), "int64")
                T.copy(A, S)
                T.cumsum(S)
    _refused(r"T.cumsum.*dtype int64; allowed", body)
