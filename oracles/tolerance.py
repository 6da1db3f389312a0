"""The class policy: how close a result must be to a plain-tensor oracle in a hand-written
test. Kernel families do not use it: their oracles give forward error bounds per element
(oracles/bounds.py, docs/tolerance.md), which this coarse table cannot replace (its width
grows with sqrt(n) in absolute terms, so small values at large n pass almost anything).

One table, indexed by the *op class* of the computation and the dtype of the result (or
the narrowest dtype the kernel computed in, see `Built.tolerance_dtypes`). Integer and
bool results match exactly in every class. The oracles compute in float64 (integers in
int64) and round once to the result dtype; the classes say how far a kernel computing
in its own dtype may drift from that:

    exact           data movement (copies, transposes, gathers) and single conversions
                    (T.cast, converting T.copy): one IEEE round-to-nearest-even at most,
                    the same as torch's. Bit-exact, except that a result below the
                    dtype's smallest normal may flush to zero on an Apple GPU (atol =
                    the smallest normal; the emulator keeps subnormals).
    elementwise     a few arithmetic ops per element (+ - * / max min, comparisons):
                    half and bfloat round after every op on the emulator and on Apple
                    GPUs (~2-4 ulp of the result dtype).
    transcendental  exp, exp2, log, log2, sqrt, rsqrt, tanh, sigmoid. The emulator
                    evaluates them with the host's libm in float32 (<= 1 ulp, then one
                    rounding to half/bfloat). Metal compiles with fast math by default,
                    whose float32 exp/log/tanh are approximations of several ulp (exp's
                    error grows with |x|; log has an absolute error bound near 1), so
                    float32 allows ~100 ulp and half/bfloat twice their elementwise
                    width; kernels keep arguments in moderate ranges (|x| <= ~10).
    accumulation    sums, dot products, norms over `reduction_length` terms: the
                    elementwise width grown by sqrt(n) (random-signed rounding errors
                    of a different summation order).

`tolerance_for(dtype, reduction_length=1, op_class="elementwise")`: any class other than
"exact" widens by sqrt(reduction_length) when reduction_length > 1, so the existing
callers (dtype and length only) get the elementwise/accumulation policy they always had.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class Tolerance:
    atol: float
    rtol: float

    @property
    def exact(self) -> bool:
        return self.atol == 0 and self.rtol == 0


EXACT = Tolerance(0.0, 0.0)
SMALLEST_NORMAL = {"float32": 1.1754944e-38, "float16": 6.1035156e-05,
                   "bfloat16": 1.1754944e-38}

_ELEMENTWISE = {
    "float32": Tolerance(atol=1e-5, rtol=1e-5),
    "float16": Tolerance(atol=1e-3, rtol=1e-3),
    "bfloat16": Tolerance(atol=1e-2, rtol=1e-2),
}

POLICY = {
    "exact": {d: Tolerance(atol=tiny, rtol=0.0) for d, tiny in SMALLEST_NORMAL.items()},
    "elementwise": _ELEMENTWISE,
    "transcendental": {
        "float32": Tolerance(atol=1e-5, rtol=1e-5),
        "float16": Tolerance(atol=2e-3, rtol=2e-3),
        "bfloat16": Tolerance(atol=2e-2, rtol=2e-2),
    },
    "accumulation": _ELEMENTWISE,
}
OP_CLASSES = tuple(POLICY)


def _name(dtype) -> str:
    return str(dtype).replace("torch.", "")


def tolerance_for(dtype, reduction_length: int = 1, op_class: str = "elementwise") -> Tolerance:
    """Tolerance for a result of `dtype` from an `op_class` computation accumulated over
    `reduction_length` terms (see the module docstring for the classes)."""
    try:
        table = POLICY[op_class]
    except KeyError:
        raise ValueError(f"unknown op class '{op_class}'; known: {OP_CLASSES}") from None
    base = table.get(_name(dtype), EXACT)
    if base.exact or op_class == "exact" or reduction_length <= 1:
        return base
    scale = math.sqrt(reduction_length)
    return Tolerance(base.atol * scale, base.rtol * scale)
