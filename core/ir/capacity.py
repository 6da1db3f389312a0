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
function, or on a prim_func by `func.with_attr(...)`; `input_capacity_dims` checks it (the
verifier) and split_host_device carries it into the LoweredProgram, which core.jit hands
to the binding (core/runtime/binding.py). `resolve_declared` gives the entries a prim_func
body declared their meaning by role, in core.compile and again at the start of
pipeline.run (the same out_idx: a no-op the second time).
"""

from __future__ import annotations

from core.errors import KernelDefinitionError
from core.ir import annotations as keys


def check_capacity_dims(func, kernel: str):
    """The capacity annotations of a PrimFunc name its tensors, one entry per dim (a
    prim_func is checked when parsed; the verifier checks every function again)."""
    attrs = func.attrs or {}
    tensors = {p.name: p for p in func.params if hasattr(p.ty, "shape")}
    for name in attrs.get(keys.CAPACITY_DECLARED) or {}:   # resolved by role at compile
        if str(name) not in tensors:
            raise KernelDefinitionError(f"'{name}' is not a tensor of the function; tensors: "
                                        f"{', '.join(sorted(tensors)) or 'none'}",
                                        kernel=kernel,
                                        construct=f"T.annotate_capacity_dims('{name}')")
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


def resolve_declared(func, out_idx, kernel: str):
    """`func` with its prim_func-body T.annotate_capacity_dims given their meaning by role:
    for an output (a position of `out_idx`, or a tensor with a length tensor) the entries
    are its allocation per dim (`tl.capacity_dims`, metaltile's); for any other tensor, an
    input or an output the caller passes in, the entries are the indices of its capacity
    dims (`tilelang_capacity_dims`, TileLang's seed: the tensor given may differ there)."""
    attrs = func.attrs or {}
    declared = attrs.get(keys.CAPACITY_DECLARED)
    if declared is None:
        return func
    params = list(func.params)
    picks = [] if out_idx is None else [out_idx] if isinstance(out_idx, int) else out_idx
    outputs = {params[i].name for i in picks if -len(params) <= i < len(params)}
    outputs |= {str(n) for n in (attrs.get(keys.CAPACITY_LENGTHS) or {})}
    alloc, dims = {}, {}
    for name, entries in declared.items():
        name, entries = str(name), [int(e) for e in entries]
        if name in outputs:
            alloc[name] = entries
        elif any(e < 0 for e in entries):
            raise KernelDefinitionError(
                f"'{name}' is an input tensor: its entry lists dim indices (TileLang's "
                f"capacity dims, e.g. (0,)), got {tuple(None if e < 0 else e for e in entries)}",
                kernel=kernel, construct=f"T.annotate_capacity_dims('{name}')")
        else:
            dims[name] = entries
    out = func.without_attr(keys.CAPACITY_DECLARED)
    if alloc:
        out = out.with_attr(keys.CAPACITY_DIMS, alloc)
    if dims:
        out = out.with_attr(keys.TILELANG_CAPACITY_DIMS,
                            {**dict(attrs.get(keys.TILELANG_CAPACITY_DIMS) or {}), **dims})
    return out


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
