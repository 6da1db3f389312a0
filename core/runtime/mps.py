"""macOS backend: run a launch on the Apple GPU through `torch.mps.compile_shader`.

UNTESTED: written against PyTorch's documented API; this project's CI for it runs only
on Macs. Rules it follows (docs/architecture.md, "The runtime"):
  - one compiled library per MSL text (cached by the text);
  - every argument is a tensor: the args struct is uploaded as a uint8 MPS tensor, so two
    scalars are never passed separately (compile_shader binds each positional argument
    to its own buffer index);
  - launches are asynchronous: one call's launches are enqueued back to back without
    waiting; its temporaries (args tensors, workspaces) are kept referenced with an
    `torch.mps.Event` recorded after the call's last launch, and released once that
    event has completed (checked at the next call), never by synchronizing per launch;
  - the threadgroup size is checked against the pipeline's own limit when PyTorch exposes
    it (`max_threads_per_threadgroup`), never a silent no-op dispatch.
"""

from __future__ import annotations

from core.errors import LaunchError

_LIBRARIES: dict = {}
_PENDING: list = []     # (torch.mps.Event, temporaries) of calls the GPU may still run
_UPLOADED: list = []    # args tensors of the current call's launches


def _library(msl: str):
    import torch
    lib = _LIBRARIES.get(msl)
    if lib is None:
        lib = torch.mps.compile_shader(msl)
        _LIBRARIES[msl] = lib
    return lib


def run(msl, kernel, grid, threadgroup, buffers):
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
    _UPLOADED.append(args)  # the packed scalars must outlive the launch (keep_alive)


def keep_alive(temporaries):
    """Hold a finished-enqueuing call's temporaries until its work has completed."""
    import torch
    _PENDING[:] = [(e, t) for e, t in _PENDING if not e.query()]
    event = torch.mps.Event()
    event.record()
    _PENDING.append((event, (list(temporaries), list(_UPLOADED))))
    _UPLOADED.clear()
