"""Pass `flatten_simplify`: multi-dimensional buffers -> flat, then simplify.

Expects: lowered (and possibly vectorized) TIR.
Guarantees: every buffer access has one index (row-major flat offset); each global
parameter is accessed through a flat `DeclBuffer` view whose `data` is the parameter's
data pointer; on-chip buffers are allocated flat; index arithmetic is simplified.
Uses TVM's FlattenBuffer and StmtSimplify unchanged.
"""

from __future__ import annotations

import tvm
from tvm import tirx


def flatten_simplify(func: tirx.PrimFunc) -> tirx.PrimFunc:
    mod = tvm.IRModule({"main": func})
    mod = tvm.tirx.transform.FlattenBuffer()(mod)
    mod = tvm.tirx.transform.StmtSimplify()(mod)
    return mod["main"]
