"""`harness emu` / `harness selfcheck` end to end: real MSL through the emulator, with
assertions on exit status, output and the saved buffers."""

import numpy as np
import pytest

from harness.cli import main

ADD = """\
#include <metal_stdlib>
using namespace metal;

kernel void add(device const float* a [[buffer(0)]],
                device const float* b [[buffer(1)]],
                device float* c [[buffer(2)]],
                constant uint& n [[buffer(3)]],
                uint gid [[thread_position_in_grid]]) {
    if (gid < n) {
        c[gid] = a[gid] + b[gid];
    }
}
"""

RACY = """\
#include <metal_stdlib>
using namespace metal;

kernel void neighbour(device const float* x [[buffer(0)]],
                      device float* y [[buffer(1)]],
                      uint tid [[thread_position_in_threadgroup]],
                      uint gid [[thread_position_in_grid]]) {
    threadgroup float tile[64];
    tile[tid] = x[gid];
    // no threadgroup_barrier here: thread tid reads what thread tid + 1 writes
    y[gid] = tile[(tid + 1) % 64];
}
"""

SYNTAX_ERROR = """\
#include <metal_stdlib>
using namespace metal;

kernel void broken(device float* y [[buffer(0)]],
                   uint gid [[thread_position_in_grid]]) {
    y[gid] = 1.0f +;
}
"""

ADD_ARGS = ["--kernel", "add", "--grid", "4", "--threadgroup", "256",
            "--buffer", "f32:1000:arange", "--buffer", "f32:1000:value=0.5",
            "--buffer", "f32:1000", "--buffer", "u32:1:value=1000"]


@pytest.fixture(autouse=True)
def wide_console(monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")  # rich wraps table cells at the terminal width


@pytest.fixture
def metal(tmp_path):
    def write(source: str, name: str = "kernel.metal") -> str:
        path = tmp_path / name
        path.write_text(source)
        return str(path)
    return write


def test_clean_run_exits_0_and_saves_buffers(metal, tmp_path, capsys):
    out_dir = tmp_path / "out"
    assert main(["emu", metal(ADD), *ADD_ARGS, "--save", str(out_dir)]) == 0
    stdout = capsys.readouterr().out
    assert "no findings" in stdout
    assert "stats" in stdout and "buffers" in stdout
    c = np.load(out_dir / "buffer2.npy")
    np.testing.assert_array_equal(c, np.arange(1000, dtype=np.float32) + 0.5)
    np.testing.assert_array_equal(np.load(out_dir / "buffer3.npy"), [1000])
    assert sorted(p.name for p in out_dir.iterdir()) == [f"buffer{i}.npy" for i in range(4)]


def test_a_grid_in_threads_runs_just_those_threads(metal, tmp_path, capsys):
    # 1000 threads in groups of 256: the last of the 4 threadgroups holds 232; with n = 2000
    # the kernel's guard lets every thread write, and only the 1000 of the grid do
    out_dir = tmp_path / "out"
    args = ["--kernel", "add", "--threads", "1000", "--threadgroup", "256",
            "--buffer", "f32:2000:arange", "--buffer", "f32:2000:value=0.5",
            "--buffer", "f32:2000", "--buffer", "u32:1:value=2000"]
    assert main(["emu", metal(ADD), *args, "--save", str(out_dir)]) == 0
    stdout = capsys.readouterr().out
    assert "(1000,1,1) threads in threadgroups of (256,1,1) = 1000 threads" in stdout
    c = np.load(out_dir / "buffer2.npy")
    np.testing.assert_array_equal(c[:1000], np.arange(1000, dtype=np.float32) + 0.5)
    assert not c[1000:].any()                  # never written (the buffer starts as 0s)
    assert main(["emu", metal(ADD), "--grid", "4", *args]) == 2     # not both


def test_print_buffers_shows_values_after_the_run(metal, capsys):
    assert main(["emu", metal(ADD), *ADD_ARGS, "--print-buffers"]) == 0
    stdout = capsys.readouterr().out
    assert "[0.5, 1.5, 2.5, 3.5, 4.5, 5.5, ...]" in stdout  # c = arange + 0.5


def test_racy_kernel_exits_1_with_a_race_finding(metal, capsys):
    args = ["emu", metal(RACY), "--kernel", "neighbour", "--grid", "2", "--threadgroup", "64",
            "--buffer", "f32:128:random", "--buffer", "f32:128"]
    assert main(args) == 1
    stdout = capsys.readouterr().out
    assert "findings" in stdout and "race" in stdout
    assert "threadgroup" in stdout


@pytest.mark.parametrize("schedule", ["forward", "reverse", "random"])
def test_race_is_found_under_every_schedule(metal, schedule, capsys):
    args = ["emu", metal(RACY), "--kernel", "neighbour", "--grid", "1", "--threadgroup", "64",
            "--buffer", "f32:64:random", "--buffer", "f32:64", "--schedule", schedule,
            "--seed", "7"]
    assert main(args) == 1
    assert "race" in capsys.readouterr().out


def test_checks_choose_what_is_reported(metal, capsys):
    args = ["emu", metal(RACY), "--kernel", "neighbour", "--grid", "1", "--threadgroup", "64",
            "--buffer", "f32:64:random", "--buffer", "f32:64"]
    assert main([*args, "--checks", "none"]) == 0
    assert "no findings" in capsys.readouterr().out
    assert main([*args, "--checks", "races"]) == 1
    summary = capsys.readouterr().out.strip().splitlines()[-1]
    assert "race" in summary and "uninit" not in summary
    assert main([*args, "--checks", "races,typos"]) == 2
    assert "unknown check(s) typos" in capsys.readouterr().err


def test_bad_buffer_spec_exits_2_naming_the_spec(metal, capsys):
    args = ["emu", metal(ADD), "--kernel", "add", "--grid", "1", "--threadgroup", "32",
            "--buffer", "f33:1000"]
    assert main(args) == 2
    stderr = capsys.readouterr().err
    assert "buffer 'f33:1000': unknown dtype 'f33'" in stderr


def test_bad_grid_exits_2(metal, capsys):
    assert main(["emu", metal(ADD), "--kernel", "add", "--grid", "0,1",
                 "--threadgroup", "32"]) == 2
    assert "'0,1' is not X[,Y,Z]" in capsys.readouterr().err


def test_missing_file_exits_2(tmp_path, capsys):
    assert main(["emu", str(tmp_path / "nope.metal"), "--kernel", "k", "--grid", "1",
                 "--threadgroup", "1"]) == 2
    assert "cannot read" in capsys.readouterr().err


def test_msl_syntax_error_exits_2_with_the_line(metal, capsys):
    args = ["emu", metal(SYNTAX_ERROR), "--kernel", "broken", "--grid", "1",
            "--threadgroup", "32", "--buffer", "f32:32"]
    assert main(args) == 2
    captured = capsys.readouterr()
    assert "MSLCompileError" in captured.err
    assert "line 6" in captured.err
    assert "Traceback" not in captured.err + captured.out


def test_selfcheck_passes(capsys):
    # the oracle-power part (--power, default all) is tested in suites/gen/test_power.py
    assert main(["selfcheck", "--power", "none"]) == 0
    stdout = capsys.readouterr().out
    assert "all 5 checks passed" in stdout
    assert "shift_racy" in stdout


def test_bench_lists_its_cases(capsys):
    assert main(["bench", "--list"]) == 0
    stdout = capsys.readouterr().out
    assert "copy/k-transpose-f16" in stdout and "LLM shape" in stdout


@pytest.mark.parametrize("args, message", [
    (["--cases", "nonesuch"], "no bench case matches"),
    (["--disable", "no_such_pass"], "unknown pass(es) no_such_pass"),
    (["--disable", "lower_tile_ops"], "cannot be disabled"),
    (["--replace", "thread_sync=nomodule:f"], "--replace 'thread_sync=nomodule:f'"),
    (["--replace", "thread_sync"], "is not PASS=MODULE:FUNC"),
])
def test_bench_usage_errors_exit_2(args, message, capsys):
    assert main(["bench", *args]) == 2
    assert message in capsys.readouterr().err


def test_the_only_kernel_is_taken_from_the_file_and_buffers_are_named(metal, tmp_path, capsys):
    out_dir = tmp_path / "out"
    args = [a for a in ADD_ARGS if a not in ("--kernel", "add")]
    assert main(["emu", metal(ADD), *args, "--save", str(out_dir)]) == 0
    stdout = capsys.readouterr().out
    assert "kernel add from" in stdout
    for row in ("buffer(0) a", "buffer(1) b", "buffer(2) c", "buffer(3) n"):
        assert row in stdout
    np.testing.assert_array_equal(np.load(out_dir / "buffer2.npy"),
                                  np.arange(1000, dtype=np.float32) + 0.5)


def test_several_kernels_need_kernel_and_the_error_lists_them(metal, capsys):
    args = [a for a in ADD_ARGS if a not in ("--kernel", "add")]
    assert main(["emu", metal(ADD + RACY.split("using namespace metal;", 1)[1]), *args]) == 2
    err = capsys.readouterr().err
    assert "has 2 kernels (add, neighbour); choose one with --kernel NAME" in err


def test_threadgroup_memory_lengths_from_the_command_line(metal, tmp_path, capsys):
    src = """\
#include <metal_stdlib>
using namespace metal;
kernel void rev(device const float* x [[buffer(0)]], device float* y [[buffer(1)]],
                threadgroup float* t [[threadgroup(0)]], uint i [[thread_index_in_threadgroup]]) {
  t[i] = x[i];
  threadgroup_barrier(mem_flags::mem_threadgroup);
  y[i] = t[31 - i];
}
"""
    args = ["emu", metal(src), "--grid", "1", "--threadgroup", "32", "--buffer",
            "f32:32:arange", "--buffer", "f32:32", "--save", str(tmp_path / "out")]
    assert main(args) == 2
    assert "no length was given" in capsys.readouterr().err
    assert main([*args, "--threadgroup-memory", "0=128"]) == 0
    np.testing.assert_array_equal(np.load(tmp_path / "out" / "buffer1.npy"),
                                  np.arange(32, dtype=np.float32)[::-1])
