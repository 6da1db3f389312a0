"""Pass `global_workspaces`: each T.alloc_global buffer (a "global" AllocBuffer, in a
kernel or at the host level) becomes a parameter after the user's, named in
`tl.workspaces`; its allocation is gone; a name clash is refused; a function without one
is unchanged."""

import pytest
from tvm import tirx

import core.language as T
from core.errors import KernelDefinitionError
from core.ir import annotations as keys
from core.transform import pipeline
from core.transform.global_workspaces import global_workspaces

from .irq import nodes


def _workspace_kernel():
    @T.prim_func
    def ws(A: T.Tensor((64,), "float32"), B: T.Tensor((64,), "float32")):
        H = T.alloc_global((64,), "float32")
        with T.Kernel(1, threads=64):
            tx = T.get_thread_binding()
            K = T.alloc_global((64,), "int32")
            H[tx] = A[tx]
            K[tx] = tx
            B[tx] = H[tx] + K[tx]
    return ws


def test_allocations_become_trailing_workspace_parameters():
    before = pipeline.run(_workspace_kernel(), stop_after="host_program")
    after = global_workspaces(before)
    assert [p.name for p in after.params] == ["A", "B", "H", "K"]
    assert [str(n) for n in after.attrs[keys.WORKSPACES]] == ["H", "K"]
    assert not [a for a in nodes(after, tirx.AllocBuffer)
                if a.buffer.ty.storage_scope == "global"]


def test_a_clash_with_a_parameter_name_is_refused():
    func = pipeline.run(_workspace_kernel(), stop_after="host_program")
    # a parameter named as a workspace: B's buffer under the name "H"
    clash = tirx.PrimFunc([func.params[0], tirx.Var("H", func.params[1].ty)], func.body,
                          func.ret_type, func.attrs)
    with pytest.raises(KernelDefinitionError, match=r"T.alloc_global.*'H'"):
        global_workspaces(clash)


def test_a_function_without_workspaces_is_unchanged():
    @T.prim_func
    def plain(A: T.Tensor((64,), "float32")):
        with T.Kernel(1, threads=64):
            A[T.get_thread_binding()] = 0.0

    func = pipeline.run(plain, stop_after="host_program")
    assert global_workspaces(func).same_as(func)
