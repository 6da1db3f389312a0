"""Family `reduce`: T.reduce_sum/max/min/abssum/absmax of a fragment tile along one dim,
with ragged edges, every thread spread and clear=True/False.

Params:
    M, N        extents of the input X (M x N); any size >= 1 (M = N = 4096 builds too:
                the reduced extent is held whole in the fragment)
    dim         1 or -1: row reductions, Y (M,); a threadgroup reduces bM whole rows
                (fragment bM x N, ragged in M)
                0: column reductions, Y (N,); a threadgroup reduces bN whole columns
                (fragment M x bN, ragged in N)
    kind        sum, max, min, abssum, absmax
    dtype       source dtype: float32, float16, bfloat16, int32
    out_dtype   destination dtype: `dtype`, or float32 for float sources
    clear       True: Y = reduction; False: the destination starts as Init (an input)
                and Y = Init (+ / max / min) reduction
    keepdim     destination keeps the reduced dim with extent 1 ((bM, 1) / (1, bN)),
                stored through an explicit slice of Y viewed (M, 1) / (1, N)
    dst         "fragment" (default): T.alloc_fragment destination, stored by T.copy;
                "local": T.alloc_local destination (every thread gets every output),
                stored by a guarded T.Parallel (keepdim False)
    block       bM (dim 1) or bN (dim 0)
    threads     threads per threadgroup (strategies.reduce_threads: powers of two
                1..1024, other multiples of 32, the pipeline limits 768 and 896): how
                many threads share one output follows from the fragment layout
                (core/ir/layout.py); other counts
                (48) are a clear error where the combining groups do not divide them
    combine     "store" (default): each threadgroup reduces whole rows / columns and
                stores them; "atomic": split-K style, the reduced extent is cut into
                `splits` equal chunks (a second grid dimension), each threadgroup reduces
                its chunk into a fragment and combines it into Y with the tile form of
                T.atomic_add (sum, abssum) / atomic_max (max, absmax) / atomic_min; a first
                launch sets Y to the identity (clear) or to Init. float32 and int32 only
                (MSL's native atomics; floats accumulate through float32)
    splits      chunks of the reduced extent (a divisor of it) for combine "atomic"

Signature: (X[, Init], Y). Out-of-range rows/columns of a ragged tile are loaded as 0 and
never stored, so max/min never see them.
"""

from __future__ import annotations

from hypothesis import strategies as st

import core.language as T
from harness.gen import strategies as S
from harness.gen.family import Built, Family, register
from harness.gen.inputs import random_tensor
from oracles import reduce as oracle

KINDS = oracle.KINDS
DTYPES = ("float32", "float16", "bfloat16", "int32")
DSTS = ("fragment", "local")
ATOMIC_DTYPES = ("float32", "int32")
_ATOMIC = {"sum": T.atomic_add, "abssum": T.atomic_add, "max": T.atomic_max,
           "absmax": T.atomic_max, "min": T.atomic_min}

_REDUCE = {k: getattr(T, f"reduce_{k}") for k in KINDS}



def _kernel(p):
    M, N, dim, block, threads = p["M"], p["N"], p["dim"], p["block"], p["threads"]
    dtype, out_dtype, clear, keepdim = p["dtype"], p["out_dtype"], p["clear"], p["keepdim"]
    reduce_op = _REDUCE[p["kind"]]
    rows = dim != 0
    tile = (block, N) if rows else (M, block)
    out_shape = ((M, 1) if rows else (1, N)) if keepdim else ((M,) if rows else (N,))
    dst = ((block, 1) if rows else (1, block)) if keepdim else (block,)
    grid = T.ceildiv(M, block) if rows else T.ceildiv(N, block)

    # Tiles given by their origin only (TileLang's form): T.copy takes the extents from
    # the other operand, unit extents included (lower_tile_ops._align_origin), so the
    # (bM, 1) keepdim tiles and the (bM, 1) input tiles of N = 1 land where their slices
    # would; dropping the unit extents put the bM elements along the last dimension
    # (suites/regressions/reduce-mismatch-e74c14ab98.json, -e0a471b491.json).
    def origin(X, b):
        return X[b * block, 0] if rows else X[0, b * block]

    def out_tile(Y, b):
        if not keepdim:
            return Y[b * block]
        return Y[b * block, 0] if rows else Y[0, b * block]

    local = p.get("dst", "fragment") == "local"
    extent = M if rows else N

    # Python conditions (`if local:`) are decided while TVMScript parses the kernel. A
    # local destination is on every thread: stored by a guarded T.Parallel, not T.copy
    # (which would make every thread store the whole tile).
    if clear:
        @T.prim_func
        def reduce(X: T.Tensor((M, N), dtype), Y: T.Tensor(out_shape, out_dtype)):
            with T.Kernel(grid, threads=threads) as bx:
                x = T.alloc_fragment(tile, dtype)
                if local:
                    y = T.alloc_local(dst, out_dtype)
                else:
                    y = T.alloc_fragment(dst, out_dtype)
                T.copy(origin(X, bx), x)
                reduce_op(x, y, dim=dim, clear=True)
                if local:
                    for i in T.Parallel(block):
                        if bx * block + i < extent:
                            Y[bx * block + i] = y[i]
                else:
                    T.copy(y, out_tile(Y, bx))
        return reduce, [1]

    @T.prim_func
    def reduce_accumulate(X: T.Tensor((M, N), dtype), Init: T.Tensor(out_shape, out_dtype),
                          Y: T.Tensor(out_shape, out_dtype)):
        with T.Kernel(grid, threads=threads) as bx:
            x = T.alloc_fragment(tile, dtype)
            if local:
                y = T.alloc_local(dst, out_dtype)
            else:
                y = T.alloc_fragment(dst, out_dtype)
            T.copy(origin(X, bx), x)
            T.copy(out_tile(Init, bx), y)
            reduce_op(x, y, dim=dim, clear=False)
            if local:
                for i in T.Parallel(block):
                    if bx * block + i < extent:
                        Y[bx * block + i] = y[i]
            else:
                T.copy(y, out_tile(Y, bx))
    return reduce_accumulate, [2]


def _atomic_kernel(p):
    """Split-K: launch 1 initializes Y, launch 2 reduces chunks and combines atomically."""
    M, N, dim, block, threads = p["M"], p["N"], p["dim"], p["block"], p["threads"]
    dtype, out_dtype, clear, splits = p["dtype"], p["out_dtype"], p["clear"], p["splits"]
    reduce_op, atomic_op = _REDUCE[p["kind"]], _ATOMIC[p["kind"]]
    rows = dim != 0
    extent, length = (M, N) if rows else (N, M)
    chunk = length // splits
    tile = (block, chunk) if rows else (chunk, block)
    start = {"sum": 0, "abssum": 0, "max": T.min_value(out_dtype) if out_dtype == "int32"
             else -T.infinity(out_dtype), "absmax": 0,
             "min": T.max_value(out_dtype) if out_dtype == "int32" else T.infinity(out_dtype)}
    identity = start[p["kind"]]
    Init_shape = (extent,)

    def origin(X, b, s):
        if rows:
            return X[b * block:(b + 1) * block, s * chunk:(s + 1) * chunk]
        return X[s * chunk:(s + 1) * chunk, b * block:(b + 1) * block]

    @T.prim_func
    def reduce_atomic(X: T.Tensor((M, N), dtype), Init: T.Tensor(Init_shape, out_dtype),
                      Y: T.Tensor((extent,), out_dtype)):
        with T.Kernel(T.ceildiv(extent, block), threads=threads) as bx:
            for i in T.Parallel(block):
                if bx * block + i < extent:
                    if clear:
                        Y[bx * block + i] = identity
                    else:
                        Y[bx * block + i] = Init[bx * block + i]
        with T.Kernel(T.ceildiv(extent, block), splits, threads=threads) as (bx, bs):
            x = T.alloc_fragment(tile, dtype)
            y = T.alloc_fragment((block,), out_dtype)
            T.copy(origin(X, bx, bs), x)
            reduce_op(x, y, dim=dim, clear=True)
            atomic_op(Y[bx * block], y)

    return reduce_atomic, [2]


def build(p: dict) -> Built:
    M, N, dim, kind = p["M"], p["N"], p["dim"], p["kind"]
    dtype, out_dtype, clear, keepdim = p["dtype"], p["out_dtype"], p["clear"], p["keepdim"]
    atomic = p.get("combine", "store") == "atomic"
    if atomic:
        func, out_idx = _atomic_kernel(p)
        extent = M if dim != 0 else N

        def inputs(seed):
            return [random_tensor((M, N), dtype, seed),
                    random_tensor((extent,), out_dtype, seed + 1)]

        def expected(args):
            return [oracle.reduce_expected(args[0], kind, dim, out=None if clear else args[1],
                                           out_dtype=out_dtype)]

        return Built(func, out_idx, inputs, expected, flops=M * N)
    func, out_idx = _kernel(p)
    out_shape = ((M, 1) if dim != 0 else (1, N)) if keepdim else ((M,) if dim != 0 else (N,))

    def inputs(seed):
        args = [random_tensor((M, N), dtype, seed)]
        if not clear:
            args.append(random_tensor(out_shape, out_dtype, seed + 1))
        return args

    def expected(args):
        # inputs exact in their dtype, accumulated in float32 (int32), one rounding on the
        # store
        out = None if clear else args[1].reshape(-1)
        y = oracle.reduce_expected(args[0], kind, dim, out=out, out_dtype=out_dtype)
        return [y.map(lambda t: t.reshape(out_shape))]

    return Built(func, out_idx, inputs, expected, flops=M * N)


@st.composite
def params(draw):
    dtype = draw(S.dtype(DTYPES))
    dim = draw(S.sampled_from((1, -1, 0)))
    dst = draw(S.sampled_from(DSTS))
    keepdim = draw(st.booleans()) if dst == "fragment" else False
    p = {
        "M": draw(S.extent(1, 160)), "N": draw(S.extent(1, 160)), "dim": dim,
        "kind": draw(S.sampled_from(KINDS)), "dtype": dtype,
        "out_dtype": draw(S.sampled_from((dtype, "float32") if S.is_float(dtype)
                                          else (dtype,))),
        "clear": draw(st.booleans()), "keepdim": keepdim, "dst": dst,
        "block": draw(S.tile((1, 2, 4, 8, 16))),
        "threads": draw(S.reduce_threads()),
    }
    if draw(st.integers(0, 3)) == 0:      # one case in four: the split-K atomic variant
        p = {**p, "combine": "atomic", "dtype": draw(S.dtype(ATOMIC_DTYPES)),
             "keepdim": False, "dst": "fragment"}
        p["out_dtype"] = p["dtype"]
        length = p["N"] if dim != 0 else p["M"]
        divisors = [d for d in (2, 3, 4, 5) if length % d == 0] or [1]
        p["splits"] = draw(S.sampled_from(divisors))
    return p


FAMILY = register(Family("reduce", __doc__.splitlines()[0], params, build,
                         tags=("reduce",)))
