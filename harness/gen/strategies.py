"""Small named Hypothesis builders shared by the kernel families (harness/gen/<family>.py).

Each family's `params()` composes these into one params dict; keeping the pieces here
gives every family the same notion of "a ragged extent", "a thread count", "a tile" and
"a dtype", and one place to change how they shrink (toward small sizes, the first
dtype, the first thread count).

    extent(lo, hi)               a size; any integer, so tiles are ragged more often than not
    multiple_of(step, lo, hi)    a size that is a multiple of `step` (GEMM's 8)
    tile(choices)                a tile extent from `choices` (powers of two by default)
    threads(choices)             threads per threadgroup: THREADS (powers of two, 32..256)
                                 or THREADS_ANY (also 1, 48, 96, 512 and [x, y(, z)] lists)
                                 or THREADS_REDUCE (the reductions': powers of two 1..512
                                 and whole simdgroups 96, 384, 896)
    dtype(choices)               a dtype name ("float32", ...): FLOATS, INTS, NUMERIC
                                 (HALVES: the 16-bit floats; the suites name these lists
                                 rather than spelling them out again)
    fits_threadgroup(...)        whether tiles of given dtypes fit in 32 KiB
    row_tiles()                  the row-wise reductions' common params (softmax, rmsnorm,
                                 layernorm): M, N, dtype, bM whole rows, threads

This module registers no family (harness/gen/family.py skips it when loading families).
"""

from __future__ import annotations

from hypothesis import strategies as st

from core.target import DTYPES, METAL

FLOATS = ("float32", "float16", "bfloat16")
HALVES = ("float16", "bfloat16")        # the 16-bit floats (round after every op)
INTS = ("int32", "int8", "uint8")
NUMERIC = FLOATS + INTS
THREADS = (32, 64, 128, 256)
# Also partial simdgroups, non-powers of two and 2-D/3-D threadgroups (JSON lists), for
# kernels whose work distribution does not assume a power of two.
THREADS_ANY = THREADS + (1, 48, 96, 512, [32, 4], [16, 8], [8, 2, 2])
# The reduction families' thread counts: powers of two (partial simdgroups among them) and
# whole simdgroups that are not (896 = 28 simdgroups, MLX's fit for a hidden size of 3584).
THREADS_REDUCE = (32, 64, 128, 256, 1, 16, 512, 96, 384, 896)
TILES = (4, 8, 16, 32, 64)


def is_float(dtype: str) -> bool:
    return dtype.startswith(("float", "bfloat"))


def extent(lo: int = 1, hi: int = 96):
    """A tensor extent in [lo, hi]; shrinks toward `lo`."""
    return st.integers(lo, hi)


def multiple_of(step: int, lo: int, hi: int):
    """A multiple of `step` in [lo, hi] (e.g. GEMM dims that are multiples of 8)."""
    return st.integers(-(-lo // step), hi // step).map(lambda k: k * step)


def tile(choices=TILES):
    return st.sampled_from(tuple(choices))


def threads(choices=THREADS):
    return st.sampled_from(tuple(choices))


def dtype(choices=NUMERIC):
    return st.sampled_from(tuple(choices))


def fits_threadgroup(*tiles) -> bool:
    """`tiles` are (elements, dtype) pairs of one kernel's shared buffers."""
    return sum(n * DTYPES[d].bytes for n, d in tiles) <= METAL.threadgroup_memory_bytes


@st.composite
def row_tiles(draw):
    """M x N (ragged in M), a float dtype, bM whole rows per threadgroup, THREADS_REDUCE
    threads: the params the row-wise reduction families share (each adds its own)."""
    return {
        "M": draw(extent(1, 40)), "N": draw(extent(1, 160)), "dtype": draw(dtype(FLOATS)),
        "bM": draw(tile((1, 2, 4, 8))), "threads": draw(threads(THREADS_REDUCE)),
    }
