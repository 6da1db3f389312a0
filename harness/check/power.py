"""The oracle's power: wrong outputs the comparison must reject.

For one oracle answer (`oracles.bounds.Expected`), `doctorings` builds what a broken kernel
might store instead of the correct result (the exact value rounded to the output dtype):

    zeros       every element 0
    constant    the mean of the expected values, everywhere
    scaled      the output times (1 + d): d = 1e-3 for float32, 2e-2 for float16,
                5e-2 for bfloat16 (SCALING), by the narrowest dtype the result was
                rounded through (`Expected.precision`)
    moved       one element (the largest in magnitude) moved by ten times its bound
    shifted     every row (the last dim) rotated by one element
    reversed    every row reversed

`output_power(expected)` runs the comparison (harness.check.compare) on the correct output
and on each doctoring: the correct one must pass and every doctoring must fail, unless it
is indistinguishable from a correct result. That is decided, not assumed: a doctoring is
indistinguishable when every element of it lies within one rounding of the exact value in
the output dtype (what a kernel computing exactly could store), e.g. a shifted row of a
constant row, zeros where the exact values are below the smallest normal, a reversed row of
length 1. Each such case carries that reason. `smallest_rejected_scaling` bisects for the
smallest d whose (1 + d) scaling the check rejects: the check's resolution for that output.

`case_power(built, seed)` does it for every output of a family case (harness/gen), on the
inputs of `seed`; the suites (suites/gen/test_power.py), `harness selfcheck --power` and the
bench report (its "rejects x(1+d)" column) use it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from harness.check.compare import assert_close
from oracles.bounds import Expected, rounding

SCALING = {"float32": 1e-3, "float16": 2e-2, "bfloat16": 5e-2}
DOCTORINGS = ("zeros", "constant", "scaled", "moved", "shifted", "reversed")


def _name(dtype) -> str:
    return str(dtype).replace("torch.", "")


def _store(values: torch.Tensor, dtype) -> torch.Tensor:
    if dtype == torch.bool:
        return values != 0
    if not dtype.is_floating_point:
        return values.round().to(dtype)
    return values.to(dtype)


def scaling_for(expected: Expected) -> float:
    """The scaling d a check of this output must reject: by the narrowest dtype the result
    was rounded through (a float32 result computed from bfloat16-rounded values resolves no
    better than bfloat16)."""
    return SCALING.get(expected.precision or _name(expected.dtype), SCALING["float16"])


def doctorings(expected: Expected) -> dict:
    """name -> the doctored output (in the output dtype), for every DOCTORINGS entry."""
    e = expected.value.double()
    dt = expected.dtype
    out = {"zeros": torch.zeros_like(e)}
    finite = e[torch.isfinite(e)]
    mean = float(finite.mean()) if finite.numel() else 0.0
    out["constant"] = torch.full_like(e, mean)
    out["scaled"] = e * (1.0 + scaling_for(expected))
    moved = e.clone()
    if e.numel():
        flat = moved.reshape(-1)
        i = int(e.abs().nan_to_num(0.0).reshape(-1).argmax())
        step = 10.0 * float(expected.bound().broadcast_to(e.shape).reshape(-1)[i]) \
            if not expected.exact else 1.0
        flat[i] = flat[i] + (step if step > 0 else 1.0)
    out["moved"] = moved
    rows = e if e.dim() else e.reshape(1)
    out["shifted"] = torch.roll(rows, 1, -1).reshape(e.shape)
    out["reversed"] = torch.flip(rows, (-1,)).reshape(e.shape)
    return {k: _store(v, dt) for k, v in out.items()}


def _rejects(actual: torch.Tensor, expected: Expected) -> str | None:
    """The comparison's failure message, or None when it accepts `actual`."""
    try:
        assert_close(actual, expected)
    except AssertionError as err:
        return str(err)
    return None


def indistinguishable(actual: torch.Tensor, expected: Expected) -> str | None:
    """Why `actual` cannot be told from a correct result, or None when it can: every
    element within one rounding of the exact value in the output dtype."""
    e = expected.value.double()
    a = actual.double()
    if expected.exact or not expected.dtype.is_floating_point:
        same = bool(((a == e) | (torch.isnan(a) & torch.isnan(e))).all())
        return "it equals the correct output" if same else None
    one_rounding = rounding(e, expected.dtype)
    finite = torch.isfinite(e)
    close = torch.where(finite, (a - e).abs() <= one_rounding, (a == e) | torch.isnan(e))
    if bool(close.all()):
        return ("every element is within one rounding of the exact value in "
                f"{_name(expected.dtype)}, as a kernel computing exactly could store it")
    return None


def smallest_rejected_scaling(expected: Expected, low: float = 1e-8,
                              high: float = 4.0, steps: int = 40) -> float | None:
    """The smallest d (to a few percent) whose output times (1 + d) the check rejects;
    None when even `high` passes (an output of zeros, say)."""
    def rejected(d):
        return _rejects(_store(expected.value.double() * (1.0 + d), expected.dtype),
                        expected) is not None
    if not rejected(high):
        return None
    if rejected(low):
        return low
    lo, hi = low, high
    for _ in range(steps):
        mid = (lo * hi) ** 0.5
        if rejected(mid):
            hi = mid
        else:
            lo = mid
        if hi / lo < 1.05:
            break
    return hi


@dataclass
class OutputPower:
    """What the check of one output rejects."""
    index: int
    dtype: str
    how: str
    correct_passes: bool
    correct_message: str = ""
    rejected: list = field(default_factory=list)          # doctoring names
    indistinguishable: dict = field(default_factory=dict)  # name -> reason
    accepted: list = field(default_factory=list)          # doctorings wrongly accepted
    smallest_scaling: float | None = None

    @property
    def ok(self) -> bool:
        return self.correct_passes and not self.accepted


def output_power(expected: Expected, index: int = 0, scaling: bool = True) -> OutputPower:
    message = _rejects(_store(expected.value.double(), expected.dtype), expected)
    power = OutputPower(index, _name(expected.dtype), expected.how, message is None,
                        message or "")
    for name, bad in doctorings(expected).items():
        if _rejects(bad, expected) is not None:
            power.rejected.append(name)
            continue
        reason = indistinguishable(bad, expected)
        if reason:
            power.indistinguishable[name] = reason
        else:
            power.accepted.append(name)
    if scaling and expected.dtype.is_floating_point:
        power.smallest_scaling = smallest_rejected_scaling(expected)
    return power


def case_power(built, seed: int = 0, scaling: bool = True) -> list[OutputPower]:
    """`output_power` for every output of a family case on the inputs of `seed`. Outputs
    the oracle gives as plain tensors (hand-written test families) are skipped: they carry
    no bounds."""
    expected = built.oracle(built.inputs(seed))
    return [output_power(e, i, scaling) for i, e in enumerate(expected)
            if isinstance(e, Expected)]


def describe(powers: list[OutputPower]) -> str:
    """One line per output: what passed that must not, or that all was rejected."""
    lines = []
    for p in powers:
        head = f"output {p.index} ({p.dtype}, {p.how})"
        if not p.correct_passes:
            lines.append(f"{head}: the correct output fails: {p.correct_message}")
        if p.accepted:
            lines.append(f"{head}: accepts {', '.join(p.accepted)}")
        if p.ok:
            scale = "" if p.smallest_scaling is None else \
                f"; rejects x(1+{p.smallest_scaling:.2g})"
            same = f"; indistinguishable: {', '.join(p.indistinguishable)}" \
                if p.indistinguishable else ""
            lines.append(f"{head}: rejects {', '.join(p.rejected) or 'nothing'}{same}{scale}")
    return "\n".join(lines)


def summary(expected: list) -> dict:
    """The bench's record of a case's check, from its weakest float output (the one whose
    smallest rejected scaling is the largest fraction of the scaling it must reject): that
    smallest d ("rejects_scaling"; None when some output rejects no scaling at all), the d
    required of it ("required_scaling", SCALING of its precision) and its index; the
    doctorings some output accepts ("weak": the describe lines), and which were
    indistinguishable."""
    pairs = [(output_power(e, i), e) for i, e in enumerate(expected)
             if isinstance(e, Expected)]
    floats = [(p, scaling_for(e)) for p, e in pairs if e.dtype.is_floating_point]
    weakest = max(floats, key=lambda f: float("inf") if f[0].smallest_scaling is None
                  else f[0].smallest_scaling / f[1], default=None)
    return {
        "rejects_scaling": None if weakest is None else weakest[0].smallest_scaling,
        "required_scaling": None if weakest is None else weakest[1],
        "weakest_output": None if weakest is None else weakest[0].index,
        "weak": describe([p for p, _ in pairs if not p.ok]),
        "indistinguishable": {str(p.index): sorted(p.indistinguishable) for p, _ in pairs
                              if p.indistinguishable},
    }
