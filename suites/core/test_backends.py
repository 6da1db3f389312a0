"""Choosing a backend: the MPS backend off macOS (or without MPS) is a clear error naming the
kernel and saying MPS is unavailable, raised before any tensor is bound."""

import pytest
import torch

import core
import core.language as T
from core.errors import LaunchError
from core.runtime.backends import default_backend, mps_available

pytestmark = pytest.mark.skipif(mps_available(), reason="MPS is available here")


def _copy_kernel():
    @T.prim_func
    def copy(A: T.Tensor((64,), "float32"), B: T.Tensor((64,), "float32")):
        with T.Kernel(1, threads=64) as bx:
            for i in T.Parallel(64):
                B[bx * 64 + i] = A[bx * 64 + i]
    return core.compile(copy, out_idx=[1])


def test_mps_backend_without_mps_is_a_clear_error():
    kernel = _copy_kernel()
    a = torch.randn(64, generator=torch.Generator().manual_seed(0))
    with pytest.raises(LaunchError, match=r"kernel 'copy'.*backend 'mps' is unavailable.*"
                                          r"macOS with MPS"):
        kernel(a, backend="mps")


def test_default_backend_without_mps_is_the_emulator():
    assert default_backend() == "emu"
