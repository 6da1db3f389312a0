"""Pass `host_program`: the host level of a kernel function in its plain form.

The body of a prim_func (or of a traced eager function) is a host program: kernel nests
(`with T.Kernel(...)`), host loops around them (`for i in T.serial(n)` / `range(n)`), and
host scalar arithmetic between launches (`s = i * step + 1`).

Expects: a legalized PrimFunc. TVMScript parses a host-level scalar assignment as a
one-element "local" buffer (AllocBuffer + BufferStore) that the kernels then load.
Guarantees: each such host scalar becomes a `Bind(var, value)` at the host level, one
per assignment, and every later read (on the host or inside a kernel) reads that var, so
a kernel that uses it takes it as a scalar argument computed per launch. The host level
then holds only kernel nests, serial `For` loops, `Bind`s, the parameters' `DeclBuffer`s
and constant `Evaluate`s (the verifier rejects anything else).
A host scalar assigned inside a host loop or host `if` and read after it (a value carried
across iterations or out of a branch) is rejected: the launch plan evaluates host
scalars per launch and has no host state.
"""

from __future__ import annotations

import tvm
from tvm import tirx

from core.errors import KernelDefinitionError
from core.ir.kernel import func_name
from core.ir.stmt import children, is_kernel_attr, map_nodes, rebuild, seq


def _is_host_scalar(buf) -> bool:
    ty = buf.ty
    shape = list(ty.shape)
    return str(ty.storage_scope) == "local" and len(shape) == 1 and \
        isinstance(shape[0], tirx.IntImm) and int(shape[0].value) == 1


class _HostScalars:
    def __init__(self, name):
        self.name = name
        self.current = {}      # host scalar buffer -> Var of its latest assignment
        self.versions = {}     # buffer -> number of assignments so far
        self.carried = set()   # buffers last assigned inside a host loop that has ended

    def read(self, node):
        """`node` with loads of host scalars replaced by their current var."""
        if not self.current and not self.carried:
            return node

        carried = []

        def load(e):
            if e.source in self.carried:
                carried.append(e.source)  # raised below: not through the FFI callback
                return e
            var = self.current.get(e.source)
            return var if var is not None else e

        out = map_nodes(node, (tvm.ir.TensorLoad, load))
        if carried:
            name = carried[0].name
            raise KernelDefinitionError(
                f"host scalar '{name}' is assigned inside a host loop or `if` and read after "
                "it; a value carried across host-loop iterations or out of a host `if` is not "
                "supported (compute it from the loop variable, or assign it before)",
                kernel=self.name,
                construct=f"host scalar '{name}'")
        return out

    def stmts(self, stmts) -> list:
        out = []
        for s in stmts:
            s = self.stmt(s)
            if s is not None:
                out.append(s)
        return out

    def stmt(self, s):
        if is_kernel_attr(s):
            return self.read(s)
        if isinstance(s, tirx.AllocBuffer) and _is_host_scalar(s.buffer):
            self.current.pop(s.buffer, None)
            self.carried.discard(s.buffer)
            return None
        if isinstance(s, tirx.BufferStore) and _is_host_scalar(s.buffer):
            value = self.read(s.value)
            n = self.versions.get(s.buffer, 0)
            self.versions[s.buffer] = n + 1
            base = s.buffer.name
            var = tirx.Var(base if n == 0 else f"{base}_{n}", str(s.buffer.ty.dtype))
            self.current[s.buffer] = var
            self.carried.discard(s.buffer)
            return tirx.Bind(var, value)
        if isinstance(s, tirx.SeqStmt):
            return seq(self.stmts(s.seq))
        if isinstance(s, tirx.For):
            before = dict(self.current)
            body = seq(self.stmts([s.body]))
            carried = [b for b, v in self.current.items() if before.get(b) is not v]
            for b in carried:
                self.current.pop(b, None)
                self.carried.add(b)
            return tirx.For(s.loop_var, self.read(s.min),
                            self.read(s.extent), s.kind, body,
                            s.thread_binding, s.annotations, s.step)
        if isinstance(s, tirx.IfThenElse):
            cond = self.read(s.condition)
            before = dict(self.current)
            then = seq(self.stmts([s.then_case]))
            branches = [dict(self.current)]
            self.current = dict(before)
            other = None
            if s.else_case is not None:
                other = seq(self.stmts([s.else_case]))
            branches.append(dict(self.current))
            self.current = before
            for branch in branches:
                for b, v in branch.items():
                    if before.get(b) is not v:
                        self.carried.add(b)
            return tirx.IfThenElse(cond, then, other)
        if children(s):
            return rebuild(s, [self.stmt(k) for k in children(s)])
        return self.read(s)


def host_program(func: tirx.PrimFunc) -> tirx.PrimFunc:
    name = func_name(func)
    body = _HostScalars(name).stmt(func.body)
    return func.with_body(body if body is not None else seq([]))
