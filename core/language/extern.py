"""User MSL in a kernel: `T.import_source(source)` and `T.call_extern(dtype, name, *args)`.

    T.import_source(src)              `src` (MSL: functions, constants, types) is placed in
                                      the library once, after metaltile's own helpers and
                                      before the kernels (each distinct source once)
    T.call_extern(dtype, "f", *args)  the call `f(args...)`, of result dtype `dtype`
                                      ("handle" or None: a call made for its effect)

TileLang's pair for hand-written device code (its import_source puts C++ into the CUDA
module). The source is MSL and must compile with the kernels: the emulator translates it
like the kernels' own text, so functions that touch memory take address-space-qualified
pointers (`device float*`, `threadgroup float*`). metaltile sees a call as opaque: its
arguments are evaluated; a pointer argument made by T.access_ptr tells the barrier planner
what the function does through it (its access mask, "r"/"w"/"rw", and `extent=` the
elements from the one it points at; without an extent, any element of the buffer). Other
pointers (T.address_of) count as a read of the one element.
"""

from __future__ import annotations

import re

import tvm
from tvm import tirx
from tvm.tirx.script.builder import ir as _ir

from core.errors import KernelDefinitionError
from core.ir import ops
from core.language.dtypes import dtype_name
from core.language.kernel import _current

_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(::[A-Za-z_][A-Za-z0-9_]*)*")


def import_source(source=None):
    """Place the MSL `source` in the library (once), before the kernels."""
    construct = "T.import_source"
    if source is None:
        return None
    if not isinstance(source, str):
        raise KernelDefinitionError(f"source={source!r} must be a str of MSL",
                                    construct=construct)
    _current(construct)
    _ir.evaluate(ops.call("tl.import_source", tvm.ir.StringImm(source), dtype="int32"))
    return None


def call_extern(dtype, func_name, *args):
    """The call `func_name(args...)` of a function of the library (T.import_source or
    metal_stdlib), with result dtype `dtype`."""
    construct = "T.call_extern"
    if not isinstance(func_name, str) or not _IDENT.fullmatch(func_name):
        raise KernelDefinitionError(f"function name {func_name!r} must be an MSL identifier",
                                    construct=construct)
    dt = "handle" if dtype in (None, "handle") else dtype_name(dtype, construct=construct)
    values = []
    for a in args:
        if isinstance(a, bool):
            a = tirx.const(a, "bool")
        elif isinstance(a, int):
            a = tirx.const(a, "int32")
        elif isinstance(a, float):
            a = tirx.const(a, "float32")
        elif not isinstance(a, tvm.ir.Expr):
            raise KernelDefinitionError(f"argument {a!r} is not a value (an expression or "
                                        "a number)", construct=construct)
        values.append(a)
    return tirx.call_extern(dt, func_name, *values)
