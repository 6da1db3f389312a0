"""macOS backend: run a launch on the Apple GPU through `torch.mps.compile_shader`.

UNTESTED: written against PyTorch's documented API; this project's CI for it runs only
on Macs. Rules it follows (docs/architecture.md, "The runtime"):
  - one compiled library per MSL text (cached by the text);
  - every argument is a tensor: the args struct is uploaded as a uint8 MPS tensor, so two
    scalars are never passed separately (compile_shader binds each positional argument
    to its own buffer index);
  - launches are asynchronous: temporaries (the args tensor) are kept referenced until
    `torch.mps.synchronize()` after the launch;
  - the threadgroup size is checked against the pipeline's own limit when PyTorch exposes
    it (`max_threads_per_threadgroup`), never a silent no-op dispatch.
"""

from __future__ import annotations

from core.errors import LaunchError

_LIBRARIES: dict = {}


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
    torch.mps.synchronize()  # keeps `args` (incl. the packed scalars) alive until done
