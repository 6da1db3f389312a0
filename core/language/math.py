"""Scalar expressions of the DSL: math, casts, selects, limits.

Thin wrappers over TIR's expression constructors with TileLang's argument order
(`T.cast(value, dtype)`), accepting Python numbers where TileLang does.
"""

from __future__ import annotations

import builtins

import tvm
from tvm.script import tirx as _T

from core.errors import KernelDefinitionError
from core.language.buffers import var_value
from core.language.dtypes import dtype_name
from core.target import DTYPES


def _expr(x, dtype="float32"):
    x = var_value(x)
    if isinstance(x, tvm.ir.Expr):
        return x
    return tvm.tirx.const(x, "bool" if isinstance(x, bool) else
                          "int32" if isinstance(x, int) else dtype)


def _float_math(fn, name):
    def wrapped(x):
        x = _expr(x)
        if not str(x.ty.dtype).startswith(("float", "bfloat")):
            raise KernelDefinitionError(
                f"T.{name} needs a floating-point argument, got {x.ty.dtype}; "
                f"use T.cast(x, 'float32') first", construct=f"T.{name}")
        return fn(x)
    wrapped.__name__ = name
    return wrapped


exp = _float_math(tvm.tirx.exp, "exp")
exp2 = _float_math(tvm.tirx.exp2, "exp2")
log = _float_math(tvm.tirx.log, "log")
log2 = _float_math(tvm.tirx.log2, "log2")
sqrt = _float_math(tvm.tirx.sqrt, "sqrt")
rsqrt = _float_math(tvm.tirx.rsqrt, "rsqrt")
tanh = _float_math(tvm.tirx.tanh, "tanh")
sin = _float_math(tvm.tirx.sin, "sin")
cos = _float_math(tvm.tirx.cos, "cos")
floor = _float_math(tvm.tirx.floor, "floor")
ceil = _float_math(tvm.tirx.ceil, "ceil")
sigmoid = _float_math(tvm.tirx.sigmoid, "sigmoid")
log10 = _float_math(tvm.tirx.log10, "log10")
round = _float_math(tvm.tirx.round, "round")  # noqa: A001 - TileLang's name (to nearest even)
trunc = _float_math(tvm.tirx.trunc, "trunc")
isnan = _float_math(tvm.tirx.isnan, "isnan")
isinf = _float_math(tvm.tirx.isinf, "isinf")


def pow(x, y):  # noqa: A001 - TileLang's name
    x = _float_math(lambda v: v, "pow")(x)
    return tvm.tirx.pow(x, _expr(y, str(x.ty.dtype)))


def fmod(x, y):
    x = _float_math(lambda v: v, "fmod")(x)
    return tvm.tirx.fmod(x, _expr(y, str(x.ty.dtype)))


def clamp(x, lo, hi):
    """min(max(x, lo), hi) (TileLang's T.clamp)."""
    x = _expr(x)
    dt = str(x.ty.dtype)
    return _T.min(_T.max(x, _expr(lo, dt)), _expr(hi, dt))


def likely(cond):
    """A branch hint; the condition itself."""
    return _expr(cond, "bool")


def _integer_op(fn, name, arity):
    """TileLang's named bit operations (`T.bitwise_and`, `T.shift_right`, ...): the same
    TIR nodes as the operators `& | ^ ~ << >>`, with integer operands checked here."""
    def wrapped(*args):
        if len(args) != arity:
            raise KernelDefinitionError(f"T.{name} takes {arity} argument(s), got "
                                        f"{len(args)}", construct=f"T.{name}")
        exprs = [_expr(a) for a in args]
        dtype = next((str(x.ty.dtype) for x in exprs if not isinstance(x, tvm.tirx.IntImm)),
                     str(exprs[0].ty.dtype))
        exprs = [tvm.tirx.IntImm(dtype, int(x.value)) if isinstance(x, tvm.tirx.IntImm)
                 and str(x.ty.dtype) != dtype and not dtype.startswith(("float", "bfloat"))
                 else x for x in exprs]
        for x in exprs:
            if not str(x.ty.dtype).partition("x")[0].startswith(("int", "uint")):
                raise KernelDefinitionError(
                    f"T.{name} needs integer operands, got {x.ty.dtype}; bit operations "
                    "are defined on int8..int64 and uint8..uint64", construct=f"T.{name}")
        return fn(*exprs)
    wrapped.__name__ = name
    return wrapped


bitwise_and = _integer_op(tvm.tirx.bitwise_and, "bitwise_and", 2)
bitwise_or = _integer_op(tvm.tirx.bitwise_or, "bitwise_or", 2)
bitwise_xor = _integer_op(tvm.tirx.bitwise_xor, "bitwise_xor", 2)
bitwise_not = _integer_op(tvm.tirx.bitwise_not, "bitwise_not", 1)
shift_left = _integer_op(tvm.tirx.shift_left, "shift_left", 2)
shift_right = _integer_op(tvm.tirx.shift_right, "shift_right", 2)


def reinterpret(value, dtype):
    """The bits of `value` read as `dtype` of the same size (MSL `as_type`); TileLang's
    argument order. `dtype="handle"` makes only the (unused) value of TileLang's thread
    all-reduce scope, `T.attr(..., "reduce_scope", T.reinterpret(T.uint64(0), "handle"))`."""
    if str(dtype) == "handle":
        from core.language.allreduce import ScopeHandle  # noqa: PLC0415 - no import cycle
        return ScopeHandle(value)
    value = _expr(value)
    dt = dtype_name(dtype, construct="T.reinterpret")
    src = str(value.ty.dtype)
    if DTYPES[dt].bits != DTYPES[src].bits:
        raise KernelDefinitionError(f"T.reinterpret from {src} ({DTYPES[src].bits} bits) to "
                                    f"{dt} ({DTYPES[dt].bits} bits): the sizes must match",
                                    construct="T.reinterpret")
    return tvm.tirx.reinterpret(dt, value)


def abs(x):  # noqa: A001 - TileLang's name
    return tvm.tirx.abs(_expr(x))


def max(a, b):  # noqa: A001
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return builtins.max(a, b)
    return _T.max(_expr(a), _expr(b))


def min(a, b):  # noqa: A001
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return builtins.min(a, b)
    return _T.min(_expr(a), _expr(b))


def cast(value, dtype):
    """`value` converted to `dtype` (TileLang's argument order)."""
    return tvm.tirx.Cast(dtype_name(dtype, construct="T.cast"), _expr(value))


def if_then_else(cond, then_value, else_value):
    return tvm.tirx.if_then_else(_expr(cond, "bool"), _expr(then_value), _expr(else_value))


def infinity(dtype="float32"):
    """+inf of a float dtype (bfloat16 included); for an integer dtype its largest value
    (numeric_limits<T>::max(), as TileLang)."""
    dt = dtype_name(dtype, construct="T.infinity")
    if dt.startswith(("float", "bfloat")):
        return tvm.tirx.FloatImm(dt, float("inf"))
    if dt == "bool":
        raise KernelDefinitionError("bool has no infinity; allowed: float and integer dtypes",
                                    construct="T.infinity")
    return tvm.tirx.max_value(dt)


def max_value(dtype):
    return tvm.tirx.max_value(dtype_name(dtype, construct="T.max_value"))


def min_value(dtype):
    return tvm.tirx.min_value(dtype_name(dtype, construct="T.min_value"))


def ceildiv(a, b):
    """ceil(a / b) for non-negative integers; Python ints fold at parse time."""
    if isinstance(a, int) and isinstance(b, int):
        return -(-a // b)
    return tvm.tirx.floordiv(_expr(a) + _expr(b) - 1, _expr(b))


cdiv = ceildiv  # TileLang's T.cdiv


def floordiv(a, b):
    return tvm.tirx.floordiv(_expr(a), _expr(b))


def floormod(a, b):
    return tvm.tirx.floormod(_expr(a), _expr(b))
