"""Simdgroup uniformity: is a condition the same on every lane of each simdgroup?

A simdgroup matrix operation (simdgroup_load/store/multiply_accumulate, a filled matrix) is
collective: the 32 lanes of a simdgroup hold one 8x8 matrix between them, and MSL defines
the operation only when every lane executes it. Under an `if` whose condition some lanes of
a simdgroup take and others do not, it is undefined. The verifier (core/transform/verify.py)
asks `simdgroup_split` about every condition (and every loop bound) around such an
operation.

Lanes are the threadgroup's linear thread index (tx + ty * X + tz * X * Y) in groups of
`METAL.simd_width`, as Metal numbers them. The answer comes from the lanes themselves: each
thread index is put into the expression and the result simplified; a simdgroup whose lanes
all give the same expression is uniform for it (`tx // 32 == bx` is), one whose lanes give
different constants is split (`tx < 16`: a definite answer with the lanes on each side),
and one whose lanes give different non-constant expressions (`A[tx] > 0`) cannot be proven
uniform, which is refused too: the operation must be right on every input.
"""

from __future__ import annotations

from dataclasses import dataclass

import tvm_ffi
from tvm import tirx
from tvm.sym import Analyzer

from core.ir.stmt import free_vars, substitute
from core.target import METAL


@dataclass(frozen=True)
class Split:
    """Why an expression is not uniform over one simdgroup: two lanes that differ."""
    simdgroup: int
    proven: bool                 # the lanes evaluate to different constants
    lanes: tuple                 # (lane, value) of lane 0 and of the first lane differing
    lanes_true: tuple = ()       # a proven bool condition: the lanes that take it
    lanes_false: tuple = ()

    def describe(self) -> str:
        if not self.proven:
            return (f"it depends on the lane in a way that cannot be proven the same on all "
                    f"lanes of simdgroup {self.simdgroup}")
        if self.lanes_true or self.lanes_false:
            return (f"lanes {_ranges(self.lanes_true)} of simdgroup {self.simdgroup} take "
                    f"it and lanes {_ranges(self.lanes_false)} do not")
        (a, va), (b, vb) = self.lanes
        return f"lane {a} of simdgroup {self.simdgroup} computes {va} and lane {b} {vb}"


def simdgroup_split(expr, nest) -> Split | None:
    """The first simdgroup `expr` is not uniform over (None: uniform on every one)."""
    thread_vars = {v.__chandle__() for v in nest.thread_vars}
    if not any(v.__chandle__() in thread_vars for v in free_vars(expr)):
        return None
    x, y, _ = nest.threads
    tags = {str(a.node.thread_tag): a.node.var for a in nest.attrs}
    analyzer = Analyzer()
    total, width = nest.num_threads, METAL.simd_width
    for group in range(-(-total // width)):
        seen = []
        for t in range(group * width, min(total, (group + 1) * width)):
            point = {"threadIdx.x": t % x, "threadIdx.y": t // x % y,
                     "threadIdx.z": t // (x * y)}
            vmap = {var: tirx.const(point[tag], str(var.ty)) for tag, var in tags.items()
                    if tag in point}
            seen.append(analyzer.simplify(substitute(expr, vmap)))
        differ = next((k for k, e in enumerate(seen) if not _same(seen[0], e)), None)
        if differ is None:
            continue
        values = [_const(e) for e in seen]
        if any(v is None for v in values):
            return Split(group, False, ((0, seen[0]), (differ, seen[differ])))
        pair = ((0, values[0]), (differ, values[differ]))
        if str(expr.ty.dtype) == "bool":
            return Split(group, True, pair,
                         tuple(k for k, v in enumerate(values) if v),
                         tuple(k for k, v in enumerate(values) if not v))
        return Split(group, True, pair)
    return None


def _same(a, b) -> bool:
    return tvm_ffi.structural_equal(a, b)


def _const(e):
    value = getattr(e, "value", None)
    return value if isinstance(value, (int, float, bool)) else None


def _ranges(lanes) -> str:
    """`0-15`, `0-3, 8-11`: consecutive lanes as ranges."""
    out, start = [], None
    for k, lane in enumerate(lanes):
        if start is None:
            start = lane
        if k + 1 == len(lanes) or lanes[k + 1] != lane + 1:
            out.append(str(start) if start == lane else f"{start}-{lane}")
            start = None
    return ", ".join(out)
