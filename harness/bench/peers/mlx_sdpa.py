"""MLX's decode attention (sdpa_vector.h: `sdpa_vector`, `sdpa_vector_2pass_1` and
`sdpa_vector_2pass_2`) as the peer of the `attention_decode` family: one query token,
q [B=1, HQ, 1, D], k and v [1, HK, N, D] row-contiguous, scale 1/sqrt(D), no mask, no sinks.

Which kernel, from MLX's host code, mlx/backend/metal/scaled_dot_product_attention.cpp
(MLX 846d176), ScaledDotProductAttention::eval_gpu, vector mode (query length <= 8; head
dims 64, 96, 128, 192, 256 with the value head dim equal, `has_fused_kernel`): the 2-pass
kernels when the architecture's last letter is 'd' or 's' and N >= 1024, or when the KV heads
are fewer than the query heads (GQA) and N >= 4096; `sdpa_vector` otherwise. The peer takes
a base Apple GPU (M1-M4, suffix 'g'), as the GEMM peer does.

`sdpa_vector_2pass` (same file):
- `blocks` for 'g': 64 when n_simds = gqa_factor * query length >= 4, else 32 ('d' and 's'
  take 128-1024 by N; MLX_SDPA_BLOCKS unset). The `_gqa` kernel only for N >= 8192.
- pass 1, `sdpa_vector_2pass_1_<type>_<D>_<D>` (kernels/scaled_dot_product_attention.metal
  instantiates `sdpa_vector_2pass_1<T, D, V>`, TK left at its default, 4 keys per load
  batch in the wheel's header): threadgroups (HK, B, blocks) of (32, gqa_factor, query
  length) threads: a simdgroup per query head of the group, its 32 lanes D / 32 elements
  each, block b reading keys b, b + blocks, ...; buffers 0 q, 1 k, 2 v, 3 partial outputs
  [B, HQ, 1, blocks, D] in the input type, 4 sums, 5 maxs [B, HQ, 1, blocks] float, 7 N,
  8 k_head_stride (size_t, N * D), 9 k_seq_stride (D), 10 v_head_stride, 11 v_seq_stride,
  12 scale (float); buffer 6 is not set by the host (an unused placeholder here). Function
  constants 20 has_mask, 21 query_transposed, 22 do_causal, 23 bool_mask, 24 float_mask,
  25 has_sinks all false, 26 blocks.
- pass 2, `sdpa_vector_2pass_2_<type>_<D>` (`sdpa_vector_2pass_2<T, D>`): threadgroups
  (B * HQ, query length, 1) of 1024 threads; buffers 0 partials, 1 sums, 2 maxs, 3 out,
  4 blocks (int).

`sdpa_vector` (`sdpa_vector_<type>_<D>_<D>`): threadgroups (B * HQ, query length, 1) of
1024 threads (32 simdgroups, simdgroup s reading keys s, s + 32, ...); buffers 0 q, 1 k,
2 v, 3 out, 4 gqa_factor, 5 N (int), 6-9 the strides (size_t), 10 scale; function
constants 20-25 as above.

Formats: the same layout and inputs as the case's kernel; MLX's 2-pass kernel stores its
per-block partial outputs in the input type (the case's kernel keeps float32), so the
oracle is evaluated with the split outputs held in that type (`held`), the keys dealt to
splits as MLX deals them (strided), one key per online-softmax step.
"""

from __future__ import annotations

import numpy as np
import torch

from harness.bench.peers import NotApplicable, PeerLaunch

HOST = "mlx/backend/metal/scaled_dot_product_attention.cpp"
MSL_TYPES = {"float32": "float", "float16": "half", "bfloat16": "bfloat16_t"}
TYPE_NAMES = {"float32": "float", "float16": "float16", "bfloat16": "bfloat16"}
HEAD_DIMS = (64, 96, 128, 192, 256)           # has_fused_kernel, vector mode, D == V
SIMD = 32                                     # BD (lanes over D) and BN (sdpa_vector)
TK = 4                                        # sdpa_vector_2pass_1's default
TWO_PASS_N = 4096                             # eval_gpu: GQA and N >= 4096 -> 2 passes
ONE_PASS_THREADS = 1024
CONSTANTS = {20: False, 21: False, 22: False, 23: False, 24: False, 25: False}


def blocks_for(gqa_factor: int, query_len: int = 1) -> int:
    """sdpa_vector_2pass's `blocks` on a base GPU (architecture suffix 'g')."""
    return 64 if gqa_factor * query_len >= 4 else 32


def _expected(inputs, order, held, dtype):
    from oracles.attention import attention_decode_expected
    return attention_decode_expected(*inputs, order=order, step=1, out_dtype=dtype,
                                     held=held)


def launch(p: dict, inputs: list, outputs: list):
    from oracles.attention import strided_splits

    HK, G, N, D, dtype = p["HK"], p["groups"], p["N"], p["D"], p["dtype"]
    HQ = HK * G
    if D not in HEAD_DIMS:
        raise NotApplicable(f"D={D}: MLX's vector attention kernels take head dims "
                            f"{', '.join(map(str, HEAD_DIMS))}")
    q, k, v = inputs
    (o,) = outputs
    T_, name = MSL_TYPES[dtype], TYPE_NAMES[dtype]
    scale = np.array([D ** -0.5], np.float32)
    strides = [np.array([s], np.uint64) for s in (N * D, D, N * D, D)]
    if not (HK < HQ and N >= TWO_PASS_N):
        kname = f"sdpa_vector_{name}_{D}_{D}"
        targs = f"{T_}, {D}, {D}"
        return PeerLaunch(
            headers=("utils.h", "sdpa_vector.h"),
            instantiation=f'template [[host_name("{kname}")]] [[kernel]] decltype('
                          f"sdpa_vector<{targs}>) sdpa_vector<{targs}>;\n",
            kernel=kname, grid=(HQ, 1, 1), threadgroup=(ONE_PASS_THREADS, 1, 1),
            buffers=[q, k, v, o, np.array([G], np.int32), np.array([N], np.int32),
                     *strides, scale],
            outputs=[o], function_constants=dict(CONSTANTS),
            expected=lambda: _expected(inputs, strided_splits(N, SIMD), None, dtype),
            host_code=f"{HOST}: sdpa_vector (eval_gpu: no GQA or N < {TWO_PASS_N})",
            geometry=f"sdpa_vector: a threadgroup of {ONE_PASS_THREADS} threads per query "
                     f"head, simdgroup s reading keys s, s + 32, ...",
            # float q[D / 32], k[D / 32], o[D / 32]
            local_arrays={"q": 4 * D // SIMD, "k": 4 * D // SIMD, "o": 4 * D // SIMD})
    blocks = blocks_for(G)
    partials = torch.full((HQ, blocks, D), float("nan"), dtype=q.dtype)
    sums = torch.full((HQ, blocks), float("nan"), dtype=torch.float32)
    maxs = torch.full((HQ, blocks), float("nan"), dtype=torch.float32)
    unused = np.zeros(4, np.float32)                   # buffer 6: not set by the host
    k1 = f"sdpa_vector_2pass_1_{name}_{D}_{D}"
    t1 = f"{T_}, {D}, {D}"
    k2 = f"sdpa_vector_2pass_2_{name}_{D}"
    t2 = f"{T_}, {D}"
    headers = ("utils.h", "sdpa_vector.h")
    esize = q.element_size()
    first = PeerLaunch(
        headers=headers,
        instantiation=f'template [[host_name("{k1}")]] [[kernel]] decltype('
                      f"sdpa_vector_2pass_1<{t1}>) sdpa_vector_2pass_1<{t1}>;\n",
        kernel=k1, grid=(HK, 1, blocks), threadgroup=(SIMD, G, 1),
        buffers=[q, k, v, partials, sums, maxs, unused, np.array([N], np.int32), *strides,
                 scale],
        outputs=[partials, sums, maxs], function_constants={**CONSTANTS, 26: blocks},
        host_code=f"{HOST}: sdpa_vector_2pass (eval_gpu: GQA, N >= {TWO_PASS_N})",
        geometry=f"sdpa_vector_2pass_1: {blocks} blocks x {HK} KV heads, a simdgroup per "
                 f"query head of the group ({SIMD} x {G} threads), block b reading keys "
                 f"b, b + {blocks}, ...",
        formats=f"the per-block partial outputs stored in {dtype} (the oracle holds them so)",
        # float q[D / 32], o[D / 32]; T k_reg[TK][D / 32], v_reg[TK][D / 32]
        local_arrays={"q": 4 * D // SIMD, "o": 4 * D // SIMD,
                      "k_reg": TK * esize * D // SIMD, "v_reg": TK * esize * D // SIMD})
    second = PeerLaunch(
        headers=headers,
        instantiation=f'template [[host_name("{k2}")]] [[kernel]] decltype('
                      f"sdpa_vector_2pass_2<{t2}>) sdpa_vector_2pass_2<{t2}>;\n",
        kernel=k2, grid=(HQ, 1, 1), threadgroup=(ONE_PASS_THREADS, 1, 1),
        buffers=[partials, sums, maxs, o, np.array([blocks], np.int32)], outputs=[o],
        # the host fetches this kernel without function constants (`blocks` is buffer 4)
        expected=lambda: _expected(inputs, strided_splits(N, blocks), dtype, dtype),
        host_code=f"{HOST}: sdpa_vector_2pass, the final pass",
        geometry=f"sdpa_vector_2pass_2: a threadgroup of {ONE_PASS_THREADS} threads per "
                 f"query head combining the {blocks} blocks",
        # float o[D / 32]
        local_arrays={"o": 4 * D // SIMD})
    return [first, second]
