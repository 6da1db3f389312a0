"""Pass `layout_inference`: choose the thread layout of every fragment.

Expects: a verified PrimFunc (fragments are accessed whole by tile ops or exactly by
T.Parallel loop variables over their full shape).
Guarantees: each fragment's AllocBuffer carries the annotation `tl.layout_vec` (an int),
the run width of its `FragmentLayout` (core/ir/layout.py) for the kernel's thread count.
The lowering of tile ops and T.Parallel loops reads only this annotation, so every
access to a fragment agrees on which thread and slot holds each element.
"""

from __future__ import annotations

from tvm import tirx

from core.ir import ops
from core.ir.kernel import map_kernels
from core.ir.layout import FragmentLayout
from core.ir.stmt import rewrite
from core.language.buffers import FRAGMENT

LAYOUT_VEC = "tl.layout_vec"


def _annotate(nest):
    threads = nest.num_threads

    def visit(s):
        if isinstance(s, tirx.AllocBuffer) and ops.buffer_scope(s.buffer) == FRAGMENT:
            layout = FragmentLayout.for_tile(s.buffer.ty.shape, threads)
            ann = dict(s.annotations or {})
            ann[LAYOUT_VEC] = tirx.IntImm("int32", layout.vec)
            return tirx.AllocBuffer(s.buffer, ann)
        return s

    return nest.wrap(rewrite(nest.body, visit))


def layout_inference(func: tirx.PrimFunc) -> tirx.PrimFunc:
    return map_kernels(func, _annotate)


def fragment_layout(alloc: tirx.AllocBuffer, threads: int) -> FragmentLayout:
    """The layout recorded on a fragment's AllocBuffer by this pass."""
    vec = int(alloc.annotations[LAYOUT_VEC])
    return FragmentLayout(tuple(int(d) for d in alloc.buffer.ty.shape), threads, vec)
