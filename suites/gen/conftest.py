"""Shared setup of the generated-kernel suites: compiled programs go to a per-session
folder (the emulator's clang builds stay in the shared cache, so reruns are fast), as in
suites/core."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _isolated_cache(isolated_compile_cache):
    """Every test here compiles into this session's cache (suites/conftest.py)."""
