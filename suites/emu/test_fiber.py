"""The context switch (core/runtime/emu/src/fiber.h) on its own, for the emulator's target.

fiber_check.cpp is built by the emulator's clang for the target the emulator builds for
(the host; arm64 Linux under qemu-user with METALTILE_EMU_TARGET=aarch64-linux-gnu, as
`tox -e arm64` runs it) and run: callee-saved integer and floating-point registers on both
sides of a switch, the x86-64 floating-point control state, stack alignment of a fresh
fiber, and interleaved fibers keeping their locals.
"""

import subprocess
from pathlib import Path

from core.runtime.emu import build, cross

HERE = Path(__file__).resolve().parent
CHECKS = 7  # lines fiber_check.cpp prints before its summary


def test_context_switch_keeps_registers_alignment_and_stacks(tmp_path):
    exe = tmp_path / "fiber_check"
    cxx = build.default_builder().toolchain.cxx
    compiled = subprocess.run(
        [cxx, "-O2", "-std=c++17", "-fno-omit-frame-pointer", *build._arch_flags(),
         "-I", str(build.HERE / "src"), str(HERE / "fiber_check.cpp"), "-o", str(exe)],
        capture_output=True, text=True, check=False)
    assert compiled.returncode == 0, compiled.stderr[-3000:]
    ran = subprocess.run([*cross.run_prefix(), str(exe)], capture_output=True, text=True,
                         timeout=120, check=False)
    lines = ran.stdout.splitlines()
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert lines[-1] == "0 failed", ran.stdout
    assert [line[:4] for line in lines[:-1]] == ["ok  "] * CHECKS, ran.stdout
