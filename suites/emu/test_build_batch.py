"""Several libraries compiled in one clang run (`emu.build_ahead`, build.py
`Builder.build_batch`): each then runs from the cache exactly as if built alone -- the same
outputs, findings on the same MSL lines, the same counters -- even where the libraries
share kernel and helper names; a library that cannot share a unit, or a batch that does not
compile, leaves its libraries to their own builds, which report errors as always."""

from __future__ import annotations

import numpy as np
import pytest

from core.errors import MSLCompileError
from core.runtime import emu
from core.runtime.emu import build
from core.target import METAL
from emucase import HEADER, line_of

# The same kernel and helper names in two libraries, different meanings.
SCALE = """
float f(float v) { return v * 3.0f + 1.0f; }
kernel void k(device float* y [[buffer(0)]], device const float* x [[buffer(1)]],
              uint i [[thread_position_in_grid]]) {
  y[i] = f(x[i]);
}
"""
SHIFT = """
float f(float v) { return v - 2.0f; }
kernel void k(device float* y [[buffer(0)]], device const float* x [[buffer(1)]],
              uint i [[thread_position_in_grid]]) {
  y[i] = f(x[63 - i]);
}
"""
# A race on threadgroup memory (no barrier between the write and the neighbour's read) and
# a read past the end of a buffer: findings, located on MSL lines.
RACE = """
kernel void k(device float* y [[buffer(0)]], device const float* x [[buffer(1)]],
              uint t [[thread_position_in_threadgroup]]) {
  threadgroup float tile[64];
  tile[t] = x[t];
  y[t] = tile[(t + 1) % 64];
}
"""
BOUNDS = """
kernel void k(device float* y [[buffer(0)]], device const float* x [[buffer(1)]],
              uint i [[thread_position_in_grid]]) {
  y[i] = x[i + 8];
}
"""
LIBRARIES = {"scale": SCALE, "shift": SHIFT, "race": RACE, "bounds": BOUNDS}


def _source(body: str, tag: str) -> str:
    """The MSL of `body`, made distinct by `tag` (each library is built once per tag)."""
    return HEADER + f"constant int build_tag_{tag} = 1;\n" + body


def _run(source: str) -> tuple:
    x = np.arange(64, dtype=np.float32)
    y = np.zeros(64, np.float32)
    res = emu.run_msl(source, "k", grid=1, threadgroup=64, buffers=[y, x])
    findings = sorted((f.kind, f.line, f.address_space, f.buffer_or_offset)
                      for f in res.findings)
    return y.tobytes(), findings, res.stats


def _kernels() -> set:
    return set(build.cache_dir().glob("kernel-*.so"))


@pytest.fixture
def batching(emulator_cache_of_its_own):
    """Batched builds, counted in a cache of the test's own."""
    if not build.default_builder().loads_libraries() or not build._fast_linker():
        pytest.skip("batched builds need the launch host and lld or gold")


def test_batched_libraries_run_as_each_built_alone(batching):
    alone = {name: _run(_source(body, "alone")) for name, body in LIBRARIES.items()}
    sources = {name: _source(body, "batch") for name, body in LIBRARIES.items()}
    before = _kernels()
    assert emu.build_ahead([(s, None, METAL.math_mode) for s in sources.values()]) == 4
    built = _kernels() - before
    assert len(built) == 4
    together = {name: _run(source) for name, source in sources.items()}
    assert _kernels() - before == built, "a run built its library again"
    assert together == alone
    # what the four are: the checks found the race and the read past the end on their lines
    race_line = line_of("\n" + RACE,
                        "y[t] = tile[(t + 1) % 64]")
    assert ("race", race_line) in {f[:2] for f in alone["race"][1]}
    assert [f[:2] for f in alone["bounds"][1]] == [
        ("bounds", line_of("\n" + BOUNDS, "x[i + 8]"))]
    x = np.arange(64, dtype=np.float32)
    assert np.frombuffer(alone["scale"][0], np.float32).tolist() == (x * 3 + 1).tolist()
    assert np.frombuffer(alone["shift"][0], np.float32).tolist() == (x[::-1] - 2).tolist()


def test_a_library_with_macros_is_built_alone(batching):
    macro = _source("#define OFFSET 5.0f\n" + SCALE.replace("1.0f", "OFFSET"), "macro")
    plain = _source(SHIFT, "beside_macro")
    before = _kernels()
    # the macro's library is left out; one library left is no batch
    assert emu.build_ahead([(macro, None, METAL.math_mode), (plain, None, METAL.math_mode)]) \
        == 0
    assert _kernels() == before
    y, _, _ = _run(macro)
    x = np.arange(64, dtype=np.float32)
    assert np.frombuffer(y, np.float32).tolist() == (x * 3 + 5).tolist()


def test_a_batch_that_does_not_compile_leaves_each_library_to_its_own_build(batching):
    good = _source(SCALE, "good")
    broken = _source(SHIFT.replace("v - 2.0f", "v - undeclared_name"), "broken")
    before = _kernels()
    assert emu.build_ahead([(good, None, METAL.math_mode), (broken, None, METAL.math_mode)]) \
        == 0
    assert _kernels() == before
    x = np.arange(64, dtype=np.float32)
    assert np.frombuffer(_run(good)[0], np.float32).tolist() == (x * 3 + 1).tolist()
    with pytest.raises(MSLCompileError) as err:
        _run(broken)
    assert "undeclared_name" in str(err.value)
    assert err.value.line == line_of("\n" + SHIFT,
                                     "v - 2.0f")


def test_libraries_of_other_math_modes_are_batched_apart(batching):
    sources = [(_source(body, f"mode_{mode}"), None, mode)
               for mode in ("safe", "fast") for body in (SCALE, SHIFT)]
    before = _kernels()
    assert emu.build_ahead(sources) == 4
    assert len(_kernels() - before) == 4
    built = _kernels()
    for source, _, mode in sources:
        y = np.zeros(64, np.float32)
        emu.run_msl(source, "k", grid=1, threadgroup=64,
                    buffers=[y, np.arange(64, dtype=np.float32)], math_mode=mode)
    assert _kernels() == built


def test_without_the_launch_host_nothing_is_batched_and_each_library_builds_alone(
        emulator_cache_of_its_own, monkeypatch):
    # the executable path (another CPU, macOS): a library is linked with the runtime into
    # a program of its own, which a batch's object cannot be split into
    monkeypatch.setattr(build, "LAUNCH_HOST", False)
    sources = [_source(body, f"alone_{name}") for name, body in (("scale", SCALE),
                                                                  ("shift", SHIFT))]
    assert emu.build_ahead([(s, None, METAL.math_mode) for s in sources]) == 0
    assert not list(emulator_cache_of_its_own.glob("kernel-*"))
    x = np.arange(64, dtype=np.float32)
    assert np.frombuffer(_run(sources[0])[0], np.float32).tolist() == (x * 3 + 1).tolist()
    assert np.frombuffer(_run(sources[1])[0], np.float32).tolist() == (x[::-1] - 2).tolist()
    assert [p.suffix for p in emulator_cache_of_its_own.glob("kernel-*")] == [".bin"] * 2
