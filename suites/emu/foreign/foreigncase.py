"""Helpers for MSL written by other compilers and other people: run with every check,
compare through the project's tolerance policy (harness.check.compare.assert_close)."""

from __future__ import annotations

import numpy as np
import torch

from core.runtime import emu
from harness.check.compare import assert_close


def run_clean(source: str, kernel: str, grid, threadgroup, buffers, **kw) -> emu.EmuResult:
    """Run `kernel` of `source` with races, uninit and bounds checks; assert no findings."""
    res = emu.run_msl(source, kernel, grid=grid, threadgroup=threadgroup, buffers=list(buffers),
                      checks=emu.ALL_CHECKS, **kw)
    assert res.findings == [], "\n".join(map(str, res.findings))
    return res


def _tensor(x) -> torch.Tensor:
    return x if isinstance(x, torch.Tensor) else torch.from_numpy(np.ascontiguousarray(x))


def close(actual, expected, reduction_length: int = 1, op_class: str = "elementwise",
          what: str = "") -> None:
    """numpy arrays or torch tensors; the tolerance is the policy's for actual's dtype."""
    a = _tensor(actual)
    assert_close(a, _tensor(expected).to(a.dtype), reduction_length=reduction_length,
                 op_class=op_class, what=what)


def msl_line(source: str, needle: str) -> int:
    for i, text in enumerate(source.splitlines(), start=1):
        if needle in text:
            return i
    raise AssertionError(f"{needle!r} not in the MSL")
