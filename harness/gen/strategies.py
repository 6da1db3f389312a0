"""Small named Hypothesis builders shared by the kernel families (harness/gen/<family>.py).

Each family's `params()` composes these into one params dict; keeping the pieces here
gives every family the same notion of "a ragged extent", "a thread count", "a tile" and
"a dtype", and one place to change how they shrink (toward small sizes, the first
dtype, the first thread count).

Each builder returns one strategy object per distinct arguments, built on the first call:
Hypothesis validates a new strategy object and computes its properties on its first draw,
which costs more than the draw itself, and the families ask for their strategies again on
every case. Reuse changes nothing drawn: the same choices give the same values.

    sampled_from(choices)        st.sampled_from(choices), reused: how the families draw
                                 from a list of choices
    extent(lo, hi)               a size; any integer, so tiles are ragged more often than not
    multiple_of(step, lo, hi)    a size that is a multiple of `step` (GEMM's 8)
    tile(choices)                a tile extent from `choices` (powers of two by default)
    threads(choices)             threads per threadgroup: THREADS (powers of two, 32..256)
                                 or THREADS_ANY (also 1, 48, 96, 512 and [x, y(, z)] lists)
    reduce_threads()             the thread counts users give reductions, by class: powers
                                 of two 32..1024, partial simdgroups 1..16, other multiples
                                 of 32 (96..992) and the pipeline limits 768 and 896
    dtype(choices)               a dtype name ("float32", ...): FLOATS, INTS, NUMERIC
                                 (HALVES: the 16-bit floats; the suites name these lists
                                 rather than spelling them out again)
    fits_threadgroup(...)        whether tiles of given dtypes fit in 32 KiB
    row_tiles(long_rows)         the row-wise reductions' common params (softmax, rmsnorm,
                                 layernorm): M, N, dtype, bM whole rows, threads; with
                                 `long_rows`, one case in four has rows past the register
                                 budget per thread (streamed by core/transform/stream_rows.py)
    compile_route()              how a case reaches its kernel (harness/check/route.py): call
                                 path, compile options, math mode, cache state

This module registers no family (harness/gen/family.py skips it when loading families).
"""

from __future__ import annotations

import functools

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
# What users hard-code: powers of two, the pipeline limits some Apple GPUs report for a
# kernel (768, 896: 24 and 28 simdgroups), any whole number of simdgroups, and fewer threads
# than a simdgroup. Each class is one branch, so every class is drawn often.
POWERS_OF_TWO = (32, 64, 128, 256, 512, 1024)
PARTIAL_SIMDGROUPS = (1, 2, 4, 8, 16)
PIPELINE_LIMITS = METAL.pipeline_limits
TILES = (4, 8, 16, 32, 64)


def is_float(dtype: str) -> bool:
    return dtype.startswith(("float", "bfloat"))


_SAMPLED: dict[str, st.SearchStrategy] = {}


def sampled_from(choices):
    """st.sampled_from(tuple(choices)), one object per distinct `choices`. Keyed by repr:
    exact for the JSON-able values params hold, where tuple equality is not
    (1 == True == 1.0), and defined for THREADS_ANY, whose lists are unhashable."""
    choices = tuple(choices)
    key = repr(choices)
    strategy = _SAMPLED.get(key)
    if strategy is None:
        strategy = _SAMPLED[key] = st.sampled_from(choices)
    return strategy


@functools.lru_cache(maxsize=None, typed=True)
def extent(lo: int = 1, hi: int = 96):
    """A tensor extent in [lo, hi]; shrinks toward `lo`."""
    return st.integers(lo, hi)


@functools.lru_cache(maxsize=None, typed=True)
def multiple_of(step: int, lo: int, hi: int):
    """A multiple of `step` in [lo, hi] (e.g. GEMM dims that are multiples of 8)."""
    return st.integers(-(-lo // step), hi // step).map(lambda k: k * step)


def tile(choices=TILES):
    return sampled_from(choices)


def threads(choices=THREADS):
    return sampled_from(choices)


@functools.cache
def reduce_threads():
    """A thread count a reduction takes (docs/architecture.md, "Reductions"): a power of
    two, a partial simdgroup, a multiple of 32 that is not a power of two, or a pipeline
    limit; shrinks toward 32."""
    width = METAL.simd_width
    simdgroups = st.integers(3, METAL.max_threads_per_group // width - 1).map(
        lambda k: k * width).filter(lambda n: n & (n - 1))
    return st.one_of(sampled_from(POWERS_OF_TWO), sampled_from(PARTIAL_SIMDGROUPS),
                     simdgroups, sampled_from(PIPELINE_LIMITS))


def dtype(choices=NUMERIC):
    return sampled_from(choices)


def fits_threadgroup(*tiles) -> bool:
    """`tiles` are (elements, dtype) pairs of one kernel's shared buffers."""
    return sum(n * DTYPES[d].bytes for n, d in tiles) <= METAL.threadgroup_memory_bytes


# A row fragment a thread holds past this many float32s is streamed (stream_rows: each
# thread holds 4-element runs; the budget is METAL.fragment_register_budget_bytes).
HELD_FLOATS = METAL.fragment_register_budget_bytes // 4


@functools.lru_cache(maxsize=None, typed=True)
@st.composite
def row_tiles(draw, long_rows: bool = False):
    """M x N (ragged in M), a float dtype, bM whole rows per threadgroup, reduce_threads()
    threads: the params the row-wise reduction families share (each adds its own). With
    `long_rows`, one case in four has rows just past what a thread may hold (up to a
    quarter more), over at most two row blocks, so the streamed lowering is reached at
    every thread count (a 896-thread softmax row is then ~43000-54000 long)."""
    bM, n_threads = draw(tile((1, 2, 4, 8))), draw(reduce_threads())
    if long_rows and draw(st.integers(0, 3)) == 0:
        lo = HELD_FLOATS * n_threads // bM + 1
        return {"M": draw(extent(1, 2 * bM)), "N": draw(extent(lo, lo + lo // 4)),
                "dtype": draw(dtype(FLOATS)), "bM": bM, "threads": n_threads}
    return {"M": draw(extent(1, 40)), "N": draw(extent(1, 160)), "dtype": draw(dtype(FLOATS)),
            "bM": bM, "threads": n_threads}


# ---- how a case reaches its kernel (harness/check/route.py runs it) ----------------------

# Passes a kernel must come out right without (harness/check/route.py); the others are
# required, or (thread_sync) their absence is a race the checks must report.
NEUTRAL_PASSES = ("vectorize", "stream_rows", "fold_temporaries")
# pass_configs a user passes that act (disable vectorize) or are accepted as no-ops on Metal
PASS_CONFIGS = ({}, {"tirx.disable_vectorize": True}, {"tl.enable_fast_math": True},
                {"tl.disable_tma_lower": True, "tl.disable_warp_specialized": True})
CALL_PATHS = ("compile", "jit_prim_func", "jit_factory", "par_compile")
CACHE_STATES = ("cold", "memory", "disk", "twin")
MATH_MODES = ("safe", "fast")      # what the MPS backend compiles in (METAL.math_mode_in_effect)


_DISABLED_PASSES = st.sets(sampled_from(NEUTRAL_PASSES), max_size=2)


@functools.cache
@st.composite
def compile_options(draw):
    """Options of one core.compile: passes switched off, pass_configs."""
    return {"disable": sorted(draw(_DISABLED_PASSES)),
            "pass_configs": draw(sampled_from(PASS_CONFIGS))}


@functools.cache
@st.composite
def compile_route(draw):
    """How a user gets the case's kernel: the call path, the compile options, the math
    mode, and the cache state (cold; warm in memory, warm on disk, or a structurally equal
    function compiled before, each by an earlier compile with the options `before`).
    Shrinks toward core.compile, cold, no options."""
    route = {"path": draw(sampled_from(CALL_PATHS)), "cache": draw(sampled_from(CACHE_STATES)),
             **draw(compile_options()), "math_mode": draw(sampled_from(MATH_MODES))}
    if route["cache"] != "cold":
        route["before"] = draw(compile_options())
    return route
