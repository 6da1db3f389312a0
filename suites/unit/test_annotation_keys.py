"""The passes' annotation keys are spelled once (core/ir/annotations.py), and the
compile-time error classes live in core/errors.py, which the DSL's namespace names too
(`T.KernelDefinitionError`)."""

import re
from pathlib import Path

import core.errors
import core.language as T
from core.ir import annotations

CORE = Path(core.errors.__file__).parent


def _keys():
    return {name: value for name, value in vars(annotations).items()
            if name.isupper() and isinstance(value, str)}


def test_every_key_is_spelled_only_in_the_annotations_module():
    keys = _keys()
    assert {"tl.vector_lanes", "tl.layout_vec", "tl.readonly"} <= set(keys.values())
    for path in sorted(CORE.rglob("*.py")):
        if path == Path(annotations.__file__):
            continue
        text = path.read_text()
        for value in keys.values():
            assert not re.search(rf"[\"']{re.escape(value)}[\"']", text), \
                f"{path.relative_to(CORE.parent)} spells the annotation key {value!r}; " \
                "import it from core/ir/annotations.py"


def test_every_key_is_documented_with_writer_and_reader():
    doc = annotations.__doc__
    for value in _keys().values():
        assert value in doc, f"{value} has no writer/reader line in core/ir/annotations.py"


def test_compile_errors_are_defined_beside_the_others():
    for name in ("KernelDefinitionError", "LoweringError"):
        cls = getattr(core.errors, name)
        assert issubclass(cls, core.errors.MetaltileError)
        assert getattr(T, name) is cls
        assert cls.__module__ == "core.errors"
