"""The direct structural walks of core/ir/stmt.py (`visit_nodes`, `map_nodes`) and the
footprint pre-checks of core/ir/footprint.py: each must decide exactly what the slower
general path decides."""

import tvm
import tvm_ffi
from tvm import tirx

from core.ir.stmt import collect, free_vars, map_nodes, substitute, visit_nodes


def _expr():
    i, j = tirx.Var("i", "int32"), tirx.Var("j", "int32")
    buf = tirx.decl_buffer((64,), "float32", name="S", scope="shared")
    e = tirx.BufferLoad(buf, [i * 8 + j]) + tirx.BufferLoad(buf, [j]) * tirx.Cast("float32", i)
    return e, i, j, buf


def test_visit_nodes_visits_what_structural_walk_visits_in_the_same_order():
    e, i, j, _ = _expr()
    for types in ((tvm.ir.Var,), (tvm.ir.TensorLoad,), (tvm.ir.Var, tvm.ir.TensorLoad),
                  (tvm.ir.Expr,)):
        mine, theirs = [], []
        visit_nodes(e, *((t, lambda n, t=t: mine.append((t, n))) for t in types))
        tvm_ffi.structural_walk(e, [(t, lambda n, t=t: theirs.append((t, n))) for t in types])
        assert len(mine) == len(theirs) > 0
        assert all(a[0] is b[0] and a[1].same_as(b[1]) for a, b in zip(mine, theirs))
    assert [v.name for v in free_vars(e)] == ["S", "i", "j"]  # the buffer is a Var too
    variables, lds = collect(e, tvm.ir.Var, tvm.ir.TensorLoad)
    assert len(lds) == 2 and any(v.same_as(i) for v in variables)


def test_map_nodes_replaces_like_structural_map():
    e, i, j, _ = _expr()
    k = tirx.Var("k", "int32")
    mine = map_nodes(e, (tvm.ir.Var, lambda v: k if v.same_as(i) else v))
    theirs = tvm_ffi.structural_map(e, (tvm.ir.Var, lambda v: k if v.same_as(i) else v))
    assert tvm_ffi.structural_equal(mine, theirs)
    assert not any(v.same_as(i) for v in free_vars(mine))
    assert any(v.same_as(k) for v in free_vars(mine))
    assert tvm_ffi.structural_equal(substitute(e, {i: k}), mine)


def _shared(n, name="S"):
    return tirx.decl_buffer((n,), "float32", name=name, scope="shared")


def test_lazy_footprints_enumerate_only_when_a_comparison_needs_them():
    from core.ir.footprint import Footprint, LoopRange, may_race
    tx, r, g = tirx.Var("tx", "int32"), tirx.Var("r", "int32"), tirx.Var("g", "int32")
    axes = [(tx, 64, 1)]
    s, other = _shared(1024), _shared(1024, "T")
    loops = [LoopRange(r, 4), LoopRange(g, 16)]
    write = Footprint.of(s, r * 256 + tx * 4, True, axes, loops)
    read = Footprint.of(s, r * 256 + (tx + 1) % 64 * 4, False, axes, loops)
    elsewhere = Footprint.of(other, tx, True, axes, loops)
    # only the loop the index reads is enumerated, known before any point is
    assert write.loop_vars == (r,) and read.loop_vars == (r,)
    assert not may_race(write, elsewhere) and not may_race(read, Footprint.of(
        s, tx, False, axes, loops))
    assert write.points.value is write.points          # nothing enumerated yet
    carried = read.carried_over(set())                 # from the next iteration of r
    assert carried.match == frozenset() and carried.points is read.points
    assert may_race(write, read)                       # another thread's element, same r
    assert write.elements.size == 64 * 4 and list(write.loops) == [r]
    # a thread reading back its own elements: no race, in one iteration or across them
    own = Footprint.of(s, r * 256 + tx * 4, False, axes, loops)
    assert not may_race(write, own)
    shifted = Footprint.of(s, (r + 1) % 4 * 256 + tx * 4, False, axes, loops)
    assert not may_race(write, shifted.carried_over(set()))
