"""Pass `split_host_device`: the lowered PrimFunc becomes a LoweredProgram: one device
function per kernel nest (the buffers it touches in first-use order, unused ones dropped,
then its scalars; `tl.readonly`, `tl.threads`), and the launch plan: one LaunchSite per
kernel in program order with its grid, threadgroup and bindings as host expressions, a
kernel in a host loop launched once per iteration."""

from tvm import tirx

import core.language as T
from core.ir.annotations import READONLY, THREADS
from core.ir.program import HostLoop, LaunchSite, LoweredProgram, evaluate, launch_sequence
from core.transform import pipeline

from .irq import nodes

N = T.dynamic("N")


@T.prim_func
def program(Unused: T.Tensor((8,), "float32"), A: T.Tensor((N,), "float32"),
            Tmp: T.Tensor((N,), "float32"), B: T.Tensor((N,), "float32"),
            alpha: T.float32, steps: T.int32):
    with T.Kernel(T.ceildiv(N, 64), threads=64) as bx:
        for i in T.Parallel(64):
            if bx * 64 + i < N:
                Tmp[bx * 64 + i] = A[bx * 64 + i] * alpha
    for it in T.serial(steps):
        with T.Kernel(2, threads=128) as bx:
            for i in T.Parallel(128):
                B[bx * 128 + i] = Tmp[bx * 128 + i] + T.cast(it, "float32")


def test_one_device_function_per_kernel_with_the_buffers_it_touches():
    before = pipeline.run(program, stop_after="thread_sync")
    assert isinstance(before, tirx.PrimFunc)
    out = pipeline.run(program)                     # split_host_device is the last pass
    assert isinstance(out, LoweredProgram)
    assert list(out.device) == ["program_kernel0", "program_kernel1"]
    first, second = out.device.values()
    # buffers in first use (Tmp is the store's target), not the user's order; `Unused`
    # dropped; then the scalars each reads (the symbolic dim of its buffers, a scalar
    # parameter, the host loop variable)
    assert [p.name for p in first.params] == ["Tmp", "A", "N", "alpha"]
    assert [p.name for p in second.params] == ["B", "Tmp", "N", "it"]
    assert list(first.attrs[READONLY]) == ["A"] and list(second.attrs[READONLY]) == ["Tmp"]
    assert [int(t) for t in first.attrs[THREADS]] == [64, 1, 1]
    assert [int(t) for t in second.attrs[THREADS]] == [128, 1, 1]
    for device in out.device.values():               # each holds one kernel nest
        tags = [str(a.node.thread_tag) for a in nodes(device, tirx.AttrStmt)
                if a.attr_key == "thread_extent"]
        assert tags == ["threadIdx.x", "blockIdx.x"]  # post-order: inner first


def test_the_launch_plan_has_a_site_per_kernel_in_program_order():
    out = pipeline.run(program)
    sites = out.launches
    assert [s.kernel for s in sites] == ["program_kernel0", "program_kernel1"]
    assert [s.threadgroup for s in sites] == [(64, 1, 1), (128, 1, 1)]
    assert [s.buffers for s in sites] == [("Tmp", "A"), ("B", "Tmp")]
    assert [[b.name for b in s.scalars] for s in sites] == [["N", "alpha"], ["N", "it"]]
    # the grid is a host expression of the symbolic dim: ceil(N / 64) blocks
    assert [evaluate(e, {"N": 1000}) for e in sites[0].grid] == [16, 1, 1]
    assert [evaluate(e, {}) for e in sites[1].grid] == [2, 1, 1]


def test_a_kernel_in_a_host_loop_is_launched_once_per_iteration():
    out = pipeline.run(program)
    first, loop = out.host
    assert isinstance(first, LaunchSite) and isinstance(loop, HostLoop)
    assert loop.var == "it" and [s.kernel for s in loop.body] == ["program_kernel1"]
    launches = list(launch_sequence(out.host, {"N": 1000, "alpha": 2.0, "steps": 3}))
    assert [s.kernel for s, _ in launches] == ["program_kernel0"] + ["program_kernel1"] * 3
    its = [evaluate(b.value, env) for s, env in launches[1:] for b in s.scalars
           if b.name == "it"]
    assert its == [0, 1, 2]


def test_the_program_describes_the_users_parameters():
    out = pipeline.run(program)
    assert [(p.name, p.kind) for p in out.params] == [
        ("Unused", "buffer"), ("A", "buffer"), ("Tmp", "buffer"), ("B", "buffer"),
        ("alpha", "scalar"), ("steps", "scalar")]
    assert out.symbols == (("N", "int32"),)
    assert [p.shape for p in out.params[:4]] == [(("const", 8),)] + [(("var", "N"),)] * 3
