"""The MPS backend queues launches: no wait per launch, every tensor a launch uses kept
alive until it completes, a wait only where the host reads (core/runtime/mps.py).

Needs macOS with MPS: skipped elsewhere (the `mps` marker, suites/conftest.py). UNTESTED:
no Mac has run this module yet.
"""

import pytest
import torch

import core
import core.language as T
from core.runtime import backends, mps
from harness.check.compare import assert_close

pytestmark = pytest.mark.mps

N = 256


def _scale_kernel():
    @T.prim_func
    def scale(A: T.Tensor((N,), "float32"), alpha: T.float32, B: T.Tensor((N,), "float32")):
        with T.Kernel(N // 64, threads=64) as bx:
            for i in T.Parallel(64):
                B[bx * 64 + i] = A[bx * 64 + i] * alpha
    return core.compile(scale, out_idx=[-1])


def test_queued_calls_each_keep_their_packed_scalars():
    """Many calls without a wait in between: each launch's args struct (a temporary of the
    call) must survive until the GPU has read it, so every output has its own alpha."""
    kernel = _scale_kernel()
    a = torch.randn(N, generator=torch.Generator().manual_seed(7))
    a_dev = a.to("mps")
    outs = [kernel(a_dev, float(k), backend="mps") for k in range(64)]
    backends.synchronize("mps")
    assert not mps._IN_FLIGHT
    for k, out in enumerate(outs):
        assert_close(out.cpu(), a.double() * k, "float32", what=f"call {k}:")


def test_inputs_dropped_by_the_caller_stay_alive_until_the_launch_ran():
    kernel = _scale_kernel()
    g = torch.Generator().manual_seed(8)
    expected, outs = [], []
    for _ in range(16):
        a = torch.randn(N, generator=g)
        expected.append(a.double() * 2)
        outs.append(kernel(a.to("mps"), 2.0, backend="mps"))   # the MPS input is dropped
    for k, (out, want) in enumerate(zip(backends.to_host(outs, "mps"), expected)):
        assert_close(out, want, "float32", what=f"call {k}:")
