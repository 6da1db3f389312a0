"""Shared setup of the generated-kernel suites: compiled programs go to a per-session
folder (the emulator's clang builds stay in the shared cache, so reruns are fast), as in
suites/core."""

from __future__ import annotations

import importlib

import pytest


@pytest.fixture(autouse=True)
def _isolated_cache(session_compile_cache, monkeypatch):
    kcache = session_compile_cache
    jit_module = importlib.import_module("core.jit")  # `core.jit` is the decorator
    monkeypatch.setattr(jit_module._Cache, "directory", staticmethod(lambda: kcache))
