"""Compile time A/B against another git revision, within one run (`harness bench --against REF`).

Wall-clock compile times compare only on one machine at one moment (docs/bench.md: 0.3%
noise within a CI job, 26% between runners), never against a baseline recorded elsewhere. So the
other revision is built beside this one, `git worktree add --detach` into
reports/out/against/<ref>, and both trees are timed by identical worker processes (the
program harness/bench/against_worker.py of this tree, run by path with the timed tree as
working directory and PYTHONPATH), one round at a time and interleaved: round r times each
case on both sides, this tree first in even rounds and the other first in odd rounds, so
drift (clock, heat, other load) hits both alike. Both sides use their default pass pipeline.

What the worker needs from the other revision: `harness.gen.family.get(name).build(params)`
returning `.func` and `.out_idx`, and `core.compile(func, out_idx=..., cache=False)`. A
case the other revision cannot build (no such family yet) is reported, not gated.

The threshold comes from the noise measured in the same run. Per case, with n paired
rounds, d_i = ln(this_i / ref_i); the change is exp(median d) - 1; the noise is the
standard error of that median, 1.2533 * 1.4826 * MAD(d) / sqrt(n) (MAD scaled to a
standard deviation, and the median's efficiency for normal data); the threshold is
max(FLOOR, 3 x noise). A change past +threshold is a regression (it fails the gate), past
-threshold an improvement. FLOOR (3%) keeps a lucky quiet run from flagging tiny shifts.
Measured: an A/A run (this tree against itself) on this project's 2-core machine while
other jobs kept it loaded (load average ~3.5) gave a per-case noise of 2-9% with 20 rounds,
thresholds of 6-27%, and no case flagged either way; with 6 rounds under the same load the
thresholds were 17-79%. More rounds buy a lower threshold (noise ~ 1/sqrt(n)).
"""

from __future__ import annotations

import fcntl
import json
import math
import os
import re
import statistics
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path

FLOOR = 0.03
SIGMAS = 3.0
DEFAULT_ROUNDS = 20

# The worker program (a file of this tree, run by path: the other revision need not have it)
# and how a Worker starts it: `python -c` as the program text once was, so the process's
# sys.path is the same: '' (the tree, its working directory), then PYTHONPATH (the tree).
WORKER = Path(__file__).resolve().with_name("against_worker.py")
RUN_WORKER = "import runpy, sys; runpy.run_path(sys.argv[1], run_name='__main__')"


class AgainstError(Exception):
    """The other revision could not be prepared (unknown ref, git failure)."""


def _git(root: Path, *args, check=True) -> str:
    proc = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True,
                          timeout=300)
    if check and proc.returncode:
        raise AgainstError(f"git {' '.join(args)}: {proc.stderr.strip() or proc.stdout.strip()}")
    return proc.stdout.strip()


def worktree(ref: str, root: Path, out_dir: Path) -> tuple[Path, str]:
    """A checkout of `ref` at out_dir/against/<ref> (reused when it is at that commit).

    Two processes preparing the same checkout (two `harness bench --against` runs, two
    test workers) take turns under a lock file beside it: the second finds it made."""
    try:
        commit = _git(root, "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}")
    except AgainstError:
        raise AgainstError(f"'{ref}' is not a commit, branch or tag of {root}") from None
    path = (out_dir / "against" / re.sub(r"[^A-Za-z0-9._-]+", "_", ref)).resolve()
    path.parent.mkdir(parents=True, exist_ok=True)
    with _exclusive(path.with_name(path.name + ".lock")):
        if path.exists():
            if _git(path, "rev-parse", "HEAD", check=False) == commit:
                return path, commit
            _git(root, "worktree", "remove", "--force", str(path), check=False)
        _git(root, "worktree", "prune")
        _git(root, "worktree", "add", "--detach", str(path), commit)
    return path, commit


@contextmanager
def _exclusive(lock: Path):
    """Hold an exclusive lock on the file `lock` (created if missing) for the block."""
    with open(lock, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


class Worker:
    """One timing process for one source tree: `worker` (a program file of this tree, run
    with the tree as working directory and PYTHONPATH) reads one JSON request per line and
    answers each with one JSON line."""

    def __init__(self, tree: Path, log: Path, worker: Path = WORKER):
        # One hash seed for both sides: string-keyed sets iterate in hash order, and a
        # per-process order would be a per-process bias of the timings.
        env = {**os.environ, "PYTHONPATH": str(tree), "PYTHONHASHSEED": "0"}
        self.log = open(log, "w")  # noqa: SIM115 - closed in close()
        self.proc = subprocess.Popen([sys.executable, "-c", RUN_WORKER, str(worker)],
                                     cwd=tree, env=env,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=self.log, text=True)

    def request(self, message: dict) -> dict:
        self.proc.stdin.write(json.dumps(message) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            return {"error": f"worker exited (status {self.proc.poll()}); see {self.log.name}"}
        return json.loads(line)

    def time(self, case) -> dict:
        return self.request({"op": "time", "family": case.family, "params": case.params})

    def close(self):
        try:
            if self.proc.poll() is None:
                self.proc.stdin.write(json.dumps({"op": "quit"}) + "\n")
                self.proc.stdin.flush()
                self.proc.wait(timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            self.proc.kill()
        self.log.close()


def verdict(this: list[float], ref: list[float]) -> dict:
    """Change, noise and threshold of paired rounds (module docstring)."""
    d = [math.log(t / r) for t, r in zip(this, ref)]
    med = statistics.median(d)
    mad = statistics.median(abs(x - med) for x in d)
    noise = 1.2533 * 1.4826 * mad / math.sqrt(len(d))
    threshold = max(FLOOR, SIGMAS * noise)
    change = math.exp(med) - 1.0
    kind = "regression" if change > threshold else \
        "improvement" if change < -threshold else "same"
    return {"change": change, "noise": noise, "threshold": threshold, "verdict": kind}


def run(ref: str, cases, *, root: Path, out_dir: Path, rounds: int = DEFAULT_ROUNDS,
        progress=None) -> dict:
    """Time `cases` (cases.BenchCase) in this tree (`root`) and in `ref`, interleaved."""
    method = (f"{rounds} interleaved rounds per side after one warm-up; change = "
              "exp(median ln(this/ref)) - 1; noise = standard error of that median "
              f"(1.2533 x 1.4826 x MAD / sqrt(n)); threshold = max({FLOOR:.0%}, "
              f"{SIGMAS:g} x noise). Default pipelines on both sides.")
    try:
        tree, commit = worktree(ref, root, out_dir)
    except (AgainstError, subprocess.TimeoutExpired, OSError) as err:
        return {"ref": ref, "error": str(err), "cases": [], "method": method}
    logs = out_dir / "against"
    sides = {"this": Worker(root, logs / "this.worker.log"),
             "ref": Worker(tree, logs / f"{tree.name}.worker.log")}
    data = {c.name: {"this": [], "ref": []} for c in cases}
    errors: dict[str, str] = {}
    try:
        for r in range(rounds + 1):                       # round 0 is the warm-up
            order = ("this", "ref") if r % 2 == 0 else ("ref", "this")
            if progress:
                progress(r, rounds)
            for case in cases:
                if case.name in errors:
                    continue
                for side in order:
                    reply = sides[side].time(case)
                    if "error" in reply:
                        errors[case.name] = f"{side}: {reply['error']}"
                        break
                    if r:
                        data[case.name][side].append(reply["seconds"])
    finally:
        for w in sides.values():
            w.close()
    rows = []
    for case in cases:
        if case.name in errors:
            rows.append({"name": case.name, "error": errors[case.name], "verdict": "error"})
            continue
        this, other = data[case.name]["this"], data[case.name]["ref"]
        rows.append({"name": case.name, "this_median": statistics.median(this),
                     "ref_median": statistics.median(other), "this_data": this,
                     "ref_data": other, **verdict(this, other)})
    timed = [r for r in rows if "change" in r]
    geomean = (math.exp(statistics.fmean(math.log1p(r["change"]) for r in timed)) - 1
               if timed else None)
    return {"ref": ref, "commit": commit, "tree": str(tree), "rounds": rounds,
            "method": method, "cases": rows, "geomean_change": geomean}
