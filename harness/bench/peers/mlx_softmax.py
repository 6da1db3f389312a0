"""MLX's softmax (softmax.h) as the peer of the `softmax` family (rows of length N).

From MLX's host code, mlx/backend/metal/softmax.cpp (MLX 846d176): a row of at most
SOFTMAX_LOOPED_LIMIT = 4096 runs `softmax_single_row` ("block_softmax_<T>") with
ceil(ceil(N / 4) / 32) * 32 threads (N_READS = SOFTMAX_N_READS = 4, kernels/defines.h), one
threadgroup per row; a longer row runs `softmax_looped` ("looped_softmax_<T>") with the
pipeline's maxTotalThreadsPerThreadgroup threads (1024 on Apple GPUs), one threadgroup per
row. Buffers 0 in, 1 out, 2 axis_size. The instantiations are kernels/softmax.metal's:
float32 accumulates in float; for float16 / bfloat16 we run the "precise" instantiation
(AccT = float, `mx.softmax(..., precise=True)`), the one that computes in the precision the
case's kernel and oracle do (MLX's default for half types accumulates in half).
"""

from __future__ import annotations

import numpy as np

from harness.bench.peers import NotApplicable, PeerLaunch

HOST = "mlx/backend/metal/softmax.cpp"
MSL_TYPES = {"float32": "float", "float16": "half", "bfloat16": "bfloat16_t"}
N_READS = 4                    # SOFTMAX_N_READS, kernels/defines.h
LOOPED_LIMIT = 4096            # SOFTMAX_LOOPED_LIMIT, softmax.cpp
MAX_THREADS = 1024             # maxTotalThreadsPerThreadgroup of the looped pipeline


def launch(p: dict, inputs: list, outputs: list) -> PeerLaunch:
    M, N, dtype = p["M"], p["N"], p["dtype"]
    if float(p.get("scale", 1.0)) != 1.0:
        raise NotApplicable(f"scale={p['scale']}: MLX's softmax kernel has no input scale")
    (x,), (y,) = inputs, outputs
    t = MSL_TYPES[dtype]
    looped = N > LOOPED_LIMIT
    func = "softmax_looped" if looped else "softmax_single_row"
    precise = dtype != "float32"
    name = ("looped_softmax_" if looped else "block_softmax_") + \
        ("precise_" if precise else "") + dtype
    targs = f"{t}, float" if precise else t
    reads = -(-N // N_READS)                  # threads that read N_READS elements each
    threads = MAX_THREADS if looped else -(-reads // 32) * 32     # whole simdgroups
    return PeerLaunch(
        headers=("utils.h", "softmax.h"),
        instantiation=f'template [[host_name("{name}")]] [[kernel]] decltype('
                      f"{func}<{targs}>) {func}<{targs}>;\n",
        kernel=name, grid=(M, 1, 1), threadgroup=(threads, 1, 1),
        buffers=[x, y, np.array([N], np.int32)], outputs=[y],
        # AccT ld[N_READS] (single row) / AccT vals[N_READS] (looped); AccT float or T
        local_arrays={"ld" if not looped else "vals":
                      N_READS * (4 if precise or dtype == "float32" else x.element_size())},
        host_code=f"{HOST}: Softmax::eval_gpu",
        geometry=f"{func}{' (precise: float accumulation)' if precise else ''}: one row "
                 f"a threadgroup of {threads} threads")
