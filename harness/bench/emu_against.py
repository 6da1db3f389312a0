"""Emulator time A/B against another git revision, within one run (`harness emu-against REF`).

The emulator's own speed on the kernel shapes that matter, compared with another
revision's emulator running the same MSL. This tree compiles each shape (a kernel family
at fixed params, `SHAPES`) to MSL once, with today's compiler, and writes the launch (MSL,
kernel name, grid, threadgroup, input buffers) to a job directory; then a worker process
per tree (the other revision checked out by `harness.bench.against.worktree`; the program
harness/bench/emu_against_worker.py of this tree, run by path) calls its own
`core.runtime.emu.run_msl` on it, round after round, this tree first in even rounds and
the other first in odd ones, so drift and other load hit both alike (docs/bench.md: wall
times compare only within one run). Round 0 is the warm-up (it builds the kernel).

Per shape and checks setting it reports both sides' median seconds, the speed-up
(median of ref/this over the paired rounds) and whether both sides computed the same: the
output bytes and every counter both emulators report must be identical, since the counters
describe the Apple GPU's work, not the emulator's (counters only one revision has, e.g. ones
added since, are listed, not compared). This side's output is also compared with
the family's oracle (harness.check.compare). What the worker needs from the other revision:
`core.runtime.emu.run_msl(source, kernel, grid=, threadgroup=, buffers=, checks=)` and
`core.runtime.emu.ALL_CHECKS`.
"""

from __future__ import annotations

import json
import math
import statistics
import subprocess
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from harness.bench import against

DEFAULT_ROUNDS = 5
ROOT = Path(__file__).resolve().parents[2]     # this tree


@dataclass(frozen=True)
class Shape:
    name: str
    family: str
    params: dict
    about: str


# The shapes of issue 11's speed goals (GEMM 512^3 >= 10x, softmax 256x1024 >= 4x) and the
# GEMM at 256^3 the plain C++ anchor runs (suites/bench/test_emu_bench.py).
SHAPES = (
    Shape("gemm-256", "gemm",
          {"M": 256, "N": 256, "K": 256, "bM": 64, "bN": 64, "bK": 32, "threads": 128,
           "dtype": "float16", "out_dtype": "float32", "trans_A": False, "trans_B": False,
           "num_stages": 2, "init": "clear"},
          "GEMM f16 -> f32 256^3, 64x64x32 tiles, 128 threads, 2 stages"),
    Shape("gemm-512", "gemm",
          {"M": 512, "N": 512, "K": 512, "bM": 64, "bN": 64, "bK": 32, "threads": 128,
           "dtype": "float16", "out_dtype": "float32", "trans_A": False, "trans_B": False,
           "num_stages": 2, "init": "clear"},
          "GEMM f16 -> f32 512^3, 64x64x32 tiles, 128 threads, 2 stages"),
    Shape("softmax-256x1024", "softmax",
          {"M": 256, "N": 1024, "dtype": "float16", "scale": 1.0, "bM": 4, "threads": 256},
          "row softmax f16 256x1024, 64 threadgroups of 256"),
)

# The worker program, a file of this tree run by path (against.Worker says how).
WORKER = Path(__file__).resolve().with_name("emu_against_worker.py")


class EmuAgainstError(Exception):
    """A shape cannot be laid out as one launch (several launches, scalar arguments)."""


class EmuAgainstUsageError(ValueError):
    """Options that cannot run: shapes that are not in `SHAPES`."""


def write_job(shape: Shape, directory: Path, seed: int = 0) -> tuple[Path, str | None]:
    """Compile `shape` with this tree's compiler, call it once on the emulator (its outputs
    against the family's oracle: None, or the mismatch) and write its launch for the
    workers, outputs zeroed."""
    import torch

    import core
    from harness.check.compare import assert_outputs_close
    from harness.gen import family as families

    built = families.get(shape.family).build(dict(shape.params))
    kernel = core.compile(built.func, out_idx=built.out_idx)
    if len(kernel.launches) != 1:
        raise EmuAgainstError(f"{shape.name}: {len(kernel.launches)} launches; the A/B times "
                              "one launch")
    site = kernel.launches[0]
    if site.scalars or any(kind != "const" for kind, _ in site.grid):
        raise EmuAgainstError(f"{shape.name}: the launch has scalar arguments or a computed "
                              "grid; the A/B times launches of constant geometry")
    inputs = list(built.inputs(seed))
    result = kernel(*inputs, backend="emu", checks=())
    outputs = list(result) if isinstance(result, (list, tuple)) else [result]
    mismatch = None
    try:
        assert_outputs_close(outputs, built.oracle(inputs), built, what=f"{shape.name} ")
    except AssertionError as err:
        mismatch = str(err).splitlines()[0]
    n = len(built.func.params)
    out_positions = sorted(i % n for i in built.out_idx)
    pending_in, pending_out = iter(inputs), iter(torch.zeros_like(o) for o in outputs)
    by_name = {p.name: next(pending_out) if i in out_positions else next(pending_in)
               for i, p in enumerate(built.func.params)}
    arrays = [by_name[n].contiguous().view(torch.uint8).numpy() for n in site.buffers]
    path = directory / shape.name
    np.savez(str(path) + ".npz", **{f"b{i}": a for i, a in enumerate(arrays)})
    meta = {"msl": kernel.msl, "kernel": site.kernel,
            "grid": [int(v) for _, v in site.grid], "threadgroup": list(site.threadgroup)}
    Path(str(path) + ".json").write_text(json.dumps(meta))
    return path, mismatch


class Worker(against.Worker):
    """One emulator-timing process for one source tree (the protocol of against.Worker)."""

    def __init__(self, tree: Path, log: Path):
        super().__init__(tree, log, worker=WORKER)

    def time(self, job: Path, checks: bool) -> dict:
        return self.request({"op": "time", "job": str(job), "checks": checks})


def run(ref: str, shapes=SHAPES, *, root: Path, out_dir: Path, rounds: int = DEFAULT_ROUNDS,
        checks=(True, False), progress=None) -> dict:
    """Time `shapes` on this tree's emulator (`root`) and on `ref`'s, interleaved."""
    method = (f"{rounds} interleaved rounds per side after one warm-up, one process per "
              "tree, today's MSL on both; speed-up = median over rounds of ref/this")
    try:
        tree, commit = against.worktree(ref, root, out_dir)
    except (against.AgainstError, subprocess.TimeoutExpired, OSError) as err:
        return {"ref": ref, "error": str(err), "rows": [], "method": method}
    jobs_dir = out_dir / "emu-against"
    jobs_dir.mkdir(parents=True, exist_ok=True)
    jobs, rows, oracle = {}, [], {}
    for shape in shapes:
        jobs[shape.name], oracle[shape.name] = write_job(shape, jobs_dir)
    sides = {"this": Worker(root, jobs_dir / "this.worker.log"),
             "ref": Worker(tree, jobs_dir / f"{tree.name}.worker.log")}
    keys = [(s, c) for s in shapes for c in checks]
    data = {(s.name, c): {"this": [], "ref": []} for s, c in keys}
    replies: dict = {}
    errors: dict = {}
    try:
        for r in range(rounds + 1):
            order = ("this", "ref") if r % 2 == 0 else ("ref", "this")
            if progress:
                progress(r, rounds)
            for shape, c in keys:
                key = (shape.name, c)
                if key in errors:
                    continue
                for side in order:
                    reply = sides[side].time(jobs[shape.name], c)
                    if "error" in reply:
                        errors[key] = f"{side}: {reply['error']}"
                        break
                    replies[key, side] = reply
                    if r:
                        data[key][side].append(reply["seconds"])
    finally:
        for w in sides.values():
            w.close()
    for shape, c in keys:
        key = (shape.name, c)
        row = {"shape": shape.name, "about": shape.about, "checks": c,
               "oracle": oracle[shape.name] or "pass"}
        if key in errors:
            rows.append({**row, "error": errors[key]})
            continue
        this, other = data[key]["this"], data[key]["ref"]
        a, b = replies[key, "this"], replies[key, "ref"]
        ca, cb = _counters(a["stats"]), _counters(b["stats"])
        common = sorted(set(ca) & set(cb))  # a counter one revision does not have is listed
        differ = [k for k in common if ca[k] != cb[k]]
        row.update({
            "this_median": statistics.median(this), "ref_median": statistics.median(other),
            "this_data": this, "ref_data": other,
            "speedup": math.exp(statistics.median(math.log(o / t) for t, o in zip(this, other))),
            "same_outputs": a["outputs"] == b["outputs"],
            "same_counters": not differ, "counter_differences": differ,
            "counters_compared": len(common),
            "counters_only_here": sorted(set(ca) - set(cb)),
            "findings": {"this": a["findings"], "ref": b["findings"]},
        })
        rows.append(row)
    return {"ref": ref, "commit": commit, "tree": str(tree), "rounds": rounds,
            "method": method, "rows": rows}


def _counters(stats: dict) -> dict:
    # JSON turned the per-buffer dicts' integer keys into strings on one side only.
    return {k: ({str(i): n for i, n in v.items()} if isinstance(v, dict) else v)
            for k, v in stats.items()}


def shapes_named(names) -> list[Shape]:
    """The shapes of `names` (None or empty: all of `SHAPES`); EmuAgainstUsageError names
    the unknown ones."""
    known = {s.name: s for s in SHAPES}
    unknown = [n for n in names or () if n not in known]
    if unknown:
        raise EmuAgainstUsageError(f"unknown shapes {unknown}; choose from {sorted(known)}")
    return [known[n] for n in names] if names else list(SHAPES)


def execute(ref: str, names=None, *, out_dir: Path, rounds: int = DEFAULT_ROUNDS,
            progress=None) -> dict:
    """`harness emu-against`: `run` on the shapes `names` (EmuAgainstUsageError for unknown
    ones) from this tree, the result written to out_dir/emu-against.json and returned."""
    shapes = shapes_named(names)
    result = run(ref, shapes, root=ROOT, out_dir=out_dir.resolve(), rounds=rounds,
                 progress=progress)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "emu-against.json").write_text(json.dumps(result, indent=1, default=str))
    return result


def failed(result: dict) -> bool:
    """Whether a run's rows show a problem: a shape that could not be timed, outputs or
    counters that differ between the two emulators, or this side missing the oracle."""
    return any("error" in row or not (row["same_outputs"] and row["same_counters"])
               or row["oracle"] != "pass" for row in result["rows"])
