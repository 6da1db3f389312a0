"""Pass `vectorize`: a run loop (`tl.vector_lanes = v`) becomes a v-lane vector store only
when alignment and the body's form are proven; a run proven for fewer lanes splits into
the widest vector that is; bf16 computes in 2-lane registers but moves 4-lane carriers;
anything else stays a serial scalar loop."""

import pytest
import tvm
from tvm import tirx

import core.language as T
from core.ir.annotations import VECTOR_LANES
from core.transform import pipeline

from .irq import lanes, loops, nodes, stores


def elementwise(dtype, body, src_cols=64):
    @T.prim_func
    def elementwise(A: T.Tensor((8, src_cols), dtype), B: T.Tensor((8, 64), dtype)):
        with T.Kernel(1, threads=32):
            for i, j in T.Parallel(8, 64):
                if body == "double":
                    B[i, j] = A[i, j] + A[i, j]
                elif body == "copy":
                    B[i, j] = A[i, j]
                elif body == "shifted":            # A[i, j + 2]: 2-aligned, not 4-aligned
                    B[i, j] = A[i, j + 2]
                else:                              # "transposed": l moves along A's rows
                    B[i, j] = A[j % 8, i * 8 + j // 8]
    return elementwise


def _run_loops(func) -> list:
    return [f for f in loops(func) if VECTOR_LANES in f.annotations]


def _store_lanes(func) -> int:
    (store,) = stores(func, "B")
    return lanes(store.value)


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_an_aligned_run_becomes_one_vector_of_its_lanes(dtype):
    before = pipeline.run(elementwise(dtype, "double"), stop_after="fold_temporaries")
    (run,) = _run_loops(before)
    assert int(run.annotations[VECTOR_LANES]) == 4 and _store_lanes(before) == 1
    after = pipeline.run(elementwise(dtype, "double"), stop_after="vectorize")
    assert _store_lanes(after) == 4
    assert not _run_loops(after) and len(loops(after)) == len(loops(before)) - 1
    (store,) = stores(after, "B")
    assert all(lanes(ld) == 4 for ld in nodes(store.value, tvm.ir.TensorLoad))


def test_a_run_aligned_for_fewer_lanes_splits_into_the_widest_that_is():
    after = pipeline.run(elementwise("float32", "shifted", src_cols=66), stop_after="vectorize")
    assert _store_lanes(after) == 2
    split = [f for f in loops(after) if f.loop_var.name.endswith("_o")]
    assert [int(f.extent) for f in split] == [2]          # 4 lanes = 2 serial x 2-lane


def test_a_run_whose_lanes_are_not_contiguous_stays_scalar():
    before = pipeline.run(elementwise("float32", "transposed"), stop_after="fold_temporaries")
    (run,) = _run_loops(before)
    after = pipeline.run(elementwise("float32", "transposed"), stop_after="vectorize")
    assert _store_lanes(after) == 1
    assert not nodes(after, tirx.Ramp)
    serial = [f for f in loops(after) if f.loop_var.name == run.loop_var.name]
    assert len(serial) == 1 and serial[0].kind == tirx.ForKind.SERIAL
    assert int(serial[0].extent) == 4


@pytest.mark.parametrize("body,width", [("double", 2), ("copy", 4)])
def test_bf16_computes_two_lanes_and_moves_four(body, width):
    # arithmetic on bfloat is at most bfloat2; a pure copy moves 4 lanes as bits
    after = pipeline.run(elementwise("bfloat16", body), stop_after="vectorize")
    assert _store_lanes(after) == width


def test_int64_stays_scalar():
    after = pipeline.run(elementwise("int64", "double"), stop_after="vectorize")
    assert _store_lanes(after) == 1
