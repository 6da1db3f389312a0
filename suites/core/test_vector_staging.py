"""Threadgroup staging moves vectors both ways (issue 13, item 4): copies device ->
threadgroup, threadgroup -> fragment, fragment -> threadgroup and threadgroup -> device load
and store the widest vector the layout and the alignment proof allow, converting inline
(`*(threadgroup float4*)(S + i) = float4(h4)`); an array accessed so is declared as words of
that width. A copy into threadgroup memory whose device side cannot be a vector gathers its lanes
into registers and stores them as one; where the threadgroup side's own proof fails (odd or
padded rows) the copy falls back to elements. The race and bounds checkers see every byte of a vector access, and the
barrier planner's barriers stay necessary."""

import re

import numpy as np
import pytest
import torch

import core
import core.language as T
from harness.check.barriers import check_barriers, check_case, observable
from harness.check.compare import assert_close
from harness.gen import family as families
from harness.gen.inputs import random_tensor
from harness.gen.strategies import FLOATS
from core.runtime import emu

TORCH = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}
# MSL vector type of a 4-lane access per dtype: bf16 registers hold 2 lanes (bfloat2), a
# pure bf16 copy moves 4 lanes as the bits of a uint2 (core/target.py)
COPY4 = {"float32": "float4", "float16": "half4", "bfloat16": "uint2"}
CONVERT = {"float32": "float4", "float16": "half4", "bfloat16": "bfloat2"}
WORDS4 = {"float32": "uint4", "float16": "uint2", "bfloat16": "uint2"}


# the bench's decode GEMM (gemm/decode-f16), K shortened
STAGED_GEMM = {"M": 8, "N": 128, "K": 128, "bM": 16, "bN": 64, "bK": 32, "threads": 128,
               "dtype": "float16", "out_dtype": "float16", "trans_A": False, "trans_B": True,
               "num_stages": 2, "init": "clear"}


def staged(M, N, bM, bN, dtype, threads=128, pad=0):
    """A -> S (shared) -> F (float32 fragment) -> F * 2 + 1 -> S2 (shared) -> B: every copy
    direction through threadgroup memory, with a conversion on the fragment side."""
    @T.prim_func
    def stage(A: T.Tensor((M, N), dtype), B: T.Tensor((M, N), dtype)):
        with T.Kernel(T.ceildiv(N, bN), T.ceildiv(M, bM), threads=threads) as (bx, by):
            S = T.alloc_shared((bM, bN + pad), dtype)
            S2 = T.alloc_shared((bM, bN + pad), dtype)
            F = T.alloc_fragment((bM, bN), "float32")
            T.copy(A[by * bM, bx * bN], S[0:bM, 0:bN])
            T.copy(S[0:bM, 0:bN], F)
            for i, j in T.Parallel(bM, bN):
                F[i, j] = F[i, j] * 2.0 + 1.0
            T.copy(F, S2[0:bM, 0:bN])
            T.copy(S2[0:bM, 0:bN], B[by * bM, bx * bN])
    return stage


def copied(M, N, bM, bN, dtype):
    """A -> S (shared) -> B on 32 threads: a tile only the two copies touch."""
    @T.prim_func
    def stage(A: T.Tensor((M, N), dtype), B: T.Tensor((M, N), dtype)):
        with T.Kernel(T.ceildiv(N, bN), T.ceildiv(M, bM), threads=32) as (bx, by):
            S = T.alloc_shared((bM, bN), dtype)
            T.copy(A[by * bM, bx * bN], S)
            T.copy(S, B[by * bM, bx * bN])
    return stage


def run_staged(run, M, N, bM, bN, dtype, **kw):
    kernel = core.compile(staged(M, N, bM, bN, dtype, **kw), out_idx=[1])
    a = random_tensor((M, N), dtype, M * N, scale=4.0)
    oracle = (a.double() * 2.0 + 1.0).to(TORCH[dtype])  # rounded once, as the kernel's store
    assert_close(run(kernel, a), oracle, dtype)
    return kernel.msl


def accesses(msl, name):
    """(vector types through which `name` is accessed, whether it is also indexed
    element-wise)."""
    vectors = set(re.findall(rf"\(threadgroup (\w+)\*\)\({name} \+", msl))
    return vectors, re.search(rf"\b{name}\[", msl) is not None


@pytest.mark.parametrize("dtype", FLOATS)
def test_every_direction_moves_four_lanes(dtype, run):
    msl = run_staged(run, 64, 64, 16, 32, dtype)
    assert f"threadgroup {WORDS4[dtype]} S_words[" in msl
    assert f"threadgroup {WORDS4[dtype]} S2_words[" in msl
    # device -> threadgroup, a copy: 4 lanes (as bits for bf16)
    assert re.search(rf"\*\(threadgroup {COPY4[dtype]}\*\)\(S \+ [^;]*= \(\*\(const device "
                     rf"{COPY4[dtype]}\*\)", msl)
    # threadgroup -> device
    assert re.search(rf"= \(\*\(threadgroup {COPY4[dtype]}\*\)\(S2 \+", msl)
    # threadgroup -> float fragment, converting inline; fragment -> threadgroup, converting
    lanes = "2" if dtype == "bfloat16" else "4"
    load = re.search(rf"float{lanes}\(\(\*\(threadgroup {CONVERT[dtype]}\*\)\(S \+", msl) \
        if dtype != "float32" else re.search(r"= \(\*\(threadgroup float4\*\)\(S \+", msl)
    assert load, msl
    assert re.search(rf"\*\(threadgroup {CONVERT[dtype]}\*\)\(S2 \+ [^;]*= ", msl)
    for name in ("S", "S2"):  # never element by element
        assert not accesses(msl, name)[1]


@pytest.mark.parametrize("dtype", FLOATS)
def test_f16_staged_as_f32_converts_in_the_vector_store(dtype, run):
    M, N, b = 32, 64, 32

    @T.prim_func
    def widen(A: T.Tensor((M, N), dtype), B: T.Tensor((M, N), "float32")):
        with T.Kernel(T.ceildiv(N, b), T.ceildiv(M, b), threads=64) as (bx, by):
            S = T.alloc_shared((b, b), "float32")
            T.copy(A[by * b, bx * b], S)
            T.copy(S, B[by * b, bx * b])
    kernel = core.compile(widen, out_idx=[1])
    a = random_tensor((M, N), dtype, M * N, scale=4.0)
    assert_close(run(kernel, a), a.double(), "float32")
    if dtype == "float16":
        assert re.search(r"\*\(threadgroup float4\*\)\(S \+ [^;]*= float4\(\(\*\(const "
                         r"device half4\*\)", kernel.msl)
    elif dtype == "bfloat16":  # bf16 converts in registers of 2 lanes, stores as float2
        assert re.search(r"\*\(threadgroup float2\*\)\(S \+ [^;]*= float2\(\(\*\(const "
                         r"device bfloat2\*\)", kernel.msl)
    assert "threadgroup uint4 S_words[256];" in kernel.msl  # 32 x 32 floats, 16-byte words


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("M,N", [(50, 72), (7, 100)])
def test_ragged_tiles_of_aligned_rows_keep_vectors(M, N, dtype, run):
    # the edge tiles' bounds are per run (N % 4 == 0): masked whole, still vectors
    msl = run_staged(run, M, N, 16, 32, dtype)
    for name in ("S", "S2"):
        vectors, scalar = accesses(msl, name)
        assert vectors and not scalar, (name, vectors)


@pytest.mark.parametrize("dtype", FLOATS)
def test_rows_of_two_lanes_move_two(dtype, run):
    # a tile row of 6 elements: runs of 2 (the layout's width), vectors of 2 both ways
    msl = run_staged(run, 24, 30, 8, 6, dtype, threads=32)
    two = {"float32": "float2", "float16": "half2", "bfloat16": "bfloat2"}[dtype]
    assert f"threadgroup {'uint2' if dtype == 'float32' else 'uint'} S_words[" in msl
    for name in ("S", "S2"):
        vectors, scalar = accesses(msl, name)
        assert vectors == {two} and not scalar, (name, vectors)


@pytest.mark.parametrize("dtype,words", [("int8", "ushort"), ("uint8", "ushort"),
                                         ("int32", "uint2")])
def test_integer_rows_of_two_lanes_move_two(dtype, words, run):
    # 2-lane vectors of bytes need 2-byte words; of ints, 8-byte ones
    M, N, bM, bN = 24, 30, 8, 6
    kernel = core.compile(copied(M, N, bM, bN, dtype), out_idx=[1])
    low = 0 if dtype == "uint8" else -100
    a = random_tensor((M, N), dtype, M * N, low=low, high=100)
    assert_close(run(kernel, a), a, dtype)
    assert f"threadgroup {words} S_words[" in kernel.msl
    two = {"int8": "char2", "uint8": "uchar2", "int32": "int2"}[dtype]
    assert accesses(kernel.msl, "S") == ({two}, False)


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("M,N,bN,pad", [
    (20, 45, 5, 0),     # rows of 5: runs of one element
    (32, 64, 32, 1)])   # padded shared rows of 33: no offset after the first row is aligned
def test_unprovable_alignment_falls_back_to_elements(M, N, bN, pad, dtype, run):
    msl = run_staged(run, M, N, 16, bN, dtype, pad=pad)
    assert not re.search(r"\(threadgroup \w+\*\)\(S2? \+", msl)
    assert "S_words" not in msl and re.search(r"threadgroup \w+ S\[", msl)


@pytest.mark.parametrize("dtype", FLOATS)
def test_unaligned_device_rows_gather_into_a_vector_store(dtype, run):
    # device rows of 45 elements: no device access can be a vector. Into threadgroup memory
    # the lanes are gathered one by one into registers (S_run) and stored as one vector;
    # out of it the masked device store reads lane by lane; the copies between threadgroup
    # memory and the fragment stay vectors
    msl = run_staged(run, 30, 45, 16, 32, dtype)
    assert not re.search(r"device \w+[24]\*", msl)
    assert re.search(r"S_run\[l\] = .*\bA\[", msl)
    assert re.search(rf"^\s*\*\(threadgroup {COPY4[dtype]}\*\)\(S \+ [^;]*S_run\[0", msl,
                     re.M)
    assert re.search(rf"\(\*\(threadgroup {CONVERT[dtype]}\*\)\(S \+", msl)          # S -> F
    assert re.search(rf"^\s*\*\(threadgroup {CONVERT[dtype]}\*\)\(S2 \+", msl, re.M)  # F -> S2
    assert not accesses(msl, "S")[1] and re.search(r"= S2\[", msl)


@pytest.mark.parametrize("dtype", FLOATS)
def test_device_rows_aligned_to_two_lanes_move_two(dtype, run):
    # device rows of 70 elements: runs of 4 are proven 2-aligned only, so the device copies
    # move 2 lanes on both sides; the on-chip copies keep their 4 (bf16 registers: 2)
    msl = run_staged(run, 30, 70, 16, 32, dtype)
    two = {"float32": "float2", "float16": "half2", "bfloat16": "bfloat2"}[dtype]
    assert re.search(rf"\*\(threadgroup {two}\*\)\(S \+ [^;]*= [^;]*\(\*\(const device "
                     rf"{two}\*\)\(A \+", msl)
    assert re.search(rf"\*\(device {two}\*\)\(B \+ [^;]*= \(\*\(threadgroup {two}\*\)"
                     r"\(S2 \+", msl)
    assert re.search(rf"\(\*\(threadgroup {CONVERT[dtype]}\*\)\(S \+", msl)
    assert not accesses(msl, "S")[1]
    # the store out is masked: runs wholly inside the row as vectors, the one run that
    # crosses its end (columns 68..71 of 70) lane by lane
    vector_branch, lane_branch = msl.split("} else {")
    assert re.search(rf"\(threadgroup {two}\*\)\(S2 \+", vector_branch)
    assert "S2[" in lane_branch and "S2[" not in vector_branch


def reads_last_lanes(dtype):
    """A 128-element staging copy (32 threads, one 4-lane vector store each), then every
    thread reads lane 3 of other threads' vectors: only the last element of each store
    conflicts."""
    @T.prim_func
    def k(A: T.Tensor((128,), dtype), B: T.Tensor((128,), dtype)):
        with T.Kernel(1, threads=32):
            S = T.alloc_shared((128,), dtype)
            F = T.alloc_fragment((128,), dtype)
            T.copy(A, S)
            for i in T.Parallel(128):
                F[i] = S[(i * 4 + 3) % 128]
            T.copy(F, B)
    return k


@pytest.mark.backend("emu")
@pytest.mark.parametrize("dtype", FLOATS)
def test_race_on_the_last_lane_of_a_vector_store_is_found(dtype, run):
    kernel = core.compile(reads_last_lanes(dtype), out_idx=[1])
    a = random_tensor((128,), dtype, 128)
    assert_close(run(kernel, a), a[(torch.arange(128) * 4 + 3) % 128], dtype)
    store = next(i + 1 for i, ln in enumerate(kernel.msl.splitlines())
                 if re.search(r"^\s*\*\(threadgroup \w+\*\)\(S \+", ln))
    report = check_barriers(kernel, [a], schedules=("forward",))
    [verdict] = report.barriers
    assert verdict.necessary and verdict.race.kind == "race", report.summary()
    # forward order: thread 0 reads element 19 (lane 3 of thread 4's store) before thread 4
    # stores it; the store is the conflicting access, seen at its last element's bytes
    race = verdict.race
    assert race.line == store and race.address_space == "threadgroup"
    elem = torch.tensor([], dtype=TORCH[dtype]).element_size()
    offset = int(re.search(r"byte (\d+)", race.buffer_or_offset).group(1))
    # named as the kernel's code names it, with the word array it is declared as
    assert "'S' (declared as 'S_words')" in race.buffer_or_offset and offset // elem % 4 == 3


@pytest.mark.backend("emu")
def test_vector_store_partly_past_a_threadgroup_array_is_out_of_bounds():
    # the printed form on an array of 6 floats: thread 1's float4 covers bytes 16..31, the
    # last 8 of them past the array; the bounds check sees them
    msl = """
kernel void k(device const float* A [[buffer(0)]], device float* B [[buffer(1)]],
              uint3 tpos [[thread_position_in_threadgroup]]) {
  const int v = int(tpos.x);
  threadgroup uint2 S_words[3];
  threadgroup float* S = (threadgroup float*)S_words;
  if (v < 2) {
    *(threadgroup float4*)(S + (v * 4)) = (*(const device float4*)(A + (v * 4)));
  }
  threadgroup_barrier(mem_flags::mem_threadgroup);
  B[v] = S[v];
}
"""
    a = np.arange(8, dtype=np.float32)
    res = emu.run_msl(msl, "k", grid=(1, 1, 1), threadgroup=(6, 1, 1),
                      buffers=[a, np.zeros(6, np.float32)])
    bounds = [f for f in res.findings if f.kind == "bounds"]
    assert len(bounds) == 1 and bounds[0].thread == (1, 0, 0), res.findings
    assert "16-byte write at byte offset 16" in bounds[0].detail
    assert "holds 24 bytes" in bounds[0].detail
    assert bounds[0].buffer_or_offset == "'S' (declared as 'S_words'), byte 16"


def test_barrier_checks_keep_vector_accessed_arrays_observable():
    # harness/check/barriers.py makes threadgroup arrays volatile so the emulator's optimizer
    # cannot hide a racing access; an array behind a pointer to words is qualified with its
    # vector casts, unless its address is taken (a simdgroup matrix load)
    msl = core.compile(staged(64, 64, 16, 32, "float16"), out_idx=[1]).msl
    seen = observable(msl)
    assert "threadgroup volatile half* S = (threadgroup volatile half*)S_words;" in seen
    assert re.search(r"\*\(threadgroup volatile half4\*\)\(S \+", seen)
    assert not re.search(r"\(threadgroup half4\*\)\(S2? \+", seen)
    assert len(seen.splitlines()) == len(msl.splitlines())
    built = families.get("gemm").build(dict(STAGED_GEMM))
    gemm = core.compile(built.func, out_idx=built.out_idx).msl
    assert "&A_tile[0]" in gemm and observable(gemm).count("volatile") == \
        gemm.count("volatile")


def test_staged_gemm_barriers_are_all_necessary():
    # A and B staged as 16-byte stores (8 halves, a uint4 each: the tiles are only read
    # by simdgroup matrix loads), the float stage read back as float4
    params = dict(STAGED_GEMM)
    report = check_case("gemm", params)
    assert report.ok and len(report.barriers) == 3, report.summary()
    built = families.get("gemm").build(params)
    msl = core.compile(built.func, out_idx=built.out_idx).msl
    assert re.search(r"\*\(threadgroup uint4\*\)\(A_tile \+ [^;]*\(\*\(const device "
                     r"uint4\*\)\(A \+", msl)   # rows past M = 8 read as zeros
    assert re.search(r"\*\(threadgroup uint4\*\)\(B_shared \+", msl)
    assert re.search(r"half4\(\(\*\(threadgroup float4\*\)\(C_local_stage \+", msl)


@pytest.mark.parametrize("dtype, lanes", [("uint8", 16), ("int8", 16), ("float16", 8),
                                          ("bfloat16", 8), ("float32", 4)])
@pytest.mark.parametrize("N", [64, 68])
def test_a_tile_only_copied_moves_16_bytes_a_thread(dtype, lanes, N, run):
    # A -> S -> B, S touched by the two copies alone: runs of 16 bytes, one uint4 (float4)
    # access each way where the device rows are aligned to them (N = 64); rows of 68
    # elements (ragged against the 32-wide tile) are aligned to 4 only, so 8- and 16-lane
    # runs split into 4-lane accesses, the run across the row's end lane by lane; both
    # bit-exact
    M, bM, bN = 24, 8, 32
    kernel = core.compile(copied(M, N, bM, bN, dtype), out_idx=[1])
    a = random_tensor((M, N), dtype, M * N, low=0 if dtype == "uint8" else -100, high=100) \
        if "int" in dtype else random_tensor((M, N), dtype, M * N)
    assert torch.equal(run(kernel, a), a)
    word = "float4" if dtype == "float32" else "uint4"
    wide = N % lanes == 0
    assert ("threadgroup uint4 S_words[" in kernel.msl) == wide
    assert (f"(*(const device {word}*)(A + " in kernel.msl) == wide
    if wide:
        assert re.search(rf"\*\(threadgroup {word}\*\)\(S \+ [^;=]*\(v \* {lanes}\)\)+ = ",
                         kernel.msl)
