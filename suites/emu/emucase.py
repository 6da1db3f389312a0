"""Shared helpers for the emulator suites: one way to run a kernel and compare."""

from __future__ import annotations



from core.runtime import emu

HEADER = "#include <metal_stdlib>\nusing namespace metal;\n"


def run(body: str, kernel: str, grid, threadgroup, *buffers, **kw) -> emu.EmuResult:
    """Run MSL `body` (the metal_stdlib header is prepended) and return the result.

    Buffers are updated in place. Every run checks races, uninit and bounds unless told
    otherwise; use `clean(...)` to also assert there were no findings."""
    return emu.run_msl(HEADER + body, kernel, grid=grid, threadgroup=threadgroup,
                       buffers=list(buffers), **kw)


def clean(body: str, kernel: str, grid, threadgroup, *buffers, **kw) -> emu.EmuResult:
    res = run(body, kernel, grid, threadgroup, *buffers, **kw)
    assert res.findings == [], "\n".join(map(str, res.findings))
    return res


def line_of(body: str, needle: str) -> int:
    """MSL line (1-based, counting the prepended header) of the first line containing needle."""
    for i, text in enumerate((HEADER + body).splitlines(), start=1):
        if needle in text:
            return i
    raise AssertionError(f"{needle!r} not in the kernel")


