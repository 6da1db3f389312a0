"""Queries the pass tests make of a PrimFunc (or a statement): the nodes of one kind,
the loops, allocations, tile-op and intrinsic calls, and the lanes of a vector value.
Thin wrappers over the walks of core/ir/stmt.py, so each test states its assertion."""

from __future__ import annotations

import tvm
from tvm import tirx

from core.ir import ops
from core.ir.stmt import collect, walk


def _root(node):
    return node.body if isinstance(node, tirx.PrimFunc) else node


def nodes(node, node_type) -> list:
    """Every node of `node_type` inside `node` (a PrimFunc: its body), post-order."""
    return collect(_root(node), node_type)[0]


def loops(node) -> list:
    return nodes(node, tirx.For)


def parallel_loops(node) -> list:
    return [f for f in loops(node) if f.kind == tirx.ForKind.PARALLEL]


def allocs(node) -> dict:
    """Buffer name -> its AllocBuffer statement."""
    return {a.buffer.name: a for a in nodes(node, tirx.AllocBuffer)}


def scope(alloc) -> str:
    return ops.buffer_scope(alloc.buffer)


def shape(alloc) -> tuple:
    return tuple(int(d) for d in alloc.buffer.ty.shape)


def call_names(node) -> list:
    """The operator names of every call to a registered Op (tl.copy, tl.threadgroup_barrier,
    tirx.if_then_else, ...), in visit order."""
    return [str(c.op.name) for c in nodes(node, tvm.ir.Call) if isinstance(c.op, tvm.ir.Op)]


def tile_ops(node) -> list:
    return [n for n in call_names(node) if n in ops.TILE_OPS]


def stores(node, buffer: str | None = None) -> list:
    return [s for s in nodes(node, tirx.BufferStore)
            if buffer is None or s.buffer.name == buffer]


def lanes(expr) -> int:
    return tvm.DataType(str(expr.ty.dtype)).lanes


def statements(node) -> list:
    """Every statement, pre-order (textual order)."""
    out = []
    walk(_root(node), out.append)
    return out
