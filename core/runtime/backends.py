"""Backends: where a launch runs. One way to run a kernel launch on each backend.

    "emu"  the CPU emulator (core/runtime/emu), any OS; tensors live on the CPU
    "mps"  Apple GPU through torch.mps.compile_shader (core/runtime/mps.py), macOS only

`default_backend()` is "mps" on macOS with MPS available, else "emu";
`available_backends()` lists those that can run here (the test suites' `backend` fixture).
"""

from __future__ import annotations

import platform
from dataclasses import dataclass, field

from core.errors import LaunchError
from core.target import METAL

BACKENDS = ("emu", "mps")
DEVICES = {"emu": "cpu", "mps": "mps"}


def mps_available() -> bool:
    """Whether torch can run Metal work here: macOS with an MPS device."""
    if platform.system() != "Darwin":
        return False
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.backends.mps.is_available())


def available_backends() -> tuple:
    """The backends that can run here: the emulator always, MPS where torch has it."""
    return BACKENDS if mps_available() else ("emu",)


def default_backend() -> str:
    return "mps" if mps_available() else "emu"


def check_backend(backend: str, kernel: str) -> str:
    """`backend` if it exists and can run here; a LaunchError naming the reason otherwise."""
    if backend not in BACKENDS:
        raise LaunchError(f"unknown backend {backend!r}; choose from {BACKENDS}",
                          kernel=kernel, construct="backend")
    if backend == "mps" and not mps_available():
        raise LaunchError(f"backend 'mps' is unavailable on this machine "
                          f"({platform.system()}: torch.backends.mps.is_available() is false); "
                          "the Apple GPU runs only on macOS with MPS; use backend='emu'",
                          kernel=kernel, construct="backend")
    return backend


@dataclass
class RunRecord:
    """What one call of a kernel did: per-launch findings and stats (emu only)."""
    backend: str
    findings: list = field(default_factory=list)
    stats: list = field(default_factory=list)


def launch(backend, msl, site, grid, buffers, *, checks, schedule, seed, record,
           declared=None):
    """Run one launch site; `buffers` are bound to [[buffer(i)]] in order. On "emu" the
    launch has finished when this returns; on "mps" it is queued (core/runtime/mps.py
    keeps `buffers` alive until it completes): call `synchronize` before the host reads
    a result other than through PyTorch. `declared`: the library's KernelSpecs, whose
    declarations spare the emulator reading the kernels' signatures with clang."""
    if backend == "emu":
        from core.runtime import emu
        res = emu.run_msl(msl, site.kernel, grid=grid, threadgroup=site.threadgroup,
                          buffers=buffers, schedule=schedule, seed=seed, checks=checks,
                          math_mode=METAL.math_mode_in_effect(), declared=declared)
        record.findings.extend(res.findings)
        record.stats.append(res.stats)
        return
    from core.runtime import mps
    mps.run(msl, site.kernel, grid, site.threadgroup, buffers)


def synchronize(backend: str) -> None:
    """Wait until every queued launch on `backend` has finished (a no-op on "emu", whose
    launches run to completion when called)."""
    if backend == "mps":
        from core.runtime import mps
        mps.synchronize()


def to_device(value, backend: str):
    """A call argument moved to where `backend` reads tensors (non-tensors unchanged)."""
    import torch
    if isinstance(value, torch.Tensor):
        return value.to(DEVICES[backend])
    return value


def to_host(value, backend: str):
    """A kernel's result (a tensor, a tuple/list of them, or None) on the CPU, after the
    backend's queued launches have finished."""
    synchronize(backend)
    return _on_cpu(value)


def _on_cpu(value):
    if isinstance(value, (list, tuple)):
        return type(value)(_on_cpu(v) for v in value)
    return value.cpu() if hasattr(value, "cpu") else value
