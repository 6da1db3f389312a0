"""Steering: draw toward the lowering decisions, and pairs of them, not reached yet.

Every compiled kernel says which decisions its lowering took (`kernel.decisions`,
"point=choice" strings, core/ir/decisions.py). The parent counts, per family, how many
cases reached each decision and each pair of decisions made together (`keys`), and hands
the counts to every task (`Task.reached`). A worker then draws `candidates` params for a
case, compiles each (DSL -> MSL only, uncached, a few ms: no emulator build; a candidate
drawn again is not compiled again), and runs the
first that reaches a decision or pair no case has reached (the later candidates are then
not compiled), else the one whose decisions score highest by the mean of 1 / (1 + n)
over them (n: the cases that reached each), so among familiar kernels the rarer
combination wins, whatever its size. A candidate that does not compile wins at once: its
error is a finding to report.

The choice is a pure function of the drawn candidates and the task's frozen counts, so a
Hypothesis run (and its shrinking) sees the same case for the same data. Hypothesis's own
`target()` is not used: its optimiser runs only after half of `max_examples`, which a
time-sliced fuzz task never reaches.
"""

from __future__ import annotations

import json
from collections import OrderedDict
from dataclasses import dataclass
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
    None when it does not compile (chosen at once). The first candidate that reaches a
    decision or pair no case has reached is chosen at once too, the later ones not
    compiled: what steering is for is done, and early in a run, when most candidates reach
    something new, two of every three steering compiles went to candidates thrown away.
    Otherwise the rarest combination wins; ties go to the first (what Hypothesis shrinks
    toward)."""
    best, best_score = 0, (-1, -1.0)
    for i, candidate in enumerate(candidates):
        decided = decisions_of(candidate)
        if decided is None:
            return i
        s = score(decided, reached)
        if s[0] > 0:
            return i
        if s > best_score:
            best, best_score = i, s
    return best


# (family, params, disable, pass configs) -> decisions, in this worker process: Hypothesis
# draws the same candidate again often (half of the steering compiles of a fuzz worker
# were of params it had compiled before), and the decisions of one are a pure function of
# these. Not the compiler's cache: the cases' own compiles never see it.
_DECIDED: dict = {}
_DECIDED_MAX = 4096
# (how, family, params, options) -> Prepared: what the last candidates' compiles made, so
# the one that runs is not compiled a second time (a few: a kernel's MSL is tens of KB).
_MADE: OrderedDict = OrderedDict()
_MADE_MAX = 16


@dataclass
class Prepared:
    """What steering compiled for a candidate, for its case to use instead of compiling
    again (harness/check/case.py run_case): `kernel`, a core.Kernel, when the case's own
    compile is a cold core.compile (`run_case(compiled=(built, kernel))`), else
    `reference`, the uncached lowering the routed kernel is compared with
    (`run_case(reference=...)`, harness/check/route.py)."""
    built: object
    kernel: object = None
    program: object = None      # the pipeline's LoweredProgram, printed when it runs
    reference: object = None    # ... and printed: a CompiledProgram


def compiled_decisions(fam, params: dict, disable=(), pass_configs=None, route=None):
    """The decisions of the family's kernel at `params` (compiled without the cache, so
    the steering leaves no trace in it; remembered per worker), or None when it does not
    build or compile. `route`: the case's route (harness/check/route.py), `disable` then
    the run's own passes switched off (the route's options are its own): the kernel is
    compiled as the case will compile it -- a cold core.compile for a route that
    compares with nothing (and for no route), else only the pipeline of the route's
    reference lowering (the printer runs for the candidate chosen, `prepared`)."""
    from harness.check import route as routes

    if route is not None:
        options = routes.compile_options_of(route, disable)
        disable, pass_configs = options["disable"], options["pass_configs"]
    key = (fam.name, json.dumps(params, sort_keys=True, default=repr), tuple(disable),
           json.dumps(pass_configs, sort_keys=True, default=repr))
    how = "compile" if routes.checks_nothing(route) else "lower"
    if key in _DECIDED:
        return _DECIDED[key]
    made = _compile(fam, params, disable, pass_configs, how)
    decided = None if made is None else \
        (made.kernel if made.kernel is not None else made.program).decisions
    if made is not None:
        _MADE[(how, *key)] = made
        while len(_MADE) > _MADE_MAX:
            _MADE.popitem(last=False)
    if len(_DECIDED) >= _DECIDED_MAX:
        _DECIDED.clear()
    _DECIDED[key] = tuple(decided) if decided is not None else None
    return _DECIDED[key]


def prepared(fam, params: dict, disable=(), route=None) -> Prepared | None:
    """What steering compiled for the candidate at `params` (as `compiled_decisions`
    did), ready for its case, or None when it was not compiled here lately (its
    decisions came from the memory: the case compiles it itself)."""
    from harness.check import route as routes

    options = routes.compile_options_of(route, disable) if route is not None else \
        {"disable": tuple(disable), "pass_configs": None}
    key = (fam.name, json.dumps(params, sort_keys=True, default=repr),
           tuple(options["disable"]),
           json.dumps(options["pass_configs"], sort_keys=True, default=repr))
    how = "compile" if routes.checks_nothing(route) else "lower"
    made = _MADE.get((how, *key))
    if made is None:
        return None
    if made.kernel is None and made.reference is None:
        from core.jit import finish_lowering

        try:
            made.reference = finish_lowering(made.program)
        except Exception:  # noqa: BLE001 - the case's own compile reports it
            del _MADE[(how, *key)]
            return None
        made.program = None
    return made


def _compile(fam, params: dict, disable, pass_configs, how) -> Prepared | None:
    import core
    from core import options as compile_options
    from core.transform import pipeline

    try:
        built = fam.build(dict(params))
        if how == "compile":
            return Prepared(built, kernel=core.compile(
                built.func, out_idx=built.out_idx, disable=tuple(disable),
                pass_configs=pass_configs, cache=False))
        resolved = compile_options.resolve(pass_configs, tuple(disable), ())[0]
        return Prepared(built, program=pipeline.run(built.func, disable=resolved))
    except Exception:  # noqa: BLE001 - the case itself will report what went wrong
        return None
