"""A clang that stays loaded between compiles (Linux with glibc): `preload/clang_server.c`,
preloaded into the clang driver, serves compiles from one process, each in a forked child
that runs clang's own `main` with the compile's arguments and this process's environment
and working directory at the time of the compile. A compile then does not pay
clang's start-up (mapping and relocating libLLVM and libclang-cpp and running their static
initializers: about half the CPU of a fuzz kernel's compile on the 2-core machine,
docs/emulator.md); the child is a fresh copy of the loaded program, so the object it writes
is the one `clang` started anew writes (suites/emu/test_clang_server.py compares them
byte for byte).

    server = ClangServer(cxx, library)       library: the built preload object
    res = server.run(cmd, stdin_text, timeout)   a CompletedProcess, or None: not served
                                                  (the caller runs clang itself)

One server per process and compiler (a forked process starts its own: `for_compiler`);
one compile at a time through it (a second thread's compile runs clang itself). A server
that cannot start or dies is not used again by this process; a compile past its timeout
is killed and raises subprocess.TimeoutExpired, as subprocess.run would. Off with
METALTILE_EMU_CLANG_SERVER=0.
"""

from __future__ import annotations

import atexit
import os
import platform
import select
import signal
import struct
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

SOURCE = Path(__file__).resolve().parent / "preload" / "clang_server.c"
ENV_SWITCH = "METALTILE_EMU_CLANG_SERVER"


def supported() -> bool:
    """Whether compiles can be served here: Linux with glibc (the preload replaces glibc's
    `__libc_start_main`), not switched off."""
    return (sys.platform.startswith("linux") and platform.libc_ver()[0] == "glibc"
            and os.environ.get(ENV_SWITCH, "1") != "0")


def build_command(cc: str, output: str) -> list[str]:
    """The command compiling the preload library (`cc`: the toolchain's clang)."""
    return [cc, "-x", "c", "-shared", "-fPIC", "-O2", "-Wall", str(SOURCE), "-o", output,
            "-ldl"]


class ClangServer:
    def __init__(self, cxx: str, library: Path):
        self.cxx, self.library = cxx, library
        self.pid = os.getpid()
        self.lock = threading.Lock()
        self.broken = False
        self.proc: subprocess.Popen | None = None

    def _start(self) -> bool:
        env = dict(os.environ, LD_PRELOAD=str(self.library), MT_CLANG_SERVER="1",
                   LD_BIND_NOW="1")   # resolved once here, not in every child
        try:
            self.proc = subprocess.Popen([self.cxx], stdin=subprocess.PIPE,
                                         stdout=subprocess.PIPE, env=env, bufsize=0)
        except OSError:
            self.broken = True
            return False
        atexit.register(self.close)
        return True

    def close(self) -> None:
        proc, self.proc = self.proc, None
        if proc is not None and self.pid == os.getpid():
            try:
                proc.stdin.close()
                proc.wait(5)
            except (OSError, subprocess.TimeoutExpired):
                proc.kill()

    def run(self, cmd: list[str], stdin: str | None, timeout: float):
        """clang's CompletedProcess for `cmd` (text output), None when not served."""
        if self.broken or not self.lock.acquire(blocking=False):
            return None
        try:
            if self.proc is None and not self._start():
                return None
            return self._serve(cmd, stdin, timeout)
        finally:
            self.lock.release()

    def _serve(self, cmd, stdin, timeout):
        files = []
        try:
            for _ in range(3 if stdin is not None else 2):
                fd, name = tempfile.mkstemp(prefix="mt-clang-")
                os.close(fd)
                files.append(name)
            if stdin is not None:
                Path(files[2]).write_text(stdin)
            strings = [os.getcwd(), files[2] if stdin is not None else "", files[0],
                       files[1], str(len(cmd)), *cmd,
                       *(f"{k}={v}" for k, v in os.environ.items())]
            request = b"".join(os.fsencode(s) + b"\0" for s in strings)
            try:
                self.proc.stdin.write(struct.pack("=I", len(request)) + request)
                self.proc.stdin.flush()
                pid = self._word(timeout)
                if pid == 0:   # the server could not fork: this compile runs clang itself
                    return None
                status = self._word(timeout, pid)
            except (OSError, EOFError):
                self.broken = True   # the server is gone: clang runs on its own from now on
                self.close()
                return None
            code = os.waitstatus_to_exitcode(status)
            return subprocess.CompletedProcess(cmd, code, Path(files[0]).read_text(
                errors="replace"), Path(files[1]).read_text(errors="replace"))
        finally:
            for name in files:
                Path(name).unlink(missing_ok=True)

    def _word(self, timeout: float, pid: int | None = None) -> int:
        fd = self.proc.stdout.fileno()
        data = b""
        while len(data) < 4:
            ready, _, _ = select.select([fd], [], [], timeout)
            if not ready:
                if pid is None:   # the server itself does not answer: not used again
                    self.broken = True
                    self.close()
                else:             # the compile ran past its timeout: end it, as run() does
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
                    self._word(60.0)   # its status, so the server is ready for the next
                raise subprocess.TimeoutExpired(self.cxx, timeout)
            chunk = os.read(fd, 4 - len(data))
            if not chunk:
                raise EOFError("the clang server ended")
            data += chunk
        return struct.unpack("=I", data)[0]


_servers: dict[tuple, ClangServer] = {}
_servers_lock = threading.Lock()


def _after_fork_in_child() -> None:
    """A forked child drops its copies of the parent's server pipes (so the parent's server
    still sees its end when the parent closes it) and starts servers of its own."""
    for server in _servers.values():
        proc, server.proc, server.broken = server.proc, None, True
        if proc is not None:
            for pipe in (proc.stdin, proc.stdout):
                try:
                    pipe.close()
                except OSError:
                    pass
    _servers.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def for_compiler(cxx: str, library: Path) -> ClangServer:
    """This process's server for `cxx` (a forked child starts its own)."""
    key = (cxx, str(library))
    with _servers_lock:
        server = _servers.get(key)
        if server is None:
            server = _servers[key] = ClangServer(cxx, library)
        return server
