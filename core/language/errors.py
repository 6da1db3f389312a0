"""Compile-time error classes, as the DSL's modules and passes import them.

`KernelDefinitionError` (a kernel the DSL or the verifier rejects) and `LoweringError` (a
well-formed kernel whose plan the lowering does not support) are defined in core/errors.py
beside the project's other errors; this module re-exports them.
"""

from core.errors import KernelDefinitionError, LoweringError

__all__ = ["KernelDefinitionError", "LoweringError"]
