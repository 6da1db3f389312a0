"""The lowering decisions a compile made: at each decision point, which choice it took.

A decision point is a place in a pass that picks one of several lowerings for what it is
given (a reduction combined by `simd_sum` or by a shuffle butterfly, a row streamed or
held whole). The pass that decides notes its choice as the string "point=choice" on the
PrimFunc it returns (`note`), in the function attribute `tl.decisions`
(core/ir/annotations.py); later passes keep function attributes, split_host_device
copies the set into the `LoweredProgram`, and
core.jit into the compiled program, where `kernel.decisions` reads it (sorted, each
choice once). So what a kernel exercised is what the compiler decided, not what a test
guesses from its parameters. The harness counts them per fuzz case and steers drawing
toward the ones not reached yet (docs/fuzzing.md).

POINTS lists every point with the pass that decides it and the choices it can make; a
test checks that every choice noted by a compile is listed here. Adding a point: one
entry here, and one `note(func, ...)` (or `KernelContext.decide`) where the pass chooses.
"""

from __future__ import annotations

from core.ir.annotations import DECISIONS
from core.target import METAL

# point -> (the pass that decides, its choices)
POINTS = {
    "threads": ("lower_tile_ops", ("power_of_two", "partial_simdgroup", "whole_simdgroups",
                                   "pipeline_limit", "not_whole_simdgroups")),
    "reduce.in_simdgroup": ("lower_tile_ops (lower_reduce)", ("simd_reduce", "butterfly")),
    "reduce.across_simdgroups": ("lower_tile_ops (lower_reduce)",
                                 ("lanes_read_partials", "first_simdgroup_combines",
                                  "every_thread_reads_partials", "first_simdgroup_folds",
                                  "broadcast_to_local")),
    "reduce.top_range": ("lower_tile_ops (lower_reduce)", ("whole", "partial")),
    "reduce.online": ("lower_tile_ops (lower_reduce)", ("in_simdgroup", "across_simdgroups")),
    "reduce.serial": ("lower_tile_ops (lower_reduce)", ("local_source", "replicated_source")),
    "reduce.allreduce": ("lower_tile_ops (lower_reduce)", ("in_simdgroup",
                                                           "across_simdgroups")),
    "stream_rows": ("stream_rows", ("online_softmax", "reductions", "ragged_chunk")),
    "gemm.accumulator": ("lower_tile_ops (lower_gemm)", ("fragment", "shared", "device")),
    "gemm.store": ("lower_tile_ops (lower_gemm)", ("direct", "edges_staged", "staged",
                                                   "staged_in_chunks")),
    "gemm.shared_accumulator": ("lower_tile_ops (lower_gemm)", ("held_across_k",
                                                                "per_call")),
    "atomics": ("split_host_device", ("add", "max", "min", "or", "load", "store")),
    "atomics.form": ("split_host_device (as the MSL printer prints it)",
                     ("native", "compare_exchange")),
    "atomics.space": ("split_host_device", ("device", "threadgroup")),
    "vector.lanes": ("vectorize", ("none", "2", "3", "4", "8", "16")),
    "barrier": ("thread_sync", ("none", "straight_line", "in_if", "in_loop")),
    "host": ("split_host_device", ("one_launch", "launches", "loop", "if", "workspaces",
                                   "scalars_per_launch")),
}


def choice(point: str, value) -> str:
    """The string noted for `value` chosen at `point` (ValueError for an unknown one)."""
    value = str(value)
    if point not in POINTS or value not in POINTS[point][1]:
        raise ValueError(f"decision {point}={value} is not listed in core/ir/decisions.POINTS")
    return f"{point}={value}"


def thread_class(threads: int) -> str:
    """The `threads` point's class of a thread count: the pipeline limits some Apple GPUs
    report (METAL.pipeline_limits: 768, 896), else a power of two of whole simdgroups,
    fewer threads than a simdgroup, whole simdgroups that are not a power of two, or a
    last simdgroup only partly filled."""
    width = METAL.simd_width
    if threads in METAL.pipeline_limits:
        return "pipeline_limit"
    if threads < width:
        return "partial_simdgroup"
    if threads & (threads - 1) == 0:
        return "power_of_two"
    return "whole_simdgroups" if threads % width == 0 else "not_whole_simdgroups"


def noted(func) -> tuple:
    """The decisions noted on `func` so far, sorted."""
    attrs = getattr(func, "attrs", None) or {}
    return tuple(sorted(str(d) for d in attrs.get(DECISIONS, ())))


def note(func, decisions):
    """`func` with `decisions` ("point=choice" strings from `choice`) added to its set."""
    from core.ir.kernel import with_attr

    new = set(decisions) - set(noted(func))
    if not new:
        return func
    return with_attr(func, DECISIONS, sorted(set(noted(func)) | new))
