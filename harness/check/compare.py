"""The one comparison helper: a kernel result against its PyTorch oracle.

`assert_close(actual, expected, ...)` takes what the oracle gives:

- an `oracles.bounds.Expected` (what every family's oracle returns): the exact value and
  the forward error bound of the computation the kernel performs (docs/tolerance.md). An
  element passes when |actual - exact| is within its bound; the output passes when, in
  addition, ||actual - exact||_2 is within the normwise bound. `det is None`: exact match.
- a plain tensor (hand-written tests): the class policy of oracles/tolerance.py for the
  result dtype, `reduction_length` and `op_class`.

In both, an expected NaN matches only NaN and an expected infinity only the same
infinity; a NaN or an infinity where a finite value is expected fails. A failure names
how many elements are outside, the worst one with its index, both values and the bound
it exceeded. `assert_outputs_close(outputs, expected, built)` applies it to every output
of a family case.

`run_case` (harness/check/case.py) is the one way the harness runs a generated kernel
with every check; it compares through `assert_close`.
"""

from __future__ import annotations

import torch

from oracles.bounds import Expected
from oracles.tolerance import tolerance_for


def _index(flat: int, shape) -> list:
    """The multi-index of element `flat` of a row-major tensor of `shape`."""
    index = []
    for extent in reversed(tuple(shape)):
        flat, i = divmod(flat, int(extent))
        index.append(i)
    return index[::-1]


def _mismatch_exact(actual, want, what: str, how: str):
    a = actual.to(torch.float64) if actual.is_floating_point() else actual.to(torch.int64)
    e = want.to(a.dtype)
    same = (a == e) | (torch.isnan(a) & torch.isnan(e)) if a.is_floating_point() else a == e
    if bool(same.all()):
        return
    bad = (~same).reshape(-1)
    first = int(bad.nonzero()[0])
    pos = _index(first, a.shape)
    raise AssertionError(
        f"{what} {int(bad.sum())} of {a.numel()} element(s) differ ({how}); first at {pos}: "
        f"{a.reshape(-1)[first].item()} != {e.reshape(-1)[first].item()}")


def _check_bounded(actual, value, bound, norm_bound, what: str, how: str,
                   outside: str = "the bound"):
    """Per element within `bound` (float64, broadcast to value), special values matched
    exactly, and (when `norm_bound` is given) normwise within it. `how` names the
    derivation, `outside` what was exceeded."""
    a, e = actual.double(), value.double()
    finite_e = torch.isfinite(e)
    err = (a - e).abs()
    special_ok = (torch.isnan(a) & torch.isnan(e)) | (~finite_e & (a == e))
    within = torch.where(finite_e, torch.isfinite(a) & (err <= bound), special_ok)
    if not bool(within.all()):
        over = torch.where(within, torch.full_like(err, -1.0),
                           (err - bound).nan_to_num(float("inf")))
        worst = int(over.reshape(-1).argmax())
        pos = _index(worst, a.shape)
        b = torch.broadcast_to(torch.as_tensor(bound, dtype=torch.float64), a.shape)
        raise AssertionError(
            f"{what} {int((~within).sum())} of {a.numel()} element(s) outside {outside} "
            f"({how}); worst at {pos}: {a.reshape(-1)[worst].item()} vs "
            f"{e.reshape(-1)[worst].item()}, |diff| {err.reshape(-1)[worst].item():.3g} > "
            f"bound {b.reshape(-1)[worst].item():.3g}")
    if norm_bound is None or not bool(finite_e.any()):
        return
    diff = (a - e)[finite_e]
    norm = float(diff.norm())
    if norm > norm_bound:
        scale = float(e[finite_e].norm()) or 1.0
        raise AssertionError(
            f"{what} normwise error ||actual - expected|| = {norm:.3g} exceeds its bound "
            f"{norm_bound:.3g} ({how}; relative {norm / scale:.3g} > {norm_bound / scale:.3g})"
            f" over {diff.numel()} element(s)")


def check_expected(actual, expected: Expected, what: str = ""):
    """`actual` against an oracle's `Expected`: exact, or per element and normwise."""
    actual = torch.as_tensor(actual).cpu()
    if tuple(actual.shape) != tuple(expected.shape):
        raise AssertionError(f"{what} shape {tuple(actual.shape)} != expected "
                             f"{tuple(expected.shape)}")
    how = expected.how or str(expected.dtype).replace("torch.", "")
    if expected.exact:
        _mismatch_exact(actual, expected.value, what, how)
        return
    _check_bounded(actual, expected.value, expected.bound(), expected.norm_bound(), what, how)


def assert_close(actual, expected, dtype=None, reduction_length: int = 1, what: str = "",
                 op_class: str = "elementwise"):
    if isinstance(expected, Expected):
        check_expected(actual, expected, what)
        return
    actual = torch.as_tensor(actual).cpu()
    expected = torch.as_tensor(expected).cpu()
    dtype = dtype or actual.dtype
    if tuple(actual.shape) != tuple(expected.shape):
        raise AssertionError(f"{what} shape {tuple(actual.shape)} != expected "
                             f"{tuple(expected.shape)}")
    tol = tolerance_for(dtype, reduction_length, op_class)
    name = str(dtype).replace("torch.", "")
    if tol.exact or not (actual.is_floating_point() or expected.is_floating_point()):
        _mismatch_exact(actual, expected, what, f"{name}, exact")
        return
    bound = tol.atol + tol.rtol * expected.double().abs()
    _check_bounded(actual, expected, bound, None, what, f"{name}, {op_class}",
                   outside=f"atol={tol.atol} rtol={tol.rtol}")


def assert_outputs_close(outputs, expected, built, what: str = ""):
    """Every output of a family case against its oracle's: an `Expected` with its own
    bounds, or a plain tensor under the case's (`built`, a harness/gen `Built`) class
    policy; the first output outside fails, named "<what>output <i>:", as does a count
    mismatch."""
    outputs, expected = list(outputs), list(expected)
    for i, (got, want) in enumerate(zip(outputs, expected)):
        dtype = built.tolerance_dtypes[i] if i < len(built.tolerance_dtypes) else None
        assert_close(got, want, dtype or None, built.reduction_length,
                     what=f"{what}output {i}:", op_class=built.op_class)
    if len(outputs) != len(expected):
        raise AssertionError(f"{what}{len(outputs)} outputs, oracle gives {len(expected)}")
