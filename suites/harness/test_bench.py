"""The bench machinery on its own: roofline figures, counter aggregation, the comparison
rules of the gate, baselines, the A/B statistics, report rendering and `harness report`,
on synthetic results (no emulator), plus one real A/B run against HEAD."""

import copy
import json
import subprocess
from concurrent.futures import ThreadPoolExecutor
from types import SimpleNamespace

import numpy as np
import pytest

from core.transform import pipeline as core_pipeline
from harness.bench import against, emu_against, measure, report, roofline
from harness.bench.baseline import (load_baseline, run_from_dict, update_baseline,
                                    write_pytest_benchmark_json)
from harness.bench.cases import CASES, Reference, select
from harness.bench.gate import GATED, INFORMATIONAL, compare, gate_failed
from harness.bench.measure import ROOT, SCHEMA, aggregate, modeled, mps_available, timing_summary
from harness.cli import main


# -- roofline ------------------------------------------------------------------------------

def test_peak_flops_are_cores_times_alus_times_clock_times_two():
    assert roofline.CHIPS["M1"].fp32_flops == pytest.approx(2.617e12, rel=1e-3)  # Apple: 2.6
    assert roofline.CHIPS["M1 Max"].fp32_flops == pytest.approx(10.6e12, rel=1e-2)
    assert roofline.CHIPS["M2"].fp32_flops == pytest.approx(3.58e12, rel=1e-3)
    for chip in roofline.CHIPS.values():
        assert chip.fp16_flops == chip.fp32_flops        # Apple7+: half at the float rate
        assert chip.source


def test_model_takes_the_binding_roof_plus_launch_overhead():
    m2 = roofline.CHIPS["M2"]
    mem = roofline.model(m2, device_bytes=100_000_000, flops=1000, launches=2,
                         minimum_bytes=50_000_000)
    assert mem.bound == "memory"
    assert mem.memory_seconds == pytest.approx(1e-3)                       # 100 MB at 100 GB/s
    assert mem.seconds == pytest.approx(1e-3 + 2 * roofline.LAUNCH_OVERHEAD_S)
    assert mem.ideal_seconds == pytest.approx(0.5e-3 + roofline.LAUNCH_OVERHEAD_S)
    alu = roofline.model(m2, device_bytes=1000, flops=int(3.579e12), launches=1,
                         minimum_bytes=1000)
    assert alu.bound == "compute" and alu.compute_seconds == pytest.approx(1.0, rel=1e-3)
    assert alu.efficiency == pytest.approx(1.0)


def test_on_chip_terms_come_from_the_counters():
    m2 = roofline.CHIPS["M2"]
    core_cycles = 10 * 1398e6                                      # cores x clock
    work = roofline.OnChipWork(threadgroup_bytes=int(64 * core_cycles), barriers=1000,
                               simd_ops=int(4 / 2.04 * core_cycles), groups=100,
                               threads=100 * 256)
    m = roofline.model(m2, device_bytes=1000, flops=1000, launches=1, minimum_bytes=1000,
                       work=work)
    assert m.threadgroup_seconds == pytest.approx(1.0, rel=1e-6)      # 64 B/cycle/core
    assert m.simd_seconds == pytest.approx(1.0, rel=1e-3)             # a shuffle per 2.04 cycles
    assert m.groups_per_core == 12 and m.occupancy_limit == "threads"  # 3072 / 256
    assert m.barrier_seconds == pytest.approx(1000 * 32 / core_cycles / 12)
    assert m.bound == "threadgroup"
    assert m.seconds == pytest.approx(m.threadgroup_seconds + m.barrier_seconds
                                      + roofline.LAUNCH_OVERHEAD_S)
    assert set(m.terms()) == {"memory", "spill", "compute", "threadgroup", "simd", "barrier",
                              "launch"}


def test_occupancy_is_limited_by_threadgroup_memory_and_registers():
    on_chip = roofline.CHIPS["M1"].on_chip
    tg = roofline.occupancy(on_chip, roofline.OnChipWork(
        groups=8, threads=8 * 64, threadgroup_memory_bytes=30 * 1024), 32)
    assert (tg.groups_per_core, tg.limit) == (2, "threadgroup memory")
    assert tg.factor == pytest.approx(1.02 / 2.75)            # 2 groups x 2 simds: measured
    assert roofline.occupancy_factor(on_chip, 6) == pytest.approx((1.02 / 2.75 + 1.02 / 1.6) / 2)
    assert roofline.occupancy_factor(on_chip, 2) == pytest.approx(1.02 / 2.75 / 2)
    assert roofline.occupancy_factor(on_chip, 24) == roofline.occupancy_factor(on_chip, 96) == 1
    regs = roofline.occupancy(on_chip, roofline.OnChipWork(
        groups=8, threads=8 * 1024, local_array_bytes=256 * 4), 32)
    assert regs.limit == "registers (spills)"        # 1 KiB+ x 1024 threads: 208 KB / core
    assert regs.simdgroups_per_core >= 24            # the compiler spills rather than go below
    fits = roofline.occupancy(on_chip, roofline.OnChipWork(
        groups=8, threads=8 * 256, local_array_bytes=40 * 4), 32)
    assert (fits.groups_per_core, fits.limit) == (3, "registers")   # 208 KiB / (224 B x 256)
    narrow = roofline.OnChipWork(groups=1, threads=32, threadgroup_memory_bytes=30 * 1024)
    slow = roofline.model(roofline.CHIPS["M1"], device_bytes=10**8, flops=0, launches=1,
                          minimum_bytes=10**8, work=narrow)              # 2 simds per core
    fast = roofline.model(roofline.CHIPS["M1"], device_bytes=10**8, flops=0, launches=1,
                          minimum_bytes=10**8, work=roofline.OnChipWork(groups=1, threads=1024))
    assert fast.occupancy == 1.0 and slow.occupancy == pytest.approx(1.02 / 2.75 / 2)
    assert slow.memory_seconds == pytest.approx(fast.memory_seconds / slow.occupancy)


def _decode_stats(re_reads: int, **extra) -> dict:
    """One launch's emulator stats shaped like the decode projection 8 x 3584 -> 2048
    (f16): X (buffer 0, 56 KiB) read `re_reads` times, W (buffer 1, 14 MiB) once, Y
    (buffer 2) written once."""
    x, w, y = 8 * 3584 * 2, 2048 * 3584 * 2, 8 * 2048 * 2
    return {"groups": 128, "threads": 128 * 32, "launches": 1,
            "device_bytes_read": {0: x * re_reads, 1: w}, "device_bytes_written": {2: y},
            "device_unique_bytes_read": {0: x, 1: w, 2: 0},
            "device_unique_bytes_written": {0: 0, 1: 0, 2: y}, **extra}


def _modeled_decode(stats: dict, cache=True) -> dict:
    counters = {**measure.aggregate([stats]), "local_array_bytes": 0}
    minimum = {"read": 8 * 3584 * 2 + 2048 * 3584 * 2, "written": 8 * 2048 * 2}
    return measure.modeled(counters, minimum, 2 * 8 * 2048 * 3584, ("M2",), half=True,
                           buffers=roofline.buffer_traffic([stats]) if cache else ())["M2"]


def test_cache_term_serves_re_reads_that_fit_and_ranks_the_gemv_first():
    # GEMV-like: X re-read by all 128 groups, nothing on chip but one simd_sum per row.
    gemv = _decode_stats(128, simd_ops=16384, simd_reduce_ops=16384)
    # GEMM-like: X re-read by 32 groups, tiles staged in threadgroup memory, barriers.
    gemm = _decode_stats(32, groups=32, threads=32 * 128, barriers=7200,
                         threadgroup_bytes_read=29_425_664, threadgroup_bytes_written=18_481_152,
                         threadgroup_memory_bytes=9600, simd_ops=229_888,
                         simd_matrix_load_ops=225_792, simd_matrix_store_ops=4096)
    before = {k: _modeled_decode(s, cache=False) for k, s in (("gemv", gemv), ("gemm", gemm))}
    after = {k: _modeled_decode(s) for k, s in (("gemv", gemv), ("gemm", gemm))}
    assert before["gemv"]["seconds"] > before["gemm"]["seconds"]   # every re-read as DRAM
    assert after["gemv"]["seconds"] < after["gemm"]["seconds"]
    unique = 8 * 3584 * 2 + 2048 * 3584 * 2 + 8 * 2048 * 2
    m2 = roofline.CHIPS["M2"]
    for name, re_reads in (("gemv", 128), ("gemm", 32)):
        m = after[name]
        assert m["dram_bytes"] == unique                   # each distinct byte once
        assert m["cached_bytes"] == 8 * 3584 * 2 * (re_reads - 1)   # 56 KiB fits the L2
        assert m["memory_level"] == "DRAM"
        assert m["memory_seconds"] == pytest.approx(unique / m2.bandwidth)
        assert before[name]["memory_seconds"] > m["memory_seconds"]


def test_re_reads_of_a_footprint_beyond_the_caches_come_partly_from_dram():
    m2 = roofline.CHIPS["M2"]
    mb = roofline.MB
    fits_slc = roofline.BufferTraffic(read=4 * 4 * mb, written=0, unique_read=4 * mb,
                                      unique_written=0)
    t = roofline.memory_traffic(m2, [fits_slc])           # 4 MiB: past the L2, in the SLC
    assert (t.dram, t.l2_hits, t.slc_hits) == (4 * mb, 0, 12 * mb)
    big = roofline.BufferTraffic(read=2 * 32 * mb, written=0, unique_read=32 * mb,
                                 unique_written=0)
    t = roofline.memory_traffic(m2, [big])                # 8 of 32 MiB fit the SLC
    assert t.slc_hits == pytest.approx(32 * mb * 8 / 32)
    assert t.dram == pytest.approx(32 * mb + 32 * mb * 24 / 32)
    # a case cut down 16x for the emulator: its 1 MiB would be up to 16 MiB at the real shape
    t = roofline.memory_traffic(m2, [fits_slc], footprint_scale=16)
    assert t.slc_hits == pytest.approx(12 * mb * 8 / 64) and t.l2_hits == 0
    once = roofline.BufferTraffic(read=mb, written=mb, unique_read=mb, unique_written=mb)
    assert roofline.memory_traffic(m2, [once]).cached == 0
    # the SLC binds when its traffic outruns it: a 4 MiB buffer read 100 times
    hot = roofline.BufferTraffic(read=100 * 4 * mb, written=0, unique_read=4 * mb,
                                 unique_written=0)
    m = roofline.model(m2, device_bytes=hot.read, flops=0, launches=1, minimum_bytes=4 * mb,
                       buffers=[hot])
    assert m.memory_level == "SLC"
    assert m.memory_seconds == pytest.approx(hot.read / (2 * m2.bandwidth))
    for chip in roofline.CHIPS.values():
        assert 0 < chip.l2_bytes < chip.slc_bytes and chip.cache_source
        assert chip.bandwidth < chip.slc_bandwidth < chip.l2_bandwidth


def _softmax_stats(rows: int, cols: int, threads: int, reads: int) -> dict:
    """One launch's emulator stats shaped like a row softmax in f32, one threadgroup of
    `threads` per row: X (buffer 0) read `reads` times (2: a streamed row), Y (buffer 1)
    written once, two simd reductions per simdgroup."""
    x = rows * cols * 4
    simds = rows * threads // 32
    return {"groups": rows, "threads": rows * threads, "launches": 1, "barriers": 2 * rows,
            "device_bytes_read": {0: x * reads}, "device_bytes_written": {1: x},
            "device_unique_bytes_read": {0: x, 1: 0},
            "device_unique_bytes_written": {0: 0, 1: x},
            "simd_ops": 4 * simds, "simd_reduce_ops": 4 * simds,
            "threadgroup_bytes_read": 2 * threads * rows * 4,
            "threadgroup_bytes_written": 2 * simds * 4, "threadgroup_memory_bytes": 64}


def _modeled_softmax(stats: dict, profile: list, chips=("M1", "M2", "M4")) -> dict:
    """The model of `stats` whose thread-local arrays are `profile` ([bytes, accesses per
    byte], as `roofline.local_array_profile` reads them from the MSL)."""
    counters = {**measure.aggregate([stats]), "local_array_profile": profile,
                "local_array_bytes": sum(n for n, _ in profile)}
    x = stats["device_bytes_written"][1]
    return measure.modeled(counters, {"read": x, "written": x}, 5 * x // 4, chips,
                           buffers=roofline.buffer_traffic([stats]))


def test_a_kernel_that_spills_ranks_below_its_streamed_version():
    # The vocabulary softmax (152064 f32 columns, 256 threads) over a batch that fills the
    # GPU: held whole, each thread declares 596 + 4 floats (2400 B: 2187 B past its share
    # of the register file at 24 simdgroups per core) and touches each element of the row
    # 8 times (the MSL's passes: load, max, exp, sum, divide, store), its accumulators far
    # more often; streamed, 4-float chunks (72 B in all) and the row read twice.
    held_arrays = [[2384, 8.0], [4, 150.0], [4, 150.0], [4, 1201.0], [4, 1201.0]]
    held = _modeled_softmax(_softmax_stats(64, 152064, 256, reads=1), held_arrays)
    streamed = _modeled_softmax(_softmax_stats(64, 152064, 256, reads=2),
                                [[16, 1639.0], [16, 748.0], [16, 449.0], [24, 100.0]])
    for chip in ("M1", "M2", "M4"):
        h, s = held[chip], streamed[chip]
        assert h["occupancy_limit"] == "registers (spills)" and h["groups_per_core"] == 3
        assert h["spilled_bytes_per_thread"] == 2400 + 64 - 208 * 1024 // 768
        assert h["spill_bytes"] == 8 * 2187 * 64 * 256    # the row's bytes, 8 accesses each
        # the stacks of 768 threads on every core (16.8 MB on an M2) outgrow the caches
        assert h["spill_level"] == "SLC+DRAM" and h["spill_seconds"] > 0
        assert s["spilled_bytes_per_thread"] == 0 and s["spill_seconds"] == 0
        assert h["seconds"] > s["seconds"]
    assert report._term_cells(held["M2"])[2].endswith("(2,187 B, SLC+DRAM)")   # spills column
    assert "of which spills" in report.TERM_HEADER[2]
    # without the spill traffic the held kernel would model faster: it reads X once
    no_spill = roofline.model(roofline.CHIPS["M2"], device_bytes=0, flops=0, launches=1,
                              minimum_bytes=0,
                              buffers=roofline.buffer_traffic(
                                  [_softmax_stats(64, 152064, 256, reads=1)]))
    assert no_spill.memory_seconds < streamed["M2"]["memory_seconds"]
    # uncounted accesses cost one store and one load
    least = _modeled_softmax(_softmax_stats(64, 152064, 256, reads=1), [[2400, None]],
                             chips=("M2",))
    assert least["M2"]["spill_bytes"] == 2 * 2187 * 64 * 256
    assert least["M2"]["seconds"] < held["M2"]["seconds"]


def test_spills_land_in_the_cache_the_resident_stacks_fit():
    m2 = roofline.CHIPS["M2"]
    on_chip = m2.on_chip
    # 512 threads a group, 336 B each: 2 groups (32 simdgroups) a core, 208 B of registers
    # a thread, 128 B spilled
    work = roofline.OnChipWork(groups=16, threads=16 * 512, local_array_bytes=272)
    occ = roofline.occupancy(on_chip, work, 32)
    assert (occ.groups_per_core, occ.threads_per_core) == (2, 1024)
    assert occ.spilled_bytes_per_thread == 336 - 208 * 1024 // 1024
    t = roofline.spill_traffic(m2, occ, work.threads)
    assert t.total == 2 * 128 * 16 * 512 and t.l2_hits == t.total and t.dram == 0
    assert roofline.spill_level(t) == "L2"                      # 128 B x 8192 threads: 1 MiB
    # at the real shape 64x as many rows: every core full, 128 B x 1024 x 10 = 1.25 MiB
    assert roofline.spill_traffic(m2, occ, work.threads, 64).l2_hits == t.total
    m1 = roofline.CHIPS["M1"]                                   # 768 KiB of L2
    t1 = roofline.spill_traffic(m1, roofline.occupancy(m1.on_chip, work, 32), work.threads)
    assert t1.slc_hits == t1.total and roofline.spill_level(t1) == "SLC"
    spilled = roofline.model(m2, device_bytes=0, flops=0, launches=1, minimum_bytes=0,
                             work=work)
    assert spilled.spill_bytes == t.total
    assert spilled.spill_seconds == pytest.approx(t.total / m2.l2_bandwidth)  # L2 binds
    assert spilled.memory_seconds == pytest.approx(spilled.spill_seconds)


def test_a_kernel_within_the_register_budget_gets_no_spill_cost():
    from core.target import METAL
    m2 = roofline.CHIPS["M2"]
    stats = _softmax_stats(64, 4096, 256, reads=1)
    # the stream_rows budget plus the scalar allowance fits 24 simdgroups' share
    within = _modeled_softmax(stats, [[METAL.fragment_register_budget_bytes, 50.0]],
                              chips=("M2",))["M2"]
    assert within["spill_seconds"] == 0 and within["spill_bytes"] == 0
    assert within["spill_level"] == "" and within["occupancy_limit"] != "registers (spills)"
    # the memory term is the device traffic's alone: each distinct byte once from DRAM
    assert within["memory_seconds"] == pytest.approx(2 * 64 * 4096 * 4 / m2.bandwidth)
    # fewer resident groups but no spill: registers limit occupancy above the floor
    fits = roofline.occupancy(m2.on_chip, roofline.OnChipWork(
        groups=8, threads=8 * 256, local_array_bytes=40 * 4), 32)
    assert (fits.groups_per_core, fits.spilled_bytes_per_thread) == (3, 0)
    report_row = report._term_cells(within)
    assert report_row[2] == "-"                                  # the spills column


def test_simd_ops_are_priced_by_kind():
    m2 = roofline.CHIPS["M2"]

    def simd_seconds(**kinds):
        work = roofline.OnChipWork(simd_ops=sum(kinds.values()),
                                   simd_kinds=tuple(kinds.items()), groups=1, threads=32)
        return roofline.model(m2, device_bytes=0, flops=0, launches=1, minimum_bytes=0,
                              work=work).simd_seconds

    cycle = 1 / (m2.cycles_per_second * 4)                 # one scheduler cycle, GPU-wide
    assert simd_seconds(reduce=1) == pytest.approx(14.54 * cycle)      # SUM<F32>
    assert simd_seconds(shuffle=5) == pytest.approx(5 * (2.04 + 1) * cycle)
    assert simd_seconds(reduce=1) < simd_seconds(shuffle=5)   # simd_sum < 5-step butterfly
    assert simd_seconds(broadcast=1) < simd_seconds(shuffle=1) < simd_seconds(reduce=1)
    assert simd_seconds(matrix_load=8, matrix_store=1) == 0    # their bytes are elsewhere
    legacy = roofline.OnChipWork(simd_ops=3)                   # counters before the split
    assert legacy.simd_cycles(m2.on_chip) == pytest.approx(3 * 2.04)
    assert roofline.OnChipWork.of({"simd_ops": 6, "simd_reduce_ops": 1,
                                   "simd_shuffle_ops": 5}).simd_kinds == (
        ("shuffle", 5), ("reduce", 1))


def test_local_array_bytes_reads_thread_arrays_not_threadgroup_ones():
    msl = ("kernel void k() {\n  threadgroup float red_buf[16];\n  float x[28];\n"
           "  half h[2][4];\n  float s;\n  const device float* p = q;\n}\n")
    assert roofline.local_array_bytes(msl) == 28 * 4 + 8 * 2
    looped = ("#define N 3584\n#define THREADS 448\n#define ITEMS ((N / 4 + THREADS - 1) / "
              "THREADS)\nkernel void k() {\n  float4 v[ITEMS];\n}\n")
    assert roofline.local_array_bytes(looped) == 2 * 16                 # 896 / 448 float4s
    two = looped + "kernel void j() {\n  float w[3];\n}\n"
    assert roofline.local_array_bytes(two, "j") == 12
    assert roofline.local_array_bytes(two, "k") == 32
    same = two + "kernel void i() {\n  float w[5];\n}\n"      # one name in two kernels
    assert roofline.local_array_bytes(same) == 32 + 12 + 20


def test_spill_accesses_count_every_reference_once_per_loop_iteration():
    held = ("#define ITEMS 3\n"
            "kernel void k(device float4* X, uint t) {\n"
            "  float4 v[ITEMS];\n"
            "  float acc[1];\n"
            "  acc[0] = 0.0f;\n"
            "  for (int i = 0; i < ITEMS; ++i) {\n"
            "    v[i] = X[i * 64 + t];            // v[i] in a comment is no access\n"
            "    if (t < 8) {\n"
            "      acc[0] += dot(v[i], v[i]);\n"
            "    }\n"
            "  }\n"
            "  for (int i = 0; i < 2 * ITEMS; i += 2)\n"
            "    X[i] = v[i / 2] / acc[0];\n"
            "}\n")
    arrays = roofline.local_array_accesses(held)
    assert arrays["v"] == (48, 3 * 3 * 16 + 3 * 16)    # store + two loads a pass, one load
    assert arrays["acc"] == (4, 4 + 3 * 4 + 3 * 4)           # `+=` is one reference
    assert roofline.local_array_profile(held) == [[48, 4.0], [4, 7.0]]   # least used first
    runtime = held.replace("i < ITEMS", "i < int(t)")
    assert roofline.local_array_accesses(runtime)["v"] == (48, None)
    assert roofline.local_array_profile(runtime) == [[48, None], [4, None]]  # both in it
    assert roofline.local_array_profile("kernel void k() {\n  float s = 0;\n}\n") == []


def test_the_least_used_bytes_spill_each_at_least_stored_and_loaded():
    profile = [[48, 4.0], [4, 7.0]]
    assert roofline.spilled_accesses(40, profile) == 40 * 4.0
    assert roofline.spilled_accesses(50, profile) == 48 * 4.0 + 2 * 7.0
    assert roofline.spilled_accesses(60, profile) == 48 * 4.0 + 4 * 7.0 + 8 * 2  # scalars
    assert roofline.spilled_accesses(10, [[8, 1.0], [8, None]]) == 10 * 2       # at least 2
    assert roofline.spilled_accesses(10) == 20


# -- counters and selection ----------------------------------------------------------------

def test_aggregate_sums_launches_and_buffers():
    launch = {"groups": 2, "threads": 64, "barriers": 3, "simd_ops": 1,
              "device_load_ops": 10, "device_bytes_read": {0: 100, 1: 28},
              "device_bytes_written": {2: 64}, "threadgroup_memory_bytes": 512}
    total = aggregate([launch, {**launch, "threadgroup_memory_bytes": 1024}])
    assert total["launches"] == 2 and total["barriers"] == 6 and total["groups"] == 4
    assert total["device_bytes_read"] == 256 and total["device_bytes_written"] == 128
    assert total["device_load_ops"] == 20
    assert total["threadgroup_memory_bytes"] == 1024                      # the largest launch


def test_select_by_name_family_or_pattern():
    assert [c.name for c in select("copy/k-transpose-f16")] == ["copy/k-transpose-f16"]
    assert {c.family for c in select("copy")} == {"copy"}
    assert all(c.name.startswith("elementwise/") for c in select("elementwise/*"))
    assert len(select(None)) == len(CASES)
    with pytest.raises(KeyError, match="no bench case"):
        select("nonesuch")


def test_case_names_are_unique_and_scaling_is_stated():
    names = [c.name for c in CASES]
    assert len(names) == len(set(names))
    for c in CASES:
        assert c.name.startswith(c.family + "/") and c.shape and c.scaling and c.full_scale >= 1


# -- the gate's rules ----------------------------------------------------------------------

def _case(name="fam/a", status="pass", **counters):
    base = {k: 0 for k in GATED + INFORMATIONAL}
    base.update(launches=1, device_bytes_read=1 << 22, device_bytes_written=1 << 22,
                device_load_ops=1 << 18, device_store_ops=1 << 18)
    base.update(counters)
    minimum = {"read": 1 << 22, "written": 1 << 22}
    return {"name": name, "family": "fam", "params": {"n": 1}, "shape": "s", "scaling": "x",
            "full_scale": 2.0, "status": status, "message": "" if status == "pass" else
            "race in kernel 'k' at MSL line 3", "findings": [], "counters": base,
            "minimum": minimum, "flops": 100, "msl": "",
            "modeled": modeled(base, minimum, 100, ("M1", "M2")),
            "compile": timing_summary(_stats(0.010, 0.012, 0.014)), "gpu": None}


def _stats(*rounds):
    from pytest_benchmark.stats import Stats

    stats = Stats()
    for r in rounds:
        stats.update(r)
    return stats


def _results(*cases, **options):
    """A run of `cases` (documents, as bench.json holds them), as the gate and report get it."""
    return run_from_dict(_document(*cases, **options))


def _document(*cases, **options):
    return {"schema": SCHEMA, "created": "2026-01-01T00:00:00+00:00",
            "revision": {"commit": "0" * 40, "dirty": False},
            "machine": {"node": "test", "cpus": 2}, "toolchain": "clang 19.1.7: clang++-19",
            "options": {"rounds": 3, "disable": [], "replace": [], "gpu": False, "seed": 0,
                        "cases": None, **options},
            "chips": {n: roofline.CHIPS[n].describe() for n in ("M1", "M2")},
            "launch_overhead_s": roofline.LAUNCH_OVERHEAD_S, "cases": list(cases),
            "against": None, "seconds": 1.0}


@pytest.fixture
def baseline(tmp_path):
    path = tmp_path / "baseline.json"
    update_baseline(_results(_case("fam/a"), _case("fam/b")), path)
    return load_baseline(path)


def test_same_counters_pass(baseline):
    changes = compare(_results(_case("fam/a"), _case("fam/b")), baseline)
    assert changes == [] and not gate_failed(changes)


def test_any_counter_increase_is_a_regression_and_a_decrease_an_improvement(baseline):
    changes = compare(_results(_case("fam/a", barriers=1),
                               _case("fam/b", device_load_ops=1 << 16)), baseline)
    kinds = {(c.case, c.metric): c.kind for c in changes}
    assert kinds == {("fam/a", "barriers"): "regression",
                     ("fam/b", "device_load_ops"): "improvement"}
    assert gate_failed(changes)


def test_more_traffic_regresses_the_counter_and_the_modeled_time(baseline):
    changes = compare(_results(_case("fam/a", device_bytes_read=1 << 23), _case("fam/b")),
                      baseline)
    metrics = {c.metric for c in changes if c.kind == "regression"}
    assert metrics == {"device_bytes_read", "modeled M1", "modeled M2"}


def test_a_failing_case_fails_the_gate_even_with_equal_counters(baseline):
    changes = compare(_results(_case("fam/a", status="finding"), _case("fam/b")),
                      baseline)
    assert [(c.kind, c.current) for c in changes] == [("failure", "finding")]
    assert gate_failed(changes)


def _with_hand_tuned(case, status="pass", **ref_counters):
    """`case` with a hand-tuned reference whose counters are the case's, changed by
    `ref_counters`, and the ratios measure.py would set."""
    ref = {**case["counters"], **ref_counters}
    case["hand_tuned"] = {
        "file": "k.metal", "kernel": "k", "threads": 64, "grid": 1, "geometry": "g",
        "status": status, "message": "" if status == "pass" else "race in kernel 'k'",
        "findings": [], "counters": ref, "modeled": case["modeled"],
        "ratios": {k: measure.generated_over_reference(case["counters"].get(k, 0),
                                                       ref.get(k, 0))
                   for k in measure.RATIO_COUNTERS},
        "modeled_ratios": {chip: 1.0 for chip in case["modeled"]}}
    return case


def test_generated_over_hand_tuned_ratios_gate_like_counters(tmp_path):
    path = tmp_path / "baseline.json"
    update_baseline(_results(_with_hand_tuned(_case("fam/a", barriers=2),
                                              barriers=2)), path)
    baseline = load_baseline(path)
    assert baseline.cases["fam/a"].hand_tuned.ratios["barriers"] == 1.0
    # the reference got better (one barrier): the generated kernel now does 2x its work
    changes = compare(_results(_with_hand_tuned(_case("fam/a", barriers=2),
                                                barriers=1)), baseline)
    assert [(c.metric, c.kind, c.baseline, c.current) for c in changes] == [
        ("generated/hand-tuned barriers", "regression", 1.0, 2.0)]
    assert gate_failed(changes)
    failing = compare(_results(_with_hand_tuned(_case("fam/a", barriers=2),
                                                status="finding", barriers=2)),
                      baseline)
    assert [(c.metric, c.kind, c.current) for c in failing] == [
        ("hand-tuned status", "failure", "finding")]


def test_report_shows_ratios_and_misses_of_the_target():
    case = _with_hand_tuned(_case("fam/a", threadgroup_bytes_read=300,
                                  threadgroup_bytes_written=20),
                            threadgroup_bytes_read=10, threadgroup_bytes_written=10)
    rows = report.hand_tuned_rows(_results(case))
    assert len(rows) == 1
    row = dict(zip(report.hand_tuned_header(["M1", "M2"]), rows[0]))
    assert row["threadgroup bytes"] == "16.00x" and row["device bytes"] == "1.00x"
    assert row["misses the target"] == "threadgroup bytes"
    assert "Generated against hand-tuned reference kernels" in report.markdown(
        _results(case), [])


def test_report_marks_compile_times_over_the_goal():
    fast, slow = _case("fam/fast"), _case("fam/slow")
    slow["compile"] = timing_summary(_stats(0.031, 0.032, 0.040))
    assert not measure.over_goal(fast["compile"]) and measure.over_goal(slow["compile"])
    assert not measure.over_goal(None)
    text = report.markdown(_results(fast, slow), [])
    assert "| fam/slow | pass | s | x | 32.0 ± 4.9 (n=3) > 30 goal |" in text
    assert "| fam/fast | pass | s | x | 12.0 ± 2.0 (n=3) |" in text
    # The goal is about the first compile: a case warm under it but first over it is
    # marked, and one first under it is not.
    cold, warm = _case("fam/cold"), _case("fam/warm")
    cold["first_compile"] = {"seconds": 0.045, "stages": {"parse": 0.02}}
    warm["first_compile"] = {"seconds": 0.025, "stages": {"parse": 0.01}}
    assert measure.over_goal(cold["first_compile"])
    assert not measure.over_goal(warm["first_compile"])
    text = report.markdown(_results(cold, warm), [])
    assert "| fam/cold | pass | s | x | 45.0 / 12.0 ± 2.0 (n=3) > 30 goal |" in text
    assert "| fam/warm | pass | s | x | 25.0 / 12.0 ± 2.0 (n=3) |" in text
    # The goal is per device kernel: nine kernels in 65 ms meet it, two in 70 ms do not.
    nine, two = _case("fam/nine"), _case("fam/two")
    nine["first_compile"] = {"seconds": 0.065, "kernels": 9, "stages": {"parse": 0.02}}
    two["first_compile"] = {"seconds": 0.070, "kernels": 2, "stages": {"parse": 0.02}}
    assert not measure.over_goal(nine["first_compile"])
    assert measure.over_goal(two["first_compile"])
    text = report.markdown(_results(nine, two), [])
    assert "| fam/nine | pass | s | x | 65.0 (9 kernels, 7.2 each) / 12.0 ± 2.0 (n=3) |" in text
    assert "| fam/two | pass | s | x | 70.0 (2 kernels, 35.0 each) / 12.0 ± 2.0 (n=3) > 30 goal |" in text


def test_bench_records_the_first_compile_of_a_case_with_its_stages():
    case = select("elementwise/silu-f32")[0]
    fam = measure._family(case.family)
    first = measure.first_compile(fam, case.params)
    assert first["seconds"] > 0
    assert list(first["stages"]) == ["parse", *core_pipeline.pass_names(), "print_msl"]
    assert sum(first["stages"].values()) <= first["seconds"]
    assert first["kernels"] == 1
    assert measure.first_compile(fam, {**case.params, "dtype": "no_such_dtype"}) is None
    moe = select("moe/qwen3-30b-decode-multi-bf16")[0]
    assert measure.first_compile(measure._family("moe"), moe.params)["kernels"] == 9



def test_a_bench_case_compiles_cold_once_and_runs_that_kernel(monkeypatch):
    """The timed first compile's kernel is the one the checked run runs: besides the warm
    rounds (one warm-up and `rounds`), the case compiles once."""
    import core
    compiled = []
    real = core.compile

    def counting(*args, **kwargs):
        compiled.append(real(*args, **kwargs))
        return compiled[-1]

    monkeypatch.setattr(core, "compile", counting)
    case = select("elementwise/silu-f32")[0]
    m = measure.measure_case(case, rounds=1, chip_names=("M2",))
    assert m.status == "pass" and m.counters and m.first_compile
    assert len(compiled) == 1 + 1 + 1
    assert compiled[0].last_run is not None          # the first compile's kernel ran
    assert all(k.last_run is None for k in compiled[1:])


def test_report_lists_the_streamed_rows_from_the_msl():
    streamed, held = _case("fam/streamed"), _case("fam/held")
    streamed["msl"] = ("kernel void k() {\n  // streamed: 16 chunks of 2048 over dim 1 of 'x'"
                       " (...); online max into 'mx' and sum of exp into 's'\n  for (;;) {}\n}")
    held["msl"] = "kernel void k() {\n  float x[64];\n}"
    text = report.markdown(_results(streamed, held), [])
    section = text.split("## Rows streamed past the register budget")[1].split("## ")[0]
    assert "| fam/streamed | streamed: 16 chunks of 2048 over dim 1 of 'x'" in section
    assert "fam/held" not in section


def test_new_changed_and_missing_cases_are_noted_not_gated(baseline):
    changed = _case("fam/b")
    changed["params"] = {"n": 2}
    changes = compare(_results(_case("fam/new"), changed), baseline)
    kinds = {(c.case, c.kind) for c in changes}
    assert kinds == {("fam/new", "new"), ("fam/b", "note"), ("fam/a", "missing")}
    assert not gate_failed(changes)


def test_another_clang_is_a_note(baseline):
    res = _results(_case("fam/a"), _case("fam/b"))
    res.toolchain = "clang 17.0.6: /usr/bin/clang++-17"
    (change,) = compare(res, baseline)
    assert (change.metric, change.kind, change.current) == ("toolchain", "note", "clang 17")
    res.toolchain = "clang 19.1.2: /opt/clang/bin/clang++"
    assert compare(res, baseline) == []


def test_mps_backend_off_macos_is_a_clean_usage_error(capsys):
    import platform

    if platform.system() == "Darwin":
        pytest.skip("macOS: MPS may be available")
    assert mps_available()[0] is False
    assert main(["bench", "--cases", "copy/k-transpose-f16", "--backend", "mps"]) == 2
    assert "GPU time is measured on macOS only" in capsys.readouterr().err


def test_no_baseline_is_a_note():
    changes = compare(_results(_case("fam/a")), None)
    assert [c.kind for c in changes] == ["note"] and not gate_failed(changes)


def test_baseline_update_merges_skips_failures_and_refuses_perturbed_runs(tmp_path, baseline):
    path = tmp_path / "baseline.json"
    new, left_out = update_baseline(
        _results(_case("fam/b", barriers=2), _case("fam/c", status="mismatch")), path)
    assert set(new.cases) == {"fam/a", "fam/b"} and left_out == ["fam/c"]
    assert new.cases["fam/b"].counters["barriers"] == 2
    text = path.read_text()
    update_baseline(_results(_case("fam/b", barriers=2)), path)
    assert path.read_text() == text                          # deterministic: no timestamps
    assert "compile" not in text and "median" not in text     # no wall-clock figures
    with pytest.raises(ValueError, match="cannot become the baseline"):
        update_baseline(_results(_case("fam/a"), disable=["vectorize"]), path)


# -- A/B statistics ------------------------------------------------------------------------

def test_ab_verdict_uses_the_measured_noise():
    ref = [0.100, 0.101, 0.099, 0.100, 0.102, 0.098, 0.100, 0.101, 0.099, 0.100]
    same = against.verdict([r * 1.001 for r in ref], ref)
    assert same["verdict"] == "same" and same["threshold"] == against.FLOOR
    slower = against.verdict([r * 1.2 for r in ref], ref)
    assert slower["verdict"] == "regression" and slower["change"] == pytest.approx(0.2)
    faster = against.verdict([r * 0.8 for r in ref], ref)
    assert faster["verdict"] == "improvement"
    noisy = [r * f for r, f in zip(ref, (1.0, 1.6, 0.7, 1.5, 0.8, 1.4, 0.9, 1.3, 0.6, 1.2))]
    wide = against.verdict(noisy, ref)
    assert wide["threshold"] > 0.1 and wide["verdict"] == "same"


@pytest.fixture
def head_checkout(tmp_path):
    """(HEAD's commit, where `--against HEAD` checks it out under tmp_path); the checkout is
    removed afterwards. Skipped outside a git repository (a source archive has no HEAD)."""
    root = ROOT
    head = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True,
                          text=True)
    if head.returncode:
        pytest.skip("not a git checkout: `--against` checks out another revision")
    path = (tmp_path / "against" / "HEAD").resolve()
    yield head.stdout.strip(), path
    subprocess.run(["git", "-C", str(root), "worktree", "remove", "--force", str(path)],
                   capture_output=True)


@pytest.mark.slow
def test_ab_against_head_times_both_trees(tmp_path, head_checkout):
    _, path = head_checkout
    case = select("elementwise/residual-add-f16")
    result = against.run("HEAD", case, root=ROOT, out_dir=tmp_path, rounds=2)
    assert "error" not in result, result.get("error")
    row = result["cases"][0]
    assert "error" not in row, row.get("error")
    assert len(row["this_data"]) == len(row["ref_data"]) == 2
    assert row["verdict"] in ("same", "regression", "improvement")
    assert (path / "core").is_dir()



def _tree(root, files: dict):
    """A source tree of `files` (path -> text) under `root`: another revision, as small as
    the workers need, with no harness/bench in it."""
    for path, text in files.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text(text)
    return root


def test_the_ab_workers_run_from_this_tree_in_a_tree_without_them(tmp_path):
    """The worker programs are files of this tree, run by path in the timed tree's
    interpreter: a revision older than them (here one with only the modules each worker
    needs) is timed, its prints stay off the protocol, and errors come back as replies."""
    tree = _tree(tmp_path / "other", {
        "core/__init__.py": "import types\n"
                            "def compile(func, out_idx=None, cache=True):\n"
                            "    print('the other tree prints')\n"
                            "    return types.SimpleNamespace(msl='kernel void k() {}')\n",
        "harness/__init__.py": "", "harness/gen/__init__.py": "",
        "harness/gen/family.py": "import types\n"
                                 "def get(name):\n"
                                 "    if name != 'fam':\n"
                                 "        raise KeyError(name)\n"
                                 "    return types.SimpleNamespace(skip_reason=None, build=lambda "
                                 "p: types.SimpleNamespace(func=p, out_idx=[1]))\n",
        "core/runtime/__init__.py": "",
        "core/runtime/emu/__init__.py": "import types\nALL_CHECKS = ('races',)\n"
                                        "def run_msl(msl, kernel, grid, threadgroup, buffers, "
                                        "checks):\n"
                                        "    buffers[0][:] = len(checks)\n"
                                        "    return types.SimpleNamespace(stats={'barriers': 1}, "
                                        "findings=[])\n"})
    assert not (tree / "harness" / "bench").exists()
    worker = against.Worker(tree, tmp_path / "compile.log")
    try:
        assert worker.time(SimpleNamespace(family="fam", params={"n": 1}))["seconds"] > 0
        assert "KeyError" in worker.time(SimpleNamespace(family="nope", params={}))["error"]
    finally:
        worker.close()
    assert "the other tree prints" in (tmp_path / "compile.log").read_text()

    job = tmp_path / "job"
    np.savez(str(job) + ".npz", b0=np.zeros(4, dtype=np.uint8))
    (tmp_path / "job.json").write_text(json.dumps({"msl": "", "kernel": "k", "grid": [1, 1, 1],
                                                   "threadgroup": [1, 1, 1]}))
    worker = emu_against.Worker(tree, tmp_path / "emu.log")
    try:
        on, off = worker.time(job, True), worker.time(job, False)
    finally:
        worker.close()
    assert on["stats"] == {"barriers": 1} and on["findings"] == []
    assert on["outputs"] != off["outputs"]             # the buffers after each run, hashed


def test_the_ab_workers_import_only_what_the_other_tree_has():
    """Nothing of harness.bench (the other revision may predate it): the standard library,
    numpy and the timed tree's core and harness.gen."""
    import ast

    for worker in (against.WORKER, emu_against.WORKER):
        tree = ast.parse(worker.read_text())
        names = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
        names |= {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
        assert names <= {"json", "sys", "time", "hashlib", "numpy", "core", "core.runtime",
                         "harness.gen"}, (worker.name, names)

def test_two_runs_preparing_the_same_checkout_both_get_it(tmp_path, head_checkout):
    """Two `--against HEAD` runs at once (two processes, two test workers): the second
    waits for the first's `git worktree add` and reuses the checkout; without the lock,
    its own `git worktree add` failed ("already exists")."""
    head, path = head_checkout
    with ThreadPoolExecutor(2) as pool:
        got = list(pool.map(lambda _: against.worktree("HEAD", ROOT, tmp_path), range(2)))
    assert got == [(path, head)] * 2
    assert (path / "core").is_dir()


def test_ab_with_an_unknown_ref_is_an_error_that_fails_the_gate(tmp_path):
    result = against.run("no-such-ref-xyz", [], root=ROOT, out_dir=tmp_path)
    assert "no-such-ref-xyz" in result["error"]
    res = _results(_case())
    res.against = result
    assert gate_failed(compare(res, None))


# -- reports -------------------------------------------------------------------------------

def test_reports_render_tables_and_plots(tmp_path, baseline):
    res = _results(_case("fam/a", barriers=1), _case("fam/b"),
                   {**_case("fam/s"), "status": "skip", "message": "core lacks T.gemm",
                    "counters": None, "modeled": None, "compile": None})
    res.against = {"ref": "main", "commit": "1" * 40, "rounds": 3, "method": "m",
                      "cases": [{"name": "fam/a", "this_median": 0.02, "ref_median": 0.01,
                                 "this_data": [0.02] * 3, "ref_data": [0.01] * 3,
                                 **against.verdict([0.02] * 3, [0.01] * 3)}]}
    changes = compare(res, baseline)
    paths = report.write_reports(res, changes, baseline, tmp_path, "baseline.json")
    md = paths["markdown"].read_text()
    assert md.startswith("# metaltile bench report") and "**FAIL" in md
    assert "| fam/a | barriers | 0 | 1 |" in md and "core lacks T.gemm" in md
    assert "Compile time A/B against main" in md
    page = paths["html"].read_text()
    assert "regression" in page
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        assert "Plots need matplotlib" in page
    else:
        assert page.count("<svg") == 3


def test_a_reference_is_printed_beside_the_modeled_real_shape_time(tmp_path):
    ref = Reference(2.0, "us/token", "seed, M2", chip="M2", per=4, omits="the cache")
    case = {**_case("fam/r"), "reference": ref.as_dict()}
    m2 = case["modeled"]["M2"]
    per_token = (max(m2["memory_seconds"], m2["compute_seconds"]) * case["full_scale"]
                 + m2["launch_seconds"]) / 4
    (row,) = report.reference_rows(_results(case, _case("fam/a")))
    assert row[:2] == ["fam/r", "2 us/token (M2)"]
    assert row[2] == f"{per_token * 1e6:,.4g} us/token"
    assert row[3] == f"{per_token / 2e-6:.3g}x" and row[4:] == ["seed, M2", "the cache"]
    md = report.markdown(_results(case), [], None)
    assert "## Modeled time against measured references" in md and "| fam/r | 2 us/token" in md
    assert report.reference_table(_results(_case("fam/a"))) is None


def test_a_reference_rejects_unknown_units_and_chips():
    assert Reference(695, "us", "seed").seconds == pytest.approx(695e-6)
    with pytest.raises(ValueError, match="unit 'furlongs'"):
        Reference(1, "furlongs", "x")
    with pytest.raises(ValueError, match="chip 'M9'"):
        Reference(1, "ms", "x", chip="M9")


def test_the_quantized_matmul_cases_carry_the_seed_figures():
    refs = {c.name: c.reference for c in CASES if c.family.startswith("qmm_")}
    assert {n: (r.value, r.unit, r.chip) for n, r in refs.items()} == {
        "qmm_fp8/decode-m1": (695, "us", "M2"), "qmm_fp8/prefill-m64": (695, "us", "M2"),
        "qmm_fp4/experts-bf16": (702, "us", "M2")}
    assert all(r.source and r.omits for r in refs.values())


def test_pytest_benchmark_json_has_its_fields(tmp_path):
    path = write_pytest_benchmark_json(_results(_case("fam/a")), tmp_path)
    doc = json.loads(path.read_text())
    (entry,) = doc["benchmarks"]
    assert entry["name"] == "compile[fam/a]" and entry["group"].startswith("compile")
    for key in ("min", "max", "mean", "stddev", "median", "rounds", "iterations", "data"):
        assert key in entry["stats"]
    assert {"machine_info", "commit_info", "datetime", "version"} <= set(doc)


def test_every_console_table_fits_100_columns_uncut(tmp_path):
    """What `harness bench` prints (cli._print_outcome) at 100 columns, at the widest the
    data gets: every chip (`--chips all`), the longest case name, a program's compile cell
    over the goal, a hand-tuned reference, an MLX peer, a measured reference, an A/B run
    and the gate's changes. Long cells fold; none is cut ("…", as "M4 M…" was with 12
    chips in one table) and no line is wider than 100."""
    from rich.console import Console

    from harness.bench.gate import Change
    from harness.bench.workflow import BenchOutcome
    from harness.cli import _print_outcome

    chips = tuple(roofline.CHIPS)
    name = max((c.name for c in CASES), key=len)
    doc = _document(_case(name), _case("fam/b", status="internal_error"))
    doc["chips"] = {n: roofline.CHIPS[n].describe() for n in chips}
    for c in doc["cases"]:
        c["modeled"] = modeled(c["counters"], c["minimum"], 100, chips)
    case = doc["cases"][0]
    case["first_compile"] = {"seconds": 0.3134, "kernels": 9, "stages": {}}
    case["reference"] = next(c.reference for c in CASES if c.reference).as_dict()
    case["power"] = {"rejects_scaling": 4.3e-05, "required_scaling": 2e-2, "weak": "",
                     "indistinguishable": {}}
    ratios = {ch: 1.0042 for ch in chips}
    case["hand_tuned"] = {"file": "softmax.metal", "kernel": "softmax_looped",
                          "threads": 256, "grid": 4, "geometry": "one row a threadgroup",
                          "status": "pass", "message": "", "findings": [],
                          "counters": case["counters"], "modeled": case["modeled"],
                          "ratios": {}, "modeled_ratios": ratios}
    peer = {"peer": "mlx", "version": "0.32.4", "headers": ["steel_gemm_splitk.h"],
            "kernel": "steel_gemm_splitk_nt_bfloat16_float32_bm16_bn32_bk16_wm2_wn2_MN_"
                      "naligned_K_taligned + steel_gemm_splitk_accum_bfloat16_float32",
            "host_code": "matmul.cpp", "grid": [1, 1, 1], "threadgroup": [32, 1, 1],
            "geometry": "(32, 2, 2)", "formats": "", "status": "not_applicable",
            "message": "", "findings": [], "counters": case["counters"],
            "modeled": case["modeled"], "ratios": {}, "modeled_ratios": ratios}
    case["peers"] = {"mlx": peer, "mlx-affine": {**peer, "status": "pass"}}
    doc["against"] = {"ref": "origin/main", "commit": "0" * 40, "rounds": 20, "cases": [
        {"name": name, "ref_median": 0.1603, "this_median": 0.2003, "change": 0.25,
         "noise": 0.021, "threshold": 0.063, "verdict": "regression"},
        {"name": "fam/b", "verdict": "error",
         "error": "failed to compile in the other revision: KeyError 'partials'"}]}
    results = run_from_dict(doc)
    changes = [Change(name, "generated/mlx-affine threadgroup_bytes_written", "regression",
                      0.6406, 1.3281),
               Change(name, "modeled M4 Max", "regression", 1.3e-4, 1.4e-4),
               Change(name, "mlx-affine peer", "new", detail="no baseline of the "
                      "generated / mlx-affine ratios yet (harness bench --peers mlx-affine "
                      "--update-baseline)")]
    console = Console(width=100, record=True, force_terminal=False)
    _print_outcome(console, BenchOutcome(results, changes, None, [],
                                         {"markdown": tmp_path / "bench.md",
                                          "html": tmp_path / "bench.html"}), "b.json")
    text = console.export_text()
    assert "M4 Max" in text and "modeled us per chip" in text and "hand-tuned" in text
    assert "…" not in text
    assert max(len(line) for line in text.splitlines()) <= 100


def test_harness_report_rerenders_saved_results(tmp_path, baseline, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    result = tmp_path / "saved" / "bench.json"
    result.parent.mkdir()
    result.write_text(json.dumps(_document(_case("fam/a", simd_ops=4), _case("fam/b"))))
    base = tmp_path / "baseline.json"
    assert main(["report", str(result), "--baseline", str(base)]) == 1
    out = capsys.readouterr().out
    assert "simd_ops" in out and "regression" in out
    assert out.strip().splitlines()[-1] == f"report: {result.parent / 'bench.html'}"
    clean = copy.deepcopy(json.loads(result.read_text()))
    clean["cases"][0] = _case("fam/a")
    result.write_text(json.dumps(clean))
    assert main(["report", str(result), "--baseline", str(base)]) == 0
    assert main(["report", str(tmp_path / "missing.json")]) == 2


def test_report_states_the_smallest_scaling_each_case_check_rejects():
    """The bench records its oracle check's power from the case's own oracle: the smallest
    scaling rejected, within what the output dtype demands, and the report prints it."""
    from harness.bench.measure import _oracle_facts
    from harness.gen import family

    built = family.get("softmax").build({"M": 4, "N": 4096, "bM": 1, "threads": 256,
                                         "dtype": "float16", "scale": 1.0})
    _, half, power = _oracle_facts(built)
    assert half and power["weak"] == ""
    assert power["required_scaling"] == 2e-2
    assert 0 < power["rejects_scaling"] < power["required_scaling"]
    case = {**_case("softmax/a"), "power": power}
    (row,) = report.power_rows(_results(case))
    assert row[0] == "softmax/a" and float(row[1]) == pytest.approx(
        power["rejects_scaling"], rel=0.05) and row[3] == "ok"
    assert "What each case's oracle check rejects" in report.markdown(_results(case), [])
