"""`T.Kernel`: one device kernel launch inside a prim_func.

`with T.Kernel(gx[, gy[, gz]], threads=N | (x, y, z)) as (bx, ...)` enters TVMScript
launch-thread frames: blockIdx.{x,y,z} for the grid and threadIdx.{x,y,z} for the
threadgroup, and yields the block indices. Several `T.Kernel` blocks in one function are
several launches, in order. The resulting TIR is a nest of `thread_extent` AttrStmts.
"""

from __future__ import annotations

import contextlib

from tvm.tirx.script.builder import ir as _ir

from core.language.errors import KernelDefinitionError
from core.target import METAL

BLOCK_TAGS = ("blockIdx.x", "blockIdx.y", "blockIdx.z")
THREAD_TAGS = ("threadIdx.x", "threadIdx.y", "threadIdx.z")


def _threads_tuple(threads) -> tuple[int, ...]:
    dims = tuple(threads) if isinstance(threads, (tuple, list)) else (threads,)
    if not 1 <= len(dims) <= 3 or not all(isinstance(d, int) and d > 0 for d in dims):
        raise KernelDefinitionError(
            f"threads={threads!r} is not allowed; give a positive int or a tuple of 1-3 "
            "positive ints", construct="T.Kernel")
    total = 1
    for d in dims:
        total *= d
    if total > METAL.max_threads_per_group:
        raise KernelDefinitionError(
            f"threads={threads!r} asks for {total} threads per threadgroup; Apple GPUs allow "
            f"at most {METAL.max_threads_per_group}", construct="T.Kernel")
    return dims


class Kernel:
    """Context manager for one kernel launch; yields the block index variables."""

    def __init__(self, *grid, threads=128, prelude=None, is_cpu=False, **_tilelang_options):
        if not 1 <= len(grid) <= 3:
            raise KernelDefinitionError(
                f"T.Kernel takes 1 to 3 grid dimensions, got {len(grid)}", construct="T.Kernel")
        for g in grid:
            if isinstance(g, int) and g <= 0:
                raise KernelDefinitionError(
                    f"grid extent {g} is not positive", construct="T.Kernel")
        self.grid = grid
        self.threads = _threads_tuple(threads)
        self._stack = contextlib.ExitStack()

    def __enter__(self):
        block_vars = [self._stack.enter_context(_ir.launch_thread(tag, extent))
                      for tag, extent in zip(BLOCK_TAGS, self.grid)]
        for tag, extent in zip(THREAD_TAGS, self.threads):
            self._stack.enter_context(_ir.launch_thread(tag, extent))
        return block_vars[0] if len(block_vars) == 1 else tuple(block_vars)

    def __exit__(self, *exc):
        return self._stack.__exit__(*exc)
