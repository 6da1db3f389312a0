"""`T.view` / `T.reshape`: TileLang's buffer views (a new buffer over the same data).

    T.reshape(src, shape)               the elements of `src`, row-major, under `shape`
    T.view(src, shape=None, dtype=None) the same, optionally as another dtype of the same
                                        width (the bits reinterpreted: as_type in MSL)

As in TileLang the view holds exactly the bytes of `src` (a KernelDefinitionError names
both sizes otherwise; symbolic shapes must be provably equal) and no data moves. The view
is a DeclBuffer over `src`'s data; pass resolve_views (core/transform/resolve_views.py)
turns every access of a threadgroup or per-thread view, and of a device view of another
dtype, into the access of `src` it stands for, so the barrier planner sees one buffer.

Refused, with the reason: views of fragments (metaltile lays each fragment out over the
threads itself; a view would need the same layout), and dtypes of another width (MSL
cannot address a threadgroup or thread array through a pointer of another element size
here; on device memory the parameters' element types are fixed by the launch binding).
"""

from __future__ import annotations

import tvm
from tvm import tirx
from tvm.sym import Analyzer
from tvm.tirx.script.builder import ir as _ir

from core.errors import KernelDefinitionError
from core.ir.ops import FRAGMENT, buffer_dtype
from core.ir.stmt import as_int
from core.language.dtypes import dtype_name
from core.target import bits


def _dims(shape, construct):
    dims = (shape,) if isinstance(shape, int) or isinstance(shape, tvm.ir.Expr) else \
        tuple(shape)
    if not dims:
        raise KernelDefinitionError("the shape needs at least one dimension",
                                    construct=construct)
    for d in dims:
        if isinstance(d, bool) or not isinstance(d, (int, tvm.ir.Expr)) or \
                isinstance(d, int) and d <= 0:
            raise KernelDefinitionError(
                f"shape {dims}: every extent must be a positive int or an integer "
                "expression", construct=construct)
    return dims


def _size(dims):
    n = tirx.const(1, "int64")
    for d in dims:
        n = n * (tirx.const(d, "int64") if isinstance(d, int) else tirx.Cast("int64", d))
    return n


def _view(src, shape, dtype, construct):
    if not tirx.is_buffer_var(src):
        raise KernelDefinitionError(f"{src!r} is not a buffer; allowed: a T.Tensor "
                                    "parameter, T.alloc_shared or T.alloc_local buffer",
                                    construct=construct)
    scope = src.ty.storage_scope
    if scope == FRAGMENT:
        raise KernelDefinitionError(
            f"'{src.name}' is a fragment: metaltile lays each fragment out over the threads "
            "itself, so a second shape over its registers has no layout; view a "
            "T.alloc_shared copy, or allocate the fragment in the shape you need",
            construct=construct)
    old = buffer_dtype(src)
    new = old if dtype is None else dtype_name(dtype, construct=construct)
    if bits(new) != bits(old):
        raise KernelDefinitionError(
            f"dtype {new} ({bits(new)} bits) over '{src.name}' of {old} ({bits(old)} bits): "
            "a view may change the dtype only to one of the same width (the bits "
            "reinterpreted)", construct=construct)
    dims = tuple(src.ty.shape) if shape is None else _dims(shape, construct)
    analyzer = Analyzer()
    want, have = (analyzer.simplify(_size(d)) for d in (dims, tuple(src.ty.shape)))
    if not analyzer.can_prove_equal(want, have):
        shown = [as_int(n) if as_int(n) is not None else n for n in (want, have)]
        raise KernelDefinitionError(
            f"shape {tuple(dims)} holds {shown[0]} elements but '{src.name}' "
            f"{tuple(src.ty.shape)} holds {shown[1]}; a view has exactly its source's "
            "elements", construct=construct)
    return _ir.decl_buffer(dims, new, data=tirx.buffer_data(src), scope=scope)


def view(src, shape=None, dtype=None):
    """A buffer over `src`'s data with `shape` (default: src's) and `dtype` (default:
    src's; another dtype of the same width reinterprets the bits)."""
    return _view(src, shape, dtype, "T.view")


def reshape(src, shape):
    """A buffer over `src`'s data with `shape` (the same number of elements)."""
    return _view(src, shape, None, "T.reshape")
