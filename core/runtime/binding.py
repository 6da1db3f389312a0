"""Binding a call's arguments to the program's parameters, with launch-time checks.

`bind(program, args, out_idx, device)` takes the user's positional arguments (inputs
only, in the user's order, outputs and workspaces omitted) and returns a `Binding`: the
tensor for every buffer parameter (outputs and workspaces freshly allocated), the value
of every scalar parameter and every symbolic dim. A dim of an output or workspace that no
input determines takes its capacity (`T.annotate_capacity_dims`): the tensor is
allocated at the capacity, a symbolic dim standing alone there is bound to it, and the
whole capacity is returned, or the view a kernel reports in the tensor named for it
(`reported_view`, after the launches). Everything is checked before anything runs: argument count,
tensor type, dtype, rank, shape (constant dims and symbolic dims consistent across
tensors), contiguity, device, scalar types. A tensor may leave out trailing dims declared
as 1 (a `(T, 1)` parameter takes a `(T,)` tensor). An input's capacity dims
(TileLang's `tilelang_capacity_dims`, `T.annotate_capacity_dims({"a": (0,)})` in an
eager function) are not checked: the kernel masks its accesses along them, so the tensor
may be smaller (or larger); a symbolic dim there is still bound from it. Errors are
`LaunchError`s naming the kernel and the parameter.
"""

from __future__ import annotations

from dataclasses import dataclass

from core.errors import LaunchError
from core.ir.program import evaluate, free_host_vars

TORCH_DTYPES = {"float32": "float32", "float16": "float16", "bfloat16": "bfloat16",
                "int32": "int32", "int64": "int64", "int8": "int8", "uint8": "uint8",
                "bool": "bool", "int16": "int16", "uint16": "uint16", "uint32": "uint32",
                "uint64": "uint64"}


@dataclass
class Binding:
    tensors: dict        # buffer parameter name -> torch tensor
    env: dict            # scalar parameter / symbolic dim name -> Python value
    outputs: list        # output tensors, in out_idx order


def _torch():
    import torch
    return torch


def output_indices(program, out_idx) -> list:
    # workspaces (last) are not the user's parameters: out_idx=-1 is the last of those
    n = sum(1 for p in program.params if p.name not in program.workspaces)
    if out_idx is None:
        return []
    idx = [out_idx] if isinstance(out_idx, int) else list(out_idx)
    norm = []
    for i in idx:
        j = i + n if i < 0 else i
        if not 0 <= j < n or program.params[j].kind != "buffer":
            raise LaunchError(f"out_idx {i} does not name a tensor parameter "
                              f"(the kernel has {n} parameters)", kernel=program.name,
                              construct="out_idx")
        norm.append(j)
    return norm


def bind(program, args, out_idx, device) -> Binding:
    torch = _torch()
    name = program.name
    outs = output_indices(program, out_idx)
    workspaces = [i for i, p in enumerate(program.params) if p.name in program.workspaces]
    inputs = [p for i, p in enumerate(program.params) if i not in outs and i not in workspaces]
    if len(args) != len(inputs):
        expected = ", ".join(p.name for p in inputs)
        raise LaunchError(f"expected {len(inputs)} arguments ({expected}), got {len(args)}",
                          kernel=name, construct="arguments")
    tensors, env = {}, {}
    bound_by = {}  # symbolic dim -> where its value came from, for messages
    capacity_in = dict(getattr(program, "input_capacity", ()))
    symbol_dtypes = dict(program.symbols)
    for p, a in zip(inputs, args):
        construct = f"parameter '{p.name}'"
        if p.kind == "scalar":
            env[p.name] = _scalar(a, p, name)
            continue
        if not isinstance(a, torch.Tensor):
            raise LaunchError(f"expected a torch tensor, got {type(a).__name__}",
                              kernel=name, construct=construct)
        if str(a.dtype).replace("torch.", "") != TORCH_DTYPES[p.dtype]:
            raise LaunchError(f"dtype {a.dtype} does not match the declared {p.dtype}",
                              kernel=name, construct=construct)
        if a.dim() < len(p.shape) and p.strides is None and \
                all(d == ("const", 1) for d in p.shape[a.dim():]):
            # declared (T, 1), given (T,): trailing dims of 1 may be left out (the same
            # memory; TileLang's Metal binding accepts it); the rest is checked as usual
            for _ in range(len(p.shape) - a.dim()):
                a = a.unsqueeze(-1)
        if a.dim() != len(p.shape):
            raise LaunchError(f"rank {a.dim()} (shape {tuple(a.shape)}) does not match the "
                              f"declared rank {len(p.shape)}", kernel=name, construct=construct)
        if p.strides is None and not a.is_contiguous():
            raise LaunchError("tensor is not contiguous; pass x.contiguous()", kernel=name,
                              construct=construct)
        if a.device.type != device:
            raise LaunchError(f"tensor is on {a.device}, the backend needs {device}",
                              kernel=name, construct=construct)
        free = capacity_in.get(p.name, ())
        for d, (dim, actual) in enumerate(zip(p.shape, a.shape)):
            if d in free and not (dim[0] == "var" and dim[1] in symbol_dtypes):
                continue  # a capacity dim (tilelang_capacity_dims): any size
            _match_dim(dim, int(actual), env, symbol_dtypes, name, construct, d, bound_by)
        tensors[p.name] = a if p.strides is None else _strided(a, p, env, name, construct)
    outputs = []
    capacity = dict(program.capacity)
    for i in [*outs, *workspaces]:
        p = program.params[i]
        role = "output" if i in outs else "workspace"
        shape = [_allocated_dim(d, k, p, role, capacity.get(p.name), env, name)
                 for k, d in enumerate(p.shape)]
        t = torch.empty(shape, dtype=getattr(torch, TORCH_DTYPES[p.dtype]), device=device)
        tensors[p.name] = t
        if i in outs:
            outputs.append(t)
    return Binding(tensors, env, outputs)


def reported_view(program, binding, out):
    """`out` narrowed to the lengths a kernel wrote for it (T.annotate_capacity_dims'
    `lengths`), else `out` itself."""
    lengths = dict(program.lengths)
    name = next((n for n, t in binding.tensors.items() if t is out), None)
    if name not in lengths:
        return out
    caps = dict(program.capacity)[name]
    values = [int(v) for v in binding.tensors[lengths[name]].reshape(-1).tolist()]
    dims = [d for d, c in enumerate(caps) if c is not None]
    for d, n in zip(dims, values):
        if not 0 <= n <= out.shape[d]:
            raise LaunchError(f"the kernel reported length {n} for dim {d}, outside its "
                              f"capacity {out.shape[d]}", kernel=program.name,
                              construct=f"output '{name}' (lengths in '{lengths[name]}')")
        out = out.narrow(d, 0, n)
    return out


def _strided(a, p, env, kernel, construct):
    """A tensor declared with strides (T.StridedTensor): its strides must be the declared
    ones; the kernel gets the flat span of memory they cover (a view, no copy)."""
    want = [evaluate(s, env) if not free_host_vars(s) - set(env) else None for s in p.strides]
    if any(w is not None and w != g for w, g in zip(want, a.stride())):
        raise LaunchError(f"strides {tuple(a.stride())} do not match the declared "
                          f"{tuple(w if w is not None else '?' for w in want)}", kernel=kernel,
                          construct=construct)
    span = 1 + sum((n - 1) * s for n, s in zip(a.shape, a.stride())) if a.numel() else 0
    return a.as_strided((span,), (1,), a.storage_offset())


def _allocated_dim(dim, k, p, role, capacity, env, kernel):
    """Size of dim `k` of an output or workspace: from the inputs, else its capacity."""
    missing = free_host_vars(dim) - set(env)
    if not missing:
        return evaluate(dim, env)
    cap = capacity[k] if capacity else None
    if cap is None:
        raise LaunchError(f"output shape dim {k} depends on {sorted(missing)}, which no "
                          "input tensor or scalar determines; declare its allocation size "
                          "with T.annotate_capacity_dims", kernel=kernel,
                          construct=f"{role} '{p.name}'")
    if dim[0] == "var":
        env[dim[1]] = cap
    return cap


def _match_dim(dim, actual, env, symbol_dtypes, kernel, construct, d, bound_by):
    if dim[0] == "var" and dim[1] in symbol_dtypes:
        sym = dim[1]
        if sym in env and env[sym] != actual:
            raise LaunchError(f"dim {d} is {actual} but symbolic dim '{sym}' is already "
                              f"{env[sym]} from {bound_by.get(sym, 'another argument')}",
                              kernel=kernel, construct=construct)
        env[sym] = actual
        bound_by.setdefault(sym, f"{construct} dim {d}")
        return
    if not free_host_vars(dim) - set(env):
        want = evaluate(dim, env)
        if want != actual:
            raise LaunchError(f"dim {d} is {actual}, declared {want}", kernel=kernel,
                              construct=construct)


def _scalar(value, p, kernel):
    torch = _torch()
    if isinstance(value, torch.Tensor) and value.numel() == 1:
        value = value.item()
    construct = f"scalar parameter '{p.name}' ({p.dtype})"
    if p.dtype == "bool":
        if not isinstance(value, (bool, int)):
            raise LaunchError(f"expected a bool, got {type(value).__name__}", kernel=kernel,
                              construct=construct)
        return bool(value)
    if p.dtype.startswith("int"):
        if isinstance(value, bool) or not isinstance(value, int):
            raise LaunchError(f"expected an int, got {value!r}", kernel=kernel,
                              construct=construct)
        return value
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        raise LaunchError(f"expected a number, got {value!r}", kernel=kernel,
                          construct=construct)
    return float(value)
