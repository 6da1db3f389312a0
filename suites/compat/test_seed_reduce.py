"""TileLang's testing/python/metal/test_metal_reduce.py (seed PR #2968), ported in our own
words with its kernel constructor as written: a fragment (logical_width, scale) reduced
along dim 0 into (scale,), with the threadgroup extent given apart from the fragment.

TileLang's Metal backend accepts only plans whose butterfly stays inside one simdgroup
(nt = logical_width * scale a power of two <= 32, the threadgroup a multiple of nt) and
asserts a lowering error for every other shape. metaltile lowers those too (a threadgroup
stage across simdgroups; lanes past the fragment give the identity), so here every shape of
both lists runs against torch, sum and max, with every emulator check on. TileLang's
offline `xcrun metal` legality checks have no Linux equivalent; the emulator compiles the
same MSL text with clang, and MPS runs it where available.
"""

from __future__ import annotations

import pytest
import torch

import core
import core.language as T
from core.errors import KernelDefinitionError, LoweringError
from harness.check.compare import assert_close
from harness.gen.inputs import random_tensor
from harness.gen.strategies import FLOATS, HALVES


def make_allreduce_dim0_scale_kernel(reduce_fn, logical_width, scale, threads=None,
                                     dtype="float32", clear=True):
    if threads is None:
        threads = logical_width * scale

    @T.prim_func
    def kernel(A: T.Tensor((logical_width, scale), dtype), B: T.Tensor((scale,), dtype)):
        with T.Kernel(1, threads=threads):
            src = T.alloc_fragment((logical_width, scale), dtype)
            dst = T.alloc_fragment((scale,), dtype)
            T.copy(A, src)
            reduce_fn(src, dst, dim=0, clear=clear)
            T.copy(dst, B)

    return kernel


REDUCERS = {"sum": T.reduce_sum, "max": T.reduce_max}

# (logical_width, scale, threads); None: threads = logical_width * scale
REJECTED_BY_TILELANG = [
    (16, 4, None), (32, 2, None), (64, 1, None), (128, 1, None),   # nt > 32
    (8, 2, 24), (2, 4, 12), (8, 4, 40), (4, 4, 20), (2, 2, 6),
    (8, 2, 56),                             # threadgroup not a multiple of nt
]
# Still refused by metaltile, with a clear LoweringError: a thread count that is neither a
# power of two nor whole simdgroups, where the threads holding one output (thread i*scale+j
# holds (i, j): j's holders are not a range of thread-id bits) do not fall into bit-range
# groups dividing the threadgroup. Lowering them needs a layout dealing the reduced dim to
# the low thread bits, or a serial combine through threadgroup memory: not done.
STILL_REFUSED = [(16, 3, None), (8, 5, None), (8, 3, None), (4, 3, None), (16, 2, 40)]
ALLOWED_BY_TILELANG = [
    (32, 1, 32), (16, 2, 32), (8, 4, 32), (16, 1, 16), (8, 2, 16), (2, 4, 8), (4, 8, 32),
    (8, 2, 32), (2, 4, 16), (2, 4, 32), (8, 2, 64), (4, 4, 32), (16, 2, 96), (8, 2, 128),
]


def _oracle(a, kind):
    a = a.double()
    return a.sum(dim=0) if kind == "sum" else a.max(dim=0).values


def _check(run, kind, logical_width, scale, threads, dtype="float32", clear=True):
    kernel = core.compile(make_allreduce_dim0_scale_kernel(
        REDUCERS[kind], logical_width, scale, threads, dtype, clear), out_idx=-1)
    a = random_tensor((logical_width, scale), dtype, logical_width * 7 + scale)
    out = run(kernel, a)
    assert_close(out, _oracle(a, kind), dtype, reduction_length=logical_width,
                 op_class="accumulation" if kind == "sum" else "exact")
    return kernel


@pytest.mark.parametrize("kind", ["sum", "max"])
@pytest.mark.parametrize("logical_width,scale,threads", REJECTED_BY_TILELANG)
def test_shapes_tilelang_rejects_run_correctly(run, kind, logical_width, scale, threads):
    _check(run, kind, logical_width, scale, threads)


@pytest.mark.parametrize("logical_width,scale,threads", STILL_REFUSED)
def test_shapes_still_refused(logical_width, scale, threads):
    n = threads or logical_width * scale
    with pytest.raises(LoweringError) as info:
        core.compile(make_allreduce_dim0_scale_kernel(T.reduce_sum, logical_width, scale,
                                                      threads), out_idx=-1)
    text = str(info.value)
    assert f"cannot reduce fragment 'src' (shape ({logical_width}, {scale}), {n} threads)" \
        in text and f"the threadgroup has {n} threads" in text, text


@pytest.mark.parametrize("kind", ["sum", "max"])
@pytest.mark.parametrize("logical_width,scale,threads", ALLOWED_BY_TILELANG)
def test_shapes_tilelang_allows(run, kind, logical_width, scale, threads):
    kernel = _check(run, kind, logical_width, scale, threads)
    src = kernel.msl
    assert "threadgroup_barrier" not in src or (threads or logical_width * scale) > 32


@pytest.mark.parametrize("kind", ["sum", "max"])
@pytest.mark.parametrize("dtype", HALVES)
def test_half_types_accumulate_in_float32(run, kind, dtype):
    """bf16/fp16 sources reduce in float32 (simd functions take no bfloat) and round once."""
    kernel = _check(run, kind, 16, 2, 32, dtype)
    assert ("bfloat" if dtype == "bfloat16" else "half") in kernel.msl


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_clear_false_adds_to_the_destination(run, dtype):
    """clear=False: dst keeps its value and the reduction is added to it (TileLang's
    duplicate-buffer path). dst is a fragment here, filled from nothing but the copy-in,
    so the kernel clears it first the way a user would."""
    @T.prim_func
    def accumulate(A: T.Tensor((16, 2), dtype), B0: T.Tensor((2,), dtype),
                   B: T.Tensor((2,), dtype)):
        with T.Kernel(1, threads=32):
            src = T.alloc_fragment((16, 2), dtype)
            dst = T.alloc_fragment((2,), dtype)
            T.copy(A, src)
            T.copy(B0, dst)
            T.reduce_sum(src, dst, dim=0, clear=False)
            T.copy(dst, B)

    kernel = core.compile(accumulate, out_idx=-1)
    a, b0 = random_tensor((16, 2), dtype, 1), random_tensor((2,), dtype, 2)
    assert_close(run(kernel, a, b0), b0.double() + a.double().sum(dim=0), dtype,
                 reduction_length=17, op_class="accumulation")


@pytest.mark.parametrize("dtype", FLOATS)
def test_fill_with_infinity(run, dtype):
    @T.prim_func
    def kernel(A: T.Tensor((32,), dtype)):
        with T.Kernel(1, threads=32):
            T.fill(A, T.infinity(dtype))

    out = run(core.compile(kernel, out_idx=-1))
    assert_close(out, torch.full((32,), float("inf")), dtype, op_class="exact")


@pytest.mark.parametrize("op", ["sum", "max", "min"])
def test_finalize_reducer_runs(run, op):
    """TileLang has no finalize_reducer for Metal and asserts the lowering error;
    metaltile lowers reducer v2 (T.alloc_reducer, T.reducer_init, T.reducer_update,
    T.finalize_reducer)."""
    @T.prim_func
    def kernel(A: T.Tensor((8,), T.float32), B: T.Tensor((1,), T.float32)):
        with T.Kernel(1, threads=32):
            src = T.alloc_fragment((8,), T.float32)
            T.copy(A, src)
            acc = T.alloc_reducer((1,), T.float32, op=op)
            T.reducer_init(acc)
            for i in T.Parallel(8):
                T.reducer_update(acc[0], src[i])
            result = T.alloc_fragment((1,), T.float32)
            T.finalize_reducer(acc, result)
            T.copy(result, B)

    a = random_tensor((8,), "float32", 3)
    want = {"sum": a.double().sum(), "max": a.double().max(), "min": a.double().min()}[op]
    assert_close(run(core.compile(kernel, out_idx=-1), a), want.reshape(1), "float32",
                 reduction_length=8, op_class="accumulation" if op == "sum" else "exact")


def test_reducer_update_needs_a_reducer():
    with pytest.raises(KernelDefinitionError) as info:
        @T.prim_func
        def kernel(A: T.Tensor((8,), T.float32)):
            with T.Kernel(1, threads=32):
                acc = T.alloc_local((1,), T.float32)
                T.reducer_update(acc[0], A[0])
    assert "T.reducer_update" in str(info.value) and \
        "'acc' is not a T.alloc_reducer buffer" in str(info.value)
