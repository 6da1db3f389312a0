"""Shared setup of the TileLang-compatibility suites (as suites/core): kernels written in
TileLang's style, run on every backend (suites/conftest.py: the emulator with every
check, and MPS where available), compared with torch.

    def test_x(run):                         # assert_close: harness.check.compare
        out = run(core.compile(func, out_idx=[-1]), a)   # emulator, all checks, no findings
        assert_close(out, oracle(a))
"""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _isolated_cache(isolated_compile_cache):
    """Every test here compiles into this session's cache (suites/conftest.py)."""
