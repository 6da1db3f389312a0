"""Steering: draw toward the lowering decisions, and pairs of them, not reached yet.

Every compiled kernel says which decisions its lowering took (`kernel.decisions`,
"point=choice" strings, core/ir/decisions.py). The parent counts, per family, how many
cases reached each decision and each pair of decisions made together (`keys`), and hands
the counts to every task (`Task.reached`). A worker then draws `candidates` params for a
case, compiles each (DSL -> MSL only, uncached, a few ms: no emulator build; a candidate
drawn again is not compiled again), and runs the
one whose decisions score highest: first the number of decisions and pairs no case has
reached, then the mean of 1 / (1 + n) over them (n: the cases that reached each), so a
kernel that reaches something new wins, and among familiar ones the rarer combination
wins, whatever its size. A candidate that does not compile wins at once: its error is a
finding to report.

The choice is a pure function of the drawn candidates and the task's frozen counts, so a
Hypothesis run (and its shrinking) sees the same case for the same data. Hypothesis's own
`target()` is not used: its optimiser runs only after half of `max_examples`, which a
time-sliced fuzz task never reaches.
"""

from __future__ import annotations

import json
from itertools import combinations

PAIR = " & "


def keys(decisions) -> list:
    """What the counts are kept for: each decision, and each pair of them."""
    singles = sorted(set(decisions))
    return singles + [a + PAIR + b for a, b in combinations(singles, 2)]


def score(decisions, reached: dict) -> tuple:
    """Higher for decisions (and pairs) reached by fewer cases so far: first how many no
    case has reached, then the mean of 1 / (1 + cases) over them all -- a mean, so a big
    kernel of familiar decisions does not outscore a small one with a rare decision."""
    ks = keys(decisions)
    if not ks:
        return (0, 0.0)
    return (sum(1 for k in ks if not reached.get(k)),
            sum(1.0 / (1 + reached.get(k, 0)) for k in ks) / len(ks))


def choose(candidates: list, decisions_of, reached: dict) -> int:
    """The index of the candidate to run: `decisions_of(candidate)` is its decisions, or
    None when it does not compile (chosen at once). Ties go to the first (what Hypothesis
    shrinks toward)."""
    best, best_score = 0, (-1, -1.0)
    for i, candidate in enumerate(candidates):
        decided = decisions_of(candidate)
        if decided is None:
            return i
        s = score(decided, reached)
        if s > best_score:
            best, best_score = i, s
    return best


# (family, params, disable, pass configs) -> decisions, in this worker process: Hypothesis
# draws the same candidate again often (half of the steering compiles of a fuzz worker
# were of params it had compiled before), and the decisions of one are a pure function of
# these. Not the compiler's cache: the cases' own compiles never see it.
_DECIDED: dict = {}
_DECIDED_MAX = 4096


def compiled_decisions(fam, params: dict, disable=(), pass_configs=None):
    """The decisions of the family's kernel at `params` (compiled without the cache, so
    the steering leaves no trace in it; remembered per worker), or None when it does not
    build or compile."""
    key = (fam.name, json.dumps(params, sort_keys=True, default=repr), tuple(disable),
           json.dumps(pass_configs, sort_keys=True, default=repr))
    if key in _DECIDED:
        return _DECIDED[key]
    decided = _compiled_decisions(fam, params, disable, pass_configs)
    if len(_DECIDED) >= _DECIDED_MAX:
        _DECIDED.clear()
    _DECIDED[key] = decided
    return decided


def _compiled_decisions(fam, params: dict, disable, pass_configs):
    import core

    try:
        built = fam.build(dict(params))
        kernel = core.compile(built.func, out_idx=built.out_idx, disable=tuple(disable),
                              pass_configs=pass_configs, cache=False)
    except Exception:  # noqa: BLE001 - the case itself will report what went wrong
        return None
    return kernel.decisions
