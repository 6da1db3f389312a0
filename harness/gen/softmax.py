"""Family `softmax`: row softmax, TileLang style: whole rows in a float32 fragment,
T.reduce_max, exp(x - max) with a broadcast read of the row maximum, T.reduce_sum, divide.

Params:
    M, N        X and Y are M x N; a threadgroup holds bM whole rows (ragged in M; any
                N, 4096 x 4096 builds too: a fragment past the register budget per thread
                is streamed in chunks by core/transform/stream_rows.py, online max/sum;
                one case in four draws such long rows, strategies.row_tiles)
    dtype       dtype of X and Y: float32, float16, bfloat16 (computed in float32)
    scale       x is multiplied by `scale` before the softmax (1.0, or 1/sqrt(d)-like)
    bM          rows per threadgroup; threads: threads per threadgroup
                (strategies.reduce_threads: powers of two 1..1024, other multiples of 32,
                the pipeline limits 768 and 896)

Signature: (X, Y). Rows past M are loaded as 0 and never stored.
"""

from __future__ import annotations

from hypothesis import strategies as st

import core.language as T
from harness.gen import strategies as S
from harness.gen.family import Built, Family, register
from harness.gen.inputs import random_tensor
from oracles import bounds
from oracles import norm as oracle

SCALES = (1.0, 0.125, 0.5)



def build(p: dict) -> Built:
    M, N, bM, threads, dtype, scale = p["M"], p["N"], p["bM"], p["threads"], p["dtype"], \
        p["scale"]

    @T.prim_func
    def softmax(X: T.Tensor((M, N), dtype), Y: T.Tensor((M, N), dtype)):
        with T.Kernel(T.ceildiv(M, bM), threads=threads) as bx:
            x = T.alloc_fragment((bM, N), "float32")
            row_max = T.alloc_fragment((bM,), "float32")
            row_sum = T.alloc_fragment((bM,), "float32")
            T.copy(X[bx * bM:(bx + 1) * bM, 0:N], x)
            for i, j in T.Parallel(bM, N):
                x[i, j] = x[i, j] * scale
            T.reduce_max(x, row_max, dim=1)
            for i, j in T.Parallel(bM, N):
                x[i, j] = T.exp(x[i, j] - row_max[i])
            T.reduce_sum(x, row_sum, dim=1)
            for i, j in T.Parallel(bM, N):
                x[i, j] = x[i, j] / row_sum[i]
            T.copy(x, Y[bx * bM:(bx + 1) * bM, 0:N])

    def inputs(seed):
        return [random_tensor((M, N), dtype, seed, scale=2.0)]

    def expected(args):
        return [bounds.expected(oracle.softmax_bounded(args[0], scale), dtype,
                                f"softmax over N={N} in float32")]

    return Built(softmax, [1], inputs, expected, flops=5 * M * N)


@st.composite
def params(draw):
    return {**draw(S.row_tiles(long_rows=True)), "scale": draw(S.sampled_from(SCALES))}


FAMILY = register(Family("softmax", __doc__.splitlines()[0], params, build,
                         tags=("reduce",)))
