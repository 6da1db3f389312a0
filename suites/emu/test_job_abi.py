"""The job file's header is one ABI with two sides: job.py packs it (FIELDS, HEADER) and the
runtime reads it through JobHeader (src/job.h). A C++ unit generated from job.py's layout
asserts every field's offset and size, the header size, the magic and the check and
schedule codes against job.h, compiled by the emulator's own compiler for its target."""

import struct
import subprocess

import pytest

from core.runtime.emu import build, job


def _assertions(offsets: dict[str, int]) -> str:
    lines = ['#include "job.h"', "using mt::JobHeader;"]
    for name, fmt in job.FIELDS:
        lines.append(f"static_assert(offsetof(JobHeader, {name}) == {offsets[name]}, "
                     f'"job.py puts {name} at byte {offsets[name]}");')
        size = struct.calcsize("<" + fmt)
        lines.append(f"static_assert(sizeof(JobHeader::{name}) == {size}, "
                     f'"job.py gives {name} {size} bytes");')
    lines.append(f"static_assert(sizeof(JobHeader) == {job.HEADER.size}, "
                 f'"job.py\'s header is {job.HEADER.size} bytes");')
    lines.append(f"static_assert(mt::kMaxBuffers == {job.MAX_BUFFERS}, \"MAX_BUFFERS\");")
    for i, byte in enumerate(job.MAGIC):
        lines.append(f"static_assert(mt::kJobMagic[{i}] == {byte}, \"MAGIC byte {i}\");")
    for name, code in job.CHECKS.items():
        const = {"races": "kCheckRaces", "uninit": "kCheckUninit", "bounds": "kCheckBounds"}[name]
        lines.append(f"static_assert(mt::{const} == {code}, \"check {name}\");")
    for name, code in job.SCHEDULES.items():
        const = f"kSchedule{name.capitalize()}"
        lines.append(f"static_assert(mt::{const} == {code}, \"schedule {name}\");")
    return "\n".join(lines) + "\n"


def _compile(tmp_path, source: str) -> subprocess.CompletedProcess:
    unit = tmp_path / "job_abi.cpp"
    unit.write_text(source)
    cxx = build.default_builder().toolchain.cxx
    return subprocess.run(
        [cxx, "-std=c++17", "-fsyntax-only", *build._arch_flags(), "-I",
         str(build.HERE / "src"), str(unit)],
        capture_output=True, text=True, timeout=120, check=False)


def test_header_fields_agree(tmp_path):
    assert job.HEADER.size == sum(struct.calcsize("<" + f) for _, f in job.FIELDS)
    res = _compile(tmp_path, _assertions(job.field_offsets()))
    assert res.returncode == 0, res.stderr


@pytest.mark.parametrize("field", ["grid", "seed", "buffers"])
def test_a_field_moved_on_one_side_is_caught(tmp_path, field):
    offsets = dict(job.field_offsets())
    offsets[field] += 4
    res = _compile(tmp_path, _assertions(offsets))
    assert res.returncode != 0
    assert f"job.py puts {field} at byte {offsets[field]}" in res.stderr
