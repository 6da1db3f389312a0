"""Family `elementwise`: C = cast(A op B) over a 2-D grid of tiles, with ragged edges.

Params: M, N (any size >= 1), dtype (inputs), out_dtype, op, bM, bN (tile), threads.
"""

from __future__ import annotations

from hypothesis import strategies as st

import core.language as T
from harness.gen.family import Built, Family, register
from harness.gen.inputs import random_tensor
from oracles import elementwise as oracle

OPS = tuple(oracle.OPS)
DTYPES = ("float32", "float16", "bfloat16", "int32", "int8", "uint8")


def _expr(op, a, b):
    if op == "add":
        return a + b
    if op == "sub":
        return a - b
    if op == "mul":
        return a * b
    if op == "max":
        return T.max(a, b)
    return T.min(a, b)


def build(p: dict) -> Built:
    M, N, bM, bN, threads = p["M"], p["N"], p["bM"], p["bN"], p["threads"]
    dtype, out_dtype, op = p["dtype"], p["out_dtype"], p["op"]

    @T.prim_func
    def elementwise(A: T.Tensor((M, N), dtype), B: T.Tensor((M, N), dtype),
                    C: T.Tensor((M, N), out_dtype)):
        with T.Kernel(T.ceildiv(N, bN), T.ceildiv(M, bM), threads=threads) as (bx, by):
            for i, j in T.Parallel(bM, bN):
                if by * bM + i < M and bx * bN + j < N:
                    C[by * bM + i, bx * bN + j] = T.cast(
                        _expr(op, A[by * bM + i, bx * bN + j], B[by * bM + i, bx * bN + j]),
                        out_dtype)

    def inputs(seed):
        return [random_tensor((M, N), dtype, seed), random_tensor((M, N), dtype, seed + 1)]

    def expected(args):
        return [oracle.binary(op, args[0], args[1], out_dtype)]

    # Computed in the input dtype, then cast: the input's precision sets the tolerance.
    narrow = dtype if dtype in ("float16", "bfloat16") else out_dtype
    return Built(elementwise, [2], inputs, expected, tolerance_dtypes=(narrow,), flops=M * N)


@st.composite
def params(draw):
    dtype = draw(st.sampled_from(DTYPES))
    floats = dtype.startswith(("float", "bfloat"))
    out_dtype = draw(st.sampled_from(("float32", dtype) if floats else (dtype,)))
    # Integer ops that may overflow (mul of int8) wrap in the kernel and in the oracle's
    # cast alike; sub of uint8 too.
    return {
        "M": draw(st.integers(1, 96)), "N": draw(st.integers(1, 96)),
        "dtype": dtype, "out_dtype": out_dtype, "op": draw(st.sampled_from(OPS)),
        "bM": draw(st.sampled_from((1, 4, 8, 16, 32))),
        "bN": draw(st.sampled_from((4, 8, 16, 32, 64))),
        "threads": draw(st.sampled_from((32, 64, 128, 256))),
    }


FAMILY = register(Family("elementwise", __doc__.splitlines()[0], params, build))
