"""Family `attention_decode`: decode attention (one query token) over a KV cache with
grouped-query heads, split-K (flash decoding): one launch computes a partial softmax-weighted
sum per (key split, KV head), a second combines the splits.

Launch 1, a threadgroup per (split, KV head): the `groups` query heads that share the KV
head (GQA) are one (groups, D) float32 fragment, each query row scaled by 1/sqrt(D) once.
The split's keys are taken bN at a time (serial loop): the K and V tiles come from device
memory into fragments (edges masked); scores s = q k^T (a (groups, bN, D) product reduced
over D by T.reduce_sum), keys past the split or past N set to -inf; the online softmax
keeps the running max m, the running sum l and the unnormalized output acc per query row:

    m' = max(m, max_j s_j)    a = exp(m - m')    p_j = exp(s_j - m')
    l = l a + sum_j p_j       acc = acc a + sum_j p_j v_j        (m = -inf at the start)

and the split's (acc, m, l) go to workspaces (T.alloc_global; m and l float32, acc in the
dtype `partials` says). Launch 2, a
threadgroup per query head: M = max over splits of m, w_s = exp(m_s - M),
O = (sum_s w_s acc_s) / (sum_s w_s l_s) (a serial loop over the splits), stored in the input
dtype. Oracle: oracles/attention.py.

Two forms of launch 1. bN > 1 (`kernel`): the scores of a step go through threadgroup
memory, since the max over the keys reduces a fragment that is itself a reduction's result
(the layouts forbid reducing it again in registers), and the rescale factors are read in
loops of two shapes. bN = 1 (`lanes_kernel`, the bench's): one key a step, its row read
once into a (D,) fragment, the online state per (query head, element), nothing through
threadgroup memory and no barrier: the form of MLX's sdpa_vector, with the query heads of
a KV head in one threadgroup.

Params:
    HK, groups  KV heads and query heads per KV head (HQ = HK * groups); Qwen2.5-7B: 4 x 7,
                Llama-3-8B / Qwen3-8B: 8 x 4
    N           key length (the KV cache), any size >= 1
    D           head dim of queries, keys and values
    dtype       Q, K, V and O: float32, float16, bfloat16 (computed in float32)
    splits      key splits (launch 1's first grid dim); every split holds at least one key
                (splits <= N and (splits - 1) * ceil(N / splits) < N)
    bN          keys per step of a split's serial loop (1: the register form)
    partials    the dtype the splits' unnormalized outputs are stored in between the
                launches: "float32" (default) or "input" (the input dtype, as MLX's 2-pass
                kernel keeps them: half the workspace bytes, one more rounding of each
                partial, which the oracle's bounds take: `held`)
    threads     threads per threadgroup of launch 1; `combine_threads` of launch 2

Signature: (Q (HQ, D), K (HK, N, D), V (HK, N, D), O (HQ, D)); O is the output. Q is the
single token's [B=1, HQ, L=1, D] query, K and V the [1, HK, N, D] cache.
"""

from __future__ import annotations

from hypothesis import strategies as st

import core.language as T
from harness.gen import strategies as S
from harness.gen.family import Built, Family, register
from harness.gen.inputs import random_tensor
from oracles import attention as oracle

DTYPES = S.FLOATS
THREADS = (32, 64, 128, 256)
BLOCKS = (1, 4, 8, 16, 2)


def chunk_of(N: int, splits: int) -> int:
    """Keys per split: ceil(N / splits), the last split holding the rest."""
    return -(-N // splits)


PARTIALS = ("float32", "input")


def held_dtype(p: dict) -> str:
    """The dtype of the splits' stored partial outputs (`partials`)."""
    partials = p.get("partials", "float32")
    if partials not in PARTIALS:
        raise ValueError(f"attention_decode: partials={partials!r}; one of {PARTIALS}")
    return p["dtype"] if partials == "input" else "float32"


def check_params(p: dict) -> None:
    N, splits = p["N"], p["splits"]
    if splits < 1 or splits > N or (splits - 1) * chunk_of(N, splits) >= N:
        raise ValueError(f"attention_decode: splits={splits} leaves a split with no key at "
                         f"N={N} (each of ceil(N / splits) = {chunk_of(N, max(splits, 1))} "
                         "keys); pick splits with (splits - 1) * ceil(N / splits) < N")


@T.macro
def _combine(Acc, Max, Sum, O, HQ, D, dtype, splits, combine_threads):
    """Launch 2 (both forms): per query head, the splits' outputs weighted by
    exp(m_s - max m) over the weighted sums."""
    with T.Kernel(HQ, threads=combine_threads) as h:
        ms = T.alloc_fragment((splits,), "float32")
        top = T.alloc_fragment((1,), "float32")
        w = T.alloc_shared((splits,), "float32")           # read in (splits, D) too
        wl = T.alloc_fragment((splits,), "float32")
        total = T.alloc_shared((1,), "float32")            # read by every thread
        out = T.alloc_fragment((D,), "float32")
        for i in T.Parallel(splits):
            ms[i] = Max[i, h]
        T.reduce_max(ms, top, dim=0)
        for i in T.Parallel(splits):
            w[i] = T.exp(ms[i] - top[0])
        for i in T.Parallel(splits):
            wl[i] = w[i] * Sum[i, h]
        T.reduce_sum(wl, total, dim=0)
        T.fill(out, 0.0)
        for i in T.serial(splits):
            for d in T.Parallel(D):
                out[d] = out[d] + w[i] * T.cast(Acc[i, h, d], "float32")
        for d in T.Parallel(D):
            O[h, d] = T.cast(out[d] / total[0], dtype)


def kernel(HK, groups, N, D, dtype, splits, bN, threads, combine_threads, held="float32"):
    G = groups
    HQ = HK * G
    chunk = chunk_of(N, splits)
    steps = -(-chunk // bN)
    scale = D ** -0.5
    neg_inf = -T.infinity("float32")

    @T.prim_func
    def attention_decode(Q: T.Tensor((HQ, D), dtype), K: T.Tensor((HK, N, D), dtype),
                         V: T.Tensor((HK, N, D), dtype), O: T.Tensor((HQ, D), dtype)):
        Acc = T.alloc_global((splits, HQ, D), held)         # per split: unnormalized out
        Max = T.alloc_global((splits, HQ), "float32")        # per split: running max
        Sum = T.alloc_global((splits, HQ), "float32")        # per split: running sum
        with T.Kernel(splits, HK, threads=threads) as (bs, bh):
            q = T.alloc_fragment((G, D), "float32")
            kt = T.alloc_fragment((bN, D), dtype)
            vt = T.alloc_fragment((bN, D), dtype)
            prod = T.alloc_fragment((G, bN, D), "float32")
            s = T.alloc_fragment((G, bN), "float32")         # the scores, reduced over D
            p_s = T.alloc_shared((G, bN), "float32")         # masked scores, then p
            m = T.alloc_fragment((G,), "float32")
            m_blk = T.alloc_fragment((G,), "float32")
            alpha = T.alloc_shared((G,), "float32")          # read in (G, bN) and (G, D)
            l = T.alloc_fragment((G,), "float32")
            l_blk = T.alloc_fragment((G,), "float32")
            acc = T.alloc_fragment((G, D), "float32")
            o_blk = T.alloc_fragment((G, D), "float32")
            end = T.min((bs + 1) * chunk, N)                 # this split's keys: [start, end)
            for g, d in T.Parallel(G, D):
                q[g, d] = T.cast(Q[bh * G + g, d], "float32") * scale
            T.fill(acc, 0.0)
            T.fill(l, 0.0)
            T.fill(m, neg_inf)
            for t in T.serial(steps):
                n0 = bs * chunk + t * bN
                T.copy(K[bh, n0:n0 + bN, 0:D], kt)
                T.copy(V[bh, n0:n0 + bN, 0:D], vt)
                for g, j, d in T.Parallel(G, bN, D):
                    prod[g, j, d] = q[g, d] * T.cast(kt[j, d], "float32")
                T.reduce_sum(prod, s, dim=2)
                for g, j in T.Parallel(G, bN):
                    p_s[g, j] = T.if_then_else(n0 + j < end, s[g, j], neg_inf)
                T.reduce_max(p_s, m_blk, dim=1)
                for g in T.Parallel(G):
                    m_blk[g] = T.max(m[g], m_blk[g])
                    alpha[g] = T.exp(m[g] - m_blk[g])
                    m[g] = m_blk[g]
                for g, j in T.Parallel(G, bN):
                    p_s[g, j] = T.exp(p_s[g, j] - m[g])
                T.reduce_sum(p_s, l_blk, dim=1)
                for g in T.Parallel(G):
                    l[g] = l[g] * alpha[g] + l_blk[g]
                for g, j, d in T.Parallel(G, bN, D):
                    prod[g, j, d] = p_s[g, j] * T.cast(vt[j, d], "float32")
                T.reduce_sum(prod, o_blk, dim=1)
                for g, d in T.Parallel(G, D):
                    acc[g, d] = acc[g, d] * alpha[g] + o_blk[g, d]
            for g, d in T.Parallel(G, D):
                Acc[bs, bh * G + g, d] = T.cast(acc[g, d], held)
            for g in T.Parallel(G):
                Max[bs, bh * G + g] = m[g]
                Sum[bs, bh * G + g] = l[g]
        _combine(Acc, Max, Sum, O, HQ, D, dtype, splits, combine_threads)
    return attention_decode


def lanes_kernel(HK, groups, N, D, dtype, splits, threads, combine_threads, held="float32"):
    """bN = 1, the register form: a split reads one key at a time, straight from device
    memory; the online softmax state is kept per (query head, element) in (groups, D)
    fragments (m and l repeated along D), so nothing goes through threadgroup memory: the
    only exchange per key is the reduction of q k over D."""
    G = groups
    HQ = HK * G
    chunk = chunk_of(N, splits)
    scale = D ** -0.5
    neg_inf = -T.infinity("float32")

    @T.prim_func
    def attention_decode(Q: T.Tensor((HQ, D), dtype), K: T.Tensor((HK, N, D), dtype),
                         V: T.Tensor((HK, N, D), dtype), O: T.Tensor((HQ, D), dtype)):
        Acc = T.alloc_global((splits, HQ, D), held)
        Max = T.alloc_global((splits, HQ), "float32")
        Sum = T.alloc_global((splits, HQ), "float32")
        with T.Kernel(splits, HK, threads=threads) as (bs, bh):
            q = T.alloc_fragment((G, D), "float32")
            kt = T.alloc_fragment((D,), dtype)                 # one key row, read once
            vt = T.alloc_fragment((D,), dtype)
            prod = T.alloc_fragment((G, D), "float32")
            s = T.alloc_fragment((G,), "float32")
            m = T.alloc_fragment((G,), "float32")            # the running max
            l = T.alloc_fragment((G,), "float32")            # the running sum
            alpha = T.alloc_fragment((G,), "float32")
            acc = T.alloc_fragment((G, D), "float32")
            for g, d in T.Parallel(G, D):
                q[g, d] = T.cast(Q[bh * G + g, d], "float32") * scale
            T.fill(acc, 0.0)
            T.fill(l, 0.0)
            T.fill(m, neg_inf)
            for t in T.serial(T.min(chunk, N - bs * chunk)):
                T.copy(K[bh, bs * chunk + t, 0:D], kt)
                T.copy(V[bh, bs * chunk + t, 0:D], vt)
                for g, d in T.Parallel(G, D):
                    prod[g, d] = q[g, d] * T.cast(kt[d], "float32")
                T.reduce_sum(prod, s, dim=1)
                for g in T.Parallel(G):
                    m_new = T.max(m[g], s[g])
                    alpha[g] = T.exp(m[g] - m_new)
                    s[g] = T.exp(s[g] - m_new)
                    l[g] = l[g] * alpha[g] + s[g]
                    m[g] = m_new
                for g, d in T.Parallel(G, D):
                    acc[g, d] = acc[g, d] * alpha[g] + s[g] * T.cast(vt[d], "float32")
            for g, d in T.Parallel(G, D):
                Acc[bs, bh * G + g, d] = T.cast(acc[g, d], held)
            for g in T.Parallel(G):
                Max[bs, bh * G + g] = m[g]
                Sum[bs, bh * G + g] = l[g]
        _combine(Acc, Max, Sum, O, HQ, D, dtype, splits, combine_threads)
    return attention_decode


def make_inputs(p: dict, seed: int) -> list:
    """Q, K, V normal (the scores q k / sqrt(D) then have unit scale, a softmax over them
    neither one-hot nor flat)."""
    HK, N, D = p["HK"], p["N"], p["D"]
    HQ = HK * p["groups"]
    return [random_tensor((HQ, D), p["dtype"], seed),
            random_tensor((HK, N, D), p["dtype"], seed + 1),
            random_tensor((HK, N, D), p["dtype"], seed + 2)]


def build(p: dict) -> Built:
    check_params(p)
    combine = p.get("combine_threads", p["threads"])
    held = held_dtype(p)
    if p["bN"] == 1:
        func = lanes_kernel(p["HK"], p["groups"], p["N"], p["D"], p["dtype"], p["splits"],
                            p["threads"], combine, held)
    else:
        func = kernel(p["HK"], p["groups"], p["N"], p["D"], p["dtype"], p["splits"], p["bN"],
                      p["threads"], combine, held)
    N, D, splits = p["N"], p["D"], p["splits"]

    def expected(args):
        order = oracle.contiguous_splits(N, splits)
        return oracle.attention_decode_expected(
            *args, order=order, step=p["bN"], out_dtype=p["dtype"],
            held=None if held == "float32" else held)

    HQ = p["HK"] * p["groups"]
    # Per query head and key: the q k dot (2 D), the exp and the running sum (~4), and the
    # weighted V sum (2 D); the combine is lower order.
    flops = HQ * N * (4 * D + 4)
    return Built(func, [3], lambda seed: make_inputs(p, seed), expected, flops=flops)


@st.composite
def params(draw):
    N = draw(st.integers(1, 96))
    splits = draw(st.integers(1, min(N, 8)))
    while splits > 1 and (splits - 1) * chunk_of(N, splits) >= N:
        splits -= 1
    return {
        "HK": draw(st.integers(1, 2)), "groups": draw(S.sampled_from((1, 2, 4, 3))),
        "N": N, "D": draw(S.sampled_from((32, 64, 16, 8, 24, 128))),
        "dtype": draw(S.dtype(DTYPES)), "splits": splits, "bN": draw(S.tile(BLOCKS)),
        "threads": draw(S.threads(THREADS)),
        "combine_threads": draw(S.threads(THREADS)),
        "partials": draw(S.sampled_from(PARTIALS)),
    }


FAMILY = register(Family("attention_decode", __doc__.splitlines()[0], params, build,
                         tags=("reduce", "workload")))
