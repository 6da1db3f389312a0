"""The capacity-dimension cases of TileLang's testing/python/metal/test_metal_adapter.py
(seed PR #2969), ported in our own words with the kernels as written: `T.annotate_capacity_dims
({"a": (0,)})` says dim 0 of `a` is a capacity dimension (the kernel masks its accesses
there, so the tensor given may be smaller); every other dim stays exact, and a dim nobody
marked is checked exactly too. Declared in an eager function's body, in a prim_func's body,
or as the prim_func attribute `tilelang_capacity_dims`.

In a prim_func body the entry's meaning follows the tensor's role, as in an eager function:
for an output that core.compile allocates (`out_idx`) it is metaltile's allocation size per
dim; for anything the caller passes in, TileLang's dim indices.
"""

from __future__ import annotations

import pytest
import torch
from tvm import tirx

import core
import core.language as T
from core.errors import KernelDefinitionError, LaunchError
from harness.check.compare import assert_close
from harness.gen.inputs import random_tensor


@core.jit
def masked_kernel2d(a, out, cap, k, m, block: int = 32):
    a: T.Tensor[[cap, k], T.float32]
    out: T.Tensor[[cap, k], T.float32]
    T.annotate_capacity_dims({"a": (0,), "out": (0,)})
    with T.Kernel(cap, threads=block) as bx:
        if bx < m:
            for j in T.serial(k):
                out[bx, j] = a[bx, j] * 2.0


@core.jit
def unmarked_kernel(a, out, cap, k, m, block: int = 32):
    a: T.Tensor[[cap, k], T.float32]
    out: T.Tensor[[cap, k], T.float32]
    with T.Kernel(cap, threads=block) as bx:
        if bx < m:
            for j in T.serial(k):
                out[bx, j] = a[bx, j] * 2.0


def test_eager_capacity_2d_masked(run):
    a, out = random_tensor((15, 8), "float32", 1), torch.zeros(64, 8)
    run(masked_kernel2d, a, out, 64, 8, 15)    # declared (64, 8), given (15, 8)
    assert_close(out, torch.cat([a * 2.0, torch.zeros(49, 8)]), "float32")


def test_eager_unmarked_dim_is_exact():
    with pytest.raises(LaunchError, match=r"parameter 'a': dim 0 is 15, declared "
                       r"T.Tensor\(\(64, 8\), float32\)"):
        unmarked_kernel(random_tensor((15, 8), "float32", 2), torch.zeros(64, 8), 64, 8, 15,
                        backend="emu")


@core.jit
def scope_kernel(a, cap, m, block: int = 32):
    a: T.Tensor[[cap, 8], T.float32]
    OUT = T.empty([cap, 8], dtype=T.float32)
    T.annotate_capacity_dims({"a": (0,)})
    with T.Kernel(cap, threads=block) as bx:
        if bx < m:
            for j in T.serial(8):
                OUT[bx, j] = a[bx, j] * 2.0
    return OUT


@pytest.mark.parametrize("cols", [4, 16])
def test_capacity_is_per_dim(run, cols):
    a = random_tensor((15, 8), "float32", 3)
    out = run(scope_kernel, a, 64, 15)
    assert out.shape == (64, 8)
    assert_close(out[:15], a * 2.0, "float32")
    with pytest.raises(LaunchError, match=f"parameter 'a': dim 1 is {cols}, declared "
                       r"T.Tensor\(\(64, 8\), float32\)"):
        scope_kernel(random_tensor((15, cols), "float32", 4), 64, 15, backend="emu")


def _body_marked(mark=True):
    if mark:
        @T.prim_func
        def fcap(W: T.Tensor((7,), "float32"), OUT: T.Tensor((7,), "float32")):
            T.annotate_capacity_dims({"W": (0,)})
            with T.Kernel(7) as bx:
                if bx < 3:  # masked: only the 3 elements given are read
                    OUT[bx] = W[bx] * 2.0
        return fcap

    @T.prim_func
    def fcap(W: T.Tensor((7,), "float32"), OUT: T.Tensor((7,), "float32")):
        with T.Kernel(7) as bx:
            if bx < 3:
                OUT[bx] = W[bx] * 2.0
    return fcap


def test_prim_func_body_capacity_dim(run):
    """The seed's lazy `with_attr("tilelang_capacity_dims", ...)` case, declared in the body."""
    w, out = random_tensor((3,), "float32", 5), torch.zeros(7)
    run(core.compile(_body_marked()), w, out)
    assert_close(out, torch.cat([w * 2.0, torch.zeros(4)]), "float32")
    with pytest.raises(LaunchError, match="parameter 'W': dim 0 is 3, declared 7"):
        core.compile(_body_marked(False))(w, torch.zeros(7), backend="emu")


def test_prim_func_attribute_capacity_dim(run):
    w, out = random_tensor((3,), "float32", 6), torch.zeros(7)
    marked = _body_marked(False).with_attr("tilelang_capacity_dims", {"W": (0,)})
    run(core.compile(marked), w, out)
    assert_close(out, torch.cat([w * 2.0, torch.zeros(4)]), "float32")


def test_prim_func_body_output_entry_is_an_allocation():
    """For an output core.compile allocates, the entry is its size per dim (metaltile's):
    M is known from no input, so OUT gets 40 elements."""
    N, M = tirx.Var("N", "int32"), tirx.Var("M", "int32")

    @T.prim_func
    def f(A: T.Tensor((N,), "float32"), OUT: T.Tensor((M,), "float32")):
        T.annotate_capacity_dims({"OUT": (40,)})
        with T.Kernel(N) as bx:
            OUT[bx] = A[bx] * 2.0

    kernel = core.compile(f, out_idx=[1])
    a = random_tensor((31,), "float32", 7)
    out = kernel(a, backend="emu")
    assert out.shape == (40,)
    assert kernel.last_run.findings == []
    assert_close(out[:31], a * 2.0, "float32")


def test_prim_func_body_input_entry_needs_dim_indices():
    @T.prim_func
    def f(A: T.Tensor((8,), "float32"), OUT: T.Tensor((8,), "float32")):
        T.annotate_capacity_dims({"A": (None,)})
        with T.Kernel(8) as bx:
            OUT[bx] = A[bx]

    with pytest.raises(KernelDefinitionError, match=r"T.annotate_capacity_dims\('A'\): 'A' is "
                       "an input tensor: its entry lists dim indices"):
        core.compile(f, out_idx=[1])


def test_unknown_names_are_errors():
    @core.jit
    def bad_capacity(a, m):
        a: T.Tensor((m, 8), "float32")
        T.annotate_capacity_dims({"a_q": (0,)})  # typo: the parameter is a

    with pytest.raises(KernelDefinitionError, match="'a_q' is not a tensor of the function"):
        bad_capacity(random_tensor((64, 8), "float32", 8), 64)

    with pytest.raises(KernelDefinitionError, match="'B' is not a tensor of the function; "
                       "tensors: A, OUT"):
        @T.prim_func
        def bad_capacity_lazy(A: T.Tensor((64,), "float32"), OUT: T.Tensor((64,), "float32")):
            T.annotate_capacity_dims({"B": (0,)})
            for i in T.serial(64):
                OUT[i] = A[i]

    @T.prim_func
    def valid(A: T.Tensor((64,), "float32"), OUT: T.Tensor((64,), "float32")):
        with T.Kernel(64) as i:
            OUT[i] = A[i]

    with pytest.raises(KernelDefinitionError, match=r"unknown tensor parameter name\(s\) "
                       r"\['B'\]"):
        core.compile(valid.with_attr("tilelang_capacity_dims", {"B": (0,)}), out_idx=[1])


def _output_capacity():
    N, M = tirx.Var("N", "int32"), tirx.Var("M", "int32")

    @T.prim_func
    def f(A: T.Tensor((N,), "float32"), OUT: T.Tensor((M,), "float32")):
        T.annotate_capacity_dims({"OUT": (40,)})
        with T.Kernel(N) as bx:
            OUT[bx] = A[bx] * 2.0
    return f


def test_pipeline_run_alone_resolves_body_declared_capacity():
    """pipeline.run without core.compile gives body-declared entries the same meaning by
    role, into the launch plan: an output's allocation (out_idx as core.compile's), an
    input's capacity dims; nothing is left unresolved or dropped."""
    from core.ir import annotations as keys
    from core.transform import pipeline

    out = pipeline.run(_output_capacity(), out_idx=[1])
    assert out.capacity == (("OUT", (40,)),) == core.compile(
        _output_capacity(), out_idx=[1]).compiled.capacity
    assert out.input_capacity == ()
    inp = pipeline.run(_body_marked())
    assert inp.input_capacity == (("W", (0,)),) == \
        core.compile(_body_marked()).compiled.input_capacity
    assert inp.capacity == ()
    legalized = pipeline.run(_body_marked(), stop_after="legalize")
    assert keys.CAPACITY_DECLARED not in (legalized.attrs or {})


def test_pipeline_run_refuses_an_allocation_entry_on_an_input():
    """Without out_idx OUT is a tensor the caller passes in: its (None,)-style entry
    (an allocation size) is refused by name, as core.compile refuses it."""
    from core.transform import pipeline

    N = tirx.Var("N", "int32")

    @T.prim_func
    def f(A: T.Tensor((N,), "float32"), OUT: T.Tensor((N,), "float32")):
        T.annotate_capacity_dims({"OUT": (None,)})
        with T.Kernel(N) as bx:
            OUT[bx] = A[bx] * 2.0

    with pytest.raises(KernelDefinitionError, match=r"T.annotate_capacity_dims\('OUT'\): "
                                                    r"'OUT' is an input tensor"):
        pipeline.run(f)

