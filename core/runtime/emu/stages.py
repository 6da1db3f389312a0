"""Where the emulator's time goes: seconds per stage, summed over this process's calls.

    before = stages.totals()
    emu.run_msl(...)
    stages.since(before)   # {"translate": 0.002, "signatures": 0.06, "compile": 0.21, ...}

Stages (exclusive: a stage inside another is not counted twice):

    toolchain    finding and checking clang, hashing the shim and runtime (once per process)
    translate    the MSL -> C++ rewrite (translate.py)
    signatures   clang's AST of the rewritten source (signature.py)
    shared       the runtime objects and precompiled headers (built once per cache)
    compile      clang compiling a kernel's translation unit
    symbols      the check of the kernel object's undefined symbols (admission.py)
    link         linking the kernel's shared object (or executable: build.py)
    launch       the launch itself: job file, launch server, the kernel's run, results
    symbolize    MSL lines of findings (llvm-symbolizer)

The harness reads these around a case (harness/check/case.py) to show where a fuzz run's
time goes, and `built()`, how many kernel libraries this process compiled, to count the
new kernels among its cases; nothing in the emulator depends on them.
"""

from __future__ import annotations

import threading
import time
from contextlib import contextmanager

STAGES = ("toolchain", "translate", "signatures", "shared", "compile", "symbols", "link",
          "launch", "symbolize")

_lock = threading.Lock()
_totals: dict[str, float] = {}
_local = threading.local()
_built = [0]   # kernel libraries compiled (build.py), alone or in a batch


@contextmanager
def stage(name: str):
    """Count the time of the block under `name`, less the time of stages inside it."""
    stack = getattr(_local, "stack", None)
    if stack is None:
        stack = _local.stack = []
    inner = [0.0]
    stack.append(inner)
    t0 = time.perf_counter()
    try:
        yield
    finally:
        elapsed = time.perf_counter() - t0
        stack.pop()
        if stack:
            stack[-1][0] += elapsed
        with _lock:
            _totals[name] = _totals.get(name, 0.0) + elapsed - inner[0]


def kernel_built() -> None:
    """Count one kernel library compiled into the cache (build.py)."""
    with _lock:
        _built[0] += 1


def built() -> int:
    """Kernel libraries compiled in this process so far: the cases that needed a new
    kernel, not found in the cache."""
    with _lock:
        return _built[0]


def totals() -> dict[str, float]:
    """Seconds per stage so far in this process."""
    with _lock:
        return dict(_totals)


def since(before: dict[str, float]) -> dict[str, float]:
    """Seconds per stage since `before` (a `totals()`), stages that took time only."""
    now = totals()
    return {k: v - before.get(k, 0.0) for k, v in now.items() if v > before.get(k, 0.0)}
