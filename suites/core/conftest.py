"""Shared setup of the core suites: build, run on every backend (the `run` and `backend`
fixtures of suites/conftest.py), compare to the oracle.

    def test_x(run):                           # `run` is a fixture
        kernel = core.compile(func, out_idx=[-1])
        out = run(kernel, a, b)                # emulator: all checks, no findings; and MPS
        assert_close(out, oracle(a, b))
"""

from __future__ import annotations

import pytest

from harness.check.compare import assert_close  # noqa: F401 - re-exported for the tests


@pytest.fixture(autouse=True)
def _isolated_cache(isolated_compile_cache):
    """Every test here compiles into this session's cache (suites/conftest.py)."""
