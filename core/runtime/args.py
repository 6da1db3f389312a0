"""The args struct: packing a kernel's scalars into one constant buffer.

Layout (must match the printer's `struct alignas(8) <kernel>_args`, core/codegen/msl.py):
one 8-byte slot per scalar, in the kernel's scalar order, each value stored with its
declared dtype at the slot's start. Values that do not fit their dtype are an error,
never silently narrowed: integers out of range, floats that would overflow to inf.
"""

from __future__ import annotations

import numpy as np

from core.errors import LaunchError

NUMPY = {"int32": np.int32, "int64": np.int64, "float32": np.float32,
         "float16": np.float16, "bool": np.bool_, "uint32": np.uint32}
INT_RANGE = {"int32": (-2**31, 2**31 - 1), "int64": (-2**63, 2**63 - 1),
             "uint32": (0, 2**32 - 1)}
FLOAT_DTYPES = ("float32", "float16")


def pack(struct, values: dict, *, kernel: str) -> np.ndarray:
    """uint8 array of `struct.size` bytes holding `values[field.name]` per field."""
    out = np.zeros(struct.size, dtype=np.uint8)
    for f in struct.fields:
        v = values[f.name]
        if f.dtype in INT_RANGE:
            if isinstance(v, float) and not float(v).is_integer():
                raise LaunchError(f"value {v} is not an integer", kernel=kernel,
                                  construct=f"scalar '{f.name}' ({f.dtype})")
            lo, hi = INT_RANGE[f.dtype]
            if not lo <= int(v) <= hi:
                raise LaunchError(f"value {v} does not fit {f.dtype}", kernel=kernel,
                                  construct=f"scalar '{f.name}'")
            v = int(v)
        elif f.dtype in FLOAT_DTYPES:
            v = _float_in_range(v, f, kernel)
        raw = np.array(v, dtype=NUMPY[f.dtype]).tobytes()
        out[f.offset:f.offset + len(raw)] = np.frombuffer(raw, dtype=np.uint8)
    return out


def _float_in_range(v, field, kernel) -> float:
    """`v` as a float that the field's dtype holds without overflowing to inf (a finite
    value may round; inf and nan pass as given)."""
    v = float(v)
    with np.errstate(over="ignore"):
        narrowed = np.array(v, dtype=NUMPY[field.dtype])
    if np.isfinite(v) and not np.isfinite(narrowed):
        top = float(np.finfo(NUMPY[field.dtype]).max)
        raise LaunchError(f"value {v} does not fit {field.dtype} (largest finite value "
                          f"{top:g}); it would become inf", kernel=kernel,
                          construct=f"scalar '{field.name}'")
    return v
