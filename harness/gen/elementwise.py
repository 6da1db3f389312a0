"""Family `elementwise`: C = cast(A op B) or C = cast(f(A)) over a 2-D grid of tiles, with
ragged edges.

Params:
    M, N        tensor extents, any size >= 1 (ragged against the tile); any size builds
                (M = N = 4096 is fine)
    dtype       input dtype: float32, float16, bfloat16, int32, int8, uint8, int64
    out_dtype   result dtype: float32 or `dtype` for float inputs, `dtype` for integers
    op          binary: add, sub, mul, max, min (A and B inputs);
                unary: exp, exp2, log, log2, sqrt, rsqrt, abs, tanh, sigmoid (A only;
                integers: abs only), applied in the input dtype as written in TileLang
                (`T.exp(A[i, j])`), with inputs drawn from the function's safe range
                (oracles/elementwise.py UNARY)
    bM, bN      tile; threads: threads per threadgroup (int or [x, y(, z)])

Each thread handles (i, j) of `T.Parallel(bM, bN)` under an `if` bounds guard.
"""

from __future__ import annotations

from hypothesis import strategies as st

import core.language as T
from harness.gen import strategies as S
from harness.gen.family import Built, Family, register
from harness.gen.inputs import random_tensor, uniform_tensor
from oracles import elementwise as oracle

OPS = tuple(oracle.OPS)
UNARY = tuple(oracle.UNARY)

DTYPES = S.NUMERIC + ("int64",)

_UNARY_DSL = {"exp": T.exp, "exp2": T.exp2, "log": T.log, "log2": T.log2, "sqrt": T.sqrt,
              "rsqrt": T.rsqrt, "abs": T.abs, "tanh": T.tanh, "sigmoid": T.sigmoid}


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


def _binary(p):
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
        return [oracle.binary_expected(op, args[0], args[1], dtype, out_dtype)]

    return elementwise, 2, inputs, expected


def _unary(p):
    M, N, bM, bN, threads = p["M"], p["N"], p["bM"], p["bN"], p["threads"]
    dtype, out_dtype, op = p["dtype"], p["out_dtype"], p["op"]
    fn = _UNARY_DSL[op]
    low, high = oracle.UNARY[op][1]

    @T.prim_func
    def elementwise_unary(A: T.Tensor((M, N), dtype), C: T.Tensor((M, N), out_dtype)):
        with T.Kernel(T.ceildiv(N, bN), T.ceildiv(M, bM), threads=threads) as (bx, by):
            for i, j in T.Parallel(bM, bN):
                if by * bM + i < M and bx * bN + j < N:
                    C[by * bM + i, bx * bN + j] = T.cast(fn(A[by * bM + i, bx * bN + j]),
                                                         out_dtype)

    def inputs(seed):
        if S.is_float(dtype):
            return [uniform_tensor((M, N), dtype, seed, low, high)]
        return [random_tensor((M, N), dtype, seed)]

    def expected(args):
        return [oracle.unary_expected(op, args[0], dtype, out_dtype)]

    return elementwise_unary, 1, inputs, expected


def build(p: dict) -> Built:
    unary = p["op"] in UNARY
    func, out, inputs, expected = (_unary if unary else _binary)(p)
    return Built(func, [out], inputs, expected, flops=p["M"] * p["N"])


@st.composite
def params(draw):
    dtype = draw(S.dtype(DTYPES))
    floats = S.is_float(dtype)
    out_dtype = draw(S.sampled_from(("float32", dtype) if floats else (dtype,)))
    # Integer ops that may overflow (mul of int8) wrap in the kernel and in the oracle's
    # cast alike; sub of uint8 too.
    ops = OPS + (UNARY if floats else ("abs",))
    return {
        "M": draw(S.extent(1, 96)), "N": draw(S.extent(1, 96)),
        "dtype": dtype, "out_dtype": out_dtype, "op": draw(S.sampled_from(ops)),
        "bM": draw(S.tile((1, 4, 8, 16, 32))),
        "bN": draw(S.tile((4, 8, 16, 32, 64))),
        "threads": draw(S.threads(S.THREADS_ANY)),
    }


FAMILY = register(Family("elementwise", __doc__.splitlines()[0], params, build))
