"""Buffer specs of `harness emu`: one text per `[[buffer(i)]]`, made into a NumPy array.

Syntax: `DTYPE:SHAPE[:FILL]`

    DTYPE  float32|f32  float16|half|f16  bfloat16|bf16  int64|i64  int32|i32  int16|i16
           int8|i8  uint32|u32  uint16|u16  uint8|u8  bool
    SHAPE  positive extents joined by `x`: `1024`, `64x256`, `2x3x4`
    FILL   zeros (default) | ones | arange (0, 1, 2, ... in row-major order; bool: 0,1,0,1)
           | random (seeded: standard normal for floats, integers in [-8, 8) signed,
             [0, 16) unsigned, 0/1 for bool)
           | value=V (every element V; ints take 0x.. too, floats take inf/nan)
           | values=V1,V2,... (exactly one value per element: args structs, constant scalars)
           | PATH.npy (an array of exactly SHAPE; converted to DTYPE)

Examples: `f32:1024:random`, `f16:64x256:ones`, `u32:1:value=1000` (a `constant uint& n`),
`i32:2:values=7,-3`, `bf16:8x8:saved/x.npy`.

`parse_spec` checks the syntax and the values (a `value=300` for uint8 is an error) without
reading files; `BufferSpec.make(seed, index)` builds the array, reading `.npy` files then.
Every problem is a `BufferSpecError` whose message names the spec and what is allowed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import ml_dtypes
import numpy as np

DTYPES: dict[str, np.dtype] = {
    "float32": np.dtype(np.float32),
    "float16": np.dtype(np.float16),
    "bfloat16": np.dtype(ml_dtypes.bfloat16),
    "int64": np.dtype(np.int64),
    "int32": np.dtype(np.int32),
    "int16": np.dtype(np.int16),
    "int8": np.dtype(np.int8),
    "uint32": np.dtype(np.uint32),
    "uint16": np.dtype(np.uint16),
    "uint8": np.dtype(np.uint8),
    "bool": np.dtype(np.bool_),
}
ALIASES = {
    "f32": "float32", "f16": "float16", "half": "float16", "bf16": "bfloat16",
    "i64": "int64", "i32": "int32", "i16": "int16", "i8": "int8",
    "u32": "uint32", "u16": "uint16", "u8": "uint8",
}
FILLS = ("zeros", "ones", "arange", "random", "value=V", "values=V1,V2,...", "PATH.npy")
SYNTAX = "DTYPE:SHAPE[:FILL]"


class BufferSpecError(ValueError):
    """A buffer spec that cannot be made into an array; the message says why."""


@dataclass(frozen=True)
class BufferSpec:
    text: str  # as the user wrote it
    dtype_name: str  # canonical name, a key of DTYPES
    shape: tuple[int, ...]
    fill: str  # "zeros" | "ones" | "arange" | "random" | "value" | "values" | "npy"
    values: tuple = ()  # the parsed V of value=V, or V1, V2, ... of values=
    path: str | None = None  # the .npy file of fill "npy"

    @property
    def dtype(self) -> np.dtype:
        return DTYPES[self.dtype_name]

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    def make(self, seed: int = 0, index: int = 0) -> np.ndarray:
        """A new C-contiguous array for this spec; `random` draws from a generator seeded
        by (seed, index), so buffers of one launch differ and runs repeat."""
        dtype, shape = self.dtype, self.shape
        if self.fill == "zeros":
            return np.zeros(shape, dtype)
        if self.fill == "ones":
            return np.ones(shape, dtype)
        if self.fill == "arange":
            steps = np.arange(self.size)
            return (steps % 2 if dtype == np.bool_ else steps).astype(dtype).reshape(shape)
        if self.fill == "random":
            return _random(np.random.default_rng([seed, index]), dtype, shape)
        if self.fill == "value":
            return np.full(shape, self.values[0], dtype)
        if self.fill == "values":
            return np.array(self.values, dtype).reshape(shape)
        return self._load()

    def _load(self) -> np.ndarray:
        try:
            loaded = np.load(self.path, allow_pickle=False)
        except (OSError, ValueError) as err:
            raise BufferSpecError(f"buffer '{self.text}': cannot read {self.path}: {err}") from None
        if loaded.shape != self.shape:
            raise BufferSpecError(f"buffer '{self.text}': {self.path} holds shape "
                                  f"{_shape_text(loaded.shape)}, the spec says "
                                  f"{_shape_text(self.shape)}")
        if loaded.dtype == np.dtype("V2") and self.dtype_name == "bfloat16":
            loaded = loaded.view(self.dtype)  # np.save writes bfloat16 as raw 2-byte voids
        try:
            return np.ascontiguousarray(loaded.astype(self.dtype))
        except (TypeError, ValueError) as err:
            raise BufferSpecError(f"buffer '{self.text}': {self.path} holds {loaded.dtype}, "
                                  f"which does not convert to {self.dtype_name}: {err}") from None


def parse_spec(text: str) -> BufferSpec:
    """The `BufferSpec` of `DTYPE:SHAPE[:FILL]`, or BufferSpecError."""
    parts = text.split(":", 2)
    if len(parts) < 2 or not parts[0] or not parts[1]:
        raise BufferSpecError(f"buffer '{text}': expected {SYNTAX}, e.g. f32:1024:random")
    dtype_name = _dtype_name(text, parts[0])
    shape = _shape(text, parts[1])
    fill = parts[2] if len(parts) == 3 else "zeros"
    spec = {"text": text, "dtype_name": dtype_name, "shape": shape}
    if fill in ("zeros", "ones", "arange", "random"):
        return BufferSpec(fill=fill, **spec)
    if fill.startswith("value="):
        return BufferSpec(fill="value", values=(_scalar(text, dtype_name, fill[6:]),), **spec)
    if fill.startswith("values="):
        items = fill[7:].split(",")
        values = tuple(_scalar(text, dtype_name, item) for item in items)
        size = math.prod(shape)
        if len(values) != size:
            raise BufferSpecError(f"buffer '{text}': values= gives {len(values)} values for "
                                  f"shape {_shape_text(shape)} ({size} elements)")
        return BufferSpec(fill="values", values=values, **spec)
    if fill.endswith(".npy"):
        return BufferSpec(fill="npy", path=fill, **spec)
    raise BufferSpecError(f"buffer '{text}': unknown fill '{fill}'; "
                          f"expected one of {', '.join(FILLS)}")


def _dtype_name(text: str, word: str) -> str:
    name = ALIASES.get(word.lower(), word.lower())
    if name not in DTYPES:
        known = ", ".join(list(DTYPES) + list(ALIASES))
        raise BufferSpecError(f"buffer '{text}': unknown dtype '{word}'; known: {known}")
    return name


def _shape(text: str, word: str) -> tuple[int, ...]:
    extents = word.lower().split("x")
    if not all(e.isdigit() and int(e) > 0 for e in extents):
        raise BufferSpecError(f"buffer '{text}': bad shape '{word}'; expected positive "
                              "integers joined by 'x', e.g. 1024 or 64x256")
    return tuple(int(e) for e in extents)


def _scalar(text: str, dtype_name: str, word: str):
    """`word` as a Python value of `dtype_name`: ints must fit exactly, floats must parse."""
    dtype, word = DTYPES[dtype_name], word.strip()
    if dtype == np.bool_:
        if word.lower() not in ("0", "1", "true", "false"):
            raise BufferSpecError(f"buffer '{text}': '{word}' is not true/false/0/1 (bool)")
        return word.lower() in ("1", "true")
    if dtype.kind not in "iu":
        try:
            return float(word)
        except ValueError:
            raise BufferSpecError(f"buffer '{text}': '{word}' is not a number "
                                  f"({dtype_name})") from None
    try:
        value = int(word, 16 if word.lower().lstrip("+-").startswith("0x") else 10)
    except ValueError:
        raise BufferSpecError(f"buffer '{text}': '{word}' is not an integer "
                              f"({dtype_name})") from None
    info = np.iinfo(dtype)
    if not info.min <= value <= info.max:
        raise BufferSpecError(f"buffer '{text}': {value} does not fit {dtype_name} "
                              f"[{info.min}, {info.max}]")
    return value


def _random(rng: np.random.Generator, dtype: np.dtype, shape: tuple[int, ...]) -> np.ndarray:
    if dtype == np.bool_:
        return rng.integers(0, 2, shape).astype(dtype)
    if dtype.kind == "i":
        return rng.integers(-8, 8, shape).astype(dtype)
    if dtype.kind == "u":
        return rng.integers(0, 16, shape).astype(dtype)
    return rng.standard_normal(shape, dtype=np.float32).astype(dtype)


def _shape_text(shape: tuple[int, ...]) -> str:
    return "x".join(map(str, shape)) or "scalar"
