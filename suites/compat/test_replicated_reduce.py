"""A reduction of a fragment every thread holds whole (written element-wise outside
T.Parallel, TileLang's replicated value): each thread reduces its own copy, no thread
exchanges anything, and the result is held whole by every thread the same way. Against
torch with every emulator check on."""

from __future__ import annotations

import pytest

import core
import core.language as T
from harness.check.compare import assert_close
from harness.gen.inputs import random_tensor


def _kernel(kind, dim, threads):
    reduce_fn = {"sum": T.reduce_sum, "max": T.reduce_max}[kind]
    out_shape = (8,) if dim == 0 else (4,)

    @T.prim_func
    def whole(A: T.Tensor((4, 8), "float32"), B: T.Tensor(out_shape, "float32"),
              C: T.Tensor((4, 8), "float32")):
        with T.Kernel(1, threads=threads):
            F = T.alloc_fragment((4, 8), "float32")
            D = T.alloc_fragment(out_shape, "float32")
            for r in T.serial(4):
                for c in T.serial(8):
                    F[r, c] = A[r, c] * 2.0
            reduce_fn(F, D, dim=dim)
            T.copy(D, B)
            for i, j in T.Parallel(4, 8):     # every thread holds D: any element is local
                C[i, j] = A[i, j] - D[j if dim == 0 else i]
    return whole


@pytest.mark.parametrize("kind", ["sum", "max"])
@pytest.mark.parametrize("dim", [0, 1])
@pytest.mark.parametrize("threads", [32, 128])
def test_reduce_of_a_fragment_every_thread_holds(run, kind, dim, threads):
    kernel = core.compile(_kernel(kind, dim, threads), out_idx=[1, 2])
    a = random_tensor((4, 8), "float32", 1)
    twice = a.double() * 2
    want = twice.sum(dim) if kind == "sum" else twice.max(dim).values
    b, c = run(kernel, a)
    op = "accumulation" if kind == "sum" else "exact"
    assert_close(b, want, "float32", reduction_length=a.shape[dim], op_class=op)
    sub = want.reshape(1, 8) if dim == 0 else want.reshape(4, 1)
    assert_close(c, a.double() - sub, "float32", reduction_length=a.shape[dim],
                 op_class="accumulation")
    assert "simd_sum" not in kernel.msl and "simd_max" not in kernel.msl
