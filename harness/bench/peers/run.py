"""One peer kernel run beside a bench case: `measure_peer` -> the record the bench keeps.

The peer runs on the emulator with every check, on the very inputs the case's generated
kernel ran on (`built.inputs(SEED)`), its outputs compared with the same oracle and the
same tolerance (harness.check.compare.assert_outputs_close); its counters are priced by
the same model with the case's minimum traffic and flop count (the work is the same), and
set as generated / peer per counter (RATIO_COUNTERS) and per chip's modeled time.

The record (`CaseMeasurement.peers[name]`):
{peer, version, kernel, headers, host_code, grid, threadgroup, geometry, formats, status,
message, findings, counters, modeled, ratios, modeled_ratios, emulator_seconds (the wall
time of its emulator runs, build included: what the peer costs the bench, not a GPU
time)}; status is "pass",
"mismatch", "finding", "launch_error", "unavailable" (the headers cannot be had: offline,
not cached) or "not_applicable" (MLX has no kernel for the params).
"""

from __future__ import annotations

import time

from harness.bench import roofline
from harness.bench.peers import NotApplicable, mlx_affine_families, mlx_families
from harness.bench.peers.mlx_wheel import MLX_VERSION, PeerUnavailable, source


def runners(names) -> dict:
    """Peer name -> the runner harness/bench/measure.py calls per case:
    `runner(case, built, generated, chip_names, half)` -> the record, or None when the
    case's kernel family has no peer. Unknown names raise KeyError."""
    from harness.bench.peers import PEERS
    unknown = [n for n in names if n not in PEERS]
    if unknown:
        raise KeyError(f"unknown peer(s) {unknown}; known: {', '.join(PEERS)}")

    def runner(name):
        def run(case, built, generated, chip_names, half):
            if case.family not in _families(name):
                return None
            return measure_peer(case, built, generated, chip_names, half, peer=name)
        return run

    return {n: runner(n) for n in names}


def _families(peer: str) -> dict:
    """The peer's kernel family name -> launch table."""
    return mlx_affine_families() if peer == "mlx-affine" else mlx_families()


def measure_peer(case, built, generated, chip_names, half: bool, peer: str = "mlx") -> dict:
    """Run the MLX kernel for `case` (whose generated kernel's measurement is `generated`)
    and set generated / MLX per counter and modeled time. Never raises for a failing peer:
    the status says what happened."""
    import torch

    from core.errors import MetaltileError
    from core.runtime.emu import run_msl
    from harness.bench.measure import SEED, aggregate, modeled, set_reference_ratios
    from harness.check.compare import assert_outputs_close

    out = {"peer": peer, "version": MLX_VERSION, "kernel": "", "headers": [],
           "host_code": "", "grid": None, "threadgroup": None, "geometry": "", "formats": "",
           "status": "pass", "message": "", "findings": [], "counters": None,
           "modeled": None, "ratios": {}, "modeled_ratios": {}, "emulator_seconds": 0.0}
    inputs = built.inputs(SEED)
    expected = built.oracle(inputs)
    outputs = [torch.full(tuple(e.shape), float("nan"), dtype=e.dtype)
               if e.dtype.is_floating_point else torch.zeros(tuple(e.shape), dtype=e.dtype)
               for e in expected]
    try:
        planned = _families(peer)[case.family](case.params, inputs, outputs)
    except NotApplicable as err:
        out["status"], out["message"] = "not_applicable", f"case '{case.name}': {err}"
        return out
    launches = planned if isinstance(planned, list) else [planned]
    launch = launches[-1]                  # the one whose outputs are compared
    out.update(kernel=" + ".join(x.kernel for x in launches),
               headers=sorted({h for x in launches for h in x.headers}),
               host_code=launch.host_code,
               grid=[list(x.grid) for x in launches] if len(launches) > 1 else list(launch.grid),
               threadgroup=[list(x.threadgroup) for x in launches] if len(launches) > 1
               else list(launch.threadgroup),
               geometry="; ".join(x.geometry for x in launches),
               formats="; ".join(x.formats for x in launches if x.formats))
    stats, findings = [], []
    for one in launches:
        try:
            msl = source(one.headers, one.instantiation)
        except PeerUnavailable as err:
            out["status"], out["message"] = "unavailable", str(err)
            return out
        started = time.perf_counter()
        try:
            where = {"threads": one.threads} if one.threads else {"grid": one.grid}
            res = run_msl(msl, one.kernel, **where, threadgroup=one.threadgroup,
                          buffers=one.buffers, seed=SEED,
                          function_constants=one.function_constants or None,
                          threadgroup_memory=one.threadgroup_memory or None, timeout=1800)
        except MetaltileError as err:
            out["status"] = "launch_error"
            out["message"] = (f"MLX peer '{one.kernel}' of case '{case.name}': "
                              f"{type(err).__name__}: {err}")
            return out
        out["emulator_seconds"] += time.perf_counter() - started
        findings.extend(res.findings)
        if not res.stats:          # a bounds halt: no counters
            out["status"] = "finding"
            out["findings"] = [str(f) for f in findings[:20]]
            out["message"] = f"{len(findings)} finding(s); first: {findings[0]}"
            return out
        stats.append(res.stats)
    out["findings"] = [str(f) for f in findings[:20]]
    results = launch.finish(launch.outputs) if launch.finish else launch.outputs
    if launch.expected is not None:
        expected = launch.expected()
    elif launch.oracle_inputs is not None:
        expected = built.oracle(launch.oracle_inputs)
    try:
        assert_outputs_close(results, expected, built, what=f"MLX {launch.kernel} ")
    except AssertionError as err:
        out["status"], out["message"] = "mismatch", str(err)
    if findings and out["status"] == "pass":
        out["status"] = "finding"
        out["message"] = f"{len(findings)} finding(s); first: {findings[0]}"
    counters = aggregate(stats)
    # declared by the peer module (template extents), the largest launch's; each array's
    # uses are not counted, so a spilled byte is taken as used twice (the rule of
    # roofline.local_array_profile for arrays it cannot count)
    arrays = max((x.local_arrays for x in launches), key=lambda a: sum(a.values()))
    counters["local_array_bytes"] = sum(arrays.values())
    counters["local_array_profile"] = sorted([n, None] for n in arrays.values() if n)
    out["counters"] = counters
    out["modeled"] = modeled(counters, generated.minimum, generated.flops, chip_names, half,
                             roofline.buffer_traffic(stats), case.full_scale)
    set_reference_ratios(out, generated)
    return out
