"""What `harness fuzz` shows: live progress while it runs, the summary when it ends.

`LiveView` (a terminal) redraws one rich table: per family the cases run, the new kernels
among them (built by the emulator, not found in its cache), failing cases, distinct
failures, barrier checks and the mean seconds per case (in a worker), and above it the
totals, the rate and the time left.
`PlainView` (CI logs, stdout not a terminal) prints a progress line about ten times per
run (at most every 30 s) and one line per event (a failure saved, a worker restarted).
Both take their numbers from the run's `FuzzSummary`; `print_summary` prints its final
state, with the seconds per stage of the cases (`stage_table`: trace, compile, the
emulator's stages, oracle, barrier checks, shrinking, and the time between cases) and the
lowering decisions reached (`decision_table`: every point of core/ir/decisions.POINTS, each
choice with the cases that reached it). A Ray campaign (`--ray`) adds the same per machine:
`node_table` (workers there now, cases, failing cases, new failures first seen there, cases
lost with a dying worker).
"""

from __future__ import annotations

import time

from rich.console import Console, Group
from rich.live import Live
from rich.table import Table
from rich.text import Text


def _clock(seconds: float) -> str:
    seconds = max(0, int(round(seconds)))
    h, rest = divmod(seconds, 3600)
    m, s = divmod(rest, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m}:{s:02d}"


def _headline(summary, deadline: float) -> str:
    elapsed = time.time() - summary.started
    rate = summary.cases / elapsed if elapsed > 0 else 0.0
    return (f"fuzz seed {summary.seed}, {summary.workers} worker(s): {_clock(elapsed)} "
            f"elapsed, {_clock(deadline - time.time())} left; {summary.cases} cases "
            f"({rate:.1f}/s), {len(summary.failures)} failure(s)")


def family_table(summary, running=frozenset(), title="families") -> Table:
    """Per family: cases, new kernels, failing cases, distinct failures, barrier checks,
    seconds a case, and a state column only when some family has one (running, skipped,
    generator broken): two-line headers, so a CI log's 80 columns hold it uncut."""
    distinct = {}
    for f in summary.failures:
        distinct[f.family] = distinct.get(f.family, 0) + 1
    states = {name: ("skipped: " + t.skip_reason) if t.skip_reason else
              ("generator broken" if t.broken else ("running" if name in running else ""))
              for name, t in summary.families.items()}
    table = Table(title=title, title_justify="left")
    columns = (("family", "left"), ("cases", "right"), ("new\nkernels", "right"),
               ("failing\ncases", "right"), ("failures", "right"),
               ("barrier\nchecks", "right"), ("s/case", "right"))
    if any(states.values()):
        columns += (("", "left"),)
    for column, justify in columns:
        table.add_column(column, justify=justify, no_wrap=True)
    for name, t in summary.families.items():
        failures = distinct.get(name, 0)
        row = [name, str(t.cases), str(t.kernels), str(t.failing_cases),
               Text(str(failures), "bold red" if failures else ""), str(t.barrier_checks),
               f"{t.seconds / t.cases:.2f}" if t.cases else "-"]
        table.add_row(*row, *((states[name],) if len(columns) > 7 else ()))
    return table


def node_table(summary, title="nodes") -> Table:
    table = Table(title=title, title_justify="left")
    for column, justify in (("node", "left"), ("workers", "right"), ("cases", "right"),
                            ("failing", "right"), ("failures", "right"), ("lost", "right")):
        table.add_column(column, justify=justify, no_wrap=True)
    for name, t in summary.nodes.items():
        table.add_row(name, str(t.workers), str(t.cases), str(t.failing_cases),
                      Text(str(t.failures), "bold red" if t.failures else ""),
                      Text(str(t.lost), "yellow" if t.lost else ""))
    return table


class LiveView:
    """Progress for a terminal: one table, redrawn in place."""

    def __init__(self, console: Console):
        self.console = console
        self.live = None
        self.deadline = 0.0

    def start(self, summary, options, deadline):
        self.deadline = deadline
        self.live = Live(self._render(summary, set()), console=self.console,
                         refresh_per_second=4, transient=True)
        self.live.start()

    def _render(self, summary, running):
        parts = [Text(_headline(summary, self.deadline), "bold"), family_table(summary, running)]
        if summary.nodes:
            parts.append(node_table(summary))
        return Group(*parts)

    def refresh(self, summary, running):
        if self.live:
            self.live.update(self._render(summary, running))

    def note(self, text, style=""):
        self.console.print(Text(text, style), soft_wrap=True)

    def stop(self, summary):
        if self.live:
            self.live.stop()
            self.live = None


class PlainView:
    """Progress for logs: a line every `every` seconds, and a line per event."""

    def __init__(self, console: Console, every: float | None = None):
        self.console = console
        self.every = every
        self.deadline = 0.0
        self.last = 0.0

    def start(self, summary, options, deadline):
        self.deadline = deadline
        self.last = time.time()
        if self.every is None:  # about ten lines per run, at most one per 30 s
            self.every = min(max(options.budget / 10, 2.0), 30.0)
        families = ", ".join(n for n, t in summary.families.items() if not t.skip_reason)
        self.console.print(f"fuzz: seed {summary.seed}, budget {_clock(options.budget)}, "
                           f"{summary.workers} worker(s), families {families}", soft_wrap=True)

    def refresh(self, summary, running):
        if time.time() - self.last < self.every:
            return
        self.last = time.time()
        per = ", ".join(f"{n} {t.cases}" for n, t in summary.families.items()
                        if not t.skip_reason)
        if summary.nodes:
            per += " | nodes: " + ", ".join(f"{n} {t.cases} ({t.workers} worker(s))"
                                            for n, t in summary.nodes.items())
        self.console.print(f"{_headline(summary, self.deadline)}, "
                           f"{decisions_reached(summary)} | {per}", soft_wrap=True)

    def note(self, text, style=""):
        self.console.print(text, soft_wrap=True)

    def stop(self, summary):
        pass


def stage_table(summary, title="where the time went") -> Table:
    """Seconds per stage over the run's cases (worker time: up to workers x elapsed), its
    share, and milliseconds per case: the largest row is the next thing to make faster."""
    table = Table(title=title, title_justify="left")
    for column, justify in (("stage", "left"), ("seconds", "right"), ("share", "right"),
                            ("ms/case", "right")):
        table.add_column(column, justify=justify, no_wrap=True)
    stages = summary.stages
    total = sum(stages.values()) or 1.0
    cases = max(summary.cases, 1)
    for name, seconds in stages.items():
        table.add_row(name, f"{seconds:.1f}", f"{100 * seconds / total:.0f}%",
                      f"{1000 * seconds / cases:.0f}")
    return table


def decision_table(summary) -> Table:
    """Every decision point's choices (core/ir/decisions.POINTS) and how many cases reached
    each; "-" for one no case reached."""
    from core.ir.decisions import POINTS

    reached = summary.decisions
    table = Table(title="lowering decisions reached (cases)", title_justify="left")
    for column in ("point", "decided in", "choices"):
        table.add_column(column, overflow="fold")   # long names folded, never cut
    for point, (where, choices) in POINTS.items():
        cells = [f"{c} {reached.get(f'{point}={c}', '-')}" for c in choices]
        table.add_row(point, where, ", ".join(cells))
    return table


def decisions_reached(summary) -> str:
    """"N of M decisions": the choices of core/ir/decisions.POINTS some case reached."""
    from core.ir.decisions import POINTS

    every = {f"{p}={c}" for p, (_, cs) in POINTS.items() for c in cs}
    return f"{len(every & set(summary.decisions))} of {len(every)} decisions"


def print_summary(console: Console, summary) -> None:
    """The end of a run: per-family table, where the time went, the decisions reached,
    failures with their regression files, totals."""
    console.print(family_table(summary, title="fuzz summary"))
    if summary.cases:
        console.print(stage_table(summary))
    console.print(decision_table(summary))
    if summary.nodes:
        console.print(node_table(summary, title="per node"))
    for f in summary.failures:
        shrunk = "shrunk" if f.shrunk else "not fully shrunk"
        console.print(Text.assemble(("FAIL ", "bold red"), f"{f.family} {f.signature} "
                                    f"({shrunk}, first seen at case {f.case_number}): "
                                    f"{f.path}"), soft_wrap=True)
        console.print(f"     params {f.params}", soft_wrap=True)
    for f in summary.known:
        console.print(Text.assemble(("KNOWN ", "yellow"), f"{f.family} {f.signature} still "
                                    f"fails (first seen at case {f.case_number}); open case "
                                    f"{f.path}"), soft_wrap=True)
    for error in summary.errors:
        console.print(Text.assemble(("ERROR ", "bold red"), error), soft_wrap=True)
    how = "interrupted" if summary.interrupted else "done"
    restarts = f", {summary.worker_restarts} worker restart(s)" if summary.worker_restarts \
        else ""
    verdict = (Text(f"{len(summary.failures)} failure(s)", "bold red") if summary.failures
               else Text("no new failures" if summary.known else "no failures", "bold green"))
    known = f" ({len(summary.known)} known open bug(s) still fail)" if summary.known else ""
    kernel_rate = summary.kernels / summary.elapsed if summary.elapsed else 0.0
    console.print(Text.assemble(
        f"fuzz {how}: {summary.cases} cases in {_clock(summary.elapsed)} "
        f"({summary.rate:.2f} cases/s; new kernels {summary.kernels}, {kernel_rate:.2f}/s; "
        f"seed {summary.seed}{restarts}, "
        f"{decisions_reached(summary)}); ", verdict, known))
