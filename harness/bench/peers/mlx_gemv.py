"""MLX's GEMV kernels (gemv.h) as the peer of the `gemv` family: y[M, N] = x[M, K] @ w[N, K]^T.

Which kernel and how it is launched are MLX's host code, mlx/backend/metal/matmul.cpp
(MLX 846d176; the headers run are the mlx-metal wheel's, harness/bench/peers/mlx_wheel.py):

- `Matmul::eval_gpu` sends `a[M, K] @ b^T` with b transposed and 2 <= M to `gemv_wide`
  first; `gemv_wide_config` takes it for float16 / bfloat16 outputs, K % 4 == 0, at most 3
  passes of <= 5 vectors (M <= 15) and only on Apple GPU generation >= 15 (M3 and later;
  earlier chips run MLX's steel GEMM for these shapes). Its plan: passes = (M + 4) / 5,
  vecs_per_tg = ceil(M / passes), k_lanes = 32 when passes == 1 or N <= 64 else 16,
  grid_x = 1 when N >= 65536 else passes; threadgroup (32, k_lanes / 8, 1), grid
  (grid_x, ceil(N / 4), 1); function constants 0 (has_batch) and 1 (do_axpby) false;
  buffers 0 mat, 1 in_vec, 3 out, 4 K, 5 N, 6 M, 7 mat_ld, 8 vec_ld, 11 batch_ndim,
  12 batch_shape, 13 vec batch strides, 14 mat batch strides (2, 9, 10, 15-17 are bound
  only with do_axpby).
- M == 1 goes to `gemv_axbpy` with the matrix not transposed (`gemv_<T>_bm.._bn.._sm..`
  of kernels/gemv.metal): bm = 8 if N >= 4096 else 4, sm = 1, sn = 32, bn = 1, tm = 4
  (1 when N < 4), tn = 4; K <= 64: bm = 1, sm = 8, sn = 4; K >= 16 N: bm = 1, bn = 8.
  Threadgroup (32, bn, bm), grid (ceil(N / (bm sm tm)), 1, 1); buffers 0 mat, 1 vec,
  3 out, 4 K, 5 N, 6 mat_ld, 9 batch_ndim, 10 batch_shape, 11/12 batch strides.
"""

from __future__ import annotations

import numpy as np
import torch

from harness.bench.peers import NotApplicable, PeerLaunch

HOST = "mlx/backend/metal/matmul.cpp"
MSL_TYPES = {"float32": "float", "float16": "half", "bfloat16": "bfloat16_t"}


def _i32(v: int) -> np.ndarray:
    return np.array([v], np.int32)


def _i64(*v: int) -> np.ndarray:
    return np.array(v, np.int64)


def launch(p: dict, inputs: list, outputs: list) -> PeerLaunch:
    M, N, K, dtype = p["M"], p["N"], p["K"], p["dtype"]
    if p.get("out_dtype", dtype) != dtype:
        raise NotApplicable(f"MLX's gemv writes its input type; the case writes "
                            f"{p['out_dtype']} from {dtype}")
    x, w = inputs
    (y,) = outputs
    t = MSL_TYPES[dtype]
    if M == 1:
        return _gemv(N, K, t, x, w, y)
    if dtype not in ("float16", "bfloat16") or K % 4 or (M + 4) // 5 > 3:
        raise NotApplicable(f"M={M}, K={K}, {dtype}: MLX's gemv_wide takes 2 <= M <= 15, "
                            "K % 4 == 0, float16/bfloat16 (matmul.cpp gemv_wide_config); "
                            "its steel GEMM would run")
    passes = (M + 4) // 5
    vecs = -(-M // passes)
    k_lanes = 32 if passes == 1 or N <= 64 else 16
    grid_x = 1 if N >= 65536 else passes
    name = f"gemv_wide_{dtype}_nv{vecs}_kl{k_lanes}"
    unused = torch.zeros(1, dtype=x.dtype)              # bias, alpha, beta: not bound
    return PeerLaunch(
        headers=("gemv.h",),
        instantiation=f'template [[host_name("{name}")]] [[kernel]] decltype('
                      f"gemv_wide<{t}, {vecs}, {k_lanes}>) gemv_wide<{t}, {vecs}, {k_lanes}>;\n",
        kernel=name, grid=(grid_x, -(-N // 4), 1), threadgroup=(32, k_lanes // 8, 1),
        buffers=[w, x, unused, y, _i32(K), _i32(N), _i32(M), _i32(K), _i32(K), unused,
                 unused, _i32(1), _i32(1), _i64(0), _i64(0)],
        outputs=[y], function_constants={0: False, 1: False},
        # GemvWide::run: int x_off4[vecs], AccT result[vecs], vec<AccT, 4> wf[unroll = 8]
        local_arrays={"x_off4": 4 * vecs, "result": 4 * vecs, "wf": 16 * 8},
        host_code=f"{HOST}: gemv_wide_config, gemv_wide",
        geometry=f"gemv_wide: {vecs} vectors a pass, {k_lanes} lanes split K, "
                 f"{32 // k_lanes} rows a simdgroup; grid ({grid_x}, {-(-N // 4)}), "
                 f"{32 * k_lanes // 8} threads (MLX runs it on M3 and later)")


def _gemv(N: int, K: int, t: str, x, w, y) -> PeerLaunch:
    bm, bn, sm, sn, tm, tn = (8 if N >= 4096 else 4), 1, 1, 32, (1 if N < 4 else 4), 4
    if K <= 64:
        bm, sm, sn = 1, 8, 4
    elif K >= 16 * N:
        bm, bn = 1, 8
    per_group = bm * sm * tm
    dtype = [k for k, v in MSL_TYPES.items() if v == t][0]
    name = f"gemv_{dtype}_bm{bm}_bn{bn}_sm{sm}_sn{sn}_tm{tm}_tn{tn}_nc0_axpby0"
    args = f"{t}, {bm}, {bn}, {sm}, {sn}, {tm}, {tn}, false, false"
    zero = torch.zeros(1, dtype=x.dtype)
    f32 = np.zeros(1, np.float32)
    return PeerLaunch(
        headers=("gemv.h",),
        instantiation=f'template [[host_name("{name}")]] [[kernel]] decltype('
                      f"gemv<{args}>) gemv<{args}>;\n",
        kernel=name, grid=(-(-N // per_group), 1, 1), threadgroup=(32, bn, bm),
        buffers=[w, x, zero, y, _i32(K), _i32(N), _i32(K), f32, f32, _i32(1), _i32(1),
                 _i64(0), _i64(0), _i64(0), _i32(0)],
        outputs=[y], host_code=f"{HOST}: gemv_axbpy",
        # GEMVKernel::run: AccT result[TM], T inter[TN], AccT v_coeff[TN]
        local_arrays={"result": 4 * tm, "inter": x.element_size() * tn, "v_coeff": 4 * tn},
        geometry=f"gemv bm{bm} bn{bn} sm{sm} sn{sn} tm{tm} tn{tn}: {per_group} rows a "
                 f"threadgroup of {32 * bn * bm} threads")
