"""The table of TileLang's language surface in docs/language.md, generated from the DSL.

For every name `import tilelang.language as T` exports (core/language/tilelang_names.py and
TVMScript's parser names), the status is found by asking `core.language` itself: a name it
defines is supported (with the limit written in `LIMITS`, if any); any other name is
rejected, and the row quotes the error `T.<name>` raises. So the table cannot claim more
than the code does; suites/compat/test_surface.py checks that the committed file is this
module's output.

    python -m harness.language_table            # rewrite docs/language.md
    python -m harness.language_table --check    # exit 1 if it is out of date
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

from core.errors import KernelDefinitionError
import core.language as T
from core.language.dtypes import dtype_name
from core.language.tilelang_names import GROUPS
from core.language.unsupported import tvmscript_names
from core.target import METAL, SUPPORTED

DOC = Path(__file__).resolve().parent.parent / "docs" / "language.md"

_HINTS = "TileLang's tuning keywords ({}) are accepted and have no effect on Metal"
_WHOLE_SIMDGROUP = ("run by every lane of a simdgroup: not inside T.Parallel, and an `if`, "
                    "loop bound or while condition around it the same on each simdgroup's "
                    "lanes (`tid // 32 < 3`, data every lane reads alike), else a clear "
                    "error naming the lanes that differ")
# Supported constructs with a limit: what is rejected (with a clear error) or not honoured.
LIMITS = {
    "Kernel": "1-3 grid dimensions; threads: an int or a tuple of 1-3 ints, at most 1024 "
              "in all; `prelude` and `is_cpu=True` are rejected",
    "Parallel": "extents are compile-time constants; not nested; "
                + _HINTS.format("coalesced_width, loop_layout, prefer_async"),
    "Pipelined": "a serial loop: Metal has no async copies, `num_stages` is a hint and the "
                 "barriers are planned by the compiler; order/stage/sync/group are ignored",
    "copy": "edge tiles masked; a gemm accumulator is staged through threadgroup memory; "
            + _HINTS.format("coalesced_width, disable_tma, eviction_policy"),
    "gemm": "A and B in shared memory, fragments or device tiles of one float dtype (a "
            "device A/B tile must provably lie inside its tensor), C a float32 fragment or "
            "shared tile or a float32/float16/bfloat16 device tile (edges masked through a "
            "float32 stage); tiles multiples of 8; "
            "threads a multiple of 32 that splits the tiles evenly; staging within 32 KiB "
            "(epilogues over the accumulator alone run in chunks); "
            + _HINTS.format("policy, k_pack, wg_wait"),
    "GemmWarpPolicy": "accepted; the lowering picks the simdgroup partition",
    "reduce_sum": "fragment, local or shared source and destination; float32/float16/"
                  "bfloat16/int32/int64/uint32; threads a power of two or a multiple of "
                  f"{METAL.simd_width} (whole simdgroups: 96, 384, 896); other counts "
                  "(48) only where the threads combining one output divide them, else a "
                  "clear error; `batch=` is accepted and changes nothing; "
                  "nan_propagate=True is rejected",
    "atomic_add": "device or threadgroup destination, scalar or tile form; int32/uint32 "
                  "native, float32 native on device memory, else (float32 on threadgroup "
                  "memory, float16, bfloat16) a compare-exchange on the 32-bit word; "
                  "int64/int8/uint8/bool rejected; memory_order 'relaxed' only",
    "atomic_max": "as atomic_add; float max/min are compare-exchange loops (MSL has no "
                  "atomic_float min/max)",
    "atomic_addx2": "2 (x4: 4) scalar atomics: MSL has no vector atomics",
    "alloc_reducer": "threads a power of two up to 32 or whole simdgroups",
    "reducer_init": "every element of the thread's copy := the op's identity (0; -inf/+inf "
                    "for max/min, an integer type's lowest/highest)",
    "reducer_update": "r[i] := op(r[i], value) on the thread's copy of a T.alloc_reducer "
                      "buffer (inside T.Parallel: the iterations the thread runs)",
    "tvm_thread_allreduce": "inside `with T.attr(T.comm_reducer(...), \"reduce_scope\", "
                            "...)`: one value into a T.alloc_local element; the reduced "
                            "thread dims consecutive, their extent and stride powers of two; "
                            "condition True only",
    # (TVMScript names: their rows are merged on details with T.* names masked, so these
    # name the constructs without the T. prefix)
    "comm_reducer": "combiners x + y (identity 0), max(x, y), min(x, y); one value; for "
                    "tvm_thread_allreduce only",
    "attr": "only the thread all-reduce scope (comm_reducer, \"reduce_scope\"); other "
            "attributes are rejected",
    "evaluate": "only evaluate(tvm_thread_allreduce(...))",
    "annotate_layout": "checked (the buffer's shape, a bijection), then without effect: "
                       "buffers stay row-major; any layout on a fragment is rejected",
    "Layout": "for T.annotate_layout on shared or global buffers only",
    "Fragment": "exists; annotating a fragment's layout is rejected (metaltile lays "
                "fragments out itself)",
    "transpose": "2-D threadgroup (T.alloc_shared) tiles only; a fragment is rejected",
    "cumsum": "inclusive scan (cummax: running maximum, values only) of a 1-D or 2-D "
              "threadgroup tile along `dim`, `reverse` from the end, into `dst` (default in "
              "place); a fragment source is staged through threadgroup memory; per "
              "simdgroup and segment of 32 simd_prefix_inclusive_sum (cummax: a "
              "simd_shuffle_up Hillis-Steele scan) plus the previous segment's carry "
              "(simd_shuffle); simdgroups sharing a line add each other's totals through "
              "threadgroup memory; float32/float16/bfloat16 (accumulated in float32)/int32/"
              "uint32; device tensors, local arrays, 3-D tiles and 64-bit values rejected",
    "view": "a buffer over the same data (reshape: same dtype), exactly the source's "
            "elements; dtype only of the same width (as_type); threadgroup, per-thread and "
            "device buffers (pass resolve_views turns on-chip and retyped accesses into the "
            "source's); fragment views rejected (metaltile lays fragments out itself)",
    "loop_break": "MSL `break;` out of the innermost serial or while loop; refused outside "
                  "a loop, directly in T.Parallel, and (LoweringError) in a loop that needs "
                  "a threadgroup barrier inside it",
    "alloc_global": "a device workspace (static shape) the runtime allocates per call, "
                    "uninitialized, and does not return; shared by every threadgroup and "
                    "every kernel of the program; scope 'global' only",
    "import_source": "the MSL source goes into the library once, before the kernels (the "
                     "emulator compiles it with them); for functions called by "
                     "T.call_extern",
    "call_extern": "the call name(args...) of a library function (T.import_source or "
                   "metal_stdlib); opaque to the barrier planner: pass values, not "
                   "pointers to threadgroup memory",
    "use_swizzle": "orders 'row' and 'column' on 2-D grids (the real remapping of block "
                   "indices); order='mlx' (a power-of-two panel): MLX's rasterization of a "
                   "grid launched in MLX's shape, bx // panel, by * panel + bx % panel, "
                   "applied once where the kernel writes those forms itself",
    "Tensor": "dtypes: " + ", ".join(SUPPORTED),
    "dynamic": "int32 or int64",
    "alloc_shared": "compile-time shapes; the threadgroup memory live at once within 32 KiB "
                    "(buffers never live together share bytes)",
    "alloc_fragment": "compile-time shapes; indexed by T.Parallel loop variables",
    "prim_func": "TVMScript's parser; a string annotation is rejected with the T type to "
                 "write",
    "serial": "positive constant steps; a short loop (a constant trip count of at most "
              f"{METAL.auto_unroll_trips}, at most {METAL.auto_unroll_steps} bodies in its "
              "nest) is printed with `#pragma unroll` (as TileLang #3195 unrolls short loops "
              "on Metal); "
              "`unroll=True/k/False` as T.unroll",
    "unroll": "positive constant steps; printed as `#pragma clang loop unroll(full)` "
              "(`unroll_factor=k`: `unroll_count(k)`; `T.serial(unroll=False)`: "
              "`unroll(disable)`); `explicit` leaves the unrolling to Apple's compiler",
    "get_thread_binding": "dims the kernel does not launch read as 0",
    "dtype": "the dtype object works everywhere; kernels accept " + ", ".join(SUPPORTED),
    "vectorized": "a per-thread loop of a constant extent, handed to the vectorize pass: "
                  "vector loads and stores where it proves them safe (one store, aligned), "
                  "else serial (the same results); TVM annotations are rejected",
    "sync_threads": "threadgroup_barrier(mem_flags::mem_threadgroup), taken by the barrier "
                    "planner as its own; barrier_id/arrive_count (CUDA named barriers) are "
                    "rejected, and so is a barrier under a thread-dependent `if`",
    "reduce_bitand": "as reduce_sum, on int32/int64/uint32 buffers only: & | ^ per thread, "
                     "simd_and/simd_or/simd_xor over a whole simdgroup, else a "
                     "simd_shuffle_xor butterfly, a threadgroup stage across simdgroups",
    "atomic_load": "atomic_load_explicit (atomic_store: atomic_store_explicit) of one "
                   "int32/uint32/float32 element of device or threadgroup memory; "
                   "memory_order: omitted or 'relaxed' (TileLang's default 'seq_cst' does "
                   "not exist in MSL: the omitted order is relaxed, an explicit other "
                   "order is rejected)",
    "atomic_or": "atomic_fetch_or_explicit on one int32/uint32 element (scalar only, as in "
                 "TileLang); memory_order 'relaxed' only",
    # warp-level constructs (core/language/warp.py)
    "shfl_xor": "simd_shuffle_xor / simd_shuffle_down / simd_shuffle_up / simd_shuffle "
                "(shfl_sync); `width` a compile-time power of two up to 32 (below 32, or a "
                "per-lane delta, simd_shuffle from CUDA's source lane); `mask` only "
                "0xFFFFFFFF or T.activemask() (Metal's simd functions take the active "
                "lanes); bfloat16 moves as float32, 64-bit integers as a uint2",
    "warp_reduce_sum": "simd_sum / simd_max / simd_min / simd_and / simd_or over the active "
                       "lanes of the simdgroup; 32-bit-or-narrower dtypes, bfloat16 through "
                       "float32; bit reductions integers only; 64-bit rejected (T.reduce_* "
                       "takes them)",
    "ballot": "ulong(simd_ballot(p)) (any_sync/all_sync: int(simd_any/simd_all(p))) over "
              "the active lanes; integer or bool predicates; `mask` only 0xFFFFFFFF or "
              "T.activemask()",
    "activemask": "ulong(simd_active_threads_mask()): the lanes executing the call",
    "get_lane_idx": "linear thread id % warp_size (default 32: Metal's "
                    "thread_index_in_simdgroup, as arithmetic on the thread index)",
    "get_warp_idx": "linear thread id // warp_size (default 32: Metal's "
                    "simdgroup_index_in_threadgroup)",
    # the low-level simdgroup matrix intrinsics (core/language/simdgroup.py)
    "alloc_local": "compile-time shapes; scope 'local' (per thread) or 'metal.simdgroup': "
                   "8x8 float32/float16/bfloat16 simdgroup matrices of 64 elements each, "
                   "reached only by the simdgroup intrinsics",
    "simdgroup_load": "8x8 tiles only, origin 0, a compile-time `transpose_matrix`; the "
                      "pointer a T.access_ptr/T.address_of element of device or threadgroup "
                      "memory of the matrix's dtype; the barrier planner sees the whole "
                      "tile (rows `stride` apart); " + _WHOLE_SIMDGROUP,
    "make_filled_simdgroup_matrix": "8x8 only; the value converted to the matrix's dtype; "
                                    + _WHOLE_SIMDGROUP,
    "simdgroup_multiply_accumulate": "d = a @ b + c on 8x8 simdgroup matrices (MSL "
                                     "simdgroup_multiply_accumulate); " + _WHOLE_SIMDGROUP,
    "access_ptr": "the address of one element (or a buffer's first), moved by `offset`; "
                  "`access_type` 'r'/'w'/'rw': a simdgroup load through a 'w' pointer (a "
                  "store through an 'r' one) is an error, the tile op's footprint is its "
                  "tile; passed to T.call_extern, a read and/or write for the barrier "
                  "planner of the `extent` (or product of `extents`) elements from it, of "
                  "any element of the buffer without one; `ignore_last_ndim` rejected",
    "address_of": "of a buffer element A[i, j]",
}
for _alias, _of in (("reduce_max", "reduce_sum"), ("reduce_min", "reduce_sum"),
                    ("reduce_abssum", "reduce_sum"), ("reduce_absmax", "reduce_sum"),
                    ("Serial", "serial"), ("Unroll", "unroll"), ("symbolic", "dynamic"),
                    ("Buffer", "Tensor"), ("simdgroup_store", "simdgroup_load"),
                    ("reduce", "reduce_sum"), ("atomic_min", "atomic_max"),
                    ("atomic_addx4", "atomic_addx2"), ("finalize_reducer", "alloc_reducer"),
                    ("make_swizzled_layout", "annotate_layout"),
                    ("shfl_down", "shfl_xor"), ("shfl_up", "shfl_xor"),
                    ("shfl_sync", "shfl_xor"), ("warp_reduce_max", "warp_reduce_sum"),
                    ("warp_reduce_min", "warp_reduce_sum"),
                    ("warp_reduce_bitand", "warp_reduce_sum"),
                    ("warp_reduce_bitor", "warp_reduce_sum"), ("ballot_sync", "ballot"),
                    ("any_sync", "ballot"), ("all_sync", "ballot"),
                    ("get_warp_idx_sync", "get_warp_idx"),
                    ("reduce_bitor", "reduce_bitand"), ("reduce_bitxor", "reduce_bitand"),
                    ("atomic_store", "atomic_load"), ("cummax", "cumsum"), ("reshape", "view"),
                    ("Vectorized", "vectorized")):
    LIMITS.setdefault(_alias, LIMITS[_of])

GROUP_TITLES = {
    "tile": "Tile-level constructs (tilelang/language/common.py)",
    "eager": "Frontend entry points",
    "dtype": "dtypes",
    "tir": "TIR-level operations (tilelang/language/tir/ir.py)",
    "math": "Math intrinsics",
    "cuda": "CUDA extensions of the default dialect",
    "metal": "Metal extensions (tilelang.metal.language)",
    "tvmscript": "TVMScript parser names TileLang re-exports",
}


def _error_text(name: str) -> str:
    try:
        getattr(T, name)
    except KernelDefinitionError as exc:
        return str(exc)
    raise AssertionError(f"T.{name} is neither defined nor rejected")


def status(name: str) -> tuple:
    """(status, detail) of `T.<name>` as the DSL behaves today."""
    if name not in T.__dict__:
        return "rejected", _error_text(name)
    value = T.__dict__[name]
    if isinstance(value, T.dtype):
        try:
            dtype_name(value)
        except KernelDefinitionError as exc:
            return "supported with a limit", (f"the dtype object exists (comparison, .bits, "
                                              f".as_torch()); kernels reject it: {exc}")
    if name in LIMITS:
        return "supported with a limit", LIMITS[name]
    return "supported", ""


def _vector_dtype(name: str) -> bool:
    return re.fullmatch(r"[a-z0-9_]+x\d+", name) is not None


def rows() -> list:
    """(group, names, status, detail) rows; vector dtypes and TVMScript names that share
    one status and detail are merged into one row."""
    listed, out = set(), []
    groups = dict(GROUPS)
    groups["tvmscript"] = tuple(n for n in tvmscript_names()
                                if not any(n in v for v in GROUPS.values()))
    for group, names in groups.items():
        merged = {}
        for name in names:
            if name in listed:
                continue
            listed.add(name)
            st, detail = status(name)
            if group == "tvmscript" or (group == "dtype" and _vector_dtype(name)):
                key = (st, re.sub(r"T\.\w+", "T.<name>", detail))
                merged.setdefault(key, []).append(name)
            else:
                out.append((group, [name], st, detail))
        out.extend((group, names, st, detail) for (st, detail), names in merged.items())
    return out


def render() -> str:
    all_rows = rows()
    counts = {}
    for _, names, st, _ in all_rows:
        counts[st] = counts.get(st, 0) + len(names)
    lines = [
        "# TileLang's language surface on metaltile",
        "",
        "Every name `import tilelang.language as T` exports, and what `import core.language "
        "as T` does with it: **supported**, **supported with a limit** (which), or "
        "**rejected** with the error `T.<name>` raises (a `KernelDefinitionError` naming the "
        "construct; never an AttributeError or a silent no-op). Generated from the DSL by "
        "`python -m harness.language_table`; a test checks that this file is up to date.",
        "",
        "Totals: " + ", ".join(f"{n} {st}" for st, n in sorted(counts.items())) + ".",
        "",
    ]
    for group, title in GROUP_TITLES.items():
        group_rows = [r for r in all_rows if r[0] == group]
        if not group_rows:
            continue
        lines += [f"## {title}", "", "| construct | status | limit or error |",
                  "|---|---|---|"]
        for _, names, st, detail in group_rows:
            shown = ", ".join(f"`T.{n}`" for n in names)
            detail = detail.replace("|", "\\|")
            lines.append(f"| {shown} | {st} | {detail} |")
        lines.append("")
    return "\n".join(lines)


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    text = render()
    if "--check" in argv:
        current = DOC.read_text() if DOC.exists() else ""
        if current != text:
            print(f"{DOC} is out of date; run python -m harness.language_table")
            return 1
        return 0
    DOC.parent.mkdir(parents=True, exist_ok=True)
    DOC.write_text(text)
    print(f"wrote {DOC}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
