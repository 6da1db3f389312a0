"""Shared setup of the core suites: build, run on every backend (the `run` and `backend`
fixtures of suites/conftest.py), compare to the oracle.

    def test_x(run):                           # `run` is a fixture
        kernel = core.compile(func, out_idx=[-1])
        out = run(kernel, a, b)                # emulator: all checks, no findings; and MPS
        assert_close(out, oracle(a, b))
"""

from __future__ import annotations

import importlib

import pytest

from harness.diff import assert_close  # noqa: F401 - re-exported for the tests


@pytest.fixture(autouse=True)
def _isolated_cache(session_compile_cache, monkeypatch):
    # Compiled programs go to a per-session folder; the emulator's builds stay shared.
    kcache = session_compile_cache
    jit_module = importlib.import_module("core.jit")  # `core.jit` is the decorator
    monkeypatch.setattr(jit_module._Cache, "directory", staticmethod(lambda: kcache))
