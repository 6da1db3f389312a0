"""The MSL CPU emulator: runs Metal compute kernels on any OS and checks them.

    from core.runtime import emu
    res = emu.run_msl(source, "kernel_name", grid=(gx, gy, gz), threadgroup=(tx, ty, tz),
                      buffers=[...], schedule="forward", seed=0,
                      checks=("races", "uninit", "bounds"))
    res.findings, res.stats
    with emu.barrier_switched_off(line):   # launches skip the threadgroup_barrier on line
        emu.run_msl(...)
    emu.build_ahead([(source, None, "safe"), ...])   # several libraries, one clang run

Layers: translate.py (MSL -> C++ rewrite), translation.py (what a translation is: the C++
unit and its kernel signatures, the data the modules below pass each other), signature.py
(kernel signatures from clang's AST), launcher.py (C++ entry points), build.py (clang with
a precompiled shim header and a content-hash cache), job.py (the shared job file), run.py
(the child process, results, findings), and the C++ in include/ (MSL names, one header
per concern) and src/ (scheduler and checker).
"""

from core.errors import (KernelCrashError, KernelTimeoutError, LaunchError, MSLCompileError,
                         ToolchainError)

from .run import (ALL_CHECKS, EmuResult, Finding, barrier_switched_off, build_ahead,
                  kernel_signatures, run_msl)

__all__ = ["run_msl", "build_ahead", "kernel_signatures", "barrier_switched_off", "EmuResult",
           "Finding",
           "ALL_CHECKS",
           "MSLCompileError", "LaunchError", "KernelCrashError", "KernelTimeoutError",
           "ToolchainError"]
