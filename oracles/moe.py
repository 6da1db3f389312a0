"""Oracle of the moe family: a Qwen3-MoE style sparse MoE block, in float64, each stage
rounded once to the dtype its kernel stores (so the comparison of every intermediate is
against what that launch should produce from the previous one's stored result).

    logits = x Wr^T                              (M, E)
    probs  = softmax(logits)                     over the E experts
    top-k  the k largest probabilities per token, in decreasing order; ties go to the
           lower expert index (a stable sort of -logits: equal logits give equal probs)
    w      probs of the chosen experts, divided by their sum when `renorm` (Qwen3-MoE's
           norm_topk_prob), else the softmax weights as they are
    routed slot s = m * k + j (token m's j-th expert); per expert e, the slots routed to
           it in increasing order (`slots`, padded with -1) and their count; the experts
           that received any slot, in increasing order, and their counts (`active`,
           `active_rows`: min(E, M k) entries, padded with expert 0 and 0 rows)
    g, u   x_m Wg[e]^T, x_m Wu[e]^T per slot (float32)
    h      silu(g) * u, rounded to the activation dtype
    yd     w * (h Wd[e]^T) per slot (float32)
    y      sum over the token's k slots, rounded to the activation dtype
"""

from __future__ import annotations

import torch

from oracles import bounds as B
from oracles import norm


def route(x, wr, topk: int, renorm: bool):
    """(logits, probs, top expert ids int32 (M, k), weights (M, k)) in float64."""
    logits = x.double() @ wr.double().T
    probs = norm.softmax(logits, dim=1)                      # float64, as logits
    order = torch.sort(-logits, dim=1, stable=True).indices[:, :topk]
    weights = probs.gather(1, order)
    if renorm:
        weights = weights / weights.sum(1, keepdim=True)
    return logits, probs, order.to(torch.int32), weights


def gather(top_idx, experts: int):
    """Per expert: the number of routed slots and their ids (increasing, -1 padded)."""
    tokens = top_idx.shape[0]
    flat = top_idx.flatten().tolist()
    counts = torch.zeros(experts, dtype=torch.int32)
    slots = torch.full((experts, tokens), -1, dtype=torch.int32)
    for s, e in enumerate(flat):
        slots[e, counts[e]] = s
        counts[e] += 1
    return counts, slots


def active(counts, length: int):
    """The experts with a routed slot, increasing, and their row counts, padded to
    `length` with expert 0 and count 0."""
    ids = (counts > 0).nonzero().flatten().to(torch.int32)
    experts = torch.zeros(length, dtype=torch.int32)
    rows = torch.zeros(length, dtype=torch.int32)
    experts[:len(ids)] = ids
    rows[:len(ids)] = counts[ids.long()]
    return experts, rows


def moe(x, wr, wg, wu, wd, topk: int, renorm: bool, fused: bool) -> list:
    """The block's outputs in the family's out_idx order (harness/gen/moe.py)."""
    dtype = x.dtype
    logits, probs, top_idx, weights = route(x, wr, topk, renorm)
    counts, slots = gather(top_idx, wr.shape[0])
    experts, rows = active(counts, min(wr.shape[0], x.shape[0] * topk))
    expert = top_idx.flatten().long()
    xs = x.double().repeat_interleave(topk, 0)                       # (M * k, D)
    g = torch.einsum("sd,sid->si", xs, wg.double()[expert])
    u = torch.einsum("sd,sid->si", xs, wu.double()[expert])
    g32, u32 = g.float(), u.float()
    h = (torch.nn.functional.silu(g32.double()) * u32.double()).to(dtype)
    yd = (weights.flatten()[:, None]
          * torch.einsum("si,sdi->sd", h.double(), wd.double()[expert])).float()
    y = yd.double().view(x.shape[0], topk, -1).sum(1).to(dtype)
    tail = [top_idx, weights.float(), counts, slots, experts, rows]
    if fused:
        return [*tail, h, yd, y]
    return [logits.float(), probs.float(), *tail, g32, u32, h, yd, y]


def _grid(t: torch.Tensor) -> float | None:
    """The smallest power of two g <= 2^12 with t * g all integers, or None."""
    wide = t.double()
    for k in range(13):
        if bool(((wide * 2.0 ** k).frac() == 0).all()):
            return 2.0 ** k
    return None


def _router_logits(x, wr, acc: str) -> B.Bounded:
    """x Wr^T. Exact when x and Wr lie on power-of-two grids whose product grid g keeps
    every sum of |products| at most 2^24 / g (the family's inputs: multiples of 1/2 and
    1/64, |logit| <= D/32): float32 then represents every partial sum in any summation
    order. Otherwise the bound of a dot product over D."""
    gx, gw = _grid(x), _grid(wr)
    if gx is not None and gw is not None:
        worst = float((x.double().abs() @ wr.double().abs().T).max())
        if worst * gx * gw <= 2.0 ** 24:
            return B.exact_input(x.double() @ wr.double().T)
    return B.matmul(B.exact_input(x), B.exact_input(wr).map(lambda t: t.T), acc)


def moe_expected(x, wr, wg, wu, wd, topk: int, renorm: bool, fused: bool) -> list:
    """`moe` as `Expected`s, every launch in float32 as the kernels compute it: the router
    GEMM (its logits exact on the family's inputs, so the choices are the oracle's), the
    softmax over the experts, the routing weights, the gate and up projections (dots over
    D), silu(g) * u stored in the activation dtype, the weighted down projection (dots over
    I) and the sum over the token's k slots. The routing tables are exact."""
    acc, dtype = "float32", x.dtype
    _, _, top_idx, _ = route(x, wr, topk, renorm)
    counts, slots = gather(top_idx, wr.shape[0])
    experts, rows = active(counts, min(wr.shape[0], x.shape[0] * topk))
    logits = _router_logits(x, wr, acc)
    probs = norm.softmax_bounded(logits, acc=acc)
    order = top_idx.long()
    weights = probs.map(lambda t: t.gather(1, order))
    if renorm:
        weights = B.div(weights, B.total(weights, 1, acc, keepdim=True), acc)
    expert = order.flatten()
    xs = B.exact_input(x.repeat_interleave(topk, 0)).map(lambda t: t[:, None, :])

    def project(w, lhs):
        rhs = B.exact_input(w.double()[expert]).map(lambda t: t.transpose(-1, -2))
        return B.matmul(lhs, rhs, acc).map(lambda t: t[:, 0, :])

    g, u = project(wg, xs), project(wu, xs)
    h_pre = B.mul(B.function("silu", g, acc), u, acc)
    h = B.round_to(h_pre, dtype)                         # as the down projection reads it
    down = project(wd, h.map(lambda t: t[:, None, :]))
    yd = B.mul(weights.map(lambda t: t.flatten()[:, None]), down, acc)
    y = B.total(yd.map(lambda t: t.view(x.shape[0], topk, -1)), 1, acc)
    tail = [B.exact(top_idx, top_idx.dtype, "routing table"),
            B.expected(weights, "float32", "routing weights in float32"),
            *(B.exact(t, t.dtype, "routing table") for t in (counts, slots, experts, rows))]
    D, I = x.shape[1], wd.shape[2]
    ends = [B.expected(h_pre, dtype, f"silu(g) * u, dots over D={D}"),
            B.expected(yd, "float32", f"weighted down projection, dots over I={I}"),
            B.expected(y, dtype, f"sum of {topk} slot(s)")]
    if fused:
        return [*tail, *ends]
    return [B.expected(logits, "float32", f"router logits, dot over D={D}"),
            B.expected(probs, "float32", "softmax over the experts"), *tail,
            B.expected(g, "float32", f"gate projection, dot over D={D}"),
            B.expected(u, "float32", f"up projection, dot over D={D}"), *ends]
