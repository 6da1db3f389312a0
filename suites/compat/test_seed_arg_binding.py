"""TileLang's testing/python/metal/test_metal_arg_binding.py (seed PR #2969), ported in our
own words with the kernels as written: argument binding in the user's order whatever the
names, scalars between buffers, several and non-trailing outputs, ragged shapes, one tensor
bound to two inputs. Every output is prefilled with NaN (a binding that misses an element
shows), every result is compared with torch.

The kernels launch TileLang's default 128 threads and let every thread store the same
element (`OUT[bx, d] = ...` outside T.Parallel); metaltile makes one thread the writer, so
the emulator's race check has nothing to report.
"""

from __future__ import annotations

import pytest
import torch

import core
import core.language as T
from harness.check.compare import assert_close
from harness.gen.inputs import random_tensor


def _compile(f, out_idx=None):
    return core.compile(f, out_idx=out_idx, execution_backend="torch", target="metal")


def _nan(*shape):
    return torch.full(shape, float("nan"))


@core.jit
def rope_kernel(R, D):
    @T.prim_func
    def rope(Q: T.Tensor((R, D), "float32"), COS: T.Tensor((R, D), "float32"),
             SIN: T.Tensor((R, D), "float32"), Y: T.Tensor((R, D), "float32")):
        with T.Kernel(R) as bx:
            for d in T.serial(D // 2):
                Y[bx, d] = Q[bx, d] * COS[bx, d] - Q[bx, d + D // 2] * SIN[bx, d]
                Y[bx, d + D // 2] = Q[bx, d + D // 2] * COS[bx, d + D // 2] + \
                    Q[bx, d] * SIN[bx, d + D // 2]
    return rope


def test_rope_non_alphabetical_names(run):
    R, D = 20, 32
    q, c, s = (random_tensor((R, D), "float32", i) for i in (1, 2, 3))
    y = _nan(R, D)
    run(rope_kernel(R, D), q, c, s, y)
    h = D // 2
    want = torch.cat([q[:, :h] * c[:, :h] - q[:, h:] * s[:, :h],
                      q[:, h:] * c[:, h:] + q[:, :h] * s[:, h:]], dim=1)
    assert_close(y, want, "float32")


@core.jit
def mixed_kernel(R, D):
    @T.prim_func
    def mix(Z: T.Tensor((R, D), "float32"), A: T.Tensor((R, D), "float32"),
            INPUT: T.Tensor((R, D), "float32"), OUT: T.Tensor((R, D), "float32")):
        with T.Kernel(R) as bx:
            for d in T.serial(D):
                OUT[bx, d] = Z[bx, d] * A[bx, d] + INPUT[bx, d]
    return mix


def test_reversed_names(run):
    R, D = 12, 64
    z, a, i = (random_tensor((R, D), "float32", k) for k in (4, 5, 6))
    out = _nan(R, D)
    run(mixed_kernel(R, D), z, a, i, out)
    assert_close(out, z * a + i, "float32")


@core.jit
def multiout_kernel(R, D):
    @T.prim_func
    def multi(X: T.Tensor((R, D), "float32"), Y: T.Tensor((R, D), "float32"),
              Z: T.Tensor((R, D), "float32"), OUT1: T.Tensor((R, D), "float32"),
              OUT2: T.Tensor((R, D), "float32")):
        with T.Kernel(R) as bx:
            for d in T.serial(D):
                OUT1[bx, d] = X[bx, d] + Y[bx, d]
                OUT2[bx, d] = X[bx, d] * Z[bx, d] - Y[bx, d]
    return multi


def test_multiple_outputs(run):
    R, D = 16, 32
    x, y, z = (random_tensor((R, D), "float32", k) for k in (7, 8, 9))
    out1, out2 = _nan(R, D), _nan(R, D)
    run(multiout_kernel(R, D), x, y, z, out1, out2)
    assert_close(out1, x + y, "float32")
    assert_close(out2, x * z - y, "float32")


@core.jit
def saxpy_kernel(N):
    @T.prim_func
    def saxpy(A: T.Tensor((N,), "float32"), S: T.int32, B: T.Tensor((N,), "float32"),
              OUT: T.Tensor((N,), "float32")):
        with T.Kernel(N) as bx:
            OUT[bx] = A[bx] * T.cast(S, T.float32) + B[bx]
    return saxpy


def test_buffer_scalar_interleave(run):
    N = 100
    a, b = random_tensor((N,), "float32", 10), random_tensor((N,), "float32", 11)
    out = _nan(N)
    run(saxpy_kernel(N), a, 3, b, out)
    assert_close(out, a * 3 + b, "float32")


@core.jit
def tail_kernel(R, D):
    @T.prim_func
    def tail(INPUT: T.Tensor((R, D), "float32"), OUT: T.Tensor((R, D), "float32")):
        with T.Kernel(R) as bx:
            for d in T.serial(D):
                OUT[bx, d] = INPUT[bx, d] * 2.0
    return tail


@pytest.mark.parametrize("R,D", [(31, 96), (27, 33), (1, 7), (57, 12)])
def test_odd_tail_shapes(run, R, D):
    x = random_tensor((R, D), "float32", R + D)
    out = _nan(R, D)
    run(tail_kernel(R, D), x, out)
    assert_close(out, x * 2.0, "float32")


@core.jit
def alias_kernel(R, D):
    @T.prim_func
    def alias(X: T.Tensor((R, D), "float32"), Y: T.Tensor((R, D), "float32"),
              OUT: T.Tensor((R, D), "float32")):
        with T.Kernel(R) as bx:
            for d in T.serial(D):
                OUT[bx, d] = X[bx, d] * Y[bx, d] + X[bx, d]
    return alias


def test_readonly_alias(run):
    R, D = 32, 16
    x = random_tensor((R, D), "float32", 19)
    out = _nan(R, D)
    run(alias_kernel(R, D), x, x, out)   # one tensor bound to X and Y
    assert_close(out, x * x + x, "float32")


@T.prim_func
def non_trailing_out_mid(A: T.Tensor((64,), "float32"), OUT: T.Tensor((64,), "float32"),
                         B: T.Tensor((64,), "float32")):
    with T.Kernel(64) as bx:
        OUT[bx] = A[bx] * 2.0 + B[bx]


@T.prim_func
def non_trailing_out_scalar(A: T.Tensor((64,), "float32"), OUT: T.Tensor((64,), "float32"),
                            S: T.int32, B: T.Tensor((64,), "float32")):
    with T.Kernel(64) as bx:
        OUT[bx] = A[bx] * T.cast(S, T.float32) + B[bx]


@T.prim_func
def non_trailing_out_multi(A: T.Tensor((64,), "float32"), OUT1: T.Tensor((64,), "float32"),
                           B: T.Tensor((64,), "float32"), OUT2: T.Tensor((64,), "float32")):
    with T.Kernel(64) as bx:
        OUT1[bx] = A[bx] + B[bx]
        OUT2[bx] = A[bx] * B[bx]


def test_non_trailing_out_idx(run):
    a, b = random_tensor((64,), "float32", 29), random_tensor((64,), "float32", 30)
    assert_close(run(_compile(non_trailing_out_mid, out_idx=[1]), a, b), a * 2.0 + b,
                 "float32")
    assert_close(run(_compile(non_trailing_out_scalar, out_idx=[1]), a, 3, b), a * 3 + b,
                 "float32")
    o1, o2 = run(_compile(non_trailing_out_multi, out_idx=[1, 3]), a, b)
    assert_close(o1, a + b, "float32")
    assert_close(o2, a * b, "float32")


def test_one_writer_for_a_thread_invariant_store():
    """128 threads, one store per element: made by thread 0 alone."""
    src = tail_kernel(4, 8).kernel_source
    assert "if ((v == 0)) {" in src, src
