"""`run_msl`: run an MSL compute kernel on the CPU and check it.

The public entry point of the emulator (docs/architecture.md, "Public interfaces"). One call:
translate the MSL (translate.py), build or fetch the kernel's library (build.py), write
the launch and the buffers to a shared job file (job.py), run the launch in a child process
under a watchdog (forked by a launch server, launch_server.py), then copy
the buffers back in place and return the findings (with MSL lines) and the counters. The
kernel always runs in a child process, so a kernel that crashes or hangs never takes the
caller down: the caller gets a `KernelCrashError` or `KernelTimeoutError` naming the
kernel, threadgroup and thread.
"""

from __future__ import annotations

import contextvars
import json
import os
import subprocess
import threading
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from signal import SIGSYS
from typing import Any, Sequence

import numpy as np

from core.errors import (KernelCrashError, KernelTimeoutError, LaunchError, MetaltileError,
                         MSLCompileError)
from core.target import METAL

from . import cross, launch_server, stages
from . import job as jobfile
from .build import default_builder
from .translate import translate
from .translation import SOURCE_NAME, Translation, source_line

ALL_CHECKS = ("races", "uninit", "bounds")


@dataclass(frozen=True)
class Finding:
    """One problem the checker saw, deduplicated by where it happened.

    kind: "race", "uninit", "bounds" or "divergence"; group and thread: the first
    threadgroup position and thread position (in the threadgroup) where it was seen;
    address_space: "device" or "threadgroup"; buffer_or_offset: the buffer (index and
    parameter name) or threadgroup variable, and the byte offset; line: the MSL line of the
    access (None when no symbolizer is available); count: how often it occurred."""

    kind: str
    kernel: str
    group: tuple[int, int, int]
    thread: tuple[int, int, int]
    address_space: str
    buffer_or_offset: str
    detail: str
    line: int | None = None
    count: int = 1
    other_thread: int | None = None

    def __str__(self) -> str:
        where = f"line {self.line}" if self.line else "unknown line"
        return (f"{self.kind} in kernel '{self.kernel}' at MSL {where}: {self.detail} "
                f"[{self.address_space} {self.buffer_or_offset}; threadgroup {self.group}, "
                f"thread {self.thread}; seen {self.count}x]")


@dataclass
class EmuResult:
    findings: list[Finding]
    stats: dict[str, Any]
    dropped_findings: int = 0
    msl_lines: dict[int, str] = field(default_factory=dict, repr=False)

    def by_kind(self, kind: str) -> list[Finding]:
        return [f for f in self.findings if f.kind == kind]


# -- buffers -----------------------------------------------------------------------------

def _as_bytes(buf: Any, index: int, kernel: str) -> tuple[np.ndarray, Any]:
    """A flat uint8 view of a buffer's memory (sharing it) and the object to write back to."""
    try:
        import torch
    except ImportError:  # pragma: no cover - torch is a dependency
        torch = None
    if torch is not None and isinstance(buf, torch.Tensor):
        if buf.device.type != "cpu":
            raise LaunchError(f"buffer {index} is a tensor on '{buf.device}'; the emulator "
                              "takes CPU tensors", kernel=kernel, construct=f"buffer {index}")
        if not buf.is_contiguous():
            raise LaunchError(f"buffer {index} is not contiguous; pass .contiguous()",
                              kernel=kernel, construct=f"buffer {index}")
        t = buf.detach()
        flat = t.reshape(-1).view(torch.uint8) if t.numel() else torch.empty(0, dtype=torch.uint8)
        return flat.numpy(), buf
    if isinstance(buf, (bytes, bytearray)):
        arr = np.frombuffer(bytearray(buf), dtype=np.uint8)
        return arr, arr
    if isinstance(buf, np.ndarray):
        if not buf.flags.c_contiguous:
            raise LaunchError(f"buffer {index} is not C-contiguous; pass np.ascontiguousarray(...)",
                              kernel=kernel, construct=f"buffer {index}")
        return buf.reshape(-1).view(np.uint8), buf
    raise LaunchError(f"buffer {index} is a {type(buf).__name__}; pass a numpy array, a CPU "
                      "torch tensor or bytes", kernel=kernel, construct=f"buffer {index}")


def _dims(value, what: str, kernel: str) -> tuple[int, int, int]:
    if isinstance(value, int):
        value = (value,)
    dims = tuple(int(v) for v in value)
    if not 1 <= len(dims) <= 3 or any(d < 1 for d in dims):
        raise LaunchError(f"{what} must be 1 to 3 positive sizes, got {value!r}", kernel=kernel,
                          construct=what)
    return dims + (1,) * (3 - len(dims))


# -- translation cache -------------------------------------------------------------------

_translations: dict[str, Translation] = {}
_translations_lock = threading.Lock()


def _translate_cached(source: str, kernel: str | None = None,
                      function_constants: dict | None = None,
                      threadgroup_memory: dict | None = None, declared=None) -> Translation:
    key = (source, tuple(sorted((function_constants or {}).items())),
           tuple(sorted((threadgroup_memory or {}).items())))
    with _translations_lock:
        t = _translations.get(key)
    if t is None:
        with stages.stage("translate"):
            t = translate(source, kernel, function_constants, threadgroup_memory, declared)
        with _translations_lock:
            if len(_translations) > 256:
                _translations.clear()
            _translations[key] = t
    return t


def kernel_signatures(source: str, function_constants: dict | None = None) -> dict:
    """The kernels of an MSL source by name (translation.KernelSignature: parameters with
    their buffer bindings, thread-position attributes and MSL lines)."""
    return _translate_cached(source, None, function_constants).kernels


def build_ahead(libraries, instrument: bool = True) -> int:
    """Build the MSL libraries coming `run_msl` calls will launch, several per clang
    invocation (build.py `Builder.build_batch`), so those calls find them built: each of
    `libraries` is `(source, declared, math_mode)` as `run_msl` takes them (no function
    constants, no threadgroup lengths). Only a saving: a library that does not translate,
    or that the batch cannot take, is left for its run, which builds it alone and reports
    what is wrong with it. Returns how many were built."""
    items = []
    for source, declared, math_mode in libraries:
        try:
            translation = _translate_cached(source, None, None, None, declared)
        except MetaltileError:
            continue
        items.append((translation, instrument,
                      METAL.math_mode if math_mode is None else math_mode))
    return default_builder().build_batch(items) if len(items) > 1 else 0


# -- symbolization -----------------------------------------------------------------------

_symbol_cache: dict[tuple[str, int], int | None] = {}


def _symbolize(binary: Path, pcs: set[int]) -> dict[int, int | None]:
    """MSL line of each return address (the innermost frame inside the MSL source)."""
    want = sorted(pc for pc in pcs if pc and (str(binary), pc) not in _symbol_cache)
    tc = default_builder().toolchain
    if want and tc.symbolizer:
        query = "\n".join(hex(pc - 1) for pc in want) + "\n"
        try:
            with stages.stage("symbolize"):
                out = subprocess.run([tc.symbolizer, f"--obj={binary}", "--inlining"],
                                     input=query, capture_output=True, text=True,
                                     timeout=60).stdout
        except (OSError, subprocess.TimeoutExpired):
            out = ""
        blocks = out.strip("\n").split("\n\n") if out.strip() else []
        for pc, block in zip(want, blocks):
            line = None
            for row in block.splitlines():
                if SOURCE_NAME in row:
                    try:
                        line = int(row.rsplit(SOURCE_NAME + ":", 1)[1].split(":")[0])
                    except (IndexError, ValueError):
                        line = None
                    break
            _symbol_cache[(str(binary), pc)] = line
    return {pc: _symbol_cache.get((str(binary), pc)) for pc in pcs}


# -- switching a barrier off -------------------------------------------------------------

_barrier_off = contextvars.ContextVar("barrier_off", default=0)


@contextmanager
def barrier_switched_off(line: int):
    """Launches inside the block skip every `threadgroup_barrier` call on MSL line `line`,
    as if the statement were not there (no meeting, not counted in `stats["barriers"]`),
    in the executable built for the MSL as it is: the barrier-necessity check
    (harness/check/barriers.py) switches each barrier off in turn in one build instead of
    building the MSL once per removed barrier. Also for launches through `core.Kernel`."""
    if not isinstance(line, int) or line < 1:
        raise LaunchError(f"barrier_switched_off takes a 1-based MSL line, got {line!r}",
                          construct="barrier_switched_off")
    token = _barrier_off.set(line)
    try:
        yield
    finally:
        _barrier_off.reset(token)


# -- the entry point ---------------------------------------------------------------------

def run_msl(source: str, kernel_name: str, grid=(1, 1, 1), threadgroup=(1, 1, 1),
            buffers: Sequence[Any] = (), schedule: str = "forward", seed: int = 0,
            checks: Sequence[str] = ALL_CHECKS, *, workers: int | None = None,
            timeout: float = 120.0, stack_bytes: int = 256 * 1024,
            max_findings: int = 64, instrument: bool = True,
            function_constants: dict[int, bool | int | float] | None = None,
            threadgroup_memory: dict[int, int] | None = None,
            math_mode: str | None = None, declared=None, threads=None) -> EmuResult:
    """Run `kernel_name` from the MSL `source` over `grid` threadgroups of `threadgroup`
    threads, with `buffers[i]` bound to `[[buffer(i)]]` (updated in place).

    schedule: order of threads between meeting points ("forward", "reverse", "random"
    with `seed`); checks: any of "races", "uninit", "bounds"; workers: OS threads for
    threadgroups (default: the machine's cores); instrument=False runs an uninstrumented
    build (no checks, no memory counters) for speed comparisons; function_constants: the
    values of `[[function_constant(i)]]` declarations by index (set when the MSL is
    compiled, as Metal sets them when it builds the pipeline); threadgroup_memory: the
    byte length of each `[[threadgroup(i)]]` parameter by index (Metal's
    setThreadgroupMemoryLength:atIndex:, a multiple of 16); math_mode: the Metal math
    mode the MSL is compiled in ("safe", "relaxed", "fast"; default `METAL.math_mode`),
    which decides where a*b + c is one fused multiply-add (core/target.py); declared:
    the kernels' declarations as the program that printed `source` states them
    (metaltile's KernelSpecs: signature.declared_kernels), which spare reading them with
    clang; ignored where they do not match the source. threads: the grid in threads
    instead of `grid` (Metal's dispatchThreads): ceil(threads / threadgroup) threadgroups a
    dimension, the last one holding the threads left where `threads` is not a multiple of
    `threadgroup` (a non-uniform grid: that threadgroup's threads_per_threadgroup is its own
    size, threads_per_grid is `threads`)."""
    grid3 = _dims(grid, "grid", kernel_name)
    tg3 = _dims(threadgroup, "threadgroup", kernel_name)
    grid_threads = (0, 0, 0)
    if threads is not None:
        if grid3 != (1, 1, 1):
            raise LaunchError(f"give the grid in threadgroups (grid={grid!r}) or in threads "
                              f"(threads={threads!r}), not both", kernel=kernel_name,
                              construct="grid")
        threads3 = _dims(threads, "threads", kernel_name)
        grid3 = tuple(-(-n // t) for n, t in zip(threads3, tg3))
        if any(n % t for n, t in zip(threads3, tg3)):
            grid_threads = threads3
    if schedule not in jobfile.SCHEDULES:
        raise LaunchError(f"schedule must be one of {sorted(jobfile.SCHEDULES)}, got {schedule!r}",
                          kernel=kernel_name, construct="schedule")
    checks = tuple(checks or ())
    unknown = [c for c in checks if c not in jobfile.CHECKS]
    if unknown:
        raise LaunchError(f"unknown checks {unknown}; choose from {list(jobfile.CHECKS)}",
                          kernel=kernel_name, construct="checks")
    if checks and not instrument:
        raise LaunchError("checks need the instrumented build; pass checks=() with "
                          "instrument=False", kernel=kernel_name, construct="checks")

    math_mode = METAL.math_mode if math_mode is None else math_mode
    if math_mode not in METAL.math_modes:
        raise LaunchError(f"math mode {math_mode!r}: Metal's are {', '.join(METAL.math_modes)}",
                          kernel=kernel_name, construct="math_mode")
    lengths = dict(threadgroup_memory or {})
    for index, length in lengths.items():
        if length <= 0 or length % 16:
            raise LaunchError(f"threadgroup memory length {length} for [[threadgroup({index})]] "
                              "must be a positive multiple of 16 bytes", kernel=kernel_name,
                              construct="threadgroup_memory")
    translation = _translate_cached(source, kernel_name, function_constants, lengths,
                                    declared)
    sig = translation.kernels.get(kernel_name)
    if sig is not None:
        _check_constants(sig, translation, source)
    if sig is None:
        found = ", ".join(sorted(translation.kernels)) or "none"
        raise MSLCompileError(f"no kernel function named '{kernel_name}' in the MSL source "
                              f"(kernels found: {found})", kernel=kernel_name)
    for param in sig.params:
        if param.threadgroup_index is not None and param.threadgroup_index not in lengths:
            raise LaunchError(f"parameter '{param.name}' is bound to [[threadgroup("
                              f"{param.threadgroup_index})]] but no length was given; pass "
                              f"threadgroup_memory={{{param.threadgroup_index}: nbytes}}",
                              kernel=kernel_name,
                              construct=f"threadgroup {param.threadgroup_index}")
    threads = tg3[0] * tg3[1] * tg3[2]
    if threads > METAL.max_threads_per_group:
        raise LaunchError(f"threadgroup {tg3} has {threads} threads; Apple GPUs allow at most "
                          f"{METAL.max_threads_per_group}", kernel=kernel_name,
                          construct="threadgroup size")
    if sig.max_total_threads is not None and threads > sig.max_total_threads:
        raise LaunchError(f"threadgroup {tg3} has {threads} threads, more than the kernel's "
                          f"max_total_threads_per_threadgroup({sig.max_total_threads})",
                          kernel=kernel_name, construct="threadgroup size")
    if len(buffers) > jobfile.MAX_BUFFERS:
        raise LaunchError(f"{len(buffers)} buffers given; Metal binds at most "
                          f"{jobfile.MAX_BUFFERS}", kernel=kernel_name, construct="buffers")
    for index, param in sorted(sig.buffers.items()):
        if index >= len(buffers) and not param.absent:
            raise LaunchError(f"parameter '{param.name}' is bound to [[buffer({index})]] but only "
                              f"{len(buffers)} buffers were given", kernel=kernel_name,
                              construct=f"buffer {index}")

    views = [_as_bytes(b, i, kernel_name) for i, b in enumerate(buffers)]
    exe = default_builder().build(translation, checked=instrument, kernel_hint=kernel_name,
                                  math_mode=math_mode)
    with stages.stage("launch"):
        return _run_launch(exe, sig, translation, views, grid3, tg3, kernel_name, schedule,
                           checks, seed, workers, stack_bytes, max_findings, timeout,
                           grid_threads)


def _run_launch(exe, sig, translation, views, grid3, tg3, kernel_name, schedule, checks,
                seed, workers, stack_bytes, max_findings, timeout,
                grid_threads=(0, 0, 0)) -> EmuResult:
    """The launch of a built kernel: job file, child process, report, buffers back."""
    check_bits = sum(jobfile.CHECKS[c] for c in checks)
    nworkers = workers or os.cpu_count() or 1
    job = jobfile.write_job(grid3, tg3, [v for v, _ in views], schedule=schedule,
                            checks=check_bits, seed=seed, workers=nworkers,
                            stack_bytes=stack_bytes, max_findings=max_findings,
                            barrier_off=_barrier_off.get(), grid_threads=grid_threads)
    sized = _SizedGroups(grid3, tg3, grid_threads)
    result_path = job.path + ".result.json"
    try:
        try:
            outcome = _launch(exe, job.path, kernel_name, result_path, timeout)
        except (subprocess.TimeoutExpired, launch_server.LaunchTimeout):
            raise KernelTimeoutError(
                f"did not finish within {timeout:g} s (watchdog); an endless loop, or a "
                "launch too large for the emulator (pass timeout=...)",
                kernel=kernel_name, construct=f"grid {grid3}, threadgroup {tg3}") from None
        except launch_server.ServerError as err:   # it failed on a fresh server too
            raise KernelCrashError(f"the emulator's launch server failed twice: {err}",
                                   kernel=kernel_name) from None
        report = _read_report(result_path, outcome, kernel_name)
        if report["status"] == "crash":
            raise _crash_error(report, exe.path, kernel_name, sized)
        if report["status"] == "launch_error":
            raise LaunchError(report["message"], kernel=kernel_name)
        if report["status"] == "bounds":
            return _halted(report, exe.path, kernel_name, sized)
        for i, (view, _) in enumerate(views):
            if view.flags.writeable:
                view[:] = job.buffer_bytes(i)
    finally:
        job.release()
        try:
            os.unlink(result_path)
        except FileNotFoundError:
            pass
    return _result(report, exe.path, sig, translation, kernel_name)


def _check_constants(sig, translation: Translation, source: str) -> None:
    """As Metal's pipeline creation: a kernel that reads a function constant (not behind
    is_function_constant_defined) needs its value; the file's other constants do not."""
    missing = [translation.function_constants[n] for n in sig.constants_read
               if not translation.function_constants[n].defined]
    if missing:
        c = missing[0]
        raise MSLCompileError(
            f"the kernel reads function constant '{c.name}' ([[function_constant({c.index})]]), "
            f"which has no value; pass function_constants={{{c.index}: ...}} to run_msl "
            f"(harness emu: --function-constant {c.index}=VALUE)"
            + (f" (and {', '.join(m.name for m in missing[1:])})" if len(missing) > 1 else ""),
            kernel=sig.name, line=c.line, source_line=source_line(source, c.line))


def _launch(exe, job: str, kernel: str, result: str,
            timeout: float) -> launch_server.Outcome:
    """Run one launch in a child process: forked by the launch host with the kernel's
    shared object, or by the kernel executable's own launch server, on this CPU; a process
    of its own under another CPU's emulator (cross.py)."""
    if exe.host is not None:
        return launch_server.launch(exe.host, str(exe.path), job, kernel, result, timeout)
    prefix = cross.run_prefix()
    if not prefix:
        return launch_server.launch(exe.path, "", job, kernel, result, timeout)
    proc = subprocess.run([*prefix, str(exe.path), job, kernel, result], capture_output=True,
                          text=True, timeout=timeout)
    return launch_server.Outcome(proc.returncode, proc.stderr)


def _read_report(path: str, outcome: launch_server.Outcome, kernel: str) -> dict:
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        detail = (outcome.stderr or "").strip()[-2000:]
        code = outcome.returncode
        if code == -SIGSYS:   # the sandbox's report needs the signal, which was blocked
            raise KernelCrashError(
                "the emulator's sandbox refused a system call (SIGSYS, with signals blocked, "
                "so which call is not known): MSL kernels cannot reach the host",
                kernel=kernel) from None
        signal = f" (killed by signal {-code})" if code < 0 else ""
        raise KernelCrashError(f"the emulator process ended with status {code}"
                               f"{signal} without a report{': ' + detail if detail else ''}",
                               kernel=kernel) from None


def _position(linear: int, dims) -> tuple[int, int, int]:
    """A linear threadgroup or thread index (x fastest) as its (x, y, z) within `dims`."""
    return (linear % dims[0], linear // dims[0] % dims[1], linear // (dims[0] * dims[1]))


class _SizedGroups:
    """A launch's threadgroups: (x, y, z) of a linear threadgroup index, and of a thread's
    linear index within its threadgroup, whose size is its own in a non-uniform grid."""

    def __init__(self, grid3, tg3, grid_threads):
        self.grid3, self.tg3, self.grid_threads = grid3, tg3, grid_threads

    def group(self, linear: int) -> tuple[int, int, int]:
        return _position(linear, self.grid3)

    def thread(self, group: int, linear: int) -> tuple[int, int, int]:
        if not any(self.grid_threads):
            return _position(linear, self.tg3)
        gp = self.group(group)
        size = [min(t, n - g * t) for t, n, g in zip(self.tg3, self.grid_threads, gp)]
        return _position(linear, size)


def _crash_error(report: dict, binary: Path, kernel: str, sized: _SizedGroups) \
        -> KernelCrashError:
    line = _symbolize(binary, {report.get("pc", 0) + 1}).get(report.get("pc", 0) + 1)
    t, g = report.get("thread", -1), report.get("group", 0)
    where = f"threadgroup {sized.group(g)}"
    if t >= 0:
        where += f", thread {sized.thread(g, t)}"
    at = f" at MSL line {line}" if line else ""
    address = report.get("address", 0)
    return KernelCrashError(f"{report['message']}{at} in {where} (address {address:#x})",
                            kernel=kernel)


def _halted(report: dict, binary: Path, kernel: str, sized: _SizedGroups) -> EmuResult:
    """An out-of-range index into an array of known size (a thread-private array, a struct
    member) stopped the run before the access: one bounds finding, buffers left as they
    were, no counters."""
    pc = report.get("pc", 0)
    g, t = report.get("group", 0), max(report.get("thread", 0), 0)
    finding = Finding(
        kind="bounds", kernel=kernel,
        group=sized.group(g), thread=sized.thread(g, t),
        address_space="thread", buffer_or_offset="-",
        detail=report["message"] + "; the run stopped before the access",
        line=_symbolize(binary, {pc}).get(pc))
    return EmuResult(findings=[finding], stats={}, dropped_findings=0)


def _result(report: dict, binary: Path, sig, translation: Translation, kernel: str) -> EmuResult:
    raw = report["findings"]
    lines = _symbolize(binary, {f["pc"] for f in raw} | {f["other_pc"] for f in raw})
    names = {i: p.buffer_name(i) for p in sig.params for i in p.buffer_indices}
    findings = []
    for f in raw:
        if f["space"] == "device":
            b = f["buffer"]
            name = f" ('{names[b]}')" if b in names else ""
            what = f"buffer {b}{name}, byte {f['offset']}"
        elif f["buffer"] >= 0:
            var = translation.threadgroup_vars.get(f["buffer"], f"#{f['buffer']}")
            view = translation.threadgroup_views.get(var)
            what = (f"'{view}' (declared as '{var}'), byte {f['offset']}" if view else
                    f"'{var}', byte {f['offset']}")
        else:
            what = "-"
        findings.append(Finding(
            kind=f["kind"], kernel=kernel, group=tuple(f["group"]), thread=tuple(f["thread"]),
            address_space=f["space"] if f["buffer"] >= 0 or f["space"] == "device" else "-",
            buffer_or_offset=what, detail=f["detail"], line=lines.get(f["pc"]),
            count=f["count"], other_thread=f["other_thread"] if f["other_thread"] >= 0 else None))
    stats = dict(report["stats"])
    for key in ("device_bytes_read", "device_bytes_written", "device_unique_bytes_read",
                "device_unique_bytes_written"):
        stats[key] = dict(enumerate(stats[key]))
    return EmuResult(findings=findings, stats=stats, dropped_findings=report["dropped_findings"])
