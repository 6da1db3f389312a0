"""`T.sync_threads()`: an explicit threadgroup barrier, as TileLang's (`__syncthreads`).

Emits `tl.threadgroup_barrier` (core/ir/ops.py), printed as
`threadgroup_barrier(mem_flags::mem_threadgroup)`: every thread of the threadgroup waits
there and threadgroup memory written before it is visible after it. The barrier planner
(core/transform/thread_sync.py) takes it as one of its own: accesses it orders need no
further barrier, and one inside an `if` on the thread index is a LoweringError (not every
thread would reach it; the emulator reports such a barrier too). Device memory is not
ordered by it (mem_threadgroup), as the planner's barriers; a kernel that exchanges data
through device memory inside one threadgroup needs atomics.

TileLang's `barrier_id` / `arrive_count` select a CUDA named barrier (`bar.sync id, n`)
for part of the block; Metal has one barrier per threadgroup, so either is a
KernelDefinitionError.
"""

from __future__ import annotations

from tvm.tirx.script.builder import ir as _ir

from core.errors import KernelDefinitionError
from core.ir import ops
from core.language.kernel import _current


def sync_threads(barrier_id=None, arrive_count=None):
    """Wait until every thread of the threadgroup arrives (threadgroup_barrier)."""
    construct = "T.sync_threads"
    _current(construct)
    if barrier_id is not None or arrive_count is not None:
        raise KernelDefinitionError(
            f"barrier_id={barrier_id!r}, arrive_count={arrive_count!r}: named barriers for "
            "part of the threadgroup are CUDA's; Metal's threadgroup_barrier waits for "
            "every thread; allowed: T.sync_threads()", construct=construct)
    _ir.evaluate(ops.call("tl.threadgroup_barrier", dtype="int32"))
