"""A model of Apple GPUs that sees device traffic and on-chip work: modeled kernel time from
the emulator's counters.

Input: the deterministic counters of one checked emulator run (device bytes, per buffer
all and distinct, threadgroup bytes, barriers, simd operations by kind, launches,
threadgroups and threads, threadgroup memory per threadgroup) plus the kernel's arithmetic
(`Built.flops`) and the bytes of its thread-local arrays (`local_array_bytes`, read from the
MSL: the register estimate) with how often a thread touches each byte of each
(`local_array_profile`, also read from the MSL). Output: per chip

    occupancy   = the throughput a core reaches with its resident simdgroups (measured
                  points, interpolated: 4 -> 37%, 8 -> 64%, 24 or more -> 100%), from
                  the threadgroups a core holds at once (limited by its threads, its
                  threadgroup memory and its register file; a property of the kernel, as
                  if the grid filled the GPU, which the real shapes do)
    spills      = per thread, register demand beyond register file / resident threads,
                  its least-used bytes, each moved as often as the MSL touches it (at least
                  a store and a load), served by the cache level the resident threads'
                  spilled bytes fit, else partly DRAM (`spill_traffic`)
    memory      = max(DRAM bytes / DRAM bandwidth,      DRAM: every distinct byte once,
                      SLC bytes / SLC bandwidth,         plus repeat accesses no cache holds
                      all device bytes / L2 bandwidth)   (`memory_traffic`), spills included
    throughput  = max(memory / occupancy,
                      flops / peak flops / occupancy,
                      threadgroup bytes / threadgroup-memory bandwidth,
                      sum over kinds of simd ops x cycles of that kind / simd issue rate)
    barriers    = barrier events x BARRIER_CYCLES / (clock x cores x resident threadgroups)
    time        = throughput + barriers + launches x LAUNCH_OVERHEAD_S

and every term (`Modeled`), so a report can show which one binds. The throughput terms are
different units of the GPU working at once, so they overlap (max); a barrier is latency
that only other resident threadgroups can hide, so it adds. `ideal` is the device-and-ALU
roofline over the minimum traffic (every input read once, every output written once) and one
launch: the time no schedule of this computation can beat on that chip, so
`modeled / ideal` is the cost of the compiler's choices as the model sees them.

Where each figure comes from (docs/bench.md has the table, with every source):
  - bandwidth: Apple's published unified-memory bandwidth per chip (M2, M3, M4 and all
    Pro/Max chips); for M1, which Apple never stated, LPDDR4X-4266 on a 128-bit bus
    (4266 MT/s x 16 B = 68.25 GB/s), consistent with Apple's "M2: 100GB/s, 50 percent more
    than M1".
  - peak FP32: GPU cores x 128 ALUs per core x clock x 2 (an FMA is two operations). Cores
    are Apple's; clocks: M1/M2 families from philipturner/metal-benchmarks (1278/1296/1398
    MHz), which matches Apple's "2.6 teraflops" (M1), "5.2/10.4 teraflops" (M1 Pro/Max);
    M3 and M4 clocks (1398, 1470 MHz) are third-party figures, the least certain here.
  - peak FP16 = peak FP32 (metal-benchmarks: "F16/I16 arithmetic is not faster than 32-bit
    counterparts").
  - on-chip figures per GPU family (`OnChip`): register file ~208 KB, threadgroup memory
    ~60 KB and at most 3072 threads (96 simdgroups) per core, ALU latency hidden from 24
    simdgroups per core (also the fewest registers can leave: the compiler spills rather;
    below it, the fraction of peak FFMA throughput measured at ILP 4 with 4 and 8 simdgroups
    per core, 37% and 64%, interpolated, and applied to device bandwidth too),
    4 schedulers per core, a simd shuffle issued every 2.04 cycles per scheduler (256
    B/cycle of shuffle bandwidth per core), a simd_sum every 14.54, the other kinds in
    `_SIMD_CYCLES`; GPU L2 bandwidth 32 B/cycle per core ("On-GPU Data BW/Cycle"), the
    system-level cache's twice DRAM's ("SLC BW/Cycle" 15.4-19.8 B against "RAM BW/Cycle"
    7.7-9.9 B); L2 and system-level cache sizes per chip (its GPU table, M1 and M2
    families): philipturner/metal-benchmarks, measured on Apple7/8 (M1, M2); M3 and M4
    caches take the M2 counterpart's, an estimate. Threadgroup-memory bandwidth (64
    B/cycle per core, the on-core data bandwidth metal-benchmarks lists; it gives no
    figure of its own for threadgroup memory, only that it is "narrow") and the barrier
    cost (32 cycles) are
    estimates, not measurements. Apple9 (M3, M4) allocates registers and threadgroup memory
    dynamically ("Dynamic Caching"); no microbenchmark of it was found, so it takes the
    Apple7/8 figures, marked as an estimate.
  - spills (estimates): the register allowance (64 bytes a thread for scalars), the
    accesses a spilled byte costs (`SPILL_ACCESSES` at least, the MSL's count when more),
    write-back caches that keep a stack that fits them off DRAM; the 8 KB L1 data cache
    per core (metal-benchmarks) holds ~10 bytes a thread at 768 threads and is left out.
  - LAUNCH_OVERHEAD_S = 5 us per dispatch is an assumption: back-to-back dispatches encoded
    in one command buffer; `harness bench` on a Mac measures GPU time to check it.

Limitations, plainly: whether a repeat access hits a cache is decided per buffer by its
footprint (not by reuse distance or the other buffers competing for the cache), taken at
an upper bound of its real-shape size (the footprint at the shape that ran times the case's
scaling factor: a buffer that does not grow with the rows, such as a weight or an
activation vector, is judged larger than it is), accesses across launches are not cached,
peak rates are never reached in practice (real kernels get ~70-90% of bandwidth),
simd collectives are priced by throughput only (a `simd_sum`, 14.54 cycles, and a 5-step
shuffle butterfly, 5 x 3.04, are close; their latencies, 27.55 and ~5 x 5.9 cycles, are
not modeled), a reduction is priced at SUM<F32> whatever its type, registers are
estimated from thread-local arrays (all as if live at once) plus a fixed allowance for
scalars, and spills from the MSL's references (what the Metal compiler really allocates and
spills is unknown off a Mac; spills are priced as traffic, not latency), one occupancy for
the whole program
(threads and groups summed over its launches), integer and transcendental operations
count like FMAs. It ranks compiler changes; it does not predict
absolute times to better than a factor of ~2.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass

ALUS_PER_CORE = 128          # FP32 lanes per Apple GPU core (metal-benchmarks, Apple7-9)
LAUNCH_OVERHEAD_S = 5e-6     # assumed per dispatch, see above
# Accesses per spilled byte and thread, at least: one store and one load, the least a
# value kept off the register file costs; the MSL's own count (`local_array_profile`)
# when it is larger (a softmax holding its row touches each element 8 times as written).
SPILL_ACCESSES = 2
DEFAULT_CHIPS = ("M1", "M2", "M3", "M4")


@dataclass(frozen=True)
class OnChip:
    """Per-core figures of one Apple GPU family (docs/bench.md cites each)."""
    family: str
    register_file_bytes: int          # per core
    threadgroup_memory_bytes: int     # per core, shared by its resident threadgroups
    max_threads: int                  # resident threads per core
    simds_to_hide_latency: int        # resident simdgroups per core for full ALU use
    occupancy_points: tuple           # (resident simdgroups, fraction of peak) measured
    schedulers: int                   # per core, each issues for one simdgroup
    simd_op_cycles: float             # cycles per simd shuffle per scheduler (throughput)
    threadgroup_bytes_per_cycle: int  # threadgroup-memory bandwidth per core (estimate)
    barrier_cycles: int               # one threadgroup barrier (estimate)
    register_allowance_bytes: int     # scalars, addresses, indices per thread (estimate)
    source: str
    simd_cycles: tuple = ()           # (kind, scheduler cycles per collective), `SIMD_KINDS`
    l2_bytes_per_cycle: int = 32      # GPU L2 bandwidth per core
    slc_over_dram: float = 2.0        # system-level-cache bandwidth / DRAM bandwidth

    def simd_cost(self, kind: str) -> float:
        """Scheduler cycles one collective of `kind` occupies (throughput)."""
        return dict(self.simd_cycles)[kind]


_MB_ONCHIP = ("philipturner/metal-benchmarks (register file, threadgroup memory, threads, "
              "simds for full ALU use, schedulers, shuffle throughput); threadgroup bandwidth, "
              "barrier cycles and the register allowance are estimates")
# FFMA at ILP 4 (tile code has independent accumulators): 2.75 cycles at 4 simds/core,
# 1.60 at 8, 1.02 at 88 (metal-benchmarks); utilization is full from 24 simds/core.
_OCCUPANCY = ((4, 1.02 / 2.75), (8, 1.02 / 1.60), (24, 1.0))
# The simd collective kinds the emulator counts (stats "simd_<kind>_ops"), and what one
# costs a scheduler, in cycles of throughput (metal-benchmarks, intra-simd table, Apple7/8):
# SHUFFLE 2.04 plus the 1-cycle FADD32/FMAX32 that combines the shuffled value in a
# butterfly step (work a reduction does inside its own cycles); BROADCAST32 2.04;
# SUM<F32> 14.54 (reductions run on 32-bit accumulators; min/max/and/or are taken at the
# SUM/BITWISE_REDUCE32 figure, 14.53-14.54); PREFIX_ISUM<F32> 12.60; BALLOT 2.02. A
# simdgroup-matrix load or store is each lane loading or storing its elements: its bytes
# are in the device and threadgroup terms, so it takes no simd-pipeline cycles here
# (an estimate: no figure of its own is published).
SIMD_KINDS = ("shuffle", "broadcast", "reduce", "scan", "vote", "matrix_load", "matrix_store")
_SIMD_CYCLES = (("shuffle", 2.04 + 1.0), ("broadcast", 2.04), ("reduce", 14.54),
                ("scan", 12.60), ("vote", 2.02), ("matrix_load", 0.0), ("matrix_store", 0.0))
_APPLE7 = OnChip("apple7/8", 208 * 1024, 60 * 1024, 3072, 24, _OCCUPANCY, 4, 2.04, 64, 32, 64,
                 _MB_ONCHIP, _SIMD_CYCLES)
_APPLE9 = OnChip("apple9", 208 * 1024, 60 * 1024, 3072, 24, _OCCUPANCY, 4, 2.04, 64, 32, 64,
                 "estimate: Apple7/8 figures (no Apple9 microbenchmark found; Apple9 "
                 "allocates registers and threadgroup memory dynamically)", _SIMD_CYCLES)


@dataclass(frozen=True)
class Chip:
    name: str
    gpu_cores: int
    clock_mhz: float
    bandwidth_gbs: float
    source: str                      # where the cores/bandwidth and the clock come from
    on_chip: OnChip = _APPLE7
    fp16_rate: float = 1.0           # FP16 : FP32 throughput
    l2_bytes: int = 0                # GPU L2 (shared by the cores), 0: none modeled
    slc_bytes: int = 0               # system-level (last-level) cache, 0: none modeled
    cache_source: str = ""

    @property
    def fp32_flops(self) -> float:
        """Derived: cores x ALUs x clock x 2 (FMA)."""
        return self.gpu_cores * ALUS_PER_CORE * self.clock_mhz * 1e6 * 2

    @property
    def fp16_flops(self) -> float:
        return self.fp32_flops * self.fp16_rate

    @property
    def bandwidth(self) -> float:
        return self.bandwidth_gbs * 1e9

    @property
    def cycles_per_second(self) -> float:
        """Core-cycles per second over the whole GPU (clock x cores)."""
        return self.clock_mhz * 1e6 * self.gpu_cores

    @property
    def threadgroup_bandwidth(self) -> float:
        return self.cycles_per_second * self.on_chip.threadgroup_bytes_per_cycle

    @property
    def simd_ops_per_second(self) -> float:
        """Shuffles per second (the simd pipeline's issue rate)."""
        return self.cycles_per_second * self.on_chip.schedulers / self.on_chip.simd_op_cycles

    @property
    def l2_bandwidth(self) -> float:
        return self.cycles_per_second * self.on_chip.l2_bytes_per_cycle

    @property
    def slc_bandwidth(self) -> float:
        return self.bandwidth * self.on_chip.slc_over_dram

    def describe(self) -> dict:
        return {**asdict(self), "fp32_tflops": round(self.fp32_flops / 1e12, 3),
                "fp16_tflops": round(self.fp16_flops / 1e12, 3),
                "threadgroup_gbs": round(self.threadgroup_bandwidth / 1e9, 1),
                "simd_gops": round(self.simd_ops_per_second / 1e9, 2),
                "l2_gbs": round(self.l2_bandwidth / 1e9, 1),
                "slc_gbs": round(self.slc_bandwidth / 1e9, 1)}


_APPLE = "Apple newsroom/tech specs (cores, bandwidth)"
_MB = "clock: philipturner/metal-benchmarks"
_THIRD = "clock: third-party spec databases (Apple publishes none)"

KB, MB = 1024, 1024 * 1024
# Cache sizes: metal-benchmarks' GPU table (L2, and "L3", the system-level cache) for the
# M1 and M2 families; M3 and M4 take their M2 counterpart's, an estimate (no figure found).
_CACHE_MB = "caches: philipturner/metal-benchmarks GPU table"
_CACHE_EST = "caches: estimate (the M2 counterpart's; no published figure found)"

CHIPS = {c.name: c for c in (
    Chip("M1", 8, 1278, 68.25, "cores: Apple; bandwidth: LPDDR4X-4266 x 128 bit (derived); "
         + _MB, l2_bytes=768 * KB, slc_bytes=8 * MB, cache_source=_CACHE_MB),
    Chip("M1 Pro", 16, 1296, 200, f"{_APPLE}; {_MB}", l2_bytes=256 * KB, slc_bytes=24 * MB,
         cache_source=_CACHE_MB),
    Chip("M1 Max", 32, 1296, 400, f"{_APPLE}; {_MB}", l2_bytes=512 * KB, slc_bytes=48 * MB,
         cache_source=_CACHE_MB),
    Chip("M2", 10, 1398, 100, f"{_APPLE}; {_MB}", l2_bytes=1536 * KB, slc_bytes=8 * MB,
         cache_source=_CACHE_MB + " (L2 '~1.5M')"),
    Chip("M2 Pro", 19, 1398, 200, f"{_APPLE}; {_MB} (>= 1398 MHz)", l2_bytes=512 * KB,
         slc_bytes=24 * MB, cache_source=_CACHE_MB + " (L2 '~512K')"),
    Chip("M2 Max", 38, 1398, 400, f"{_APPLE}; {_MB} (>= 1398 MHz)", l2_bytes=1 * MB,
         slc_bytes=48 * MB, cache_source=_CACHE_MB + " (L2 '~1M')"),
    Chip("M3", 10, 1398, 100, f"{_APPLE}; {_THIRD}", _APPLE9, l2_bytes=1536 * KB,
         slc_bytes=8 * MB, cache_source=_CACHE_EST),
    Chip("M3 Pro", 18, 1398, 150, f"{_APPLE}; {_THIRD}", _APPLE9, l2_bytes=512 * KB,
         slc_bytes=24 * MB, cache_source=_CACHE_EST),
    Chip("M3 Max", 40, 1398, 400, f"{_APPLE}; {_THIRD}", _APPLE9, l2_bytes=1 * MB,
         slc_bytes=48 * MB, cache_source=_CACHE_EST),
    Chip("M4", 10, 1470, 120, f"{_APPLE}; {_THIRD}", _APPLE9, l2_bytes=1536 * KB,
         slc_bytes=8 * MB, cache_source=_CACHE_EST),
    Chip("M4 Pro", 20, 1470, 273, f"{_APPLE}; {_THIRD}", _APPLE9, l2_bytes=512 * KB,
         slc_bytes=24 * MB, cache_source=_CACHE_EST),
    Chip("M4 Max", 40, 1470, 546, f"{_APPLE}; {_THIRD}", _APPLE9, l2_bytes=1 * MB,
         slc_bytes=48 * MB, cache_source=_CACHE_EST),
)}


@dataclass(frozen=True)
class OnChipWork:
    """The counters of a run that the on-chip terms read (all zero: a device-only model).

    threadgroup_bytes           read + written, summed over threads and launches
    barriers                    barrier events (one per threadgroup per barrier reached)
    simd_ops                    simd collectives (one per simdgroup per collective)
    simd_kinds                  ((kind, count), ...) of `SIMD_KINDS`: simd_ops split by
                                kind; collectives no kind accounts for (counters from
                                before the split) take a shuffle's issue slot each
    groups, threads             threadgroups and threads launched (threads / groups is
                                the threadgroup size)
    threadgroup_memory_bytes    declared per threadgroup (the largest launch's)
    local_array_bytes           thread-local arrays per thread (`local_array_bytes`)
    array_profile               ((bytes, accesses per byte), ...) of those arrays, least
                                accessed first (`local_array_profile`), (): not counted
    """
    threadgroup_bytes: int = 0
    barriers: int = 0
    simd_ops: int = 0
    groups: int = 0
    threads: int = 0
    threadgroup_memory_bytes: int = 0
    local_array_bytes: int = 0
    simd_kinds: tuple = ()
    array_profile: tuple = ()

    @classmethod
    def of(cls, counters: dict) -> "OnChipWork":
        return cls(threadgroup_bytes=counters.get("threadgroup_bytes_read", 0)
                   + counters.get("threadgroup_bytes_written", 0),
                   barriers=counters.get("barriers", 0), simd_ops=counters.get("simd_ops", 0),
                   groups=counters.get("groups", 0), threads=counters.get("threads", 0),
                   threadgroup_memory_bytes=counters.get("threadgroup_memory_bytes", 0),
                   local_array_bytes=counters.get("local_array_bytes", 0),
                   array_profile=tuple(tuple(r) for r in
                                       counters.get("local_array_profile") or ()),
                   simd_kinds=tuple((k, counters[f"simd_{k}_ops"]) for k in SIMD_KINDS
                                    if counters.get(f"simd_{k}_ops")))

    def simd_cycles(self, on_chip: OnChip) -> float:
        """Scheduler cycles of all simd collectives, each priced by its kind."""
        counted = sum(n for _, n in self.simd_kinds)
        return (sum(n * on_chip.simd_cost(k) for k, n in self.simd_kinds)
                + max(0, self.simd_ops - counted) * on_chip.simd_op_cycles)


@dataclass(frozen=True)
class BufferTraffic:
    """One device buffer's bytes in one launch: all accesses, and the distinct bytes
    touched (the emulator's `device_unique_bytes_*`). read + written - unique is what
    the launch touches again: re-reads (an activation vector every threadgroup reads)
    and re-writes."""
    read: int
    written: int
    unique_read: int
    unique_written: int

    @property
    def footprint(self) -> int:
        """Distinct bytes touched (an upper bound: a byte read and written counts twice);
        all bytes when the distinct ones were not counted."""
        return (self.unique_read + self.unique_written) or (self.read + self.written)

    @property
    def again(self) -> int:
        return max(0, self.read + self.written - self.footprint)


def buffer_traffic(stats: list[dict]) -> tuple:
    """`BufferTraffic` per buffer per launch from the emulator's per-launch stats."""
    out = []
    for s in stats:
        reads, writes = s.get("device_bytes_read", {}), s.get("device_bytes_written", {})
        ureads = s.get("device_unique_bytes_read", {})
        uwrites = s.get("device_unique_bytes_written", {})
        for b in sorted(set(reads) | set(writes)):
            t = BufferTraffic(int(reads.get(b, 0)), int(writes.get(b, 0)),
                              int(ureads.get(b, 0)), int(uwrites.get(b, 0)))
            if t.read or t.written:
                out.append(t)
    return tuple(out)


@dataclass(frozen=True)
class MemoryTraffic:
    """Where one kernel's device bytes are served from on one chip (bytes).

    Every distinct byte a launch touches comes from DRAM once. A buffer's repeat
    accesses are served by the smallest cache its footprint fits (the GPU's L2, else
    the system-level cache); a footprint larger than the system-level cache gets the
    fraction of it that fits, the rest from DRAM. Each level passes on what it does not
    serve: the L2 sees every byte, the system-level cache what the L2 does not serve."""
    total: int
    dram: float
    l2_hits: float
    slc_hits: float

    @property
    def cached(self) -> float:
        return self.l2_hits + self.slc_hits

    def __add__(self, other: "MemoryTraffic") -> "MemoryTraffic":
        return MemoryTraffic(self.total + other.total, self.dram + other.dram,
                             self.l2_hits + other.l2_hits, self.slc_hits + other.slc_hits)

    def seconds_by_level(self, chip: "Chip") -> dict:
        """Each level's time for its bytes: DRAM what no cache serves, the system-level
        cache what the L2 does not serve, the L2 every byte (the slowest binds)."""
        return {"DRAM": self.dram / chip.bandwidth,
                "SLC": (self.total - self.l2_hits) / chip.slc_bandwidth,
                "L2": self.total / chip.l2_bandwidth}


NO_TRAFFIC = MemoryTraffic(0, 0.0, 0.0, 0.0)


def _served(chip: "Chip", size: float, nbytes: float) -> tuple:
    """(L2, SLC, DRAM) bytes of `nbytes` accesses to a footprint of `size` bytes: all from
    the smallest cache it fits; past the system-level cache, the fraction that fits from
    it and the rest from DRAM."""
    if size <= chip.l2_bytes:
        return nbytes, 0.0, 0.0
    if size <= chip.slc_bytes:
        return 0.0, nbytes, 0.0
    fits = chip.slc_bytes / size
    return 0.0, nbytes * fits, nbytes * (1 - fits)


def memory_traffic(chip: Chip, buffers, footprint_scale: float = 1.0) -> MemoryTraffic:
    """`footprint_scale` multiplies each footprint for the fit test only: a bench case
    passes its scaling factor, so hits are decided for the real shape (conservatively: no
    buffer grows faster than the work), not for the cut-down one that ran."""
    dram = l2 = slc = 0.0
    total = 0
    for b in buffers:
        total += b.read + b.written
        dram += b.footprint
        if not b.again:
            continue
        hit_l2, hit_slc, miss = _served(chip, b.footprint * footprint_scale, b.again)
        l2, slc, dram = l2 + hit_l2, slc + hit_slc, dram + miss
    return MemoryTraffic(total, dram, l2, slc)


def spilled_accesses(spilled: int, profile=()) -> float:
    """Bytes one thread moves to and from its stack for `spilled` bytes: the compiler keeps
    the most used values in registers, so the spilled bytes are the least accessed ones of
    `profile` ((bytes, accesses per byte), least accessed first), each at least
    `SPILL_ACCESSES` times, as are bytes no array accounts for (scalars) and arrays whose
    accesses were not counted. A lower bound of what the real allocation moves."""
    moved, left = 0.0, spilled
    for nbytes, per_byte in profile:
        take = min(left, nbytes)
        moved += take * max(SPILL_ACCESSES, per_byte or 0)
        left -= take
    return moved + left * SPILL_ACCESSES


def spill_traffic(chip: "Chip", occ: Occupancy, threads: int, footprint_scale: float = 1.0,
                  profile=()) -> MemoryTraffic:
    """The device-memory traffic of register spills: every thread of the launch moves
    `spilled_accesses` bytes for its `spilled_bytes_per_thread` (the least used bytes of
    its arrays, each as often as the MSL touches it; one store and one load at least).
    The stack lives where the spilled bytes of the threads resident at once fit (the
    threads of the real shape, `threads x footprint_scale`, at most `threads_per_core` on
    every core: a grid that fills the GPU, as the occupancy assumes): the L2, else the
    system-level cache, else partly DRAM (`_served`). A stack slot is reused by the next
    thread that takes it, so, unlike a buffer, no byte comes from DRAM when it fits a
    cache (the caches are taken to be write-back: an estimate)."""
    if not occ.spilled_bytes_per_thread or not threads:
        return NO_TRAFFIC
    nbytes = spilled_accesses(occ.spilled_bytes_per_thread, profile) * threads
    resident = min(threads * footprint_scale, occ.threads_per_core * chip.gpu_cores)
    l2, slc, dram = _served(chip, occ.spilled_bytes_per_thread * resident, nbytes)
    return MemoryTraffic(nbytes, dram, l2, slc)


def spill_level(traffic: MemoryTraffic) -> str:
    """Where spill traffic is served: "L2", "SLC", "SLC+DRAM", or "" (no spills)."""
    if not traffic.total:
        return ""
    if traffic.l2_hits:
        return "L2"
    return "SLC+DRAM" if traffic.dram else "SLC"


@dataclass(frozen=True)
class Occupancy:
    """How many threadgroups of this kernel one core holds at once, and what limits it."""
    groups_per_core: int
    limit: str                       # "threads", "threadgroup memory", "registers", "none"
    simdgroups_per_core: int
    factor: float                    # fraction of peak throughput (`occupancy_factor`)
    register_bytes_per_thread: int   # demand: thread-local arrays + the scalar allowance
    threads_per_core: int = 0        # resident threads (groups x threadgroup size)
    spilled_bytes_per_thread: int = 0   # demand beyond the register-file share at that
                                        # occupancy: kept on the stack (`spill_traffic`)


def occupancy(on_chip: OnChip, work: OnChipWork, simd_width: int) -> Occupancy:
    """Resident threadgroups per core: the fewest that its threads, its threadgroup memory
    and its register file allow (at least one: a kernel that launches runs). Registers
    never push a core below `simds_to_hide_latency` simdgroups: the Metal compiler spills
    to device memory rather (metal-benchmarks), so a kernel needing more is marked
    "registers (spills)", keeps that floor, and what each thread needs beyond its share of
    the register file there (file / resident threads) is `spilled_bytes_per_thread`,
    charged as memory traffic by `spill_traffic`."""
    regs = on_chip.register_allowance_bytes + work.local_array_bytes
    if not work.groups or not work.threads:
        return Occupancy(0, "none", 0, 1.0, regs)
    per_group = max(1, round(work.threads / work.groups))
    simds_per_group = -(-per_group // simd_width)
    floor = -(-on_chip.simds_to_hide_latency // simds_per_group)
    by_registers = on_chip.register_file_bytes // (regs * per_group)
    limits = {"threads": on_chip.max_threads // per_group,
              "registers": by_registers if by_registers >= floor else floor}
    if work.threadgroup_memory_bytes:
        limits["threadgroup memory"] = (on_chip.threadgroup_memory_bytes
                                        // work.threadgroup_memory_bytes)
    limit = min(limits, key=limits.get)
    groups = max(1, limits[limit])
    if limit == "registers" and by_registers < floor:
        limit = "registers (spills)"
    simds = groups * simds_per_group
    resident = groups * per_group
    spilled = max(0, regs - on_chip.register_file_bytes // resident)
    return Occupancy(groups, limit, simds, occupancy_factor(on_chip, simds), regs,
                     resident, spilled)


def occupancy_factor(on_chip: OnChip, simds: int) -> float:
    """Fraction of peak throughput with `simds` resident simdgroups per core: linear
    between the measured `occupancy_points` (and from 0 at 0), 1.0 from the last one."""
    lo_s, lo_f = 0, 0.0
    for hi_s, hi_f in on_chip.occupancy_points:
        if simds <= hi_s:
            return lo_f + (hi_f - lo_f) * (simds - lo_s) / (hi_s - lo_s)
        lo_s, lo_f = hi_s, hi_f
    return 1.0


@dataclass(frozen=True)
class Modeled:
    """Modeled time of one kernel instance on one chip, and its terms (seconds)."""
    seconds: float
    memory_seconds: float            # the slowest memory level's bytes / its bandwidth / occ.
    compute_seconds: float           # flops / peak / occupancy factor
    threadgroup_seconds: float
    simd_seconds: float
    barrier_seconds: float
    launch_seconds: float
    occupancy: float                 # the factor (1.0: latency fully hidden)
    groups_per_core: int
    occupancy_limit: str
    bound: str                       # the largest throughput term's name
    ideal_seconds: float             # minimum traffic, one launch, device and ALU only
    dram_bytes: float = 0.0          # device bytes served by DRAM
    cached_bytes: float = 0.0        # device bytes served by the L2 or system-level cache
    memory_level: str = "DRAM"       # the memory level that binds the memory term
    spill_seconds: float = 0.0       # the part of the memory term that register spills add
    spill_bytes: float = 0.0         # spill traffic (stores + loads), in the bytes above
    spill_level: str = ""            # where it is served (`spill_level`), "": no spills
    spilled_bytes_per_thread: int = 0

    @property
    def efficiency(self) -> float:
        """ideal / modeled: 1.0 means the kernel moves only what it must."""
        return self.ideal_seconds / self.seconds if self.seconds else 1.0

    def terms(self) -> dict:
        """Each term's seconds, in the order the report shows them ("spill" is the part of
        "memory" that register spills add, not a term of its own)."""
        return {"memory": self.memory_seconds, "spill": self.spill_seconds,
                "compute": self.compute_seconds,
                "threadgroup": self.threadgroup_seconds, "simd": self.simd_seconds,
                "barrier": self.barrier_seconds, "launch": self.launch_seconds}


NO_ON_CHIP_WORK = OnChipWork()      # a device-and-ALU-only model


def model(chip: Chip, *, device_bytes: int, flops: int, launches: int,
          minimum_bytes: int, half: bool = False, work: OnChipWork = NO_ON_CHIP_WORK,
          simd_width: int | None = None, buffers=(), footprint_scale: float = 1.0) -> Modeled:
    """`buffers`: the `BufferTraffic` of every buffer and launch (`buffer_traffic`), for
    the cache term, whose fit test scales footprints by `footprint_scale`
    (`memory_traffic`); without them every device byte is DRAM traffic."""
    if simd_width is None:
        from core.target import METAL
        simd_width = METAL.simd_width
    peak = chip.fp16_flops if half else chip.fp32_flops
    occ = occupancy(chip.on_chip, work, simd_width)
    device = (memory_traffic(chip, buffers, footprint_scale) if buffers
              else MemoryTraffic(device_bytes, device_bytes, 0, 0))
    spills = spill_traffic(chip, occ, work.threads, footprint_scale, work.array_profile)
    traffic = device + spills
    levels = traffic.seconds_by_level(chip)
    level = max(levels, key=levels.get)
    spill = (levels[level] - max(device.seconds_by_level(chip).values())) / occ.factor
    simd_rate = chip.cycles_per_second * chip.on_chip.schedulers
    throughput = {
        "memory": levels[level] / occ.factor,
        "compute": flops / peak / occ.factor,
        "threadgroup": work.threadgroup_bytes / chip.threadgroup_bandwidth,
        "simd": work.simd_cycles(chip.on_chip) / simd_rate,
    }
    bound = max(throughput, key=throughput.get)
    barrier = (work.barriers * chip.on_chip.barrier_cycles
               / (chip.cycles_per_second * max(1, occ.groups_per_core)))
    launch = launches * LAUNCH_OVERHEAD_S
    ideal = max(minimum_bytes / chip.bandwidth, flops / peak) + (LAUNCH_OVERHEAD_S
                                                                  if launches else 0)
    return Modeled(seconds=throughput[bound] + barrier + launch,
                   memory_seconds=throughput["memory"], compute_seconds=throughput["compute"],
                   threadgroup_seconds=throughput["threadgroup"],
                   simd_seconds=throughput["simd"], barrier_seconds=barrier,
                   launch_seconds=launch, occupancy=occ.factor,
                   groups_per_core=occ.groups_per_core, occupancy_limit=occ.limit,
                   bound=bound, ideal_seconds=ideal, dram_bytes=traffic.dram,
                   cached_bytes=traffic.cached, memory_level=level, spill_seconds=spill,
                   spill_bytes=spills.total, spill_level=spill_level(spills),
                   spilled_bytes_per_thread=occ.spilled_bytes_per_thread)


# A thread-local array of the MSL text: `float x[28];`, `float4 v[ITEMS];` (not
# `threadgroup`, not a pointer); and the object-like #defines its extents may name.
_LOCAL_ARRAY = re.compile(r"^\s*(?:const\s+)?([A-Za-z_]\w*)\s+([A-Za-z_]\w*)\s*"
                          r"((?:\[[^\]\n]+\])+)\s*(?:=[^;]*)?;", re.M)
_DEFINE = re.compile(r"^\s*#\s*define\s+([A-Za-z_]\w*)\s+(.+?)\s*$", re.M)
_INTEGER_EXPR = re.compile(r"^[\d\s()+\-*/%]+$")


def _extent(text: str, defines: dict, depth: int = 0) -> int | None:
    """An array extent as an integer: a literal, or integer arithmetic over #defines
    (C's `/` on positive ints is Python's `//`); None when it is anything else."""
    expanded = re.sub(r"[A-Za-z_]\w*", lambda m: f"({defines[m.group(0)]})"
                      if m.group(0) in defines else m.group(0), text)
    if expanded != text and depth < 8:
        return _extent(expanded, defines, depth + 1)
    if not _INTEGER_EXPR.match(expanded):
        return None
    return int(eval(expanded.replace("/", "//"), {"__builtins__": {}}))  # digits only


def _kernel_body(msl: str, kernel: str | None) -> str:
    """The text of the function `kernel` (up to the next kernel), or the whole text."""
    if kernel is None:
        return msl
    start = re.search(rf"\bvoid\s+{re.escape(kernel)}\s*\(", msl)
    if start is None:
        raise ValueError(f"no kernel function '{kernel}' in the MSL text")
    after = re.search(r"\[\[\s*kernel|\bkernel\s+void", msl[start.end():])
    return msl[start.start():start.end() + after.start() if after else len(msl)]


def _local_arrays(body: str, defines: dict) -> list:
    """(name, element bytes, element count) of each thread-local array `body` declares
    with extents `_extent` can read (a name declared in two kernels of one library twice)."""
    from core.target import DTYPES
    by_msl = {d.msl: d.bytes for d in DTYPES.values()}
    by_msl.update({f"{d.msl}{n}": d.bytes * n for d in DTYPES.values() for n in (2, 3, 4)})
    out = []
    for m in _LOCAL_ARRAY.finditer(body):
        elem, name, dims = m.group(1), m.group(2), m.group(3)
        if elem in ("threadgroup", "device", "constant", "return", "typedef"):
            continue
        count = 1
        for d in re.findall(r"\[([^\]]+)\]", dims):
            extent = _extent(d, defines)
            if extent is None:
                break
            count *= extent
        else:
            out.append((name, by_msl.get(elem, 4), count))
    return out


def local_array_bytes(msl: str, kernel: str | None = None) -> int:
    """Bytes of the thread-local arrays one thread of `msl` declares: of the function
    `kernel` (its text up to the next kernel), or of the whole text; scalar and 2-4 vector
    element types of the dtype table, others 4 bytes an element; extents may be #define
    arithmetic. The register estimate of the occupancy term: a fragment held in registers."""
    arrays = _local_arrays(_kernel_body(msl, kernel), dict(_DEFINE.findall(msl)))
    return sum(size * count for _, size, count in arrays)


# A counted loop as the printer and hand-written kernels write it:
# `for (int k = 0; k < 149; ++k)`, `for (uint i = 0; i < ITEMS; i++)`, `... i += 4)`.
_FOR = re.compile(r"\bfor\s*\(\s*(?:const\s+)?(?:int|uint|short|ushort|long|ulong)?\s*"
                  r"([A-Za-z_]\w*)\s*=\s*([^;]+);\s*\1\s*(<=?)\s*([^;]+);\s*"
                  r"(?:\+\+\s*\1|\1\s*\+\+|\1\s*\+=\s*([^)]+))\s*\)")


def _trips(m: re.Match, defines: dict) -> int | None:
    start, end = _extent(m.group(2), defines), _extent(m.group(4), defines)
    step = _extent(m.group(5), defines) if m.group(5) else 1
    if start is None or end is None or not step or step < 0:
        return None
    end += m.group(3) == "<="
    return max(0, -(-(end - start) // step))


def local_array_accesses(msl: str, kernel: str | None = None) -> dict:
    """name -> (bytes, bytes accessed per thread) of each thread-local array of `msl` (or
    of its function `kernel`), as the MSL is written: every reference to an element
    (`x[i]`, either side of an assignment) counts its element's bytes once per iteration
    of the counted loops around it, branches inside taken (what runs at most; the Metal
    compiler may fuse loops and do less). The accessed bytes are None when a reference
    lies in a loop whose trip count is not a constant or #define arithmetic. Arrays of one
    name in several kernels of a library count as one: their bytes and accesses add."""
    defines = dict(_DEFINE.findall(msl))
    body = _kernel_body(msl, kernel)
    arrays = {}
    for name, size, count in _local_arrays(body, defines):
        element, total = arrays.get(name, (size, 0))
        arrays[name] = (element, total + size * count)
    if not arrays:
        return {}
    accessed = dict.fromkeys(arrays, 0)
    ref = re.compile(r"\b(" + "|".join(map(re.escape, arrays)) + r")\s*\[")
    depth, loops, pending = 0, [], []               # loops: (brace depth inside, trips)
    for line in body.splitlines():
        code = line.split("//", 1)[0]
        header = _FOR.search(code)
        trips = [t for _, t in loops] + pending
        pending = []
        if header:
            rest = code[header.end():]
            if "{" in rest:
                loops.append((depth + 1, _trips(header, defines)))
            elif rest.strip():                      # `for (...) x[i] = 0;`
                trips.append(_trips(header, defines))
            else:                                   # the statement on the next line
                pending = trips[len(loops):] + [_trips(header, defines)]
            code = rest
        declared = _LOCAL_ARRAY.match(code)
        for m in ref.finditer(code):
            name = m.group(1)
            if (declared and name == declared.group(2)) or accessed[name] is None:
                continue
            n = arrays[name][0]
            for t in trips:
                n = None if t is None else n * t
                if n is None:
                    break
            accessed[name] = None if n is None else accessed[name] + n
        depth += code.count("{") - code.count("}")
        while loops and depth < loops[-1][0]:
            loops.pop()
    return {name: (nbytes, accessed[name]) for name, (_, nbytes) in arrays.items()}


def local_array_profile(msl: str, kernel: str | None = None) -> list:
    """[bytes, accesses per byte] of each thread-local array of `msl` (or of its function
    `kernel`), least accessed first (`local_array_accesses`; accesses None when they cannot
    be counted, listed last): what `spill_traffic` reads to price the bytes that spill."""
    arrays = local_array_accesses(msl, kernel).values()
    rows = [[n, None if a is None else round(a / n, 3)] for n, a in arrays if n]
    return sorted(rows, key=lambda r: (r[1] is None, r[1] or 0, -r[0]))


def chips(names=DEFAULT_CHIPS) -> list[Chip]:
    unknown = [n for n in names if n not in CHIPS]
    if unknown:
        raise KeyError(f"unknown chip(s) {unknown}; known: {list(CHIPS)}")
    return [CHIPS[n] for n in names]
