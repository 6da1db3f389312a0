"""macOS backend: run a launch on the Apple GPU through `torch.mps.compile_shader`.

UNTESTED: written against PyTorch's documented API (`torch.mps.compile_shader`,
`torch.mps.Event`, `torch.mps.synchronize`); no Mac has run it in this project, and its
tests (the `backend` fixture's "mps" runs, suites/conftest.py) run only on Macs. Rules it
follows (docs/architecture.md, "The runtime"):
  - one compiled library per MSL text (cached by the text);
  - every argument is a tensor: the args struct is uploaded as a uint8 MPS tensor, so two
    scalars are never passed separately (compile_shader binds each positional argument
    to its own buffer index);
  - launches are queued, never waited on one by one: `run` encodes the dispatch on
    PyTorch's MPS stream and returns. The launches of one call of a host program run in
    order on that stream. Everything a launch reads or writes (inputs, outputs, the
    uploaded args struct, workspaces) stays referenced in `_IN_FLIGHT` until an event
    recorded after the dispatch has completed, so no buffer is freed (and its memory
    reused) while the GPU may still touch it;
  - the host waits only where it reads a result: `synchronize()` (PyTorch's own copies to
    the CPU, `.cpu()` / `.item()`, wait on the same stream as well);
  - the threadgroup size is checked against the pipeline's own limit when PyTorch exposes
    it (`max_threads_per_threadgroup`), never a silent no-op dispatch.
"""

from __future__ import annotations

from collections import deque

from core.errors import LaunchError

_LIBRARIES: dict = {}
# (event recorded after a launch, the tensors that launch uses), oldest first
_IN_FLIGHT: deque = deque()


def _library(msl: str):
    import torch
    lib = _LIBRARIES.get(msl)
    if lib is None:
        lib = torch.mps.compile_shader(msl)
        _LIBRARIES[msl] = lib
    return lib


def _release_completed():
    """Drop the references of launches the GPU has finished (events complete in order)."""
    while _IN_FLIGHT and _IN_FLIGHT[0][0].query():
        _IN_FLIGHT.popleft()


def run(msl, kernel, grid, threadgroup, buffers):
    """Queue one launch; returns before the GPU runs it."""
    import numpy as np
    import torch
    lib = _library(msl)
    fn = getattr(lib, kernel)
    limit = getattr(fn, "max_threads_per_threadgroup", None)
    threads = threadgroup[0] * threadgroup[1] * threadgroup[2]
    if limit is not None and threads > int(limit):
        raise LaunchError(f"threadgroup {threadgroup} has {threads} threads; the compiled "
                          f"pipeline allows {limit}", kernel=kernel, construct="threadgroup size")
    args = [torch.from_numpy(b).to("mps") if isinstance(b, np.ndarray) else b
            for b in buffers]
    total = [g * t for g, t in zip(grid, threadgroup)]
    fn(*args, threads=total, group_size=list(threadgroup))
    done = torch.mps.Event()
    done.record()
    _IN_FLIGHT.append((done, args))
    _release_completed()


def synchronize():
    """Wait for every queued launch; their tensors are released. Call before the host
    reads device memory that is not read through PyTorch."""
    import torch
    torch.mps.synchronize()
    _IN_FLIGHT.clear()
