"""Layout annotations: `T.annotate_layout({buffer: layout})`, `T.Layout(shape, fn)`,
`T.make_swizzled_layout(buffer)` and `T.Fragment(...)` (TileLang's names).

What they mean on Metal: TileLang uses them to place a buffer's elements in memory: bank-
conflict swizzles of shared tiles (`make_swizzled_layout`) and reorderings of a device
buffer that its atomics and a later kernel both go through (flash attention's dQ). Every
access in a kernel is written against the logical indices and goes through the layout, so
a layout changes where elements sit, not any value a kernel computes. metaltile keeps
every threadgroup and device buffer row-major: an annotation is checked (a buffer, a
layout of its shape, a bijection of its elements) and then has no effect, which gives the
same results whenever every kernel touching the buffer is written against its logical
indices (TileLang's uses). Fragment layouts (`T.Fragment`, or any layout on a fragment) are
chosen by metaltile's layout inference (core/ir/layout.py) and are rejected with a
KernelDefinitionError naming the buffer.
"""

from __future__ import annotations

import inspect
from itertools import product
from math import prod

from tvm_ffi import structural_equal
from tvm.tirx import is_buffer_var

from core.errors import KernelDefinitionError
from core.ir import ops
from core.ir.ops import FRAGMENT
from core.ir.stmt import as_int

MAX_CHECKED = 1 << 16       # elements a layout's bijection is enumerated for


class Layout:
    """A map from a buffer's logical indices to physical ones: `forward(*idx) -> idx'`."""

    def __init__(self, shape, forward_fn=None, *, name="T.Layout"):
        self.shape = tuple(shape)
        self.forward_fn = forward_fn or (lambda *idx: idx)
        self.name = name

    def check(self, buf, construct):
        shape = tuple(as_int(d) for d in buf.ty.shape)   # None: a symbolic dim
        if len(self.shape) != len(shape) or not all(
                _same_dim(a, b) for a, b in zip(self.shape, buf.ty.shape)):
            raise KernelDefinitionError(
                f"{self.name} of shape {_dims(self.shape)} annotates buffer '{buf.name}' of "
                f"shape {_dims(buf.ty.shape)}; the shapes must match", construct=construct)
        if None in shape or prod(shape) > MAX_CHECKED:
            return
        size = prod(shape)
        try:
            arity = len(inspect.signature(self.forward_fn).parameters)
        except (TypeError, ValueError):
            arity = len(shape)
        if arity != len(shape) and not any(
                p.kind == p.VAR_POSITIONAL
                for p in inspect.signature(self.forward_fn).parameters.values()):
            raise KernelDefinitionError(
                f"{self.name}'s function takes {arity} indices; buffer '{buf.name}' has rank "
                f"{len(shape)}", construct=construct)
        images = set()
        for idx in product(*(range(e) for e in shape)):
            out = self.forward_fn(*idx)
            images.add(tuple(int(as_int(v) if not isinstance(v, int) else v)
                             for v in (out if isinstance(out, (list, tuple)) else (out,))))
        if len(images) != size:
            raise KernelDefinitionError(
                f"{self.name} maps the {size} elements of '{buf.name}' onto {len(images)} "
                "places; a layout must be a bijection", construct=construct)


def _same_dim(a, b) -> bool:
    """Equal extents: the same constant, or the same symbolic expression (two different
    symbolic dims may differ at run time, so they do not match)."""
    ia, ib = as_int(a), as_int(b)
    if ia is not None or ib is not None:
        return ia == ib
    return structural_equal(a, b)


def _dims(shape) -> str:
    return "(" + ", ".join(str(d) for d in shape) + ")"


def make_swizzled_layout(buffer, k_major=True, allow_pad=True):
    """A bank-conflict swizzle of a shared tile: a permutation of its elements."""
    if not is_buffer_var(buffer):
        raise KernelDefinitionError(f"{buffer!r} is not a buffer",
                                    construct="T.make_swizzled_layout")
    return Layout(buffer.ty.shape, name="make_swizzled_layout")


class Fragment(Layout):
    """TileLang's explicit fragment layout; metaltile chooses fragment layouts itself."""

    def __init__(self, shape=None, forward_fn=None, forward_thread_fn=None, replicate=1,
                 forward_index_fn=None, **_kwargs):
        super().__init__(shape or (), forward_fn, name="T.Fragment")


def annotate_layout(layout_map, allow_reannotation=False, allow_buffer_region=False):
    """Check each {buffer: layout}; threadgroup and device buffers stay row-major."""
    construct = "T.annotate_layout"
    if not isinstance(layout_map, dict):
        raise KernelDefinitionError(f"takes a dict {{buffer: layout}}, got "
                                    f"{type(layout_map).__name__}", construct=construct)
    for buf, layout in layout_map.items():
        if not is_buffer_var(buf):
            raise KernelDefinitionError(f"key {buf!r} is not a buffer", construct=construct)
        if ops.buffer_scope(buf) in (FRAGMENT, "local"):
            raise KernelDefinitionError(
                f"buffer '{buf.name}' is a {ops.buffer_scope(buf)} buffer: metaltile lays "
                "fragments out itself (core/ir/layout.py) and takes no fragment layout; "
                "drop the annotation", construct=construct)
        if isinstance(layout, Fragment) or not isinstance(layout, Layout):
            raise KernelDefinitionError(
                f"buffer '{buf.name}': {type(layout).__name__} is not a T.Layout or "
                "make_swizzled_layout (T.Fragment describes fragments, which metaltile lays "
                "out itself)", construct=construct)
        layout.check(buf, construct)
