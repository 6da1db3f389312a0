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
    threads     threads per threadgroup (1, 16, 32..512, powers of two): how many
                threads share one output follows from the fragment layout
                (core/ir/layout.py); other counts are a clear error where the
                combining groups do not divide them

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
THREADS = (32, 64, 128, 256, 1, 16, 512)
DSTS = ("fragment", "local")

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

    def origin(X, b):
        # Explicit slices: a tile with a trailing unit extent given by its origin only is
        # placed along the wrong dimension by the core (see harness/gen/copy.py).
        if rows:
            return X[b * block:(b + 1) * block, 0:N]
        return X[0:M, b * block:(b + 1) * block]

    def out_tile(Y, b):
        if not keepdim:
            return Y[b * block]
        if rows:
            return Y[b * block:(b + 1) * block, 0:1]
        return Y[0:1, b * block:(b + 1) * block]

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


def build(p: dict) -> Built:
    M, N, dim, kind = p["M"], p["N"], p["dim"], p["kind"]
    dtype, out_dtype, clear, keepdim = p["dtype"], p["out_dtype"], p["clear"], p["keepdim"]
    func, out_idx = _kernel(p)
    out_shape = ((M, 1) if dim != 0 else (1, N)) if keepdim else ((M,) if dim != 0 else (N,))

    def inputs(seed):
        args = [random_tensor((M, N), dtype, seed)]
        if not clear:
            args.append(random_tensor(out_shape, out_dtype, seed + 1))
        return args

    def expected(args):
        out = None if clear else args[1].reshape(-1)
        y = oracle.reduce(args[0], kind, dim, out=out, out_dtype=out_dtype)
        return [y.reshape(out_shape)]

    # Inputs are exact in their dtype and accumulate in float32 (int32), rounded once on
    # the store: the destination's dtype sets the tolerance.
    length = (N if dim != 0 else M) + (0 if clear else 1)
    return Built(func, out_idx, inputs, expected, reduction_length=length,
                 tolerance_dtypes=(out_dtype,), flops=M * N, op_class=oracle.op_class(kind))


@st.composite
def params(draw):
    dtype = draw(S.dtype(DTYPES))
    dim = draw(st.sampled_from((1, -1, 0)))
    dst = draw(st.sampled_from(DSTS))
    keepdim = draw(st.booleans()) if dst == "fragment" else False
    return {
        "M": draw(S.extent(1, 160)), "N": draw(S.extent(1, 160)), "dim": dim,
        "kind": draw(st.sampled_from(KINDS)), "dtype": dtype,
        "out_dtype": draw(st.sampled_from((dtype, "float32") if S.is_float(dtype)
                                          else (dtype,))),
        "clear": draw(st.booleans()), "keepdim": keepdim, "dst": dst,
        "block": draw(S.tile((1, 2, 4, 8, 16))),
        "threads": draw(S.threads(THREADS)),
    }


FAMILY = register(Family("reduce", __doc__.splitlines()[0], params, build,
                         tags=("reduce",)))
