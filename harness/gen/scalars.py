"""Family `scalars`: kernels whose signature mixes tensors with int32/int64/float32/float16/bool
scalar arguments in leading, middle and trailing positions, optionally with symbolic dims.

Params:
    M, N        extents of A and B (any size >= 1; 4096 x 4096 builds too)
    dtype       dtype of A and B: float32, float16, bfloat16 (computed in float32)
    signature   the parameter list in order: "A" (input tensor), "B" (output tensor) and
                scalar dtypes ("int32", "int64", "float32", "float16", "bool"), e.g.
                ["int64", "A", "float32", "B", "bool"]; scalars are named s0, s1, ...
    symbolic    which extents are symbolic (`T.dynamic`): "none", "M", "N", "both"; the
                kernel is then compiled once for any size and binds them from A's shape
    bM, bN      tile; threads: threads per threadgroup (int or [x, y(, z)])

Each element: v = float32(A[i, j]), then per scalar in signature order the step of
oracles/scalars.py, B[i, j] = cast(v, dtype). A signature of arbitrary order needs a
real Python function for TVMScript to parse, so the kernel's source is generated (one
`def` per distinct signature, registered with linecache so parse errors show it).
"""

from __future__ import annotations

import functools
import hashlib
import linecache

import torch
from hypothesis import strategies as st

import core.language as T
from harness.gen import strategies as S
from harness.gen.family import Built, Family, register
from harness.gen.inputs import random_tensor
from oracles import scalars as oracle

SCALAR_DTYPES = ("int32", "int64", "float32", "float16", "bool")
DTYPES = S.FLOATS
SYMBOLIC = ("none", "M", "N", "both")

_STEP = {  # the DSL spelling of oracles/scalars.py's steps: (v, s) -> expression text
    "float32": lambda v, s: f"({v}) * {s}",
    "float16": lambda v, s: f"({v}) * T.cast({s}, 'float32')",
    "int32": lambda v, s: f"({v}) + T.cast({s}, 'float32')",
    "int64": lambda v, s: f"({v}) + T.cast({s} % 1000, 'float32')",
    "bool": lambda v, s: f"({v}) * T.if_then_else({s}, 1.0, -1.0)",
}
_COMPILED: dict = {}


def kernel_source(signature) -> str:
    """Python source of `make(T, M, N, bM, bN, threads, dtype) -> prim_func`."""
    params, names = [], []
    for entry in signature:
        if entry in ("A", "B"):
            params.append(f"{entry}: T.Tensor((M, N), dtype)")
        else:
            name = f"s{len(names)}"
            names.append((name, entry))
            params.append(f"{name}: T.{entry}")
    g = "by * bM + i, bx * bN + j"
    v = f"T.cast(A[{g}], 'float32')"
    for name, dtype in names:
        v = _STEP[dtype](v, name)
    return "\n".join([
        "def make(T, M, N, bM, bN, threads, dtype):",
        "    @T.prim_func",
        f"    def scalars({', '.join(params)}):",
        "        with T.Kernel(T.ceildiv(N, bN), T.ceildiv(M, bM), threads=threads) as (bx, by):",
        "            for i, j in T.Parallel(bM, bN):",
        "                if by * bM + i < M and bx * bN + j < N:",
        f"                    B[{g}] = T.cast({v}, dtype)",
        "    return scalars",
        "",
    ])


def _maker(signature):
    source = kernel_source(signature)
    if source not in _COMPILED:
        digest = hashlib.sha1(source.encode()).hexdigest()[:12]
        filename = f"<metaltile-gen scalars {digest}>"
        linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
        namespace: dict = {}
        exec(compile(source, filename, "exec"), namespace)  # noqa: S102 - our own source
        _COMPILED[source] = namespace["make"]
    return _COMPILED[source]


def scalar_values(signature, seed: int) -> list:
    """Deterministic values for the signature's scalars (exact in their dtypes)."""
    g = torch.Generator().manual_seed(int(seed) + 7)
    values = []
    for entry in signature:
        r = int(torch.randint(0, 2**20, (1,), generator=g))
        if entry == "int32":
            values.append(r % 2001 - 1000)
        elif entry == "int64":
            values.append(2**40 + r)
        elif entry == "float32":
            values.append(((r % 200) - 100) / 64.0)
        elif entry == "float16":
            values.append(((r % 64) - 32) / 16.0)
        elif entry == "bool":
            values.append(bool(r % 2))
    return values


def build(p: dict) -> Built:
    M, N, dtype, signature = p["M"], p["N"], p["dtype"], list(p["signature"])
    sym = p["symbolic"]
    Md = T.dynamic("M") if sym in ("M", "both") else M
    Nd = T.dynamic("N") if sym in ("N", "both") else N
    func = _maker(signature)(T, Md, Nd, p["bM"], p["bN"], p["threads"], dtype)
    scalar_dtypes = [e for e in signature if e not in ("A", "B")]

    def inputs(seed):
        values = iter(scalar_values(signature, seed))
        a = random_tensor((M, N), dtype, seed)
        return [a if e == "A" else next(values) for e in signature if e != "B"]

    def expected(args):
        a = next(x for x in args if isinstance(x, torch.Tensor))
        values = [x for x in args if not isinstance(x, torch.Tensor)]
        return [oracle.scalars_expected(a, scalar_dtypes, values, dtype)]

    return Built(func, [signature.index("B")], inputs, expected,
                 flops=M * N * len(scalar_dtypes))


_SCALARS = st.lists(S.sampled_from(SCALAR_DTYPES), min_size=0, max_size=5)


@functools.cache
def _orders(names: tuple):
    """Orders of `names` (each drawn as a new list); one strategy per distinct `names`."""
    return st.permutations(names)


@functools.cache
@st.composite
def signature(draw):
    """"A", "B" and 0-5 scalars in a random order (leading, middle, trailing)."""
    scalars = draw(_SCALARS)
    return draw(_orders(("A", "B", *scalars)))


@st.composite
def params(draw):
    return {
        "M": draw(S.extent(1, 64)), "N": draw(S.extent(1, 64)),
        "dtype": draw(S.dtype(DTYPES)), "signature": list(draw(signature())),
        "symbolic": draw(S.sampled_from(SYMBOLIC)),
        "bM": draw(S.tile((1, 4, 8, 16))), "bN": draw(S.tile((4, 8, 16, 32))),
        "threads": draw(S.threads(S.THREADS_ANY)),
    }


FAMILY = register(Family("scalars", __doc__.splitlines()[0], params, build))
