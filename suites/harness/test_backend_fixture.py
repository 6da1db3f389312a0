"""The suites' `backend` fixture (suites/conftest.py), checked in a child pytest run with
MPS reported available and unavailable: tests using it run once per available backend,
`@pytest.mark.backend("emu")` narrows them, and `mps`-marked tests are skipped only where
MPS is missing. (The fixture's "mps" runs themselves need a Mac.)"""

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

CONFTEST = """
import core.runtime.backends as backends
backends.mps_available = lambda: {available}
from suites.conftest import pytest_collection_modifyitems, pytest_generate_tests  # noqa
"""

TESTS = """
import pytest

def test_any(backend):
    assert backend in ("emu", "mps")

@pytest.mark.backend("emu")
def test_emu_only(backend):
    assert backend == "emu"

@pytest.mark.mps
def test_needs_mps():
    pass
"""


def _child(tmp_path, available: bool) -> str:
    (tmp_path / "conftest.py").write_text(CONFTEST.format(available=available))
    (tmp_path / "test_child.py").write_text(TESTS)
    (tmp_path / "pytest.ini").write_text("[pytest]\nmarkers =\n    mps\n    backend\n")
    out = subprocess.run([sys.executable, "-m", "pytest", str(tmp_path), "-v", "-rs",
                          "-p", "no:cacheprovider", "--rootdir", str(tmp_path),
                          "-c", str(tmp_path / "pytest.ini")],
                         cwd=ROOT, capture_output=True, text=True,
                         env={"PYTHONPATH": str(ROOT), "PATH": ""})
    assert out.returncode == 0, out.stdout + out.stderr
    return out.stdout


@pytest.mark.parametrize("available", [True, False], ids=["mps", "no-mps"])
def test_backend_parametrization(tmp_path, available):
    out = _child(tmp_path, available)
    assert "test_any[emu] PASSED" in out
    assert ("test_any[mps] PASSED" in out) == available
    assert "test_emu_only[emu] PASSED" in out and "test_emu_only[mps]" not in out
    if available:
        assert "test_needs_mps PASSED" in out
    else:
        assert "test_needs_mps SKIPPED" in out and "needs macOS with MPS" in out
