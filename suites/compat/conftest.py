"""Shared helpers of the core suites: build, run on the emulator, compare to the oracle.

    def test_x(run):                           # `run` is a fixture
        kernel = core.compile(func, out_idx=[-1])
        out = run(kernel, a, b)                # emulator, all checks; asserts no findings
        assert_close(out, oracle(a, b))
"""

from __future__ import annotations

import importlib

import pytest

from harness.diff import assert_close  # noqa: F401 - re-exported for the tests


def run_checked(kernel, *args, **kwargs):
    """Call `kernel` on the emulator with every check on; fail on any finding."""
    out = kernel(*args, backend="emu", **kwargs)
    findings = kernel.last_run.findings
    assert findings == [], f"emulator findings: {findings[:3]}"
    return out


@pytest.fixture
def run():
    return run_checked


@pytest.fixture(autouse=True)
def _isolated_cache(tmp_path_factory, monkeypatch):
    # Compiled programs go to a per-session folder; the emulator's builds stay shared.
    kcache = tmp_path_factory.getbasetemp() / "kcache"
    jit_module = importlib.import_module("core.jit")  # `core.jit` is the decorator
    monkeypatch.setattr(jit_module._Cache, "directory", staticmethod(lambda: kcache))
