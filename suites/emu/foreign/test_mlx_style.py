"""MSL in the style of Apple's MLX kernels (msl/mlx_style.metal, written for these tests):
template kernels instantiated under [[host_name]] through a macro and called by that name,
type traits, METAL_FUNC helpers, a function constant set per run, buffer parameters
without [[buffer(i)]], a user overload of simd_shuffle_down, a function added to
metal::fast, ldexp. Each run with every check and compared against torch in float64."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import torch

from core.errors import LaunchError
from core.runtime import emu
from core.target import METAL
from foreigncase import close, msl_line, run_clean
from harness.cli import main
from harness.gen.inputs import random_tensor, uniform_tensor

SOURCE = (Path(__file__).parent / "msl" / "mlx_style.metal").read_text()
ROWS, AXIS = 3, 1000


def rms_oracle(x: torch.Tensor, w: torch.Tensor, eps: float, has_w: bool) -> torch.Tensor:
    x64 = x.double()
    y = x64 * torch.rsqrt(x64.pow(2).mean(-1, keepdim=True) + eps)
    return y * w.double() if has_w else y


@pytest.mark.parametrize("host_name, dtype, n_reads", [
    ("rms_float32", torch.float32, 4), ("rms_float16", torch.float16, 4),
    ("rms_bfloat16_2", torch.bfloat16, 2)])
@pytest.mark.parametrize("has_w", [True, False])
def test_rms_norm_instantiations_by_host_name(host_name, dtype, n_reads, has_w):
    name = str(dtype).replace("torch.", "")
    x = random_tensor((ROWS, AXIS), name, 1)
    w = uniform_tensor((AXIS,), name, 2, 0.5, 1.5)
    out = torch.zeros(ROWS, AXIS, dtype=dtype)
    eps = np.array([1e-5], np.float32)
    axis = np.array([AXIS], np.uint32)
    threads = -(-AXIS // n_reads)                    # MLX: one thread per N_READS elements,
    threads = -(-threads // METAL.simd_width) * METAL.simd_width  # whole simdgroups
    run_clean(SOURCE, host_name, ROWS, threads, [x, w, out, eps, axis],
              function_constants={20: has_w}, schedule="random", seed=1)
    close(out, rms_oracle(x, w, 1e-5, has_w), reduction_length=AXIS, op_class="accumulation",
          what=host_name)


def test_pair_sum_through_a_user_simd_overload_and_ldexp():
    lo = np.arange(64, dtype=np.float16)
    hi = (np.arange(64) % 7).astype(np.float16)
    out = np.zeros(4, np.float32)
    run_clean(SOURCE, "pair_sum_float16", 2, 32, [lo, hi, out, np.array([-3], np.int32)],
              function_constants={20: False})
    expect = np.stack([lo.reshape(2, 32).astype(np.float64).sum(1),
                       hi.reshape(2, 32).astype(np.float64).sum(1)], 1).reshape(-1) / 8
    close(out, expect, reduction_length=32, op_class="accumulation")


def test_signatures_number_unattributed_buffers_in_order():
    sig = emu.kernel_signatures(SOURCE, {20: True})
    assert sorted(sig) == ["pair_sum_float16", "rms_bfloat16_2", "rms_float16", "rms_float32"]
    rms = sig["rms_float16"]
    assert [(p.name, p.buffer_index) for p in rms.params[:5]] == [
        ("x", 0), ("w", 1), ("out", 2), ("eps", 3), ("axis_size", 4)]
    assert rms.max_total_threads == 1024
    assert rms.line == msl_line(SOURCE, 'instantiate_kernel("rms_float16"')


def test_a_function_constant_without_a_value_is_refused_for_the_kernel_that_reads_it():
    with pytest.raises(emu.MSLCompileError) as err:
        emu.run_msl(SOURCE, "rms_float32", grid=1, threadgroup=32, buffers=[])
    assert "kernel 'rms_float32'" in str(err.value)
    assert "reads function constant 'has_w' ([[function_constant(20)]]), which has no value" \
        in str(err.value)
    assert err.value.line == msl_line(SOURCE, "[[function_constant(20)]]")


def test_a_kernel_that_reads_no_function_constant_needs_no_value():
    """As in Metal (MLX's gemv.metal declares constants only its wide kernels read): the
    file's other kernels run without values for them."""
    lo = np.arange(64, dtype=np.float16)
    hi = (np.arange(64) % 7).astype(np.float16)
    out = np.zeros(4, np.float32)
    run_clean(SOURCE, "pair_sum_float16", 2, 32, [lo, hi, out, np.array([-3], np.int32)])
    expect = np.stack([lo.reshape(2, 32).astype(np.float64).sum(1),
                       hi.reshape(2, 32).astype(np.float64).sum(1)], 1).reshape(-1) / 8
    close(out, expect, reduction_length=32, op_class="accumulation")


def test_a_function_constant_read_through_a_called_function_needs_a_value():
    src = """\
#include <metal_stdlib>
using namespace metal;
constant int scale [[function_constant(4)]];
constant bool unused [[function_constant(5)]];
template <typename T> T scaled(T v) { return v * T(scale); }
struct Scaler { int apply(int v) const { return scaled(v); } };
kernel void direct(device int* y [[buffer(0)]]) { y[0] = scaled(y[0]); }
kernel void through_a_member(device int* y [[buffer(0)]]) { y[0] = Scaler().apply(y[0]); }
kernel void neither(device int* y [[buffer(0)]]) { y[0] = y[0] + 1; }
"""
    for kernel in ("direct", "through_a_member"):
        with pytest.raises(emu.MSLCompileError, match=rf"kernel '{kernel}'.*'scale'") as err:
            emu.run_msl(src, kernel, grid=1, threadgroup=1, buffers=[np.ones(1, np.int32)])
        assert err.value.line == msl_line(src, "[[function_constant(4)]]")
        y = np.full(1, 3, np.int32)
        run_clean(src, kernel, 1, 1, [y], function_constants={4: 5})
        assert y[0] == 15
    y = np.full(1, 3, np.int32)
    run_clean(src, "neither", 1, 1, [y])
    assert y[0] == 4


def test_is_function_constant_defined_sees_whether_a_value_was_given():
    src = """\
#include <metal_stdlib>
using namespace metal;
constant int shift [[function_constant(3)]];
kernel void k(device int* y [[buffer(0)]]) {
  y[0] = is_function_constant_defined(shift) ? shift : -1;
}
"""
    y = np.zeros(1, np.int32)
    run_clean(src, "k", 1, 1, [y])
    assert y[0] == -1
    run_clean(src, "k", 1, 1, [y], function_constants={3: 42})
    assert y[0] == 42


def test_a_function_constant_value_that_is_not_a_number_is_a_launch_error():
    src = """\
#include <metal_stdlib>
using namespace metal;
constant int shift [[function_constant(3)]];
kernel void k(device int* y [[buffer(0)]]) { y[0] = shift; }
"""
    y = np.zeros(1, np.int32)
    with pytest.raises(LaunchError, match=r"kernel 'k'.*function_constants\[3\].*'42' \(str\) "
                                          r"for function constant 'shift' is not a bool, int"):
        emu.run_msl(src, "k", buffers=[y], function_constants={3: "42"})


@pytest.mark.parametrize("value", [math.inf, -math.inf, math.nan, np.float32(0.5), 1e-30])
def test_a_real_function_constant_keeps_its_value(value):
    src = """\
#include <metal_stdlib>
using namespace metal;
constant float limit [[function_constant(0)]];
constant int count [[function_constant(1)]];
kernel void k(device float* y [[buffer(0)]], device int* n [[buffer(1)]]) {
  y[0] = limit;
  n[0] = count;
}
"""
    y, n = np.zeros(1, np.float32), np.zeros(1, np.int32)
    run_clean(src, "k", 1, 1, [y, n], function_constants={0: value, 1: np.int64(-7)})
    assert y[0] == np.float32(value) or (math.isnan(value) and math.isnan(y[0]))
    assert n[0] == -7


def test_harness_emu_with_a_function_constant(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    path = tmp_path / "mlx_style.metal"
    path.write_text(SOURCE)
    base = ["emu", str(path), "--grid", "2", "--threadgroup", "256",
            "--buffer", "f32:2x1000:random", "--buffer", "f32:1000:ones",
            "--buffer", "f32:2x1000", "--buffer", "f32:1:value=0.00001",
            "--buffer", "u32:1:value=1000"]
    assert main(base) == 2
    assert "has 4 kernels" in capsys.readouterr().err
    assert main([*base, "--kernel", "rms_float32"]) == 2   # it reads has_w
    assert "--function-constant 20=VALUE" in capsys.readouterr().err
    assert main([*base, "--kernel", "rms_float32", "--function-constant", "20=true"]) == 0
    out = capsys.readouterr().out
    assert "no findings" in out and "buffer(2) out" in out


def test_metal_array_and_uniform():
    src = """\
#include <metal_stdlib>
using namespace metal;
kernel void k(device float* y [[buffer(0)]], constant uint& n [[buffer(1)]],
              uint i [[thread_position_in_grid]]) {
  metal::array<float, 4> a;
  for (uint j = 0; j < a.size(); ++j) a[j] = float(i * 4 + j);
  uniform<uint> count = make_uniform(n);
  float s = 0.0f;
  for (uint j = 0; j < count; ++j) s += a[j];
  y[i] = s;
}
"""
    y = np.zeros(8, np.float32)
    run_clean(src, "k", 1, 8, [y, np.array([3], np.uint32)])
    close(y, (np.arange(32).reshape(8, 4)[:, :3]).sum(1).astype(np.float32))


def test_reopened_precise_namespace_and_host_name_on_a_plain_kernel():
    src = """\
#include <metal_stdlib>
using namespace metal;
namespace metal {
namespace precise {
inline float twice(float x) { return 2.0f * x; }
}  // namespace precise
}  // namespace metal
[[kernel, host_name("doubled")]] void twice_kernel(device float* y [[buffer(0)]],
                                                   uint i [[thread_position_in_grid]]) {
  y[i] = metal::precise::twice(metal::exp(float(i) * 0.0f) + float(i));
}
"""
    assert list(emu.kernel_signatures(src)) == ["doubled"]
    y = np.zeros(16, np.float32)
    run_clean(src, "doubled", 1, 16, [y])
    close(y, 2.0 * (1.0 + np.arange(16, dtype=np.float32)))
