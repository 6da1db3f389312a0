"""Fragment layout: which thread holds which element of a `T.alloc_fragment` tile.

The model ("blocked cyclic"): the tile's elements, in row-major order, are cut into runs
of `vec` consecutive elements; runs are dealt to the holders round-robin.

    element with flat index f  ->  holder (f // vec) % threads
                                   slot   (f // (vec * threads)) * vec + f % vec

so holder h keeps `slots` elements in a private array, slot s being the element
    f = ((s // vec) * threads + h) * vec + s % vec.

`vec` is the largest of 4, 2, 1 dividing the tile's last extent, so a run never crosses a
row and a run of a row-major global tile is contiguous in memory (vectorizable).
A `T.Parallel` loop over the same extents spreads its iterations the same way (iteration
f runs on the thread holding element f), which is why a Parallel loop, a copy to or from
the fragment and a reduction over it agree without any data movement: every thread only
touches its own slots.

Replicated layouts (the result of a reduction, core/transform/lower_reduce.py). Unless
stated otherwise a holder is a thread (`threads` = the threadgroup size). A replicated
layout has `2 ** rep_bits` threads per holder: the thread-id bits
[rep_lo, rep_lo + rep_bits) do not select the holder, so thread t is holder

    holder(t) = (t >> (rep_lo + rep_bits)) << rep_lo  |  t & (2 ** rep_lo - 1)

and `threads` = threadgroup size / 2 ** rep_bits; every thread of a holder keeps the same
copy of its elements, at the same slots. `reduce_layout(src, dim)` picks the layout of a
reduction's destination from the source's layout: the replicated bits are the thread-id
bits in which the threads holding the inputs of one output element differ (widened to a
contiguous range), so those threads are exactly the XOR butterfly group that combines the
output, and after the butterfly each of them holds the output, where the layout says.
The destination's `vec` is the largest candidate for which every input element's thread
holds its output.
A thread count that is not a power of two but whole simdgroups (96, 384, 896) also takes
the *partial top range* [rep_lo, top), top = the thread count's bit length: every thread
with the same low bits [0, rep_lo) is a replica of one of `2 ** rep_lo` holders, each
holder having `threads >> rep_lo` replicas (fewer than `2 ** rep_bits`; `group` records
the threadgroup size then). So a row spread over all 896 threads reduces into a layout of
one holder that every thread replicates. Other thread counts (48) get only the ranges
whose `2 ** hi` divides them, and an error where none fits.
Consequences the lowering relies on:
  - a `T.Parallel` over the source's extents that reads `dst[i]` (the reduced index
    dropped) reads a local slot: the thread running iteration (i, j) holds dst[i];
    `broadcast_ok` checks this at compile time for any loop layout and fragment;
  - a loop, copy or fill over the destination itself runs on every replica (each
    updates its own copy); stores to threadgroup or device memory from it are made by
    one replica only, the owner (replica bits all zero), so each element is stored once.
"""

from __future__ import annotations

from dataclasses import dataclass
from math import prod

import numpy as np
from tvm import tirx

from core.target import METAL


class NoLayout(Exception):
    """No layout satisfies the request; the message says why (callers add the context)."""


def _pow2(n: int) -> bool:
    """Power of two: then // and % by it are >> and & (floor semantics, negatives too)."""
    return n > 0 and n & (n - 1) == 0


def run_width(extents) -> int:
    """The layout's `vec` for a tile (or loop nest) of `extents` (ints)."""
    last = int(extents[-1])
    for v in (4, 2, 1):
        if last % v == 0:
            return v
    return 1


@dataclass(frozen=True)
class FragmentLayout:
    shape: tuple
    threads: int            # holders: the threadgroup size unless replicated
    vec: int
    rep_lo: int = 0         # replicated thread-id bits [rep_lo, rep_lo + rep_bits)
    rep_bits: int = 0
    group: int = 0          # the threadgroup size when the top replica range is partial

    @classmethod
    def for_tile(cls, shape, threads: int) -> "FragmentLayout":
        shape = tuple(int(s) for s in shape)
        return cls(shape, threads, run_width(shape))

    @classmethod
    def replicate(cls, shape, holders: int, vec: int, lo: int, nbits: int,
                  group: int) -> "FragmentLayout":
        """A layout replicated over the thread-id bits [lo, lo + nbits) in a threadgroup of
        `group` threads; `group` is kept only when the bits reach past it (partial top)."""
        partial = nbits and group < holders << nbits
        return cls(tuple(shape), holders, vec, lo, nbits, group if partial else 0)

    @property
    def size(self) -> int:
        return prod(self.shape)

    @property
    def runs(self) -> int:
        return -(-self.size // self.vec)

    @property
    def rounds(self) -> int:
        """Runs per holder (the last round may leave some holders idle)."""
        return -(-self.runs // self.threads)

    @property
    def slots(self) -> int:
        return self.rounds * self.vec

    @property
    def replicas(self) -> int:
        """Threads per holder (fewer than 2 ** rep_bits when the top range is partial)."""
        return self.thread_count // self.threads

    @property
    def replicated(self) -> bool:
        return self.rep_bits > 0

    @property
    def thread_count(self) -> int:
        """Threads of the threadgroup the layout is for."""
        return self.group or self.threads << self.rep_bits

    def thread_of(self, flat):
        """Holder of element `flat` (ints or numpy arrays)."""
        if _pow2(self.vec) and _pow2(self.threads):  # the same, 10x faster on arrays
            return (flat >> (self.vec.bit_length() - 1)) & (self.threads - 1)
        return (flat // self.vec) % self.threads

    def slot_of(self, flat):
        if _pow2(self.vec) and _pow2(self.threads):
            block = (self.vec * self.threads).bit_length() - 1
            return ((flat >> block) << (self.vec.bit_length() - 1)) + (flat & (self.vec - 1))
        return (flat // (self.vec * self.threads)) * self.vec + flat % self.vec

    def flat_of(self, thread: int, slot: int) -> int:
        return ((slot // self.vec) * self.threads + thread) * self.vec + slot % self.vec

    def holder(self, tid):
        """Holder of thread `tid` (ints or numpy arrays)."""
        if not self.replicated:
            return tid
        lo, hi = self.rep_lo, self.rep_lo + self.rep_bits
        return ((tid >> hi) << lo) | (tid & ((1 << lo) - 1))

    def thread(self, holder, replica):
        """Thread number `replica` of `holder` (inverse of `holder`)."""
        if not self.replicated:
            return holder  # replica 0, the only one
        lo, hi = self.rep_lo, self.rep_lo + self.rep_bits
        return ((holder >> lo) << hi) | (replica << lo) | (holder & ((1 << lo) - 1))

    # ---- the same maps as TIR expressions (tid: the linear thread index) ----------------
    def holder_expr(self, tid):
        if not self.replicated:
            return tid
        lo, hi = self.rep_lo, self.rep_lo + self.rep_bits
        high = tirx.floordiv(tid, 1 << hi)
        return high if lo == 0 else high * (1 << lo) + tirx.floormod(tid, 1 << lo)

    def owner_expr(self, tid):
        """True on the one replica of each holder that stores to shared/device memory."""
        replica = tid if self.rep_lo == 0 else tirx.floordiv(tid, 1 << self.rep_lo)
        return tirx.floormod(replica, 1 << self.rep_bits) == 0

    def slot_expr(self, flat):
        if self.threads == 1:
            return flat
        lane = tirx.floormod(flat, self.vec) if self.vec > 1 else None
        block = self.vec * self.threads
        if block >= self.size:              # a single round
            return lane if lane is not None else tirx.const(0, "int32")
        base = tirx.floordiv(flat, block) * self.vec
        return base + lane if lane is not None else base


def _gathered_index(shape, dims, extents):
    """For every element of a tile of `shape`, in row-major order: the flat index, in a tile
    of `extents`, of the element whose k-th index is the element's index along dims[k]
    (0 for a dim of None). Built by broadcasting, without dividing flat indices."""
    out = np.zeros((1,) * len(shape), dtype=np.int64)
    for d, extent in zip(dims, extents):
        out = out * extent
        if d is not None:
            out = out + np.arange(shape[d], dtype=np.int64).reshape(
                [shape[d] if k == d else 1 for k in range(len(shape))])
    return np.broadcast_to(out, shape).ravel()


def _out_index(shape, dims):
    """Flat index, in the shape without `dims`, of the output each element (row-major)
    reduces into."""
    kept = [d for d in range(len(shape)) if d not in dims]
    return _gathered_index(shape, kept, [shape[d] for d in kept])


def _reduction_pairs(src: FragmentLayout, dims, outputs: int):
    """(out, tid, first): the distinct (output element, thread) pairs of a reduction of a
    fragment laid out as `src` over `dims`, in no particular order, and per output element
    (row-major over the kept dims) the flat index of its first input element.

    Everything `reduce_layout` decides is a property of these pairs (an OR over them, a
    test that holds for each), and a long row has far fewer pairs than elements (a
    vocabulary of 152k elements over 256 threads: 256). When the reduced dims are the
    trailing ones, output o reads the M consecutive elements o * M .. o * M + M - 1, and M
    of at least vec x threads consecutive elements are held by every thread, so the pairs
    need no enumeration; otherwise every element is enumerated, then deduplicated."""
    shape, ndim = src.shape, len(src.shape)
    k = ndim - len(dims)
    row = prod(shape[k:])
    if sorted(dims) == list(range(k, ndim)) and row >= src.vec * src.threads \
            and prod(shape[:k]) == outputs:
        out = np.repeat(np.arange(outputs, dtype=np.int64), src.threads)
        tid = np.tile(np.arange(src.threads, dtype=np.int64), outputs)
        return out, tid, np.arange(outputs, dtype=np.int64) * row
    flat = np.arange(src.size, dtype=np.int64)
    out = _out_index(shape, dims)
    tid = src.thread_of(flat)
    first = np.full(outputs, src.size, dtype=np.int64)
    np.minimum.at(first, out, flat)
    if outputs * src.threads < out.size:    # deduplicate through a table of every pair
        seen = np.zeros(outputs * src.threads, dtype=bool)
        seen[out * src.threads + tid] = True
        pairs = np.flatnonzero(seen)
        out, tid = pairs // src.threads, pairs % src.threads
    return out, tid, first


def reduce_layout(src: FragmentLayout, dim, dst_shape) -> FragmentLayout:
    """Layout of the destination of a reduction of a fragment laid out as `src` over `dim`
    (an int, or a tuple of dims), see the module docstring; raises NoLayout when the
    threadgroup cannot host it."""
    dims = (dim,) if isinstance(dim, int) else tuple(dim)
    threads = src.threads
    if threads <= 0:
        raise NoLayout(f"the threadgroup has {threads} threads; it needs at least one")
    if src.replicated and src.threads == 1:
        # every thread holds the whole source (one holder): each reduces its own copy, and
        # holds the whole result the same way; no thread exchanges anything
        dst_shape = tuple(int(d) for d in dst_shape)
        return FragmentLayout.replicate(dst_shape, 1, run_width(dst_shape), src.rep_lo,
                                        src.rep_bits, src.group or threads << src.rep_bits)
    if src.replicated:
        raise NoLayout("the source is itself replicated (a reduction result) over part of "
                       "the threads; reduce a fragment laid out over all threads, or one "
                       "every thread holds whole")
    dst_shape = tuple(int(d) for d in dst_shape)
    out, tid, first = _reduction_pairs(src, dims, prod(dst_shape))
    mask = int(np.bitwise_or.reduce(tid ^ src.thread_of(first)[out])) if tid.size else 0
    lo = (mask & -mask).bit_length() - 1 if mask else 0
    hi = mask.bit_length()
    top = threads.bit_length()
    whole = threads % METAL.simd_width == 0     # whole simdgroups: partial top ranges work
    if mask and threads % (1 << hi) and not whole:
        raise NoLayout(
            f"the threads holding one output element differ in thread-id bits {lo}..{hi - 1}, "
            f"so they combine in groups of {1 << (hi - lo)} spanning {1 << hi} threads, but "
            f"the threadgroup has {threads} threads, not a multiple of {1 << hi} nor of the "
            f"simdgroup width {METAL.simd_width}; use a power-of-two thread count, a "
            f"multiple of {METAL.simd_width} (or a tile whose rows fit the threads evenly)")
    vecs = sorted({run_width(dst_shape), src.vec if len(src.shape) - 1 not in dims else 1, 1},
                  reverse=True)
    # The narrowest bit range first; widening it (up to every thread holding every output)
    # covers outputs whose threads are spread too unevenly for the round-robin of holders.
    ranges = [(lo, h) for h in range(hi, top) if threads % (1 << h) == 0]
    ranges += [(0, h) for h in range(hi, top) if lo and threads % (1 << h) == 0]
    if threads & (threads - 1) and whole:
        # Not a power of two: bits [l, top) group every thread with the same low bits, each
        # group `threads >> l` threads (no more than 2 ** (top - l) ids: a partial range)
        ranges += [(low, top) for low in dict.fromkeys((lo, 0)) if threads % (1 << low) == 0]
    for lo, hi in ranges:
        for vec in vecs:
            layout = FragmentLayout.replicate(dst_shape, max(threads >> hi, 1) << lo, vec, lo,
                                              hi - lo, threads)
            if dst_shape[-1] % vec == 0 and \
                    np.array_equal(layout.thread_of(out), layout.holder(tid)):
                return layout
    raise NoLayout("no replicated layout keeps every output element on the threads that "
                   "hold its inputs; use a power-of-two thread count or a multiple of "
                   f"{METAL.simd_width}")


def broadcast_ok(loop: FragmentLayout, frag: FragmentLayout, dims) -> bool:
    """True if every thread running an iteration of a loop nest laid out as `loop` holds
    the element `frag[idx[dims[0]], idx[dims[1]], ...]` the iteration reads (`idx` the
    iteration's indices; a dim of None stands for the constant index 0)."""
    if loop.thread_count != frag.thread_count:
        return False
    flat = np.arange(loop.size, dtype=np.int64)
    elem = _gathered_index(loop.shape, dims, frag.shape)
    want = frag.thread_of(elem)
    holder = loop.thread_of(flat)
    for r in range(loop.replicas):
        if not np.array_equal(frag.holder(loop.thread(holder, r)), want):
            return False
    return True


def broadcast_dims(indices, loop_vars, shape):
    """Loop dims a fragment access `F[indices]` inside a T.Parallel over `loop_vars` reads
    (see `broadcast_ok`): each index is a loop variable, in loop order, or the constant 0
    on a unit extent; None if the access has another form."""
    dims, last = [], -1
    for index, extent in zip(indices, shape):
        pos = next((k for k, v in enumerate(loop_vars) if index.same_as(v)), None)
        if pos is None:
            if not (isinstance(index, tirx.IntImm) and index.value == 0 and int(extent) == 1):
                return None
        elif pos <= last:
            return None
        else:
            last = pos
        dims.append(pos)
    return tuple(dims) if len(dims) == len(shape) else None
