"""Pass `split_host_device`: PrimFunc -> LoweredProgram (device kernels + launch plan).

Expects: the fully lowered PrimFunc (flat buffers, barriers planned); its body is the
top-level DeclBuffer views of the parameters followed by kernel nests.
Guarantees: one device PrimFunc per kernel nest, named after the function (with
`_kernel{i}` when there are several, `_kernel` when the name is reserved in MSL). Its
parameters are the buffers the kernel touches, in order of first use (not the user's
order; unused buffers are dropped), then the scalars it reads (scalar parameters and
symbolic dims), in order of first use. Each device function carries `tl.readonly` (names
of buffers it never writes) and `tl.threads`. The launch plan holds one LaunchSite per
kernel, in program order.
"""

from __future__ import annotations

from tvm import tirx
from tvm.tirx import is_buffer_var

from core.ir import annotations as keys
from core.ir import matrix
from core.ir import program as P
from core.ir.kernel import top_level, unwrap
from core.ir.stmt import free_vars, is_kernel_attr, seq, walk
from core.target import DTYPES


def _param_views(func):
    """flat DeclBuffer view -> the parameter it views, and the view statements."""
    views, decls = {}, []
    for s in top_level(func.body):
        if isinstance(s, tirx.DeclBuffer):
            data = s.data
            target = data.args[0] if hasattr(data, "args") and data.args else None
            if target is not None:
                views[s.buffer] = target
                decls.append(s)
    return views, decls


# Names a device function cannot have in MSL (C++ reserves `main`; the rest are MSL words).
RESERVED = {"main", "kernel", "vertex", "fragment", "device", "constant", "thread",
            "threadgroup", "void", "metal"} | {d.msl for d in DTYPES.values()}


def split_host_device(func: tirx.PrimFunc) -> P.LoweredProgram:
    name = str(func.attrs["global_symbol"])
    buffers = [p for p in func.params if is_buffer_var(p)]
    scalars = [p for p in func.params if not is_buffer_var(p)]
    symbols = {}
    for b in buffers:
        for d in b.ty.shape:
            for v in free_vars(d):
                symbols.setdefault(v, None)
    views, decls = _param_views(func)
    host_scalars = set(scalars) | set(symbols)

    nests = [unwrap(s) for s in top_level(func.body) if is_kernel_attr(s)]
    device, launches = {}, []
    for i, nest in enumerate(nests):
        kname = f"{name}_kernel{i}" if len(nests) > 1 else \
            f"{name}_kernel" if name in RESERVED else name
        stmt = nest.wrap(nest.body)
        used_buffers, used_scalars = [], []
        for v in free_vars(stmt):
            target = views.get(v, v)
            if target in buffers and target not in used_buffers:
                used_buffers.append(target)
            elif v in host_scalars and v not in used_scalars:
                used_scalars.append(v)
        written = set()

        def note_store(s, written=written):
            if isinstance(s, tirx.BufferStore):
                written.add(views.get(s.buffer, s.buffer).name)
            tile = matrix.tile_access(s.value) if isinstance(s, tirx.Evaluate) else None
            if tile is not None and tile.write:  # simdgroup_store
                written.add(views.get(tile.buffer, tile.buffer).name)

        walk(stmt, note_store)
        body = seq([d for d in decls if views[d.buffer] in used_buffers] + [stmt])
        dfunc = tirx.PrimFunc(used_buffers + used_scalars, body)
        dfunc = dfunc.with_attr("global_symbol", kname)
        dfunc = dfunc.with_attr(keys.READONLY,
                                [b.name for b in used_buffers if b.name not in written])
        dfunc = dfunc.with_attr(keys.THREADS, list(nest.threads))
        device[kname] = dfunc
        launches.append(P.LaunchSite(
            kernel=kname,
            grid=tuple(P.host_expr(g) for g in nest.grid),
            threadgroup=nest.threads,
            buffers=tuple(b.name for b in used_buffers),
            scalars=tuple(P.ScalarBinding(v.name, str(v.ty), ("var", v.name))
                          for v in used_scalars)))
    params = tuple(
        P.ParamSpec(p.name, "buffer", str(p.ty.dtype),
                    tuple(P.host_expr(d) for d in p.ty.shape)) if is_buffer_var(p)
        else P.ParamSpec(p.name, "scalar", str(p.ty))
        for p in func.params)
    return P.LoweredProgram(name, params, tuple((v.name, str(v.ty)) for v in symbols),
                            device, tuple(launches))
