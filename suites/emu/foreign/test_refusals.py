"""MSL outside the emulator's subset is refused with the construct, the reason and the MSL
line (docs/emulator.md, "Supported MSL"), never run as something else."""

from __future__ import annotations

import numpy as np
import pytest

from core.runtime import emu
from foreigncase import msl_line

HEAD = "#include <metal_stdlib>\nusing namespace metal;\n"

CASES = {
    "member overloads on the object's space with different bodies": (
        HEAD + """\
struct Cell {
  float v;
  float get() const thread { return v; }
  float get() const device { return v + 1.0f; }
};
kernel void k(device float* y [[buffer(0)]], device const Cell* c [[buffer(1)]]) {
  y[0] = c[0].get();
}
""", "float get() const device",
        r"member function 'get' is overloaded on the address space of its object \(MSL lines "
        r"5, 6\) with different bodies"),
    "stage_in": (
        HEAD + """\
struct V { float4 p; };
kernel void k(device float* y [[buffer(0)]], V v [[stage_in]]) { y[0] = v.p.x; }
""", "kernel void k", r"parameter 'v': the attribute \[\[stage_in\]\] is not supported"),
    "array kernel parameter that is not an array of buffers": (
        HEAD + """\
kernel void k(device float* y [[buffer(0)]],
              threadgroup float* tiles[2] [[threadgroup(0)]]) {
  y[0] = tiles[0][0] + tiles[1][0];
}
""", "threadgroup float* tiles[2]",
        r"parameter 'tiles': an array kernel parameter must be an array of buffers"),
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
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_refused_with_construct_reason_and_line(case):
    src, line_text, message = CASES[case]
    with pytest.raises(emu.MSLCompileError, match=message) as err:
        emu.run_msl(src, "k", grid=1, threadgroup=1,
                    buffers=[np.zeros(4, np.float32), np.zeros(4, np.float32)])
    assert err.value.line == msl_line(src, line_text), str(err.value)


TG_PARAM = HEAD + """\
kernel void k(device const float* x [[buffer(0)]], device float* y [[buffer(1)]],
              threadgroup float* t [[threadgroup(0)]], uint i [[thread_index_in_threadgroup]],
              uint n [[threads_per_threadgroup]]) {
  t[i] = x[i];
  threadgroup_barrier(mem_flags::mem_threadgroup);
  y[i] = t[n - 1 - i];
}
"""


def test_threadgroup_parameter_gets_the_length_the_host_sets():
    x = np.arange(64, dtype=np.float32)
    y = np.zeros(64, np.float32)
    res = emu.run_msl(TG_PARAM, "k", grid=1, threadgroup=64, buffers=[x, y],
                      threadgroup_memory={0: 256})
    assert res.findings == []
    np.testing.assert_array_equal(y, x[::-1])
    assert res.stats["threadgroup_memory_bytes"] >= 256


def test_threadgroup_parameter_too_short_is_a_bounds_finding():
    x = np.arange(64, dtype=np.float32)
    res = emu.run_msl(TG_PARAM, "k", grid=1, threadgroup=64, buffers=[x, np.zeros(64, np.float32)],
                      threadgroup_memory={0: 128})
    assert {f.kind for f in res.findings} == {"bounds"}
    assert all(f.buffer_or_offset.startswith("'t'") for f in res.findings)


def test_threadgroup_parameter_without_a_length_is_a_launch_error():
    with pytest.raises(emu.LaunchError, match=r"parameter 't' is bound to \[\[threadgroup\(0\)\]\] "
                                              r"but no length was given"):
        emu.run_msl(TG_PARAM, "k", grid=1, threadgroup=64,
                    buffers=[np.zeros(64, np.float32)] * 2)
    with pytest.raises(emu.LaunchError, match="multiple of 16"):
        emu.run_msl(TG_PARAM, "k", grid=1, threadgroup=64,
                    buffers=[np.zeros(64, np.float32)] * 2, threadgroup_memory={0: 100})


def test_a_plain_redefinition_is_not_blamed_on_address_spaces():
    src = HEAD + """\
float twice(float x) { return 2.0f * x; }
float twice(float x) { return x + x; }
kernel void k(device float* y [[buffer(0)]]) { y[0] = twice(1.0f); }
"""
    with pytest.raises(emu.MSLCompileError, match="redefinition of 'twice'") as err:
        emu.run_msl(src, "k", grid=1, threadgroup=1, buffers=[np.zeros(1, np.float32)])
    assert "address spaces" not in str(err.value)
