"""Peers of the bench: another implementation's kernel run beside a case's generated one.

`harness bench --peers mlx` runs, for each case whose kernel family has a peer here, MLX's
own Metal kernel for the same work, on the emulator with every check, at the case's shape
and on the inputs the generated kernel ran on; compares its output with the same oracle and
tolerance; and sets generated / peer per counter and per modeled time (measure.py). The
baseline records those ratios and the gate treats a worse one as a regression
(harness/bench/gate.py); docs/bench.md says what a ratio means.

    mlx_wheel.py     MLX's kernel headers: the `mlx-metal` wheel fetched by pip on first
                     use into metaltile's cache, never into this repository
    mlx_<family>.py  one MLX kernel family each: our instantiation line and launch geometry
                     (grid, threadgroup, buffer order, function constants, template
                     parameters), written from MLX's host code, with the MLX file each fact
                     comes from; `launch(params, inputs, outputs) -> PeerLaunch`, or a
                     list of them run in order (MLX's split-K GEMM is two launches)
    run.py           one peer launch on the emulator -> the record the bench keeps

Two peers: `mlx` (`mlx_families`), MLX's kernel for each family's work, and `mlx-affine`
(`mlx_affine_families`), MLX's affine 8-bit format beside the fp8 case's mxfp8 peer.

A family module raises `NotApplicable` (with the reason) for params MLX has no kernel for;
the case then carries no peer and the report says why.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable


class NotApplicable(ValueError):
    """MLX has no kernel for these params (the message says which and why)."""


@dataclass
class PeerLaunch:
    """One launch of a peer kernel, everything run_msl needs and what to compare.

    headers       the MLX headers (under mlx/backend/metal/kernels/) to include, in order
    instantiation our `template [[host_name(...)]] [[kernel]] ...` line(s)
    kernel        the host name launched
    grid, threadgroup   MLX's dispatch (threadgroups per grid, threads per threadgroup)
    threads       optional: the grid in threads, for MLX's dispatch_threads (grid is then
                  its ceil in threadgroups; the last ones partial where it is not whole)
    buffers       bound to [[buffer(i)]] in order (inputs, outputs, the host's set_bytes)
    outputs       the buffers holding the results, in the oracle's order (or `finish`)
    finish        optional: outputs -> the tensors compared with the oracle (a layout MLX
                  writes differently)
    oracle_inputs optional: the case's inputs as MLX's format holds them (values rounded
                  to a narrower type), which the same oracle is evaluated on
    expected      optional: () -> the oracle's Expected outputs for MLX's format, where it
                  holds intermediate values (not only inputs) in a narrower type than the
                  case's kernel (the reason is in `formats`)
    host_code     the MLX host file and function the geometry comes from
    geometry      the launch in words, for the report
    formats       where MLX's format differs from the case's, and what was done about it
    local_arrays  the kernel's thread-local arrays at these template parameters, name ->
                  bytes, read from the header (the model's register estimate; the MSL
                  text estimator of roofline.py cannot evaluate template extents)
    """
    headers: tuple
    instantiation: str
    kernel: str
    grid: tuple
    threadgroup: tuple
    buffers: list
    outputs: list
    host_code: str
    geometry: str
    threads: tuple | None = None
    function_constants: dict = field(default_factory=dict)
    threadgroup_memory: dict = field(default_factory=dict)
    finish: Callable | None = None
    oracle_inputs: list | None = None
    expected: Callable | None = None
    formats: str = ""
    local_arrays: dict = field(default_factory=dict)


def mlx_families() -> dict[str, Callable]:
    """Kernel family name -> its MLX peer's `launch`."""
    from harness.bench.peers import (mlx_gather_qmv, mlx_gdn, mlx_gemm, mlx_gemv, mlx_qmm,
                                     mlx_qmv, mlx_sdpa, mlx_softmax)

    def fp8(p, inputs, outputs):
        # the case's path says which MLX kernel: qmv for decode, qmm for prefill
        peer = mlx_qmm if p.get("path", "gemv") == "gemm" else mlx_qmv
        return peer.launch(p, inputs, outputs)

    return {"gemv": mlx_gemv.launch, "softmax": mlx_softmax.launch,
            "gdn_decode": mlx_gdn.launch, "gemm": mlx_gemm.launch,
            "attention_decode": mlx_sdpa.launch, "qmm_fp8": fp8,
            "qmm_fp4": mlx_gather_qmv.launch}


def mlx_affine_families() -> dict[str, Callable]:
    """Kernel family name -> the `mlx-affine` peer's `launch`: MLX's affine (integer)
    quantization where the `mlx` peer runs an fp format (mlx_affine_qmv.py)."""
    from harness.bench.peers import mlx_affine_qmm, mlx_affine_qmv

    def fp8(p, inputs, outputs):
        peer = mlx_affine_qmm if p.get("path", "gemv") == "gemm" else mlx_affine_qmv
        return peer.launch(p, inputs, outputs)

    return {"qmm_fp8": fp8}


PEERS = ("mlx", "mlx-affine")
