"""The core's layers are acyclic (docs/architecture.md, "Layers"): read from every module's
imports (Python's `ast`, imports inside functions included, so a lazy import does not hide
an edge), not from what happens to be imported at run time.

- core/ir, core/transform and core/codegen import nothing from core/language: the facts
  they share with the DSL (scope names, annotation keys, dtype facts, the swizzle
  attribute, the capacity check) live in core/ir or core/target.py, below both;
- core/language imports nothing from the compiler below it (core/jit.py, core/transform,
  core/codegen, core/runtime): core.jit drives the DSL, not the other way round;
- no import circle anywhere in core/ or harness/ (the emulator's Python side included);
- the harness's packages depend one way: gen/ -> check/ -> fuzz/ and bench/, never each
  other, -> cli.py (docs/architecture.md, "The harness");
- compile-time errors are imported from core/errors.py; core.language.errors is gone.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TREES = ("core", "harness", "oracles", "suites")


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> dict:
    return {_module_name(p): p for tree in TREES for p in sorted((ROOT / tree).rglob("*.py"))}


MODULES = _modules()


def imports(module: str) -> set:
    """The modules `module` imports anywhere in its text: `import a.b` names a.b, `from a
    import b` names a.b when that is a module and a otherwise; relative imports resolved."""
    path = MODULES[module]
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                parts = parts[:len(parts) - (node.level - 1)]
                base = ".".join(parts + ([node.module] if node.module else []))
            for a in node.names:
                sub = f"{base}.{a.name}"
                found.add(sub if sub in MODULES else base)
    return found


def _under(name: str, package: str) -> bool:
    return name == package or name.startswith(package + ".")


def _modules_under(package: str) -> list:
    return [m for m in MODULES if _under(m, package)]


def _offenders(importers: str, forbidden: tuple) -> list:
    return sorted(f"{m} imports {i}" for m in _modules_under(importers) for i in imports(m)
                  if any(_under(i, f) for f in forbidden))


@pytest.mark.parametrize("layer", ["core.ir", "core.transform", "core.codegen"])
def test_the_layers_below_the_dsl_do_not_import_it(layer):
    assert not _offenders(layer, ("core.language",))


def test_the_dsl_does_not_import_the_compiler_below_it():
    below = ("core.jit", "core.transform", "core.codegen", "core.runtime")
    assert not _offenders("core.language", below)


def _cycles(modules: list) -> list:
    """The strongly connected components of more than one module (Tarjan) among
    `modules`, over the edges between them; a submodule's import of its own package is
    not an edge (every submodule initializes its parents)."""
    members = set(modules)
    edges = {m: sorted(i for i in imports(m) if i in members and i != m
                       and not _under(m, i)) for m in modules}
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append({c: [e for e in edges[c] if e in component]
                              for c in sorted(component)})

    for m in modules:
        if m not in index:
            visit(m)
    return found


@pytest.mark.parametrize("package", ["core", "core.runtime.emu", "harness"])
def test_no_import_circle(package):
    assert _modules_under(package)
    assert not _cycles(_modules_under(package))


# package -> the harness packages it may not import
HARNESS_FORBIDDEN = {
    "harness.gen": ("harness.check", "harness.fuzz", "harness.bench", "harness.cli"),
    "harness.check": ("harness.fuzz", "harness.bench", "harness.cli"),
    "harness.fuzz": ("harness.bench", "harness.cli"),
    "harness.bench": ("harness.fuzz", "harness.cli"),
}


@pytest.mark.parametrize("package", sorted(HARNESS_FORBIDDEN))
def test_each_harness_package_imports_only_the_layers_below_it(package):
    assert not _offenders(package, HARNESS_FORBIDDEN[package])


def test_the_cycle_finder_sees_a_lazy_import(tmp_path, monkeypatch):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "a.py").write_text("from . import b\n")
    (tmp_path / "pkg" / "b.py").write_text("def f():\n    from .a import g\n")
    this = sys.modules[__name__]
    monkeypatch.setattr(this, "ROOT", tmp_path)
    monkeypatch.setattr(this, "MODULES",
                        {_module_name(p): p for p in (tmp_path / "pkg").rglob("*.py")})
    assert _cycles(["pkg.a", "pkg.b"]) == [{"pkg.a": ["pkg.b"], "pkg.b": ["pkg.a"]}]


def test_compile_errors_come_from_core_errors_only():
    assert "core.language.errors" not in MODULES
    assert not sorted(m for m in MODULES if "core.language.errors" in imports(m))
