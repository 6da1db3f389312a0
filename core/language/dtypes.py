"""dtype names of the DSL.

The DSL accepts a dtype as a string ("float16"), a TVMScript dtype object (`T.float16`) or
a torch dtype; `dtype_name` turns each into the canonical string. `SUPPORTED` is the set of
the DSL's element types (docs/architecture.md, "The DSL"): float32, float16, bfloat16, bool
and every integer width, signed and unsigned (the narrow and unsigned ones carry packed
data: fp8/fp4 weights, bit fields).
"""

from __future__ import annotations

from core.language.errors import KernelDefinitionError
from core.target import DTYPES

SUPPORTED = ("float32", "float16", "bfloat16", "int32", "int64", "int8", "uint8", "bool",
             "int16", "uint16", "uint32", "uint64")
SCALAR_PARAM_DTYPES = ("int32", "int64", "float32", "float16", "bool")

_ALIASES = {"float": "float32", "half": "float16", "bf16": "bfloat16", "int": "int32",
            "f32": "float32", "f16": "float16", "i32": "int32", "i64": "int64"}


def dtype_name(dtype, *, construct: str = "dtype") -> str:
    """Canonical dtype string for any accepted spelling; clear error otherwise."""
    if hasattr(dtype, "_dtype_str"):            # TVMScript DtypeConstructor (T.float16)
        name = dtype._dtype_str
    elif type(dtype).__module__ == "torch":     # torch.float16
        name = str(dtype).replace("torch.", "")
    else:
        name = str(dtype)
    name = _ALIASES.get(name, name)
    if name not in SUPPORTED:
        raise KernelDefinitionError(
            f"dtype '{name}' is not supported; allowed: {', '.join(SUPPORTED)}",
            construct=construct)
    return name


def bits(dtype: str) -> int:
    """Storage size of one element in bits (bool is one byte, as in torch and MSL)."""
    return DTYPES[dtype].bits
