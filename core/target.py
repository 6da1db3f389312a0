"""The Metal target: every Apple-GPU fact the compiler, the harness and the emulator rely on.

One home for the numbers (docs/architecture.md, "The target"): passes, the MSL printer, the
harness generators and the emulator launcher read them from here; the emulator's C++ gets
them through a generated header (`core/runtime/emu/include/mt_target.h`, checked against
this module by a test), never by writing them again.

    from core.target import METAL, DTYPES
    METAL.simd_width                 32 lanes per simdgroup
    METAL.max_threads_per_group      1024
    METAL.threadgroup_memory_bytes   32 KiB
    DTYPES["bfloat16"].msl           "bfloat"
    SUPPORTED, bits(name)            the element types kernels may use, one's size in bits

Facts (Apple's Metal feature-set tables, GPU families Apple7-Apple9, M1-M4): simdgroups are
32 lanes; a threadgroup has at most 1024 threads (a compiled pipeline may allow fewer: 896
or 768 are seen); 32 KiB of threadgroup memory; native `bfloat` needs MSL 3.1 (macOS 14).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class DType:
    """One element type as each layer names it."""
    name: str            # the DSL's canonical name ("float16")
    bits: int            # storage size (bool is one byte, as in torch and MSL)
    msl: str             # MSL scalar type
    kind: str            # "float" | "int" | "uint" | "bool"

    @property
    def bytes(self) -> int:
        return self.bits // 8

    @property
    def is_float(self) -> bool:
        return self.kind == "float"

    @property
    def is_integer(self) -> bool:
        return self.kind in ("int", "uint")


DTYPES: dict[str, DType] = {d.name: d for d in (
    DType("float32", 32, "float", "float"),
    DType("float16", 16, "half", "float"),
    DType("bfloat16", 16, "bfloat", "float"),
    DType("int64", 64, "long", "int"),
    DType("int32", 32, "int", "int"),
    DType("int16", 16, "short", "int"),
    DType("int8", 8, "char", "int"),
    DType("uint64", 64, "ulong", "uint"),
    DType("uint32", 32, "uint", "uint"),
    DType("uint16", 16, "ushort", "uint"),
    DType("uint8", 8, "uchar", "uint"),
    DType("bool", 8, "bool", "bool"),
)}

# The element types a kernel may use: every type of the table (the DSL's dtype_name and
# the verifier reject the others). A scalar parameter (an 8-byte slot of the args struct,
# core/runtime/args.py) takes fewer.
SUPPORTED = tuple(DTYPES)
SCALAR_PARAM_DTYPES = ("int32", "int64", "float32", "float16", "bool")


def bits(name: str) -> int:
    """Storage size of one element in bits (bool is one byte, as in torch and MSL)."""
    return DTYPES[name].bits


# Names MSL source cannot use for a kernel, a parameter or a variable: C++'s keywords (MSL
# is C++-based) and MSL's own (address spaces, function qualifiers, the `metal` namespace).
MSL_KEYWORDS = frozenset("""
alignas alignof and and_eq asm auto bitand bitor bool break case catch char char8_t char16_t
char32_t class compl concept const consteval constexpr constinit const_cast continue co_await
co_return co_yield decltype default delete do double dynamic_cast else enum explicit export
extern false float for friend goto if inline int long mutable namespace new noexcept not
not_eq nullptr operator or or_eq private protected public register reinterpret_cast requires
return short signed sizeof static static_assert static_cast struct switch template this
thread_local throw true try typedef typeid typename union unsigned using virtual void volatile
wchar_t while xor xor_eq
kernel vertex fragment device constant thread threadgroup threadgroup_imageblock ray_data
object_data visible stage_in metal main
""".split())


@dataclass(frozen=True)
class MetalTarget:
    """Limits and rules of the Apple GPUs metaltile compiles for."""
    simd_width: int = 32
    max_threads_per_group: int = 1024
    # What some compiled pipelines allow (maxTotalThreadsPerThreadgroup below 1024, seen on
    # Apple GPUs for register-heavy kernels) and users therefore hard-code: 24 and 28
    # simdgroups, not powers of two
    pipeline_limits: tuple = (768, 896)
    threadgroup_memory_bytes: int = 32 * 1024
    msl_version: tuple = (3, 1)          # native bfloat (MSL 3.1, macOS 14)
    bf16_register_lanes: int = 2         # widest bf16 register vector in plans (bfloat2)
    register_lanes: int = 4              # widest MSL vector of the other types (half4, float4)
    # the element types vector code moves (bool and the 64- and 16-bit integers stay scalar)
    vector_dtypes: tuple = ("float32", "float16", "bfloat16", "int32", "int8", "uint8")
    # the widest memory access: 16 bytes (uint4, float4). A copy's run that is wider than
    # its type's register vector (8 halves, 4 or 8 bfloats, 8 or 16 bytes) moves as the
    # bits of a packed integer carrier of 64 or 128 bits (uint2, uint4), never computed on
    max_access_bytes: int = 16
    carrier_bits: tuple = (64, 128)
    matrix_tile: int = 8                 # simdgroup_matrix is 8x8
    # The math mode the kernels are compiled with (MTLCompileOptions.mathMode): "safe", what
    # torch.mps.compile_shader (the MPS backend) asks for on macOS 15+ (with precise FP32
    # functions; fastMathEnabled=NO before), unless PYTORCH_MPS_FAST_MATH is set ("fast").
    # "relaxed" is Metal's own default on Apple silicon. Generated code never relies on a
    # mode: it must be right under "fast" too (no exp(-inf) == 0, docs/architecture.md).
    math_mode: str = "safe"
    # a*b + c contracted into one fused multiply-add, per math mode (the emulator's clang
    # -ffp-contract): within an expression in "safe", as C and clang do by default (TileLang's
    # float32 GEMM test, `C += A * B` against torch at atol 1e-8, passes on Metal only so),
    # across expressions too where unsafe optimizations are allowed
    fp_contract: tuple = (("safe", "on"), ("relaxed", "fast"), ("fast", "fast"))
    # Bytes of fragments (thread-private arrays) one thread may hold before a long row is
    # streamed instead (core/transform/stream_rows.py). An Apple7/8 core has a ~208 KB
    # register file and needs 24 resident simdgroups (768 threads) to hide ALU latency;
    # fewer registers than that per thread and occupancy falls, and the compiler spills
    # (philipturner/metal-benchmarks): 208 KB / 768 = ~277 bytes per thread, of which 192
    # (48 32-bit registers) go to fragments and the rest to indices, addresses, scalars.
    fragment_register_budget_bytes: int = 192
    # Short constant loops the printer marks `#pragma unroll` (core/codegen/msl.py): a trip
    # count of at most `auto_unroll_trips` whose whole nest runs at most `auto_unroll_steps`
    # bodies. Apple's compiler leaves rolled the loops around simdgroup matrix ops, and a
    # rolled loop indexes the fragments by a runtime variable, which moves them out of
    # registers (TileLang #3195 reports a Qwen3.5-4B prefill kernel at 333 ms rolled, 56 ms
    # unrolled; TileLang's UnrollLoop pass takes the same two limits, auto_max_extent and
    # auto_max_step). The values are ours: they unroll the 4 x 4 fragment loops around
    # simdgroup_multiply_accumulate in a 64 x 64 GEMM and keep its k loop rolled; the step
    # bound keeps code growth at 64 bodies. Unmeasured on a GPU (none here).
    auto_unroll_trips: int = 4
    auto_unroll_steps: int = 64
    matrix_dtypes: tuple = ("float32", "float16", "bfloat16")
    simd_shuffle_dtypes: tuple = ("float32", "float16", "int32", "uint32", "int16",
                                  "uint16", "int8", "uint8", "bool")  # not bfloat
    # Atomics (MSL spec, "Atomic functions"): 32-bit objects only (atomic_int, atomic_uint,
    # atomic_float since MSL 3.0), memory_order_relaxed only; fetch_min/max exist for the
    # integer types, not for atomic_float; there is no atomic_half or atomic_bfloat. The
    # (dtype, op) pairs below are native; the float ones outside it are compare-exchange
    # loops on the aligned 32-bit word that holds the element (threadgroup arrays of 16-bit
    # elements updated so are declared as 32-bit words, for the alignment).
    atomic_native: tuple = (("int32", "add"), ("int32", "max"), ("int32", "min"),
                            ("uint32", "add"), ("uint32", "max"), ("uint32", "min"),
                            ("float32", "add"), ("int32", "or"), ("uint32", "or"))
    atomic_cas_dtypes: tuple = ("float32", "float16", "bfloat16")
    # atomic_load_explicit / atomic_store_explicit: the 32-bit types (a float32 on
    # threadgroup memory through atomic_uint and as_type, as its compare-exchange)
    atomic_load_store_dtypes: tuple = ("int32", "uint32", "float32")
    # atomic_float is used on device memory only: on threadgroup memory float atomics are
    # compiled as compare-exchange on the bits (as other MSL producers do, e.g. Metal.jl)
    atomic_float_native_spaces: tuple = ("device",)
    atomic_word_bits: int = 32

    def atomic_is_native(self, dtype: str, kind: str, space: str) -> bool:
        """Whether an atomic `kind` ("add", "max", ...) on a `dtype` element in address
        space `space` ("device", "threadgroup") is one MSL atomic function; else it is a
        compare-exchange loop on the 32-bit word that holds the element."""
        is_float = dtype.startswith(("float", "bfloat"))
        return (dtype, kind) in self.atomic_native and (
            not is_float or space in self.atomic_float_native_spaces)

    @property
    def math_modes(self) -> tuple:
        return tuple(mode for mode, _ in self.fp_contract)

    def contraction(self, math_mode: str) -> str:
        """clang's -ffp-contract value for `math_mode`; ValueError for an unknown mode."""
        table = dict(self.fp_contract)
        if math_mode not in table:
            raise ValueError(f"math mode {math_mode!r}: Metal's are {', '.join(table)}")
        return table[math_mode]

    def math_mode_in_effect(self) -> str:
        """The math mode the MPS backend compiles with here: PYTORCH_MPS_FAST_MATH (not "0")
        makes torch.mps.compile_shader use "fast"; else `math_mode`."""
        import os

        fast = os.environ.get("PYTORCH_MPS_FAST_MATH")
        return "fast" if fast is not None and fast != "0" else self.math_mode

    def vector_lanes(self, dtype: str) -> int:
        """The widest register vector of `dtype` a plan computes on (bfloat2, half4)."""
        return self.bf16_register_lanes if dtype == "bfloat16" else self.register_lanes

    def carrier_words(self, dtype: str, lanes: int) -> int | None:
        """32-bit words of the packed carrier that moves `lanes` elements of `dtype`
        (wider than its register vector) as bits: 2 (uint2) or 4 (uint4); None when the
        run fits a register vector or is no carrier's width."""
        nbits = DTYPES[dtype].bits * lanes
        if lanes <= self.vector_lanes(dtype) or nbits not in self.carrier_bits:
            return None
        return nbits // 32

    def copy_lanes(self, dtypes, last_extent: int) -> int:
        """The run width of a tile copied or filled by all threads: the most elements of
        every dtype in `dtypes` one access moves (`max_access_bytes`) that divide the tile's
        last extent (a run stays in one row); 1 when a dtype has no vectors (the caller
        keeps its layout's runs then)."""
        if any(d not in self.vector_dtypes for d in dtypes):
            return 1
        widest = max(DTYPES[d].bytes for d in dtypes)
        lanes = max(1, self.max_access_bytes // widest)
        while lanes > 1 and last_extent % lanes:
            lanes //= 2
        return lanes

    @property
    def msl_version_text(self) -> str:
        return f"{self.msl_version[0]}.{self.msl_version[1]}"


METAL = MetalTarget()


@dataclass(frozen=True)
class CoreCosts:
    """What on-chip work costs one Apple7/8 GPU core, for the lowering decisions that weigh
    two schedules of the same work (core/transform/lower_reduce.py: who combines the
    cross-simdgroup partials; harness/gen/gemv.py: staging the vector or reading it from
    device memory). The same figures as the bench's roofline model (harness/bench/roofline.py,
    `OnChip` of apple7/8, which cites each: metal-benchmarks for the measured ones; the
    threadgroup bandwidth and the barrier are estimates there too); a test keeps them equal
    (suites/unit/test_target.py). Costs are in core cycles per threadgroup: a simd reduction
    occupies one of the core's schedulers for `simd_reduce_cycles`, threadgroup and L2 bytes
    move at their bandwidth per cycle, and a barrier's latency is hidden by the other
    threadgroups resident on the core."""
    schedulers: int = 4                  # per core, each issues for one simdgroup
    simd_reduce_cycles: float = 14.54    # simd_sum / simd_max, per scheduler (throughput)
    threadgroup_bytes_per_cycle: int = 64
    l2_bytes_per_cycle: int = 32
    # DRAM bytes per core cycle of the M2 (100 GB/s over 10 cores at 1398 MHz), the chip the
    # bench reports its ratios on: where a kernel streams a weight matrix, what its on-chip
    # work hides under
    dram_bytes_per_cycle: float = 100e9 / (10 * 1398e6)
    barrier_cycles: int = 32
    max_threads: int = 3072              # resident threads per core
    threadgroup_memory_bytes: int = 60 * 1024   # per core, shared by resident threadgroups

    def resident_groups(self, threads: int, threadgroup_bytes: int) -> int:
        """Threadgroups a core holds at once by their threads and threadgroup memory (the
        register file, which the compiler does not see here, can allow fewer)."""
        by_threads = self.max_threads // max(1, threads)
        by_memory = self.threadgroup_memory_bytes // threadgroup_bytes if threadgroup_bytes \
            else by_threads
        return max(1, min(by_threads, by_memory))

    def simd(self, reductions: float) -> float:
        return reductions * self.simd_reduce_cycles / self.schedulers

    def threadgroup(self, nbytes: float) -> float:
        return nbytes / self.threadgroup_bytes_per_cycle

    def l2(self, nbytes: float) -> float:
        return nbytes / self.l2_bytes_per_cycle

    def dram(self, nbytes: float) -> float:
        return nbytes / self.dram_bytes_per_cycle

    def barriers(self, n: float, resident: int) -> float:
        return n * self.barrier_cycles / max(1, resident)


COSTS = CoreCosts()


def c_header() -> str:
    """The emulator's view of the target: `mt_target.h`, generated from this module.

    Limits as macros; each MSL scalar type's size as `MT_SIZEOF_<msl name>`, which the
    emulator's type header static_asserts against its C++ types."""
    lines = ["// Generated from core/target.py by core.target.c_header(); do not edit.",
             "// A test compares this file with the generator (suites/unit/test_target.py);",
             "// regenerate with: python -m core.target > core/runtime/emu/include/mt_target.h",
             "#pragma once",
             f"#define MT_SIMD_WIDTH {METAL.simd_width}",
             f"#define MT_MAX_THREADS_PER_GROUP {METAL.max_threads_per_group}",
             f"#define MT_THREADGROUP_MEMORY_BYTES {METAL.threadgroup_memory_bytes}",
             f"#define MT_MATRIX_TILE {METAL.matrix_tile}",
             f"#define MT_MSL_VERSION_MAJOR {METAL.msl_version[0]}",
             f"#define MT_MSL_VERSION_MINOR {METAL.msl_version[1]}"]
    lines += [f"#define MT_SIZEOF_{d.msl} {d.bytes}" for d in DTYPES.values()]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(c_header(), end="")
