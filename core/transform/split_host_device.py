"""Pass `split_host_device`: PrimFunc -> LoweredProgram (device kernels + launch plan).

Expects: the fully lowered PrimFunc (flat buffers, barriers planned); its body is the
host program: the top-level DeclBuffer views of the parameters, then kernel nests, host
loops (serial `For`) and host conditions (`IfThenElse`) around them and host scalars
(`Bind`, core/transform/host_program.py).
Guarantees: one device PrimFunc per kernel nest, named after the function (with
`_kernel{i}` when there are several, `_kernel` when the name is reserved in MSL). Its
parameters are the buffers the kernel touches, in order of first use (not the user's
order; unused buffers are dropped), then the scalars it reads (scalar parameters,
symbolic dims, host loop variables and host scalars), in order of first use. Each device
function carries `tl.readonly` (names of buffers it never writes) and `tl.threads`. The
launch plan holds one LaunchSite per kernel nest, in program order, and the host steps
(core/ir/program.py) that launch them: a nest inside a host loop is one device kernel
launched once per iteration, its scalars evaluated per launch. Host variables are
named uniquely in the plan: distinct variables that share a name (two `T.dynamic("N")`)
stay distinct dims (`N`, `N_1`), as TileLang binds symbols by identity. Workspaces
(`tl.workspaces`), capacity dims (`tl.capacity_dims`, -1 = none) and the tensors that
report an output's length (`tl.capacity_lengths`) are copied from the function's
attributes, TileLang's capacity dims of the tensors given by the caller
(`tilelang_capacity_dims`, core/ir/capacity.py) too, and so are the lowering decisions the
passes noted (`tl.decisions`, core/ir/decisions.py), with this pass's own: the host
program's shape (one launch or several, host loops, ifs, workspaces, host scalars) and
each atomic's kind, address space and form (one MSL atomic, or a compare-exchange loop:
METAL.atomic_is_native).
"""

from __future__ import annotations

from tvm import tirx
from tvm.tirx import is_buffer_var

from core.errors import LoweringError
from core.ir import annotations as keys
from core.ir import decisions as D
from core.ir import matrix, ops
from core.ir import program as P
from core.ir.capacity import input_capacity_dims
from core.ir.kernel import func_name, top_level, unwrap, with_attr
from core.ir.stmt import atomics_in, free_vars, is_kernel_attr, seq, walk
from core.target import DTYPES, METAL, MSL_KEYWORDS


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
RESERVED = MSL_KEYWORDS | {d.msl for d in DTYPES.values()}


class _Split:
    def __init__(self, func):
        self.func = func
        self.name = func_name(func)
        self.decided = set(D.noted(func))   # "point=choice" (core/ir/decisions.py)
        self.buffers = [p for p in func.params if is_buffer_var(p)]
        scalars = [p for p in func.params if not is_buffer_var(p)]
        self.symbols = {}
        for b in self.buffers:
            for d in b.ty.shape:
                for v in free_vars(d):
                    self.symbols.setdefault(v, None)
        self.views, self.decls = _param_views(func)
        # host variable -> its name in the launch plan's environment (unique): two distinct
        # variables that share a name (two T.dynamic("N")) are two dims, the second
        # named N_1, as TileLang binds symbols by identity
        self.names = {}
        for v in [*scalars, *self.symbols]:
            if v not in self.names:
                self.host_var(v)
        self.nests = []
        self.device, self.launches = {}, []

    def host_var(self, v):
        taken = set(self.names.values())
        name, i = v.name, 1
        while name in taken:
            name, i = f"{v.name}_{i}", i + 1
        self.names[v] = name
        return name

    def steps(self, s) -> list:
        if is_kernel_attr(s):
            self.nests.append(unwrap(s))
            return [len(self.nests) - 1]  # placeholder: the site is made once all are known
        if isinstance(s, tirx.SeqStmt):
            return [x for k in s.seq for x in self.steps(k)]
        if isinstance(s, tirx.For):
            start = P.host_expr(s.min, self.names)
            extent = P.host_expr(s.extent, self.names)
            var = self.host_var(s.loop_var)
            return [P.HostLoop(var, start, extent, tuple(self.steps(s.body)))]
        if isinstance(s, tirx.IfThenElse):
            otherwise = tuple(self.steps(s.else_case)) if s.else_case is not None else ()
            return [P.HostIf(P.host_expr(s.condition, self.names),
                             tuple(self.steps(s.then_case)), otherwise)]
        if isinstance(s, tirx.Bind):
            value = P.host_expr(s.value, self.names)
            return [P.HostLet(self.host_var(s.var), str(s.var.ty), value)]
        if isinstance(s, tirx.DeclBuffer) or isinstance(s, tirx.Evaluate):
            return []
        raise LoweringError(f"host statement {type(s).__name__} cannot be run by the launch "
                            "plan", kernel=self.name, construct="host program")

    def site(self, i, nest):
        n = len(self.nests)
        kname = f"{self.name}_kernel{i}" if n > 1 else \
            f"{self.name}_kernel" if self.name in RESERVED else self.name
        stmt = nest.wrap(nest.body)
        # dicts as ordered sets: a Var's hash and `==` are its identity, and a list scan
        # would build one TIR EQ node per comparison
        parameters = dict.fromkeys(self.buffers)
        used_buffers, used_scalars = {}, {}
        for v in free_vars(stmt):
            target = self.views.get(v, v)
            if target in parameters:
                used_buffers.setdefault(target)
            elif v in self.names:
                used_scalars.setdefault(v)
        parameters_used = used_buffers
        used_buffers, used_scalars = list(used_buffers), list(used_scalars)
        written = set()
        views = self.views

        def note_store(s):
            if isinstance(s, tirx.BufferStore):
                written.add(views.get(s.buffer, s.buffer).name)
            for node in (s.value,) if isinstance(s, (tirx.Evaluate, tirx.BufferStore)) else ():
                for a in atomics_in(node):
                    written.add(views.get(a.buffer, a.buffer).name)
                    self.note_atomic(a)
            tile = matrix.tile_access(s.value) if isinstance(s, tirx.Evaluate) else None
            if tile is not None and tile.write:  # simdgroup_store
                written.add(views.get(tile.buffer, tile.buffer).name)

        walk(stmt, note_store)
        body = seq([d for d in self.decls if views[d.buffer] in parameters_used] + [stmt])
        dfunc = tirx.PrimFunc(used_buffers + used_scalars, body)
        dfunc = with_attr(dfunc, "global_symbol", kname)
        dfunc = with_attr(dfunc, keys.READONLY,
                          [b.name for b in used_buffers if b.name not in written])
        dfunc = with_attr(dfunc, keys.THREADS, list(nest.threads))
        self.device[kname] = dfunc
        return P.LaunchSite(
            kernel=kname,
            grid=tuple(P.host_expr(g, self.names) for g in nest.grid),
            threadgroup=nest.threads,
            buffers=tuple(b.name for b in used_buffers),
            scalars=tuple(P.ScalarBinding(v.name, str(v.ty), ("var", self.names[v]))
                          for v in used_scalars))

    def note_atomic(self, a) -> None:
        space = "threadgroup" if ops.buffer_scope(a.buffer) == "shared" else "device"
        self.decided |= {D.choice("atomics", a.kind), D.choice("atomics.space", space)}
        if a.kind not in ("load", "store"):
            native = METAL.atomic_is_native(str(a.buffer.ty.dtype), a.kind, space)
            self.decided.add(D.choice("atomics.form", "native" if native
                                      else "compare_exchange"))

    def note_host(self, steps, sites) -> None:
        """The host program's shape, as the `host` decision point's choices."""
        kinds = set()

        def visit(step):
            if isinstance(step, P.HostLoop):
                kinds.add("loop")
                for s in step.body:
                    visit(s)
            elif isinstance(step, P.HostIf):
                kinds.add("if")
                for s in (*step.then, *step.otherwise):
                    visit(s)
            elif isinstance(step, P.HostLet):
                kinds.add("scalars_per_launch")

        for step in steps:
            visit(step)
        kinds.add("one_launch" if len(sites) == 1 else "launches")
        self.decided |= {D.choice("host", k) for k in kinds}

    def run(self) -> P.LoweredProgram:
        func = self.func
        steps = self.steps(func.body)
        sites = [self.site(i, nest) for i, nest in enumerate(self.nests)]

        def resolve(step):
            if isinstance(step, int):
                return sites[step]
            if isinstance(step, P.HostLoop):
                return P.HostLoop(step.var, step.start, step.extent,
                                  tuple(resolve(s) for s in step.body))
            if isinstance(step, P.HostIf):
                return P.HostIf(step.cond, tuple(resolve(s) for s in step.then),
                                tuple(resolve(s) for s in step.otherwise))
            return step

        host = tuple(resolve(s) for s in steps)
        params = tuple(
            P.ParamSpec(p.name, "buffer", str(p.ty.dtype),
                        tuple(P.host_expr(d, self.names) for d in p.ty.shape),
                        tuple(P.host_expr(d, self.names) for d in p.ty.strides) or None)
            if is_buffer_var(p)
            else P.ParamSpec(p.name, "scalar", str(p.ty))
            for p in func.params)
        attrs = func.attrs or {}
        workspaces = tuple(str(n) for n in attrs.get(keys.WORKSPACES, ()))
        capacity = tuple(
            (str(n), tuple(None if int(c) < 0 else int(c) for c in dims))
            for n, dims in attrs.get(keys.CAPACITY_DIMS, {}).items())
        lengths = tuple((str(n), str(c))
                        for n, c in attrs.get(keys.CAPACITY_LENGTHS, {}).items())
        self.note_host(host, sites)
        if workspaces:
            self.decided.add(D.choice("host", "workspaces"))
        return P.LoweredProgram(self.name, params,
                                tuple((self.names[v], str(v.ty)) for v in self.symbols),
                                self.device, tuple(sites), host, workspaces, capacity,
                                lengths, tuple(sorted(self.decided)),
                                input_capacity_dims(func, self.name))


def split_host_device(func: tirx.PrimFunc) -> P.LoweredProgram:
    return _Split(func).run()
