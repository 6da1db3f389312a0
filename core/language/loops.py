"""Loops of the DSL.

`T.Parallel(*extents)` is a loop nest whose iterations are spread over the threads of the
threadgroup (the lowering decides how, core/transform/lower_tile_ops.py); it is parsed as
a `tl.parallel_scope` marker followed by a serial grid, which the legalize pass turns into
`ForKind.PARALLEL` loops. `T.Serial`/`range` are per-thread serial loops, `T.Pipelined` a
serial loop annotated with `num_stages` (Metal has no async copies: the stages are a hint).
`T.vectorized(n)` / `T.Vectorized` is a per-thread loop of a constant extent handed to the
vectorize pass as a candidate (`tl.vector_lanes`, as a T.Parallel run): it becomes vector
loads and stores where that pass proves them safe (one store, aligned, supported dtypes),
else a serial loop; either way the iterations run in order, so results are those of
TileLang's vectorized loop whenever that loop is valid (no dependence between lanes).
"""

from __future__ import annotations

from tvm.tirx.script.builder import ir as _ir

from core.errors import KernelDefinitionError
from core.ir import ops
from core.ir.annotations import VECTOR_LANES
from core.ir.stmt import as_int


def _check_extent(e, construct):
    if isinstance(e, int) and e <= 0:
        raise KernelDefinitionError(f"loop extent {e} is not positive", construct=construct)


def Parallel(*extents, coalesced_width=None, loop_layout=None, prefer_async=None):  # noqa: N802
    """Iterations spread over the threadgroup's threads; body must be independent."""
    if not extents:
        raise KernelDefinitionError("T.Parallel needs at least one extent", construct="T.Parallel")
    for e in extents:
        _check_extent(e, "T.Parallel")
    _ir.evaluate(ops.call("tl.parallel_scope", *extents))
    return _ir.grid(*extents)


def _check_step(step, construct):
    if isinstance(step, int) and step <= 0:
        raise KernelDefinitionError(f"loop step {step} is not positive; allowed: a positive "
                                    "int (count down with an index expression)",
                                    construct=construct)


def Serial(start, stop=None, step=None, *, annotations=None, unroll=None):  # noqa: N802
    """A serial loop executed by every thread; `T.serial(start, stop, step)` steps."""
    _check_extent(start if stop is None else None, "T.Serial")
    _check_step(step, "T.serial")
    return _ir.serial(start, stop, step=step, annotations=annotations, unroll=unroll)


def Pipelined(start, stop=None, num_stages=0, order=None, stage=None, sync=None,  # noqa: N802
              group=None):
    """A serial loop over k-tiles; `num_stages` is kept as an annotation."""
    _check_extent(start if stop is None else None, "T.Pipelined")
    if not isinstance(num_stages, int) or num_stages < 0:
        raise KernelDefinitionError(
            f"num_stages={num_stages!r} must be a non-negative int", construct="T.Pipelined")
    return _ir.serial(start, stop, annotations={"num_stages": num_stages})


def Unroll(start, stop=None, step=None, *, explicit=False, unroll_factor=None,  # noqa: N802
           annotations=None):
    """A serial loop the MSL compiler is asked to unroll: `#pragma clang loop unroll(full)`,
    or `unroll_count(k)` for `unroll_factor=k`. `explicit=True` (TileLang unrolls in the IR
    first) leaves the unrolling to Apple's compiler all the same."""
    _check_extent(start if stop is None else None, "T.unroll")
    _check_step(step, "T.unroll")
    if unroll_factor is not None and (isinstance(unroll_factor, bool) or
                                      not isinstance(unroll_factor, int) or unroll_factor < 1):
        raise KernelDefinitionError(f"unroll_factor={unroll_factor!r} must be a positive int",
                                    construct="T.unroll")
    return _ir.serial(start, stop, step=step, annotations=annotations,
                      unroll=unroll_factor if unroll_factor and unroll_factor > 1 else True)


def vectorized(start, stop=None, *, annotations=None):
    """A per-thread loop the compiler vectorizes where it proves it safe (see above)."""
    construct = "T.vectorized"
    if annotations:
        raise KernelDefinitionError(
            f"annotations={annotations!r}: TVM loop annotations have no meaning on Metal; "
            "allowed: none", construct=construct)
    lo, hi = (0, start) if stop is None else (start, stop)
    extent = as_int(hi - lo) if not (isinstance(lo, int) and isinstance(hi, int)) \
        else hi - lo
    if extent is None or extent <= 0:
        raise KernelDefinitionError(
            f"the extent ({hi} - {lo}) must be a positive compile-time constant (a vector "
            "has a fixed number of lanes)", construct=construct)
    lanes = extent if as_int(lo) == 0 and extent >= 2 and extent & (extent - 1) == 0 \
        else None
    return _ir.serial(lo, hi, annotations={VECTOR_LANES: lanes} if lanes else None)


Vectorized = vectorized
serial = Serial
unroll = Unroll
