"""Fragment layout: which thread holds which element of a `T.alloc_fragment` tile.

The model ("blocked cyclic"): the tile's elements, in row-major order, are cut into runs
of `vec` consecutive elements; runs are dealt to the threadgroup's threads round-robin.

    element with flat index f  ->  thread (f // vec) % threads
                                   slot   (f // (vec * threads)) * vec + f % vec

so thread t holds `slots` elements in a private array, slot s being the element
    f = ((s // vec) * threads + t) * vec + s % vec.

`vec` is the largest of 4, 2, 1 dividing the tile's last extent, so a run never crosses a
row and a run of a row-major global tile is contiguous in memory (vectorizable).
A `T.Parallel` loop over the same extents spreads its iterations the same way (iteration
f runs on the thread holding element f), which is why a Parallel loop, a copy to or from
the fragment and (later) a reduction over it agree without any data movement: every
thread only touches its own slots.
"""

from __future__ import annotations

from dataclasses import dataclass
from math import prod


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
    threads: int
    vec: int

    @classmethod
    def for_tile(cls, shape, threads: int) -> "FragmentLayout":
        shape = tuple(int(s) for s in shape)
        return cls(shape, threads, run_width(shape))

    @property
    def size(self) -> int:
        return prod(self.shape)

    @property
    def runs(self) -> int:
        return -(-self.size // self.vec)

    @property
    def rounds(self) -> int:
        """Runs per thread (the last round may leave some threads idle)."""
        return -(-self.runs // self.threads)

    @property
    def slots(self) -> int:
        return self.rounds * self.vec

    def thread_of(self, flat: int) -> int:
        return (flat // self.vec) % self.threads

    def slot_of(self, flat: int) -> int:
        return (flat // (self.vec * self.threads)) * self.vec + flat % self.vec

    def flat_of(self, thread: int, slot: int) -> int:
        return ((slot // self.vec) * self.threads + thread) * self.vec + slot % self.vec
