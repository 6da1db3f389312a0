"""What pass `lower_tile_ops` tells its sub-lowerings about the kernel being lowered.

`lower_tile_ops` builds one `KernelContext` per kernel and hands it to the gemm lowering
(core/transform/lower_gemm.py) and the reduce lowering (core/transform/lower_reduce.py).
They read the kernel from it and call back into the element-wise lowering only through
its `copy`, `parallel` and `stmt` functions; neither sees the other. Threadgroup memory they need
not share a budget for: pass merge_threadgroup lays out every threadgroup buffer of the
lowered kernel by liveness and checks the bytes live at once against the 32 KiB.

`decide(point, choice)` records a lowering decision (core/ir/decisions.py) where a
sub-lowering takes it; lower_tile_ops notes the kernel's set on the function.

The tables (`fragments`, `ranges`, `guards`) are filled by lower_tile_ops as it walks the
kernel: at any moment `ranges` holds the loops and launch dimensions around the statement
being lowered, `guards` the conditions of the enclosing ifs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import tvm
from tvm import tirx
from tvm.sym import Analyzer

from core.ir.decisions import choice
from core.ir.stmt import bind_ranges


@dataclass
class KernelContext:
    name: str                   # the kernel's name (for errors)
    threads: int                # threads per threadgroup
    tid: tvm.ir.Expr             # the linear thread index
    # T.copy(src, dst, atomic=None, when=None) lowered element-wise (lower_tile_ops' rule)
    copy: Callable
    # a T.Parallel loop nest lowered to per-thread loops (lower_tile_ops' rule)
    parallel: Callable
    # any statement lowered as lower_tile_ops lowers it (the gemm lowering's k loops, whose
    # shared accumulator it keeps in matrices around the loop, lower their body so)
    stmt: Callable
    fragments: dict = field(default_factory=dict)  # fragment -> (local buffer, FragmentLayout)
    ranges: dict = field(default_factory=dict)     # var -> (min, extent) around the statement
    guards: list = field(default_factory=list)     # conditions of the enclosing ifs
    # the lowering decisions taken in this kernel ("point=choice", core/ir/decisions.py);
    # lower_tile_ops notes them on the function
    decisions: set = field(default_factory=set)
    _names: int = 0
    _analyzer: tuple = (None, None)  # (the ranges it was built from, by handle; analyzer)

    def decide(self, point: str, value) -> None:
        """Record that this kernel's lowering chose `value` at decision point `point`."""
        self.decisions.add(choice(point, value))

    def fresh(self, name: str) -> tirx.Var:
        """A new int32 variable; the kernel's variables are numbered in creation order."""
        self._names += 1
        return tirx.Var(f"{name}{self._names}" if self._names > 1 else name, "int32")

    def analyzer(self) -> Analyzer:
        """An analyzer knowing the ranges of the loops around the current statement. Its
        users only query it (constraints in a scope), so while `ranges` holds the same
        entries the same analyzer is returned: building one binds every range again."""
        key = tuple((v.__chandle__(), _identity(lo), _identity(ext))
                    for v, (lo, ext) in self.ranges.items())
        if self._analyzer[0] != key:
            self._analyzer = (key, bind_ranges(Analyzer(), self.ranges))
        return self._analyzer[1]


def _identity(x):
    """A TVM node by handle, a Python number (a tile extent) by value."""
    chandle = getattr(x, "__chandle__", None)
    return chandle() if chandle is not None else ("value", x)
