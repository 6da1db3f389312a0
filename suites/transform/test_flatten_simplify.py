"""Pass `flatten_simplify` (TVM's FlattenBuffer and Simplify): every access has one,
row-major index; each tensor parameter is accessed through a flat DeclBuffer view of its
data; on-chip buffers are allocated flat."""

import tvm
from tvm import tirx

import core.language as T
from core.transform import pipeline

from .irq import allocs, nodes, stores


@T.prim_func
def transpose(A: T.Tensor((32, 32), "float32"), B: T.Tensor((32, 32), "float32")):
    with T.Kernel(1, threads=128):
        S = T.alloc_shared((32, 32), "float32")
        x = T.alloc_fragment((32, 32), "float32")
        T.copy(A, S)
        for i, j in T.Parallel(32, 32):
            x[i, j] = S[j, i]
        T.copy(x, B)


def _accesses(func) -> list:
    """(buffer name, indices) of every load and store."""
    return [(ld.source.name, list(ld.indices)) for ld in nodes(func, tvm.ir.TensorLoad)] + \
        [(s.buffer.name, list(s.indices)) for s in stores(func)]


def test_every_access_has_one_index():
    before = pipeline.run(transpose, stop_after="vectorize")
    assert {name for name, idx in _accesses(before) if len(idx) == 2} == {"A", "B", "S"}
    after = pipeline.run(transpose, stop_after="flatten_simplify")
    assert all(len(idx) == 1 for _, idx in _accesses(after))


def test_the_index_is_the_row_major_offset():
    # the pass applied to the IR before it (same variables on both sides): S[j, i]
    # becomes S[j * 32 + i]
    before = pipeline.run(transpose, stop_after="vectorize")
    after = dict(pipeline.PASSES)["flatten_simplify"](before)
    (row, col), = [idx for name, idx in _accesses(before) if name == "S" and
                   not isinstance(idx[-1], tirx.Ramp)]
    (flat,), = [idx for name, idx in _accesses(after) if name == "S" and
                not isinstance(idx[-1], tirx.Ramp)]
    assert tvm.sym.Analyzer().can_prove_equal(flat, row * 32 + col)


def test_parameters_are_flat_views_and_on_chip_buffers_flat_allocations():
    before = pipeline.run(transpose, stop_after="vectorize")
    assert not nodes(before, tirx.DeclBuffer)
    assert tuple(int(d) for d in allocs(before)["S"].buffer.ty.shape) == (32, 32)
    after = pipeline.run(transpose, stop_after="flatten_simplify")
    views = nodes(after, tirx.DeclBuffer)
    for param in after.params:
        (view,) = [d for d in views if d.data.args[0].same_as(param)]
        assert tuple(int(e) for e in view.buffer.ty.shape) == (1024,)
    assert tuple(int(d) for d in allocs(after)["S"].buffer.ty.shape) == (1024,)
    # the kernel reads and writes the views, not the 2-D parameters
    buffers = [ld.source for ld in nodes(after, tvm.ir.TensorLoad)] + \
        [s.buffer for s in stores(after)]
    on_device = [b for b in buffers if b.name in ("A", "B")]
    assert on_device and all(any(b.same_as(v.buffer) for v in views)
                             for b in on_device)
