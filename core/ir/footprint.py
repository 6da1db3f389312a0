"""Footprints: the exact set of (threadgroup element, thread) pairs an access touches.

An access `S[index]` inside a kernel is a function of the thread indices and the
enclosing loop variables. When all of them have constant ranges, `Footprint.of`
enumerates the index over every combination of the thread indices and of the loops the
index (or a guard) reads, with numpy (vector accesses contribute their
`lanes` consecutive elements) and records which thread touches which element. When the
index depends on anything else (block indices, parameters, loaded values, loops with
symbolic bounds) the footprint is `unknown`, which callers treat as "may touch anything";
its threads may still be known: `single_thread` is the one thread making the access when
the guards (enumerated over the thread indices and constant-range loops) leave one (a
section `for z in T.Parallel(1)` runs under `if (v < 1)`).
A simdgroup matrix load/store (`Footprint.of_tile`) touches its whole 8x8 tile at each
point, as one unit per simdgroup.

`may_race(a, b)`: could two *different* threads touch one element, one of them writing?
Two accesses that one and the same thread makes never race, whatever their elements.
Two atomic updates (`atomic=True`, T.atomic_*) never race with each other; an atomic and a
plain access do.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from math import prod

import numpy as np
import tvm
from tvm import tirx

from core.ir.stmt import as_int, free_vars
from core.target import METAL

MAX_POINTS = 1 << 22


@dataclass(frozen=True)
class LoopRange:
    var: object
    extent: int
    start: int = 0      # the variable runs over start .. start + extent - 1


class _Points:
    """The enumerated points of one access, computed on first use and shared by the
    access's carried-over views: most accesses are only ever compared with accesses of
    other buffers, or with reads, and never need their points."""
    __slots__ = ("compute", "value", "summary")

    def __init__(self, compute):
        self.compute = compute
        self.value = self
        self.summary = None

    def get(self):
        """(elements, threads, loops) or None (unknown)."""
        if self.value is self:
            self.value, self.compute = self.compute(), None
        return self.value


@dataclass
class Footprint:
    buffer: object
    write: bool
    size: int = 0
    # Per point (the properties below): the flat element index, the linear thread id, and
    # the value of each enumerated enclosing loop variable (var -> array). `match`: the
    # variables two accesses may be matched on, by handle (None: all of them). Two
    # accesses in one iteration of a loop only meet at equal values of its variable; an
    # access carried over from the previous iteration is not matched on it (nor on the
    # loops inside it), see `carried_over`.
    match: frozenset | None = None
    atomic: bool = False                   # an atomic update (a write that orders itself)
    points: _Points | None = field(default=None, repr=False)
    # the linear id of the one thread that makes every point of the access, or None (more
    # than one, or not known); computed on first use, from the guards alone
    single: _Points | None = field(default=None, repr=False)
    loop_vars: tuple = ()                  # the loop variables the points are enumerated on
    # Handles of `buffer` and of `loop_vars`: what comparisons use. A TVM Var's `==`
    # builds an EQ expression, so sets and dicts of Vars cost an FFI call per hit.
    buffer_key: int = field(default=0, repr=False)
    loop_keys: tuple = field(default=(), repr=False)

    def __post_init__(self):
        self.buffer_key = self.buffer.__chandle__()
        self.loop_keys = tuple(v.__chandle__() for v in self.loop_vars)

    @property
    def unknown(self) -> bool:
        return self.points is None or self.points.get() is None

    @property
    def elements(self) -> np.ndarray | None:
        return None if self.unknown else self.points.get()[0]

    @property
    def threads(self) -> np.ndarray | None:
        return None if self.unknown else self.points.get()[1]

    @property
    def loops(self) -> dict:
        return {} if self.unknown else dict(zip(self.loop_vars, self.points.get()[2]))

    @classmethod
    def of(cls, buffer, index, write, thread_axes, loops, guards=(), *,
           atomic=False) -> "Footprint":
        """`thread_axes`: [(var, extent, stride)] of the thread index; `loops`: LoopRange;
        `guards`: conditions the access executes under (points where one is false are
        dropped; a guard that cannot be enumerated is ignored, which only adds points).
        The points are enumerated when a comparison first needs them."""
        fp = cls(buffer, write, size=_flat_size(buffer), atomic=atomic)
        thread_axes, guards = tuple(thread_axes), tuple(guards)
        loops = _used_loops(index, loops, guards)
        if fp.size:
            fp.set_loops(loops)
            fp.points = _Points(lambda: _inside(
                _points(index, thread_axes, loops, guards), fp.size))
        if guards:
            fp.single = _Points(lambda: _single_thread(thread_axes, loops, guards))
        return fp

    @classmethod
    def anywhere(cls, buffer, write, thread_axes, loops, guards=()) -> "Footprint":
        """An access that may touch any element of `buffer` (unknown points), by the
        threads its guards leave (a pointer handed to user MSL with no extent)."""
        fp = cls(buffer, write, size=_flat_size(buffer))
        if guards:
            thread_axes, guards = tuple(thread_axes), tuple(guards)
            loops = _used_loops(tirx.const(0, "int32"), loops, guards)
            fp.single = _Points(lambda: _single_thread(thread_axes, loops, guards))
        return fp

    def single_thread(self) -> int | None:
        """The one thread making this access (known from its guards), or None."""
        if self.single is None:
            return None
        return self.single.get()

    def set_loops(self, loops):
        """Enumerate the points over `loops` (LoopRange)."""
        self.loop_vars = tuple(lp.var for lp in loops)
        self.loop_keys = tuple(v.__chandle__() for v in self.loop_vars)

    def carried_over(self, enclosing) -> "Footprint":
        """This access as seen from the next iteration of a loop: matched only on the
        loop variables whose handles are in `enclosing` (the loops around that loop)."""
        keep = frozenset(k for k in self.loop_keys if k in enclosing)
        match = keep if self.match is None else frozenset(k for k in self.match if k in keep)
        # a field-for-field copy (the planner makes one per pending access and loop)
        copied = object.__new__(Footprint)
        copied.__dict__.update(self.__dict__)
        copied.match = match
        return copied

    @classmethod
    def of_tile(cls, access, thread_axes, loops, guards=(), *, first_unit: int,
                simd_width: int = METAL.simd_width) -> "Footprint":
        """A matrix-tile access (`core.ir.matrix.TileAccess`, a simdgroup_load/store):
        every element {base + r * stride + c : r < rows, c < cols} of the tile at every
        point, done by the simdgroup as a unit. Unit ids `first_unit + tid // simd_width`
        follow the thread ids (pass the thread count), so a tile access never counts as
        the same thread as a plain access, while two accesses of one simdgroup do. The
        access's arguments are uniform over the simdgroup, so when simdgroups are runs of
        the first thread axis only their first lanes are enumerated."""
        fp = cls(access.buffer, access.write, size=_flat_size(access.buffer))
        stride = as_int(access.stride)
        if not fp.size or access.base is None or stride is None:
            return fp
        thread_axes, guards = tuple(thread_axes), tuple(guards)
        loops = _used_loops(access.base, loops, guards)
        fp.set_loops(loops)

        def compute():
            first = thread_axes[0] if thread_axes else None
            sample = simd_width if first is not None and first[2] == 1 and \
                first[1] % simd_width == 0 else 1
            offsets = (np.arange(access.rows, dtype=np.int64)[:, None] * stride
                       + np.arange(access.cols, dtype=np.int64)[None, :]).ravel()
            points = _points(access.base, thread_axes, loops, guards, sample, offsets.size)
            if points is None:
                return None
            elements, tid, values = points
            return _inside(((elements[:, None] + offsets[None, :]).ravel(),
                            np.repeat(first_unit + tid // simd_width, offsets.size),
                            tuple(np.repeat(a, offsets.size) for a in values)),
                           fp.size)

        fp.points = _Points(compute)
        return fp

    def summary(self):
        """(lowest thread, highest thread) per element; sentinel for untouched elements."""
        if self.points.summary is None:
            self.points.summary = _thread_bounds(self.elements, self.threads, self.size)
        return self.points.summary


def _inside(points, size):
    """`points` unless an element lies outside the buffer (then unknown: None)."""
    if points is None:
        return None
    elements = points[0]
    if elements.size and (elements.min() < 0 or elements.max() >= size):
        return None
    return points


def may_race(a: Footprint, b: Footprint) -> bool:
    if a.buffer_key != b.buffer_key or not (a.write or b.write) or (a.atomic and b.atomic):
        return False
    if a.unknown or b.unknown:
        t = a.single_thread()
        return t is None or t != b.single_thread()
    common = [k for k in a.loop_keys if k in b.loop_keys and (a.match is None or k in a.match)
              and (b.match is None or k in b.match)]
    if common:
        return _may_race_matched(a, b, common)
    lo_a, hi_a = a.summary()
    lo_b, hi_b = b.summary()
    both = (hi_a >= 0) & (hi_b >= 0)
    same_single = (lo_a == hi_a) & (lo_b == hi_b) & (lo_a == lo_b)
    return bool(np.any(both & ~same_single))


def _may_race_matched(a, b, common) -> bool:
    """may_race for two accesses in one iteration of the loops `common`: points meet
    only where the element and every common loop variable agree."""
    key_a, key_b = a.elements, b.elements
    loops_a, loops_b = a.points.get()[2], b.points.get()[2]
    radix = max(a.size, 1)
    for k in common:
        va, vb = loops_a[a.loop_keys.index(k)], loops_b[b.loop_keys.index(k)]
        low = int(min(va.min(initial=0), vb.min(initial=0)))
        span = int(max(va.max(initial=0), vb.max(initial=0))) + 1 - low
        key_a = key_a + radix * (va - low)
        key_b = key_b + radix * (vb - low)
        radix *= span
    if radix <= DENSE_KEYS_PER_POINT * (key_a.size + key_b.size) + 4096:
        # Dense per-key arrays: linear in the points, no sort.
        n, inv_a, inv_b = radix, key_a, key_b
    else:
        keys, inverse = np.unique(np.concatenate([key_a, key_b]), return_inverse=True)
        n, inv_a, inv_b = keys.size, inverse[:key_a.size], inverse[key_a.size:]
    lo_a, hi_a = _thread_bounds(inv_a, a.threads, n)
    lo_b, hi_b = _thread_bounds(inv_b, b.threads, n)
    both = (hi_a >= 0) & (hi_b >= 0)
    same_single = (lo_a == hi_a) & (lo_b == hi_b) & (lo_a == lo_b)
    return bool(np.any(both & ~same_single))


DENSE_KEYS_PER_POINT = 8


def _thread_bounds(keys, threads, n):
    """(lowest thread, highest thread) per key in 0..n-1; sentinels for absent keys."""
    lo = np.full(n, np.iinfo(np.int64).max, dtype=np.int64)
    hi = np.full(n, -1, dtype=np.int64)
    np.minimum.at(lo, keys, threads)
    np.maximum.at(hi, keys, threads)
    return lo, hi


def _flat_size(buffer) -> int:
    return (as_int(buffer.ty.shape[0]) or 0) if len(buffer.ty.shape) == 1 else 0


def _used_loops(index, loops, guards) -> tuple:
    """The loops (LoopRange) the index or a guard reads: only those are enumerated. An
    access that does not depend on a loop touches the same (element, thread) pairs in
    every iteration, so matching it on that loop's variable (may_race) decides nothing the
    element alone does not, and enumerating it would multiply the points by the loop's
    extent."""
    used = {v.__chandle__() for v in free_vars(index)}
    for g in guards:
        used.update(v.__chandle__() for v in free_vars(g))
    return tuple(lp for lp in loops if lp.var.__chandle__() in used)


def _points(index, thread_axes, loops, guards, sample=1, per_point=1, strict=False):
    """(element, linear thread id, (value of each loop's variable)) of every enumerated
    point where all guards hold, or None when `index` cannot be enumerated. `loops`: the
    loops to enumerate (`_used_loops`). The first thread axis steps by `sample`. A guard
    that cannot be enumerated is ignored, or with `strict` makes the answer None."""
    axes = [(v, e, sample if k == 0 else 1, 0) for k, (v, e, _) in enumerate(thread_axes)]
    axes += [(lp.var, lp.extent, 1, lp.start) for lp in loops]
    if prod(-(-e // step) for _, e, step, _ in axes) * per_point > MAX_POINTS:
        return None
    env = {}
    ndim = len(axes)
    for k, (v, e, step, start) in enumerate(axes):
        shape = [1] * (ndim + 1)
        shape[k] = -(-e // step)
        env[v.__chandle__()] = start + np.arange(0, e, step, dtype=np.int64).reshape(shape)
    elements = _eval(index, env, ndim)
    if elements is None:
        return None
    tid = np.zeros([1] * (ndim + 1), dtype=np.int64)
    for v, _, stride in thread_axes:
        tid = tid + env[v.__chandle__()] * stride
    keep = np.ones([1] * (ndim + 1), dtype=bool)
    for g in guards:
        mask = _eval(g, env, ndim)
        if mask is not None:
            keep = keep & np.asarray(mask, dtype=bool)
        elif strict:
            return None
    arrays = np.broadcast_arrays(elements, tid, keep, *(env[lp.var.__chandle__()]
                                                        for lp in loops))
    elements, tid, keep = arrays[:3]
    if keep.all():  # no point dropped: a row-major copy, much cheaper than a mask
        pick = np.ravel
    else:
        def pick(a):
            return a[keep]
    return pick(elements), pick(tid), tuple(pick(a) for a in arrays[3:])


def _single_thread(thread_axes, loops, guards):
    """The linear thread id of the one thread for which the guards hold at some point of
    the thread indices and `loops` (the guards' own constant-range loops), or None (none,
    several, or a guard that cannot be enumerated: then every thread may pass it)."""
    used = set()
    for g in guards:
        used.update(v.__chandle__() for v in free_vars(g))
    loops = [lp for lp in loops if lp.var.__chandle__() in used]
    points = _points(tirx.IntImm("int32", 0), thread_axes, loops, guards, strict=True)
    if points is None:
        return None
    threads = np.unique(points[1])
    return int(threads[0]) if threads.size == 1 else None


_BINARY = {
    "Add": np.add, "Sub": np.subtract, "Mul": np.multiply,
    "FloorDiv": np.floor_divide, "FloorMod": np.mod,
    "Min": np.minimum, "Max": np.maximum,
    "LT": np.less, "LE": np.less_equal, "GT": np.greater, "GE": np.greater_equal,
    "EQ": np.equal, "NE": np.not_equal, "And": np.logical_and, "Or": np.logical_or,
}


def _eval(e, env, ndim):
    """Integer value of `e` over the enumeration grid (`env`: variable handle -> values),
    or None if not enumerable."""
    if isinstance(e, tirx.IntImm):
        return np.bool_(e.value) if str(e.ty.dtype) == "bool" else np.int64(e.value)
    if isinstance(e, tvm.ir.Var):
        return env.get(e.__chandle__())
    name = type(e).__name__
    if name in _BINARY:
        a, b = _eval(e.a, env, ndim), _eval(e.b, env, ndim)
        if a is None or b is None:
            return None
        if name in ("FloorDiv", "FloorMod") and np.any(b == 0):
            return None
        return _BINARY[name](a, b)
    if name == "Ramp":
        base = _eval(e.base, env, ndim)
        stride = _eval(e.stride, env, ndim)
        lanes = as_int(e.lanes)
        if base is None or stride is None or lanes is None:
            return None
        lane = np.arange(lanes, dtype=np.int64).reshape([1] * ndim + [lanes])
        return base + stride * lane
    if name == "Not":
        a = _eval(e.a, env, ndim)
        return None if a is None else np.logical_not(a)
    if name == "Broadcast":
        return _eval(e.value, env, ndim)
    if name == "Cast" and str(e.ty.dtype).startswith("int"):
        return _eval(e.value, env, ndim)
    return None


def exact_elements(index, thread_axes, loops, guards=()) -> np.ndarray | None:
    """The elements an access makes, over every thread and point of `loops` (LoopRange)
    where all `guards` hold, when the index and every guard can be enumerated; else None
    (never an over-estimate: a guard that cannot be enumerated is an unknown answer)."""
    guards = tuple(guards)
    points = _points(index, tuple(thread_axes), _used_loops(index, loops, guards), guards,
                     strict=True)
    return None if points is None else points[0]
