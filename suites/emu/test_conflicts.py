"""The race checker, one kind of conflict at a time.

Read-after-write, write-after-read and write-after-write, each in threadgroup memory across
simdgroups, in device memory across simdgroups of one threadgroup and in device memory
across threadgroups; every racy kernel is asserted to give exactly one finding with its
kind, address space, buffer, MSL line and the conflicting access. Next to each, the
race-free versions a GPU programmer would write (a barrier with the right flags, disjoint
addresses, atomics) must be clean, and the near misses (a barrier with the wrong flags, a
simdgroup_barrier across simdgroups, a barrier between threadgroups) must still be races.

Two threads take part in each case: FIRST runs its access, then SECOND runs its own in
the same barrier interval. Under the forward schedule FIRST's thread runs first, so the
checker catches the conflict at SECOND's access; under the reverse schedule (same
threadgroup) it is caught at FIRST's, seen from the other side. Across threadgroups one
worker runs group 0 before group 1, so the conflict is caught in group 1.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest

from emucase import line_of, run

# The statements the cases combine. Each has its own text, so its MSL line is found by it.
WRITE_1, WRITE_2 = "x[I] = 7.0f;", "x[J] = 9.0f;"
READ_1, READ_2 = "res[slot] = x[I];", "res[slot] = x[J] * 2.0f;"
STATEMENTS = {"RAW": (WRITE_1, READ_2), "WAR": (READ_1, WRITE_2), "WAW": (WRITE_1, WRITE_2),
              "RAR": (READ_1, READ_2)}

# Threadgroup memory: threads A and B of one threadgroup of 64 (two simdgroups). The
# variable is written whole and a barrier passed before the tested interval, so no read
# in it is of uninitialized memory.
THREADGROUP = r"""
kernel void conflict(device float* res [[buffer(0)]],
                     uint tid [[thread_index_in_threadgroup]]) {
  threadgroup float x[64];
  const uint slot = tid;
  x[tid] = float(tid);
  threadgroup_barrier(mem_flags::mem_threadgroup);
  if (tid == A) { FIRST }
  SYNC
  if (tid == B) { SECOND }
}
"""

# Device memory, threads A and B of one threadgroup of 64.
DEVICE = r"""
kernel void conflict(device float* x [[buffer(0)]], device float* res [[buffer(1)]],
                     uint tid [[thread_index_in_threadgroup]]) {
  const uint slot = tid;
  if (tid == A) { FIRST }
  SYNC
  if (tid == B) { SECOND }
}
"""

# Device memory, thread 0 of threadgroup 0 and thread 0 of threadgroup 1.
DEVICE_GROUPS = r"""
kernel void conflict(device float* x [[buffer(0)]], device float* res [[buffer(1)]],
                     uint tid [[thread_index_in_threadgroup]],
                     uint g [[threadgroup_position_in_grid]]) {
  const uint slot = g * 64 + tid;
  if (g == 0 && tid == 0) { FIRST }
  SYNC
  if (g == 1 && tid == 0) { SECOND }
}
"""

TG_BARRIER = "threadgroup_barrier(mem_flags::mem_threadgroup);"
# Between the accesses when nothing orders them: a store of the thread's own result, which
# may alias x as far as the compiler knows, so it cannot merge two writes of x into one
# store (a merged store has no single MSL line to report).
NO_SYNC = "res[slot] = 0.0f;"
DEV_BARRIER = "threadgroup_barrier(mem_flags::mem_device);"


@dataclass(frozen=True)
class Scope:
    template: str
    space: str          # the finding's address_space
    grid: int
    a: int              # FIRST's thread (in its threadgroup)
    b: int              # SECOND's thread
    buffer: str         # the start of the finding's buffer_or_offset, for byte 0

    def source(self, first: str, second: str, sync: str = NO_SYNC, i: int = 0, j: int = 0) -> str:
        body = (self.template.replace("FIRST", first).replace("SECOND", second)
                .replace("SYNC", sync).replace("tid == A", f"tid == {self.a}")
                .replace("tid == B", f"tid == {self.b}"))
        return body.replace("[I]", f"[{i}]").replace("[J]", f"[{j}]")

    def line(self, which: str) -> int:
        """MSL line of the FIRST or SECOND access (substitution keeps the lines)."""
        return line_of(self.template, "{ " + which + " }")

    def launch(self, source: str, **kw):
        res = np.zeros(64 * self.grid, np.float32)
        buffers = [res] if self.space == "threadgroup" else [np.zeros(64, np.float32), res]
        return run(source, "conflict", self.grid, 64, *buffers, workers=1, **kw)


SCOPES = {
    "threadgroup memory across simdgroups": Scope(THREADGROUP, "threadgroup", 1, 0, 32, "'x', byte 0"),
    "device memory across simdgroups": Scope(DEVICE, "device", 1, 0, 32, "buffer 0 ('x'), byte 0"),
    "device memory across threadgroups": Scope(DEVICE_GROUPS, "device", 2, 0, 0, "buffer 0 ('x'), byte 0"),
}


def _detail(scope: str, me: str, them: str, other_thread: int) -> str:
    """The finding's detail as the checker words it: `me` the catching access, `them` the other."""
    if scope.startswith("threadgroup"):
        return f"{me} conflicts with a {them} by thread {other_thread} in the same barrier interval"
    if scope.endswith("threadgroups"):
        return f"{me} conflicts with a {them} by another threadgroup"
    return f"{me} conflicts with a {them} by another thread of the threadgroup in the same barrier interval"


def _kind_of(statement: str) -> str:
    return "write" if statement.startswith("x[") else "read"


@pytest.mark.parametrize("scope_name", list(SCOPES))
@pytest.mark.parametrize("conflict", ["RAW", "WAR", "WAW"])
def test_each_conflict_is_one_exact_finding(scope_name, conflict):
    scope = SCOPES[scope_name]
    first, second = STATEMENTS[conflict]
    src = scope.source(first, second)
    res = scope.launch(src)
    assert len(res.findings) == 1, "\n".join(map(str, res.findings))
    (f,) = res.findings
    assert f.kind == "race"
    assert f.address_space == scope.space
    assert f.buffer_or_offset == scope.buffer
    assert f.line == scope.line("SECOND"), f"caught at line {f.line}: {f}"
    assert f.group == ((1, 0, 0) if scope.grid == 2 else (0, 0, 0))
    assert f.thread == (scope.b, 0, 0)
    assert f.detail.startswith(_detail(scope_name, _kind_of(second), _kind_of(first), scope.a)), f.detail
    if scope.space == "threadgroup":
        assert f.other_thread == scope.a


@pytest.mark.parametrize("scope_name", [s for s in SCOPES if not s.endswith("threadgroups")])
@pytest.mark.parametrize("conflict", ["RAW", "WAR", "WAW"])
def test_the_other_order_is_caught_at_the_other_access(scope_name, conflict):
    # Reverse schedule: SECOND's thread runs first, FIRST's access meets it.
    scope = SCOPES[scope_name]
    first, second = STATEMENTS[conflict]
    src = scope.source(first, second)
    (f,) = scope.launch(src, schedule="reverse").findings
    assert (f.kind, f.address_space, f.buffer_or_offset) == ("race", scope.space, scope.buffer)
    assert f.line == scope.line("FIRST")
    assert f.thread == (scope.a, 0, 0)
    assert f.detail.startswith(_detail(scope_name, _kind_of(first), _kind_of(second), scope.b)), f.detail


RACE_FREE = {
    # (scope, conflict, sync, second index): why the two accesses do not race
    "threadgroup barrier orders threadgroup memory": ("threadgroup memory across simdgroups", TG_BARRIER, 0),
    "device barrier orders device memory in a threadgroup": ("device memory across simdgroups", DEV_BARRIER, 0),
    "disjoint threadgroup bytes": ("threadgroup memory across simdgroups", NO_SYNC, 1),
    "disjoint device bytes in a threadgroup": ("device memory across simdgroups", NO_SYNC, 1),
    "disjoint device bytes across threadgroups": ("device memory across threadgroups", NO_SYNC, 1),
}


@pytest.mark.parametrize("case", list(RACE_FREE))
@pytest.mark.parametrize("conflict", ["RAW", "WAR", "WAW"])
def test_race_free_versions_are_clean(case, conflict):
    scope_name, sync, j = RACE_FREE[case]
    scope = SCOPES[scope_name]
    first, second = STATEMENTS[conflict]
    res = scope.launch(scope.source(first, second, sync=sync, j=j))
    assert res.findings == [], "\n".join(map(str, res.findings))


@pytest.mark.parametrize("scope_name", list(SCOPES))
def test_reads_alone_never_race(scope_name):
    scope = SCOPES[scope_name]
    res = scope.launch(scope.source(*STATEMENTS["RAR"]))
    assert res.findings == [], "\n".join(map(str, res.findings))


STILL_RACES = {
    # a barrier that does not order the memory or the threads in question
    "a mem_device barrier does not order threadgroup memory": ("threadgroup memory across simdgroups", DEV_BARRIER),
    "a mem_threadgroup barrier does not order device memory": ("device memory across simdgroups", TG_BARRIER),
    "a simdgroup_barrier does not order two simdgroups": (
        "threadgroup memory across simdgroups", "simdgroup_barrier(mem_flags::mem_threadgroup);"),
    "no barrier orders threadgroups": ("device memory across threadgroups", DEV_BARRIER),
}


@pytest.mark.parametrize("case", list(STILL_RACES))
@pytest.mark.parametrize("conflict", ["RAW", "WAR", "WAW"])
def test_the_wrong_barrier_still_races(case, conflict):
    scope_name, sync = STILL_RACES[case]
    scope = SCOPES[scope_name]
    first, second = STATEMENTS[conflict]
    src = scope.source(first, second, sync=sync)
    res = scope.launch(src)
    assert [(f.kind, f.address_space, f.buffer_or_offset, f.line) for f in res.findings] == [
        ("race", scope.space, scope.buffer, scope.line("SECOND"))], "\n".join(map(str, res.findings))


def test_simdgroup_barrier_orders_lanes_of_one_simdgroup():
    # Lanes 0 and 1 share a simdgroup: a simdgroup_barrier with mem_threadgroup orders them.
    scope = Scope(THREADGROUP, "threadgroup", 1, 0, 1, "'x', byte 0")
    for conflict in ("RAW", "WAR", "WAW"):
        first, second = STATEMENTS[conflict]
        ordered = scope.source(first, second, sync="simdgroup_barrier(mem_flags::mem_threadgroup);")
        assert scope.launch(ordered).findings == [], conflict
        racy = scope.source(first, second)
        (f,) = scope.launch(racy).findings
        assert (f.kind, f.line, f.other_thread) == ("race", scope.line("SECOND"), 0)


ATOMIC = r"""
kernel void conflict(device atomic_int* d [[buffer(0)]], device int* res [[buffer(1)]],
                     uint tid [[thread_index_in_threadgroup]],
                     uint g [[threadgroup_position_in_grid]]) {
  threadgroup atomic_int t;
  if (tid == 0) atomic_store_explicit(&t, 0, memory_order_relaxed);
  threadgroup_barrier(mem_flags::mem_threadgroup);
  if (tid == 0 || tid == 32) {
    FIRST
  }
  if (tid == 32 || tid == 0) {
    SECOND
  }
  threadgroup_barrier(mem_flags::mem_threadgroup);
  if (tid == 0) res[g] = atomic_load_explicit(&t, memory_order_relaxed);
}
"""


@pytest.mark.parametrize("conflict", ["RAW", "WAR", "WAW"])
def test_atomics_on_one_address_are_not_races(conflict):
    # The same patterns through atomics, on threadgroup memory across simdgroups and on
    # device memory across threadgroups: ordered by the hardware, never a finding.
    ops = {
        "write": "atomic_fetch_add_explicit(&t, 1, memory_order_relaxed); "
                 "atomic_fetch_add_explicit(&d[0], 1, memory_order_relaxed);",
        "read": "res[2 + g * 64 + tid] = atomic_load_explicit(&t, memory_order_relaxed) + "
                "atomic_load_explicit(&d[0], memory_order_relaxed);",
    }
    first, second = (ops[_kind_of(s)] for s in STATEMENTS[conflict])
    d = np.zeros(1, np.int32)
    res = np.zeros(2 + 2 * 64, np.int32)
    out = run(ATOMIC.replace("FIRST", first).replace("SECOND", second), "conflict", 2, 64, d, res,
              workers=1)
    assert out.findings == [], "\n".join(map(str, out.findings))
    writes = sum(_kind_of(s) == "write" for s in STATEMENTS[conflict])
    assert d[0] == 2 * 2 * writes  # 2 threadgroups x 2 threads x the writing statements
    assert list(res[:2]) == [2 * writes, 2 * writes]
