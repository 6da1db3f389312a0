"""Oracle of the attention_decode family: scaled dot-product attention of one query token
over a KV cache with grouped-query heads, in float64, and the forward error bounds of the
split-K online-softmax computation the kernels perform.

Query head h reads KV head h // groups (groups = HQ / HK):

    o_h = sum_n softmax_n(q_h . k_n / sqrt(D)) v_n

`attention_decode_expected` mirrors a split-K ("flash decoding") kernel step by step, in
float32: the keys are dealt to splits (`order`: per split, the key indices in the order the
split reads them, -1 for none), each split reads `step` keys at a time and keeps the online
softmax state per query head (running max m, running sum l, unnormalized output acc):

    q = q_h * scale                                   (one rounding)
    s_j = q . k_j                                     (dot over D, float32 products)
    m' = max(m, max_j s_j), a = exp(m - m')           (a = 0 at the first step)
    p_j = exp(s_j - m')                               (0 for a key the split does not hold)
    l = l a + sum_j p_j,  acc = acc a + sum_j p_j v_j
    then over the splits: M = max_s m_s, w_s = exp(m_s - M),
    o = (sum_s w_s acc_s) / (sum_s w_s l_s), stored in the output dtype.

`held`: the dtype the splits' acc are stored in between the two launches (MLX's 2-pass
kernel keeps its partial outputs in the input type; the generated kernel in float32).
"""

from __future__ import annotations

import torch

from oracles import bounds as B

ACC = "float32"


def attention_decode(q, k, v, scale=None, out_dtype=None):
    """Plain float64 reference: q (HQ, D), k and v (HK, N, D) -> o (HQ, D)."""
    hq, d = q.shape
    groups = hq // k.shape[0]
    scale = d ** -0.5 if scale is None else scale
    kk = k.double().repeat_interleave(groups, 0)
    vv = v.double().repeat_interleave(groups, 0)
    scores = torch.einsum("hd,hnd->hn", q.double(), kk) * scale
    out = torch.einsum("hn,hnd->hd", torch.softmax(scores, -1), vv)
    return out.to(out_dtype or q.dtype)


def contiguous_splits(N: int, splits: int) -> torch.Tensor:
    """Split s reads keys [s * c, min((s + 1) * c, N)), c = ceil(N / splits), in order:
    (splits, c), -1 past N (the generated kernel's assignment)."""
    c = -(-N // splits)
    idx = torch.arange(splits * c).reshape(splits, c)
    return torch.where(idx < N, idx, torch.full_like(idx, -1))


def strided_splits(N: int, splits: int) -> torch.Tensor:
    """Split b reads keys b, b + splits, b + 2 splits, ... (MLX's sdpa_vector_2pass_1):
    (splits, ceil(N / splits)), -1 past N."""
    c = -(-N // splits)
    idx = torch.arange(c)[None, :] * splits + torch.arange(splits)[:, None]
    return torch.where(idx < N, idx, torch.full_like(idx, -1))


def _expand(b: B.Bounded, *dims) -> B.Bounded:
    return b.map(lambda t: t.reshape(*t.shape, *([1] * len(dims))))


def attention_decode_expected(q, k, v, order: torch.Tensor, step: int, out_dtype,
                              scale: float | None = None, held=None) -> list:
    """[Expected o (HQ, D)] for a split-K decode kernel that deals keys to splits as
    `order` (S, L) says and reads them `step` at a time (module docstring)."""
    hq, d = q.shape
    hk, n, _ = k.shape
    groups = hq // hk
    scale = d ** -0.5 if scale is None else scale
    order = order[(order >= 0).any(1)]                   # a split without keys adds nothing
    splits, length = order.shape
    pad = -length % step
    if pad:
        order = torch.cat([order, torch.full((splits, pad), -1, dtype=order.dtype)], 1)
    heads = torch.arange(hq) // groups
    kd, vd = k.double(), v.double()
    qs = B.mul(B.exact_input(q), scale, ACC).map(lambda t: t[:, None, None, :])  # (HQ,1,1,D)
    m = l = acc = None
    for t0 in range(0, order.shape[1], step):
        idx = order[:, t0:t0 + step]                     # (S, step)
        valid = (idx >= 0)[None].expand(hq, -1, -1)      # (HQ, S, step)
        safe = idx.clamp(min=0)
        rows = (heads[:, None, None], safe[None])
        kt = B.exact_input(kd[rows])                     # (HQ, S, step, D)
        vt = B.exact_input(vd[rows])
        s = B.matmul(qs, kt.map(lambda x: x.transpose(-1, -2)), ACC, products=ACC)
        s = s.map(lambda x: x[:, :, 0, :])               # (HQ, S, step)
        blk = B.amax(B.where(valid, s, B.const(float("-inf"))), -1)
        m_new = blk if m is None else B.maximum(m, blk)
        p = B.function("exp", B.sub(s, _expand(m_new, 1), ACC), ACC)
        p = B.where(valid, p, B.const(0.0))
        psum = B.total(p, -1, ACC)
        pv = B.matmul(p.map(lambda x: x[:, :, None, :]), vt, ACC, products=ACC)
        pv = pv.map(lambda x: x[:, :, 0, :])             # (HQ, S, D)
        if m is None:
            l, acc = psum, pv
        else:
            alpha = B.function("exp", B.sub(m, m_new, ACC), ACC)
            l = B.add(B.mul(l, alpha, ACC), psum, ACC)
            acc = B.add(B.mul(acc, _expand(alpha, 1), ACC), pv, ACC)
        m = m_new
    if held is not None:
        acc = B.round_to(acc, held)
    top = B.amax(m, -1, keepdim=True)                     # (HQ, 1)
    w = B.function("exp", B.sub(m, top, ACC), ACC)        # (HQ, S)
    num = B.matmul(w.map(lambda x: x[:, None, :]), acc, ACC, products=ACC)
    num = num.map(lambda x: x[:, 0, :])                   # (HQ, D)
    den = B.total(B.mul(w, l, ACC), -1, ACC, keepdim=True)
    out = B.div(num, den, ACC)
    how = (f"decode attention over N={n} keys in {splits} splits of {length}, "
           f"{step} key(s) a step, online softmax in float32"
           + (f", split outputs held in {held}" if held else ""))
    return [B.expected(out, out_dtype, how)]
