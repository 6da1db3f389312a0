"""Broken versions of compiler passes, for showing that the gate catches a bad pass change.

Each is a drop-in replacement for one pass of core/transform/pipeline.py (PrimFunc ->
PrimFunc), used as `replace={"thread_sync": drop_one_barrier}` or from the command line
with this folder on PYTHONPATH:

    PYTHONPATH=suites/harness harness bench --cases copy/k-transpose-f16 \\
        --replace thread_sync=perturbations:drop_one_barrier
"""

from __future__ import annotations

import dataclasses

from tvm import tirx

from core.ir import ops
from core.ir.stmt import rewrite
from core.transform import lower_reduce
from core.transform.lower_tile_ops import lower_tile_ops
from core.transform.thread_sync import thread_sync


def drop_one_barrier(func):
    """`thread_sync`, then the first barrier it placed (in statement order) removed."""
    func = thread_sync(func)
    dropped = []

    def drop(stmt):
        if ops.is_barrier(stmt) and not dropped:
            dropped.append(stmt)
            return tirx.Evaluate(tirx.const(0, "int32"))
        return stmt

    return func.with_body(rewrite(func.body, drop))


def reduce_butterfly_one_short(func):
    """`lower_tile_ops` with every T.reduce butterfly one XOR step short: a reduction over
    2^b lanes combines only 2^(b-1) of them (the reduction width off by one bit)."""
    original = lower_reduce._Plan.simd_bits

    def short(plan):
        lo, bits = original.fget(plan)
        return lo, max(bits - 1, 0)

    lower_reduce._Plan.simd_bits = property(short)
    try:
        return lower_tile_ops(func)
    finally:
        lower_reduce._Plan.simd_bits = original


def matrix_store_as_one_element(func):
    """`thread_sync` with a simdgroup matrix store seen as touching only the element its
    pointer names (the tile's origin), not its 8x8 tile: the planner then misses a read of
    another part of a stored tile."""
    from core.ir import footprint

    original = footprint.Footprint.of_tile

    def origin_only(cls, access, *args, **kwargs):
        if not access.write:
            return original.__func__(cls, access, *args, **kwargs)
        fp = cls(access.buffer, True, size=footprint._flat_size(access.buffer))
        point = dataclasses.replace(access, rows=1, cols=1)
        return original.__func__(cls, point, *args, **kwargs) if fp.size else fp

    footprint.Footprint.of_tile = classmethod(origin_only)
    try:
        return thread_sync(func)
    finally:
        footprint.Footprint.of_tile = original
