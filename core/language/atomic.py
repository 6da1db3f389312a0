"""Atomics: `T.atomic_add / atomic_max / atomic_min(dst, value, memory_order=None,
return_prev=False)` and `T.atomic_addx2 / atomic_addx4(dst, value)` (TileLang's names).

Two forms, as in TileLang:
    scalar   dst is one element (`C[i, j]`, or a buffer of one element) of device
             (T.Tensor) or threadgroup (T.alloc_shared) memory, value an expression:
             emits the expression `tl.atomic(kind, C[i, j], value)` (core/ir/ops.py); its
             value is the element before the update (`return_prev=True` returns it).
    tile     dst and value are buffers or tiles (`T.atomic_add(C[by * bM, bx * bN],
             C_local)`): element-wise, one atomic per element, distributed over the threads
             like T.copy; emits the tile op `tl.atomic_tile(src, dst, kind)`.
`atomic_addx2/x4(dst, value)` update 2 / 4 consecutive elements of the last dimension from
`value`'s consecutive elements: MSL has no vector atomics, so they are 2 / 4 scalar atomics.

What MSL offers decides what is accepted (core/target.py `METAL.atomic_*`): int32 and uint32
add/max/min and float32 add are native; float32 max/min and float16/bfloat16 add/max/min
are compare-exchange loops on the aligned 32-bit word that holds the element (MSL has no
atomic_half or atomic_bfloat; a threadgroup buffer of 16-bit elements updated by atomics is
declared as 32-bit words, core/codegen/msl.py). Only memory_order "relaxed" exists for MSL
atomics. Anything else is a KernelDefinitionError.

`T.atomic_load(src)` / `T.atomic_store(dst, value)` read / write one element with
atomic_load_explicit / atomic_store_explicit (int32, uint32, float32; device or threadgroup
memory), and `T.atomic_or(dst, value)` is atomic_fetch_or_explicit (int32, uint32), all
scalar, as in TileLang. TileLang's load and store default to memory_order "seq_cst",
which MSL does not have: the omitted order is relaxed here (order other accesses with
T.sync_threads), and an explicit order other than "relaxed" is an error.
"""

from __future__ import annotations

from math import prod

import tvm
from tvm import tirx
from tvm.tirx import is_buffer_var
from tvm.tirx.script.builder import ir as _ir

from core.errors import KernelDefinitionError
from core.ir import ops
from core.ir.stmt import as_int
from core.language.tileops import _region
from core.target import METAL, DTYPES

KINDS = ("add", "max", "min")
SCOPES = {"global": "device (T.Tensor)", "shared": "threadgroup (T.alloc_shared)"}


def supported(dtype: str, kind: str) -> str | None:
    """None when MSL can do `kind` on `dtype` (in device or threadgroup memory), else the
    reason it cannot."""
    if (dtype, kind) in METAL.atomic_native:
        return None
    if dtype in METAL.atomic_cas_dtypes:
        return None
    allowed = sorted({d for d, k in METAL.atomic_native if k == kind} |
                     set(METAL.atomic_cas_dtypes))
    return (f"MSL atomics are 32-bit (atomic_int, atomic_uint, atomic_float); {dtype} has no "
            f"atomic {kind}; allowed: {', '.join(allowed)}")


def _check_dst(buf, kind, construct):
    scope = ops.buffer_scope(buf)
    if scope not in SCOPES:
        raise KernelDefinitionError(
            f"destination '{buf.name}' is in {scope} memory; atomics update "
            f"{' or '.join(SCOPES.values())} memory (a fragment or local buffer belongs to one "
            "thread: update it with a plain store)", construct=construct)
    dtype = ops.buffer_dtype(buf)
    reason = supported(dtype, kind)
    if reason is not None:
        raise KernelDefinitionError(f"destination '{buf.name}': {reason}", construct=construct)
    size = prod(as_int(d) or 0 for d in buf.ty.shape)
    if DTYPES[dtype].bits < METAL.atomic_word_bits and all(as_int(d) for d in buf.ty.shape) \
            and size % (METAL.atomic_word_bits // DTYPES[dtype].bits):
        raise KernelDefinitionError(
            f"destination '{buf.name}' ({dtype}, {size} elements): a {dtype} atomic updates "
            "the 32-bit word holding the element, and the last element's word would lie past "
            "the buffer's end; give the buffer an even number of elements", construct=construct)


def _check_order(memory_order, construct):
    if memory_order not in (None, "relaxed"):
        raise KernelDefinitionError(
            f"memory_order={memory_order!r}: MSL atomics are relaxed only "
            "(memory_order_relaxed); allowed: None or 'relaxed' (order with a barrier)",
            construct=construct)


def _value(value, dtype):
    if isinstance(value, (int, float, bool)):
        return tirx.const(value, dtype)
    if str(value.ty.dtype) != dtype:
        return tirx.Cast(dtype, value)
    return value


def _is_tile(x) -> bool:
    return isinstance(x, tvm.ir.TensorRegion) or is_buffer_var(x)


def _element(dst, construct):
    """The BufferLoad of a scalar destination (an element, or a one-element buffer)."""
    if isinstance(dst, tvm.ir.TensorLoad) and is_buffer_var(dst.source):
        return dst
    if is_buffer_var(dst) and all(as_int(d) == 1 for d in dst.ty.shape):
        return tirx.BufferLoad(dst, [tirx.const(0, "int32")] * len(dst.ty.shape))
    raise KernelDefinitionError(
        f"destination {dst!r} is not an element; allowed: C[i, j] with a scalar value, or a "
        "buffer or tile with a buffer or tile value", construct=construct)


def _atomic(kind, dst, value, memory_order, return_prev, construct):
    _check_order(memory_order, construct)
    if _is_tile(value) or isinstance(value, tvm.ir.TensorLoad) and _is_tile(dst):
        if return_prev:
            raise KernelDefinitionError(
                "return_prev=True needs the scalar form (one element); a tile update has no "
                "single previous value", construct=construct)
        src_r, dst_r = _region(value, f"{construct} value"), _region(dst, f"{construct} dst")
        _check_dst(ops.decode_region(dst_r).buffer, kind, construct)
        _ir.evaluate(ops.call("tl.atomic_tile", src_r, dst_r, tvm.ir.StringImm(kind)))
        return None
    element = _element(dst, construct)
    _check_dst(element.source, kind, construct)
    call = ops.atomic_call(kind, element, _value(value, ops.buffer_dtype(element.source)))
    if return_prev:
        return call
    _ir.evaluate(call)
    return None


def atomic_add(dst, value, memory_order=None, return_prev=False, use_tma=False,
               annotations=None, **_tilelang_options):
    """dst += value atomically (element or tile); return_prev: the element before."""
    return _atomic("add", dst, value, memory_order, return_prev, "T.atomic_add")


def atomic_max(dst, value, memory_order=None, return_prev=False, annotations=None):
    """dst := max(dst, value) atomically (element or tile)."""
    return _atomic("max", dst, value, memory_order, return_prev, "T.atomic_max")


def atomic_min(dst, value, memory_order=None, return_prev=False, annotations=None):
    """dst := min(dst, value) atomically (element or tile)."""
    return _atomic("min", dst, value, memory_order, return_prev, "T.atomic_min")


def _check_load_store(buf, construct):
    scope = ops.buffer_scope(buf)
    dtype = ops.buffer_dtype(buf)
    if scope not in SCOPES:
        raise KernelDefinitionError(
            f"'{buf.name}' is in {scope} memory; atomics access "
            f"{' or '.join(SCOPES.values())} memory", construct=construct)
    if dtype not in METAL.atomic_load_store_dtypes:
        raise KernelDefinitionError(
            f"'{buf.name}' has dtype {dtype}: MSL's atomic_load/atomic_store take 32-bit "
            f"atomic types; allowed: {', '.join(METAL.atomic_load_store_dtypes)}",
            construct=construct)


def atomic_load(src, memory_order=None):
    """The element `src` read atomically (its value)."""
    construct = "T.atomic_load"
    _check_order(memory_order, construct)
    element = _element(src, construct)
    _check_load_store(element.source, construct)
    dtype = ops.buffer_dtype(element.source)
    return ops.atomic_call("load", element, tirx.const(0, dtype))


def atomic_store(dst, src, memory_order=None):
    """dst := src atomically (one element)."""
    construct = "T.atomic_store"
    _check_order(memory_order, construct)
    element = _element(dst, construct)
    _check_load_store(element.source, construct)
    if _is_tile(src):
        raise KernelDefinitionError("stores one value into one element; the value is a "
                                    "buffer", construct=construct)
    _ir.evaluate(ops.atomic_call("store", element, _value(src, ops.buffer_dtype(
        element.source))))


def atomic_or(dst, value, memory_order=None):
    """dst |= value atomically (one integer element)."""
    construct = "T.atomic_or"
    _check_order(memory_order, construct)
    if _is_tile(value) or _is_tile(dst) and not all(
            as_int(d) == 1 for d in dst.ty.shape):
        raise KernelDefinitionError("updates one element (TileLang's atomic_or is scalar "
                                    "only)", construct=construct)
    element = _element(dst, construct)
    dtype = ops.buffer_dtype(element.source)
    if (dtype, "or") not in METAL.atomic_native:
        allowed = sorted(d for d, k in METAL.atomic_native if k == "or")
        raise KernelDefinitionError(
            f"destination '{element.source.name}' has dtype {dtype}; MSL's atomic_fetch_or "
            f"takes {', '.join(allowed)}", construct=construct)
    _check_dst(element.source, "or", construct)
    _ir.evaluate(ops.atomic_call("or", element, _value(value, dtype)))


def _atomic_lanes(lanes, dst, value, return_prev, construct):
    if return_prev:
        raise KernelDefinitionError(
            f"return_prev=True: {construct} makes {lanes} separate atomics (MSL has no vector "
            "atomics), so there is no single previous value; use T.atomic_add per element",
            construct=construct)
    if not (isinstance(dst, tvm.ir.TensorLoad) and isinstance(value, tvm.ir.TensorLoad)):
        raise KernelDefinitionError(
            f"takes two elements, C[i, j] and x[k]: the first of {lanes} consecutive "
            "elements (last dimension) of each", construct=construct)
    _check_dst(dst.source, "add", construct)
    dtype = ops.buffer_dtype(dst.source)
    for k in range(lanes):
        d = tirx.BufferLoad(dst.source, [*dst.indices[:-1], dst.indices[-1] + k])
        v = tirx.BufferLoad(value.source, [*value.indices[:-1], value.indices[-1] + k])
        _ir.evaluate(ops.atomic_call("add", d, _value(v, dtype)))


def atomic_addx2(dst, value, return_prev=False):
    """dst[.., j:j+2] += value[.., k:k+2], as two scalar atomics (MSL has no vector ones)."""
    _atomic_lanes(2, dst, value, return_prev, "T.atomic_addx2")


def atomic_addx4(dst, value, return_prev=False):
    """dst[.., j:j+4] += value[.., k:k+4], as four scalar atomics."""
    _atomic_lanes(4, dst, value, return_prev, "T.atomic_addx4")
