"""The emulator's toolchain lookup (core/runtime/emu/toolchain.py)."""

import os
import stat

import pytest

from core.errors import ToolchainError
from core.runtime.emu import toolchain


@pytest.fixture
def fresh_cache():
    toolchain._find.cache_clear()
    yield
    toolchain._find.cache_clear()


def test_found_toolchain_is_new_enough_clang(fresh_cache):
    found = toolchain.find_toolchain()
    assert os.access(found.cxx, os.X_OK)
    assert found.version[0] >= (toolchain.MIN_APPLE if found.apple else toolchain.MIN_LLVM)
    assert found.symbolizer is None or os.access(found.symbolizer, os.X_OK)
    assert toolchain.find_toolchain() is found  # cached per process


def _fake_compiler(tmp_path, version_line):
    path = tmp_path / "fake-clang++"
    path.write_text(f"#!/bin/sh\necho '{version_line}'\n")
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return str(path)


def test_override_that_is_too_old_says_so(fresh_cache, tmp_path, monkeypatch):
    monkeypatch.setenv("METALTILE_CXX", _fake_compiler(tmp_path, "clang version 14.0.6"))
    with pytest.raises(ToolchainError, match="clang 14.0, older than the 17"):
        toolchain.find_toolchain()


def test_override_that_is_not_clang_says_so(fresh_cache, tmp_path, monkeypatch):
    monkeypatch.setenv("METALTILE_CXX", _fake_compiler(tmp_path, "g++ (Debian 12.2.0) 12.2.0"))
    with pytest.raises(ToolchainError, match="is not clang"):
        toolchain.find_toolchain()


def test_missing_override_is_not_replaced_by_a_search(fresh_cache, monkeypatch):
    monkeypatch.setenv("METALTILE_CXX", "no-such-clang++")
    with pytest.raises(ToolchainError, match="METALTILE_CXX='no-such-clang\\+\\+'"):
        toolchain.ensure_toolchain(install=True)  # an explicit choice is never "fixed"


def test_nothing_on_path_names_the_install_command(fresh_cache, tmp_path, monkeypatch):
    monkeypatch.delenv("METALTILE_CXX", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(ToolchainError) as info:
        toolchain.ensure_toolchain(install=False)
    message = str(info.value)
    assert "no clang++ on PATH" in message
    assert "METALTILE_CXX" in message
