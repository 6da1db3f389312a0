"""The process that runs a kernel reaches nothing but its job (src/sandbox.cpp): a kernel
that calls into the host (a file, a program, a new process) is stopped by the seccomp filter
and reported as a KernelCrashError naming the kernel and the refused system call, and the
host is left as it was. METALTILE_EMU_SANDBOX=off shows each kernel really does what the
test says it tries.

These kernels are not MSL (MSL declares no `system` or `open`); they stand for one that got
past the source checks, so those checks are switched off here where they exist. Each test
runs both ways a kernel is run: a shared object loaded by the launch host's launch child,
and the kernel's own executable (build.LAUNCH_HOST off: qemu-user's and macOS's way)."""

from __future__ import annotations

import os
import sys

import numpy as np
import pytest

from core.errors import KernelCrashError
from core.runtime import emu
from core.runtime.emu import build, launch_server
from emucase import HEADER

pytestmark = [
    pytest.mark.skipif(sys.platform != "linux",
                       reason="the system-call sandbox is Linux's seccomp (none on macOS)"),
    pytest.mark.skipif(os.environ.get("METALTILE_EMU_SANDBOX") in ("off", "0"),
                       reason="METALTILE_EMU_SANDBOX=off (qemu-user cannot filter a guest's "
                              "system calls)"),
]

SYSTEM = HEADER + """\
extern "C" int system(const char*);
kernel void calls_system(device float* a [[buffer(0)]], uint i [[thread_position_in_grid]]) {
  if (i == 0) a[0] = float(system("touch MARKER"));
}
"""
OPEN = HEADER + """\
extern "C" int open(const char*, int, ...);
kernel void opens_a_file(device float* a [[buffer(0)]], uint i [[thread_position_in_grid]]) {
  if (i == 0) a[0] = float(open("MARKER", 65, 420));   // O_WRONLY | O_CREAT, 0644
}
"""
FORK = HEADER + """\
extern "C" int fork();
kernel void forks(device float* a [[buffer(0)]], uint i [[thread_position_in_grid]]) {
  if (i == 0) a[0] = float(fork());
}
"""
STATIC = HEADER + """\
extern "C" int execve(const char*, char* const*, char* const*);
static int started = execve("MARKER", nullptr, nullptr);
kernel void starts_a_program(device float* a [[buffer(0)]],
                             uint i [[thread_position_in_grid]]) {
  a[i] = float(started);
}
"""


@pytest.fixture(autouse=True, params=["host", "executable"])
def program(request, monkeypatch):
    monkeypatch.setattr(build, "LAUNCH_HOST", request.param == "host")
    launch_server.shutdown()
    yield request.param
    launch_server.shutdown()


@pytest.fixture
def unchecked_source(monkeypatch):
    """Let a kernel that is not MSL through to the build (the source and symbol checks
    would refuse it first), so the sandbox is what stops it."""
    from core.runtime.emu import admission
    monkeypatch.setattr(admission, "ENFORCE", False)


def _run(source: str, kernel: str, marker):
    a = np.zeros(32, np.float32)
    return emu.run_msl(source.replace("MARKER", str(marker)), kernel, grid=(1, 1, 1),
                       threadgroup=(32, 1, 1), buffers=[a])


@pytest.mark.parametrize("source,kernel,refused", [
    (SYSTEM, "calls_system", r"sandbox refused (system call|a system call)"),
    (OPEN, "opens_a_file", r"sandbox refused system call openat"),
    (FORK, "forks", r"sandbox refused (system call clone|a system call)"),
], ids=["system", "open", "fork"])
def test_a_kernel_reaching_the_host_is_stopped_and_named(source, kernel, refused, tmp_path,
                                                         unchecked_source):
    marker = tmp_path / "marker"
    with pytest.raises(KernelCrashError, match=rf"kernel '{kernel}': .*{refused}") as err:
        _run(source, kernel, marker)
    assert "cannot reach the host" in str(err.value)
    assert not marker.exists()


def test_a_static_initializer_is_stopped_before_any_launch(tmp_path, unchecked_source,
                                                           program):
    with pytest.raises(KernelCrashError, match=r"refused system call execve .*static "
                                               r"initializer") as err:
        _run(STATIC, "starts_a_program", tmp_path / "program")
    if program == "host":   # the launch that loaded it reported it; the host lives on
        assert "while the kernel was loaded" in str(err.value)
        assert launch_server.idle_servers() == 1


@pytest.mark.parametrize("source,kernel", [(SYSTEM, "calls_system"), (OPEN, "opens_a_file")],
                         ids=["system", "open"])
def test_without_the_sandbox_the_kernel_does_reach_the_host(source, kernel, tmp_path,
                                                            monkeypatch, unchecked_source):
    monkeypatch.setenv("METALTILE_EMU_SANDBOX", "off")
    marker = tmp_path / "marker"
    _run(source, kernel, marker)
    assert marker.exists()


def test_a_clean_kernel_runs_in_the_sandbox_on_many_threads(rng):
    src = HEADER + """\
kernel void scale(device float* a [[buffer(0)]], uint i [[thread_position_in_grid]]) {
  a[i] = a[i] * 2.0f;
}
"""
    a = rng.standard_normal(8 * 64).astype(np.float32)
    want = a * 2
    res = emu.run_msl(src, "scale", grid=(8, 1, 1), threadgroup=(64, 1, 1), buffers=[a],
                      workers=2)
    assert res.findings == []
    np.testing.assert_array_equal(a, want)
