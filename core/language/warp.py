"""TileLang's warp-level constructs on Metal's simdgroup functions.

A CUDA warp and an Apple simdgroup are both 32 lanes (`METAL.simd_width`), and Metal forms
simdgroups from consecutive linear thread indices of the threadgroup, as CUDA forms warps,
so lane and warp of a thread are the same numbers on both:

    T.get_lane_idx(warp_size=None)       linear thread id % warp_size (default 32: Metal's
                                         thread_index_in_simdgroup)
    T.get_warp_idx(warp_size=None)       linear thread id // warp_size (default 32:
    T.get_warp_idx_sync(...)             simdgroup_index_in_threadgroup)
    T.shfl_xor(v, mask, width, lanemask) simd_shuffle_xor(v, mask)
    T.shfl_down(v, delta, ...)           simd_shuffle_down(v, delta)  (the top delta lanes
                                         keep their own value, as on CUDA)
    T.shfl_up(v, delta, ...)             simd_shuffle_up(v, delta)
    T.shfl_sync(v, src_lane, ...)        simd_shuffle(v, src_lane % width)
    T.warp_reduce_sum/max/min(v)         simd_sum / simd_max / simd_min
    T.warp_reduce_bitand/bitor(v)        simd_and / simd_or (integers)
    T.ballot(p), T.ballot_sync(p, mask)  ulong(simd_ballot(p)): uint64, bit i = lane i
    T.any_sync(p, mask), T.all_sync(..)  int(simd_any(p)) / int(simd_all(p)): int32
    T.activemask()                       ulong(simd_active_threads_mask()): uint64

The lane and warp indices are arithmetic on the thread index, not the builtins, so the
barrier planner's exact footprints still see which thread touches what.

Where CUDA and Metal differ, what metaltile does:
  * `width` (CUDA: shuffle within groups of `width` lanes) is a compile-time power of two
    up to 32; below 32 the shuffle is `simd_shuffle(v, source lane)` with CUDA's source
    lane (a lane whose source would leave its group keeps its own value).
  * A delta or mask that is not a compile-time constant also takes that form (MSL needs
    the delta of simd_shuffle_up/down/xor to be the same on every lane; CUDA does not).
  * The lane mask of the `_sync` forms: Metal's simdgroup functions take part of the
    *active* lanes, with no mask. The full mask 0xFFFFFFFF (the default) and
    `T.activemask()` (the active lanes themselves) mean exactly that; any other mask is a
    KernelDefinitionError rather than a silently ignored argument.
  * Reductions, votes and ballots combine the active lanes; where a threadgroup's last
    simdgroup is partial (threads not a multiple of 32), that is the lanes that exist.
  * Value dtypes: the 32-bit-or-narrower ones MSL's simd functions take; bfloat16 moves
    and reduces as float32 (exact for a move; a sum rounds once); 64-bit integers shuffle
    as the two halves of a uint2; a 64-bit warp reduction is rejected (use T.reduce_*).
"""

from __future__ import annotations

import tvm
from tvm import tirx

from core.errors import KernelDefinitionError
from core.ir import ops
from core.ir.stmt import as_int
from core.language.kernel import _current
from core.target import DTYPES, METAL

WARP = METAL.simd_width
FULL_MASK = (1 << WARP) - 1


def _expr(value, construct):
    if isinstance(value, bool):
        return tirx.const(value, "bool")
    if isinstance(value, int):
        return tirx.const(value, "int32")
    if isinstance(value, float):
        return tirx.const(value, "float32")
    if isinstance(value, tvm.ir.Expr):
        return value
    raise KernelDefinitionError(f"{value!r} is not a value (an expression or a number)",
                                construct=construct)


def thread_id(construct: str):
    """The linear thread index of the current T.Kernel (x fastest, as Metal's
    thread_index_in_threadgroup)."""
    kernel = _current(construct)
    tid, stride = None, 1
    for var, extent in zip(kernel.thread_vars, kernel.threads):
        if extent == 1:
            continue
        term = var if stride == 1 else var * stride
        tid = term if tid is None else tid + term
        stride *= extent
    return tid if tid is not None else tirx.const(0, "int32")


def _warp_size(warp_size, construct):
    if warp_size is None:
        return WARP
    if isinstance(warp_size, tirx.IntImm):
        warp_size = int(warp_size.value)
    if isinstance(warp_size, bool) or isinstance(warp_size, int) and warp_size <= 0:
        raise KernelDefinitionError(f"warp_size={warp_size!r} must be a positive int",
                                    construct=construct)
    return warp_size


def get_lane_idx(warp_size=None):
    """The lane of the calling thread: linear thread id % warp_size (32 by default)."""
    construct = "T.get_lane_idx"
    return tirx.floormod(thread_id(construct), _warp_size(warp_size, construct))


def get_warp_idx(warp_size=None):
    """The warp (simdgroup) of the calling thread: linear thread id // warp_size."""
    construct = "T.get_warp_idx"
    return tirx.floordiv(thread_id(construct), _warp_size(warp_size, construct))


def get_warp_idx_sync(warp_size=None):
    """As T.get_warp_idx (simdgroups need no convergence for it)."""
    construct = "T.get_warp_idx_sync"
    return tirx.floordiv(thread_id(construct), _warp_size(warp_size, construct))


def lane(construct):
    return tirx.floormod(thread_id(construct), WARP)


def _check_mask(mask, construct):
    if mask is None:
        return
    if ops.is_tile_call_any(mask, "tl.simd_active_threads_mask"):
        return
    if isinstance(mask, tirx.Cast) and ops.is_tile_call_any(mask.value,
                                                            "tl.simd_active_threads_mask"):
        return
    value = mask if isinstance(mask, int) else as_int(mask)
    if value is not None and value & FULL_MASK == FULL_MASK:
        return
    raise KernelDefinitionError(
        f"mask={mask!r}: Metal's simdgroup functions combine the active lanes and take no "
        "lane mask; allowed: the full mask 0xFFFFFFFF (the default) or T.activemask() "
        "(make the lanes you mean the active ones with an `if`)", construct=construct)


def _check_width(width, construct) -> int:
    w = width if isinstance(width, int) else as_int(width)
    if isinstance(w, bool) or w is None or not 1 <= w <= WARP or w & (w - 1):
        raise KernelDefinitionError(
            f"width={width!r} must be a compile-time power of two from 1 to {WARP} (the "
            "simdgroup is 32 lanes)", construct=construct)
    return w


def _mover(value, construct):
    """(value as a type simd functions move, its dtype, back to the original dtype)."""
    dtype = str(value.ty.dtype)
    if dtype in METAL.simd_shuffle_dtypes:
        return value, dtype, lambda x: x
    if dtype == "bfloat16":
        return tirx.Cast("float32", value), "float32", lambda x: tirx.Cast(dtype, x)
    if dtype in DTYPES and DTYPES[dtype].is_integer and DTYPES[dtype].bits == 64:
        return (tirx.reinterpret("uint32x2", value), "uint32x2",
                lambda x: tirx.reinterpret(dtype, x))
    raise KernelDefinitionError(
        f"a value of dtype {dtype} cannot move between lanes; allowed: "
        f"{', '.join(METAL.simd_shuffle_dtypes)}, bfloat16 (as float32), int64/uint64 (as "
        "two 32-bit halves)", construct=construct)


def _shuffle(kind, value, amount, width, mask, construct):
    _check_mask(mask, construct)
    w = _check_width(width, construct)
    value = _expr(value, construct)
    amount = _expr(amount, construct)
    if not DTYPES.get(str(amount.ty.dtype)) or not DTYPES[str(amount.ty.dtype)].is_integer:
        raise KernelDefinitionError(f"the lane argument {amount} must be an integer",
                                    construct=construct)
    moved, dtype, back = _mover(value, construct)
    const = as_int(amount)
    if const is not None and not 0 <= const < WARP and kind != "sync":
        raise KernelDefinitionError(
            f"{'mask' if kind == 'xor' else 'delta'} {const} must lie in [0, {WARP})",
            construct=construct)
    native = {"xor": "tl.simd_shuffle_xor", "up": "tl.simd_shuffle_up",
              "down": "tl.simd_shuffle_down"}
    if kind in native and w == WARP and const is not None:
        return back(ops.call(native[kind], moved, tirx.IntImm("int32", const), dtype=dtype))
    if kind == "sync" and w == WARP:
        src = tirx.IntImm("int32", const % WARP) if const is not None else \
            tirx.bitwise_and(tirx.Cast("int32", amount), WARP - 1)
        return back(ops.call("tl.simd_shuffle", moved, src, dtype=dtype))
    # CUDA's source lane within groups of w lanes; a lane whose source leaves its group
    # (or the simdgroup) reads itself
    me = lane(construct)
    amount = tirx.Cast("int32", amount) if str(amount.ty.dtype) != "int32" else amount
    base = me - tirx.floormod(me, w)
    if kind == "sync":
        src = base + tirx.floormod(amount, w)
    elif kind == "up":
        src = tirx.Select(tirx.floormod(me, w) >= amount, me - amount, me)
    elif kind == "down":
        src = tirx.Select(tirx.floormod(me, w) + amount < w, me + amount, me)
    else:
        other = tirx.bitwise_xor(me, amount)
        src = tirx.Select(other < base + w, other, me)
    return back(ops.call("tl.simd_shuffle", moved, src, dtype=dtype))


def shfl_xor(value, delta, width=WARP, mask=None):
    """The value of lane (lane ^ delta) (CUDA __shfl_xor_sync)."""
    return _shuffle("xor", value, delta, width, mask, "T.shfl_xor")


def shfl_down(value, delta, width=WARP, mask=None):
    """The value of lane (lane + delta); the top delta lanes keep theirs."""
    return _shuffle("down", value, delta, width, mask, "T.shfl_down")


def shfl_up(value, delta, width=WARP, mask=None):
    """The value of lane (lane - delta); the lowest delta lanes keep theirs."""
    return _shuffle("up", value, delta, width, mask, "T.shfl_up")


def shfl_sync(value, srcLane, width=WARP, mask=None):  # noqa: N803 (TileLang's name)
    """The value of lane `srcLane % width` of the caller's group of `width` lanes."""
    return _shuffle("sync", value, srcLane, width, mask, "T.shfl_sync")


_WARP_REDUCE = {"sum": "tl.simd_sum", "max": "tl.simd_max", "min": "tl.simd_min",
                "bitand": "tl.simd_and", "bitor": "tl.simd_or", "bitxor": "tl.simd_xor"}


def warp_reduce(kind, value, construct):
    """`value` combined over the active lanes of the simdgroup, on every lane."""
    value = _expr(value, construct)
    dtype = str(value.ty.dtype)
    if kind.startswith("bit") and not (dtype in DTYPES and DTYPES[dtype].is_integer):
        raise KernelDefinitionError(f"a bitwise reduction takes integers, not {dtype}",
                                    construct=construct)
    if dtype == "bfloat16":
        return tirx.Cast(dtype, ops.call(_WARP_REDUCE[kind], tirx.Cast("float32", value),
                                         dtype="float32"))
    if dtype not in METAL.simd_shuffle_dtypes or dtype == "bool":
        raise KernelDefinitionError(
            f"dtype {dtype}: MSL's simd reductions take 32-bit or narrower values; allowed: "
            f"{', '.join(d for d in METAL.simd_shuffle_dtypes if d != 'bool')}, bfloat16 "
            "(T.reduce_* combines 64-bit values with shuffles)", construct=construct)
    return ops.call(_WARP_REDUCE[kind], value, dtype=dtype)


def warp_reduce_sum(value):
    """The sum of `value` over the simdgroup (simd_sum)."""
    return warp_reduce("sum", value, "T.warp_reduce_sum")


def warp_reduce_max(value):
    """The maximum of `value` over the simdgroup (simd_max)."""
    return warp_reduce("max", value, "T.warp_reduce_max")


def warp_reduce_min(value):
    """The minimum of `value` over the simdgroup (simd_min)."""
    return warp_reduce("min", value, "T.warp_reduce_min")


def warp_reduce_bitand(value):
    """The bitwise and of `value` over the simdgroup (simd_and)."""
    return warp_reduce("bitand", value, "T.warp_reduce_bitand")


def warp_reduce_bitor(value):
    """The bitwise or of `value` over the simdgroup (simd_or)."""
    return warp_reduce("bitor", value, "T.warp_reduce_bitor")


def _predicate(pred, construct):
    pred = _expr(pred, construct)
    dtype = str(pred.ty.dtype)
    if dtype == "bool":
        return pred
    if dtype in DTYPES and DTYPES[dtype].is_integer:
        return pred != tirx.const(0, dtype)
    raise KernelDefinitionError(f"the predicate must be an integer or bool, not {dtype}",
                                construct=construct)


def ballot(predicate):
    """uint64: bit i set if active lane i's predicate is non-zero (simd_ballot)."""
    _current("T.ballot")
    return ops.call("tl.simd_ballot", _predicate(predicate, "T.ballot"), dtype="uint64")


def ballot_sync(predicate, mask=None):
    """T.ballot over the lanes of `mask` (the full mask or T.activemask())."""
    _check_mask(mask, "T.ballot_sync")
    _current("T.ballot_sync")
    return ops.call("tl.simd_ballot", _predicate(predicate, "T.ballot_sync"), dtype="uint64")


def any_sync(predicate, mask=None):
    """int32: 1 if any active lane's predicate is non-zero (simd_any), else 0."""
    _check_mask(mask, "T.any_sync")
    _current("T.any_sync")
    return tirx.Cast("int32", ops.call("tl.simd_any", _predicate(predicate, "T.any_sync"),
                                       dtype="bool"))


def all_sync(predicate, mask=None):
    """int32: 1 if every active lane's predicate is non-zero (simd_all), else 0."""
    _check_mask(mask, "T.all_sync")
    _current("T.all_sync")
    return tirx.Cast("int32", ops.call("tl.simd_all", _predicate(predicate, "T.all_sync"),
                                       dtype="bool"))


def activemask():
    """uint64: bit i set if lane i of the simdgroup is active (simd_active_threads_mask)."""
    _current("T.activemask")
    return ops.call("tl.simd_active_threads_mask", dtype="uint64")
