"""Worker processes of the harness: where they come from, how a case runs in one, how they end.

Fuzzing (harness/fuzz/scheduler.py) keeps a pool of long-lived workers; the regression replay
(harness/check/regressions.py) runs a case that crashed or hung its process in a child of its own.
Both get their processes here, so the start method and the way a worker's process group is
killed are decided once:

    context = worker_context()              forkserver on Linux, spawn elsewhere
    start_fork_server(context)              start the server early (its imports overlap ours)
    kill_group(process)                     the worker and every emulator process it started
    outcome = run_in_child(fn, payload, startup_seconds=.., timeout_seconds=..)

`run_in_child` protocol: `fn(payload, send)` runs in the child; it sends "started" once its
imports are done (the case's timeout counts from there), then one result object. The
outcome is ("result", obj), ("timeout", stage, seconds) or ("died", exit code).
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import sys

# Modules a fork server imports once (only those that import cleanly or raise ImportError,
# which the server skips): a family module with a bug must fail in the worker, with its
# traceback, not here.
PRELOAD = ["harness.check.regressions", "harness.check.case", "harness.check.compare",
           "harness.check.barriers", "hypothesis", "core.jit", "core.language",
           "harness.check.warm_emulator", "harness.check.warm_worker"]


def worker_context():
    """Where worker processes come from. On Linux a fork server that has imported torch
    and tvm once, so a worker (and a restarted one) is ready at once instead of after
    seconds of imports; elsewhere spawn (macOS frameworks are not fork-safe)."""
    if sys.platform != "linux":
        return multiprocessing.get_context("spawn")
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(PRELOAD)
    return context


def start_fork_server(context) -> None:
    if context.get_start_method() == "forkserver":
        from multiprocessing import forkserver

        forkserver.ensure_running()


def kill_group(process) -> None:
    """Kill `process` and, when it leads its own process group (workers call os.setpgrp),
    every process it started (the emulator's kernel binaries); then reap it."""
    pid = process.pid
    try:
        if os.getpgid(pid) == pid:
            os.killpg(pid, signal.SIGKILL)
        else:
            process.kill()
    except (ProcessLookupError, PermissionError):
        pass
    process.join(10)


def _child_main(target, payload, send) -> None:
    if hasattr(os, "setpgrp"):
        os.setpgrp()   # its own group, so kill_group also ends the emulator processes it started
    target(payload, send)


def run_in_child(target, payload, *, startup_seconds: float, timeout_seconds: float) -> tuple:
    """Run `target(payload, send)` in a fresh worker process; see the module docstring."""
    ctx = worker_context()
    receive, send = ctx.Pipe(duplex=False)
    child = ctx.Process(target=_child_main, args=(target, payload, send), daemon=True)
    child.start()
    send.close()
    try:
        for stage, seconds in (("start", startup_seconds), ("finish", timeout_seconds)):
            if not receive.poll(seconds):
                return ("timeout", stage, seconds)
            message = receive.recv()
        child.join()
        return ("result", message)
    except EOFError:
        child.join()
        return ("died", child.exitcode)
    finally:
        if child.is_alive():
            kill_group(child)   # a hung case: the child and the kernel binary it runs
        receive.close()
