"""The capacity annotations of a PrimFunc: `tl.capacity_dims` (tensor name -> allocation
per dim, -1 for none) and `tl.capacity_lengths` (tensor name -> the tensor reporting its
length), core/ir/annotations.py.

The eager frontend and `T.annotate_capacity_dims` (core/language/eager.py) write them;
`check_capacity_dims` checks that they name tensors of the function, one entry per dim: a
prim_func when it is parsed (core/language/frontend.py), and every function again in the
verifier (core/transform/verify.py). split_host_device carries them into the launch plan.

TileLang's `tilelang_capacity_dims` (tensor name -> dim indices: "dim 0 of input a is a
capacity dimension", the tensor given may differ from the declaration along it; TileLang
PR #2969) is written by `T.annotate_capacity_dims` for an input tensor of an eager
function, or on a prim_func by `func.with_attr(...)`; `input_capacity_dims` checks it and
core.jit hands it to the binding (core/runtime/binding.py).
"""

from __future__ import annotations

from core.errors import KernelDefinitionError
from core.ir import annotations as keys


def check_capacity_dims(func, kernel: str):
    """The capacity annotations of a PrimFunc name its tensors, one entry per dim (a
    prim_func is checked when parsed; the verifier checks every function again)."""
    attrs = func.attrs or {}
    cap = attrs.get(keys.CAPACITY_DIMS)
    if cap is None:
        return
    tensors = {p.name: p for p in func.params if hasattr(p.ty, "shape")}
    for name, dims in cap.items():
        name = str(name)
        where = f"T.annotate_capacity_dims('{name}')"
        if name not in tensors:
            raise KernelDefinitionError(f"'{name}' is not a tensor of the function; tensors: "
                                        f"{', '.join(sorted(tensors)) or 'none'}",
                                        kernel=kernel, construct=where)
        rank = len(tensors[name].ty.shape)
        if len(dims) != rank:
            raise KernelDefinitionError(f"gives {len(dims)} capacity dims for a tensor of "
                                        f"rank {rank}", kernel=kernel, construct=where)
    for name, counter in (attrs.get(keys.CAPACITY_LENGTHS) or {}).items():
        if str(counter) not in tensors:
            raise KernelDefinitionError(f"'{counter}' is not a tensor of the function",
                                        kernel=kernel,
                                        construct=f"T.annotate_capacity_dims(lengths='{name}')")


def input_capacity_dims(func, kernel: str) -> tuple:
    """((tensor name, (dim, ...)), ...) from `tilelang_capacity_dims`: names of tensor
    parameters, dims in range; else a KernelDefinitionError naming them."""
    cap = (func.attrs or {}).get(keys.TILELANG_CAPACITY_DIMS)
    if not cap:
        return ()
    where = f"function attribute '{keys.TILELANG_CAPACITY_DIMS}'"
    tensors = {p.name: p for p in func.params if hasattr(p.ty, "shape")}
    unknown = sorted(str(n) for n in cap if str(n) not in tensors)
    if unknown:
        raise KernelDefinitionError(f"unknown tensor parameter name(s) {unknown}; the tensor "
                                    f"parameters are {sorted(tensors)}", kernel=kernel,
                                    construct=where)
    out = []
    for name, dims in cap.items():
        rank = len(tensors[str(name)].ty.shape)
        ds = tuple(int(d) for d in dims)
        bad = [d for d in ds if not 0 <= d < rank]
        if bad:
            raise KernelDefinitionError(f"'{name}': dim {bad[0]} is not a dim of a tensor of "
                                        f"rank {rank} (entries are dim indices, 0 to "
                                        f"{rank - 1})", kernel=kernel, construct=where)
        out.append((str(name), ds))
    return tuple(out)
