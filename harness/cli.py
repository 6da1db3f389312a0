"""`harness`: the command line of metaltile's harness (console script `harness`).

Subcommands:
  emu FILE.metal   run one kernel of any MSL file on the CPU emulator and report
  selfcheck        run the emulator's built-in kernels against NumPy
  bench            for now the self-check (the benchmark arrives later)

Only parsing and printing live here: launches go through `core.runtime.emu.run_msl`, buffer
specs through `harness.bufspec`, the self-check through `harness.selfcheck`.
Exit status: 0 ran clean, 1 findings (or a failed self-check), 2 usage, compile or launch
error (the error's message is printed, no traceback).
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from collections import Counter
from pathlib import Path

import numpy as np
from rich.console import Console
from rich.table import Table
from rich.text import Text

from core.errors import MetaltileError
from harness import bufspec

EXIT_CLEAN, EXIT_FINDINGS, EXIT_ERROR = 0, 1, 2
SCHEDULES = ("forward", "reverse", "random")
PREVIEW_ELEMENTS = 6

BUFFER_HELP = f"""\
buffer specs (one --buffer per [[buffer(i)]], in index order): {bufspec.SYNTAX}
  DTYPE  float32|f32 float16|half|f16 bfloat16|bf16 int64|i64 int32|i32 int16|i16 int8|i8
         uint32|u32 uint16|u16 uint8|u8 bool
  SHAPE  1024, 64x256, 2x3x4
  FILL   zeros (default) | ones | arange | random (normal floats, small ints; --seed)
         | value=V | values=V1,V2,... (one per element) | PATH.npy
  e.g.   --buffer f32:1024:random --buffer f32:1024 --buffer u32:1:value=1000
         (a `constant uint& n [[buffer(2)]]` takes a one-element buffer holding n)
"""


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exit_:  # --help, or argparse's own usage error
        return exit_.code if isinstance(exit_.code, int) else EXIT_ERROR
    return args.run(args)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="harness", description="metaltile's harness")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    emu = commands.add_parser(
        "emu", help="run one kernel of an MSL file on the CPU emulator",
        description="Run KERNEL of FILE.metal on the CPU emulator with the given launch and\n"
                    "buffers; report stats and findings (races, uninitialized reads,\n"
                    "out-of-bounds accesses, divergent barriers). Exit status: 0 clean,\n"
                    "1 findings, 2 usage, compile or launch error.",
        epilog=BUFFER_HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    emu.add_argument("file", type=Path, metavar="FILE.metal", help="MSL source file")
    emu.add_argument("--kernel", required=True, help="name of the kernel function")
    emu.add_argument("--grid", required=True, type=_dims, metavar="X[,Y,Z]",
                     help="threadgroups per dimension (missing dimensions are 1)")
    emu.add_argument("--threadgroup", required=True, type=_dims, metavar="X[,Y,Z]",
                     help="threads per threadgroup")
    emu.add_argument("--buffer", dest="buffers", action="append", default=[], type=_spec,
                     metavar="SPEC", help=f"{bufspec.SYNTAX}; repeat per buffer, see below")
    emu.add_argument("--schedule", choices=SCHEDULES, default="forward",
                     help="order of threads between barriers (default: forward)")
    emu.add_argument("--seed", type=int, default=0,
                     help="seed of the random schedule and of random fills (default: 0)")
    emu.add_argument("--checks", type=_checks, default=None, metavar="LIST",
                     help="comma-separated subset of races,uninit,bounds, or none "
                          "(default: all)")
    emu.add_argument("--print-buffers", action="store_true",
                     help="show the first values of every buffer after the run")
    emu.add_argument("--save", type=Path, metavar="DIR",
                     help="write every buffer after the run to DIR/buffer{i}.npy")
    emu.add_argument("--max-findings", type=int, default=20, metavar="N",
                     help="findings listed one by one (default: 20; all are counted)")
    emu.set_defaults(run=_run_emu)

    for name, help_ in (("selfcheck", "run the emulator's built-in kernels against NumPy"),
                        ("bench", "the benchmark (not built yet: runs the self-check)")):
        sub = commands.add_parser(name, help=help_, description=help_)
        sub.add_argument("--seed", type=int, default=0, help="seed of the inputs (default: 0)")
        sub.set_defaults(run=_run_selfcheck)
    return parser


# -- argument types: each raises ArgumentTypeError, which argparse prints with the usage ----

def _dims(text: str) -> tuple[int, int, int]:
    parts = text.split(",")
    if not 1 <= len(parts) <= 3 or not all(p.strip().isdigit() and int(p) > 0 for p in parts):
        raise argparse.ArgumentTypeError(f"'{text}' is not X[,Y,Z] with positive integers")
    dims = [int(p) for p in parts] + [1] * (3 - len(parts))
    return dims[0], dims[1], dims[2]


def _spec(text: str) -> bufspec.BufferSpec:
    try:
        return bufspec.parse_spec(text)
    except bufspec.BufferSpecError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def _checks(text: str) -> tuple[str, ...]:
    from core.runtime.emu import ALL_CHECKS

    if text.strip().lower() == "none":
        return ()
    names = tuple(n.strip() for n in text.split(",") if n.strip())
    unknown = [n for n in names if n not in ALL_CHECKS]
    if unknown or not names:
        wrong = ", ".join(unknown) if unknown else repr(text)
        raise argparse.ArgumentTypeError(f"unknown check(s) {wrong}; expected a subset of "
                                         f"{','.join(ALL_CHECKS)} or none")
    return names


# -- harness emu ---------------------------------------------------------------------------

def _consoles() -> tuple[Console, Console]:
    """stdout and stderr; no markup, since MSL text is full of `[[...]]`."""
    return (Console(highlight=False, markup=False),
            Console(stderr=True, highlight=False, markup=False))


def _error(console: Console, error: Exception | str, label: str = "error") -> int:
    console.print(Text.assemble((f"{label}: ", "bold red"), str(error)), soft_wrap=True)
    return EXIT_ERROR


def _run_emu(args: argparse.Namespace) -> int:
    out, err = _consoles()
    try:
        source = args.file.read_text()
    except OSError as error:
        return _error(err, f"cannot read {args.file}: {error.strerror}")
    try:
        buffers = [spec.make(args.seed, i) for i, spec in enumerate(args.buffers)]
    except bufspec.BufferSpecError as error:
        return _error(err, error)

    from core.runtime import emu

    checks = emu.ALL_CHECKS if args.checks is None else args.checks
    total_threads = math.prod(args.grid) * math.prod(args.threadgroup)
    out.print(Text.assemble("kernel ", (args.kernel, "bold"), f" from {args.file}"),
              soft_wrap=True)
    out.print(f"grid {_tuple(args.grid)} x threadgroup {_tuple(args.threadgroup)} = "
              f"{total_threads} threads; schedule {args.schedule}, seed {args.seed}, "
              f"checks {','.join(checks) or 'none'}", soft_wrap=True)
    start = time.perf_counter()
    try:
        result = emu.run_msl(source, args.kernel, grid=args.grid, threadgroup=args.threadgroup,
                             buffers=buffers, schedule=args.schedule, seed=args.seed,
                             checks=checks)
    except MetaltileError as error:
        return _error(err, error, f"error ({type(error).__name__})")
    seconds = time.perf_counter() - start

    out.print(_buffer_table(args.buffers, buffers, args.print_buffers))
    out.print(_stats_table(result.stats))
    findings = list(result.findings)
    if findings:
        out.print(_findings_table(findings, args.max_findings, source.splitlines()))
    if args.save:
        try:
            args.save.mkdir(parents=True, exist_ok=True)
            for i, array in enumerate(buffers):
                np.save(args.save / f"buffer{i}.npy", array)
        except OSError as error:
            return _error(err, f"cannot save buffers to {args.save}: {error.strerror}")
        out.print(f"saved {len(buffers)} buffers to {args.save}/buffer{{i}}.npy")
    if findings:
        counts = ", ".join(f"{n} {kind}" for kind, n in sorted(Counter(
            f.kind for f in findings).items()))
        dropped = (f"; {result.dropped_findings} more not recorded"
                   if result.dropped_findings else "")
        out.print(Text.assemble((f"{len(findings)} findings", "bold red"),
                                f" ({counts}{dropped}) in {seconds:.2f} s"))
        return EXIT_FINDINGS
    out.print(Text.assemble(("no findings", "bold green"), f" in {seconds:.2f} s"))
    return EXIT_CLEAN


def _buffer_table(specs: list[bufspec.BufferSpec], arrays: list[np.ndarray],
                  preview: bool) -> Table:
    table = Table(title="buffers", title_justify="left")
    for column in ("buffer", "spec", "dtype", "shape"):
        table.add_column(column)
    if preview:
        table.add_column("after the run", overflow="fold")
    for i, (spec, array) in enumerate(zip(specs, arrays)):
        row = [f"buffer({i})", spec.text, spec.dtype_name, "x".join(map(str, array.shape))]
        table.add_row(*row, *([_preview(array)] if preview else []))
    return table


def _preview(array: np.ndarray) -> str:
    flat = array.reshape(-1)
    if flat.dtype.kind in "biu":
        items = [str(v) for v in flat[:PREVIEW_ELEMENTS].tolist()]
    else:  # float16/32 and bfloat16 (whose numpy kind is "V")
        items = [f"{v:.5g}" for v in flat[:PREVIEW_ELEMENTS].astype(np.float64)]
    more = ", ..." if flat.size > PREVIEW_ELEMENTS else ""
    return f"[{', '.join(items)}{more}]"


def _stats_table(stats: dict) -> Table:
    table = Table(title="stats", title_justify="left")
    table.add_column("counter")
    table.add_column("value", justify="right", overflow="fold")
    for name, value in stats.items():
        if isinstance(value, dict):
            value = ", ".join(f"buffer({k}): {v}" for k, v in value.items()) or "-"
        table.add_row(str(name), str(value))
    return table


def _findings_table(findings: list, limit: int, msl_lines: list[str]) -> Table:
    """One row per finding: kind; kernel, threadgroup and thread; address space and buffer
    (or threadgroup variable) with the byte offset; the MSL line and what happened."""
    table = Table(title=f"findings ({len(findings)})", title_justify="left", show_lines=True)
    table.add_column("kind", no_wrap=True)
    table.add_column("where", no_wrap=True)
    table.add_column("memory", overflow="fold")
    table.add_column("MSL line: detail", overflow="fold", ratio=1)
    for f in findings[:limit]:
        where = f"{f.kernel}\ngroup {_tuple(f.group)}\nthread {_tuple(f.thread)}"
        memory = f"{f.address_space}\n{f.buffer_or_offset}"
        line = ""
        if f.line and 0 < f.line <= len(msl_lines):
            line = f"{f.line}: {msl_lines[f.line - 1].strip()}\n"
        seen = f" (seen {f.count} times)" if f.count > 1 else ""
        table.add_row(Text(f.kind, "red"), where, memory, f"{line}{f.detail}{seen}")
    if len(findings) > limit:
        table.add_row("...", f"{len(findings) - limit} more (--max-findings)", "", "")
    return table


def _tuple(value) -> str:
    if isinstance(value, (tuple, list)):
        return "(" + ",".join(map(str, value)) + ")"
    return str(value)


# -- harness selfcheck / bench -------------------------------------------------------------

def _run_selfcheck(args: argparse.Namespace) -> int:
    from core.runtime.emu.toolchain import find_toolchain
    from harness import selfcheck

    out, err = _consoles()
    if args.command == "bench":
        out.print("harness bench: no benchmark yet; running the emulator self-check")
    try:
        toolchain = find_toolchain()
    except MetaltileError as error:
        return _error(err, error)
    out.print(f"emulator toolchain: {toolchain.describe().splitlines()[0]}")

    with out.status("running the self-check (the first run builds the emulator runtime)"):
        results = selfcheck.run_selfcheck(args.seed)
    table = Table(title="emulator self-check", title_justify="left")
    table.add_column("check", no_wrap=True)
    table.add_column("what", overflow="fold", ratio=1)
    table.add_column("result", no_wrap=True)
    table.add_column("seconds", justify="right")
    table.add_column("findings", justify="right")
    for r in results:
        table.add_row(r.name, r.what, Text("pass", "green") if r.passed else Text("FAIL", "red"),
                      f"{r.seconds:.2f}", str(r.findings))
    out.print(table)
    failed = [r for r in results if not r.passed]
    for r in failed:
        out.print(Text.assemble((f"{r.name}: ", "bold red"), r.detail))
    if failed:
        out.print(Text(f"{len(failed)} of {len(results)} checks failed", "bold red"))
        return EXIT_FINDINGS
    out.print(Text(f"all {len(results)} checks passed", "bold green"))
    return EXIT_CLEAN


if __name__ == "__main__":
    sys.exit(main())
