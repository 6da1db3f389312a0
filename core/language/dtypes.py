"""dtype names of the DSL.

The DSL accepts a dtype as a string ("float16"), a TVMScript dtype object (`T.float16`) or
a torch dtype; `dtype_name` turns each into the canonical string. `SUPPORTED` is the set of
SPEC.md section 1 (float32, float16, bfloat16, int32, int64, int8, uint8, bool).
"""

from __future__ import annotations

from core.language.errors import KernelDefinitionError

SUPPORTED = ("float32", "float16", "bfloat16", "int32", "int64", "int8", "uint8", "bool",
             "uint32")
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
    return {"float32": 32, "float16": 16, "bfloat16": 16, "int32": 32, "int64": 64,
            "int8": 8, "uint8": 8, "bool": 8, "uint32": 32}[dtype]
