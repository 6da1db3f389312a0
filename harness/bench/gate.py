"""The bench gate: a run against its baseline, as a list of `Change`s.

    changes = compare(run, baseline)        # measure.BenchRun, baseline.Baseline (or None)
    failed = gate_failed(changes)           # any Change with kind failure or regression

Rules: a case that does not pass is a "failure"; every gated counter (`GATED`) gates
exactly: an increase is a "regression", a decrease an "improvement" to list; modeled times
gate past `MODELED_THRESHOLD` (they derive from the counters, so this only absorbs float
rounding); new, changed-params and missing cases and another clang are "note"s. A case
with a hand-tuned reference (`BenchCase.hand_tuned`) fails when that kernel does not pass,
and its generated / hand-tuned ratios gate like counters: a ratio that grows is a
"regression" (the generated kernel lost ground on hand-written code, or the reference got
better), per counter exactly and per modeled time past `MODELED_THRESHOLD`. Likewise a
peer kernel run with `--peers` (harness/bench/peers/): one that fails its oracle or has
findings fails the gate, and a generated / peer ratio that grows is a regression. Compile
wall times are never compared with a baseline recorded on another machine (26% noise
between machines was measured): they are compared A/B within one run by
`harness bench --against GITREF` (harness/bench/against.py), whose verdicts become Changes here.
docs/bench.md describes the model and the gate.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from harness.bench.baseline import PEER_OK, Baseline, BaselineEntry
from harness.bench.measure import BenchRun

MODELED_THRESHOLD = 0.01      # relative; modeled time derives from exact counters
GATED = ("launches", "device_bytes_read", "device_bytes_written", "device_load_ops",
         "device_store_ops", "threadgroup_bytes_read", "threadgroup_bytes_written",
         "threadgroup_load_ops", "threadgroup_store_ops", "threadgroup_memory_bytes",
         "barriers", "simd_ops", "atomic_ops", "local_array_bytes")
INFORMATIONAL = ("groups", "threads", "simdgroups", "device_unique_bytes_read",
                 "device_unique_bytes_written", "simd_shuffle_ops", "simd_broadcast_ops",
                 "simd_reduce_ops", "simd_scan_ops", "simd_vote_ops", "simd_matrix_load_ops",
                 "simd_matrix_store_ops")


@dataclass(frozen=True)
class Change:
    """One difference between a run and its baseline (or within an A/B run)."""
    case: str
    metric: str
    kind: str          # failure | regression | improvement | new | missing | note
    baseline: object = None
    current: object = None
    detail: str = ""

    @property
    def gates(self) -> bool:
        return self.kind in ("failure", "regression")

    @property
    def relative(self) -> float | None:
        try:
            return float(self.current) / float(self.baseline) - 1.0
        except (TypeError, ValueError, ZeroDivisionError):
            return None


def compare(results: BenchRun, baseline: Baseline | None) -> list[Change]:
    """Every change of `results` against `baseline` (harness/bench/baseline.py) that the
    report shows; the gate fails when any `Change.gates`."""
    changes: list[Change] = []
    if baseline is None:
        changes.append(Change("-", "baseline", "note", detail="no baseline: counters not "
                              "compared (harness bench --update-baseline records one)"))
    base_cases = baseline.cases if baseline is not None else {}
    theirs = _clang_major(baseline.toolchain if baseline is not None else None)
    ours = _clang_major(results.toolchain)
    if baseline is not None and theirs != ours:
        changes.append(Change("-", "toolchain", "note", theirs, ours, "the emulator's clang "
                              "differs from the baseline's: counters of code clang optimizes "
                              "differently may move"))
    for case in results.cases:
        name, status = case.name, case.status
        if status == "skip":
            if name in base_cases:
                changes.append(Change(name, "status", "note", "pass", "skip", case.message))
            continue
        if status != "pass":
            changes.append(Change(name, "status", "failure", None, status,
                                  case.message.splitlines()[0] if case.message else ""))
        for peer, rec in sorted((case.peers or {}).items()):
            if rec["status"] not in PEER_OK:
                changes.append(Change(name, f"{peer} peer status", "failure", None,
                                      rec["status"], rec["message"].splitlines()[0]
                                      if rec["message"] else ""))
            elif rec["status"] == "unavailable":
                changes.append(Change(name, f"{peer} peer", "note", detail=rec["message"]))
        hand = case.hand_tuned
        if hand and hand["status"] != "pass":
            changes.append(Change(name, "hand-tuned status", "failure", None, hand["status"],
                                  hand["message"].splitlines()[0] if hand["message"] else ""))
        base = base_cases.get(name)
        if base is None:
            if status == "pass" and baseline is not None:
                changes.append(Change(name, "baseline", "new", detail="no baseline yet "
                                      "(harness bench --update-baseline records it)"))
            continue
        if base.params != case.params:
            changes.append(Change(name, "params", "note", detail="params changed since the "
                                  "baseline: counters not compared (update the baseline)"))
            continue
        if case.counters is None:
            continue
        for key in GATED:
            b, c = base.counters.get(key), case.counters.get(key)
            if b is None or c is None or b == c:
                continue
            changes.append(Change(name, key, "regression" if c > b else "improvement", b, c))
        for chip, m in (case.modeled or {}).items():
            b = base.modeled_seconds.get(chip)
            if b is None:
                continue
            rel = m["seconds"] / b - 1.0 if b else 0.0
            if rel > MODELED_THRESHOLD:
                changes.append(Change(name, f"modeled {chip}", "regression", b, m["seconds"],
                                      f"> {MODELED_THRESHOLD:.0%} threshold"))
            elif rel < -MODELED_THRESHOLD:
                changes.append(Change(name, f"modeled {chip}", "improvement", b,
                                      m["seconds"]))
        changes.extend(_hand_tuned_changes(case, base))
        changes.extend(_peer_changes(case, base))
    ran = {c.name for c in results.cases}
    selected = results.options.get("cases")
    for name in sorted(set(base_cases) - ran):
        if not selected:
            changes.append(Change(name, "case", "missing", detail="in the baseline, not in "
                                  "the registry any more"))
    changes.extend(_ab_changes(results.against))
    return changes


def _hand_tuned_changes(case, base: BaselineEntry) -> list[Change]:
    """The generated / hand-tuned ratios of a case against the baseline's."""
    hand = case.hand_tuned
    if not hand or hand["status"] != "pass":       # a failing reference: failed above
        return []
    old = base.hand_tuned
    if old is None:
        return [Change(case.name, "hand-tuned", "new", detail="no baseline of the "
                       "generated / hand-tuned ratios yet (harness bench --update-baseline)")]
    return _ratio_changes(case.name, "generated/hand-tuned", hand, old)


def _peer_changes(case, base: BaselineEntry) -> list[Change]:
    """The generated / peer ratios of each peer the case ran against the baseline's: a
    ratio that grows is a regression (the generated kernel lost ground on MLX's)."""
    out = []
    for peer, rec in sorted((case.peers or {}).items()):
        if rec["status"] != "pass":                 # failed above, or nothing to compare
            continue
        old = base.peers.get(peer)
        if old is None:
            out.append(Change(case.name, f"{peer} peer", "new", detail=f"no baseline of the "
                              f"generated / {peer} ratios yet (harness bench --peers {peer} "
                              "--update-baseline)"))
            continue
        if old.kernel != rec["kernel"] or old.version != rec["version"]:
            out.append(Change(case.name, f"{peer} peer", "note", f"{old.kernel} {old.version}",
                              f"{rec['kernel']} {rec['version']}", "another peer kernel than "
                              "the baseline's: ratios not compared (update the baseline)"))
            continue
        out.extend(_ratio_changes(case.name, f"generated/{peer}", rec, old))
    return out


def _ratio_changes(name: str, label: str, now: dict, old) -> list[Change]:
    """Ratios (generated / reference) per counter, exactly, and per chip's modeled time,
    past MODELED_THRESHOLD: one that grows is a regression."""
    out = []
    for key, ratio in now["ratios"].items():
        b = old.ratios.get(key)
        if b is None or ratio is None or abs(ratio - b) <= 1e-9 * max(abs(b), 1.0):
            continue
        out.append(Change(name, f"{label} {key}",
                          "regression" if ratio > b else "improvement", b, ratio))
    for chip, ratio in now["modeled_ratios"].items():
        b = old.modeled_ratios.get(chip)
        if b is None:
            continue
        rel = ratio / b - 1.0 if b else 0.0
        if abs(rel) > MODELED_THRESHOLD:
            out.append(Change(name, f"{label} modeled {chip}",
                              "regression" if rel > 0 else "improvement", b, ratio,
                              f"> {MODELED_THRESHOLD:.0%} threshold" if rel > 0 else ""))
    return out


def _clang_major(toolchain: str | None) -> str | None:
    found = re.search(r"clang (\d+)", toolchain or "")
    return f"clang {found.group(1)}" if found else toolchain


def _ab_changes(against: dict | None) -> list[Change]:
    if not against:
        return []
    if against.get("error"):
        return [Change("-", f"compile A/B vs {against.get('ref')}", "failure",
                       detail=against["error"])]
    out = []
    for row in against.get("cases", []):
        if row.get("error"):
            out.append(Change(row["name"], "compile A/B", "note", detail=row["error"]))
        elif row["verdict"] in ("regression", "improvement"):
            out.append(Change(row["name"], f"compile A/B vs {against['ref']}", row["verdict"],
                              row["ref_median"], row["this_median"],
                              f"{row['change']:+.1%} (threshold ±{row['threshold']:.1%})"))
    return out


def gate_failed(changes: list[Change]) -> bool:
    return any(c.gates for c in changes)
