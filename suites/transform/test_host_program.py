"""Pass `host_program`: a host scalar (parsed as a one-element "local" buffer at the host
level) becomes a `Bind` per assignment, and every later read, on the host or in a kernel,
reads that Bind's var; a host scalar carried out of a host loop is rejected."""

import pytest
import tvm
from tvm import tirx

import core.language as T
from core.errors import KernelDefinitionError
from core.ir.kernel import kernels
from core.ir.stmt import free_vars
from core.transform import pipeline

from .irq import allocs, nodes, scope, shape


@T.prim_func
def steps(A: T.Tensor((4, 64), "float32"), B: T.Tensor((4, 64), "float32"), step: T.int32):
    for it in T.serial(4):
        s = it * step + 1
        s = s * 2
        with T.Kernel(1, threads=64):
            for i in T.Parallel(64):
                B[it, i] = A[it, i] * T.cast(s, "float32")


def _host_scalar_buffers(func) -> list:
    return [name for name, a in allocs(func).items()
            if scope(a) == "local" and shape(a) == (1,)]


def test_host_scalars_become_binds():
    before = pipeline.run(steps, stop_after="block_swizzle")
    assert _host_scalar_buffers(before) == ["s"]
    assert not nodes(before, tirx.Bind)
    after = pipeline.run(steps, stop_after="host_program")
    assert not _host_scalar_buffers(after)
    binds = nodes(after, tirx.Bind)
    assert [b.var.name for b in binds] == ["s", "s_1"]          # one per assignment
    assert [str(b.var.ty) for b in binds] == ["int32", "int32"]
    # the second assignment reads the first one's var
    assert any(v.same_as(binds[0].var) for v in free_vars(binds[1].value))


def test_the_kernel_reads_the_latest_binding():
    after = pipeline.run(steps, stop_after="host_program")
    first, latest = (b.var for b in nodes(after, tirx.Bind))
    body = kernels(after)[0].body
    read = free_vars(body)
    assert any(v.same_as(latest) for v in read)
    assert not any(v.same_as(first) for v in read)
    assert all(ld.source.name != "s" for ld in nodes(body, tvm.ir.TensorLoad))


def test_the_host_level_is_then_what_the_verifier_accepts():
    # without the pass, the verifier rejects the host scalar's buffer store; with it,
    # the same kernel verifies
    with pytest.raises(KernelDefinitionError, match="statement outside T.Kernel"):
        pipeline.run(steps, replace={"host_program": lambda f: f}, stop_after="verify")
    pipeline.run(steps, stop_after="verify")


def test_a_host_scalar_carried_out_of_a_host_loop_is_rejected():
    @T.prim_func
    def carried(A: T.Tensor((4, 64), "float32"), B: T.Tensor((64,), "float32")):
        s = 0
        for it in T.serial(4):
            s = it + 1
        with T.Kernel(1, threads=64):
            for i in T.Parallel(64):
                B[i] = A[0, i] * T.cast(s, "float32")
    pipeline.run(carried, stop_after="block_swizzle")
    with pytest.raises(KernelDefinitionError,
                       match="kernel 'carried', host scalar 's': .*carried across host-loop "
                             "iterations"):
        pipeline.run(carried, stop_after="host_program")
