"""The T.reduce family: `T.reduce_sum / reduce_max / reduce_min / reduce_abssum /
reduce_absmax(src, dst, dim=-1, clear=True)` (docs/architecture.md, "The DSL").

Each call emits one `tl.reduce(src, dst, kind, dim, clear)` tile op (core/ir/ops.py) over
whole buffers, after checking what the DSL can know:
    src   a T.alloc_fragment (spread over the threads), T.alloc_local (per thread) or
          T.alloc_shared tile; a shared source is copied into a fragment of its shape
          first (T.copy), as TileLang does
    dst   a fragment, local or shared buffer whose shape is src's without `dim` (or with
          extent 1 there); a local src reduces into a local dst (each thread its own
          array); a shared dst is reduced into a fragment, then T.copy'd into it (for
          clear=False, its values are copied into that fragment first)
    dim   an int in [-rank, rank); negative counts from the end
    dtypes  float32, float16, bfloat16, int32, int64, uint32 (floats accumulate in float32,
          integers in their own type, and the result is rounded once to dst's dtype)
    clear True: dst := reduction; False: dst := op(dst, reduction) (abssum: dst + sum |x|)
    batch TileLang's number of outputs per all-reduce call (a barrier-count hint): the
          lowering already combines every output of a reduction with one pair of barriers,
          so any positive int gives the same code
`T.reduce_bitand / reduce_bitor / reduce_bitxor` take integer buffers (& | ^).
`T.reduce(src, dst, reduce_type, dim, clear)` is the generic form (reduce_type one of KINDS).
The lowering (layouts, butterflies, threadgroup staging) is core/transform/lower_reduce.py.
"""

from __future__ import annotations

from math import prod
from numbers import Integral

import tvm
from tvm.script.ir_builder import IRBuilder
from tvm.tirx.script.builder import ir as _ir

from core.errors import KernelDefinitionError
from core.ir import ops
from core.ir.annotations import REDUCER   # AllocBuffer annotation: the combining op
from core.ir.ops import FRAGMENT
from core.ir.stmt import as_int
from core.language.buffers import _shape, alloc_fragment
from core.language.dtypes import dtype_name
from core.language.kernel import _current
from core.language.tileops import _region, copy

KINDS = ("sum", "max", "min", "abssum", "absmax", "bitand", "bitor", "bitxor")
BITWISE_KINDS = ("bitand", "bitor", "bitxor")     # integer sources and destinations only
DTYPES = ("float32", "float16", "bfloat16", "int32", "int64", "uint32")
SCOPES = {FRAGMENT: "T.alloc_fragment", "local": "T.alloc_local", "shared": "T.alloc_shared"}


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


def _staged(region):
    """A fragment of `region`'s buffer's shape and dtype, named after it."""
    buf = region.buffer
    frag = alloc_fragment(tuple(buf.ty.shape), ops.buffer_dtype(buf))
    IRBuilder.name(f"{buf.name}_frag", frag)
    return frag


def _reduce(kind, src, dst, dim, clear, batch=1, construct=None, nan_propagate=False):
    construct = construct or f"T.reduce_{kind}"
    if nan_propagate:
        raise KernelDefinitionError(
            "nan_propagate=True is not supported: Metal's max/min return the other operand "
            "of a NaN (TileLang implements the flag on CUDA only); allowed: False",
            construct=construct)
    if kind not in KINDS:
        raise KernelDefinitionError(f"reduce_type {kind!r} is not supported; allowed: "
                                    f"{', '.join(KINDS)}", construct=construct)
    if isinstance(batch, bool) or not isinstance(batch, Integral) or batch < 1:
        raise KernelDefinitionError(f"batch={batch!r} must be a positive int",
                                    construct=construct)
    s = _whole_buffer(src, "source", construct)
    d = _whole_buffer(dst, "destination", construct)
    if kind in BITWISE_KINDS:
        for role, r in (("source", s), ("destination", d)):
            if not ops.buffer_dtype(r.buffer).startswith(("int", "uint")):
                raise KernelDefinitionError(
                    f"{role} '{r.name}' has dtype {ops.buffer_dtype(r.buffer)}; a bitwise "
                    "reduction takes integers: int32, int64, uint32", construct=construct)
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
            f"per-thread too; '{d.name}' is a {SCOPES[d.scope]}", construct=construct)
    if not isinstance(clear, (bool, Integral)):
        raise KernelDefinitionError(f"clear={clear!r} must be True or False",
                                    construct=construct)
    src_buf, dst_buf = s.buffer, d.buffer
    if s.scope == "shared":
        src_buf = _staged(s)
        copy(s.buffer, src_buf)
    if d.scope == "shared":
        dst_buf = _staged(d)
        if not clear:
            copy(d.buffer, dst_buf)
    zeros = [tvm.tirx.IntImm("int32", 0)] * len(s_shape)
    _ir.evaluate(ops.call("tl.reduce", ops.encode_region(src_buf, zeros),
                          ops.encode_region(dst_buf, zeros[:len(d_shape)]),
                          tvm.ir.StringImm(kind), tvm.tirx.IntImm("int32", dim),
                          tvm.tirx.IntImm("int32", int(clear))))
    if d.scope == "shared":
        copy(dst_buf, d.buffer)


def reduce(buffer, out, reduce_type, dim=-1, clear=True, batch=1, nan_propagate=False,
           annotations=None):
    """out := reduce_type-reduction of buffer over `dim` (TileLang's generic T.reduce)."""
    _reduce(str(reduce_type), buffer, out, dim, clear, batch, construct="T.reduce",
            nan_propagate=nan_propagate)


def reduce_sum(buffer, out, dim=-1, clear=True, batch=1, annotations=None):
    """out := sum over `dim` of buffer (clear=False: out + sum)."""
    _reduce("sum", buffer, out, dim, clear, batch)


def reduce_max(buffer, out, dim=-1, clear=True, batch=1, nan_propagate=False,
               annotations=None):
    """out := max over `dim` of buffer (clear=False: max(out, max))."""
    _reduce("max", buffer, out, dim, clear, batch, nan_propagate=nan_propagate)


def reduce_min(buffer, out, dim=-1, clear=True, batch=1, nan_propagate=False,
               annotations=None):
    """out := min over `dim` of buffer (clear=False: min(out, min))."""
    _reduce("min", buffer, out, dim, clear, batch, nan_propagate=nan_propagate)


def reduce_abssum(buffer, out, dim=-1, clear=True, batch=1, annotations=None):
    """out := sum over `dim` of |buffer| (clear=False: out + sum |x|)."""
    _reduce("abssum", buffer, out, dim, clear, batch)


def reduce_absmax(buffer, out, dim=-1, clear=True, batch=1, nan_propagate=False,
                  annotations=None):
    """out := max over `dim` of |buffer| (clear=False: max(out, max |x|))."""
    _reduce("absmax", buffer, out, dim, clear, batch, nan_propagate=nan_propagate)


def reduce_bitand(buffer, out, dim=-1, clear=True, batch=1, annotations=None):
    """out := bitwise and over `dim` of buffer (integers; clear=False: out & and)."""
    _reduce("bitand", buffer, out, dim, clear, batch)


def reduce_bitor(buffer, out, dim=-1, clear=True, batch=1, annotations=None):
    """out := bitwise or over `dim` of buffer (integers; clear=False: out | or)."""
    _reduce("bitor", buffer, out, dim, clear, batch)


def reduce_bitxor(buffer, out, dim=-1, clear=True, batch=1, annotations=None):
    """out := bitwise xor over `dim` of buffer (integers; clear=False: out ^ xor)."""
    _reduce("bitxor", buffer, out, dim, clear, batch)


# ---- reducers: T.alloc_reducer / T.finalize_reducer (TileLang's GEMV pattern) ----------

REDUCER_OPS = ("sum", "max", "min")


def alloc_reducer(shape, dtype="float32", op="sum", replication="all"):
    """A reducer: every thread holds a private copy of `shape` (a T.alloc_local carrying
    `tl.reducer`), updated inside T.Parallel (`r[i] += x`) for the iterations the thread
    runs; `T.finalize_reducer(r)` combines the copies of all threads, after which every
    thread holds the result (a T.copy out of it is spread over the threads)."""
    construct = "T.alloc_reducer"
    if op not in REDUCER_OPS:
        raise KernelDefinitionError(f"op={op!r} is not supported; allowed: "
                                    f"{', '.join(REDUCER_OPS)}", construct=construct)
    if replication not in ("all", None):
        raise KernelDefinitionError(
            f"replication={replication!r}: metaltile's reducers hold a copy on every thread; "
            "allowed: 'all'", construct=construct)
    if isinstance(shape, Integral):
        shape = (shape,)
    dims = _shape(shape, construct)
    buf = _ir.alloc_buffer(dims, dtype_name(dtype, construct=construct), scope="local",
                           annotations={REDUCER: tvm.ir.StringImm(op)})
    _current(construct).reducers[buf.__chandle__()] = op   # for reducer_init/_update
    return buf


def _reducer_op(buf, construct) -> str:
    op = _current(construct).reducers.get(buf.__chandle__())
    if op is None:
        raise KernelDefinitionError(f"'{buf.name}' is not a T.alloc_reducer buffer of this "
                                    "kernel", construct=construct)
    return op


def reducer_init(reducer):
    """Every element of this thread's copy of `reducer` := the identity of its op
    (0 for sum, -inf / +inf for max / min; an integer type's lowest / highest value)."""
    construct = "T.reducer_init"
    region = ops.decode_region(_region(reducer, construct))
    buf = region.buffer
    op = _reducer_op(buf, construct)
    dt = str(buf.ty.dtype)
    if op == "sum":
        value = tvm.tirx.const(0, dt)
    elif dt.startswith("float") or dt == "bfloat16":
        value = tvm.tirx.const(float("-inf") if op == "max" else float("inf"), dt)
    else:
        value = tvm.tirx.min_value(dt) if op == "max" else tvm.tirx.max_value(dt)
    shape = [as_int(d) for d in buf.ty.shape]
    for flat in range(prod(shape)):
        idx, rest = [], flat
        for extent in reversed(shape):
            idx.insert(0, tvm.tirx.const(rest % extent, "int32"))
            rest //= extent
        _ir.buffer_store(buf, value, idx)


def reducer_update(target, value):
    """`target` (an element of a reducer, `r[i]`) := op(target, value), this thread's copy."""
    construct = "T.reducer_update"
    if not isinstance(target, tvm.ir.TensorLoad):
        raise KernelDefinitionError(f"{target!r} must be an element of a T.alloc_reducer "
                                    "buffer (r[i])", construct=construct)
    op = _reducer_op(target.source, construct)
    dt = str(target.source.ty.dtype)
    value = value if tvm.ir.is_prim_expr(value) else tvm.tirx.const(value, dt)
    if str(value.ty.dtype) != dt:
        value = tvm.tirx.Cast(dt, value)
    combined = {"sum": lambda a, b: a + b, "max": tvm.tirx.max,
                "min": tvm.tirx.min}[op](target, value)
    _ir.buffer_store(target.source, combined, list(target.indices))


def finalize_reducer(reducer, dst=None, batch=1, annotations=None):
    """Combine every thread's copy of `reducer` (all threads then hold the result); with
    `dst`, then copy it into `dst`."""
    construct = "T.finalize_reducer"
    region = ops.decode_region(_region(reducer, construct))
    if region.scope != "local":
        raise KernelDefinitionError(
            f"'{region.name}' is not a T.alloc_reducer buffer (it is in {region.scope} "
            "memory)", construct=construct)
    _ir.evaluate(ops.call("tl.finalize_reducer", ops.encode_region(
        region.buffer, [tvm.tirx.IntImm("int32", 0)] * len(region.buffer.ty.shape))))
    if dst is not None:
        copy(reducer, dst)
