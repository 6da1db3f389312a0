"""Imported by the workers' fork server (harness/check/workers.py, PRELOAD) for what it does
on import: find the emulator's toolchain there, once, so every worker forked from the
server starts with it found. Each worker probed clang itself before (`clang --version`, a
probe compile, the target triple): 0.4-1.1 s of its first case on the loaded 2-core
machine, paid again by a restarted worker. Nothing is built here: a missing toolchain is
the worker's error to report, with its case."""

from __future__ import annotations

try:
    from core.runtime.emu.build import default_builder

    default_builder()
except Exception:  # noqa: BLE001 - the worker finds (and reports) it again
    pass
