"""Pass `resolve_views`: accesses of buffer views -> accesses of the buffers they view.

Expects: lowered per-thread TIR (after lower_tile_ops: no tile op, every access a
BufferLoad or BufferStore); views are the `DeclBuffer`s inside kernels whose data is
`buffer_data(S)` of another buffer S (T.view / T.reshape, core/language/view.py).
Guarantees: every access V[i...] of a threadgroup or per-thread view, and of a device
view of another dtype, is the access of S it stands for: the row-major position of
(i...) in V's shape, unravelled in S's shape, and the bits reinterpreted where the dtypes
differ (same width: `as_type`); their DeclBuffers are gone. Views of views resolve to the
first buffer. Device views of S's own dtype are kept: flatten_simplify flattens them to
S's pointer, as the parameters' own views, and the vector copies through them stay.
Nothing else changes.
"""

from __future__ import annotations

import tvm
from tvm import tirx

from core.ir.kernel import map_kernels
from core.ir.ops import buffer_dtype
from core.ir.stmt import children, items, map_nodes, rewrite, seq


def _views(body) -> dict:
    found = {}

    def visit(s):
        if isinstance(s, tirx.DeclBuffer) and isinstance(s.data, tvm.ir.Call) and \
                s.data.op.name == "tirx.buffer_data":
            found[s.buffer] = s.data.args[0]
        for k in children(s):
            visit(k)
    visit(body)
    return found


def _resolvable(view, target) -> bool:
    return target.ty.storage_scope != "global" or buffer_dtype(view) != buffer_dtype(target)


def _position(indices, shape):
    flat = None
    for i, d in zip(indices, shape):
        flat = i if flat is None else flat * d + i
    return flat


def _unravel(flat, shape):
    out = []
    for d in reversed(list(shape)[1:]):
        out.append(tirx.floormod(flat, d))
        flat = tirx.floordiv(flat, d)
    out.append(flat)
    return list(reversed(out))


def _resolve_kernel(nest, views):
    def target(buf, indices):
        while buf in views and _resolvable(buf, views[buf]):
            src = views[buf]
            indices = _unravel(_position(indices, buf.ty.shape), src.ty.shape)
            buf = src
        return buf, indices

    def load(e):
        buf, idx = target(e.source, items(e.indices))
        if buf.same_as(e.source):
            return e
        value = tirx.BufferLoad(buf, idx)
        want = buffer_dtype(e.source)
        return value if buffer_dtype(buf) == want else tirx.reinterpret(want, value)

    def store(s):
        buf, idx = target(s.buffer, items(s.indices))
        if buf.same_as(s.buffer):
            return s
        value = s.value
        if buffer_dtype(buf) != buffer_dtype(s.buffer):
            value = tirx.reinterpret(buffer_dtype(buf), value)
        return tirx.BufferStore(buf, value, idx)

    def drop(s):
        if isinstance(s, tirx.SeqStmt):
            kept = [k for k in items(s.seq) if not (
                isinstance(k, tirx.DeclBuffer) and k.buffer in views
                and _resolvable(k.buffer, views[k.buffer]))]
            if len(kept) != len(items(s.seq)):
                return seq(kept)
        return s

    body = map_nodes(nest.body, (tvm.ir.TensorLoad, load), (tirx.BufferStore, store))
    return nest.wrap(rewrite(body, drop))


def resolve_views(func: tirx.PrimFunc) -> tirx.PrimFunc:
    views = _views(func.body)
    if not views:
        return func
    return map_kernels(func, lambda nest: _resolve_kernel(nest, views))
