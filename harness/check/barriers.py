"""Barrier necessity: is every `threadgroup_barrier` of a compiled kernel needed?

With all barriers in place, no race (none is missing); remove each
barrier in turn and run the kernel on the emulator with the race check: a race appears
-> the barrier is necessary; no race under the forward, reverse and random schedules ->
it is redundant (the planner placed more barriers than needed: thread_sync's contract,
docs/architecture.md).

    report = check_barriers(kernel, args)           # a core.Kernel and its inputs
    report = check_case("copy", params, seed=0)     # a family case (harness/gen)
    report.missing      races with every barrier in place
    report.barriers     one BarrierVerdict per barrier: MSL line, necessary, the race
    report.redundant    the verdicts of barriers no schedule needed
    report.unreached    the redundant ones no thread ever arrives at (dead code)

The runs use `observable(msl)`: threadgroup arrays made `volatile` where that changes no
pointer type, so that accesses whose values go unused are not optimized away before the
race checker sees them. The race checker is schedule-independent (shadow state per barrier
interval), so a necessary barrier usually shows on the first schedule; the other
schedules, and the other inputs `check_case` adds, only matter when control flow depends
on the data. A verdict is only as good as the inputs tried: "redundant" means no race
under any of them. A barrier is removed by switching it off at run time in the one
emulator build of that MSL (`emu.barrier_switched_off(line)`: the launch skips the
threadgroup_barrier on its line, as if the statement were blanked; `without_barrier` is
the MSL that blanking gives), so a check costs one build however many barriers the kernel
has, and finding line numbers point into the original MSL. Runs go through `core.Kernel`
(the launch plan binds the arguments), never around it.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass

from core.errors import MetaltileError

SCHEDULES = ("forward", "reverse", "random")
BARRIER = re.compile(r"threadgroup_barrier\s*\([^;]*\)\s*;")
KERNEL_HEAD = re.compile(r"(?:\[\[\s*kernel\b[^\]]*\]\]|\bkernel)\s+void\s+(\w+)\s*\(")
# `threadgroup T name[...]` with T a scalar type that `volatile` qualifies cleanly.
THREADGROUP_ARRAY = re.compile(r"^(\s*threadgroup\s+)((?:float|half|int|uint|short|ushort|"
                               r"char|uchar|bool)\s+(\w+)\s*\[)", re.M)
# `threadgroup T* name = (threadgroup T*)name_words;`: an array declared as wider words (for
# the alignment of its vector or atomic accesses, core/codegen/msl.py) used through a pointer
THREADGROUP_POINTER = re.compile(r"^(\s*threadgroup\s+)(\w+)(\*\s*(\w+)\s*=\s*\(threadgroup\s+)"
                                 r"\2(\*\)\s*\w+\s*;)", re.M)


@dataclass(frozen=True)
class BarrierVerdict:
    """One barrier: its place in the MSL and whether removing it lets a race appear."""
    index: int                    # k-th barrier of the MSL library, from 0
    line: int                     # 1-based MSL line
    kernel: str                   # the kernel function it belongs to
    text: str                     # the MSL line, stripped
    necessary: bool
    race: object = None           # the first race without it (emulator Finding), if any
    note: str = ""                # why it is necessary when no race shows (the run failed)
    schedules: tuple = ()         # the schedules run without it
    reached: bool = True          # False: no thread ever arrives at it (dead code)

    def __str__(self) -> str:
        verdict = "necessary" if self.necessary else \
            ("REDUNDANT" if self.reached else "REDUNDANT (never reached)")
        why = f": {self.race}" if self.race else (f": {self.note}" if self.note else
                                                  f" (no race under {', '.join(self.schedules)})")
        return f"barrier {self.index} (MSL line {self.line}, kernel '{self.kernel}') " \
               f"{verdict}{why}"


@dataclass(frozen=True)
class BarrierReport:
    program: str
    barriers: tuple               # BarrierVerdict per barrier, in MSL order
    missing: tuple = ()           # races with every barrier in place (emulator Findings)

    @property
    def necessary(self) -> list:
        return [b for b in self.barriers if b.necessary]

    @property
    def redundant(self) -> list:
        return [b for b in self.barriers if not b.necessary]

    @property
    def unreached(self) -> list:
        """Redundant barriers no thread arrives at (in code that never runs, such as a
        loop without iterations), as opposed to ones that run for nothing."""
        return [b for b in self.barriers if not b.necessary and not b.reached]

    @property
    def ok(self) -> bool:
        return not self.missing and not self.redundant

    def summary(self) -> str:
        head = (f"{self.program}: {len(self.barriers)} barrier(s), "
                f"{len(self.redundant)} redundant, {len(self.missing)} race(s) with all "
                "barriers in place")
        lines = [head] + [f"  {b}" for b in self.barriers]
        lines += [f"  missing barrier: {f}" for f in self.missing]
        return "\n".join(lines)


def barrier_lines(msl: str) -> list[int]:
    """1-based line of each barrier statement, in order (one per line)."""
    return [i + 1 for i, line in enumerate(msl.splitlines()) if BARRIER.search(line)]


def without_barrier(msl: str, index: int) -> str:
    """The MSL with the `index`-th barrier statement blanked (line numbers unchanged)."""
    lines = msl.splitlines(keepends=True)
    at = barrier_lines(msl)[index] - 1
    lines[at] = BARRIER.sub("/* barrier removed */;", lines[at], count=1)
    return "".join(lines)


def observable(msl: str) -> str:
    """The MSL with every threadgroup array that is only ever indexed (never address-taken,
    so no pointer type changes) declared `volatile`: the emulator compiles with
    optimization, which deletes a load whose value no thread uses (and forwards a thread's
    own store to its load), so a race on such an access -- still a race in MSL -- would be
    invisible, and a barrier guarding only it would look redundant. An array used through a
    pointer (declared as wider words) is made so when it is only indexed or accessed as
    vectors (`*(threadgroup half4*)(S + i)`, whose casts become volatile too). Same line
    numbers."""
    def qualify(match):
        name = match.group(3)
        uses = re.finditer(rf"(&\s*)?\b{name}\b(\s*\[)?", msl)
        if all(use.group(2) and not use.group(1) for use in uses):
            return f"{match.group(1)}volatile {match.group(2)}"
        return match.group(0)

    pointers = []

    def qualify_pointer(match):
        name = match.group(4)
        vector = rf"\(threadgroup\s+\w+\*\)\s*\(\s*{name}\s*\+"
        uses = re.finditer(rf"({vector})|(&\s*)?\b{name}\b(\s*\[)?", msl)
        if all(use.group(1) or (use.group(3) and not use.group(2))
               for use in uses if use.start() != match.start(4)):
            pointers.append(vector)
            return (f"{match.group(1)}volatile {match.group(2)}{match.group(3)}volatile "
                    f"{match.group(2)}{match.group(5)}")
        return match.group(0)

    text = THREADGROUP_POINTER.sub(qualify_pointer, msl)
    for vector in pointers:
        text = re.sub(vector, lambda m: m.group(0).replace("threadgroup ",
                                                           "threadgroup volatile ", 1), text)
    return THREADGROUP_ARRAY.sub(qualify, text)


def kernel_of_line(msl: str, line: int) -> str:
    """Name of the kernel function whose body holds `line` (the last head above it)."""
    name = ""
    for text in msl.splitlines()[:line]:
        head = KERNEL_HEAD.search(text)
        if head:
            name = head.group(1)
    return name


def check_barriers(kernel, args, *, schedules=SCHEDULES, seed: int = 0,
                   baseline: bool = True, more_args=()) -> BarrierReport:
    """Barrier necessity for `kernel` (a core.Kernel) called with `args` (the inputs in
    the user's order, as for `kernel(*args)`). `baseline=False` skips the run with every
    barrier in place (the caller has already run it with the race check). `more_args`:
    other inputs (forward schedule) tried before a barrier is called redundant, for
    kernels whose accesses depend on the data.

    One build: every run is of the same MSL (`observable(kernel.msl)`), a barrier removed
    by switching it off at run time (`emu.barrier_switched_off(line)`: the launch skips
    the threadgroup_barrier on that line, as if the statement were blanked)."""
    from core.jit import Kernel
    from core.runtime import emu

    barriers_run = {}   # line switched off (0: none) -> barriers executed (forward, `args`)

    def races(variant, schedule, inputs=args, off=0):
        if off:
            with emu.barrier_switched_off(off):
                variant(*_fresh(inputs), backend="emu", schedule=schedule, seed=seed)
        else:
            variant(*_fresh(inputs), backend="emu", schedule=schedule, seed=seed)
        if schedule == schedules[0] and inputs is args:
            barriers_run[off] = sum(s.get("barriers", 0) for s in variant.last_run.stats)
        return [f for f in variant.last_run.findings if f.kind == "race"]

    def variant_of(msl):
        return Kernel(dataclasses.replace(kernel.compiled, msl=msl), kernel.out_idx,
                      checks=("races",))

    msl = observable(kernel.msl)
    variant = variant_of(msl)
    if msl != kernel.msl:
        try:
            races(variant, schedules[0])
        except MetaltileError:   # the emulator cannot take it: check the MSL as it is
            msl = kernel.msl
            variant = variant_of(msl)
            barriers_run.clear()
    missing = []
    if baseline:
        for schedule in schedules:
            missing = races(variant, schedule)
            if missing:
                break
    known = {_where(f) for f in missing}
    verdicts = []
    for index, line in enumerate(barrier_lines(msl)):
        name = kernel_of_line(msl, line)
        text = msl.splitlines()[line - 1].strip()
        tried, race, note = [], None, ""
        runs = [(s, args) for s in schedules] + [("forward", a) for a in more_args]
        for n, (schedule, inputs) in enumerate(runs):
            tried.append(schedule if n < len(schedules) else
                         f"forward with inputs {n - len(schedules) + 2}")
            try:
                found = [f for f in races(variant, schedule, inputs, off=line)
                         if _where(f) not in known]
            except MetaltileError as err:  # e.g. garbage indices crash without the barrier
                if inputs is not args:
                    continue   # other inputs may fail with or without it: no evidence
                note = f"the kernel fails without it: {type(err).__name__}: {err}"
                break
            if found:
                race = next((f for f in found if f.kernel == name), found[0])
                break
        reached = True
        if not (race or note):  # the run without it executed as many barriers: never reached
            if 0 not in barriers_run:
                races(variant, schedules[0])
            reached = barriers_run.get(line) != barriers_run[0]
        verdicts.append(BarrierVerdict(index, line, name, text, bool(race or note), race,
                                       note, tuple(tried), reached))
    return BarrierReport(kernel.name, tuple(verdicts), tuple(missing))


def check_case(family: str, params: dict, *, seed: int = 0, disable=(), replace=None,
               schedules=SCHEDULES, baseline: bool = True, compiled=None) -> BarrierReport:
    """Barrier necessity for one family case (the kernel and inputs `case.run_case`
    runs for the same arguments). Before a barrier is called redundant, other inputs are
    tried too: two more seeds, and the seed's inputs pushed to both extremes (`extremes`),
    so that a data-dependent store (`if A[i] > t: S[...] = ...`) is taken at least once.
    `compiled`: the (built, kernel) pair of the case, when the caller ran it already
    (run_case: the kernel its route gave), instead of building and compiling again."""
    import core
    from harness.gen import family as families

    if compiled is not None:
        built, kernel = compiled
    else:
        built = families.get(family).build(dict(params))
        kernel = core.compile(built.func, out_idx=built.out_idx, disable=disable,
                              replace=replace)
    args = built.inputs(seed)
    more = [built.inputs(seed + 1), built.inputs(seed + 2), *extremes(args)]
    return check_barriers(kernel, args, schedules=schedules, seed=seed, baseline=baseline,
                          more_args=more)


def extremes(args) -> list:
    """Two variants of the inputs with every tensor element large, then every element
    small (floats beyond +-100, integers near their type's bounds, masks all true, then
    all false); scalars unchanged. Data-dependent conditions go both ways on one of them."""
    import torch

    def push(t, high):
        if not isinstance(t, torch.Tensor):
            return t
        if t.dtype == torch.bool:
            return torch.full_like(t, high)
        if t.is_floating_point():
            big = t.abs().float() * 100 + 100
            return (big if high else -big).to(t.dtype)
        info = torch.iinfo(t.dtype)
        jitter = t.to(torch.int64).abs() % 8
        return (info.max - jitter if high else info.min + jitter).to(t.dtype)

    return [[push(a, True) for a in args], [push(a, False) for a in args]]


def _fresh(args):
    """Tensors cloned per run, so a kernel writing an argument in place sees the same
    inputs each time."""
    import torch

    return [a.clone() if isinstance(a, torch.Tensor) else a for a in args]


def _where(finding) -> tuple:
    return (finding.kernel, finding.line, finding.address_space, finding.buffer_or_offset)
