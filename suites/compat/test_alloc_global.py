"""T.alloc_global (core/language/buffers.py, pass global_workspaces): a device workspace
the runtime allocates per call, against torch.

Data handed from one kernel of the program to the next through a workspace (the launch
order is the program order), a workspace shared by every threadgroup of one kernel with
out_idx=-1 still naming the user's last parameter, and a refused scope.
"""

import pytest
import torch

import core
import core.language as T
from core.errors import KernelDefinitionError
from harness.check.compare import assert_close
from harness.gen.inputs import random_tensor


def test_workspace_between_two_kernels(run):
    n, blocks = 256, 4

    @T.prim_func
    def two_steps(A: T.Tensor((n,), "float32"), B: T.Tensor((n,), "float32")):
        W = T.alloc_global((n,), "float32")
        with T.Kernel(blocks, threads=n // blocks) as bx:
            tx = T.get_thread_binding()
            W[bx * (n // blocks) + tx] = A[bx * (n // blocks) + tx] * 2.0
        with T.Kernel(blocks, threads=n // blocks) as bx:
            tx = T.get_thread_binding()
            i = bx * (n // blocks) + tx
            B[i] = W[n - 1 - i] + 1.0

    kernel = core.compile(two_steps, out_idx=[-1])
    a = random_tensor((n,), "float32", 1)
    assert_close(run(kernel, a), a.flip(0) * 2.0 + 1.0, op_class="exact", what="workspace")


def test_workspace_inside_a_kernel(run):
    m, n = 4, 64

    @T.prim_func
    def scratch(A: T.Tensor((m, n), "float32"), B: T.Tensor((m, n), "float32")):
        with T.Kernel(m, threads=n) as bx:
            tx = T.get_thread_binding()
            W = T.alloc_global((m, n), "float32")
            W[bx, tx] = A[bx, tx] + 3.0
            B[bx, tx] = W[bx, tx] * W[bx, tx]

    kernel = core.compile(scratch, out_idx=-1)
    a = random_tensor((m, n), "float32", 2)
    assert_close(run(kernel, a), (a.double() + 3.0) ** 2, dtype=torch.float32,
                 what="scratch")


def test_a_scope_other_than_global_is_refused():
    with pytest.raises(KernelDefinitionError, match=r"T.alloc_global.*scope='shared'"):
        @T.prim_func
        def bad(A: T.Tensor((64,), "float32")):
            with T.Kernel(1, threads=64):
                T.alloc_global((64,), "float32", scope="shared")
