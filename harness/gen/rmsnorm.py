"""Family `rmsnorm`: Y = X * rsqrt(mean(X^2, row) + eps) * W, TileLang style: whole rows in a
float32 fragment, squares in a second fragment, T.reduce_sum, a T.Parallel over the row
results, a broadcast multiply.

Params:
    M, N        X and Y are M x N, W has N elements; a threadgroup holds bM whole rows
                (ragged in M; any N, 4096 x 4096 builds too)
    dtype       dtype of X, W and Y: float32, float16, bfloat16 (computed in float32)
    eps         1e-6 or 1e-5 (a constant of the kernel)
    weight      "global": W[j] read from device memory in the T.Parallel;
                "shared": W staged once into threadgroup memory with T.copy (a barrier)
    bM          rows per threadgroup; threads: threads per threadgroup
                (strategies.reduce_threads: powers of two 1..1024, other multiples of 32,
                the pipeline limits 768 and 896)

Signature: (X, W, Y).
"""

from __future__ import annotations

from hypothesis import strategies as st

import core.language as T
from harness.gen import strategies as S
from harness.gen.family import Built, Family, register
from harness.gen.inputs import random_tensor
from oracles import bounds
from oracles import norm as oracle

EPS = (1e-6, 1e-5)
WEIGHT = ("global", "shared")



def build(p: dict) -> Built:
    M, N, bM, threads, dtype, eps = p["M"], p["N"], p["bM"], p["threads"], p["dtype"], \
        p["eps"]

    if p["weight"] == "global":
        @T.prim_func
        def rmsnorm(X: T.Tensor((M, N), dtype), W: T.Tensor((N,), dtype),
                    Y: T.Tensor((M, N), dtype)):
            with T.Kernel(T.ceildiv(M, bM), threads=threads) as bx:
                x = T.alloc_fragment((bM, N), "float32")
                sq = T.alloc_fragment((bM, N), "float32")
                inv = T.alloc_fragment((bM,), "float32")
                T.copy(X[bx * bM:(bx + 1) * bM, 0:N], x)
                for i, j in T.Parallel(bM, N):
                    sq[i, j] = x[i, j] * x[i, j]
                T.reduce_sum(sq, inv, dim=1)
                for i in T.Parallel(bM):
                    inv[i] = T.rsqrt(inv[i] / N + eps)
                for i, j in T.Parallel(bM, N):
                    x[i, j] = x[i, j] * inv[i] * T.cast(W[j], "float32")
                T.copy(x, Y[bx * bM:(bx + 1) * bM, 0:N])
        func = rmsnorm
    else:
        @T.prim_func
        def rmsnorm_shared_weight(X: T.Tensor((M, N), dtype), W: T.Tensor((N,), dtype),
                                  Y: T.Tensor((M, N), dtype)):
            with T.Kernel(T.ceildiv(M, bM), threads=threads) as bx:
                w = T.alloc_shared((N,), dtype)
                x = T.alloc_fragment((bM, N), "float32")
                sq = T.alloc_fragment((bM, N), "float32")
                inv = T.alloc_fragment((bM,), "float32")
                T.copy(W, w)
                T.copy(X[bx * bM:(bx + 1) * bM, 0:N], x)
                for i, j in T.Parallel(bM, N):
                    sq[i, j] = x[i, j] * x[i, j]
                T.reduce_sum(sq, inv, dim=1)
                for i in T.Parallel(bM):
                    inv[i] = T.rsqrt(inv[i] / N + eps)
                for i, j in T.Parallel(bM, N):
                    x[i, j] = x[i, j] * inv[i] * T.cast(w[j], "float32")
                T.copy(x, Y[bx * bM:(bx + 1) * bM, 0:N])
        func = rmsnorm_shared_weight

    def inputs(seed):
        return [random_tensor((M, N), dtype, seed), random_tensor((N,), dtype, seed + 1)]

    def expected(args):
        return [bounds.expected(oracle.rmsnorm_bounded(args[0], args[1], eps), dtype,
                                f"rmsnorm over N={N} in float32")]

    return Built(func, [2], inputs, expected, flops=4 * M * N)


@st.composite
def params(draw):
    return {**draw(S.row_tiles()), "eps": draw(S.sampled_from(EPS)),
            "weight": draw(S.sampled_from(WEIGHT))}


FAMILY = register(Family("rmsnorm", __doc__.splitlines()[0], params, build,
                         tags=("reduce",)))
