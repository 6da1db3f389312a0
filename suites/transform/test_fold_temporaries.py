"""Pass `fold_temporaries`: a local array one nest fills and only a later reduction's
accumulation reads is not materialized (its element expression is accumulated at the
read); an array a copy reads, whose inputs change in between, or that is filled from
device memory is kept."""

import pytest
import tvm
import tvm_ffi

import core.language as T
from core.transform import pipeline

from .irq import allocs, nodes, stores


def sum_of_squares(use):
    @T.prim_func
    def sum_of_squares(A: T.Tensor((16, 64), "float32"), S: T.Tensor((16,), "float32"),
                       Q: T.Tensor((16, 64), "float32")):
        with T.Kernel(1, threads=128):
            x = T.alloc_fragment((16, 64), "float32")
            sq = T.alloc_fragment((16, 64), "float32")
            s = T.alloc_fragment((16,), "float32")
            T.copy(A, x)
            if use != "from-device":
                for i, j in T.Parallel(16, 64):
                    sq[i, j] = x[i, j] * x[i, j]
            if use == "copied":            # a second reader, a copy: its vector stores stay
                T.copy(sq, Q)
            if use == "inputs-change":     # x changes between sq's store and its read
                for i, j in T.Parallel(16, 64):
                    x[i, j] = x[i, j] + 1.0
            if use == "from-device":       # x, filled from A, only reduced: keeps its loads
                T.reduce_sum(x, s, dim=1)
            else:
                T.reduce_sum(sq, s, dim=1)
            T.copy(s, S)
    return sum_of_squares


def _loads_of(node, name) -> int:
    return sum(1 for ld in nodes(node, tvm.ir.TensorLoad) if ld.source.name == name)


def test_a_one_reader_local_array_is_gone():
    before = pipeline.run(sum_of_squares("reduced"), stop_after="lower_tile_ops")
    assert "sq" in allocs(before) and len(stores(before, "sq")) == 1
    (acc_before,) = [s for s in stores(before) if _loads_of(s.value, "sq")]
    after = pipeline.run(sum_of_squares("reduced"), stop_after="fold_temporaries")
    assert "sq" not in allocs(after)
    assert not stores(after, "sq") and not _loads_of(after.body, "sq")
    # the accumulation now reads x twice (x * x) where it read sq once
    (acc,) = [s for s in stores(after, acc_before.buffer.name)
              if _loads_of(s.value, acc_before.buffer.name) and _loads_of(s.value, "x")]
    assert _loads_of(acc.value, "x") == 2
    assert "x" in allocs(after)


@pytest.mark.parametrize("use", ["copied", "inputs-change", "from-device"])
def test_arrays_outside_the_pattern_are_kept(use):
    before = pipeline.run(sum_of_squares(use), stop_after="lower_tile_ops")
    after = pipeline.run(sum_of_squares(use), stop_after="fold_temporaries")
    assert tvm_ffi.structural_equal(after, before)
    assert "x" in allocs(after) and (use == "from-device" or "sq" in allocs(after))
