"""Oracle of the gemm family: C = op(A) @ op(B) in float64 from the kernel's inputs.

The inputs are taken as given (already rounded to float16/bfloat16 where the kernel reads
those), multiplied and summed in float64, and returned as float32: the kernel accumulates
in float32, so its result differs only by float32 rounding over K terms (the tolerance
policy's accumulation class with reduction_length=K), plus one final rounding when it
stores float16/bfloat16.
"""

from __future__ import annotations

import torch

from oracles import bounds


def gemm(a, b, transpose_a: bool = False, transpose_b: bool = False) -> torch.Tensor:
    """op(a) @ op(b), op = transpose when asked; float64 math, float32 result."""
    a, b = a.double(), b.double()
    if transpose_a:
        a = a.T
    if transpose_b:
        b = b.T
    return (a @ b).float()


def product_rounding(dtype: str):
    """The dtype a float32 accumulation's products round in: none for float16/bfloat16
    operands (11- or 8-bit significands multiply exactly into float32's 24), float32 for
    float32 operands (when the multiply-add is not fused)."""
    return "float32" if str(dtype).replace("torch.", "") == "float32" else None


def gemm_bounded(a, b, transpose_a: bool = False, transpose_b: bool = False,
                 acc: str = "float32", products=None, partials=None):
    """op(a) @ op(b) as an `oracles.bounds.Bounded`: the exact product with the error
    bound of a dot product over K accumulated in `acc` (docs/tolerance.md); `partials`:
    (dtype, chunk) when the running sum is stored in dtype after every chunk of K
    (`bounds.matmul`)."""
    a, b = bounds.exact_input(a), bounds.exact_input(b)
    if transpose_a:
        a = a.map(lambda t: t.T)
    if transpose_b:
        b = b.map(lambda t: t.T)
    return bounds.matmul(a, b, acc, products, partials)
