"""Pass `legalize`: turn parse-time markers into plain TIR.

Expects: a freshly parsed PrimFunc, where each `T.Parallel(e0, .., ek)` appears as an
`Evaluate(tl.parallel_scope(e0, .., ek))` marker directly before its loop nest.
Guarantees: the markers are gone and the k+1 outermost loops of each such nest have
`ForKind.PARALLEL`; nothing else changes.
"""

from __future__ import annotations

from tvm import tirx

from core.ir import ops
from core.ir.stmt import rewrite, seq


def _mark_parallel(loop, depth):
    if depth == 0:
        return loop
    body = _mark_parallel(loop.body, depth - 1)
    return tirx.For(loop.loop_var, loop.min, loop.extent, tirx.ForKind.PARALLEL, body,
                    loop.thread_binding, loop.annotations, loop.step)


def _is_marker(stmt):
    return isinstance(stmt, tirx.Evaluate) and ops.is_tile_call(stmt.value, "tl.parallel_scope")


def _legalize_seq(stmt):
    if not isinstance(stmt, tirx.SeqStmt):
        return stmt
    out, pending = [], None
    for s in stmt.seq:
        if _is_marker(s):
            pending = len(s.value.args)
            continue
        if pending is not None and isinstance(s, tirx.For):
            s = _mark_parallel(s, pending)
        pending = None
        out.append(s)
    return seq(out)


def legalize(func: tirx.PrimFunc) -> tirx.PrimFunc:
    return func.with_body(rewrite(func.body, _legalize_seq))
