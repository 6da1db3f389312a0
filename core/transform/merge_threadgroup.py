"""Pass `merge_threadgroup`: threadgroup buffers whose lifetimes do not overlap share bytes.

Expects: the fully lowered, flattened kernels after `thread_sync` (every threadgroup
buffer, the user's `T.alloc_shared` and the lowerings' own stages such as `red_buf` or
T.gemm's staging buffers, is an AllocBuffer in scope "shared" with a constant size; the
barriers each buffer needs for itself are placed).
Guarantees: a kernel whose threadgroup buffers total at most
`METAL.threadgroup_memory_bytes` is left exactly as it was (its MSL does not change). A
kernel whose buffers total more gets one arena, an AllocBuffer of 16-byte words
(`tg_arena`, annotated `tl.threadgroup_arena`) at the start of its body, and each of its
threadgroup buffers becomes a view of it at a byte offset (its AllocBuffer annotated
`tl.arena_offset`; the printer declares `threadgroup T* b = (threadgroup T*)((threadgroup
uchar*)tg_arena + offset)`). Lifetimes are counted in the kernel body's top-level
statements: a buffer is live from the first to the last top-level statement that names it
(a loop naming it is wholly inside its life), and two buffers live in no common statement
may get overlapping bytes (offsets first-fit, largest buffer first, 16-byte aligned).
Inside a top-level serial loop whose bounds every thread computes alike, a buffer named
only there whose values never cross an iteration is live from the first to the last body
statement naming it (core/ir/liveness.py, `timeline`), so a tile dead before a reduction's
stage in the same iteration shares its bytes. Reusing bytes makes a new hazard
`thread_sync` cannot see, since it keys accesses by buffer: the last access of the old
buffer and the first of the new, by different threads, to the same bytes. So wherever a
buffer's bytes overlap one that died before it, a barrier stands at the top level between
the old buffer's last statement and the new one's first: one `thread_sync` placed there
already, else one inserted right before the first (the fewest that cover every such pair).
Two lives in one loop body need two: one in the body between the old buffer's last
statement and the new one's first, and one between the new one's last and the old one's
first statement of the next iteration (inserted before the latter, at the body's start
when that is where it is first used). The top level, and the body of such a loop, runs on
every thread, so every thread reaches it. The pair is judged by byte ranges, not by which
thread touches which bytes, so a reuse where each thread only ever touches bytes it
touched before would get a barrier no race needs (harness.check.barriers would report it
redundant; none of the kernels in the suites is so). It runs after thread_sync for that
reason too: the barriers thread_sync places for each buffer are known, and reused where
they already separate the two lives. Lifetimes come from core/ir/liveness.py, which verify
reads too.

Errors (LoweringError): the most threadgroup bytes live at once (at one top-level
statement) past the limit, naming those buffers and their bytes; or, rarely, live bytes
that fit but no packing found that does.

Why not TVM's `s_tir.transform.MergeSharedMemoryAllocations` (tried, with
`tirx.merge_static_smem`): it moves the threadgroup allocation between the blockIdx and
threadIdx launches, rewrites every vector index into `Ramp + Broadcast(0)`, and makes each
buffer a `decl_buffer`/`view` of a uint8 array: the MSL of every kernel would change, the
printer declares no such views, and it places no barriers (TVM leaves that to its own
thread-sync, which works on the merged storage; ours works per buffer and runs before).
"""

from __future__ import annotations

from tvm import tirx

from core.errors import LoweringError
from core.ir import ops
from core.ir.annotations import ARENA_OFFSET, THREADGROUP_ARENA
from core.ir.kernel import func_name, map_kernels
from core.ir.liveness import nbytes, peak, threadgroup_allocs, timeline, top_level
from core.ir.stmt import children, i32, rebuild, seq
from core.target import METAL

ALIGN = 16           # bytes: the widest vector access (uint4, float4)
ARENA = "tg_arena"


def _pack(bufs, life, size) -> dict | None:
    """Byte offsets, first fit, largest first; None when the arena would exceed the limit."""
    placed = {}
    for b in sorted(bufs, key=lambda b: (-size[b], life[b])):
        lo, hi = life[b]
        taken = sorted((placed[o], placed[o] + size[o]) for o in placed
                       if life[o][0] <= hi and lo <= life[o][1])
        off = 0
        for a, e in taken:
            if off + size[b] <= a:
                break
            off = max(off, -(-e // ALIGN) * ALIGN)
        if off + size[b] > METAL.threadgroup_memory_bytes:
            return None
        placed[b] = off
    return placed


def merge_kernel(nest, kernel):
    allocs = threadgroup_allocs(nest.body)
    size = {a.buffer.__chandle__(): nbytes(a.buffer) for a in allocs}
    limit = METAL.threadgroup_memory_bytes
    if sum(size.values()) <= limit:
        return nest.wrap(nest.body)
    names = {a.buffer.__chandle__(): a.buffer.name for a in allocs}
    stmts = top_level(nest.body)
    axes, stride = [], 1
    for var, extent in zip(nest.thread_vars, nest.threads):
        axes.append((var, extent, stride))
        stride *= extent
    tl = timeline(stmts, {a.buffer.__chandle__(): a.buffer for a in allocs}, axes)
    life = tl.life
    most, at = peak(tl.slots, life, size)
    if most > limit:
        live = ", ".join(f"'{names[k]}' ({size[k]} bytes)"
                         for k in sorted(at, key=lambda k: -size[k]))
        raise LoweringError(f"the threadgroup buffers live at once, {live}, total {most} "
                            f"bytes and exceed the {limit} bytes of threadgroup memory "
                            "(buffers whose lives do not overlap already share bytes); use "
                            "smaller tiles or fewer threads per row",
                            kernel=kernel, construct="threadgroup memory")
    offsets = _pack(list(size), life, size)
    if offsets is None:
        raise LoweringError(f"the threadgroup buffers ({', '.join(names.values())}) fit "
                            f"{limit} bytes at every point ({most} at most) but could not "
                            "be packed into them; use smaller tiles",
                            kernel=kernel, construct="threadgroup memory")
    arena_bytes = max(offsets[k] + size[k] for k in size)
    before, inside = _reuse_barriers(stmts, tl, size, offsets)
    arena = tirx.decl_buffer((-(-arena_bytes // ALIGN) * 4,), "uint32", ARENA, scope="shared")

    def rewrite(s):
        if isinstance(s, tirx.AllocBuffer) and s.buffer.__chandle__() in offsets:
            ann = dict(s.annotations or {})
            ann[ARENA_OFFSET] = i32(offsets[s.buffer.__chandle__()])
            return tirx.AllocBuffer(s.buffer, ann)
        kids = children(s)
        if not kids:
            return s
        new = [rewrite(k) for k in kids]
        return rebuild(s, new) if any(not a.same_as(b) for a, b in zip(new, kids)) else s

    out = [tirx.AllocBuffer(arena, {THREADGROUP_ARENA: i32(arena_bytes)})]
    for i, s in enumerate(stmts):
        if i in before:
            out.append(ops.barrier())
        if inside.get(i):
            body = []
            for j, b in enumerate(tl.bodies[i]):
                if j in inside[i]:
                    body.append(ops.barrier())
                body.append(b)
            s = rebuild(s, [seq(body)])
        out.append(rewrite(s))
    return nest.wrap(seq(out))


def _reuse_barriers(stmts, tl, size, offsets):
    """Where barriers go so that no thread touches reused bytes while another still uses
    them in their old buffer: (top-level indices to put one before, {top index of a loop:
    body indices to put one before}). A pair inside one loop body (both lives there)
    needs one between them in the body and one between the later's last use and the
    earlier's first use of the next iteration; any other pair one at the top level between
    the statements, unless a barrier already stands there."""
    def overlap(x, y):
        return offsets[x] < offsets[y] + size[y] and offsets[y] < offsets[x] + size[x]

    life, slots = tl.life, tl.slots
    pairs = sorted(((life[y][0], life[x][1]), x, y) for x in size for y in size
                   if life[x][1] < life[y][0] <= life[y][1] and overlap(x, y))
    barriers = [i for i, s in enumerate(stmts) if ops.is_barrier(s)]
    body_barriers = {i: {j for j, b in enumerate(body) if ops.is_barrier(b)}
                     for i, body in tl.bodies.items()}
    before, inside = set(), {}

    def ordered(i, lo, hi):
        """A barrier in loop i's body at an index in [lo, hi): existing or placed."""
        return any(lo <= j < hi for j in body_barriers[i] | inside.get(i, set()))

    for (first, last), x, y in pairs:
        (ix, jx), (iy, jy) = slots[last], slots[first]
        if ix == iy and jx is not None:
            n = len(tl.bodies[ix])
            if not ordered(ix, jx + 1, jy + 1):
                inside.setdefault(ix, set()).add(jy)
            x_first, y_last = slots[life[x][0]][1], slots[life[y][1]][1]
            if not (ordered(ix, y_last + 1, n) or ordered(ix, 0, x_first + 1)):
                inside.setdefault(ix, set()).add(x_first)
            continue
        if any(ix < j < iy for j in barriers) or any(ix < j <= iy for j in before):
            continue
        before.add(iy)
    return before, inside


def merge_threadgroup(func: tirx.PrimFunc) -> tirx.PrimFunc:
    name = func_name(func, None)
    return map_kernels(func, lambda nest: merge_kernel(nest, name))
