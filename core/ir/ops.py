"""Tile ops: the `tl.*` operators the DSL emits and the passes consume.

Each tile op is a TIR `Op` registered from Python (`tvm.ir.register_op_attr`), used as
`Evaluate(Call(Op, args))` in the parsed PrimFunc:

    tl.region(BufferLoad(buf, mins), e0, e1, ...)   a tile: origin `mins`, extents e_i
                                                    (no extents: "the other operand's")
    tl.copy(src_region, dst_region)                 element-wise copy, dtype converted
    tl.fill(dst_region, value)                      every element := value
    tl.parallel_scope(e0, e1, ...)                  marks the next loop nest as T.Parallel
    tl.gemm(A, B, C, transpose_A, transpose_B, clear_accum)
                                                    C (+)= op(A) @ op(B) (regions; flags 0/1)
    tl.reduce(src, dst, kind, dim, clear)          dst (op)= reduce over `dim` of src (whole
                                                    buffers; kind "sum"/"max"/"min"/"abssum"/
                                                    "absmax"; core/transform/lower_reduce.py)
    tl.reduce_online(run_max, run_sum, max_dst, sum_dst)
                                                    softmax's statistics from per-thread running
                                                    (max, rescaled sum) pairs of one layout:
                                                    max_dst = max of run_max over dim 1,
                                                    sum_dst = sum of run_sum * exp(run_max -
                                                    max_dst), in one combine (emitted by
                                                    core/transform/stream_rows.py)
    tl.atomic_tile(src_region, dst_region, kind)    dst (op)= src element-wise, each update one
                                                    atomic (kind "add"/"max"/"min")
    tl.finalize_reducer(region)                     combine every thread's copy of a reducer
                                                    (T.alloc_reducer, a local buffer annotated
                                                    tl.reducer with its op)
    tl.thread_allreduce(kind, value, dst_region, lo, nbits)
                                                    dst (a local scalar) := `value` combined
                                                    over the threads whose linear ids differ
                                                    in bits [lo, lo + nbits) (TileLang's
                                                    T.tvm_thread_allreduce)
    tl.atomic(kind, dst_element, value)             one atomic update of the BufferLoad
                                                    `dst_element` (kind add/max/min/or, or
                                                    store: := value); its value is the
                                                    element before the update (dtype:
                                                    dst's); kind load: the element's value
                                                    (`value` unused)
    tl.threadgroup_barrier()                        (lowered) threadgroup_barrier(mem_threadgroup)
    tl.simd_shuffle_xor(value, mask)                (lowered) value of lane (lane ^ mask)
    tl.simd_sum/max/min(value)                      (lowered) over the simdgroup's lanes
    tl.simd_and/or/xor(value)                       (lowered) bitwise, over the active lanes
    tl.simd_shuffle(value, lane)                    value of lane `lane`
    tl.simd_shuffle_up/down(value, delta)           value of lane -/+ delta (the lowest/highest
                                                    delta lanes keep their own)
    tl.simd_ballot(pred)                            uint64: bit i set if active lane i's pred
    tl.simd_any/all(pred)                           bool over the active lanes
    tl.simd_active_threads_mask()                   uint64: bit i set if lane i is active
    tl.import_source(source)                        (a statement) the MSL `source` goes into
                                                    the library once (T.import_source)
    tl.loop_break()                                 (a statement) leave the innermost loop:
                                                    MSL `break;` (T.loop_break)
    tl.simd_prefix_inclusive_sum(value)             sum of `value` over the active lanes up
                                                    to and including this one (T.cumsum,
                                                    core/language/scan.py)
                                                    (the warp-level constructs,
                                                    core/language/warp.py)

`Region` is the decoded, plain-Python view of a `tl.region` call.
"""

from __future__ import annotations

from dataclasses import dataclass

import tvm
from tvm.ir import Op, register_op_attr

from core.ir.ffi import instance_test, items

TILE_OPS = ("tl.region", "tl.copy", "tl.fill", "tl.parallel_scope", "tl.gemm", "tl.reduce",
            "tl.reduce_online", "tl.atomic_tile", "tl.finalize_reducer", "tl.thread_allreduce")
# Lowered (non-tile) intrinsics of our own, printed by the MSL printer.
INTRINSICS = ("tl.threadgroup_barrier",
              # simdgroup 8x8 matrices (core/ir/matrix.py)
              "tl.simdgroup_fill", "tl.simdgroup_load", "tl.simdgroup_store", "tl.simdgroup_mma",
              # reductions (core/transform/lower_reduce.py)
              "tl.simd_shuffle_xor", "tl.simd_sum", "tl.simd_max", "tl.simd_min",
              # warp-level constructs (core/language/warp.py)
              "tl.simd_and", "tl.simd_or", "tl.simd_xor", "tl.simd_shuffle",
              "tl.simd_shuffle_up", "tl.simd_shuffle_down", "tl.simd_ballot", "tl.simd_any",
              "tl.simd_all", "tl.simd_active_threads_mask",
              "tl.simd_prefix_inclusive_sum",  # T.cumsum (core/language/scan.py)
              "tl.loop_break",        # T.loop_break (core/language/control.py)
              "tl.import_source",     # T.import_source (core/language/extern.py)
              "tl.access_ptr",        # T.access_ptr (core/language/simdgroup.py)
              "tl.atomic")            # T.atomic_add/max/min (core/language/atomic.py)
_OPAQUE = 3  # CallEffectKind.Opaque: never removed or reordered by TVM's passes

for _name in TILE_OPS + INTRINSICS:
    if _name not in Op.list_op_names():
        register_op_attr(_name, "TCallEffectKind", _OPAQUE)
        register_op_attr(_name, "TScriptPrinterName", _name)


def op(name: str) -> Op:
    return Op.get(name)


_is_call = instance_test(tvm.ir.Call)
_is_op = instance_test(Op)
_is_evaluate = instance_test(tvm.tirx.Evaluate)


def is_tile_call(node, name: str | None = None) -> bool:
    """True if `node` is a Call of a tile op (of `name`, if given)."""
    if not _is_call(node) or not _is_op(node.op):
        return False
    return node.op.name == name if name else node.op.name in TILE_OPS


def call(name: str, *args, dtype: str = "handle"):
    return tvm.tirx.call_intrin(dtype, name, *args)


@dataclass(frozen=True)
class Region:
    """A rectangular tile of a buffer: `buffer[mins[i] : mins[i] + extents[i]]`.

    `extents` is None when the DSL gave only an origin (`A[by * bM, k * bK]`); the copy
    takes the extents from its other operand.
    """

    buffer: object          # tvm Var with BufferType
    mins: tuple
    extents: tuple | None

    @property
    def scope(self) -> str:
        return buffer_scope(self.buffer)

    @property
    def name(self) -> str:
        return self.buffer.name


# Storage scopes (`buffer.ty.storage_scope`, core/language/buffers.py): "global" (a
# parameter, device memory; also an empty scope), "shared" (threadgroup memory), "local"
# (per thread) and FRAGMENT, a tile spread over the threads (core/ir/layout.py).
FRAGMENT = "local.fragment"


def buffer_scope(buffer) -> str:
    return str(buffer.ty.storage_scope) or "global"


def buffer_shape(buffer) -> tuple:
    return tuple(buffer.ty.shape)


def buffer_dtype(buffer) -> str:
    return str(buffer.ty.dtype)


def encode_region(buffer, mins, extents=None):
    load = tvm.tirx.BufferLoad(buffer, list(mins))
    return call("tl.region", load, *(extents or ()))


def decode_region(expr) -> Region:
    assert is_tile_call(expr, "tl.region"), expr
    load, *extents = items(expr.args)
    return Region(load.source, tuple(items(load.indices)), tuple(extents) or None)


def barrier():
    """The statement `threadgroup_barrier(mem_flags::mem_threadgroup)`."""
    return tvm.tirx.Evaluate(call("tl.threadgroup_barrier", dtype="int32"))


def is_barrier(stmt) -> bool:
    return _is_evaluate(stmt) and is_tile_call_any(stmt.value,
                                                                    "tl.threadgroup_barrier")


def is_tile_call_any(node, name: str) -> bool:
    return _is_call(node) and _is_op(node.op) and node.op.name == name


@dataclass(frozen=True)
class Atomic:
    """A decoded `tl.atomic(kind, dst_element, value)` call."""

    kind: str               # "add" | "max" | "min" | "or" | "load" | "store"
    element: object         # BufferLoad of the updated element
    value: object

    @property
    def buffer(self):
        return self.element.source


def atomic_call(kind: str, element, value):
    return call("tl.atomic", tvm.ir.StringImm(kind), element, value,
                dtype=buffer_dtype(element.source))


def decode_atomic(expr) -> Atomic | None:
    if not is_tile_call_any(expr, "tl.atomic"):
        return None
    kind, element, value = expr.args
    return Atomic(str(kind.value), element, value)


@dataclass(frozen=True)
class AccessPointer:
    """A pointer made by T.access_ptr: `tl.access_ptr(address_of(element), mask, extent)`,
    printed as the address. `mask` 1 read, 2 write, 3 both (TileLang's access mask);
    `extent` the elements from `element` on that the pointer's user touches, 0 when the
    kernel did not say (then any element of the buffer)."""
    element: object          # the BufferLoad the pointer points at
    reads: bool
    writes: bool
    extent: int


def access_pointer(node) -> AccessPointer | None:
    """The AccessPointer of a `tl.access_ptr` call, else None."""
    if not is_tile_call_any(node, "tl.access_ptr"):
        return None
    mask, extent = int(node.args[1].value), int(node.args[2].value)
    return AccessPointer(node.args[0].args[0], bool(mask & 1), bool(mask & 2), extent)
