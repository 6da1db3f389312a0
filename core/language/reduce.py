"""The T.reduce family: `T.reduce_sum / reduce_max / reduce_min / reduce_abssum /
reduce_absmax(src, dst, dim=-1, clear=True)` (docs/architecture.md, "The DSL").

Each call emits one `tl.reduce(src, dst, kind, dim, clear)` tile op (core/ir/ops.py) over
whole buffers, after checking what the DSL can know:
    src   a T.alloc_fragment (spread over the threads) or T.alloc_local (per thread)
    dst   a fragment or local buffer whose shape is src's without `dim` (or with extent 1
          there); a local src reduces into a local dst (each thread its own array)
    dim   an int in [-rank, rank); negative counts from the end
    dtypes  float32, float16, bfloat16, int32 (floats accumulate in float32, int32 in
          int32, and the result is rounded once to dst's dtype)
    clear True: dst := reduction; False: dst := op(dst, reduction) (abssum: dst + sum |x|)
The lowering (layouts, butterflies, threadgroup staging) is core/transform/lower_reduce.py.
"""

from __future__ import annotations

from numbers import Integral

import tvm
from tvm.tirx.script.builder import ir as _ir

from core.ir import ops
from core.ir.stmt import as_int
from core.language.buffers import FRAGMENT
from core.language.errors import KernelDefinitionError
from core.language.tileops import _region

KINDS = ("sum", "max", "min", "abssum", "absmax")
DTYPES = ("float32", "float16", "bfloat16", "int32")
SCOPES = {FRAGMENT: "T.alloc_fragment", "local": "T.alloc_local"}


def _whole_buffer(x, role, construct):
    region = ops.decode_region(_region(x, f"{construct} {role}"))
    buf = region.buffer
    shape = ops.buffer_shape(buf)
    whole = region.extents is None or tuple(as_int(e) for e in region.extents) == \
        tuple(as_int(d) for d in shape)
    if not whole or any(as_int(m) != 0 for m in region.mins):
        raise KernelDefinitionError(
            f"{role} '{buf.name}' is a part of a buffer; pass the whole buffer",
            construct=construct)
    scope = ops.buffer_scope(buf)
    if scope not in SCOPES:
        raise KernelDefinitionError(
            f"{role} '{buf.name}' is in {scope} memory; allowed: "
            f"{' or '.join(SCOPES.values())} buffers", construct=construct)
    dtype = ops.buffer_dtype(buf)
    if dtype not in DTYPES:
        raise KernelDefinitionError(
            f"{role} '{buf.name}' has dtype {dtype}; allowed: {', '.join(DTYPES)}",
            construct=construct)
    return region


def _reduce(kind, src, dst, dim, clear):
    construct = f"T.reduce_{kind}"
    s = _whole_buffer(src, "source", construct)
    d = _whole_buffer(dst, "destination", construct)
    s_shape = tuple(as_int(e) for e in ops.buffer_shape(s.buffer))
    d_shape = tuple(as_int(e) for e in ops.buffer_shape(d.buffer))
    rank = len(s_shape)
    if isinstance(dim, bool) or not isinstance(dim, Integral) or not -rank <= dim < rank:
        raise KernelDefinitionError(
            f"dim={dim!r} is not a dimension of source '{s.name}' (rank {rank}); allowed: "
            f"an int in [{-rank}, {rank})", construct=construct)
    dim = int(dim) % rank
    dropped = s_shape[:dim] + s_shape[dim + 1:]
    kept = s_shape[:dim] + (1,) + s_shape[dim + 1:]
    if d_shape not in (dropped, kept):
        allowed = " or ".join(str(t) for t in dict.fromkeys(x for x in (dropped, kept) if x))
        raise KernelDefinitionError(
            f"destination '{d.name}' has shape {d_shape}; reducing source '{s.name}' of shape "
            f"{s_shape} over dim {dim} gives {allowed}", construct=construct)
    if s.scope == "local" and d.scope != "local":
        raise KernelDefinitionError(
            f"source '{s.name}' is per-thread (T.alloc_local), so the destination must be "
            f"per-thread too; '{d.name}' is a fragment", construct=construct)
    if not isinstance(clear, (bool, Integral)):
        raise KernelDefinitionError(f"clear={clear!r} must be True or False",
                                    construct=construct)
    _ir.evaluate(ops.call("tl.reduce", ops.encode_region(s.buffer, s.mins),
                          ops.encode_region(d.buffer, d.mins), tvm.ir.StringImm(kind),
                          tvm.tirx.IntImm("int32", dim), tvm.tirx.IntImm("int32", int(clear))))


def reduce_sum(buffer, out, dim=-1, clear=True):
    """out := sum over `dim` of buffer (clear=False: out + sum)."""
    _reduce("sum", buffer, out, dim, clear)


def reduce_max(buffer, out, dim=-1, clear=True):
    """out := max over `dim` of buffer (clear=False: max(out, max))."""
    _reduce("max", buffer, out, dim, clear)


def reduce_min(buffer, out, dim=-1, clear=True):
    """out := min over `dim` of buffer (clear=False: min(out, min))."""
    _reduce("min", buffer, out, dim, clear)


def reduce_abssum(buffer, out, dim=-1, clear=True):
    """out := sum over `dim` of |buffer| (clear=False: out + sum |x|)."""
    _reduce("abssum", buffer, out, dim, clear)


def reduce_absmax(buffer, out, dim=-1, clear=True):
    """out := max over `dim` of |buffer| (clear=False: max(out, max |x|))."""
    _reduce("absmax", buffer, out, dim, clear)
