"""dtypes of the DSL: TileLang's dtype objects and the canonical dtype names.

`T.float16`, `T.int32`, `T.uint32`, `T.float` ... are `dtype` objects, as in TileLang: a
`str` subclass (tvm_ffi's dtype) that compares and hashes equal to its canonical name
(`T.float == "float32"`), so it works wherever a string dtype works (`getattr(torch,
str(dt))`, `"int" in T.int32`), plus

    dt.bits, dt.bytes, dt.lanes   storage size of one element
    dt.as_torch()                 the torch dtype
    dt(value) / dt()              a TIR literal / a scalar parameter (`n: T.int32`)

`T.dtype(x)` builds one from a string, a torch dtype or a Python type. `dtype_name(x)` turns
any accepted spelling into the canonical string and rejects dtypes the Metal target cannot
run (`core.target.SUPPORTED`: the types of its table `DTYPES`).
"""

from __future__ import annotations

import builtins

import tvm_ffi
from tvm.script import tirx as _script

from core.errors import KernelDefinitionError
from core.target import DTYPES, SUPPORTED

# C-style and short spellings (TileLang's T.float, T.half, ... and common abbreviations)
_ALIASES = {"float": "float32", "half": "float16", "double": "float64", "bf16": "bfloat16",
            "int": "int32", "long": "int64", "short": "int16", "uint": "uint32",
            "ulong": "uint64", "ushort": "uint16", "char": "int8", "uchar": "uint8",
            "f32": "float32", "f16": "float16", "i32": "int32", "i64": "int64"}
_PYTHON_TYPES = {builtins.bool: "bool", builtins.int: "int32", builtins.float: "float32"}
# dtypes TileLang names that Metal has no type for (the reason, for the error)
_NO_METAL_TYPE = {"float64": "Metal has no 64-bit float type",
                  "float8_e4m3fn": "Metal has no 8-bit float type",
                  "float8_e5m2": "Metal has no 8-bit float type",
                  "float8_e4m3": "Metal has no 8-bit float type",
                  "float8_e4m3fnuz": "Metal has no 8-bit float type",
                  "float8_e5m2fnuz": "Metal has no 8-bit float type",
                  "float8_e8m0fnu": "Metal has no 8-bit float type",
                  "float4_e2m1fn": "Metal has no 4-bit float type",
                  "int4": "Metal has no 4-bit integer type",
                  "tfloat32": "Metal has no tf32 type"}


def _canonical(value) -> str:
    if isinstance(value, str):
        return _ALIASES.get(str.__str__(value), str.__str__(value))
    if isinstance(value, type) and value in _PYTHON_TYPES:
        return _PYTHON_TYPES[value]
    if hasattr(value, "_dtype_str"):              # TVMScript's DtypeConstructor
        return value._dtype_str
    if type(value).__module__ == "torch":         # torch.float16
        return str(value).replace("torch.", "")
    if type(value).__module__.startswith("numpy"):
        import numpy as np
        return str(np.dtype(value))
    return _ALIASES.get(str(value), str(value))


class dtype(tvm_ffi.dtype):  # noqa: N801 - TileLang's name
    """A TileLang dtype object: equal to (and hashing as) its canonical name."""

    __slots__ = ()

    def __new__(cls, value):
        if isinstance(value, dtype):
            return value
        return super().__new__(cls, _canonical(value))

    @property
    def bytes(self) -> int:
        return self.itemsize

    def as_torch(self):
        """The torch dtype of this element type."""
        import torch
        found = getattr(torch, str(self), None)
        if not isinstance(found, torch.dtype):
            raise KernelDefinitionError(f"dtype '{self}' has no torch equivalent",
                                        construct=f"T.{self}.as_torch()")
        return found

    def _constructor(self):
        ctor = getattr(_script, str(self), None)
        if ctor is None:
            raise KernelDefinitionError(
                f"TVMScript has no scalar constructor for '{self}'; allowed: "
                f"{', '.join(SUPPORTED)}", construct=f"T.{self}(...)")
        return ctor

    def __call__(self, expr=None, *args, is_size_var=False):
        """`T.float32(1.5)`: a literal; `T.int32()` (what a `n: T.int32` parameter
        annotation calls): a scalar variable."""
        if args:
            raise KernelDefinitionError(
                f"T.{self} takes one value, got {1 + len(args)}; vector literals are not "
                "supported", construct=f"T.{self}(...)")
        return self._constructor()(expr)

    def __repr__(self) -> str:
        return f"T.{self}"

    def __reduce__(self):
        return (dtype, (str(self),))


def dtype_name(value, *, construct: str = "dtype") -> str:
    """Canonical dtype string for any accepted spelling; clear error otherwise."""
    name = _canonical(value)
    if name not in SUPPORTED:
        why = _NO_METAL_TYPE.get(name, "")
        raise KernelDefinitionError(
            f"dtype '{name}' is not supported{': ' + why if why else ''}; allowed: "
            f"{', '.join(SUPPORTED)}", construct=construct)
    return name


def _known_to_tvm(name: str) -> bool:
    try:
        tvm_ffi.dtype(name)
    except ValueError:
        return False
    return True


# TileLang's dtype names: every scalar type of the target's table, the C-style aliases and
# the types Metal lacks (which exist as objects, as in TileLang, and are rejected where used)
NAMES = {n: v for n, v in {**{n: n for n in DTYPES}, **_ALIASES,
                           **{n: n for n in _NO_METAL_TYPE}}.items()
         if n not in ("f32", "f16", "i32", "i64", "bf16", "char", "uchar", "ushort")
         and _known_to_tvm(v)}
