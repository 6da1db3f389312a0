"""Shared setup of the TileLang-compatibility suites (as suites/core): kernels written in
TileLang's style, run on every backend (suites/conftest.py: the emulator with every
check, and MPS where available), compared with torch.

    def test_x(run):                         # assert_close: harness.diff
        out = run(core.compile(func, out_idx=[-1]), a)   # emulator, all checks, no findings
        assert_close(out, oracle(a))
"""

from __future__ import annotations

import importlib

import pytest


@pytest.fixture(autouse=True)
def _isolated_cache(session_compile_cache, monkeypatch):
    kcache = session_compile_cache
    jit_module = importlib.import_module("core.jit")  # `core.jit` is the decorator
    monkeypatch.setattr(jit_module._Cache, "directory", staticmethod(lambda: kcache))
