"""TileLang's thread all-reduce form (its GEMV example), on the reduction machinery:

    with T.attr(T.comm_reducer(lambda x, y: x + y, [T.cast(0, accum_dtype)]),
                "reduce_scope", T.reinterpret(T.uint64(0), dtype="handle")):
        T.evaluate(T.tvm_thread_allreduce(T.uint32(1), acc[0], True, out[0], tk,
                                          dtype="handle"))

makes `out[0]`, on every thread, the combination of `acc[0]` over the threads that differ
only in the listed thread indices (`tk`: threadIdx.y). `T.comm_reducer` is recognised by
what its combiner builds (x + y, T.max, T.min) and its identity checked against that
kind's; the listed thread dimensions must be consecutive with power-of-two extents and a
power-of-two stride (so they are a range of bits of the linear thread id), and the value
one local scalar. It lowers to `tl.thread_allreduce` (core/transform/lower_reduce.py:
simd_sum/max/min or shuffles inside a simdgroup, a threadgroup stage across simdgroups).
"""

from __future__ import annotations

from dataclasses import dataclass

import tvm
from tvm import tirx
from tvm.sym import Analyzer
from tvm.tirx.script.builder import ir as _ir

from core.errors import KernelDefinitionError
from core.ir import ops
from core.ir.stmt import as_int
from core.language.kernel import _current
from core.language.tileops import _region

_REDUCE_SCOPE = []    # the T.comm_reducer of each enclosing T.attr(..., "reduce_scope", ...)
# combiner node -> reduction kind
_KINDS = ((tirx.Add, "sum"), (tirx.Max, "max"), (tirx.Min, "min"))


@dataclass(frozen=True)
class CommReducer:
    kind: str
    identity: object


def comm_reducer(combiner, identity):
    """A commutative reducer: `combiner(x, y)` must be x + y, T.max(x, y) or T.min(x, y)."""
    construct = "T.comm_reducer"
    ident = identity[0] if isinstance(identity, (list, tuple)) and len(identity) == 1 \
        else identity
    if isinstance(ident, (list, tuple)):
        raise KernelDefinitionError("reduces one value; give one identity", construct=construct)
    ident = ident if isinstance(ident, tvm.ir.Expr) else tirx.const(ident, "float32")
    dtype = str(ident.ty.dtype)
    x, y = tirx.Var("x", dtype), tirx.Var("y", dtype)
    body = combiner(x, y)
    kind = next((k for cls, k in _KINDS if isinstance(body, cls) and
                 {body.a.same_as(x), body.b.same_as(x)} == {True, False} and
                 (body.a.same_as(y) or body.b.same_as(y))), None)
    if kind is None:
        raise KernelDefinitionError(
            f"the combiner builds {body}; allowed: x + y, T.max(x, y), T.min(x, y)",
            construct=construct)
    folded = Analyzer().simplify(ident)
    if kind == "sum" and not (isinstance(folded, (tirx.IntImm, tirx.FloatImm))
                              and folded.value == 0):
        raise KernelDefinitionError(f"the identity of x + y must be 0, not {ident}",
                                    construct=construct)
    return CommReducer(kind, ident)


@dataclass(frozen=True)
class ScopeHandle:
    """T.reinterpret(x, dtype="handle"): only the value of T.attr's reduce scope (a kernel
    that uses it anywhere else fails to parse: it is not an expression)."""
    value: object


class _ReduceScope:
    def __init__(self, reducer):
        self.reducer = reducer

    def __enter__(self):
        _REDUCE_SCOPE.append(self.reducer)
        return self

    def __exit__(self, *exc):
        _REDUCE_SCOPE.pop()
        return False


def attr(node, attr_key, value=None):
    """`T.attr(T.comm_reducer(...), "reduce_scope", ...)`, the scope of a
    T.tvm_thread_allreduce; any other attribute is rejected."""
    if isinstance(node, CommReducer) and attr_key == "reduce_scope" and \
            (value is None or isinstance(value, ScopeHandle)):
        return _ReduceScope(node)
    raise KernelDefinitionError(
        f"attribute {attr_key!r} is not supported; metaltile accepts only TileLang's "
        "thread all-reduce scope, T.attr(T.comm_reducer(...), \"reduce_scope\", ...)",
        construct="T.attr")


class _AllReduce:
    """The value of T.tvm_thread_allreduce: already emitted; T.evaluate takes it."""


def evaluate(value):
    """`T.evaluate(T.tvm_thread_allreduce(...))`; nothing else."""
    if isinstance(value, _AllReduce):
        return None
    raise KernelDefinitionError(
        f"T.evaluate({value}) is not supported; it takes only T.tvm_thread_allreduce(...)",
        construct="T.evaluate")


def tvm_thread_allreduce(*args, dtype="handle"):
    construct = "T.tvm_thread_allreduce"
    if not _REDUCE_SCOPE:
        raise KernelDefinitionError(
            "must stand inside `with T.attr(T.comm_reducer(...), \"reduce_scope\", ...)`, "
            "which says how to combine", construct=construct)
    reducer = _REDUCE_SCOPE[-1]
    if len(args) < 5 or as_int(args[0]) != 1:
        raise KernelDefinitionError(
            "takes (T.uint32(1), value, True, out[0], thread_var, ...): one value; "
            f"got {len(args)} arguments", construct=construct)
    value, cond, out, threads = args[1], args[2], args[3], args[4:]
    if not (cond is True or as_int(cond) == 1):
        raise KernelDefinitionError(f"condition {cond} is not supported; pass True",
                                    construct=construct)
    if not (isinstance(out, tvm.ir.TensorLoad) and ops.buffer_scope(out.source) == "local"):
        raise KernelDefinitionError(
            f"the result {out} must be an element of a T.alloc_local buffer",
            construct=construct)
    kernel = _current(construct)
    dims = []
    for v in threads:
        d = next((i for i, t in enumerate(kernel.thread_vars) if t.same_as(v)), None)
        if d is None:
            raise KernelDefinitionError(
                f"{v} is not a thread index of the kernel (T.get_thread_binding(d))",
                construct=construct)
        dims.append(d)
    dims = sorted(set(dims))
    extents = list(kernel.threads) + [1] * (3 - len(kernel.threads))
    stride = 1
    for e in extents[:dims[0]]:
        stride *= e
    extent = 1
    for d in dims:
        extent *= extents[d]
    if dims != list(range(dims[0], dims[-1] + 1)) or not _pow2(stride) or not _pow2(extent):
        raise KernelDefinitionError(
            f"reduces over thread dims {dims} of threads={tuple(kernel.threads)}: the dims "
            f"must be consecutive, their extent ({extent}) and the threads below them "
            f"({stride}) powers of two (a range of bits of the thread id)",
            construct=construct)
    value = value if isinstance(value, tvm.ir.Expr) else tirx.const(value, "float32")
    region = ops.decode_region(_region(out, construct))
    _ir.evaluate(ops.call("tl.thread_allreduce", tvm.ir.StringImm(reducer.kind), value,
                          ops.encode_region(region.buffer, list(region.mins)),
                          tirx.IntImm("int32", stride.bit_length() - 1),
                          tirx.IntImm("int32", extent.bit_length() - 1)))
    return _AllReduce()


def _pow2(n) -> bool:
    return n >= 1 and n & (n - 1) == 0
