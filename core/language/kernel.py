"""`T.Kernel`: one device kernel launch inside a prim_func.

`with T.Kernel(gx[, gy[, gz]], threads=N | (x, y, z)) as (bx, ...)` enters TVMScript
launch-thread frames: blockIdx.{x,y,z} for the grid and threadIdx.{x,y,z} for the
threadgroup, and yields the block indices. Several `T.Kernel` blocks in one function are
several launches, in order. The resulting TIR is a nest of `thread_extent` AttrStmts.
Inside the block, `T.get_thread_binding(dim)` / `T.get_block_binding(dim)` return the
index variables and `T.get_thread_extent(dim)` / `T.get_block_extent(dim)` the extents.
"""

from __future__ import annotations

import contextlib

import tvm
from tvm.tirx.script.builder import ir as _ir

from core.errors import KernelDefinitionError
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
        if prelude is not None or is_cpu:
            raise KernelDefinitionError(
                "prelude= (CUDA source) and is_cpu=True are not supported: every T.Kernel is "
                "a Metal compute kernel", construct="T.Kernel")
        self.grid = grid
        self.threads = _threads_tuple(threads)
        self.reducers = {}   # T.alloc_reducer buffers (handle -> op), for reducer_update
        self._stack = contextlib.ExitStack()

    def __enter__(self):
        self.block_vars = [self._stack.enter_context(_ir.launch_thread(tag, extent))
                           for tag, extent in zip(BLOCK_TAGS, self.grid)]
        self.thread_vars = [self._stack.enter_context(_ir.launch_thread(tag, extent))
                            for tag, extent in zip(THREAD_TAGS, self.threads)]
        _ACTIVE.append(self)
        bv = self.block_vars
        return bv[0] if len(bv) == 1 else tuple(bv)

    def __exit__(self, *exc):
        _ACTIVE.remove(self)
        return self._stack.__exit__(*exc)


# The T.Kernel blocks being parsed, innermost last (the parser enters them in order).
_ACTIVE: list[Kernel] = []


def _current(construct: str) -> Kernel:
    if not _ACTIVE:
        raise KernelDefinitionError("is only allowed inside a `with T.Kernel(...)` block",
                                    construct=construct)
    return _ACTIVE[-1]


def _dim(dim, construct) -> int:
    if dim not in (0, 1, 2):
        raise KernelDefinitionError(f"dim={dim!r} is not allowed; allowed: 0 (x), 1 (y), "
                                    "2 (z)", construct=construct)
    return dim


def get_thread_binding(dim: int = 0):
    """The thread index of the current T.Kernel along `dim` (threadIdx.x/y/z); 0 for a
    dimension the kernel does not launch (its extent is 1)."""
    k = _current("T.get_thread_binding")
    d = _dim(dim, "T.get_thread_binding")
    return k.thread_vars[d] if d < len(k.thread_vars) else tvm.tirx.const(0, "int32")


def get_thread_bindings():
    return [get_thread_binding(d) for d in range(3)]


def get_block_binding(dim: int = 0):
    """The threadgroup index of the current T.Kernel along `dim` (blockIdx.x/y/z)."""
    k = _current("T.get_block_binding")
    d = _dim(dim, "T.get_block_binding")
    return k.block_vars[d] if d < len(k.block_vars) else tvm.tirx.const(0, "int32")


def get_block_bindings():
    return [get_block_binding(d) for d in range(3)]


def get_thread_extent(dim: int = 0) -> int:
    k = _current("T.get_thread_extent")
    d = _dim(dim, "T.get_thread_extent")
    return k.threads[d] if d < len(k.threads) else 1


def get_thread_extents() -> list:
    return [get_thread_extent(d) for d in range(3)]


def get_block_extent(dim: int = 0):
    k = _current("T.get_block_extent")
    d = _dim(dim, "T.get_block_extent")
    return k.grid[d] if d < len(k.grid) else 1


def get_block_extents() -> list:
    return [get_block_extent(d) for d in range(3)]
