"""Building: content-hash cache, concurrent builds, compiler errors on MSL lines, the
documented source rewrite."""

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from core.errors import MSLCompileError
from core.runtime import emu
from core.runtime.emu import build, cross, translate
from emucase import HEADER, line_of, run

REPO = Path(__file__).resolve().parents[2]


def test_syntax_error_points_at_the_msl_line():
    src = r"""
kernel void broken(device float* y [[buffer(0)]], uint i [[thread_position_in_grid]]) {
  float v = 1.0f
  y[i] = v;
}
"""
    with pytest.raises(MSLCompileError) as err:
        run(src, "broken", 1, 1, np.zeros(1, np.float32))
    e = err.value
    assert e.kernel == "broken" and e.line == line_of(src, "float v = 1.0f")
    assert "expected ';'" in str(e) and "float v = 1.0f" in str(e)


def test_implicit_vector_conversion_is_rejected_like_msl():
    src = r"""
kernel void narrow(device half4* y [[buffer(0)]], device const float4* x [[buffer(1)]]) {
  half4 h = x[0];
  y[0] = h;
}
"""
    with pytest.raises(MSLCompileError) as err:
        run(src, "narrow", 1, 1, np.zeros(4, np.float16), np.zeros(4, np.float32))
    assert err.value.line == line_of(src, "half4 h = x[0]")


def test_translation_keeps_lines_and_rewrites_only_msl_syntax():
    src = textwrap.dedent("""\
        #include <metal_stdlib>
        // a comment with float4(x) and threadgroup float z[2];
        kernel void k(device float4* y [[buffer(0)]], uint t [[thread_index_in_threadgroup]]) {
          threadgroup float tile[4][8];
          tile[0][t] = 1.5;
          y[t] = float4(half2(0.5h), tile[0][t], 2);
        }
        """)
    tr = translate.translate(src)
    lines = tr.cpp.splitlines()[3:]  # after the #line / using prelude
    assert len(lines) == len(src.splitlines())
    assert "__mt_tg_slot(0, sizeof" in lines[3] and tr.threadgroup_vars == {0: "tile"}
    assert "1.5f" in lines[4]
    assert "metal::__mt_make_vec<float, 4>(metal::__mt_make_vec<half, 2>(half(0.5f))" in lines[5]
    assert "float4(x)" not in lines[1] and lines[0].strip() == ""
    sig = tr.kernels["k"]
    assert [(p.name, p.buffer_index, p.position) for p in sig.params] == [
        ("y", 0, None), ("t", None, "thread_index_in_threadgroup")]


def test_cached_build_is_reused(tmp_path, monkeypatch):
    # The runtime objects and both precompiled headers (checked builds; plain for reading
    # signatures) come from the current cache: only the kernel's own build is under test
    # (the next test builds everything cold).
    (tmp_path / "emu").mkdir()
    shared_builder = build.default_builder()
    for shared in (*shared_builder.runtime_objects(build.HOST_ENTRY),
                   *shared_builder.runtime_objects(build.EXECUTABLE_ENTRY)[-1:],
                   shared_builder.precompiled_header(True),
                   shared_builder.precompiled_header(False)):
        shutil.copy(shared, tmp_path / "emu" / shared.name)
    monkeypatch.setenv("METALTILE_CACHE", str(tmp_path))
    builder = build.Builder()
    tr = translate.translate(HEADER + "kernel void k(device int* y [[buffer(0)]]) { y[0] = 7; }")
    first = builder.build(tr)
    stamp = first.path.stat().st_mtime_ns
    again = build.Builder().build(tr)  # a fresh builder (new process) finds it on disk
    assert again.path == first.path and again.path.stat().st_mtime_ns == stamp
    # a shared object for the launch host, else an executable (Builder.loads_libraries)
    assert first.path.suffix == (".so" if builder.loads_libraries() else ".bin")
    assert (first.host is not None) == builder.loads_libraries()
    assert len(list(tmp_path.glob("emu/kernel-*"))) == 1
    assert len(list(tmp_path.glob("emu/*.pch"))) == 2  # the copied ones were used


CONCURRENT = """
import sys, numpy as np
from core.runtime import emu
src = '#include <metal_stdlib>\\nkernel void k(device int* y [[buffer(0)]]) { y[0] = 41 + 1; }'
y = np.zeros(1, np.int32)
emu.run_msl(src, "k", buffers=[y])
assert y[0] == 42
print("ok")
"""


def test_two_processes_building_the_same_kernel_both_succeed(tmp_path):
    # Both processes build both precompiled headers and the kernel at once; the runtime
    # objects (built by the same atomic code as the headers, ~5 s of clang -O2 each) come
    # from the current cache.
    (tmp_path / "emu").mkdir()
    copied = {*build.default_builder().runtime_objects(build.HOST_ENTRY),
              *build.default_builder().runtime_objects(build.EXECUTABLE_ENTRY)}
    for shared in copied:
        shutil.copy(shared, tmp_path / "emu" / shared.name)
    # The children build for the same target as this process (the arm64 tox env sets one).
    env = {"METALTILE_CACHE": str(tmp_path), "PYTHONPATH": str(REPO),
           "PATH": os.environ.get("PATH", "/usr/bin:/bin")}
    if cross.ENV in os.environ:
        env[cross.ENV] = os.environ[cross.ENV]
    procs = [subprocess.Popen([sys.executable, "-c", CONCURRENT], env=env, cwd=REPO,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(2)]
    outs = [p.communicate(timeout=300) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    assert all(o[0].strip() == "ok" for o in outs)
    assert not list(tmp_path.glob("emu/*.tmp")), "temporary build files left behind"
    assert len(list(tmp_path.glob("emu/*.pch"))) == 2 and len(list(tmp_path.glob("emu/kernel-*")))
    assert len(list(tmp_path.glob("emu/runtime-*.o"))) == len(copied)  # copies used


def test_c_style_vector_cast_is_rejected_with_advice():
    src = r"""
kernel void cast(device uint4* y [[buffer(0)]], device const float4* x [[buffer(1)]]) {
  y[0] = (uint4)x[0];
}
"""
    with pytest.raises(MSLCompileError, match=r"C-style cast to uint4.*uint4\(x\)") as err:
        run(src, "cast", 1, 1, np.zeros(4, np.uint32), np.zeros(4, np.float32))
    assert err.value.line == line_of(src, "(uint4)x[0]") and err.value.kernel == "cast"


def test_vec_template_constructor_and_no_implicit_int_uint_vector_conversion():
    src = r"""
kernel void v(device float4* y [[buffer(0)]], device uint4* u [[buffer(1)]]) {
  y[0] = vec<float, 4>(half2(1.5h, 2.0h), 3, 4);
  int4 s = int4(-1, 2, 3, 4);
  u[0] = uint4(s);
}
"""
    y, u = np.zeros(4, np.float32), np.zeros(4, np.uint32)
    run(src, "v", 1, 1, y, u)
    np.testing.assert_array_equal(y, [1.5, 2, 3, 4])
    np.testing.assert_array_equal(u, np.array([-1, 2, 3, 4], np.int32).view(np.uint32))
    with pytest.raises(MSLCompileError) as err:
        run(src.replace("u[0] = uint4(s);", "u[0] = s;"), "v", 1, 1, y, u)
    assert err.value.line == line_of(src, "u[0] = uint4(s)")


@pytest.mark.parametrize("stage", ["MSL signatures", "MSL compile"])
def test_a_clang_past_its_time_limit_is_a_compile_error_naming_the_kernel(stage, monkeypatch,
                                                                          tmp_path):
    """A clang that runs too long (a huge source, runaway constexpr) is an MSLCompileError
    naming the kernel and the stage, never a raw subprocess.TimeoutExpired."""
    monkeypatch.setenv("METALTILE_CACHE", str(tmp_path))   # nothing of this kernel cached
    src = HEADER + f"""
kernel void slow_{stage[4:]}(device float* y [[buffer(0)]], uint i [[thread_position_in_grid]]) {{
  y[i] = 2.0f;
}}
"""
    kernel = f"slow_{stage[4:]}"
    real = build._run_compiler

    def limited(cmd, what, *args, **kw):   # the shared artifacts build normally
        if what == stage:
            monkeypatch.setattr(build, "COMPILE_TIMEOUT", 0.001)
        try:
            return real(cmd, what, *args, **kw)
        finally:
            monkeypatch.setattr(build, "COMPILE_TIMEOUT", 300.0)

    monkeypatch.setattr(build, "_run_compiler", limited)
    with pytest.raises(MSLCompileError, match=rf"kernel '{kernel}'.*clang did not finish the "
                                              rf"{stage} within 0.001 s"):
        emu.run_msl(src, kernel, grid=(1, 1, 1), threadgroup=(1, 1, 1),
                    buffers=[np.zeros(1, np.float32)])


def test_kernels_link_by_the_driver_planned_linker_and_by_the_driver_without_a_plan(
        monkeypatch, tmp_path):
    """The link runs the linker the clang driver plans (read once with -###) directly; where
    no plan can be read, the driver links. Both executables run the kernel alike."""
    src = HEADER + """
kernel void twice(device float* y [[buffer(0)]], uint i [[thread_position_in_grid]]) {
  y[i] = y[i] * 2.0f + 1.0f;
}
"""
    for planned in (True, False):
        monkeypatch.setenv("METALTILE_CACHE", str(tmp_path / str(planned)))
        builder = build.Builder()
        monkeypatch.setattr(build, "_default", builder)
        if not planned:
            monkeypatch.setattr(build, "_linker_plan", lambda *a: None)
        y = np.arange(8, dtype=np.float32)
        emu.run_msl(src, "twice", grid=(1, 1, 1), threadgroup=(8, 1, 1), buffers=[y])
        np.testing.assert_array_equal(y, np.arange(8, dtype=np.float32) * 2 + 1)
        plans = list(builder._linkers.values())
        assert plans and all((p is not None) == planned for p in plans), plans
        if planned:
            assert not plans[0][0].endswith(("clang++", "clang")), plans[0][0]
