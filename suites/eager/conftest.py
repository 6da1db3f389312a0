"""Shared setup of the eager-style suites: compiled programs go to a per-session folder
(as in suites/core), and `run_eager` calls an eager kernel function on the emulator with
every check on, failing on any finding.

    out = run_eager(f, a, b, block_M=32)     # f is a @core.jit eager function
    out = run(kernel, a, b)                  # a compiled kernel (f.compile(...)): the
                                             # root `run` fixture (suites/conftest.py)
"""

from __future__ import annotations

import pytest


def run_eager(f, *args, **kwargs):
    out = f(*args, backend="emu", **kwargs)
    findings = f.last_run.findings
    assert findings == [], f"emulator findings: {findings[:3]}"
    return out


@pytest.fixture(autouse=True)
def _isolated_cache(isolated_compile_cache):
    """Every test here compiles into this session's cache (suites/conftest.py)."""
