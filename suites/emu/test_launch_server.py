"""Launch servers (core/runtime/emu/launch_server.py): a long-lived process forks every
launch, so nothing of one launch reaches the next.

Each library below holds a clean kernel and one with a defect (a race, an uninitialized
threadgroup read, an out-of-bounds access, a crash, a hang): one kernel library, so one
server runs them all. Every result must equal that of the same launch on a server that
has run nothing before (a fresh process): same findings (kind, buffer, line, thread,
count), same counters, same outputs, in either order. Both ways a kernel is run are
tested: a shared object loaded by the launch host (Linux), and the kernel's own
executable (another CPU, macOS; build.LAUNCH_HOST off)."""

from __future__ import annotations

import os

import numpy as np
import pytest

from core.errors import KernelCrashError, KernelTimeoutError
from core.runtime.emu import build, cross, launch_server
from emucase import clean, line_of, run

pytestmark = pytest.mark.skipif(
    bool(cross.target()), reason="under another CPU's emulator (qemu-user) every launch is a "
    "process of its own, not a launch server's child")

CLEAN = r"""
kernel void clean_copy(device const float* x [[buffer(0)]], device float* y [[buffer(1)]],
                       uint tid [[thread_index_in_threadgroup]],
                       uint g [[threadgroup_position_in_grid]]) {
  threadgroup float tile[64];
  tile[tid] = x[g * 64 + tid];
  threadgroup_barrier(mem_flags::mem_threadgroup);
  y[g * 64 + tid] = tile[63 - tid] + 1.0f;
}
"""
RACY = r"""
kernel void racy(device const float* x [[buffer(0)]], device float* y [[buffer(1)]],
                 uint tid [[thread_index_in_threadgroup]],
                 uint g [[threadgroup_position_in_grid]]) {
  threadgroup float tile[64];
  tile[tid] = x[g * 64 + tid];
  y[g * 64 + tid] = tile[63 - tid];
}
"""
UNINIT = r"""
kernel void half_written(device const float* x [[buffer(0)]], device float* y [[buffer(1)]],
                         uint tid [[thread_index_in_threadgroup]],
                         uint g [[threadgroup_position_in_grid]]) {
  threadgroup float tile[64];
  if (tid < 32) tile[tid] = x[g * 64 + tid];
  threadgroup_barrier(mem_flags::mem_threadgroup);
  y[g * 64 + tid] = tile[tid];
}
"""
OUT_OF_BOUNDS = r"""
kernel void past_end(device const float* x [[buffer(0)]], device float* y [[buffer(1)]],
                     uint tid [[thread_index_in_threadgroup]],
                     uint g [[threadgroup_position_in_grid]]) {
  y[g * 64 + tid] = x[g * 64 + tid + 4];
}
"""
CRASH = r"""
kernel void wild(device const float* x [[buffer(0)]], device float* y [[buffer(1)]],
                 uint tid [[thread_position_in_grid]]) {
  device const float* p = (device const float*)(0x10ul + tid);
  y[tid] = *p;
}
"""
SPIN = r"""
kernel void spin(device atomic_uint* flag [[buffer(0)]]) {
  while (atomic_load_explicit(&flag[0], memory_order_relaxed) == 0u) {}
  atomic_store_explicit(&flag[1], 1u, memory_order_relaxed);
}
"""
LIBRARY = CLEAN + RACY + UNINIT + OUT_OF_BOUNDS + CRASH + SPIN
DEFECTS = ["racy", "half_written", "past_end"]


def _launch(kernel: str) -> tuple[list, dict, np.ndarray]:
    """(findings, counters, output) of `kernel` on two groups of 64 threads."""
    x = np.arange(128, dtype=np.float32)
    y = np.zeros(128, np.float32)
    res = run(LIBRARY, kernel, 2, 64, x, y)
    return res.findings, res.stats, y


def _fresh(kernel: str) -> tuple[list, dict, np.ndarray]:
    """The same launch on a server that has run nothing before."""
    launch_server.shutdown()
    return _launch(kernel)


@pytest.fixture(autouse=True, params=["host", "executable"])
def program(request, monkeypatch):
    """How kernels run (build.Builder.loads_libraries), on servers of this test's own."""
    monkeypatch.setattr(build, "LAUNCH_HOST", request.param == "host")
    if request.param == "host" and not build.Builder.loads_libraries():
        pytest.skip("the launch host runs on Linux only")
    launch_server.shutdown()
    yield request.param
    launch_server.shutdown()


def test_the_defects_are_found_where_they_are():
    findings = {k: _fresh(k)[0] for k in DEFECTS}
    assert {(f.kind, f.address_space, f.line) for f in findings["racy"]} >= {
        ("race", "threadgroup", line_of(LIBRARY, "y[g * 64 + tid] = tile[63 - tid];"))}
    assert [(f.kind, f.line, f.count) for f in findings["half_written"]] == [
        ("uninit", line_of(LIBRARY, "y[g * 64 + tid] = tile[tid];"), 64)]
    assert [(f.kind, f.address_space, f.line, f.count) for f in findings["past_end"]] == [
        ("bounds", "device", line_of(LIBRARY, "x[g * 64 + tid + 4]"), 4)]


@pytest.mark.parametrize("defect", DEFECTS)
def test_a_defect_after_a_clean_launch_is_found_as_in_a_fresh_process(defect):
    expected = _fresh(defect)
    launch_server.shutdown()
    clean_findings, _, y = _launch("clean_copy")
    assert clean_findings == []
    np.testing.assert_array_equal(y.reshape(2, 64), np.arange(128).reshape(2, 64)[:, ::-1] + 1)
    assert launch_server.idle_servers() == 1
    assert _launch(defect)[0] == expected[0]
    assert _launch(defect)[1] == expected[1]


@pytest.mark.parametrize("defect", DEFECTS)
def test_a_clean_launch_after_a_defect_is_clean_as_in_a_fresh_process(defect):
    expected = _fresh("clean_copy")
    assert expected[0] == []
    launch_server.shutdown()
    assert _launch(defect)[0]
    findings, stats, y = _launch("clean_copy")
    assert launch_server.idle_servers() == 1
    assert findings == [] and stats == expected[1]
    np.testing.assert_array_equal(y, expected[2])


def test_a_crash_ends_only_its_launch():
    _launch("clean_copy")
    server = _only_server()
    # located on its MSL line: the pc, in the kernel's library, as the symbolizer reads it
    line = line_of(LIBRARY, "y[tid] = *p;")
    with pytest.raises(KernelCrashError, match=rf"kernel 'wild'.*invalid memory access "
                                               rf"\(SIGSEGV\) at MSL line {line} in"):
        _launch("wild")
    assert _only_server() is server and server.proc.poll() is None
    findings, _, y = _launch("clean_copy")
    assert findings == [] and y[0] == 64.0


def test_a_server_failing_twice_is_a_crash_error_naming_the_kernel(monkeypatch):
    def broken(self, library, job, kernel, result, timeout):
        raise launch_server.ServerError(f"launch server of {self.exe.name} answered 'bye'")

    monkeypatch.setattr(launch_server._Server, "launch", broken)
    with pytest.raises(KernelCrashError, match=r"kernel 'clean_copy'.*launch server failed "
                                               r"twice: launch server of .* answered 'bye'"):
        _launch("clean_copy")
    assert launch_server.idle_servers() == 0   # both broken servers were ended


def test_a_hang_is_killed_and_the_next_launch_runs():
    with pytest.raises(KernelTimeoutError, match=r"kernel 'spin'.*did not finish within 1 s"):
        run(LIBRARY, "spin", 1, 1, np.zeros(2, np.uint32), timeout=1, checks=())
    findings, _, y = _launch("clean_copy")
    assert findings == [] and y[0] == 64.0


@pytest.mark.parametrize("program", ["executable"], indirect=True)   # one host serves all
def test_idle_servers_are_bounded_least_recently_used_first(monkeypatch, program):
    monkeypatch.setattr(launch_server, "MAX_IDLE", 1)
    _launch("clean_copy")
    first = _only_server()
    other = CLEAN.replace("+ 1.0f", "+ 2.0f")
    y = np.zeros(64, np.float32)
    clean(other, "clean_copy", 1, 64, np.zeros(64, np.float32), y)
    assert np.all(y == 2.0)
    assert launch_server.idle_servers() == 1 and _only_server() is not first
    assert first.proc.poll() is not None  # ended and reaped: no zombie left behind


OTHERS = [CLEAN.replace("+ 1.0f", f"+ {k}.0f") for k in (2, 3)]


@pytest.mark.parametrize("program", ["host"], indirect=True)
def test_one_host_serves_every_library_each_launch_as_in_a_fresh_process(program):
    # Libraries loaded one after another (and again) in one host: each launch runs its own
    # library's kernel with that library's own state, as on a server that ran nothing.
    expected = _fresh("racy")
    launch_server.shutdown()
    for source, add in ((OTHERS[0], 2.0), (LIBRARY, 1.0), (OTHERS[1], 3.0), (OTHERS[0], 2.0)):
        y = np.zeros(64, np.float32)
        clean(source, "clean_copy", 1, 64, np.arange(64, dtype=np.float32), y)
        np.testing.assert_array_equal(y, np.arange(64)[::-1] + add)
        assert launch_server.idle_servers() == 1
    findings, stats, _ = _launch("racy")
    assert findings == expected[0] and stats == expected[1]
    assert launch_server.idle_servers() == 1


@pytest.mark.parametrize("program", ["host"], indirect=True)
def test_a_library_the_host_cannot_load_is_a_launch_error_naming_it(program, tmp_path):
    from core.runtime.emu import job as jobfile
    exe = build.default_builder().launch_host()
    job = jobfile.write_job((1, 1, 1), (1, 1, 1), [], schedule="forward", checks=0, seed=0,
                            workers=1, stack_bytes=65536, max_findings=1, barrier_off=0)
    result = tmp_path / "result.json"
    try:
        outcome = launch_server.launch(exe, str(tmp_path / "missing.so"), job.path, "k",
                                       str(result), 30)
    finally:
        job.release()
    assert outcome.returncode == 3
    report = result.read_text()
    assert "cannot load the kernel library" in report and "missing.so" in report


def test_shutdown_ends_and_reaps_every_server():
    _launch("clean_copy")
    server = _only_server()
    launch_server.shutdown()
    assert server.proc.returncode is not None and launch_server.idle_servers() == 0


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_forked_caller_starts_its_own_server_and_leaves_the_parents_alone():
    _launch("clean_copy")
    server = _only_server()
    pid = os.fork()
    if pid == 0:  # the child: its own server, the same results
        code = 1
        try:
            findings, _, y = _launch("clean_copy")
            code = 0 if findings == [] and y[0] == 64.0 and launch_server.idle_servers() == 1 \
                and _only_server() is not server else 2
            launch_server.shutdown()
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
    assert _only_server() is server and server.proc.poll() is None
    findings, _, y = _launch("clean_copy")
    assert findings == [] and y[0] == 64.0


def _only_server():
    servers = [s for _, s in launch_server._idle.values()]
    assert len(servers) == 1, servers
    return servers[0]



def _worker(send) -> None:
    _launch("clean_copy")
    send.send(_only_server().proc.pid)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_multiprocessing_worker_reaps_its_servers_when_it_ends():
    import multiprocessing

    ctx = multiprocessing.get_context("fork")
    receive, send = ctx.Pipe(duplex=False)
    worker = ctx.Process(target=_worker, args=(send,))
    worker.start()
    server_pid = receive.recv()
    worker.join(30)
    assert worker.exitcode == 0
    with pytest.raises(ProcessLookupError):  # ended and reaped by the worker: not a zombie
        os.kill(server_pid, 0)


DEEP = r"""
kernel void deep(device float* out [[buffer(0)]], uint tid [[thread_index_in_threadgroup]]) {
  float big[DEPTH];
  for (uint i = 0; i < DEPTH; ++i) big[i] = float(i + tid);
  out[tid] = big[(tid * 37) % DEPTH];
}
"""


def test_stacks_the_server_prepared_keep_their_guards_launch_after_launch():
    # The server maps a launch's fiber stacks before forking it and keeps them for the next
    # launch of that shape: an overflow must still hit a guard page on every reuse.
    shallow, deep = DEEP.replace("DEPTH", "64"), DEEP.replace("DEPTH", "3072")
    for _ in range(2):
        out = np.zeros(64, np.float32)
        clean(shallow + deep.replace("deep(", "deep2("), "deep", 1, 64, out, stack_bytes=8192)
        assert out[1] == float((37 % 64) + 1)
        with pytest.raises(KernelCrashError, match=r"kernel 'deep2'.*fiber stack overflow"):
            run(shallow + deep.replace("deep(", "deep2("), "deep2", 1, 64, out, stack_bytes=8192)
    assert launch_server.idle_servers() == 1
