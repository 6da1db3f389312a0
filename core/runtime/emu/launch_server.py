"""Launch servers: long-lived emulator processes that fork each launch.

A launch used to start its executable afresh (`kernel.bin JOB KERNEL RESULT`): exec,
dynamic loading of the C++ runtime and Python's process spawn, paid on every call. A
launch server is a program started once as `PROGRAM --serve` (src/launch.cpp): for each
request it forks a child that runs the launch, so every launch starts from the state the
program had before its first one (nothing carries over: arenas, shadows, counters and
findings are the child's own), and a crash or a hang ends only that child. On Linux the
program is the launch host, one for every kernel, each request naming the kernel's shared
object (build.py, src/entry/host.cpp); elsewhere it is the kernel's own executable, and
the request names no library.

Contract with run.py: `launch(program, library, job, kernel, result, timeout)` returns
the child's `Outcome` (exit status or signal, and what it wrote on stderr), or raises
`LaunchTimeout` after killing the child when it ran past `timeout` seconds. A server
that misbehaves (died, protocol out of step) is discarded and the launch is retried once
on a fresh one; the caller never sees the difference. Idle servers are kept per program
and emulator settings (the `METALTILE_EMU_*` variables a server reads when it starts), at
most `MAX_IDLE` in all (least recently used first out), ended and reaped when the
interpreter exits (also a multiprocessing worker's exit); a forked Python process (pytest
workers, the fuzzer's fork server) starts its own and never touches its parent's.
The server also maps each launch's fiber stacks before forking it (src/launch.cpp), kept
for the next launch of the same shape.
"""

from __future__ import annotations

import atexit
import multiprocessing.util
import os
import select
import signal
import subprocess
import tempfile
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path

MAX_IDLE = 8   # idle servers kept, over all executables
_REPLY_BYTES = 256


@dataclass(frozen=True)
class Outcome:
    """How a launch child ended: `returncode` as subprocess reports it (negative: killed by
    that signal) and the tail of its stderr."""

    returncode: int
    stderr: str


class LaunchTimeout(Exception):
    """The launch ran past its timeout; its child has been killed."""


class ServerError(Exception):
    """The server died or answered out of protocol; it has been discarded."""


class _Server:
    """One `PROGRAM --serve` process and its pipes. Used by one launch at a time."""

    def __init__(self, exe: Path):
        self.exe = exe
        self.owner = os.getpid()
        self.environment = _environment()
        # stderr goes to a file: the children inherit it, and a crash's message is read
        # back from where the launch started writing.
        self.stderr = tempfile.TemporaryFile(prefix="metaltile-server-")
        self.proc = subprocess.Popen([str(exe), "--serve"], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=self.stderr, bufsize=0,
                                     close_fds=True)
        self._pending = b""

    def _line(self, deadline: float | None) -> str | None:
        """The next reply line, or None when `deadline` (time.monotonic) passes first."""
        fd = self.proc.stdout.fileno()
        while b"\n" not in self._pending:
            wait = None if deadline is None else max(0.0, deadline - time.monotonic())
            ready, _, _ = select.select([fd], [], [], wait)
            if not ready:
                return None
            chunk = os.read(fd, _REPLY_BYTES)
            if not chunk:
                try:
                    status = self.proc.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    status = None
                said = self._said()
                raise ServerError(f"launch server of {self.exe.name} ended "
                                  f"(status {status}){': ' + said if said else ''}")
            self._pending += chunk
        line, self._pending = self._pending.split(b"\n", 1)
        return line.decode()

    def _said(self) -> str:
        """The end of what the server wrote on stderr (why it ended, if it said)."""
        self.stderr.seek(0)
        return self.stderr.read().decode(errors="replace").strip()[-2000:]

    def launch(self, library: str, job: str, kernel: str, result: str,
               timeout: float) -> Outcome:
        if any(c in part for part in (library, job, kernel, result) for c in "\t\n"):
            raise ServerError("a path or kernel name holds a tab or newline")
        start = self.stderr.seek(0, os.SEEK_END)
        deadline = time.monotonic() + timeout
        try:
            self.proc.stdin.write(f"{library}\t{job}\t{kernel}\t{result}\n".encode())
        except OSError as err:
            said = self._said()
            raise ServerError(f"launch server of {self.exe.name}: {err}"
                              f"{': ' + said if said else ''}") from None
        started = self._line(deadline)
        if started is None:  # not even started in time: this server is not to be trusted
            self.close()
            raise LaunchTimeout()
        if not started.startswith("pid "):
            raise ServerError(f"launch server of {self.exe.name} answered {started!r}")
        child = int(started.split()[1])
        ended = self._line(deadline)
        if ended is None:
            try:
                os.kill(child, signal.SIGKILL)
            except ProcessLookupError:
                pass
            if self._line(time.monotonic() + 10.0) is None:  # the server reaps it and says so
                raise ServerError("launch server did not reap a killed launch")
            raise LaunchTimeout()
        what, _, value = ended.partition(" ")
        if what not in ("exit", "signal"):
            raise ServerError(f"launch server of {self.exe.name} answered {ended!r}")
        self.stderr.seek(start)
        err = self.stderr.read().decode(errors="replace")
        self.stderr.truncate(start)  # keep the file small across many launches
        return Outcome(int(value) if what == "exit" else -int(value), err)

    def close(self) -> None:
        """End the server: closing its stdin ends it (and any launch it still runs)."""
        if self.owner != os.getpid():  # a forked copy: the parent's server is not ours
            return
        try:
            self.proc.stdin.close()
        except OSError:
            pass
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.proc.stdout.close()
        self.stderr.close()


_idle: OrderedDict[int, tuple[Path, _Server]] = OrderedDict()   # id -> (exe, server), LRU
_lock = threading.Lock()


_finalizer_pid = 0


def _take(exe: Path) -> _Server:
    global _finalizer_pid
    if _finalizer_pid != os.getpid():
        # multiprocessing's workers end with os._exit, which skips atexit, but run the
        # finalizers registered in their own process: their servers are ended and reaped
        # there too, not left to whoever adopts orphans.
        _finalizer_pid = os.getpid()
        multiprocessing.util.Finalize(None, shutdown, exitpriority=0)
    with _lock:
        for key, (path, server) in reversed(_idle.items()):
            if path == exe and server.owner == os.getpid() \
                    and server.environment == _environment():
                del _idle[key]
                return server
    return _Server(exe)


def _environment() -> tuple:
    """The emulator's settings in this process's environment (METALTILE_EMU_SANDBOX=off):
    a server reads them when it starts, so one started under others is not reused."""
    return tuple(sorted((k, v) for k, v in os.environ.items() if k.startswith("METALTILE_EMU_")))


def _give_back(server: _Server) -> None:
    evicted = []
    with _lock:
        _idle[id(server)] = (server.exe, server)
        while len(_idle) > MAX_IDLE:
            evicted.append(_idle.popitem(last=False)[1][1])
    for s in evicted:
        s.close()


def launch(program: Path, library: str, job: str, kernel: str, result: str,
           timeout: float) -> Outcome:
    """Run one launch of `kernel` from `library` (a kernel's shared object; "" when
    `program` is the kernel's executable) on a server of `program` (see the module
    docstring)."""
    for attempt in (0, 1):
        server = _take(program)
        try:
            outcome = server.launch(library, job, kernel, result, timeout)
        except LaunchTimeout:
            if server.proc.returncode is None:
                _give_back(server)   # it reaped the killed launch: in step, reusable
            raise
        except (ServerError, OSError):
            server.close()
            if attempt:
                raise
            continue
        except BaseException:   # interrupted mid-launch (Ctrl-C): out of step, end it
            server.close()
            raise
        _give_back(server)
        return outcome
    raise AssertionError("unreachable")


def shutdown() -> None:
    """End every idle server of this process (at interpreter exit; tests use it too)."""
    with _lock:
        servers = [s for _, s in _idle.values()]
        _idle.clear()
    for s in servers:
        s.close()


def idle_servers() -> int:
    """How many idle servers this process keeps (for tests)."""
    with _lock:
        return sum(1 for _, s in _idle.values() if s.owner == os.getpid())


def _forget_after_fork() -> None:
    # The child of a fork holds copies of the parent's server pipes: it must never use
    # them, and its copy of a server's stdin would keep that server from seeing the parent
    # close it. Point each copy at /dev/null (the fd numbers stay valid for the objects
    # that still name them) and forget the servers; the parent still owns the processes.
    global _lock
    servers = [s for _, s in _idle.values()]
    _idle.clear()
    _lock = threading.Lock()
    if not servers:
        return
    null = os.open(os.devnull, os.O_RDWR)
    try:
        for s in servers:
            for stream in (s.proc.stdin, s.proc.stdout):
                try:
                    os.dup2(null, stream.fileno())
                except (OSError, ValueError):
                    pass
    finally:
        os.close(null)


atexit.register(shutdown)
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_after_fork)
