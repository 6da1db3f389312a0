"""MSL outside the emulator's subset is refused with the construct, the reason and the MSL
line (docs/emulator.md, "Supported MSL"), never run as something else."""

from __future__ import annotations

import numpy as np
import pytest

from core.runtime import emu
from foreigncase import msl_line

HEAD = "#include <metal_stdlib>\nusing namespace metal;\n"

CASES = {
    "address-space overload": (
        HEAD + """\
float first(device const float* p) { return p[0]; }
float first(thread const float* p) { return p[0] + 1.0f; }
kernel void k(device float* y [[buffer(0)]]) { float v = 2.0f; y[0] = first(&v); }
""", "float first(thread const float* p)",
        r"redefinition of 'first'.*erases MSL address spaces"),
    "threadgroup parameter": (
        HEAD + """\
kernel void k(device float* y [[buffer(0)]], threadgroup float* t [[threadgroup(0)]]) {
  y[0] = t[0];
}
""", "kernel void k", r"parameter 't': the attribute \[\[threadgroup\(0\)\]\] is not supported"),
    "stage_in": (
        HEAD + """\
struct V { float4 p; };
kernel void k(device float* y [[buffer(0)]], V v [[stage_in]]) { y[0] = v.p.x; }
""", "kernel void k", r"parameter 'v': the attribute \[\[stage_in\]\] is not supported"),
    "array of buffers": (
        HEAD + """\
kernel void k(device float* y [[buffer(0)]], device float* xs[2] [[buffer(1)]]) {
  y[0] = xs[0][0] + xs[1][0];
}
""", "kernel void k", r"array-typed kernel parameters \(arrays of buffers\) are not supported"),
    "texture": (
        HEAD + """\
kernel void k(texture2d<float> t [[texture(0)]], device float* y [[buffer(0)]]) {
  y[0] = 0.0f;
}
""", "kernel void k", r"textures, samplers and imageblocks are not supported"),
    "vector C cast": (
        HEAD + """\
kernel void k(device uint4* y [[buffer(0)]], device const float4* x [[buffer(1)]]) {
  y[0] = (uint4)x[0];
}
""", "(uint4)x[0]", r"C-style cast to uint4"),
    "threadgroup initializer": (
        HEAD + """\
kernel void k(device float* y [[buffer(0)]], uint t [[thread_index_in_threadgroup]]) {
  threadgroup float acc[32] = {0};
  y[t] = acc[t];
}
""", "threadgroup float acc", r"threadgroup variable 'acc' has an initializer"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_refused_with_construct_reason_and_line(case):
    src, line_text, message = CASES[case]
    with pytest.raises(emu.MSLCompileError, match=message) as err:
        emu.run_msl(src, "k", grid=1, threadgroup=1,
                    buffers=[np.zeros(4, np.float32), np.zeros(4, np.float32)])
    assert err.value.line == msl_line(src, line_text), str(err.value)
