"""The one comparison helper: a kernel result against its PyTorch oracle.

`assert_close(actual, expected, dtype=None, reduction_length=1, op_class="elementwise")`
applies the tolerance policy of oracles/tolerance.py for the result dtype and the op class
of the computation (exact, elementwise, transcendental, accumulation; a family's
`Built.op_class`) and fails with the worst element, its index and both values, so a
failure report is useful without a debugger. `assert_outputs_close(outputs, expected,
built)` applies it to every output of a family case with that case's policy.

`run_case` (harness/check/case.py) is the one way the harness runs a generated kernel
with every check; it compares through `assert_close`.
"""

from __future__ import annotations

import torch

from oracles.tolerance import tolerance_for


def assert_close(actual, expected, dtype=None, reduction_length: int = 1, what: str = "",
                 op_class: str = "elementwise"):
    actual = torch.as_tensor(actual).cpu()
    expected = torch.as_tensor(expected).cpu()
    dtype = dtype or actual.dtype
    if tuple(actual.shape) != tuple(expected.shape):
        raise AssertionError(f"{what} shape {tuple(actual.shape)} != expected "
                             f"{tuple(expected.shape)}")
    tol = tolerance_for(dtype, reduction_length, op_class)
    if tol.exact:
        same = actual == expected.to(actual.dtype)
        if not bool(same.all()):
            bad = (~same).nonzero()[0].tolist()
            raise AssertionError(f"{what} {int((~same).sum())} element(s) differ; first at "
                                 f"{bad}: {actual[tuple(bad)].item()} != "
                                 f"{expected[tuple(bad)].item()}")
        return
    a, e = actual.double(), expected.double()
    err = (a - e).abs()
    limit = tol.atol + tol.rtol * e.abs()
    bad = ~((err <= limit) | (torch.isnan(a) & torch.isnan(e)) | (a == e))
    if bool(bad.any()):
        idx = tuple((err - limit).nan_to_num(float("inf")).argmax().item()
                    for _ in [0])[0]
        where = list(torch.unravel_index(torch.tensor(idx), a.shape)) if a.dim() else []
        pos = tuple(int(w) for w in where)
        raise AssertionError(
            f"{what} {int(bad.sum())} of {a.numel()} element(s) outside atol={tol.atol} "
            f"rtol={tol.rtol} ({dtype}, {op_class}); worst at {list(pos)}: {a[pos].item()} vs "
            f"{e[pos].item()}")


def assert_outputs_close(outputs, expected, built, what: str = ""):
    """Every output of a family case against its oracle's, with the case's (`built`, a
    harness/gen `Built`) tolerance dtypes, reduction length and op class; the first
    output outside the policy fails, named "<what>output <i>:", as does a count mismatch."""
    outputs, expected = list(outputs), list(expected)
    for i, (got, want) in enumerate(zip(outputs, expected)):
        dtype = built.tolerance_dtypes[i] if i < len(built.tolerance_dtypes) else None
        assert_close(got, want, dtype or None, built.reduction_length,
                     what=f"{what}output {i}:", op_class=built.op_class)
    if len(outputs) != len(expected):
        raise AssertionError(f"{what}{len(outputs)} outputs, oracle gives {len(expected)}")
