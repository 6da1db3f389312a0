"""`T.loop_break()`: TileLang's `break` out of the innermost enclosing loop.

Emits `tl.loop_break` (core/ir/ops.py), printed as the MSL statement `break;`. Allowed in
serial loops (T.serial, range, T.unroll, T.Pipelined) and while loops, usually under an
`if`; refused outside a loop and directly in a T.Parallel nest, whose iterations the
lowering spreads over threads (a break there has no per-iteration meaning). A loop that
breaks must need no threadgroup barrier inside it: threads may leave it at different
iterations, and a barrier not every thread reaches is undefined in Metal, so the printer
refuses that form with a LoweringError (exchange the data before or after the loop).
"""

from __future__ import annotations

from tvm.script.ir_builder import IRBuilder
from tvm.tirx.script.builder import frame
from tvm.tirx.script.builder import ir as _ir

from core.errors import KernelDefinitionError
from core.ir import ops
from core.language.kernel import _current


def _is_parallel_marker(stmt) -> bool:
    value = getattr(stmt, "value", None)
    return value is not None and ops.is_tile_call_any(value, "tl.parallel_scope")


def loop_break():
    """Leave the innermost enclosing serial or while loop (MSL `break;`)."""
    construct = "T.loop_break"
    _current(construct)
    frames = list(IRBuilder.current().frames)
    loops = [i for i, f in enumerate(frames)
             if isinstance(f, (frame.ForFrame, frame.WhileFrame))]
    if not loops:
        raise KernelDefinitionError("there is no loop to leave; T.loop_break() goes inside "
                                    "a serial or while loop", construct=construct)
    inner = loops[-1]
    parent_stmts = list(frames[inner - 1].stmts) if inner > 0 else []
    if isinstance(frames[inner], frame.ForFrame) and parent_stmts and \
            _is_parallel_marker(parent_stmts[-1]):
        raise KernelDefinitionError(
            "the innermost loop is a T.Parallel nest, whose iterations are spread over the "
            "threads; break out of a serial loop (T.serial / range) instead",
            construct=construct)
    _ir.evaluate(ops.call("tl.loop_break", dtype="int32"))
