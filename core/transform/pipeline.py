"""The pass pipeline: the table of contents of the compiler.

Each pass is a plain function; all but the last map PrimFunc -> PrimFunc, the last maps
the lowered PrimFunc to a `LoweredProgram` (device kernels + launch plan). `run` applies
them in order; a pass can be switched off (`disable=("vectorize",)`) or replaced
(`replace={"thread_sync": my_pass}`) by name, which the harness uses to check that a
change to one pass is caught. `stop_after` returns the intermediate result. `timings`, a
dict, receives each pass's wall seconds by name (what `harness bench` and compile-time
work read; the cost is one clock read per pass).
"""

from __future__ import annotations

import time

from core.ir.capacity import resolve_declared
from core.ir.kernel import func_name
from core.transform.block_swizzle import block_swizzle
from core.transform.flatten_simplify import flatten_simplify
from core.transform.fold_temporaries import fold_temporaries
from core.transform.global_workspaces import global_workspaces
from core.transform.host_program import host_program
from core.transform.layout_inference import layout_inference
from core.transform.legalize import legalize
from core.transform.lower_tile_ops import lower_tile_ops
from core.transform.merge_threadgroup import merge_threadgroup
from core.transform.resolve_views import resolve_views
from core.transform.stream_rows import stream_rows
from core.transform.split_host_device import split_host_device
from core.transform.thread_sync import thread_sync
from core.transform.vectorize import vectorize
from core.transform.verify import verify

PASSES = (
    ("legalize", legalize),                    # parse markers -> PARALLEL loops
    ("block_swizzle", block_swizzle),          # T.use_swizzle -> remapped block indices
    ("host_program", host_program),            # host scalars -> Binds around the kernels
    ("global_workspaces", global_workspaces),  # T.alloc_global -> workspace parameters
    ("verify", verify),                        # clear errors for ill-formed kernels
    ("stream_rows", stream_rows),              # rows over the register budget -> chunk loops
    ("layout_inference", layout_inference),    # fragments -> (thread, slot)
    ("lower_tile_ops", lower_tile_ops),        # tile ops, T.Parallel -> per-thread loops
    ("resolve_views", resolve_views),          # T.view accesses -> the viewed buffer's
    ("fold_temporaries", fold_temporaries),    # one-reader local arrays -> computed at the read
    ("vectorize", vectorize),                  # proven-safe runs -> vector loads/stores
    ("flatten_simplify", flatten_simplify),    # flat buffers, simplified indices
    ("thread_sync", thread_sync),              # threadgroup barriers where races are possible
    ("merge_threadgroup", merge_threadgroup),  # dead threadgroup bytes reused, past 32 KiB only
    ("split_host_device", split_host_device),  # device kernels + launch plan
)

# Passes whose output the next ones cannot do without (docs/architecture.md gives each reason;
# layout_inference: lower_tile_ops deals fragments to threads by the layouts it infers;
# merge_threadgroup: it checks a kernel's live threadgroup bytes against the limit).
REQUIRED = ("legalize", "block_swizzle", "host_program", "global_workspaces",
            "layout_inference", "lower_tile_ops", "resolve_views", "flatten_simplify",
            "merge_threadgroup", "split_host_device")


def pass_names() -> tuple:
    return tuple(name for name, _ in PASSES)


def run(func, *, out_idx=None, disable=(), replace=None, stop_after=None,
        timings: dict | None = None):
    """Apply the pipeline to a parsed PrimFunc; returns a LoweredProgram (or the
    intermediate PrimFunc when `stop_after` names a pass). With `timings`, a dict, each
    pass run records `timings[name] = seconds` (wall clock).

    Before the passes, the capacity entries a prim_func body declared
    (T.annotate_capacity_dims) get their meaning by role (core/ir/capacity.py,
    `resolve_declared`): allocation sizes for the outputs `out_idx` names (as core.compile's
    `out_idx`) or that report a length, TileLang's capacity dim indices for the other
    tensors; core.compile resolves them the same way first, so this is then a no-op."""
    replace = replace or {}
    unknown = (set(disable) | set(replace) | ({stop_after} if stop_after else set())) \
        - set(pass_names())
    if unknown:
        raise ValueError(f"unknown pass name(s) {sorted(unknown)}; passes: {pass_names()}")
    func = resolve_declared(func, out_idx, func_name(func))
    for name, fn in PASSES:
        if name in disable:
            if name in REQUIRED:
                raise ValueError(f"pass '{name}' cannot be disabled (replace it instead)")
            continue
        start = time.perf_counter() if timings is not None else 0.0
        func = replace.get(name, fn)(func)
        if timings is not None:
            timings[name] = time.perf_counter() - start
        if name == stop_after:
            break
    return func
