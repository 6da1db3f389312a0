"""MLX's Gated DeltaNet decode kernel (gated_delta_update.h, `gated_delta_seq`) as the peer
of the `gdn_decode` family.

Launch, from the header itself (its comment above `gated_delta_seq`; the host code that
dispatches it is newer than the MLX source we read, 846d176): threads (32, Dv, B * Hv) in
threadgroups of (32, 4, 1), so threadgroups (1, Dv / 4, B * Hv): a simdgroup per value
column, its 32 lanes splitting Dk (Dk / 32 state floats a lane). Template <InT, Dk, Dv,
Hk, Hv, Ckpt>; function constant 200 (save_state) false, so buffer 9 (the checkpoint cache)
is not bound and Ckpt is unused. Buffers 0 q [B, T, Hk, Dk], 1 k, 2 v [B, T, Hv, Dv],
3 state_in [B, Hv, Dv, Dk] float, 4 g [B, T, Hv], 5 beta [B, T, Hv], 6 y [B, T, Hv, Dv],
7 state_out, 8 T. Value head h uses key head h / (Hv / Hk), as the case's GQA does.

Where the formats differ, and what the peer does about it:
- MLX's kernel takes q and k already L2-normalized and q scaled by 1/sqrt(Dk) (mlx-lm does
  that in separate ops before the call); the case's kernel normalizes them itself. The peer
  gets them normalized on the host (in float64, then rounded to the input type): that work
  is not in its counters, and its output and float32 state are then built from q and k
  rounded to the input type, which the oracle's bounds take in (`gdn_decode_expected(...,
  held=dtype)`: the normalized q and k rounded before the recurrence).
- g is the decay factor itself (the case's kernel takes log-decays and computes exp(g)) and
  g and beta are in the input type (the case's are float32): the peer gets exp(g) and beta
  rounded to the input type, and the oracle is evaluated on those rounded values (as log
  of the rounded decay), the same oracle.
- the state is [Hv, Dv, Dk] (the case's [Hv, Dk, Dv]): passed transposed, and the
  output state transposed back before the comparison.
"""

from __future__ import annotations

import numpy as np
import torch

from harness.bench.peers import NotApplicable, PeerLaunch

MSL_TYPES = {"float32": "float", "float16": "half", "bfloat16": "bfloat16_t"}
THREADS_Y = 4                  # threadgroup (32, 4, 1): value columns per threadgroup


def gdn_decode_expected(*args, **kwargs):
    from oracles.gdn import gdn_decode_expected as expected
    return expected(*args, **kwargs)


def _l2norm(x: torch.Tensor) -> torch.Tensor:
    from oracles.gdn import l2norm
    return l2norm(x.double())


def launch(p: dict, inputs: list, outputs: list) -> PeerLaunch:
    tokens, HK, DK, DV, dtype = p["tokens"], p["HK"], p["DK"], p["DV"], p["dtype"]
    HV = HK * p["groups"]
    if DK % 32 or DV % THREADS_Y:
        raise NotApplicable(f"DK={DK}, DV={DV}: MLX's gated_delta_seq splits Dk over 32 lanes "
                            f"and Dv over {THREADS_Y} simdgroups")
    q, k, v, g, beta, s0 = inputs
    o, s1 = outputs
    t = getattr(torch, dtype)
    qn = (_l2norm(q) * DK ** -0.5).to(t)
    kn = _l2norm(k).to(t)
    decay = g.double().exp().to(t)                      # MLX's g: the decay factor
    beta_t = beta.to(t)
    state_in = s0.transpose(1, 2).contiguous()          # [Hv, Dv, Dk]
    state_out = torch.full_like(state_in, float("nan"))
    y = torch.full_like(o, float("nan"))
    unused = np.zeros(4, np.float32)                    # buffer 9: not bound (save_state)
    T_ = MSL_TYPES[dtype]
    targs = f"{T_}, {DK}, {DV}, {HK}, {HV}, 1"
    name = f"gated_delta_seq_{dtype}_{DK}_{DV}_{HK}_{HV}"

    def finish(_outputs):
        return [y, state_out.transpose(1, 2).contiguous()]

    oracle_inputs = [q, k, v, decay.double().log().float(), beta_t.float(), s0]
    return PeerLaunch(
        headers=("gated_delta_update.h",),
        instantiation=f'template [[host_name("{name}")]] [[kernel]] decltype('
                      f"gated_delta_seq<{targs}>) gated_delta_seq<{targs}>;\n",
        kernel=name, grid=(1, DV // THREADS_Y, HV), threadgroup=(32, THREADS_Y, 1),
        buffers=[qn, kn, v, state_in, decay, beta_t, y, state_out,
                 np.array([tokens], np.int32), unused],
        outputs=[y, state_out], finish=finish, oracle_inputs=oracle_inputs,
        expected=lambda: gdn_decode_expected(*oracle_inputs, out_dtype=dtype, held=dtype),
        function_constants={200: False},
        host_code="mlx/backend/metal/kernels/gated_delta_update.h: the launch in its comment",
        geometry=f"gated_delta_seq: a simdgroup per value column, {DK // 32} state floats a "
                 f"lane, {THREADS_Y} columns a threadgroup of {32 * THREADS_Y} threads",
        formats=f"q, k normalized (q scaled) on the host, not in the peer's counters, and "
                f"rounded to {dtype} (the oracle's bounds take that rounding: held={dtype}); "
                "g as the decay factor exp(g) and beta in the input type, the oracle evaluated "
                "on those rounded values; state passed as [Hv, Dv, Dk]",
        # float state[Dk / 32]
        local_arrays={"state": 4 * (DK // 32)})
