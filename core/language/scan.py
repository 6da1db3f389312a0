"""`T.cumsum` / `T.cummax`: TileLang's inclusive scans, on Metal's simdgroup functions.

    T.cumsum(src, dst=None, dim=0, reverse=False)   dst[.., i, ..] = sum of src[.., :i+1, ..]
    T.cummax(src, dst=None, dim=0, reverse=False)   the running maximum (values only)

As in TileLang: `dst` defaults to `src` (in place), `dim` may be negative, `reverse` scans
from the end; operands are whole buffers or tiles of one or two dimensions (`A`,
`A[i0:i1, j0:j1]`) of the same shape; `src` and `dst` in threadgroup memory, or `src` a
fragment, which is staged through a threadgroup copy of its shape and copied to `dst` (a
fragment or threadgroup tile) after the scan. Device tensors and per-thread arrays are
refused (TileLang's lowering has no form for them either).

The scan is emitted here as per-thread TIR, so the barrier planner sees exact footprints:
each simdgroup takes a line (a row or column along `dim`) in segments of 32 elements,
lane k holding element k of the segment:
  * cumsum: `simd_prefix_inclusive_sum`; cummax: a Hillis-Steele scan of 5 steps of
    `simd_shuffle_up` (MSL has no prefix maximum);
  * a segment adds the previous segment's last value (its carry, `simd_shuffle` of the
    last lane); a lane past the line's end contributes the identity (0, or -inf / the
    dtype's lowest value);
  * when there are fewer lines than simdgroups, several simdgroups share one line: each
    takes one segment of a chunk, writes its segment's total to a threadgroup array and
    after a barrier adds the totals of the segments before its own (the threadgroup step
    across simdgroups).
float16 and bfloat16 accumulate in float32 and round once on the store; int32 and uint32
wrap as in C; 64-bit and 8/16-bit integers are refused (MSL's simd scans and shuffles take
32-bit-or-narrower values and a narrow integer sum overflows).
"""

from __future__ import annotations

import tvm
from tvm import tirx
from tvm.tirx.script.builder import ir as _ir

from core.errors import KernelDefinitionError
from core.ir import ops
from core.ir.ops import FRAGMENT
from core.ir.stmt import as_int
from core.language.kernel import _current
from core.language.tileops import _region, copy
from core.language.warp import thread_id
from core.target import METAL

WARP = METAL.simd_width
SCAN_DTYPES = ("float32", "float16", "bfloat16", "int32", "uint32")


def _operand(x, construct, role):
    r = ops.decode_region(_region(x, f"{construct} {role}"))
    shape = list(r.buffer.ty.shape)
    extents = list(r.extents) if r.extents is not None else shape[len(r.mins) - len(shape):]
    if r.extents is None and any(as_int(m) != 0 for m in r.mins):
        raise KernelDefinitionError(
            f"the {role} {x!r} gives a tile origin without extents; allowed: the whole "
            "buffer or a tile with explicit extents (A[i0:i1, j0:j1])", construct=construct)
    return r.buffer, list(r.mins), extents


def _identity(kind, dtype):
    if kind == "sum":
        return tirx.const(0, dtype)
    if dtype.startswith("float"):
        return tirx.const(float("-inf"), dtype)
    return tirx.min_value(dtype)


def _combine(kind, a, b):
    return a + b if kind == "sum" else tirx.max(a, b)


def _inclusive(kind, val, lane, seg, dtype):
    """val[0] := its inclusive scan over lanes 0..seg-1 of the simdgroup. Every lane runs
    every shuffle (a shuffle inside a select's branch would be divergent)."""
    v = tirx.BufferLoad(val, [0])
    if kind == "sum":
        _ir.buffer_store(val, ops.call("tl.simd_prefix_inclusive_sum", v, dtype=dtype), [0])
        return
    up = _local(dtype, "scan_up")
    off = 1
    while off < seg:
        _ir.buffer_store(up, ops.call("tl.simd_shuffle_up", v, tirx.IntImm("int32", off),
                                      dtype=dtype), [0])
        _ir.buffer_store(val, tirx.Select(lane >= off, tirx.max(v, tirx.BufferLoad(up, [0])),
                                          v), [0])
        off *= 2


def _local(dtype, name):
    buf = _ir.alloc_buffer((1,), dtype, scope="local")
    tvm.script.ir_builder.IRBuilder.name(name, buf)
    return buf


def _scan(kind, src, dst, dim, reverse, construct):
    kernel = _current(construct)
    s_buf, s_min, s_ext = _operand(src, construct, "source")
    d_buf, d_min, d_ext = (s_buf, s_min, s_ext) if dst is None else \
        _operand(dst, construct, "destination")
    rank = len(s_ext)
    if isinstance(dim, tirx.IntImm):
        dim = int(dim.value)
    if isinstance(dim, bool) or not isinstance(dim, int) or not -rank <= dim < rank:
        raise KernelDefinitionError(
            f"dim={dim!r} is out of range for a {rank}-D operand; allowed: an int in "
            f"[{-rank}, {rank})", construct=construct)
    dim %= rank
    if rank not in (1, 2):
        raise KernelDefinitionError(
            f"a {rank}-D operand: scans take 1-D or 2-D buffers or tiles (as TileLang's)",
            construct=construct)
    se, de = [as_int(e) for e in s_ext], [as_int(e) for e in d_ext]
    if None in se or se != de:
        raise KernelDefinitionError(
            f"source extents {list(s_ext)} and destination extents {list(d_ext)} must be "
            "equal compile-time constants", construct=construct)
    dtype = ops.buffer_dtype(s_buf)
    for buf in (s_buf, d_buf):
        if ops.buffer_dtype(buf) not in SCAN_DTYPES:
            raise KernelDefinitionError(
                f"'{buf.name}' has dtype {ops.buffer_dtype(buf)}; allowed: "
                f"{', '.join(SCAN_DTYPES)} (MSL's simd scans and shuffles take 32-bit or "
                "narrower values)", construct=construct)
    if ops.buffer_dtype(d_buf) != dtype:
        raise KernelDefinitionError(
            f"source dtype {dtype} and destination dtype {ops.buffer_dtype(d_buf)} differ",
            construct=construct)
    s_scope, d_scope = s_buf.ty.storage_scope, d_buf.ty.storage_scope
    if s_scope == FRAGMENT:
        if d_scope not in (FRAGMENT, "shared"):
            raise KernelDefinitionError(
                f"the destination '{d_buf.name}' is in '{d_scope}' memory; a fragment's "
                "scan goes to a fragment or threadgroup tile", construct=construct)
        stage = _ir.alloc_buffer(se, dtype, scope="shared")
        tvm.script.ir_builder.IRBuilder.name(f"{s_buf.name}_scan", stage)
        copy(src, stage)
        _emit(kind, stage, [0] * rank, stage, [0] * rank, se, dim, reverse, kernel)
        copy(stage, d_buf if dst is None else dst)
        return
    if s_scope != "shared" or d_scope != "shared":
        bad = s_buf if s_scope != "shared" else d_buf
        raise KernelDefinitionError(
            f"'{bad.name}' is in '{bad.ty.storage_scope}' memory; allowed: threadgroup "
            "tiles (T.alloc_shared) for both operands, or a fragment source (staged "
            "through threadgroup memory); copy a device tensor in first",
            construct=construct)
    _emit(kind, s_buf, s_min, d_buf, d_min, se, dim, reverse, kernel)


def _emit(kind, s_buf, s_min, d_buf, d_min, ext, dim, reverse, kernel):
    kernel_construct = "T.cumsum" if kind == "sum" else "T.cummax"
    dtype = ops.buffer_dtype(s_buf)
    cdtype = "float32" if dtype in ("float16", "bfloat16") else dtype
    threads = 1
    for t in kernel.threads:
        threads *= t
    seg = min(WARP, threads)
    warps = max(1, threads // WARP)
    n = ext[dim]
    lines = 1 if len(ext) == 1 else ext[1 - dim]
    per_line = warps // lines if lines < warps else 1     # simdgroups sharing a line
    groups = warps // per_line                            # lines scanned at once
    tid = thread_id(kernel_construct)
    lane = tirx.floormod(tid, WARP) if threads > WARP else tid
    warp = tirx.floordiv(tid, WARP) if threads > WARP else tirx.const(0, "int32")
    grp, part = tirx.floordiv(warp, per_line), tirx.floormod(warp, per_line)
    chunk = per_line * seg
    # the carry is read from the segment's last lane; a partial last simdgroup (threads
    # not a multiple of 32) takes no part but reads its own last lane, which exists
    last_lane = tirx.IntImm("int32", seg - 1)
    if threads > WARP and threads % WARP:
        last_lane = tirx.Select(warp < warps, last_lane,
                                tirx.IntImm("int32", threads % WARP - 1))
    ident = _identity(kind, cdtype)

    def index(mins, line, pos):
        p = (n - 1 - pos) if reverse else pos
        if len(ext) == 1:
            return [mins[0] + p]
        return [mins[0] + p, mins[1] + line] if dim == 0 else [mins[0] + line, mins[1] + p]

    def to(d, x):
        return x if d == str(x.ty.dtype) else tirx.Cast(d, x)

    partial = None
    if per_line > 1:
        partial = _ir.alloc_buffer((groups * per_line,), cdtype, scope="shared")
        tvm.script.ir_builder.IRBuilder.name("scan_partial", partial)
    carry, val = _local(cdtype, "scan_carry"), _local(cdtype, "scan_val")
    if partial is not None:
        sums = _local(cdtype, "scan_before"), _local(cdtype, "scan_total")
    with _ir.serial(0, (lines + groups - 1) // groups) as r:
        line = r * groups + grp
        _ir.buffer_store(carry, ident, [0])
        with _ir.serial(0, (n + chunk - 1) // chunk) as c:
            pos = c * chunk + part * seg + lane
            ok = tirx.all(warp < groups * per_line, line < lines, pos < n)
            _ir.buffer_store(val, ident, [0])
            with _ir.If(ok):
                with _ir.Then():
                    _ir.buffer_store(val, to(cdtype, tirx.BufferLoad(
                        s_buf, index(s_min, line, pos))), [0])
            _inclusive(kind, val, lane, seg, cdtype)
            s = tirx.BufferLoad(val, [0])
            carried = tirx.BufferLoad(carry, [0])
            if partial is None:
                _ir.buffer_store(val, _combine(kind, s, carried), [0])
                out = tirx.BufferLoad(val, [0])
                with _ir.If(ok):
                    with _ir.Then():
                        _ir.buffer_store(d_buf, to(dtype, out), index(d_min, line, pos))
                _ir.buffer_store(carry, ops.call("tl.simd_shuffle", out, last_lane,
                                                 dtype=cdtype), [0])
            else:
                _scan_across(kind, val, partial, sums, carry, lane, warp, grp, part, seg,
                             groups, per_line, ok, d_buf, dtype, index(d_min, line, pos))


def _scan_across(kind, val, partial, partial_sums, carry, lane, warp, grp, part, seg,
                 groups, per_line, ok, d_buf, dtype, d_index):
    """The threadgroup step: segment totals through `partial`, added in line order."""
    def to(d, x):
        return x if d == str(x.ty.dtype) else tirx.Cast(d, x)

    with _ir.If(tirx.all(lane == seg - 1, warp < groups * per_line)):
        with _ir.Then():
            _ir.buffer_store(partial, tirx.BufferLoad(val, [0]), [warp])
    before, total = partial_sums
    cdtype = ops.buffer_dtype(val)
    ident = _identity(kind, cdtype)
    carried = tirx.BufferLoad(carry, [0])
    _ir.buffer_store(before, ident, [0])
    _ir.buffer_store(total, ident, [0])
    first = tirx.min(grp, groups - 1) * per_line
    with _ir.serial(0, per_line) as q:
        t = tirx.BufferLoad(partial, [first + q])
        _ir.buffer_store(before, tirx.Select(
            q < part, _combine(kind, tirx.BufferLoad(before, [0]), t),
            tirx.BufferLoad(before, [0])), [0])
        _ir.buffer_store(total, _combine(kind, tirx.BufferLoad(total, [0]), t), [0])
    out = _combine(kind, _combine(kind, tirx.BufferLoad(val, [0]),
                                  tirx.BufferLoad(before, [0])), carried)
    with _ir.If(ok):
        with _ir.Then():
            _ir.buffer_store(d_buf, to(dtype, out), d_index)
    _ir.buffer_store(carry, _combine(kind, carried, tirx.BufferLoad(total, [0])),
                     [0])


def cumsum(src, dst=None, dim=0, reverse=False, annotations=None):
    """Inclusive cumulative sum of `src` along `dim` into `dst` (default: in place)."""
    _scan("sum", src, dst, dim, reverse, "T.cumsum")


def cummax(src, dst=None, dim=0, reverse=False, annotations=None):
    """Inclusive running maximum of `src` along `dim` into `dst` (default: in place)."""
    _scan("max", src, dst, dim, reverse, "T.cummax")
