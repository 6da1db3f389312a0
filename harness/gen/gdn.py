"""Family `gdn_decode`: Gated DeltaNet decode (Qwen3-Next's linear-attention layers), a
threadgroup per (value-column block, value head) holding its d_k x bV slice of the float32
state on chip (a fragment spread over the threads) across all the tokens of the launch.

The decays exp(g) and betas of all the launch's tokens are staged in threadgroup memory
first (read once per threadgroup, not once per thread and token). Per token: q and k rows
are L2-normalized in the kernel (T.reduce_sum over d_k, q also scaled by 1/sqrt(d_k))
and staged in threadgroup memory (with kq="per_lane", below, nothing is staged: each
simdgroup loads and normalizes them itself, the gates are read per token); the state
decays by exp(g), the
delta rule subtracts the state's current value for k (T.reduce_sum over d_k, dim 0) and
adds k^T (beta * (v - k S)); the output row o = q S is a second dim-0 reduction. The
state is read from device memory once at the start of the launch and written once at the
end: with tokens=1 this is the one-token-per-launch decode kernel (the state makes a round
trip through device memory per token), with tokens=64 the multi-token kernel.
Oracle: oracles/gdn.py.

Params:
    tokens      tokens per launch (T), processed in order
    HK, groups  query/key heads and value heads per q/k head (HV = HK * groups heads)
    DK, DV      head dims of keys and values (Qwen3-Next: 128 and 128); any size, DV
                ragged against bV
    dtype       q, k, v and o: float32, float16, bfloat16 (state, gate and beta float32)
    bV          value columns per threadgroup; threads per threadgroup
    state       how the slice is held: "columns" (default) a d_k x bV fragment, so the
                reductions over d_k run down its columns (a butterfly over the lanes
                holding a column, then across simdgroups); "rows" transposed, bV x d_k,
                d_k along the lanes as MLX's gated_delta holds it: a row of 128 is one
                simdgroup's, each reduction one simd_sum per row, no threadgroup stage;
                the state is then read and written down the columns of S0 / S1
    kq          with state="rows": "staged" (default) normalizes k and q once and stages
                them (and v's columns) in threadgroup memory per token, behind a
                barrier, and the gates once a launch; "per_lane" has every simdgroup load
                the k and q elements its lanes hold straight from device memory and
                normalize them itself (a simd_sum each, redundantly per simdgroup), each
                lane load its rows' v and the gates per token, as MLX's gated_delta keeps
                k and q per lane: no threadgroup memory, no barrier (d_k above 128 aside);
                bV a multiple of threads // 32. Else a ValueError

Signature: (Q (T, HK, DK), K (T, HK, DK), V (T, HV, DV), G (T, HV), Beta (T, HV),
S0 (HV, DK, DV) float32, O (T, HV, DV), S1 (HV, DK, DV) float32); O and S1 are outputs.
"""

from __future__ import annotations

from hypothesis import strategies as st

import core.language as T
from harness.gen import strategies as S
from harness.gen.family import Built, Family, register
from harness.gen.inputs import random_tensor, uniform_tensor
from oracles import gdn as oracle

DTYPES = S.FLOATS
THREADS = (32, 64, 128, 256)
BLOCKS = (8, 16, 32, 4)
STATES = ("columns", "rows")
KQ = ("staged", "per_lane")


def kernel(tokens, HK, groups, DK, DV, dtype, bV, threads):
    HV = HK * groups
    scale = DK ** -0.5
    eps = oracle.EPS

    @T.prim_func
    def gdn_decode(Q: T.Tensor((tokens, HK, DK), dtype), K: T.Tensor((tokens, HK, DK), dtype),
                   V: T.Tensor((tokens, HV, DV), dtype), G: T.Tensor((tokens, HV), "float32"),
                   Beta: T.Tensor((tokens, HV), "float32"),
                   S0: T.Tensor((HV, DK, DV), "float32"), O: T.Tensor((tokens, HV, DV), dtype),
                   S1: T.Tensor((HV, DK, DV), "float32")):
        with T.Kernel(T.ceildiv(DV, bV), HV, threads=threads) as (bx, by):
            s = T.alloc_fragment((DK, bV), "float32")        # this block's state slice
            prod = T.alloc_fragment((DK, bV), "float32")
            kq = T.alloc_fragment((2, DK), "float32")         # row 0: k, row 1: q
            sq = T.alloc_fragment((2, DK), "float32")
            norm = T.alloc_fragment((2,), "float32")
            col = T.alloc_fragment((bV,), "float32")          # k S, then q S
            kq_s = T.alloc_shared((2, DK), "float32")
            v_s = T.alloc_shared((bV,), "float32")
            decay_beta = T.alloc_shared((2, tokens), "float32")   # exp(g_t), beta_t
            for i, j in T.Parallel(DK, bV):
                s[i, j] = T.if_then_else(bx * bV + j < DV, S0[by, i, bx * bV + j], 0.0)
            for r, t in T.Parallel(2, tokens):
                decay_beta[r, t] = T.if_then_else(r == 0, T.exp(G[t, by]), Beta[t, by])
            for t in T.serial(tokens):
                for r, i in T.Parallel(2, DK):
                    kq[r, i] = T.cast(T.if_then_else(r == 0, K[t, by // groups, i],
                                                     Q[t, by // groups, i]), "float32")
                for r, i in T.Parallel(2, DK):
                    sq[r, i] = kq[r, i] * kq[r, i]
                T.reduce_sum(sq, norm, dim=1)
                for r, i in T.Parallel(2, DK):
                    kq_s[r, i] = kq[r, i] * T.rsqrt(norm[r] + eps) * \
                        T.if_then_else(r == 0, 1.0, scale)
                for j in T.Parallel(bV):
                    v_s[j] = T.if_then_else(bx * bV + j < DV,
                                            T.cast(V[t, by, bx * bV + j], "float32"), 0.0)
                for i, j in T.Parallel(DK, bV):
                    s[i, j] = s[i, j] * decay_beta[0, t]
                    prod[i, j] = s[i, j] * kq_s[0, i]
                T.reduce_sum(prod, col, dim=0)
                for i, j in T.Parallel(DK, bV):
                    s[i, j] = s[i, j] + kq_s[0, i] * (decay_beta[1, t] * (v_s[j] - col[j]))
                    prod[i, j] = s[i, j] * kq_s[1, i]
                T.reduce_sum(prod, col, dim=0)
                for j in T.Parallel(bV):
                    if bx * bV + j < DV:
                        O[t, by, bx * bV + j] = T.cast(col[j], dtype)
            for i, j in T.Parallel(DK, bV):
                if bx * bV + j < DV:
                    S1[by, i, bx * bV + j] = s[i, j]
    return gdn_decode


def rows_kernel(tokens, HK, groups, DK, DV, dtype, bV, threads):
    """`kernel` with the slice held transposed (bV x d_k: d_k along the lanes)."""
    HV = HK * groups
    scale = DK ** -0.5
    eps = oracle.EPS

    @T.prim_func
    def gdn_decode(Q: T.Tensor((tokens, HK, DK), dtype), K: T.Tensor((tokens, HK, DK), dtype),
                   V: T.Tensor((tokens, HV, DV), dtype), G: T.Tensor((tokens, HV), "float32"),
                   Beta: T.Tensor((tokens, HV), "float32"),
                   S0: T.Tensor((HV, DK, DV), "float32"), O: T.Tensor((tokens, HV, DV), dtype),
                   S1: T.Tensor((HV, DK, DV), "float32")):
        with T.Kernel(T.ceildiv(DV, bV), HV, threads=threads) as (bx, by):
            s = T.alloc_fragment((bV, DK), "float32")        # this block's state slice, transposed
            prod = T.alloc_fragment((bV, DK), "float32")
            kq = T.alloc_fragment((2, DK), "float32")         # row 0: k, row 1: q
            sq = T.alloc_fragment((2, DK), "float32")
            norm = T.alloc_fragment((2,), "float32")
            col = T.alloc_fragment((bV,), "float32")          # k S, then q S
            kq_s = T.alloc_shared((2, DK), "float32")
            v_s = T.alloc_shared((bV,), "float32")
            decay_beta = T.alloc_shared((2, tokens), "float32")   # exp(g_t), beta_t
            for j, i in T.Parallel(bV, DK):
                s[j, i] = T.if_then_else(bx * bV + j < DV, S0[by, i, bx * bV + j], 0.0)
            for r, t in T.Parallel(2, tokens):
                decay_beta[r, t] = T.if_then_else(r == 0, T.exp(G[t, by]), Beta[t, by])
            for t in T.serial(tokens):
                for r, i in T.Parallel(2, DK):
                    kq[r, i] = T.cast(T.if_then_else(r == 0, K[t, by // groups, i],
                                                     Q[t, by // groups, i]), "float32")
                for r, i in T.Parallel(2, DK):
                    sq[r, i] = kq[r, i] * kq[r, i]
                T.reduce_sum(sq, norm, dim=1)
                for r, i in T.Parallel(2, DK):
                    kq_s[r, i] = kq[r, i] * T.rsqrt(norm[r] + eps) * \
                        T.if_then_else(r == 0, 1.0, scale)
                for j in T.Parallel(bV):
                    v_s[j] = T.if_then_else(bx * bV + j < DV,
                                            T.cast(V[t, by, bx * bV + j], "float32"), 0.0)
                for j, i in T.Parallel(bV, DK):
                    s[j, i] = s[j, i] * decay_beta[0, t]
                    prod[j, i] = s[j, i] * kq_s[0, i]
                T.reduce_sum(prod, col, dim=1)
                for j, i in T.Parallel(bV, DK):
                    s[j, i] = s[j, i] + kq_s[0, i] * (decay_beta[1, t] * (v_s[j] - col[j]))
                    prod[j, i] = s[j, i] * kq_s[1, i]
                T.reduce_sum(prod, col, dim=1)
                for j in T.Parallel(bV):
                    if bx * bV + j < DV:
                        O[t, by, bx * bV + j] = T.cast(col[j], dtype)
            for j, i in T.Parallel(bV, DK):
                if bx * bV + j < DV:
                    S1[by, i, bx * bV + j] = s[j, i]
    return gdn_decode


def per_lane_kernel(tokens, HK, groups, DK, DV, dtype, bV, threads):
    """`rows_kernel` with nothing staged. The slice is held (bV / sg, sg, DKp) for the
    kernel's sg = threads / 32 simdgroups (row j = r * sg + g, as rows_kernel lays its bV
    rows out), d_k padded to DKp, a multiple of 128 (4 elements a lane; the padding reads
    0). k and q are (sg, DKp) fragments, simdgroup g's row of them the d_k elements its
    lanes hold of the state's rows: every simdgroup loads k and q from device memory and
    normalizes them itself (a simd_sum each), read as k[g, i] in the state loops; q's
    fragment holds the squares of k, then of q, then q (q is read twice: a third
    (sg, DKp) array would take the thread past the model's register share, 208 bytes of
    arrays at the bench shape, and spill).
    The gates are per-thread scalars loaded per token, v read per lane into the
    reduction's result (col = beta (v - k S)). No threadgroup memory, no barrier (for DKp
    above 128 a row spans simdgroups and its reductions combine through threadgroup
    memory)."""
    HV = HK * groups
    scale = DK ** -0.5
    eps = oracle.EPS
    sg = threads // 32
    R = bV // sg
    DKp = -(-DK // 128) * 128

    @T.prim_func
    def gdn_decode(Q: T.Tensor((tokens, HK, DK), dtype), K: T.Tensor((tokens, HK, DK), dtype),
                   V: T.Tensor((tokens, HV, DV), dtype), G: T.Tensor((tokens, HV), "float32"),
                   Beta: T.Tensor((tokens, HV), "float32"),
                   S0: T.Tensor((HV, DK, DV), "float32"), O: T.Tensor((tokens, HV, DV), dtype),
                   S1: T.Tensor((HV, DK, DV), "float32")):
        with T.Kernel(T.ceildiv(DV, bV), HV, threads=threads) as (bx, by):
            s = T.alloc_fragment((R, sg, DKp), "float32")    # the slice, row r * sg + g
            prod = T.alloc_fragment((R, sg, DKp), "float32")
            k = T.alloc_fragment((sg, DKp), "float32")        # each simdgroup's copy
            q = T.alloc_fragment((sg, DKp), "float32")        # k^2, q^2, then q
            knorm = T.alloc_fragment((sg,), "float32")
            qnorm = T.alloc_fragment((sg,), "float32")
            decay = T.alloc_fragment((sg,), "float32")        # exp(g_t)
            beta = T.alloc_fragment((sg,), "float32")
            col = T.alloc_fragment((R, sg), "float32")        # k S, beta (v - k S), q S
            for r, g, i in T.Parallel(R, sg, DKp):
                s[r, g, i] = T.if_then_else((bx * bV + r * sg + g < DV) and (i < DK),
                                            S0[by, i, bx * bV + r * sg + g], 0.0)
            for t in T.serial(tokens):
                for g, i in T.Parallel(sg, DKp):
                    k[g, i] = T.if_then_else(i < DK, T.cast(K[t, by // groups, i], "float32"),
                                             0.0)
                    q[g, i] = k[g, i] * k[g, i]
                T.reduce_sum(q, knorm, dim=1)
                for g, i in T.Parallel(sg, DKp):
                    k[g, i] = k[g, i] * T.rsqrt(knorm[g] + eps)
                    q[g, i] = T.if_then_else(i < DK, T.cast(Q[t, by // groups, i], "float32"),
                                             0.0)
                    q[g, i] = q[g, i] * q[g, i]
                T.reduce_sum(q, qnorm, dim=1)
                for g, i in T.Parallel(sg, DKp):
                    q[g, i] = T.if_then_else(i < DK, T.cast(Q[t, by // groups, i], "float32"),
                                             0.0) * (T.rsqrt(qnorm[g] + eps) * scale)
                for g in T.Parallel(sg):
                    decay[g] = T.exp(G[t, by])
                    beta[g] = Beta[t, by]
                for r, g, i in T.Parallel(R, sg, DKp):
                    s[r, g, i] = s[r, g, i] * decay[g]
                    prod[r, g, i] = s[r, g, i] * k[g, i]
                T.reduce_sum(prod, col, dim=2)
                for r, g in T.Parallel(R, sg):
                    col[r, g] = beta[g] * (T.if_then_else(
                        bx * bV + r * sg + g < DV,
                        T.cast(V[t, by, bx * bV + r * sg + g], "float32"), 0.0) - col[r, g])
                for r, g, i in T.Parallel(R, sg, DKp):
                    s[r, g, i] = s[r, g, i] + k[g, i] * col[r, g]
                    prod[r, g, i] = s[r, g, i] * q[g, i]
                T.reduce_sum(prod, col, dim=2)
                for r, g in T.Parallel(R, sg):
                    if bx * bV + r * sg + g < DV:
                        O[t, by, bx * bV + r * sg + g] = T.cast(col[r, g], dtype)
            for r, g, i in T.Parallel(R, sg, DKp):
                if (bx * bV + r * sg + g < DV) and (i < DK):
                    S1[by, i, bx * bV + r * sg + g] = s[r, g, i]
    return gdn_decode


def make_inputs(p: dict, seed: int) -> list:
    """Q, K, V normal; the log gate g in [-1, 0) (decay exp(g) in (0.37, 1], as
    -exp(A_log) * softplus(.) gives), beta in (0, 1) (a sigmoid), the state ~0.1 N(0, 1)."""
    tokens, HK, DK, DV = p["tokens"], p["HK"], p["DK"], p["DV"]
    HV = HK * p["groups"]
    return [random_tensor((tokens, HK, DK), p["dtype"], seed),
            random_tensor((tokens, HK, DK), p["dtype"], seed + 1),
            random_tensor((tokens, HV, DV), p["dtype"], seed + 2),
            uniform_tensor((tokens, HV), "float32", seed + 3, -1.0, 0.0),
            uniform_tensor((tokens, HV), "float32", seed + 4, 0.0, 1.0),
            random_tensor((HV, DK, DV), "float32", seed + 5, scale=0.1)]


def build(p: dict) -> Built:
    state, kq = p.get("state", "columns"), p.get("kq", "staged")
    if kq not in KQ:
        raise ValueError(f"gdn_decode: kq must be one of {KQ}, not {kq!r}")
    if kq == "per_lane" and state != "rows":
        raise ValueError(f"gdn_decode: kq='per_lane' needs state='rows' (d_k along the "
                         f"lanes), not state={state!r}")
    if kq == "per_lane" and p["bV"] % (p["threads"] // 32):
        raise ValueError(f"gdn_decode: kq='per_lane' needs bV a multiple of the "
                         f"simdgroups (threads // 32 = {p['threads'] // 32}), not bV={p['bV']}")
    make = per_lane_kernel if kq == "per_lane" else \
        rows_kernel if state == "rows" else kernel
    func = make(p["tokens"], p["HK"], p["groups"], p["DK"], p["DV"], p["dtype"], p["bV"],
                p["threads"])

    def expected(args):
        return oracle.gdn_decode_expected(*args, out_dtype=p["dtype"])

    HV = p["HK"] * p["groups"]
    # Per token and state element: decay, k S, the update and q S (2 flops each), plus the
    # norms.
    flops = p["tokens"] * HV * (8 * p["DK"] * p["DV"] + 6 * p["DK"])
    return Built(func, [6, 7], lambda seed: make_inputs(p, seed), expected, flops=flops)


@st.composite
def params(draw):
    p = {
        "tokens": draw(st.integers(1, 5)), "HK": draw(st.integers(1, 2)),
        "groups": draw(st.integers(1, 2)), "DK": draw(S.extent(1, 48)),
        "DV": draw(S.extent(1, 48)), "dtype": draw(S.dtype(DTYPES)),
        "bV": draw(S.tile(BLOCKS)), "threads": draw(S.threads(THREADS)),
        "state": draw(S.sampled_from(STATES)),
    }
    if p["state"] == "rows" and p["bV"] % (p["threads"] // 32) == 0:
        p["kq"] = draw(S.sampled_from(KQ))
    return p


FAMILY = register(Family("gdn_decode", __doc__.splitlines()[0], params, build,
                         tags=("reduce", "workload")))
