"""Family `layernorm`: Y = (X - mean(X, row)) * rsqrt(var(X, row) + eps) * W + B, TileLang
style: whole rows in a float32 fragment, T.reduce_sum for the mean, the centred squares in a
second fragment and T.reduce_sum again for the (biased) variance, a broadcast affine map.

Params:
    M, N        X and Y are M x N, W and B have N elements; a threadgroup holds bM whole rows
                (ragged in M; any N)
    dtype       dtype of X, W, B and Y: float32, float16, bfloat16 (computed in float32)
    eps         1e-5 or 1e-6 (a constant of the kernel)
    bM          rows per threadgroup; threads: threads per threadgroup
                (strategies.reduce_threads: powers of two 1..1024, other multiples of 32,
                the pipeline limits 768 and 896)

Signature: (X, W, B, Y).
"""

from __future__ import annotations

from hypothesis import strategies as st

import core.language as T
from harness.gen import strategies as S
from harness.gen.family import Built, Family, register
from harness.gen.inputs import random_tensor
from oracles import bounds
from oracles import norm as oracle

EPS = (1e-5, 1e-6)


def build(p: dict) -> Built:
    M, N, bM, threads, dtype, eps = p["M"], p["N"], p["bM"], p["threads"], p["dtype"], \
        p["eps"]

    @T.prim_func
    def layernorm(X: T.Tensor((M, N), dtype), W: T.Tensor((N,), dtype),
                  B: T.Tensor((N,), dtype), Y: T.Tensor((M, N), dtype)):
        with T.Kernel(T.ceildiv(M, bM), threads=threads) as bx:
            x = T.alloc_fragment((bM, N), "float32")
            sq = T.alloc_fragment((bM, N), "float32")
            mean = T.alloc_fragment((bM,), "float32")
            inv = T.alloc_fragment((bM,), "float32")
            T.copy(X[bx * bM:(bx + 1) * bM, 0:N], x)
            T.reduce_sum(x, mean, dim=1)
            for i in T.Parallel(bM):
                mean[i] = mean[i] / N
            for i, j in T.Parallel(bM, N):
                x[i, j] = x[i, j] - mean[i]
            for i, j in T.Parallel(bM, N):
                sq[i, j] = x[i, j] * x[i, j]
            T.reduce_sum(sq, inv, dim=1)
            for i in T.Parallel(bM):
                inv[i] = T.rsqrt(inv[i] / N + eps)
            for i, j in T.Parallel(bM, N):
                x[i, j] = x[i, j] * inv[i] * T.cast(W[j], "float32") + T.cast(B[j], "float32")
            T.copy(x, Y[bx * bM:(bx + 1) * bM, 0:N])

    def inputs(seed):
        return [random_tensor((M, N), dtype, seed), random_tensor((N,), dtype, seed + 1),
                random_tensor((N,), dtype, seed + 2)]

    def expected(args):
        return [bounds.expected(oracle.layer_norm_bounded(args[0], args[1], args[2], eps),
                                dtype, f"layer_norm over N={N} in float32")]

    return Built(layernorm, [3], inputs, expected, flops=7 * M * N)


@st.composite
def params(draw):
    return {**draw(S.row_tiles()), "eps": draw(S.sampled_from(EPS))}


FAMILY = register(Family("layernorm", __doc__.splitlines()[0], params, build,
                         tags=("reduce",)))
