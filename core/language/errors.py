"""Compile-time error classes of the compiler core.

`KernelDefinitionError` is raised for a kernel the DSL or the verifier rejects (wrong
shape, scope, dtype, construct outside its allowed context); `LoweringError` for a
well-formed kernel whose plan the lowering does not support. Both are raised before any
code runs and name the kernel, the construct and what is allowed.
"""

from __future__ import annotations

from core.errors import MetaltileError


class KernelDefinitionError(MetaltileError):
    """An ill-formed kernel: the message says what is wrong and what is allowed."""


class LoweringError(MetaltileError):
    """A well-formed kernel whose plan the lowering does not support (yet)."""
