"""Bench reports: the console tables, bench.md and bench.html (with plots) of one run.

Input: a run of `harness.bench.measure` (a `BenchRun`; a saved reports/out/bench.json is
read back into one by harness/bench/baseline.py), the `Baseline` it is compared with, and
the list of `gate.Change`s from `gate.compare`. Everything is read from the records'
fields. Output: rich tables for the terminal (`summary_tables`,
`changes_table`) and the files `write_reports` puts in the output directory:

    bench.md     the verdict, the gate's changes, every case's counters, modeled times per
                 chip (at the shape that ran and extrapolated to the real shape), the
                 generated / peer ratios of a run with --peers (MLX's kernels), the
                 modeled time beside each case's measured reference (`cases.Reference`,
                 with the ratio and what the model leaves out), compile times (and the
                 A/B comparison with --against), skipped cases, the model
    bench.html   the same tables and plots of counters and modeled times against the
                 baseline and of compile times (matplotlib, inline SVG; without matplotlib
                 the page says how to get the plots)

Nothing here measures or decides: the gate's verdict is `gate.gate_failed(changes)`.
"""

from __future__ import annotations

import dataclasses
import html
import io
from pathlib import Path

from rich.table import Table
from rich.text import Text

from harness.bench import gate, measure
from harness.bench.cases import UNIT_SECONDS
from harness.bench.baseline import Baseline
from harness.bench.measure import BenchRun, CaseMeasurement

PLOTTED_COUNTERS = ("device_bytes_read", "device_bytes_written", "device_load_ops",
                    "device_store_ops", "threadgroup_bytes_read", "threadgroup_bytes_written",
                    "barriers", "simd_ops")
KIND_STYLE = {"failure": "bold red", "regression": "red", "improvement": "green",
              "new": "cyan", "missing": "yellow", "note": "yellow"}


# -- formatting helpers --------------------------------------------------------------------

def _num(v) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.4g}"
    return f"{v:,}"


def _us(seconds) -> str:
    return "-" if seconds is None else f"{seconds * 1e6:,.1f}"


def _ms(seconds) -> str:
    return "-" if seconds is None else f"{seconds * 1e3:,.1f}"


def _change_value(change: gate.Change, value) -> str:
    if change.metric.startswith(("modeled", "compile")) and isinstance(value, float):
        return f"{value * 1e6:,.2f} us" if change.metric.startswith("modeled") \
            else f"{value * 1e3:,.2f} ms"
    return _num(value) if not isinstance(value, str) else value


def _relative(change: gate.Change) -> str:
    rel = change.relative
    return "" if rel is None else f"{rel:+.2%}"


def _ratio(case: CaseMeasurement) -> float | None:
    c, m = case.counters, case.minimum
    if not c or not m or not (m["read"] + m["written"]):
        return None
    return (c["device_bytes_read"] + c["device_bytes_written"]) / (m["read"] + m["written"])


def _bytes_per_op(case: CaseMeasurement) -> float | None:
    c = case.counters
    if not c:
        return None
    ops = c["device_load_ops"] + c["device_store_ops"]
    return (c["device_bytes_read"] + c["device_bytes_written"]) / ops if ops else None


def _compile_cell(case: CaseMeasurement) -> str:
    """"first / warm median ± stddev (n)", marked when the first compile misses the goal
    (documents without a first compile: the warm median); a program of several kernels
    shows its first compile per kernel too, which the goal is about."""
    t, first = case.compile, case.first_compile
    if not t and not first:
        return "-"
    warm = f"{t['median'] * 1e3:.1f} ± {t['stddev'] * 1e3:.1f} (n={t['rounds']})" if t \
        else "-"
    cell = warm
    if first:
        kernels = first.get("kernels", 1)
        each = (f" ({kernels} kernels, {first['seconds'] / kernels * 1e3:.1f} each)"
                if kernels > 1 else "")
        cell = f"{first['seconds'] * 1e3:.1f}{each} / {warm}"
    if measure.over_goal(first or t):
        cell += f" > {measure.COMPILE_GOAL_S * 1e3:.0f} goal"
    return cell


def verdict_line(results: BenchRun, changes: list) -> str:
    cases = results.cases
    n = {s: sum(c.status == s for c in cases) for s in ("pass", "skip")}
    failed = len(cases) - n["pass"] - n["skip"]
    regressions = sum(c.kind == "regression" for c in changes)
    improvements = sum(c.kind == "improvement" for c in changes)
    verdict = "FAIL" if gate.gate_failed(changes) else "PASS"
    return (f"{verdict}: {len(cases)} cases ({n['pass']} pass, {failed} failed, "
            f"{n['skip']} skipped); {regressions} regression(s), {improvements} "
            f"improvement(s) against the baseline")


# -- console -------------------------------------------------------------------------------

CONSOLE_CHIPS_PER_TABLE = 4     # modeled-time columns per console table (100 columns)


def _chip_groups(chips: list) -> list[list]:
    """`chips` in runs of at most CONSOLE_CHIPS_PER_TABLE, one console table each: with
    `--chips all` (12 chips) a single table would be cut ("M4 M…") at 100 columns."""
    n = CONSOLE_CHIPS_PER_TABLE
    return [chips[i:i + n] for i in range(0, len(chips), n)] or [[]]


def summary_tables(results: BenchRun) -> list[Table]:
    """The console's per-case tables, one per concern so that each fits 100 columns (CI
    logs cut wider ones): status and compile time, the counters, the modeled times (one
    table per CONSOLE_CHIPS_PER_TABLE chips)."""
    chips = list(results.chips)
    status = Table(title="bench cases: status and DSL -> MSL compile ms (first / warm)",
                   title_justify="left")
    counters = Table(title="counters (one checked emulator run, summed over launches)",
                     title_justify="left")
    groups = _chip_groups(chips)
    times = [Table(title="modeled us per chip (roofline, at the shape that ran)"
                   + (f", {i + 1} of {len(groups)}" if len(groups) > 1 else ""),
                   title_justify="left") for i in range(len(groups))]
    for table in (status, counters, *times):
        table.add_column("case", overflow="fold")
    status.add_column("status", no_wrap=True)
    status.add_column("compile ms first / warm", justify="right", overflow="fold")
    for col in ("bytes / min", "ld+st ops", "B/op", "tg bytes", "barriers", "simd ops"):
        counters.add_column(col, justify="right", no_wrap=True)
    for table, group in zip(times, groups):
        for chip in group:
            table.add_column(chip, justify="right", no_wrap=True)
    for case in results.cases:
        status.add_row(case.name, Text(case.status, "green" if case.status == "pass" else
                                       "yellow" if case.status == "skip" else "bold red"),
                       _compile_cell(case))
        c = case.counters
        if not c:
            continue
        ratio, bpo = _ratio(case), _bytes_per_op(case)
        counters.add_row(
            case.name, "-" if ratio is None else f"{ratio:.2f}x",
            _num(c["device_load_ops"] + c["device_store_ops"]),
            "-" if bpo is None else f"{bpo:.1f}",
            _num(c["threadgroup_bytes_read"] + c["threadgroup_bytes_written"]),
            _num(c["barriers"]), _num(c["simd_ops"]))
        for table, group in zip(times, groups):
            table.add_row(case.name, *[_us(case.modeled[chip]["seconds"]) for chip in group])
    return [status, counters, *times]


def reference_rows(results: BenchRun) -> list[list[str]]:
    """Per case with a `cases.Reference`: the measured figure, the modeled time on the same
    chip at the real shape (per the reference's unit), modeled / measured, the source and
    what the model leaves out."""
    rows = []
    for c in results.cases:
        ref = c.reference
        if not ref:
            continue
        m = (c.modeled or {}).get(ref["chip"])
        unit = ref["unit"].split("/")[0]
        modeled = None if m is None else _extrapolate(m, c.full_scale or 1.0) \
            / ref["per"]
        shown = "-" if modeled is None else f"{modeled / UNIT_SECONDS[unit]:,.4g}"
        ratio = "-" if modeled is None else f"{modeled / ref['seconds']:.3g}x"
        rows.append([c.name, f"{ref['value']:,g} {ref['unit']} ({ref['chip']})",
                     f"{shown} {ref['unit']}", ratio, ref["source"], ref["omits"]])
    return rows


REFERENCE_HEADER = ["case", "measured", "modeled, real shape", "modeled / measured",
                    "source", "what the model leaves out"]
REFERENCE_NOTE = ("Measured times from elsewhere (not this project's runs) beside the roofline "
                  "model of the same chip, extrapolated to the real shape. Besides each case's "
                  "own notes, the model decides cache hits per buffer by footprint, estimates "
                  "registers, barrier cost and "
                  "threadgroup bandwidth, and charges integer and conversion work like FMAs; "
                  "it is not expected to agree better than about 2x.")


def reference_table(results: BenchRun) -> Table | None:
    rows = reference_rows(results)
    if not rows:
        return None
    table = Table(title="modeled time against measured references", title_justify="left")
    for col in REFERENCE_HEADER:
        table.add_column(col, justify="right" if col.startswith(("measured", "modeled"))
                         else "left", overflow="fold")
    for row in rows:
        table.add_row(*row)
    return table


# Generated / hand-tuned, per counter group: (column, counters summed on each side).
HAND_TUNED_COLUMNS = (
    ("device bytes", ("device_bytes_read", "device_bytes_written")),
    ("device ld+st ops", ("device_load_ops", "device_store_ops")),
    ("threadgroup bytes", ("threadgroup_bytes_read", "threadgroup_bytes_written")),
    ("threadgroup ld+st ops", ("threadgroup_load_ops", "threadgroup_store_ops")),
    ("threadgroup memory", ("threadgroup_memory_bytes",)),
    ("barriers", ("barriers",)),
    ("simd ops", ("simd_ops",)),
    ("thread arrays", ("local_array_bytes",)),
)
HAND_TUNED_TARGET = (1.25, 1.0)      # counters at most 1.25x hand-tuned, modeled time 1.0x


def _times(ratio, digits: int = 2) -> str:
    return "-" if ratio is None else f"{ratio:.{digits}f}x"


def hand_tuned_rows(results: BenchRun) -> list[list[str]]:
    """Per case with a hand-tuned reference: the kernel and its geometry, its status, then
    generated / hand-tuned per counter group and per chip's modeled time, and the counters
    and chips that miss the target (counters <= 1.25x, modeled time <= 1.0x)."""
    chips = list(results.chips)
    rows = []
    for c in results.cases:
        hand = c.hand_tuned
        if not hand:
            continue
        gen, ref = c.counters or {}, hand.get("counters") or {}
        cells, misses = [], []
        for column, keys in HAND_TUNED_COLUMNS:
            g, r = sum(gen.get(k, 0) for k in keys), sum(ref.get(k, 0) for k in keys)
            ratio = (g / r if r else (1.0 if not g else None)) if gen and ref else None
            cells.append(_times(ratio) if ratio is not None or not (gen and ref)
                         else "ref 0")
            if (ratio is None and g and ref) or (ratio or 0) > HAND_TUNED_TARGET[0]:
                misses.append(column)
        for chip in chips:
            ratio = hand.get("modeled_ratios", {}).get(chip)
            cells.append(_times(ratio, 4))          # a miss by 0.01% shows
            if ratio is not None and ratio > HAND_TUNED_TARGET[1] * (1 + 1e-9):
                misses.append(f"modeled {chip}")
        target = "-" if not ref else ("met" if not misses else ", ".join(misses))
        rows.append([c.name, f"{hand['file']}:{hand['kernel']} ({hand['geometry']})",
                     hand["status"], *cells, target])
    return rows


def hand_tuned_term_rows(cases: list, chip: str) -> list[list[str]]:
    """Per case with a hand-tuned reference: the generated kernel's modeled terms on `chip`,
    then the reference's."""
    rows = []
    for c in cases:
        hand = c.hand_tuned or {}
        mine, theirs = (c.modeled or {}).get(chip), (hand.get("modeled") or {}).get(chip)
        if mine and theirs:
            rows.append([f"{c.name} (generated)", *_term_cells(mine)])
            rows.append([f"{c.name} (hand-tuned {hand['kernel']})", *_term_cells(theirs)])
    return rows


def peer_term_rows(cases: list, chip: str) -> list[list[str]]:
    """Per case and peer that ran: the generated kernel's modeled terms on `chip`, then
    the peer's."""
    rows = []
    for c in cases:
        for name, rec in sorted((c.peers or {}).items()):
            mine, theirs = (c.modeled or {}).get(chip), (rec.get("modeled") or {}).get(chip)
            if mine and theirs:
                rows.append([f"{c.name} (generated)", *_term_cells(mine)])
                rows.append([f"{c.name} ({name} {rec['kernel']})", *_term_cells(theirs)])
    return rows


PEER_TERM_NOTE = ("The model's terms for each case with a peer, the generated kernel's "
                  "row first, the peer's below: where each one's modeled time goes.")


def hand_tuned_header(chips: list) -> list[str]:
    return ["case", "hand-tuned kernel", "status",
            *[column for column, _ in HAND_TUNED_COLUMNS],
            *[f"modeled {chip}" for chip in chips], "misses the target"]


HAND_TUNED_NOTE = ("Generated / hand-tuned at the same shape and inputs: each generated kernel "
                   "beside our own hand-written MSL for the same computation "
                   "(harness/bench/reference_kernels/), both run on the emulator with every check "
                   "and compared with the same oracle. Below 1x the generated kernel does "
                   "less. Target: every counter at most 1.25x, modeled time at most 1.0x. "
                   "The gate tracks these ratios: one that grows fails it.")


def hand_tuned_table(results: BenchRun) -> Table | None:
    """The console's compact form of `hand_tuned_rows`, 100 columns wide: the counter
    groups of `CONSOLE_PEER_COLUMNS`, one chip's modeled ratio, and the number of misses
    (or the reference's status when it does not pass); bench.md has every column."""
    rows = hand_tuned_rows(results)
    if not rows:
        return None
    chips = list(results.chips)
    chip = _breakdown_chip(chips)
    table = Table(title="generated / hand-tuned reference (same shape and inputs; target "
                  "counters <= 1.25x, modeled <= 1.0x)", title_justify="left")
    table.add_column("case", overflow="fold")
    columns = [column for column, _ in HAND_TUNED_COLUMNS]
    shown = [columns.index(c) for c in ("device bytes", "device ld+st ops",
                                        "threadgroup bytes", "barriers", "simd ops",
                                        "thread arrays")]
    for col in (*CONSOLE_PEER_COLUMNS, f"{chip} time", "misses"):
        table.add_column(col, justify="right", no_wrap=True)
    first_chip = 3 + len(HAND_TUNED_COLUMNS)
    for row in rows:
        misses = row[-1]
        count = "0" if misses == "met" else ("-" if misses == "-"
                                             else str(len(misses.split(", "))))
        ratio = row[first_chip + chips.index(chip)]
        table.add_row(row[0], *[row[3 + i] for i in shown],
                      ratio[:-3] + "x" if ratio.endswith("x") and "." in ratio else ratio,
                      count if row[2] == "pass" else Text(row[2], "bold red"))
    return table


# -- peers (harness/bench/peers/) ------------------------------------------------------------

PEER_COLUMNS = (("dev B", HAND_TUNED_COLUMNS[0][1]), ("dev ops", HAND_TUNED_COLUMNS[1][1]),
                ("tg B", HAND_TUNED_COLUMNS[2][1]), ("tg ops", HAND_TUNED_COLUMNS[3][1]),
                ("tg mem", HAND_TUNED_COLUMNS[4][1]), ("barriers", ("barriers",)),
                ("simd", ("simd_ops",)), ("arrays", ("local_array_bytes",)))
# the console's ratio columns (100 columns wide; the threadgroup operations and memory
# are in "generated does more" and in bench.md)
CONSOLE_PEER_COLUMNS = ("dev B", "dev ops", "tg B", "barriers", "simd", "arrays")
PEER_TARGET = 1.0            # the goal: every work counter <= 1.0x MLX's


def _peer_records(results: BenchRun):
    """(case, peer name, record) of every peer run, in case order."""
    for c in results.cases:
        for name, rec in sorted((c.peers or {}).items()):
            yield c, name, rec


def _group_ratio(gen: dict, ref: dict, keys) -> tuple[float | None, bool]:
    """generated / peer summed over `keys`, and whether the generated side is behind
    (more work, or work where the peer has none)."""
    g, r = sum(gen.get(k, 0) for k in keys), sum(ref.get(k, 0) for k in keys)
    if not r:
        return (1.0, False) if not g else (None, True)
    return g / r, g / r > PEER_TARGET * (1 + 1e-9)


def peer_rows(results: BenchRun) -> list[list[str]]:
    """Per case and peer: the peer's kernel, status, generated / peer per counter group
    and per chip's modeled time, the counter groups where the generated kernel does more
    work than the peer ("peer 0": the peer does none), and the peer's launch."""
    chips = list(results.chips)
    rows = []
    for c, name, rec in _peer_records(results):
        gen, ref = c.counters or {}, rec.get("counters") or {}
        cells, behind = [], []
        for column, keys in PEER_COLUMNS:
            if not (gen and ref):
                cells.append("-")
                continue
            ratio, worse = _group_ratio(gen, ref, keys)
            cells.append(_times(ratio) if ratio is not None else "peer 0")
            if worse:
                behind.append(column)
        for chip in chips:
            ratio = rec.get("modeled_ratios", {}).get(chip)
            cells.append(_times(ratio, 3))
        status = rec["status"] + (f": {rec['message']}" if rec["status"] != "pass"
                                  and rec["message"] else "")
        rows.append([c.name, f"{name} {rec.get('version', '')} {rec.get('kernel') or '-'}",
                     status, *cells, ", ".join(behind) if ref else "-",
                     f"{rec.get('geometry', '')} [{rec.get('host_code', '')}]"
                     + (f"; formats: {rec['formats']}" if rec.get("formats") else "")])
    return rows


def peer_header(chips: list) -> list[str]:
    return ["case", "peer kernel", "status", *[c for c, _ in PEER_COLUMNS],
            *[f"modeled {chip}" for chip in chips], "generated does more", "peer launch"]


PEER_NOTE = ("Generated / peer at the same shape and inputs: the case's generated kernel "
             "beside MLX's own Metal kernel for the same work (`harness bench --peers mlx`; "
             "MLX's headers from the mlx-metal wheel, our instantiation and MLX's launch "
             "geometry from its host code, harness/bench/peers/), both run on the emulator "
             "with every check and compared with the same oracle. The emulator counts the "
             "work; the roofline model turns it into time; neither is a GPU. Below 1x the "
             "generated kernel does less. 'peer 0': MLX does none of that work. Goal: every "
             "work counter at most 1.0x. The gate tracks these ratios: one that grows fails "
             "it.")


def peer_tables(results: BenchRun) -> list[Table]:
    """The console's form of `peer_rows`, two tables that fit 100 columns: the ratios
    (one chip's modeled time), then each peer's kernel, status and where the generated
    kernel does more (bench.md has every column)."""
    rows = peer_rows(results)
    if not rows:
        return []
    chips = list(results.chips)
    chip = _breakdown_chip(chips)
    ratios = Table(title="generated / MLX (same shape, inputs and oracle; below 1x the "
                   "generated kernel does less)", title_justify="left")
    ratios.add_column("case", overflow="fold")
    shown = [i for i, (col, _) in enumerate(PEER_COLUMNS) if col in CONSOLE_PEER_COLUMNS]
    for i in shown:
        ratios.add_column(PEER_COLUMNS[i][0], justify="right", no_wrap=True)
    ratios.add_column(f"{chip} time", justify="right", no_wrap=True)
    kernels = Table(title="MLX peer kernels", title_justify="left")
    for col in ("case", "status", "MLX kernel", "generated does more"):
        kernels.add_column(col, overflow="fold")
    first_chip = 3 + len(PEER_COLUMNS)
    for row in rows:
        peer = row[1].split(" ", 1)[0]
        case = row[0] if peer == "mlx" else f"{row[0]} ({peer})"   # a second peer's row
        ratios.add_row(case, *[row[3 + i] for i in shown],
                       row[first_chip + chips.index(chip)])
        status = row[2].split(":")[0]
        kernels.add_row(case, Text(status, "green" if status == "pass" else
                                     "yellow" if status in ("not_applicable", "unavailable")
                                     else "bold red"),
                        row[1].split(" ", 2)[-1], row[-2] or "nothing")
    return [ratios, kernels]


def changes_table(changes: list) -> Table:
    table = Table(title="changes against the baseline", title_justify="left")
    for col in ("case", "metric", "baseline", "current", "change", "verdict", "detail"):
        table.add_column(col, justify="right" if col in ("baseline", "current", "change")
                         else "left", overflow="fold")
    order = {"failure": 0, "regression": 1, "missing": 2, "note": 3, "new": 4,
             "improvement": 5}
    for ch in sorted(changes, key=lambda c: (order.get(c.kind, 9), c.case, c.metric)):
        table.add_row(ch.case, ch.metric, _change_value(ch, ch.baseline),
                      _change_value(ch, ch.current), _relative(ch),
                      Text(ch.kind, KIND_STYLE.get(ch.kind, "")), ch.detail)
    return table


def against_table(against: dict) -> Table:
    table = Table(title=f"compile time A/B: this tree vs {against['ref']} "
                  f"({against.get('rounds', '?')} interleaved rounds)", title_justify="left")
    for col in ("case", f"{against['ref']} ms", "this ms", "change", "noise (SE)",
                "threshold", "verdict"):
        table.add_column(col, justify="left" if col in ("case", "verdict") else "right",
                         overflow="fold")         # 100 columns: fold, never cut a name
    for row in against.get("cases", []):
        if row.get("error"):
            table.add_row(row["name"], "-", "-", "-", "-", "-", Text(row["error"], "yellow"))
            continue
        table.add_row(row["name"], _ms(row["ref_median"]), _ms(row["this_median"]),
                      f"{row['change']:+.1%}", f"{row['noise']:.1%}",
                      f"±{row['threshold']:.1%}",
                      Text(row["verdict"], KIND_STYLE.get(row["verdict"], "")))
    return table


# -- markdown ------------------------------------------------------------------------------

def _md_table(header: list[str], rows: list[list[str]]) -> str:
    def esc(cell):
        return str(cell).replace("|", "\\|").replace("\n", " ")
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(esc(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def _sections(results: BenchRun, changes: list, baseline_path: str | None) -> list[tuple]:
    """(title, header, rows, note) per report section, shared by markdown and HTML."""
    chips = list(results.chips)
    cases = [c for c in results.cases if c.status != "skip"]
    skipped = [c for c in results.cases if c.status == "skip"]
    out = []
    rows = [[c.case, c.metric, _change_value(c, c.baseline), _change_value(c, c.current),
             _relative(c), c.kind, c.detail] for c in changes]
    out.append(("Changes against the baseline",
                ["case", "metric", "baseline", "current", "change", "verdict", "detail"], rows,
                f"Baseline: {baseline_path or 'none'}. Counters gate exactly (any increase "
                f"fails); modeled times gate past {gate.MODELED_THRESHOLD:.0%}; a case "
                "failing its oracle or with emulator findings fails."
                if rows else f"No changes against the baseline ({baseline_path or 'none'})."))
    rows = []
    for c in cases:
        k = c.counters or {}
        ratio, bpo = _ratio(c), _bytes_per_op(c)
        rows.append([c.name, c.status, c.shape, c.scaling, _compile_cell(c),
                     _num(k.get("launches")),
                     _num((k.get("device_bytes_read") or 0) + (k.get("device_bytes_written")
                                                               or 0)) if k else "-",
                     "-" if ratio is None else f"{ratio:.2f}x",
                     _num(k["device_load_ops"] + k["device_store_ops"]) if k else "-",
                     "-" if bpo is None else f"{bpo:.1f}",
                     _num(k["threadgroup_bytes_read"] + k["threadgroup_bytes_written"])
                     if k else "-",
                     _num(k.get("barriers")), _num(k.get("simd_ops"))])
    out.append(("Cases", ["case", "status", "LLM shape", "scaling", "compile ms (first / "
                          "warm median ± stddev)", "launches", "device bytes", "/ minimum",
                          "device ld+st ops", "bytes/op", "threadgroup bytes", "barriers",
                          "simd ops"],
                rows, "Counters are summed over the program's launches from one checked "
                "emulator run (forward schedule, seed 0). Minimum = every input read once "
                "+ every output written once; above 1x: re-reads, intermediates or scalar "
                "loads; below 1x: inputs the kernel need not read (the untaken side of a "
                "select, an unused argument). Compile = DSL -> MSL (parse + core.compile, "
                "no cache), wall clock on this machine: the case's first compile in the "
                "bench process, then warm rounds; not compared with the baseline; "
                f"'> {measure.COMPILE_GOAL_S * 1e3:.0f} goal' marks a case whose first "
                "compile, per device kernel of the program, is over the compile-time goal."))
    rows = []
    for c in cases:
        m = c.modeled
        if not m:
            continue
        scale = c.full_scale or 1.0
        rows.append([c.name, *[_us(m[ch]["seconds"]) for ch in chips],
                     *[_us(_extrapolate(m[ch], scale)) for ch in chips],
                     m[chips[0]]["bound"], f"{m[chips[0]]['efficiency']:.0%}"])
    out.append(("Modeled Apple-GPU time (roofline)",
                ["case", *[f"{ch} us" for ch in chips],
                 *[f"{ch} us, real shape" for ch in chips], f"bound ({chips[0]})",
                 f"ideal / modeled ({chips[0]})"],
                rows, "time = max(device, ALU, threadgroup-memory and simd terms) + "
                f"barriers + launches x {results.launch_overhead_s * 1e6:g} us (the terms "
                "are in the next table). 'real shape' scales every term but the launches by "
                "the case's scaling factor (linear in rows). ideal = the device-and-ALU "
                "roofline over the minimum traffic and one launch (above 100% when the kernel "
                "need not read every input). A model, not a measurement: see the chip table, "
                "docs/bench.md and harness/bench/roofline.py."))
    chip = _breakdown_chip(chips)
    rows = [[c.name, *_term_cells(c.modeled[chip])] for c in cases
            if c.modeled and chip in c.modeled]
    if rows:
        out.append((f"Modeled time term by term ({chip})", ["case", *TERM_HEADER], rows,
                    TERM_NOTE))
    rows = hand_tuned_rows(dataclasses.replace(results, cases=cases))
    if rows:
        out.append(("Generated against hand-tuned reference kernels",
                    hand_tuned_header(chips), rows, HAND_TUNED_NOTE))
    rows = hand_tuned_term_rows(cases, chip)
    if rows:
        out.append((f"Generated against hand-tuned, term by term ({chip})",
                    ["kernel", *TERM_HEADER], rows, HAND_TUNED_TERM_NOTE))
    rows = peer_rows(dataclasses.replace(results, cases=cases))
    if rows:
        out.append(("Generated against MLX's kernels (peers)", peer_header(chips), rows,
                    PEER_NOTE))
    rows = peer_term_rows(cases, chip)
    if rows:
        out.append((f"Generated against MLX, term by term ({chip})",
                    ["kernel", *TERM_HEADER], rows, PEER_TERM_NOTE))
    rows = [[c.name, line] for c in cases for line in streamed_lines(c.msl or "")]
    if rows:
        out.append(("Rows streamed past the register budget", ["case", "chunk loop (from the "
                                                                   "MSL)"], rows, STREAMED_NOTE))
    rows = reference_rows(dataclasses.replace(results, cases=cases))
    if rows:
        out.append(("Modeled time against measured references", REFERENCE_HEADER, rows,
                    REFERENCE_NOTE))
    gpu_rows = [[c.name, _us(c.gpu.get("median")), _us(c.gpu.get("min")),
                 c.gpu.get("error", "")] for c in cases if c.gpu]
    if gpu_rows:
        out.append(("Measured GPU time (MPS)", ["case", "median us", "min us", "error"],
                    gpu_rows, "UNTESTED code path (no Mac has run it in this project)."))
    against = results.against
    if against:
        if against.get("error"):
            out.append((f"Compile time A/B against {against.get('ref')}", ["error"],
                        [[against["error"]]], ""))
        else:
            rows = [[r["name"], _ms(r.get("ref_median")), _ms(r.get("this_median")),
                     f"{r['change']:+.1%}" if "change" in r else "-",
                     f"{r['noise']:.1%}" if "noise" in r else "-",
                     f"±{r['threshold']:.1%}" if "threshold" in r else "-",
                     r.get("error") or r["verdict"]] for r in against["cases"]]
            out.append((f"Compile time A/B against {against['ref']} "
                        f"({against.get('commit', '')[:12]})",
                        ["case", "ref median ms", "this median ms", "change", "noise (SE)",
                         "threshold", "verdict"], rows, against.get("method", "")))
    rows = power_rows(dataclasses.replace(results, cases=cases))
    if rows:
        out.append(("What each case's oracle check rejects", POWER_HEADER, rows, POWER_NOTE))
    if skipped:
        out.append(("Skipped cases", ["case", "family", "reason"],
                    [[c.name, c.family, c.message] for c in skipped], ""))
    rows = [[name, str(ch["gpu_cores"]), f"{ch['clock_mhz']:g}", f"{ch['bandwidth_gbs']:g}",
             f"{ch['fp32_tflops']:.2f}", f"{ch['fp16_tflops']:.2f}",
             _num(ch.get("threadgroup_gbs")), _num(ch.get("simd_gops")),
             _cache_cell(ch.get("l2_bytes"), ch.get("l2_gbs")),
             _cache_cell(ch.get("slc_bytes"), ch.get("slc_gbs")),
             (ch.get("on_chip") or {}).get("family", "-"),
             "; ".join(filter(None, (ch["source"], ch.get("cache_source"))))]
            for name, ch in results.chips.items()]
    out.append(("Chips of the model", ["chip", "GPU cores", "clock MHz", "GB/s",
                                       "FP32 TFLOPS (derived)", "FP16 TFLOPS",
                                       "threadgroup GB/s (estimate)", "simd Gops/s",
                                       "L2 (GB/s)", "system-level cache (GB/s)",
                                       "on-chip figures", "source"],
                rows, "TFLOPS = cores x 128 ALUs x clock x 2; threadgroup GB/s = cores x "
                "64 B/cycle x clock; simd Gops/s = cores x 4 schedulers / 2.04 cycles x clock "
                "(shuffles); L2 GB/s = cores x 32 B/cycle x clock; system-level cache GB/s = "
                "2 x DRAM. "
                "Sources and limitations: docs/bench.md and "
                "harness/bench/roofline.py and README.md (harness bench)."))
    return out


STREAMED_NOTE = ("A row fragment that would hold more than the target's register budget per "
                 "thread is lowered to loops over chunks of the row (pass stream_rows, "
                 "docs/architecture.md \"Streamed rows\"); each loop's comment in the MSL "
                 "says what it does. `--disable stream_rows` holds the rows whole instead.")


def streamed_lines(msl: str) -> list[str]:
    """The `// streamed: ...` comments the MSL printer writes above chunk loops."""
    return [ln.strip()[3:] for ln in msl.splitlines() if ln.strip().startswith("// streamed:")]


THROUGHPUT_TERMS = ("memory", "compute", "threadgroup", "simd")
TERM_HEADER = ["total us", "device memory us (level)", "of which spills us (B/thread, level)",
               "from DRAM MB", "from cache MB",
               "ALU us", "threadgroup memory us", "simd ops us", "barriers us", "launches us",
               "groups / core (limit)", "occupancy", "bound"]
TERM_NOTE = ("Each term of harness/bench/roofline.py at the shape that ran: device memory is the "
             "slowest of DRAM (every distinct byte once, and the repeat accesses no cache "
             "holds), the system-level cache and the GPU L2 (a buffer's repeat accesses are "
             "served by the cache its footprint fits); it and ALU "
             "are divided by the occupancy factor (the fraction of peak throughput measured "
             "with that many resident simdgroups per core: 37% at 4, 64% at 8, 100% from 24); "
             "simd ops are priced by kind (a simd_sum 14.54 cycles, a shuffle 2.04 plus its "
             "butterfly combine, simdgroup-matrix loads and stores in the memory terms); "
             "register spills: what a thread needs beyond its share of the register file "
             "at the occupancy the compiler keeps (its least-used array bytes) moves as "
             "often as the MSL touches it, at least a store and a load, through the cache "
             "level the resident threads' spills fit (their part of the memory term is the "
             "spills column); "
             "the four throughput terms overlap (the largest binds), barriers and "
             "launches add. groups / core: threadgroups one core holds at once and what "
             "limits them (threads, threadgroup memory, registers: thread-local arrays plus "
             "an allowance). The constants and their sources are in docs/bench.md; "
             "threadgroup bandwidth, barrier cycles and the M3/M4 caches are estimates.")
HAND_TUNED_TERM_NOTE = ("The terms of the previous table for each case with a hand-tuned "
                        "reference, the generated kernel's row above the reference's: "
                        "which term makes the difference in modeled time.")


def _cache_cell(nbytes, gbs) -> str:
    if not nbytes:
        return "-"
    size = f"{nbytes / 1024 / 1024:g} MiB" if nbytes >= 1024 * 1024 else f"{nbytes // 1024} KiB"
    return f"{size} ({_num(gbs)})"


def _breakdown_chip(chips: list) -> str:
    return "M2" if "M2" in chips else chips[0]


def _mb(nbytes) -> str:
    return "-" if nbytes is None else f"{nbytes / 1e6:,.2f}"


def _spill_cell(m: dict) -> str:
    """The register spills' share of the memory term, the bytes each thread spills and
    where they are served; '-' without spills (or in a document from before the term)."""
    if not m.get("spilled_bytes_per_thread"):
        return "-"
    return (f"{_us(m['spill_seconds'])} ({m['spilled_bytes_per_thread']:,} B, "
            f"{m['spill_level']})")


def _term_cells(m: dict) -> list[str]:
    """One case's modeled terms (a document from before the on-chip or cache terms shows
    '-')."""
    memory = _us(m.get("memory_seconds"))
    if "memory_level" in m:
        memory += f" ({m['memory_level']})"
    return [_us(m["seconds"]), memory, _spill_cell(m), _mb(m.get("dram_bytes")),
            _mb(m.get("cached_bytes")),
            _us(m.get("compute_seconds")),
            _us(m.get("threadgroup_seconds")), _us(m.get("simd_seconds")),
            _us(m.get("barrier_seconds")), _us(m.get("launch_seconds")),
            f"{m['groups_per_core']} ({m['occupancy_limit']})" if "groups_per_core" in m
            else "-", f"{m['occupancy']:.0%}" if "occupancy" in m else "-", m["bound"]]


def _extrapolate(m: dict, scale: float) -> float:
    """Modeled time at the real shape: every term but the launches grows with the work."""
    throughput = max(m.get(f"{t}_seconds", 0.0) for t in THROUGHPUT_TERMS)
    return (throughput + m.get("barrier_seconds", 0.0)) * scale + m["launch_seconds"]


def _header(results: BenchRun, changes: list) -> list[str]:
    rev = results.revision
    opts = results.options
    perturbed = ""
    if opts.get("disable") or opts.get("replace"):
        perturbed = (f"; pipeline perturbed: disable={opts.get('disable')} "
                     f"replace={opts.get('replace')}")
    dirty = " (with uncommitted changes)" if rev["dirty"] else ""
    return [verdict_line(results, changes),
            f"revision {rev['commit'][:12] or '?'}{dirty}, "
            f"created {results.created}, {results.seconds:.0f} s on "
            f"{results.machine['node']} ({results.machine['cpus']} CPUs), emulator "
            f"{results.toolchain}{perturbed}"]


def markdown(results: BenchRun, changes: list, baseline_path: str | None = None) -> str:
    head = _header(results, changes)
    parts = ["# metaltile bench report", "", f"**{head[0]}**", "", head[1], ""]
    for title, header, rows, note in _sections(results, changes, baseline_path):
        parts += [f"## {title}", ""]
        if note:
            parts += [note, ""]
        if rows:
            parts += [_md_table(header, rows), ""]
    return "\n".join(parts)


# -- HTML with plots -----------------------------------------------------------------------

def _pyplot():
    try:
        import matplotlib
    except ImportError:
        return None
    matplotlib.use("Agg")
    matplotlib.rcParams["svg.hashsalt"] = "metaltile"   # stable ids: reproducible files
    matplotlib.rcParams["svg.fonttype"] = "none"
    import matplotlib.pyplot as plt
    return plt


def _svg(fig, plt) -> str:
    buf = io.StringIO()
    fig.savefig(buf, format="svg", bbox_inches="tight", metadata={"Date": None})
    plt.close(fig)
    text = buf.getvalue()
    return text[text.index("<svg"):]


def _counter_plot(plt, cases: list, baseline: Baseline | None) -> str | None:
    """Per counter, per case: this run / baseline (1.0 = unchanged)."""
    base = baseline.cases if baseline else {}
    rows = [c for c in cases if c.counters and c.name in base]
    if not rows:
        return None
    ncols = 4
    nrows = -(-len(PLOTTED_COUNTERS) // ncols)
    fig, grid = plt.subplots(nrows, ncols, sharey=True, squeeze=False,
                             figsize=(11, nrows * (0.3 * len(rows) + 1.2)))
    axes = [ax for row in grid for ax in row]
    names = [c.name for c in rows]
    for ax, key in zip(axes, PLOTTED_COUNTERS):
        ratios = []
        for c in rows:
            b, v = base[c.name].counters.get(key), c.counters.get(key)
            ratios.append(1.0 if b == v else (v / b if b else 2.0))
        colors = ["#c0392b" if r > 1 else "#27ae60" if r < 1 else "#7f8c8d" for r in ratios]
        ax.barh(range(len(rows)), ratios, color=colors)
        ax.axvline(1.0, color="black", linewidth=0.8)
        ax.set_title(key.replace("_", " "), fontsize=8)
        ax.set_xlim(0, max(2.0, max(ratios) * 1.1))
        ax.tick_params(labelsize=7)
    for row in grid:
        row[0].set_yticks(range(len(rows)), names, fontsize=7)
    axes[0].invert_yaxis()
    fig.suptitle("counters: this run / baseline (red: more, green: less, grey: same)",
                 fontsize=9)
    fig.tight_layout()
    return _svg(fig, plt)


def _modeled_plot(plt, cases: list, baseline: Baseline | None, chips: list) -> str | None:
    rows = [c for c in cases if c.modeled]
    if not rows:
        return None
    base = baseline.cases if baseline else {}
    fig, ax = plt.subplots(figsize=(8, 0.4 * len(rows) * max(1, len(chips) / 4) + 1.2))
    height = 0.8 / len(chips)
    for j, chip in enumerate(chips):
        ys = [i + j * height for i in range(len(rows))]
        ax.barh(ys, [c.modeled[chip]["seconds"] * 1e6 for c in rows], height=height,
                label=chip)
        bx = [(base[c.name].modeled_seconds.get(chip, float("nan")) * 1e6)
              if c.name in base else float("nan") for c in rows]
        ax.plot(bx, ys, "k|", markersize=9)
    ax.set_yticks([i + 0.4 - height / 2 for i in range(len(rows))],
                  [c.name for c in rows], fontsize=7)
    ax.invert_yaxis()
    ax.set_xscale("log")
    ax.set_xlabel("modeled time, us, log scale (bars: this run; |: baseline)", fontsize=8)
    ax.legend(fontsize=7)
    ax.tick_params(labelsize=7)
    return _svg(fig, plt)


def _compile_plot(plt, cases: list, against: dict | None) -> str | None:
    """Compile time rounds per case; with --against, both sides' A/B rounds beside them."""
    rows = [c for c in cases if c.compile]
    if not rows:
        return None
    ab = {r["name"]: r for r in (against or {}).get("cases", []) if r.get("ref_data")}
    fig, ax = plt.subplots(figsize=(8, 0.6 * len(rows) + 1.2))

    def boxes(series, offset, width, color):
        at = [(i + offset, [x * 1e3 for x in d]) for i, d in enumerate(series) if d]
        if at:
            ax.boxplot([d for _, d in at], positions=[p for p, _ in at],
                       orientation="horizontal", widths=width,
                       boxprops={"color": color}, medianprops={"color": color})

    boxes([c.compile["data"] for c in rows], 0.0, 0.3, "black")
    if ab:
        boxes([ab.get(c.name, {}).get("ref_data") for c in rows], 0.3, 0.2, "#2980b9")
        boxes([ab.get(c.name, {}).get("this_data") for c in rows], -0.3, 0.2, "#c0392b")
        ax.set_title(f"A/B rounds: blue {against['ref']}, red this tree; black: in-process "
                     "rounds", fontsize=8)
    ax.set_yticks(range(len(rows)), [c.name for c in rows], fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel("compile time DSL -> MSL, ms (this machine)", fontsize=8)
    ax.tick_params(labelsize=7)
    return _svg(fig, plt)


HTML_STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em; color: #222; }
table { border-collapse: collapse; margin: 0.5em 0 1.5em; font-size: 13px; }
th, td { border: 1px solid #ccc; padding: 3px 8px; text-align: left; }
th { background: #f0f0f0; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
.failure, .regression { color: #b00; font-weight: bold; }
.improvement { color: #070; } .new, .note, .missing { color: #a60; }
.verdict-FAIL { color: #b00; } .verdict-PASS { color: #070; }
figure { margin: 1em 0; } p.note { color: #555; max-width: 70em; }
"""


def html_report(results: BenchRun, changes: list, baseline: Baseline | None,
                baseline_path: str | None = None) -> str:
    e = html.escape
    head = _header(results, changes)
    verdict = head[0].split(":")[0]
    parts = ["<!doctype html><html><head><meta charset='utf-8'>",
             "<title>metaltile bench report</title>", f"<style>{HTML_STYLE}</style>",
             "</head><body>", "<h1>metaltile bench report</h1>",
             f"<p class='verdict-{verdict}'><b>{e(head[0])}</b></p>", f"<p>{e(head[1])}</p>"]
    plt = _pyplot()
    cases = [c for c in results.cases if c.status != "skip"]
    plots = []
    if plt is None:
        parts.append("<p class='note'>Plots need matplotlib: <code>pip install "
                     "'metaltile[bench]'</code>.</p>")
    else:
        plots = [("Counters against the baseline", _counter_plot(plt, cases, baseline)),
                 ("Modeled time per chip", _modeled_plot(plt, cases, baseline,
                                                         list(results.chips))),
                 ("Compile time", _compile_plot(plt, cases, results.against))]
    for title, header, rows, note in _sections(results, changes, baseline_path):
        parts.append(f"<h2>{e(title)}</h2>")
        if note:
            parts.append(f"<p class='note'>{e(note)}</p>")
        if rows:
            parts.append("<table><tr>" + "".join(f"<th>{e(h)}</th>" for h in header)
                         + "</tr>")
            for row in rows:
                cells = []
                for cell in row:
                    cls = cell if cell in KIND_STYLE else (
                        "num" if str(cell)[:1].isdigit() or str(cell)[:1] in "+-" else "")
                    cells.append(f"<td class='{cls}'>{e(str(cell))}</td>")
                parts.append("<tr>" + "".join(cells) + "</tr>")
            parts.append("</table>")
        if title == "Changes against the baseline":
            parts += [f"<h2>{e(t)}</h2><figure>{svg}</figure>" for t, svg in plots if svg]
    parts.append("</body></html>")
    return "\n".join(parts)


def write_reports(results: BenchRun, changes: list, baseline: Baseline | None, out_dir: Path,
                  baseline_path: str | None = None) -> dict[str, Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    md = out_dir / "bench.md"
    md.write_text(markdown(results, changes, baseline_path))
    page = out_dir / "bench.html"
    page.write_text(html_report(results, changes, baseline, baseline_path))
    return {"markdown": md, "html": page}



# -- the oracle's power --------------------------------------------------------------------

POWER_NOTE = ("For the case's weakest float output (the largest ratio of the two): the "
              "smallest d for which its check rejects the output scaled by 1 + d (bisected "
              "on what a perfect kernel stores), against the d it must reject by the "
              "output's precision (1e-3 float32, 2e-2 float16, 5e-2 bfloat16). "
              "docs/tolerance.md.")


def power_rows(results: BenchRun) -> list[list[str]]:
    rows = []
    for c in results.cases:
        p = c.power
        if not p:
            continue
        found = p.get("rejects_scaling")
        need = p.get("required_scaling")
        same = "; ".join(f"output {i}: {', '.join(names)}"
                         for i, names in (p.get("indistinguishable") or {}).items())
        rows.append([c.name, "-" if found is None else f"{found:.2g}",
                     "-" if need is None else f"{need:.0e}",
                     p.get("weak") and "WEAK" or "ok", same or "-"])
    return rows


POWER_HEADER = ["case", "rejects x(1+d) from d", "must reject d", "doctorings",
                "indistinguishable (why: docs/tolerance.md)"]


def power_table(results: BenchRun) -> Table | None:
    rows = power_rows(results)
    if not rows:
        return None
    table = Table(title="oracle power", title_justify="left")
    for col in POWER_HEADER[:4]:
        table.add_column(col, justify="left" if col == "case" else "right", overflow="fold")
    for row in rows:
        table.add_row(*row[:4])
    return table
