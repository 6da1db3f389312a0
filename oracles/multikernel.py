"""Oracles of the multikernel family: each launch's result, computed from the previous
launch's (already rounded) result, in float64 (integers in int64) and rounded once to
the dtype per launch, as the kernels store them.

    Tmp  = A * 2 + 1
    Out  = Tmp[src(g)] + A[g]             src: "same" g, "reverse" N-1-g, "rotate" (g+s)%N,
                                          "tile_reverse" within tiles of b2, 0 past N
    Out2 = max(Out[N-1-g], Tmp[g])        (third launch)
"""

from __future__ import annotations

import torch

from oracles import bounds as B


def _wide(x):
    return x.to(torch.float64 if x.is_floating_point() else torch.int64)


def source_index(read: str, n: int, shift: int = 0, tile: int = 1):
    """Index of Tmp read for each g in [0, n) (-1: past the end, reads 0)."""
    g = torch.arange(n)
    if read == "same":
        return g
    if read == "reverse":
        return n - 1 - g
    if read == "rotate":
        return (g + shift) % n
    src = (g // tile) * tile + (tile - 1 - g % tile)       # "tile_reverse"
    return torch.where(src < n, src, torch.full_like(src, -1))


def multikernel(a, read: str, kernels: int, shift: int = 0, tile: int = 1) -> list:
    n = a.shape[0]
    tmp = (_wide(a) * 2 + 1).to(a.dtype)
    src = source_index(read, n, shift, tile)
    gathered = torch.where(src >= 0, _wide(tmp)[src.clamp(min=0)],
                           torch.zeros((), dtype=_wide(tmp).dtype))
    out = (gathered + _wide(a)).to(a.dtype)
    if kernels == 2:
        return [tmp, out]
    out2 = torch.maximum(_wide(out).flip(0), _wide(tmp)).to(a.dtype)
    return [tmp, out, out2]


def multikernel_expected(a, read: str, kernels: int, shift: int = 0, tile: int = 1) -> list:
    """`multikernel` as `Expected`s: A * 2 exact, + 1 and + A one rounding each in the
    dtype, max exact; integers exactly."""
    if not a.is_floating_point():
        return [B.exact(t, a.dtype, "multikernel, integers")
                for t in multikernel(a, read, kernels, shift, tile)]
    dtype = a.dtype
    x = B.exact_input(a)
    tmp = B.add(x.same_error(x.value * 2), 1.0, dtype)
    src = source_index(read, a.shape[0], shift, tile)
    gathered = B.where(src >= 0, tmp[src.clamp(min=0)], 0.0)
    out = B.add(gathered, x, dtype)
    outs = [tmp, out]
    if kernels == 3:
        outs.append(B.maximum(out.map(lambda t: t.flip(0)), tmp))
    return [B.expected(o, dtype, f"launch {i + 1} of {kernels} in {dtype}")
            for i, o in enumerate(outs)]
