"""Forward error bounds: how far a correct kernel's result may be from the exact one.

An oracle mirrors what its kernel computes, operation by operation, on `Bounded` values:
the exact result (float64, from the kernel's own inputs) and two error terms per element.

    det    a first-order worst-case bound. A result r rounded in a dtype of unit roundoff
           u gains u|r| (and the dtype's smallest normal where |r| is below it: an Apple
           GPU may flush subnormals); a math function gains its error (FUNCTION_ULPS); the
           errors of the operands propagate through the operation's derivative.
    stat   the scale of the rounding errors of sums and dot products over n terms:
           sqrt(n) * u * sum(|terms|), Higham and Mary's probabilistic bound ("A new
           approach to probabilistic rounding error analysis", SISC 2019) without its
           confidence factor. It holds for any summation order (serial, pairwise, the
           simdgroup trees of a kernel), since it only counts how many roundings a term
           goes through, at most n.

`expected(bounded, dtype)` rounds the result to the output's dtype (the store) and gives
the `Expected` record the comparison (harness/check/compare.py) uses:

    per element   |actual - exact| <= det + LAMBDA * stat
    normwise      ||actual - exact||_2 <= ||det||_2 + ||stat||_2 + LAMBDA * max(stat)

LAMBDA = 10: Higham and Mary's bound holds with probability at least
1 - 2n exp(-LAMBDA^2 (1 - u)^2 / 2), about 1 - 4e-22 n, per element. The normwise bound
treats the accumulation errors of different elements as independent with scales `stat`:
the 2-norm of such a vector exceeds sqrt(sum stat^2) + t max(stat) with probability
below exp(-t^2 / 2) (Gaussian concentration of a 1-Lipschitz function); t = LAMBDA. The
deterministic part enters with its full norm. The normwise check is what catches a
scaled or shifted output whose per-element bounds near zero are wide.

Integer, bool and data-movement results are `exact(...)`: the same value, except that a
float below the dtype's smallest normal may be flushed to zero.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

LAMBDA = 10.0

UNIT_ROUNDOFF = {"float64": 2.0 ** -53, "float32": 2.0 ** -24, "float16": 2.0 ** -11,
                 "bfloat16": 2.0 ** -8}
SMALLEST_NORMAL = {"float64": 2.0 ** -1022, "float32": 2.0 ** -126, "float16": 2.0 ** -14,
                   "bfloat16": 2.0 ** -126}

# Error of one math function evaluation, in units of the compute dtype's roundoff u
# (|f(x)| u per unit), for the widest math mode a kernel may run in on an Apple GPU.
# The emulator computes these with the host's libm in float32 (<= 1 ulp, one rounding to
# half or bfloat); Metal's precise functions are specified at a few ulp; fast math
# (PYTORCH_MPS_FAST_MATH=1, Metal's own default "relaxed") replaces exp and exp2 with
# approximations whose error grows with |x|, which `EXP_ULPS_PER_UNIT` carries, and log
# with one that has an absolute error near 1 (`LOG_ABSOLUTE`). These are our reading of the
# Metal Shading Language specification's accuracy tables; no GPU has checked them here.
FUNCTION_ULPS = {"exp": 6.0, "exp2": 6.0, "log": 6.0, "log2": 6.0, "sqrt": 4.0,
                 "rsqrt": 4.0, "tanh": 8.0, "sigmoid": 8.0, "silu": 10.0, "abs": 0.0}
EXP_ULPS_PER_UNIT = 2.0          # + 2 |x| ulp for exp(x), exp2(x)
LOG_ABSOLUTE = 2.0 ** -21        # absolute error of fast log near 1


def _name(dtype) -> str:
    return str(dtype).replace("torch.", "")


def _u(dtype) -> float:
    name = _name(dtype)
    if name not in UNIT_ROUNDOFF:
        raise ValueError(f"no unit roundoff for dtype '{name}'; known: {sorted(UNIT_ROUNDOFF)}")
    return UNIT_ROUNDOFF[name]


def rounding(value: torch.Tensor, dtype) -> torch.Tensor:
    """The error of rounding `value` to `dtype` once: u|value|, or the smallest normal
    where |value| lies below it (flush to zero)."""
    mag = value.abs()
    tiny = SMALLEST_NORMAL[_name(dtype)]
    return torch.where(mag < tiny, torch.full_like(mag, tiny), mag * _u(dtype))


@dataclass(frozen=True)
class Bounded:
    """An exact value with its worst-case (`det`) and accumulation (`stat`) error terms."""
    value: torch.Tensor
    det: torch.Tensor
    stat: torch.Tensor
    u: float = 0.0          # the largest unit roundoff of a rounding the value went through

    @property
    def shape(self):
        return self.value.shape

    def map(self, fn) -> Bounded:
        """The same indexing/reshaping applied to the value and both error terms."""
        return Bounded(fn(self.value), fn(self.det), fn(self.stat), self.u)

    def same_error(self, value: torch.Tensor) -> Bounded:
        """An exact operation (negation, scaling by a power of two) of this value."""
        return Bounded(value, self.det, self.stat, self.u)

    def __getitem__(self, index) -> Bounded:
        return self.map(lambda t: t[index])

    def err(self) -> torch.Tensor:
        return self.det + self.stat


def exact_input(t) -> Bounded:
    """A kernel input: exactly representable, no error yet."""
    v = torch.as_tensor(t).double()
    z = torch.zeros_like(v)
    return Bounded(v, z, z)


def const(c: float) -> Bounded:
    return exact_input(torch.tensor(float(c)))


def _lift(x) -> Bounded:
    return x if isinstance(x, Bounded) else exact_input(x)


def round_to(x: Bounded, dtype) -> Bounded:
    """x stored in (or computed into) `dtype`: one more rounding."""
    return Bounded(x.value, x.det + rounding(x.value, dtype), x.stat, max(x.u, _u(dtype)))


def add(x, y, dtype) -> Bounded:
    x, y = _lift(x), _lift(y)
    return round_to(Bounded(x.value + y.value, x.det + y.det, x.stat + y.stat,
                            max(x.u, y.u)), dtype)


def sub(x, y, dtype) -> Bounded:
    x, y = _lift(x), _lift(y)
    return round_to(Bounded(x.value - y.value, x.det + y.det, x.stat + y.stat,
                            max(x.u, y.u)), dtype)


def mul(x, y, dtype) -> Bounded:
    x, y = _lift(x), _lift(y)
    ax, ay = x.value.abs(), y.value.abs()
    return round_to(Bounded(x.value * y.value, ax * y.det + ay * x.det + x.det * y.det,
                            ax * y.stat + ay * x.stat + x.stat * y.stat, max(x.u, y.u)),
                    dtype)


def div(x, y, dtype) -> Bounded:
    """x / y; y's error must be small against |y| (the kernels divide by positive sums)."""
    x, y = _lift(x), _lift(y)
    ay = y.value.abs()
    q = x.value / y.value
    rel_y_det = y.det / ay
    rel_y_stat = y.stat / ay
    return round_to(Bounded(q, x.det / ay + q.abs() * rel_y_det,
                            x.stat / ay + q.abs() * rel_y_stat, max(x.u, y.u)), dtype)


def negate(x) -> Bounded:
    x = _lift(x)
    return x.same_error(-x.value)


def maximum(x, y) -> Bounded:
    """max is exact; the result carries the larger operand error (either may be chosen)."""
    return _extremum(torch.maximum, x, y)


def minimum(x, y) -> Bounded:
    """min is exact; the result carries the larger operand error (either may be chosen)."""
    return _extremum(torch.minimum, x, y)


def _extremum(pick, x, y) -> Bounded:
    x, y = _lift(x), _lift(y)
    return Bounded(pick(x.value, y.value), torch.maximum(x.det, y.det),
                   torch.maximum(x.stat, y.stat), max(x.u, y.u))


def amax(x: Bounded, dim: int, keepdim: bool = False) -> Bounded:
    return Bounded(x.value.amax(dim, keepdim), x.det.amax(dim, keepdim),
                   x.stat.amax(dim, keepdim), x.u)


def amin(x: Bounded, dim: int, keepdim: bool = False) -> Bounded:
    return Bounded(x.value.amin(dim, keepdim), x.det.amax(dim, keepdim),
                   x.stat.amax(dim, keepdim), x.u)


def where(cond: torch.Tensor, x, y) -> Bounded:
    """A select on a condition both kernel and oracle decide exactly."""
    x, y = _lift(x), _lift(y)
    return Bounded(torch.where(cond, x.value, y.value), torch.where(cond, x.det, y.det),
                   torch.where(cond, x.stat, y.stat), max(x.u, y.u))


def function(name: str, x, dtype) -> Bounded:
    """f(x) computed in `dtype`: the operand's error through |f'(x)|, plus the function's
    own error (FUNCTION_ULPS) and one rounding."""
    x = _lift(x)
    v = x.value
    if name == "exp":
        f, slope = torch.exp(v), torch.exp(v)
    elif name == "exp2":
        f = torch.exp2(v)
        slope = f * math.log(2.0)
    elif name == "log":
        f, slope = torch.log(v), 1.0 / v.abs()
    elif name == "log2":
        f, slope = torch.log2(v), 1.0 / (v.abs() * math.log(2.0))
    elif name == "sqrt":
        f = torch.sqrt(v)
        slope = torch.where(f > 0, 0.5 / f, torch.zeros_like(f))
    elif name == "rsqrt":
        f = torch.rsqrt(v)
        slope = 0.5 * f / v.abs()
    elif name == "tanh":
        f = torch.tanh(v)
        slope = 1.0 - f * f
    elif name == "sigmoid":
        f = torch.sigmoid(v)
        slope = f * (1.0 - f)
    elif name == "silu":
        s = torch.sigmoid(v)
        f = v * s
        slope = (s * (1.0 + v * (1.0 - s))).abs()
    elif name == "abs":                             # exact: no error of its own
        return x.same_error(v.abs())
    else:
        raise ValueError(f"no error model for function '{name}'; known: "
                         f"{sorted(FUNCTION_ULPS)}")
    ulps = torch.full_like(v, FUNCTION_ULPS[name])
    if name in ("exp", "exp2"):
        ulps = ulps + EXP_ULPS_PER_UNIT * v.abs()
    own = ulps * _u(dtype) * f.abs()
    if name in ("log", "log2"):
        own = own + LOG_ABSOLUTE
    slope = slope.abs()
    return round_to(Bounded(f, slope * x.det + own, slope * x.stat, x.u), dtype)


def total(x: Bounded, dim: int, acc, keepdim: bool = False) -> Bounded:
    """sum over `dim` accumulated in `acc`: the terms' errors add up, plus the rounding of
    the accumulation (stat: sqrt(n) u sum |terms|)."""
    n = x.value.shape[dim]
    mag = x.value.abs().sum(dim, keepdim)
    return Bounded(x.value.sum(dim, keepdim), x.det.sum(dim, keepdim),
                   x.stat.sum(dim, keepdim) + math.sqrt(max(n, 1)) * _u(acc) * mag,
                   max(x.u, _u(acc)))


def _propagated(aa, ab, ea, eb, like):
    """|a| @ eb + ea @ |b| + ea @ eb (shaped as `like`), skipping the products of error
    terms that are zero (the inputs', mostly)."""
    out = torch.zeros_like(like)
    if bool(eb.any()):
        out = out + aa @ eb
    if bool(ea.any()):
        out = out + ea @ ab
        if bool(eb.any()):
            out = out + ea @ eb
    return out


def matmul(a, b, acc, products=None, partials=None) -> Bounded:
    """a @ b (batched over leading dims) accumulated in `acc`; `products`: the dtype the
    products are rounded in when it is not exact (None: exact or fused into the
    accumulation, as float32 products of half/bfloat operands are); `partials`: (dtype,
    chunk) when the running sum is stored in `dtype` after every `chunk` of K (a GEMM
    accumulating in its output tile, one k step a chunk). Each intermediate store rounds
    that partial sum, so its error is the rounding of the exact partial sum over the first
    j chunks (first order, worst case: det); the last store is the output's own, which
    the caller's `expected` adds."""
    a, b = _lift(a), _lift(b)
    aa, ab = a.value.abs(), b.value.abs()
    k = a.value.shape[-1]
    absprod = aa @ ab
    det = _propagated(aa, ab, a.det, b.det, absprod) + \
        (_u(products) * absprod if products is not None else 0.0)
    stat = _propagated(aa, ab, a.stat, b.stat, absprod) + math.sqrt(max(k, 1)) * _u(acc) * absprod
    u = max(a.u, b.u, _u(acc), _u(products) if products is not None else 0.0)
    if partials is not None:
        dtype, chunk = partials
        running = torch.zeros_like(absprod)
        for start in range(0, k - chunk, chunk):     # the stores before the last chunk
            running = running + a.value[..., start:start + chunk] @ \
                b.value[..., start:start + chunk, :]
            det = det + rounding(running, dtype)
        u = max(u, _u(dtype))
    return Bounded(a.value @ b.value, det, stat, u)


@dataclass(frozen=True)
class Expected:
    """An oracle's answer for one output: the exact value, how far a correct kernel's
    result may be from it, and the output's dtype. `det is None`: an exact match."""
    value: torch.Tensor
    dtype: torch.dtype
    det: torch.Tensor | None = None
    stat: torch.Tensor | None = None
    how: str = ""
    precision: str = ""     # the narrowest float dtype the result was rounded through
                            # ("" = the output's): what the result can resolve

    @property
    def exact(self) -> bool:
        return self.det is None

    @property
    def shape(self):
        return self.value.shape

    def bound(self) -> torch.Tensor:
        """The per-element bound |actual - exact| must stay within."""
        return self.det + LAMBDA * self.stat

    def norm_bound(self) -> float:
        """The bound ||actual - exact||_2 must stay within."""
        if self.det is None or self.value.numel() == 0:
            return 0.0
        return float(self.det.norm() + self.stat.norm() + LAMBDA * self.stat.max())

    def map(self, fn) -> Expected:
        """The same indexing/reshaping applied to the value and its bounds."""
        return Expected(fn(self.value), self.dtype,
                        None if self.det is None else fn(self.det),
                        None if self.stat is None else fn(self.stat), self.how, self.precision)

    def rounded(self) -> torch.Tensor:
        """The exact value rounded to the output dtype: what a perfect kernel stores."""
        return self.value.to(self.dtype)


def _torch_dtype(dtype) -> torch.dtype:
    return dtype if isinstance(dtype, torch.dtype) else getattr(torch, _name(dtype))


def expected(x: Bounded, dtype, how: str = "") -> Expected:
    """The kernel's result x stored as `dtype`: the store's rounding added."""
    dt = _torch_dtype(dtype)
    if not dt.is_floating_point:
        return exact(x.value.round().to(torch.int64), dt, how)
    stored = round_to(x, dt)
    narrowest = next((n for n, u in UNIT_ROUNDOFF.items() if u == stored.u), _name(dt))
    return Expected(stored.value, dt, stored.det, stored.stat, how, narrowest)


def exact(value, dtype=None, how: str = "exact") -> Expected:
    """A result with one right answer (integers, bools, copies, single conversions):
    `value` is that answer (already rounded to the dtype, for floats)."""
    value = torch.as_tensor(value)
    dt = _torch_dtype(dtype) if dtype is not None else value.dtype
    if not dt.is_floating_point:
        return Expected(value, dt, None, None, how)
    v = value.to(dt).double()
    tiny = SMALLEST_NORMAL.get(_name(dt), 0.0)
    det = torch.where(v.abs() < tiny, torch.full_like(v, tiny), torch.zeros_like(v))
    return Expected(v, dt, det, torch.zeros_like(v), how)
