"""A roofline model of Apple GPUs: modeled kernel time from the emulator's counters.

Input: the deterministic counters of one checked emulator run (device bytes read and
written, launches) and the kernel's arithmetic (`Built.flops`). Output: per chip

    time = max(device_bytes / bandwidth, flops / peak_flops) + launches * LAUNCH_OVERHEAD_S

and its parts (which roof binds). `ideal` is the same formula over the minimum traffic
(every input read once, every output written once) and one launch: the time no schedule
of this computation can beat on that chip, so `modeled / ideal` is the cost of the
compiler's choices as the model sees them.

Where the figures come from (README.md, "harness bench", has the table; docs/bench.md the model):
  - bandwidth: Apple's published unified-memory bandwidth per chip (M2, M3, M4 and all
    Pro/Max chips); for M1, which Apple never stated, LPDDR4X-4266 on a 128-bit bus
    (4266 MT/s x 16 B = 68.25 GB/s), consistent with Apple's "M2: 100GB/s, 50 percent more
    than M1".
  - peak FP32: derived as GPU cores x 128 ALUs per core x clock x 2 (an FMA is two
    operations). Cores are Apple's (the configuration with the most GPU cores of each
    chip); clocks: M1/M2 families from philipturner/metal-benchmarks (1278/1296/1398 MHz),
    which matches Apple's own "2.6 teraflops" (M1), "5.2/10.4 teraflops" (M1 Pro/Max);
    M3 and M4 clocks (1398, 1470 MHz) are third-party figures (Apple publishes neither
    clock nor TFLOPS for them) and the least certain numbers here.
  - peak FP16 = peak FP32: Apple7+ GPUs run half arithmetic at the float rate
    (metal-benchmarks: "F16/I16 arithmetic is not faster than 32-bit counterparts").
  - LAUNCH_OVERHEAD_S = 5 us per dispatch is an assumption, not a measurement: the order
    of magnitude of back-to-back dispatches encoded in one command buffer (how LLM
    runtimes launch); a command buffer waited on alone costs far more (Apple's MPS tuning
    hints: up to 2.5 ms). `harness bench` on a Mac measures GPU time to check it.

Limitations, plainly: no caches (every counted device byte is DRAM traffic; kernels that
re-read data from L1/L2 or the SLC are modeled slower than they run), peak bandwidth and
peak ALU rate are never reached in practice (real kernels get ~70-90% of bandwidth), no
occupancy, latency, threadgroup-memory bandwidth, barrier or simd-shuffle cost (those are
gated exactly as counters instead: a barrier's cost depends on latency hiding the model
has no way to know), one roof for the whole program even when it has several launches,
and integer and transcendental operations count like FMAs. It ranks compiler changes by
the traffic and launches they cause; it does not predict absolute times to better than a
factor of ~2.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

ALUS_PER_CORE = 128          # FP32 lanes per Apple GPU core (metal-benchmarks, Apple7-9)
LAUNCH_OVERHEAD_S = 5e-6     # assumed per dispatch, see above
DEFAULT_CHIPS = ("M1", "M2", "M3", "M4")


@dataclass(frozen=True)
class Chip:
    name: str
    gpu_cores: int
    clock_mhz: float
    bandwidth_gbs: float
    source: str                      # where the cores/bandwidth and the clock come from
    fp16_rate: float = 1.0           # FP16 : FP32 throughput

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

    def describe(self) -> dict:
        return {**asdict(self), "fp32_tflops": round(self.fp32_flops / 1e12, 3),
                "fp16_tflops": round(self.fp16_flops / 1e12, 3)}


_APPLE = "Apple newsroom/tech specs (cores, bandwidth)"
_MB = "clock: philipturner/metal-benchmarks"
_THIRD = "clock: third-party spec databases (Apple publishes none)"

CHIPS = {c.name: c for c in (
    Chip("M1", 8, 1278, 68.25, "cores: Apple; bandwidth: LPDDR4X-4266 x 128 bit (derived); "
         + _MB),
    Chip("M1 Pro", 16, 1296, 200, f"{_APPLE}; {_MB}"),
    Chip("M1 Max", 32, 1296, 400, f"{_APPLE}; {_MB}"),
    Chip("M2", 10, 1398, 100, f"{_APPLE}; {_MB}"),
    Chip("M2 Pro", 19, 1398, 200, f"{_APPLE}; {_MB} (>= 1398 MHz)"),
    Chip("M2 Max", 38, 1398, 400, f"{_APPLE}; {_MB} (>= 1398 MHz)"),
    Chip("M3", 10, 1398, 100, f"{_APPLE}; {_THIRD}"),
    Chip("M3 Pro", 18, 1398, 150, f"{_APPLE}; {_THIRD}"),
    Chip("M3 Max", 40, 1398, 400, f"{_APPLE}; {_THIRD}"),
    Chip("M4", 10, 1470, 120, f"{_APPLE}; {_THIRD}"),
    Chip("M4 Pro", 20, 1470, 273, f"{_APPLE}; {_THIRD}"),
    Chip("M4 Max", 40, 1470, 546, f"{_APPLE}; {_THIRD}"),
)}


@dataclass(frozen=True)
class Modeled:
    """Modeled time of one kernel instance on one chip, and its parts (seconds)."""
    seconds: float
    memory_seconds: float
    compute_seconds: float
    launch_seconds: float
    bound: str                       # "memory" or "compute"
    ideal_seconds: float             # minimum traffic, one launch

    @property
    def efficiency(self) -> float:
        """ideal / modeled: 1.0 means the kernel moves only what it must."""
        return self.ideal_seconds / self.seconds if self.seconds else 1.0


def model(chip: Chip, *, device_bytes: int, flops: int, launches: int,
          minimum_bytes: int, half: bool = False) -> Modeled:
    peak = chip.fp16_flops if half else chip.fp32_flops
    memory = device_bytes / chip.bandwidth
    compute = flops / peak
    launch = launches * LAUNCH_OVERHEAD_S
    ideal = max(minimum_bytes / chip.bandwidth, compute) + (LAUNCH_OVERHEAD_S if launches else 0)
    return Modeled(seconds=max(memory, compute) + launch, memory_seconds=memory,
                   compute_seconds=compute, launch_seconds=launch,
                   bound="memory" if memory >= compute else "compute", ideal_seconds=ideal)


def chips(names=DEFAULT_CHIPS) -> list[Chip]:
    unknown = [n for n in names if n not in CHIPS]
    if unknown:
        raise KeyError(f"unknown chip(s) {unknown}; known: {list(CHIPS)}")
    return [CHIPS[n] for n in names]
