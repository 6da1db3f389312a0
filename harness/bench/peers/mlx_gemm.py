"""MLX's steel GEMM (steel/gemm/, kernels/steel_gemm_fused.h and steel_gemm_splitk.h) as
the peer of the `gemm` family: C[M, N] = A @ B with A[M, K] (or [K, M], trans_A) and
B[K, N] (or [N, K], trans_B).

Which kernel and how it is launched are MLX's host code, mlx/backend/metal/matmul.cpp
(MLX 846d176), `steel_matmul_axpby` on a base Apple GPU without neural accelerators (M1-M4,
architecture suffix 'g'; no NAX path):

- split-K (`steel_gemm_splitk_axpby`) when ceil(M/16) * ceil(N/16) <= 1024, K / 16 >= 8
  and K >= max(M, N): bm = 16 if M < 40 else 32, bn = 16 if N < 40 else 32, bk = 16,
  wm = wn = 2; partitions = min(max(2, next_pow2((K/16) / (ceil(M/32) ceil(N/32)))), 32);
  `gemm_splitk<T, float, ...>` over threadgroups (ceil(N/bn), ceil(M/bm), partitions) of
  (32, wn, wm) writes float partial sums [partitions, M, N] (buffers 0 A, 1 B, 2 C_split,
  3 GEMMSpiltKParams), then `gemm_splitk_accum<float, T>` sums them with one thread per
  output, threads (N, M) in groups of get_block_dims(N, M, 1) (mlx/backend/common/
  utils.cpp: powers of two taken in turn up to 1024 threads); buffers 0 C_split, 1 D,
  2 partitions, 3 partition stride M * N, 4 ldd = N.
- otherwise `steel_matmul_regular_axpby`: GEMM_TPARAM_MACRO for 'g': nt (A not
  transposed, B transposed) bm 64, bn 32, bk 32, wm 2, wn 2; other half/bfloat layouts
  bm 64, bn 64, bk 16, wm 1, wn 2; float32 nt/nn the defaults bm 64, bn 64, bk 16, wm 2,
  wn 2. `gemm<T, bm, bn, bk, wm, wn, trans_a, trans_b, float>` (steel_gemm_fused.metal's
  instantiations) over threadgroups (ceil(N/bn), ceil(M/bm), 1) of (32, wn, wm), swizzle
  0; function constants 10 has_batch, 100 use_out_source, 110 do_axpby false, 200/201/202
  align_M/N/K = M % bm == 0, ...; buffers 0 A, 1 B, 3 D, 4 GEMMParams.

On M3 and later MLX routes a few-row (2 <= M <= 15) f16/bf16 product with B transposed to
gemv_wide instead (the `gemv` family's peer, mlx_gemv.py); the steel GEMM is its kernel
for these shapes on M1 and M2.
"""

from __future__ import annotations

import numpy as np
import torch

from harness.bench.peers import NotApplicable, PeerLaunch

HOST = "mlx/backend/metal/matmul.cpp"
MSL_TYPES = {"float32": "float", "float16": "half", "bfloat16": "bfloat16_t"}
HEADERS = ("utils.h", "steel/gemm/gemm.h")
GEMM_PARAMS = np.dtype([(n, "i4") for n in ("M", "N", "K", "lda", "ldb", "ldd", "tiles_n",
                                            "tiles_m")]
                       + [(n, "i8") for n in ("batch_stride_a", "batch_stride_b",
                                              "batch_stride_d")]
                       + [(n, "i4") for n in ("swizzle_log", "gemm_k_iterations_aligned",
                                              "batch_ndim")], align=True)
SPLITK_PARAMS = np.dtype([(n, "i4") for n in (
    "M", "N", "K", "lda", "ldb", "ldc", "tiles_n", "tiles_m", "split_k_partitions",
    "split_k_partition_stride", "split_k_partition_size", "swizzle_log",
    "gemm_k_iterations_aligned")], align=True)


def _next_pow2(n: int) -> int:
    return 1 if n <= 1 else 1 << (n - 1).bit_length()


def _block_dims(dim0: int, dim1: int, dim2: int, pow2: int = 10) -> tuple:
    """mlx/backend/common/utils.cpp get_block_dims_common: powers of two for each dim in
    turn while the dim holds them, up to 2^10 threads."""
    pows, total = [0, 0, 0], 0
    while True:
        before = total
        for i, dim in enumerate((dim0, dim1, dim2)):
            if dim >= 1 << (pows[i] + 1):
                pows[i] += 1
                total += 1
            if total == 10:
                return tuple(1 << p for p in pows)
        if total == before or total == pow2:
            return tuple(1 << p for p in pows)


def _arrays(bm: int, bn: int, wm: int, wn: int) -> dict:
    # steel/gemm/mma.h BlockMMA: float Atile (TM x 1), Btile (1 x TN), Ctile (TM x TN)
    # fragments of 2 elements; the loaders' edge temporaries are not counted
    tm, tn = bm // (8 * wm), bn // (8 * wn)
    return {"Atile": 8 * tm, "Btile": 8 * tn, "Ctile": 8 * tm * tn}


def launch(p: dict, inputs: list, outputs: list):
    M, N, K, dtype = p["M"], p["N"], p["K"], p["dtype"]
    ta, tb = bool(p.get("trans_A")), bool(p.get("trans_B"))
    if p.get("out_dtype", dtype) != dtype:
        raise NotApplicable(f"MLX's steel GEMM writes its input type; the case writes "
                            f"{p['out_dtype']} from {dtype}")
    if p.get("epilogue", "none") != "none":
        raise NotApplicable(f"epilogue {p['epilogue']!r}: MLX's GEMM has no such epilogue")
    a, b = inputs
    (d,) = outputs
    lda = M if ta else K
    ldb = K if tb else N
    t = MSL_TYPES[dtype]
    tname = ("t" if ta else "n") + ("t" if tb else "n")
    if -(-M // 16) * -(-N // 16) <= 1024 and K // 16 >= 8 and K >= max(M, N):
        return _splitk(M, N, K, lda, ldb, ta, tb, t, dtype, tname, a, b, d)
    if not ta and tb and dtype != "float32":
        bm, bn, bk, wm, wn = 64, 32, 32, 2, 2
    elif dtype != "float32":
        bm, bn, bk, wm, wn = 64, 64, 16, 1, 2
    else:
        bm, bn, bk, wm, wn = 64, 64, 16, 2, 2
    tn, tm = -(-N // bn), -(-M // bm)
    params = np.array([(M, N, K, lda, ldb, N, tn, tm, 0, 0, M * N, 0, K // bk, 1)],
                      GEMM_PARAMS)
    name = f"steel_gemm_fused_{tname}_{dtype}_{dtype}_bm{bm}_bn{bn}_bk{bk}_wm{wm}_wn{wn}"
    targs = f"{t}, {bm}, {bn}, {bk}, {wm}, {wn}, {str(ta).lower()}, {str(tb).lower()}, float"
    return PeerLaunch(
        headers=(*HEADERS, "steel/gemm/kernels/steel_gemm_fused.h"),
        instantiation=f'template [[host_name("{name}")]] [[kernel]] decltype('
                      f"gemm<{targs}>) gemm<{targs}>;\n",
        kernel=name, grid=(tn, tm, 1), threadgroup=(32, wn, wm),
        buffers=[a, b, d, d, params], outputs=[d],
        function_constants={10: False, 100: False, 110: False, 200: M % bm == 0,
                            201: N % bn == 0, 202: K % bk == 0},
        host_code=f"{HOST}: steel_matmul_axpby, steel_matmul_regular_axpby, "
                  "GEMM_TPARAM_MACRO",
        geometry=f"steel GEMM {tname} bm{bm} bn{bn} bk{bk} wm{wm} wn{wn}: grid ({tn}, {tm}), "
                 f"{32 * wm * wn} threads (M1/M2 dispatch; M3+ takes gemv_wide for 2-15 "
                 "rows)",
        local_arrays=_arrays(bm, bn, wm, wn))


def _splitk(M, N, K, lda, ldb, ta, tb, t, dtype, tname, a, b, d) -> list:
    bm, bn, bk, wm, wn = (16 if M < 40 else 32), (16 if N < 40 else 32), 16, 2, 2
    parts = min(max(2, _next_pow2((K // 16) // (-(-M // 32) * -(-N // 32)))), 32)
    iters = (K // bk) // parts
    tn, tm = -(-N // bn), -(-M // bm)
    mn_aligned, k_aligned = M % bm == 0 and N % bn == 0, K % bk == 0
    bx, by, _ = _block_dims(N, M, 1)
    params = np.array([(M, N, K, lda, ldb, N, tn, tm, parts, M * N, iters * bk, 0, iters)],
                      SPLITK_PARAMS)
    c_split = torch.zeros(parts, M, N, dtype=torch.float32)
    al = lambda v: "t" if v else "n"             # noqa: E731 - MLX's name parts
    name = (f"steel_gemm_splitk_{tname}_{dtype}_float32_bm{bm}_bn{bn}_bk{bk}_wm{wm}_wn{wn}"
            f"_MN_{al(mn_aligned)}aligned_K_{al(k_aligned)}aligned")
    targs = (f"{t}, float, {bm}, {bn}, {bk}, {wm}, {wn}, {str(ta).lower()}, "
             f"{str(tb).lower()}, {str(mn_aligned).lower()}, {str(k_aligned).lower()}")
    accum = f"steel_gemm_splitk_accum_{dtype}_float32"
    where = f"{HOST}: steel_matmul_axpby, steel_gemm_splitk_axpby"
    split = PeerLaunch(
        headers=(*HEADERS, "steel/gemm/kernels/steel_gemm_splitk.h"),
        instantiation=f'template [[host_name("{name}")]] [[kernel]] decltype('
                      f"gemm_splitk<{targs}>) gemm_splitk<{targs}>;\n"
                      f'template [[host_name("{accum}")]] [[kernel]] decltype('
                      f"gemm_splitk_accum<float, {t}>) gemm_splitk_accum<float, {t}>;\n",
        kernel=name, grid=(tn, tm, parts), threadgroup=(32, wn, wm),
        buffers=[a, b, c_split, params], outputs=[c_split], host_code=where,
        geometry=f"steel split-K {tname} bm{bm} bn{bn} bk{bk} wm{wm} wn{wn}, {parts} K "
                 f"partitions: grid ({tn}, {tm}, {parts}), {32 * wm * wn} threads",
        local_arrays=_arrays(bm, bn, wm, wn))
    i32 = lambda v: np.array([v], np.int32)      # noqa: E731
    total = PeerLaunch(
        headers=split.headers, instantiation=split.instantiation, kernel=accum,
        grid=(-(-N // bx), -(-M // by), 1), threadgroup=(bx, by, 1), threads=(N, M, 1),
        buffers=[c_split, d, i32(parts), i32(M * N), i32(N)], outputs=[d], host_code=where,
        geometry=f"then the partitions summed, a thread per output in groups of ({bx}, {by})")
    return [split, total]
