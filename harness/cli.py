"""`harness`: the command line of metaltile's harness (console script `harness`).

Subcommands:
  emu FILE.metal   run one kernel of any MSL file on the CPU emulator and report
  selfcheck        run the emulator's built-in kernels against NumPy; test the oracle's power
  bench            benchmark the bench cases, compare with the baseline, write reports
  report           re-render the reports of a saved bench result
  fuzz             time-budgeted fuzzing of the kernel families (harness.fuzz); each
                   failure is shrunk and saved as a regression case
  emu-against REF  the emulator's time on the issue's kernel shapes, A/B against another
                   revision's emulator running the same MSL (harness.bench.emu_against)

Only parsing and printing live here: launches go through `core.runtime.emu.run_msl`, buffer
specs through `harness.bufspec`, the self-check through `harness.selfcheck`, the benchmark's
workflow through `harness.bench.workflow` (prepare, execute, rerender), fuzzing through
`harness.fuzz`.
Exit status: 0 ran clean, 1 findings (or a failed self-check), 2 usage, compile or launch
error (the error's message is printed, no traceback).
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
from collections import Counter
from pathlib import Path

import numpy as np
from rich.console import Console
from rich.table import Table
from rich.text import Text

from core.errors import MetaltileError
from core.target import METAL
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
    emu.add_argument("--kernel", default=None,
                     help="name of the kernel function (default: the file's only kernel)")
    where = emu.add_mutually_exclusive_group(required=True)
    where.add_argument("--grid", type=_dims, metavar="X[,Y,Z]",
                       help="threadgroups per dimension (missing dimensions are 1)")
    where.add_argument("--threads", type=_dims, metavar="X[,Y,Z]",
                       help="or the grid in threads (Metal's dispatchThreads): the last "
                            "threadgroup of a dimension holds the threads left")
    emu.add_argument("--threadgroup", required=True, type=_dims, metavar="X[,Y,Z]",
                     help="threads per threadgroup")
    emu.add_argument("--buffer", dest="buffers", action="append", default=[], type=_spec,
                     metavar="SPEC", help=f"{bufspec.SYNTAX}; repeat per buffer, see below")
    emu.add_argument("--function-constant", dest="function_constants", action="append",
                     default=[], type=_function_constant, metavar="I=VALUE",
                     help="value of [[function_constant(I)]]: true, false, an integer or a "
                          "float (repeat for several)")
    emu.add_argument("--threadgroup-memory", dest="threadgroup_memory", action="append",
                     default=[], type=_threadgroup_length, metavar="I=BYTES",
                     help="length of the [[threadgroup(I)]] parameter in bytes, a multiple of "
                          "16 (repeat for several)")
    emu.add_argument("--math-mode", choices=METAL.math_modes, default=METAL.math_mode,
                     help="the Metal math mode the MSL is compiled in, which decides where "
                          f"a*b+c is one fused multiply-add (default: {METAL.math_mode}, what "
                          "torch.mps.compile_shader uses)")
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

    help_ = ("run the emulator's built-in kernels against NumPy, then test the oracle "
             "checks' power (doctored outputs must fail)")
    sub = commands.add_parser("selfcheck", help=help_, description=help_)
    sub.add_argument("--seed", type=int, default=0, help="seed of the inputs (default: 0)")
    sub.add_argument("--power", choices=("all", "families", "none"), default="all",
                     help="oracle power checks: every family at drawn params and every bench "
                     "case (all, the default), families only, or none")
    sub.set_defaults(run=_run_selfcheck)
    _add_bench_commands(commands)
    _add_fuzz_command(commands)
    _add_emu_against_command(commands)
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


def _function_constant(text: str) -> tuple[int, bool | int | float]:
    index, sep, value = text.partition("=")
    try:
        if not sep or not index.strip().isdigit():
            raise ValueError
        low = value.strip().lower()
        parsed = {"true": True, "false": False}.get(low)
        if parsed is None:
            parsed = int(low) if low.lstrip("-").isdigit() else float(low)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"'{text}' is not I=VALUE (VALUE: true, false, an integer or a float)") from None
    return int(index), parsed


def _threadgroup_length(text: str) -> tuple[int, int]:
    index, sep, length = text.partition("=")
    if not sep or not index.strip().isdigit() or not length.strip().isdigit():
        raise argparse.ArgumentTypeError(f"'{text}' is not I=BYTES")
    return int(index), int(length)


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
    try:
        constants = dict(args.function_constants)
        kernels = emu.kernel_signatures(source, constants)
    except MetaltileError as error:
        return _error(err, error, f"error ({type(error).__name__})")
    if args.kernel is None:
        if len(kernels) != 1:
            found = ", ".join(sorted(kernels)) or "none"
            return _error(err, f"{args.file} has {len(kernels)} kernels ({found}); choose one "
                               "with --kernel NAME")
        args.kernel = next(iter(kernels))
    signature = kernels.get(args.kernel)
    names = {i: p.buffer_name(i) for i, p in signature.buffers.items()} if signature else {}
    if args.threads:
        total_threads = math.prod(args.threads)
        launch = (f"{_tuple(args.threads)} threads in threadgroups of "
                  f"{_tuple(args.threadgroup)}")
        where = {"threads": args.threads}
    else:
        total_threads = math.prod(args.grid) * math.prod(args.threadgroup)
        launch = f"grid {_tuple(args.grid)} x threadgroup {_tuple(args.threadgroup)}"
        where = {"grid": args.grid}
    out.print(Text.assemble("kernel ", (args.kernel, "bold"), f" from {args.file}"),
              soft_wrap=True)
    out.print(f"{launch} = {total_threads} threads; schedule {args.schedule}, seed "
              f"{args.seed}, checks {','.join(checks) or 'none'}", soft_wrap=True)
    start = time.perf_counter()
    try:
        result = emu.run_msl(source, args.kernel, **where, threadgroup=args.threadgroup,
                             buffers=buffers, schedule=args.schedule, seed=args.seed,
                             checks=checks, function_constants=constants,
                             threadgroup_memory=dict(args.threadgroup_memory),
                             math_mode=args.math_mode)
    except MetaltileError as error:
        return _error(err, error, f"error ({type(error).__name__})")
    seconds = time.perf_counter() - start

    out.print(_buffer_table(args.buffers, buffers, args.print_buffers, names))
    out.print(_stats_table(result.stats, names))
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


def _buffer_label(index: int, names: dict[int, str]) -> str:
    return f"buffer({index}) {names[index]}" if index in names else f"buffer({index})"


def _buffer_table(specs: list[bufspec.BufferSpec], arrays: list[np.ndarray],
                  preview: bool, names: dict[int, str]) -> Table:
    table = Table(title="buffers", title_justify="left")
    for column in ("buffer", "spec", "dtype", "shape"):
        table.add_column(column)
    if preview:
        table.add_column("after the run", overflow="fold")
    for i, (spec, array) in enumerate(zip(specs, arrays)):
        row = [_buffer_label(i, names), spec.text, spec.dtype_name, "x".join(map(str, array.shape))]
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


def _stats_table(stats: dict, names: dict[int, str]) -> Table:
    table = Table(title="stats", title_justify="left")
    table.add_column("counter")
    table.add_column("value", justify="right", overflow="fold")
    for name, value in stats.items():
        if isinstance(value, dict):
            value = ", ".join(f"{_buffer_label(k, names)}: {v}" for k, v in value.items()) or "-"
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


# -- harness selfcheck -----------------------------------------------------------------------

def _run_selfcheck(args: argparse.Namespace) -> int:
    from core.runtime.emu.toolchain import find_toolchain
    from harness import selfcheck

    out, err = _consoles()
    try:
        toolchain = find_toolchain()
    except MetaltileError as error:
        return _error(err, error)
    out.print(f"emulator toolchain: {toolchain.describe().splitlines()[0]}")

    with out.status("running the self-check (the first run builds the emulator runtime)"):
        results = selfcheck.run_selfcheck(args.seed)
    if args.power != "none":
        with out.status("testing the oracle checks' power (doctored outputs, every family"
                        + (" and bench case)" if args.power == "all" else ")")):
            results += selfcheck.run_power_checks(args.seed, bench=args.power == "all")
    table = Table(title="self-check: emulator kernels, oracle power", title_justify="left")
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


# -- harness bench / report ------------------------------------------------------------------

BENCH_DESCRIPTION = """\
Benchmark the bench cases (harness/bench/cases.py: kernel families at LLM shapes, scaled for the
emulator). Per case: one checked emulator run (oracle + race/uninit/bounds checks), its
deterministic counters (bytes, load/store operations, barriers, simd ops), a roofline model
of Apple-GPU time per chip, DSL -> MSL compile time over --rounds rounds, and on macOS with
MPS the measured GPU time. Compares with the baseline (counters exactly, modeled time past
1%), prints the changes, writes reports/out/bench.{json,md,html} and
bench.pytest-benchmark.json.
Exit status: 0 pass, 1 a case failed or a counter/modeled time regressed (or, with
--against, compile time regressed past the noise threshold), 2 usage or setup error."""


def _peers(text: str) -> tuple:
    from harness.bench.peers import PEERS
    names = tuple(n.strip() for n in text.split(",") if n.strip())
    unknown = [n for n in names if n not in PEERS]
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown peer(s) {unknown}; known: "
                                         f"{', '.join(PEERS)}")
    return names


def _add_bench_commands(commands) -> None:
    from harness.bench import roofline
    from harness.bench.baseline import DEFAULT_BASELINE, DEFAULT_OUT
    from harness.bench.measure import DEFAULT_ROUNDS

    sub = commands.add_parser("bench", help="benchmark, compare with the baseline, report",
                              description=BENCH_DESCRIPTION,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
    sub.add_argument("--cases", metavar="PATTERNS",
                     help="comma-separated case names, families or fnmatch patterns "
                          "(default: all)")
    sub.add_argument("--list", action="store_true", help="list the cases and exit")
    sub.add_argument("--rounds", type=_positive, default=DEFAULT_ROUNDS, metavar="N",
                     help=f"compile-time rounds per case (default: {DEFAULT_ROUNDS})")
    sub.add_argument("--baseline", type=Path, default=DEFAULT_BASELINE, metavar="PATH",
                     help="baseline JSON (default: reports/baselines/emu.json)")
    sub.add_argument("--update-baseline", action="store_true",
                     help="write this run's passing cases into the baseline (deliberately)")
    sub.add_argument("--out", type=Path, default=DEFAULT_OUT, metavar="DIR",
                     help="where results and reports go (default: reports/out)")
    sub.add_argument("--against", metavar="GITREF",
                     help="also time compilation A/B against GITREF, built beside this tree "
                          "in DIR/against/")
    sub.add_argument("--ab-rounds", type=_positive, default=None, metavar="N",
                     help="interleaved A/B rounds per side (default: 20)")
    sub.add_argument("--disable", action="append", default=[], metavar="PASS",
                     help="switch a compiler pass off (repeatable; to show the gate "
                          "catches it)")
    sub.add_argument("--replace", action="append", default=[], metavar="PASS=MODULE:FUNC",
                     help="replace a compiler pass by a function (repeatable)")
    sub.add_argument("--chips", type=_chips, default=roofline.DEFAULT_CHIPS, metavar="LIST",
                     help=f"chips of the roofline model, or 'all' (default: "
                          f"{','.join(roofline.DEFAULT_CHIPS)}; known: "
                          f"{', '.join(roofline.CHIPS)})")
    sub.add_argument("--backend", choices=("auto", "emu", "mps"), default="auto",
                     help="emu: counters and model only; mps: also measured GPU time "
                          "(macOS with MPS); auto: mps where available (default)")
    sub.add_argument("--peers", metavar="LIST", type=_peers, default=(),
                     help="also run each case's peer kernel beside it and report generated "
                          "/ peer per counter and modeled time: 'mlx' (MLX's own Metal "
                          "kernels, from the mlx-metal wheel pip fetches into the cache on "
                          "first use; harness/bench/peers/), 'mlx-affine' (MLX's affine "
                          "8-bit qmv for the fp8 decode case)")
    sub.set_defaults(run=_run_bench)

    rep = commands.add_parser("report", help="re-render the reports of a saved bench result",
                              description="Re-render bench.md and bench.html from a saved "
                              "result (default: reports/out/bench.json) against a baseline. "
                              "Exit status: 0 the gate passes, 1 it fails, 2 usage error.")
    rep.add_argument("result", type=Path, nargs="?", default=DEFAULT_OUT / "bench.json",
                     metavar="RESULT.json")
    rep.add_argument("--baseline", type=Path, default=DEFAULT_BASELINE, metavar="PATH")
    rep.add_argument("--out", type=Path, default=None, metavar="DIR",
                     help="where the reports go (default: the result's directory)")
    rep.set_defaults(run=_run_report)


def _wide_consoles() -> tuple[Console, Console]:
    """Like _consoles, but 180 columns when not a terminal (CI logs), so the bench tables
    keep one line per case."""
    out, err = _consoles()
    if not out.is_terminal:
        out = Console(highlight=False, markup=False, width=180)
    return out, err


def _positive(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"'{text}' is not a positive integer")
    return int(text)


def _chips(text: str) -> tuple[str, ...]:
    from harness.bench import roofline

    if text.strip().lower() == "all":
        return tuple(roofline.CHIPS)
    names = tuple(n.strip() for n in text.split(",") if n.strip())
    unknown = [n for n in names if n not in roofline.CHIPS]
    if unknown or not names:
        raise argparse.ArgumentTypeError(f"unknown chip(s) {', '.join(unknown) or text!r}; "
                                         f"known: {', '.join(roofline.CHIPS)}")
    return names


def _replacements(items: list[str]) -> dict:
    """PASS=MODULE:FUNC -> {PASS: function}; raises ValueError with what is wrong."""
    import importlib

    out = {}
    for item in items:
        name, _, target = item.partition("=")
        module, _, func = target.partition(":")
        if not (name and module and func):
            raise ValueError(f"--replace {item!r} is not PASS=MODULE:FUNC")
        try:
            out[name] = getattr(importlib.import_module(module), func)
        except (ImportError, AttributeError) as error:
            raise ValueError(f"--replace {item!r}: {error}") from None
    return out


def _run_bench(args: argparse.Namespace) -> int:
    from harness.bench import against, workflow
    from harness.bench.cases import select
    from harness.bench.measure import toolchain_info

    out, err = _wide_consoles()
    if args.list:
        try:
            cases = select(args.cases)
        except KeyError as error:
            return _error(err, error.args[0])
        table = Table(title="bench cases", title_justify="left")
        for col in ("case", "family", "LLM shape", "scaling"):
            table.add_column(col, overflow="fold")
        for c in cases:
            table.add_row(c.name, c.family, c.shape, c.scaling)
        out.print(table)
        return EXIT_CLEAN
    disable = tuple(n.strip() for item in args.disable for n in item.split(",") if n.strip())
    try:
        options = workflow.BenchOptions(
            cases=args.cases, rounds=args.rounds, disable=disable,
            replace=_replacements(args.replace), chips=args.chips, backend=args.backend,
            baseline=args.baseline, out=args.out, update_baseline=args.update_baseline,
            against=args.against, ab_rounds=args.ab_rounds, peers=args.peers)
        plan = workflow.prepare(options)
    except ValueError as error:   # BenchUsageError, or a --replace that does not resolve
        return _error(err, error)

    out.print(f"harness bench: {len(plan.cases)} case(s), {args.rounds} compile round(s) "
              f"each; emulator {toolchain_info()}; GPU time: "
              f"{'measured (MPS)' if plan.gpu else 'not measured (' + plan.gpu_reason + ')'}",
              soft_wrap=True)
    if disable or options.replace:
        out.print(Text(f"pipeline perturbed: disable={list(disable)} "
                       f"replace={sorted(options.replace)}", "yellow"))
    if args.against:
        out.print(f"compile time A/B against {args.against} "
                  f"({args.ab_rounds or against.DEFAULT_ROUNDS} interleaved rounds), "
                  "after the cases")
    outcome = workflow.execute(
        plan, progress=lambda case, i, n: out.print(f"[{i + 1}/{n}] {case.name}",
                                                    soft_wrap=True),
        ab_progress=lambda r, n: out.print(f"  A/B round {r}/{n}" if r else "  warm-up"))
    if args.update_baseline:
        out.print(f"baseline written: {args.baseline} ({len(outcome.baseline.cases)} cases)")
        for name in outcome.left_out:
            out.print(Text(f"not in the baseline (did not pass): {name}", "red"))
    return _print_outcome(out, outcome, args.baseline)


def _run_report(args: argparse.Namespace) -> int:
    from harness.bench import workflow

    out, err = _wide_consoles()
    try:
        outcome = workflow.rerender(args.result, args.baseline, args.out)
    except workflow.BenchUsageError as error:
        return _error(err, error)
    return _print_outcome(out, outcome, args.baseline)


def _print_outcome(out, outcome, baseline_path) -> int:
    from harness.bench import report

    results = outcome.results
    for table in report.summary_tables(results):
        out.print(table)
    references = report.reference_table(results)
    if references is not None:
        out.print(references)
    hand_tuned = report.hand_tuned_table(results)
    if hand_tuned is not None:
        out.print(hand_tuned)
    for table in report.peer_tables(results):
        out.print(table)
    power = report.power_table(results)
    if power is not None:
        out.print(power)
    if results.against:
        if results.against.get("error"):
            out.print(Text(f"A/B: {results.against['error']}", "red"))
        else:
            out.print(report.against_table(results.against))
    if outcome.changes:
        out.print(report.changes_table(outcome.changes))
    else:
        out.print(f"no changes against the baseline ({baseline_path})")
    out.print(Text(report.verdict_line(results, outcome.changes),
                   "bold red" if outcome.failed else "bold green"))
    for path in (*outcome.written, outcome.reports["markdown"]):
        out.print(f"wrote {path}", soft_wrap=True)
    out.print(f"report: {outcome.reports['html']}", soft_wrap=True)
    return EXIT_FINDINGS if outcome.failed else EXIT_CLEAN


# -- harness fuzz ----------------------------------------------------------------------------

FUZZ_DESCRIPTION = """\
Fuzz the kernel families for a time budget: cases drawn by Hypothesis from each family's
strategy run on the emulator with every check and are compared with the oracles (and,
for 1 of N cases with barriers, every barrier is checked to be necessary). A failing
case is shrunk to a minimal one with the same kind of failure and saved at once as a
regression case (DIR/<family>-<status>-<hash>.json, state "open"); the example database
makes a re-run replay earlier failures first. A failure of the kind of an open regression
case (suites/regressions or DIR) is a known bug: listed, not saved again. Exit status: 0 no
new failures, 1 new failures, 2 usage error."""


def _add_fuzz_command(commands) -> None:
    from harness.fuzz import scheduler

    sub = commands.add_parser("fuzz", help="time-budgeted fuzzing of the kernel families",
                              description=FUZZ_DESCRIPTION,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
    sub.add_argument("--budget", type=_duration, default=600.0, metavar="TIME",
                     help="time budget: 90s, 10m, 1h (default: 10m)")
    sub.add_argument("--seed", type=int, default=None,
                     help="seed of the run (default: random, printed at the end)")
    sub.add_argument("--families", type=_names, action="extend", default=[], metavar="A,B",
                     help="families to fuzz (repeatable; default: all registered)")
    sub.add_argument("--workers", type=_positive, default=None, metavar="N",
                     help="worker processes (default: one per core, at most 4; with --ray "
                     "one per CPU of the cluster)")
    sub.add_argument("--ray", nargs="?", const="", default=None, metavar="ADDRESS",
                     help="run the workers as Ray actors (pip install 'metaltile"
                     "[distributed]'): no ADDRESS starts a local Ray instance; 'auto', "
                     "HOST:PORT or ray://HOST:PORT joins a running cluster")
    sub.add_argument("--db", type=Path, default=scheduler.DEFAULT_DB, metavar="PATH",
                     help="Hypothesis example database (default: reports/out/fuzz/db)")
    sub.add_argument("--out", type=Path, default=scheduler.regressions.DEFAULT_DIR, metavar="DIR",
                     help="where regression cases are written (default: suites/regressions)")
    sub.add_argument("--case-timeout", type=_duration, default=scheduler.FuzzOptions.case_timeout,
                     metavar="TIME", help="a case running longer is a failure "
                     f"(default: {scheduler.FuzzOptions.case_timeout:g}s)")
    sub.add_argument("--barrier-every", type=int, default=scheduler.FuzzOptions.barrier_every,
                     metavar="N", help="check barrier necessity on 1 of N cases with "
                     "barriers; 1 = every one, 0 = never (default: "
                     f"{scheduler.FuzzOptions.barrier_every})")
    sub.add_argument("--disable", type=_names, action="extend", default=[],
                     metavar="PASS,...", help="switch pipeline passes off (repeatable; to "
                     "check that fuzzing catches it)")
    sub.add_argument("--max-cases", type=int, default=0, metavar="N",
                     help="stop after N cases (default: only the budget)")
    sub.add_argument("--candidates", type=_positive,
                     default=scheduler.FuzzOptions.candidates, metavar="N",
                     help="params drawn per case; the first reaching a lowering decision "
                     "no case has reached runs, else the one reaching the rarest (1 = no "
                     "steering; default: "
                     f"{scheduler.FuzzOptions.candidates})")
    sub.add_argument("--batch", type=_positive, default=scheduler.FuzzOptions.batch,
                     metavar="N",
                     help="cases per Hypothesis example, their kernels compiled for the "
                     "emulator in one clang run (1 = each alone; default: "
                     f"{scheduler.FuzzOptions.batch})")
    sub.add_argument("--no-routes", dest="routes", action="store_false",
                     help="compile every case cold with core.compile (default: draw the "
                     "call path, compile options, math mode and cache state too)")
    sub.add_argument("--import", dest="imports", action="append", default=[],
                     metavar="MODULE", help="import MODULE first (it registers more "
                     "families; used by tests)")
    sub.add_argument("--plain", action="store_true",
                     help="plain progress lines even on a terminal")
    sub.set_defaults(run=_run_fuzz)


def _duration(text: str) -> float:
    from harness.fuzz.scheduler import FuzzUsageError, parse_duration

    try:
        return parse_duration(text)
    except FuzzUsageError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def _names(text: str) -> tuple[str, ...]:
    names = tuple(n.strip() for n in text.split(",") if n.strip())
    if not names:
        raise argparse.ArgumentTypeError(f"'{text}' names nothing")
    return names


def _run_fuzz(args: argparse.Namespace) -> int:
    from harness.fuzz import scheduler, view as fuzzview

    out, err = _consoles()
    options = scheduler.FuzzOptions(
        budget=args.budget, seed=args.seed, families=tuple(args.families),
        workers=args.workers or (0 if args.ray is not None else min(os.cpu_count() or 1, 4)),
        ray=args.ray, db=args.db, out=args.out, case_timeout=args.case_timeout,
        barrier_every=args.barrier_every, disable=tuple(args.disable),
        imports=tuple(args.imports),
        max_cases=args.max_cases, candidates=args.candidates, routes=args.routes,
        batch=args.batch)
    view = fuzzview.LiveView(out) if out.is_terminal and not args.plain else \
        fuzzview.PlainView(out)
    try:
        summary = scheduler.run(options, view)
    except (scheduler.FuzzUsageError, ImportError) as error:
        return _error(err, error)
    fuzzview.print_summary(out, summary)
    return summary.exit_code


def _add_emu_against_command(commands) -> None:
    from harness.bench import emu_against

    help_ = "emulator time A/B against another revision's emulator, on today's MSL"
    sub = commands.add_parser("emu-against", help=help_,
                              description=emu_against.__doc__.split("\n\n")[1],
                              formatter_class=argparse.RawDescriptionHelpFormatter)
    sub.add_argument("ref", metavar="GITREF", help="the other revision")
    sub.add_argument("--rounds", type=_positive, default=emu_against.DEFAULT_ROUNDS,
                     metavar="N", help="interleaved rounds per side after one warm-up "
                     f"(default: {emu_against.DEFAULT_ROUNDS})")
    sub.add_argument("--shapes", type=_names, default=None, metavar="A,B",
                     help="shapes to time (default: all: "
                          f"{', '.join(s.name for s in emu_against.SHAPES)})")
    sub.add_argument("--out", type=Path, default=Path("reports/out"), metavar="DIR",
                     help="where the other revision is checked out (DIR/against/REF) and "
                          "the result JSON goes (DIR/emu-against.json; default: reports/out)")
    sub.set_defaults(run=_run_emu_against)


def _run_emu_against(args: argparse.Namespace) -> int:
    from harness.bench import emu_against

    out, err = _consoles()
    try:
        result = emu_against.execute(args.ref, args.shapes, out_dir=args.out,
                                     rounds=args.rounds,
                                     progress=lambda r, n: out.print(f"round {r}/{n}"))
    except emu_against.EmuAgainstUsageError as error:
        err.print(str(error))
        return EXIT_ERROR
    if "error" in result:
        err.print(f"emu-against: {result['error']}")
        return EXIT_ERROR
    table = Table(title=f"emulator time, this tree vs {result['ref']} ({result['commit'][:10]}), "
                        f"median of {result['rounds']} rounds")
    for col in ("shape", "checks", "this (s)", "ref (s)", "speed-up", "same outputs",
                "same counters", "oracle"):
        table.add_column(col)
    for row in result["rows"]:
        if "error" in row:
            table.add_row(row["shape"], str(row["checks"]), "-", "-", "-", "-", "-", row["error"])
            continue
        table.add_row(row["shape"], "on" if row["checks"] else "off",
                      f"{row['this_median']:.4f}", f"{row['ref_median']:.4f}",
                      f"{row['speedup']:.2f}x", str(row["same_outputs"]),
                      f"all {row['counters_compared']}" if row["same_counters"]
                      else "differ: " + ", ".join(row["counter_differences"]),
                      row["oracle"][:60])
    out.print(table)
    only = sorted({k for row in result["rows"] for k in row.get("counters_only_here", ())})
    if only:
        out.print(f"counters only this tree reports (not compared): {', '.join(only)}")
    return EXIT_FINDINGS if emu_against.failed(result) else EXIT_CLEAN


if __name__ == "__main__":
    sys.exit(main())
