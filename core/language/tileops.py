"""Tile operations of the DSL: `T.copy`, `T.fill`, `T.clear`, `T.transpose`.

Each call emits one tile-op call (core/ir/ops.py) whose operands are regions; the
lowering turns it into per-thread loops. Accepted operand forms, as in TileLang:
    A                      the whole buffer
    A[by * bM, k * bK]     a tile whose origin is given, extents from the other operand
    A[i0:i1, j0:j1]        a tile with explicit extents
TileLang's tuning keywords (`coalesced_width`, `disable_tma`, `eviction_policy`, ...) are
accepted and have no effect on Metal.
"""

from __future__ import annotations

import tvm
from tvm.tirx import is_buffer_var
from tvm.tirx.script.builder import ir as _ir

from core.errors import KernelDefinitionError
from core.ir import ops
from core.ir.stmt import as_int
from core.language.buffers import var_value


def _region(x, construct):
    if isinstance(x, tvm.ir.TensorRegion):
        return ops.encode_region(x.source, [r.min for r in x.region],
                                 [r.extent for r in x.region])
    if is_buffer_var(x):
        shape = list(x.ty.shape)
        return ops.encode_region(x, [0] * len(shape), shape)
    if isinstance(x, tvm.ir.TensorLoad) and is_buffer_var(x.source):
        return ops.encode_region(x.source, list(x.indices))
    if var_value(x) is not x:  # T.alloc_var
        return _region(var_value(x).source, construct)
    raise KernelDefinitionError(
        f"operand {x!r} is not a buffer or a buffer tile; allowed: A, A[i, j] (tile origin), "
        "A[i0:i1, j0:j1]", construct=construct)


def copy(src, dst, coalesced_width=None, disable_tma=False, eviction_policy=None,
         annotations=None, **_tilelang_options):
    """dst := src, element-wise, converting the dtype; edge tiles are masked."""
    _ir.evaluate(ops.call("tl.copy", _region(src, "T.copy source"),
                          _region(dst, "T.copy destination")))


def fill(buffer, value):
    """Every element of `buffer` (or tile) := value."""
    region = _region(buffer, "T.fill")
    dtype = ops.buffer_dtype(ops.decode_region(region).buffer)
    if not isinstance(value, tvm.ir.Expr):
        value = tvm.tirx.const(value, dtype)
    _ir.evaluate(ops.call("tl.fill", region, value))


def clear(buffer):
    """Every element of `buffer` := 0."""
    fill(buffer, 0)


def transpose(src, dst, annotations=None):
    """dst[j, i] := src[i, j] over the last two dimensions of two threadgroup tiles
    (src [M, N], dst [N, M]), as a T.Parallel over src's tile."""
    construct = "T.transpose"
    regions = [ops.decode_region(_region(x, f"{construct} {role}"))
               for x, role in ((src, "source"), (dst, "destination"))]
    for r, role in zip(regions, ("source", "destination")):
        scope = r.buffer.ty.storage_scope
        if scope != "shared":
            raise KernelDefinitionError(
                f"the {role} '{r.buffer.name}' is in '{scope}' memory; allowed: threadgroup "
                "tiles (T.alloc_shared); copy a fragment to shared memory first",
                construct=construct)
    (s, d) = regions
    s_ext, d_ext = _extents(s, d), _extents(d, s)
    if len(s_ext) != 2 or len(d_ext) != 2:
        raise KernelDefinitionError(
            f"needs 2-D tiles, got source {list(s_ext)} and destination {list(d_ext)}",
            construct=construct)
    if [as_int(e) for e in s_ext] != [as_int(e) for e in reversed(d_ext)] or \
            None in map(as_int, s_ext):
        raise KernelDefinitionError(
            f"source extents {list(s_ext)} and destination extents {list(d_ext)} must be "
            "constants and transposed ([M, N] -> [N, M])", construct=construct)
    m, n = (as_int(e) for e in s_ext)
    _ir.evaluate(ops.call("tl.parallel_scope", m, n))
    with _ir.grid(m, n) as (i, j):
        value = s.buffer[s.mins[0] + i, s.mins[1] + j]
        _ir.buffer_store(d.buffer, value, [d.mins[0] + j, d.mins[1] + i])


def _extents(region, other):
    """A region's extents; an origin form (`A[i, j]`) takes the other operand's, swapped."""
    if region.extents is not None:
        return list(region.extents)
    if all(as_int(m) == 0 for m in region.mins) or \
            (other.extents is None and any(as_int(m) != 0 for m in other.mins)):
        return list(ops.buffer_shape(region.buffer))
    return list(reversed(_extents(other, region)))
