"""Oracle of the gdn_decode family: the gated delta rule decode step of Gated DeltaNet, as
Qwen3-Next runs it (flash-linear-attention's recurrent form with the query/key L2 norm
done in the kernel), in float64, rounded once to the output dtypes.

Per value head h (query/key head h // groups, as the model shares q/k heads over groups of
value heads), a state S of d_k x d_v, and per token t, in order:

    k = k_t / sqrt(sum(k_t^2) + eps)                 (L2 norm, eps 1e-6)
    q = q_t / sqrt(sum(q_t^2) + eps) / sqrt(d_k)     (L2 norm, then the 1/sqrt(d_k) scale)
    S = S * exp(g_t)                                  (decay; g_t <= 0 is the log gate)
    S = S + k^T (beta_t * (v_t - k S))                (delta rule: k S is the state's
                                                       current value for key k)
    o_t = q S                                         (a d_v row: S^T q as a column)

S is indexed [d_k, d_v] as in flash-linear-attention's `h` (B, H, K, V).
"""

from __future__ import annotations

import torch

from oracles import bounds as B

EPS = 1e-6


def l2norm(x, eps: float = EPS):
    return x * torch.rsqrt((x * x).sum(-1, keepdim=True) + eps)


def gdn_decode(q, k, v, g, beta, state, out_dtype) -> list:
    """q, k: (T, HK, DK); v: (T, HV, DV); g, beta: (T, HV); state: (HV, DK, DV) float32.
    Returns [o (T, HV, DV) in `out_dtype`, the final state (HV, DK, DV) float32]."""
    tokens, hk, dk = q.shape
    groups = v.shape[1] // hk
    q = l2norm(q.double().repeat_interleave(groups, 1)) * dk ** -0.5
    k = l2norm(k.double().repeat_interleave(groups, 1))
    v, g, beta, s = v.double(), g.double(), beta.double(), state.double()
    outs = []
    for t in range(tokens):
        s = s * g[t].exp()[:, None, None]
        kv = torch.einsum("hk,hkv->hv", k[t], s)
        delta = (v[t] - kv) * beta[t][:, None]
        s = s + k[t][:, :, None] * delta[:, None, :]
        outs.append(torch.einsum("hk,hkv->hv", q[t], s))
    return [torch.stack(outs).to(getattr(torch, out_dtype)), s.to(torch.float32)]


def _l2norm_bounded(x: B.Bounded, eps: float, acc: str) -> B.Bounded:
    norm = B.total(B.mul(x, x, acc), -1, acc, keepdim=True)
    return B.mul(x, B.function("rsqrt", B.add(norm, eps, acc), acc), acc)


def _row_times_state(row: B.Bounded, s: B.Bounded, acc: str) -> B.Bounded:
    """(h, k) row times the (h, k, v) state: per head a dot over k, accumulated in acc."""
    return B.matmul(row.map(lambda t: t[:, None, :]), s, acc).map(lambda t: t[:, 0, :])


def gdn_decode_expected(q, k, v, g, beta, state, out_dtype, held=None) -> list:
    """`gdn_decode` as `Expected`s: every step in float32, as the kernel computes it (the
    norms, the decay exp(g), the dot products over d_k, the state update), the outputs
    rounded once to `out_dtype`, the final state kept in float32. The state's error is
    carried from token to token. `held`: a dtype the normalized (and scaled) q and k are
    stored in before the recurrence (MLX's format: normalized on the host)."""
    acc = "float32"
    tokens, hk, dk = q.shape
    groups = v.shape[1] // hk
    qn = _l2norm_bounded(B.exact_input(q.repeat_interleave(groups, 1)), EPS, acc)
    qn = B.mul(qn, dk ** -0.5, acc)
    kn = _l2norm_bounded(B.exact_input(k.repeat_interleave(groups, 1)), EPS, acc)
    if held is not None:
        qn, kn = B.round_to(qn, held), B.round_to(kn, held)
    vv, gg, bb = B.exact_input(v), B.exact_input(g), B.exact_input(beta)
    decay = B.function("exp", gg, acc)
    s = B.exact_input(state)
    outs = []
    for t in range(tokens):
        s = B.mul(s, decay[t].map(lambda x: x[:, None, None]), acc)
        kv = _row_times_state(kn[t], s, acc)
        delta = B.mul(bb[t].map(lambda x: x[:, None]), B.sub(vv[t], kv, acc), acc)
        update = B.mul(kn[t].map(lambda x: x[:, :, None]), delta.map(lambda x: x[:, None, :]),
                       acc)
        s = B.add(s, update, acc)
        outs.append(_row_times_state(qn[t], s, acc))
    o = B.Bounded(*(torch.stack([getattr(x, f) for x in outs]) for f in ("value", "det", "stat")),
                  max(x.u for x in outs))
    how = f"gated delta rule over {tokens} token(s), d_k={dk}, in float32"
    return [B.expected(o, out_dtype, how), B.expected(s, "float32", how)]
