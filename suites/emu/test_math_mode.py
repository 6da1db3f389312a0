"""Metal's math modes on the emulator (core/target.py): `a*b + c` is one fused multiply-add
where Apple's compiler contracts it. In "safe" (what torch.mps.compile_shader compiles with)
within one expression, as TileLang's float32 GEMM test on Metal shows (`C_local[i, j] +=
A_shared[i, k] * B_shared[k, j]` against torch at atol 1e-8); in "relaxed" and "fast" as
well. The float64 model below rounds once per step (fused) or twice (unfused)."""

from __future__ import annotations

import numpy as np
import pytest

from core.errors import LaunchError
from core.runtime import emu
from core.target import METAL
from emucase import HEADER

M = N = K = 128
GEMM = HEADER + """
kernel void gemm(device const float* A [[buffer(0)]], device const float* B [[buffer(1)]],
                 device float* C [[buffer(2)]], uint2 ij [[thread_position_in_grid]]) {
  float acc = 0.0f;
  for (uint k = 0; k < 128; ++k)
    acc += A[ij.y * 128 + k] * B[k * 128 + ij.x];
  C[ij.y * 128 + ij.x] = acc;
}
"""


def _model(a, b, fused: bool):
    acc = np.zeros((M, N), np.float32)
    for k in range(K):
        prod = np.outer(a[:, k].astype(np.float64), b[k].astype(np.float64))   # exact
        if not fused:
            prod = prod.astype(np.float32).astype(np.float64)
        acc = (acc.astype(np.float64) + prod).astype(np.float32)
    return acc


@pytest.fixture(scope="module")
def operands():
    rng = np.random.default_rng(7)
    return (rng.standard_normal((M, K)).astype(np.float32),
            rng.standard_normal((K, N)).astype(np.float32))


def _gemm(a, b, math_mode):
    c = np.zeros((M, N), np.float32)
    emu.run_msl(GEMM, "gemm", grid=(N // 16, M // 16, 1), threadgroup=(16, 16, 1),
                buffers=[a, b, c], checks=(), instrument=False, math_mode=math_mode)
    return c


@pytest.mark.parametrize("math_mode", METAL.math_modes)
def test_a_multiply_add_is_fused_as_metal_fuses_it(operands, math_mode):
    a, b = operands
    got = _gemm(a, b, math_mode)
    fused, unfused = _model(a, b, True), _model(a, b, False)
    assert np.abs(fused - unfused).max() > 1e-6        # the two orders do differ here
    np.testing.assert_array_equal(got, fused)


def test_the_default_is_the_math_mode_of_the_mps_backend(operands, monkeypatch):
    monkeypatch.delenv("PYTORCH_MPS_FAST_MATH", raising=False)
    assert METAL.math_mode == "safe" and METAL.math_mode_in_effect() == "safe"
    monkeypatch.setenv("PYTORCH_MPS_FAST_MATH", "1")
    assert METAL.math_mode_in_effect() == "fast"


def test_an_unknown_math_mode_is_a_launch_error(operands):
    a, b = operands
    with pytest.raises(LaunchError, match=r"math mode 'precise': Metal's are safe, relaxed, "
                                          r"fast"):
        _gemm(a, b, "precise")
