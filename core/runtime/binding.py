"""Binding a call's arguments to the program's parameters, with launch-time checks.

`bind(program, args, out_idx, device)` takes the user's positional arguments (inputs
only, in the user's order, outputs omitted) and returns a `Binding`: the tensor for
every buffer parameter (outputs freshly allocated), the value of every scalar parameter
and every symbolic dim. Everything is checked before anything runs: argument count,
tensor type, dtype, rank, shape (constant dims and symbolic dims consistent across
tensors), contiguity, device, scalar types. Errors are `LaunchError`s naming the kernel
and the parameter.
"""

from __future__ import annotations

from dataclasses import dataclass

from core.errors import LaunchError
from core.ir.program import evaluate, free_host_vars

TORCH_DTYPES = {"float32": "float32", "float16": "float16", "bfloat16": "bfloat16",
                "int32": "int32", "int64": "int64", "int8": "int8", "uint8": "uint8",
                "bool": "bool", "uint32": "uint32"}


@dataclass
class Binding:
    tensors: dict        # buffer parameter name -> torch tensor
    env: dict            # scalar parameter / symbolic dim name -> Python value
    outputs: list        # output tensors, in out_idx order


def _torch():
    import torch
    return torch


def output_indices(program, out_idx) -> list:
    n = len(program.params)
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
    inputs = [p for i, p in enumerate(program.params) if i not in outs]
    if len(args) != len(inputs):
        expected = ", ".join(p.name for p in inputs)
        raise LaunchError(f"expected {len(inputs)} arguments ({expected}), got {len(args)}",
                          kernel=name, construct="arguments")
    tensors, env = {}, {}
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
        if a.dim() != len(p.shape):
            raise LaunchError(f"rank {a.dim()} (shape {tuple(a.shape)}) does not match the "
                              f"declared rank {len(p.shape)}", kernel=name, construct=construct)
        if not a.is_contiguous():
            raise LaunchError("tensor is not contiguous; pass x.contiguous()", kernel=name,
                              construct=construct)
        if a.device.type != device:
            raise LaunchError(f"tensor is on {a.device}, the backend needs {device}",
                              kernel=name, construct=construct)
        for d, (dim, actual) in enumerate(zip(p.shape, a.shape)):
            _match_dim(dim, int(actual), env, symbol_dtypes, name, construct, d)
        tensors[p.name] = a
    outputs = []
    for i in outs:
        p = program.params[i]
        missing = set().union(*(free_host_vars(d) for d in p.shape)) - set(env) \
            if p.shape else set()
        if missing:
            raise LaunchError(f"output shape depends on {sorted(missing)}, which no input "
                              "tensor or scalar determines", kernel=name,
                              construct=f"output '{p.name}'")
        shape = [evaluate(d, env) for d in p.shape]
        t = torch.empty(shape, dtype=getattr(torch, TORCH_DTYPES[p.dtype]), device=device)
        tensors[p.name] = t
        outputs.append(t)
    return Binding(tensors, env, outputs)


def _match_dim(dim, actual, env, symbol_dtypes, kernel, construct, d):
    if dim[0] == "var" and dim[1] in symbol_dtypes:
        sym = dim[1]
        if sym in env and env[sym] != actual:
            raise LaunchError(f"dim {d} is {actual} but symbolic dim '{sym}' is already "
                              f"{env[sym]} from another argument", kernel=kernel,
                              construct=construct)
        env[sym] = actual
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
