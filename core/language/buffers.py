"""Buffers of the DSL: parameters (`T.Tensor`), on-chip allocations and symbolic dims.

Storage scopes (what the rest of the compiler sees in `buffer.ty.storage_scope`):
    "global"          kernel parameters, device memory
    "shared"          T.alloc_shared: threadgroup memory, one copy per threadgroup
    "local.fragment"  T.alloc_fragment: a tile spread over the threads (core/ir/layout.py);
                      named FRAGMENT in core/ir/ops.py, where the passes read it
    "local"           T.alloc_local / T.alloc_var: private to each thread
    "metal.simdgroup" T.alloc_local(..., scope="metal.simdgroup"): 8x8 simdgroup matrices,
                      one element per matrix (core/language/simdgroup.py)
    "global"          also T.alloc_global: a device workspace, made a parameter by pass
                      global_workspaces
"""

from __future__ import annotations

from numbers import Integral

import tvm
from tvm.script import tirx as _T
from tvm.ir._overload_prim_expr import EqualOp, NotEqualOp
from tvm.tirx.script.builder import ir as _ir

from core.errors import KernelDefinitionError
from core.ir.ops import FRAGMENT
from core.language.dtypes import dtype_name


def _shape(shape, construct):
    dims = (shape,) if isinstance(shape, Integral) or tvm.ir.is_prim_expr(shape) else tuple(shape)
    if not dims:
        raise KernelDefinitionError("shape must have at least one dimension", construct=construct)
    for d in dims:
        if isinstance(d, Integral) and d <= 0:
            raise KernelDefinitionError(
                f"shape {tuple(dims)} has a non-positive extent {d}", construct=construct)
    return dims


class _TensorAnnotation:
    """`T.Tensor(shape, dtype)` and TileLang's subscript form `T.Tensor[(M, N), dtype]`
    (also `T.Tensor[M, N]` for float32): a parameter annotation for a device tensor of
    `shape` (ints or symbolic dims)."""

    def __init__(self, name: str):
        self.name = name

    def __call__(self, shape, dtype="float32", **kwargs):
        return _T.Buffer(_shape(shape, self.name), dtype_name(dtype, construct=self.name),
                         **kwargs)

    def __getitem__(self, key):
        if isinstance(key, tuple) and len(key) == 2 and not _is_extent(key[1]):
            return self(key[0], key[1])
        return self(key)

    def __repr__(self):
        return self.name


def _is_extent(x) -> bool:
    return isinstance(x, Integral) or tvm.ir.is_prim_expr(x)


Tensor = _TensorAnnotation("T.Tensor")
Buffer = _TensorAnnotation("T.Buffer")


def _alloc(shape, dtype, scope, construct):
    if shape is None:
        raise KernelDefinitionError("a shape is required", construct=construct)
    dims = _shape(shape, construct)
    for d in dims:
        if not isinstance(d, Integral) and not isinstance(d, tvm.tirx.IntImm):
            raise KernelDefinitionError(
                f"shape {dims} must be compile-time constants for on-chip buffers",
                construct=construct)
    return _ir.alloc_buffer(dims, dtype_name(dtype, construct=construct), scope=scope)


def alloc_shared(shape, dtype="float32", scope="shared"):
    """Threadgroup memory tile, shared by all threads of the threadgroup."""
    return _alloc(shape, dtype, "shared", "T.alloc_shared")


def alloc_fragment(shape, dtype="float32", scope=FRAGMENT):
    """Register tile spread over the threads of the threadgroup (layout: core/ir/layout.py)."""
    return _alloc(shape, dtype, FRAGMENT, "T.alloc_fragment")


def alloc_global(shape, dtype="float32", scope="global"):
    """A device-memory workspace (TileLang's T.alloc_global): the runtime allocates it for
    each call (uninitialized) and does not return it; every threadgroup and every kernel
    of the program sees the same buffer (pass global_workspaces makes it a parameter)."""
    construct = "T.alloc_global"
    if scope != "global":
        raise KernelDefinitionError(f"scope={scope!r}: a global workspace is in device "
                                    "memory; allowed: 'global'", construct=construct)
    return _alloc(shape, dtype, "global", construct)


def alloc_local(shape, dtype="float32", scope="local"):
    """Per-thread array; with scope "metal.simdgroup", 8x8 simdgroup matrices of 64
    elements each (core/language/simdgroup.py)."""
    if scope == "metal.simdgroup":
        from core.language.simdgroup import alloc_matrices
        return alloc_matrices(shape, dtype)
    if scope not in ("local", "local.var"):
        raise KernelDefinitionError(f"scope={scope!r}; allowed: 'local', 'metal.simdgroup'",
                                    construct="T.alloc_local")
    return _alloc(shape, dtype, "local", "T.alloc_local")


_EQ_OPS = (EqualOp, NotEqualOp)


def var_value(x):
    """The element load a `T.alloc_var` stands for (TVMScript wraps it so that `x = ...`
    assigns), the TIR comparison `a == b` / `a != b` stands for (TVM returns a Python
    wrapper, `EqualOp`, that Python's `bool` can read); any other value unchanged."""
    if isinstance(x, _EQ_OPS):
        return x.asobject()
    scalar = getattr(x, "scalar", None)
    return scalar if isinstance(scalar, tvm.ir.TensorLoad) else x


def alloc_var(dtype="float32", init=None, scope="local"):
    """Per-thread scalar variable; `x = ...` assigns, `x` reads."""
    scalar = _ir.local_scalar(dtype=dtype_name(dtype, construct="T.alloc_var"))
    if init is not None:
        _ir.buffer_store(scalar.scalar.source, init, [0])
    return scalar


def dynamic(name: str, dtype="int32"):
    """A symbolic dimension (`T.dynamic` / `T.symbolic`), usable in tensor shapes."""
    dt = dtype_name(dtype, construct=f"symbolic dim '{name}'")
    if dt not in ("int32", "int64"):
        raise KernelDefinitionError(
            f"symbolic dim '{name}' has dtype {dt}; allowed: int32, int64",
            construct="T.dynamic")
    return tvm.tirx.Var(name, dt)


symbolic = dynamic
