"""The harness's layering at run time, in a fresh interpreter: the regression store does not
load the fuzzer, and the modules that only describe cases (the case runner's vocabulary, the
bench registry) load neither torch nor the compiler. The packages' directions and the
absence of import circles, read from the source, are suites/unit/test_import_graph.py."""

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _loaded_after(module: str) -> set:
    code = f"import sys, {module}; print(' '.join(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                         text=True, check=True, env={"PYTHONPATH": str(ROOT), "PATH": ""})
    return set(out.stdout.split())


def test_regressions_do_not_import_the_fuzzer():
    loaded = _loaded_after("harness.check.regressions")
    fuzzer = [m for m in loaded if m == "harness.fuzz" or m.startswith("harness.fuzz.")]
    assert not fuzzer, fuzzer


@pytest.mark.parametrize("module", ["harness.check.case", "harness.check.regressions",
                                    "harness.bench.cases", "harness.check.workers"])
def test_descriptions_import_no_torch_or_compiler(module):
    heavy = {"torch", "tvm", "core.jit"} & _loaded_after(module)
    assert not heavy, sorted(heavy)

