"""The tolerance policy: how close a kernel's result must be to the PyTorch oracle.

One entry per dtype of the *result*. Floating-point results allow for a different
summation order and per-operation rounding (half and bfloat round after every operation
on the emulator and on Apple GPUs, while the oracle usually computes in float32); integer
and bool results must match exactly. `tolerance_for(dtype, reduction_length)` widens the
float tolerances for long accumulations (error grows ~ sqrt(n) for random data).
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


POLICY = {
    "float32": Tolerance(atol=1e-5, rtol=1e-5),
    "float16": Tolerance(atol=1e-3, rtol=1e-3),
    "bfloat16": Tolerance(atol=1e-2, rtol=1e-2),
}
EXACT = Tolerance(0.0, 0.0)


def _name(dtype) -> str:
    return str(dtype).replace("torch.", "")


def tolerance_for(dtype, reduction_length: int = 1) -> Tolerance:
    """Tolerance for a result of `dtype` accumulated over `reduction_length` terms."""
    base = POLICY.get(_name(dtype), EXACT)
    if base.exact or reduction_length <= 1:
        return base
    scale = math.sqrt(reduction_length)
    return Tolerance(base.atol * scale, base.rtol * scale)
