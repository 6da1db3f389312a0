"""The harness's layering. In a fresh interpreter: the regression store does not depend on
the fuzzer, and the modules that only describe cases (the case runner's vocabulary, the
bench registry) import neither torch nor the compiler. From the source: gen/ -> check/ ->
fuzz/ and bench/ (never each other) -> cli.py, and no import circle anywhere in harness/."""

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


# ---- the packages' directions, read from the source (imports inside functions too) -------

HARNESS = ROOT / "harness"
# package -> the harness packages it may not import (docs/architecture.md, "The harness")
FORBIDDEN = {
    "harness.gen": ("harness.check", "harness.fuzz", "harness.bench", "harness.cli"),
    "harness.check": ("harness.fuzz", "harness.bench", "harness.cli"),
    "harness.fuzz": ("harness.bench", "harness.cli"),
    "harness.bench": ("harness.fuzz", "harness.cli"),
}


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path) -> set[str]:
    """Every module `path` imports, wherever in the file (absolute names)."""
    import ast

    package = _module_name(path) if path.name == "__init__.py" else \
        _module_name(path).rpartition(".")[0]
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                base = f"{anchor}.{base}" if base else anchor
            names.add(base)
            names.update(f"{base}.{a.name}" for a in node.names)   # `from pkg import mod`
    return names


def _graph() -> dict[str, set[str]]:
    modules = {_module_name(p): p for p in HARNESS.rglob("*.py")}
    return {name: {i for i in _imports(path) if i in modules and i != name}
            for name, path in modules.items()}


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_each_package_imports_only_the_layers_below_it(package):
    bad = sorted(f"{m} imports {i}" for m, deps in _graph().items()
                 if m == package or m.startswith(package + ".")
                 for i in deps if any(i == f or i.startswith(f + ".") for f in FORBIDDEN[package]))
    assert not bad, bad


def test_no_import_circle_in_the_harness():
    graph = _graph()
    state: dict[str, int] = {}
    circle: list[str] = []

    def visit(m: str, path: list[str]) -> bool:
        state[m] = 1
        for d in sorted(graph[m]):
            if state.get(d) == 1:
                circle.extend(path[path.index(d):] + [m, d] if d in path else [m, d])
                return True
            if d not in state and visit(d, path + [m]):
                return True
        state[m] = 2
        return False

    for m in sorted(graph):
        if m not in state and visit(m, []):
            break
    assert not circle, " -> ".join(circle)
