"""Pass `verify`: reject ill-formed kernels with clear errors, before any lowering.

Expects: a legalized PrimFunc (T.Parallel loops have ForKind.PARALLEL).
Guarantees (else raises KernelDefinitionError naming kernel, construct, what is wrong
and what is allowed):
  - the body is a host program: T.Kernel blocks, serial host loops and `if` on host
    values around them, host scalar bindings (`Bind`, from the host_program pass); no
    other statement outside a kernel, no nested kernels, no T.Parallel at the host level;
  - `tl.capacity_dims` (T.annotate_capacity_dims) names tensor parameters, one entry per
    dim, each a non-negative int or None; `tilelang_capacity_dims` names tensor
    parameters, with dims in range;
  - scalar parameters have a supported dtype, buffers a supported dtype and scope;
  - T.Parallel extents are constants, T.Parallel loops are not nested and contain no
    tile ops or T.Kernel;
  - a fragment is read or written whole by tile ops, element-wise outside T.Parallel
    (every thread runs such a statement and holds the whole fragment, TileLang's
    replicated value: layout_inference and lower_tile_ops; inside T.Parallel such a
    fragment may then be read at any index), or inside a T.Parallel whose
    extents equal its shape, indexed exactly by the loop variables (unit extents ignored
    on both sides: `acc[j]` in T.Parallel(1, D)); a fragment of another shape may also be
    read with a subset of the loop variables, in order, and 0 on its unit dims (`mx[i]` in
    T.Parallel(bM, N), `mx[0]` of a (1,) fragment; whether its layout allows that is
    checked by lower_tile_ops);
  - simdgroup matrices (scope "metal.simdgroup", T.alloc_local) are reached only by the
    matrix intrinsics (T.simdgroup_load/store, ...), which are not inside T.Parallel nor
    under an `if`, loop bound or while condition that splits a simdgroup (one whose lanes
    may disagree: core/ir/simd_uniformity.py);
  - every tile op's operands are compatible (ranks, extents, partial on-chip tiles);
    T.gemm's A and B are shared, fragment or device tiles of one float dtype, C a whole float32
    fragment, a float32 shared tile or a float32/float16/bfloat16 device tile, and the
    shapes agree;
  - the threadgroup buffers live at once (core/ir/liveness.py: from the first to the last
    top-level statement of the kernel naming each) fit in 32 KiB; buffers that are never
    live together may total more (merge_threadgroup gives them shared bytes).
"""

from __future__ import annotations

from math import prod

import tvm
from tvm import tirx
from tvm.tirx import is_buffer_var

from core.errors import KernelDefinitionError
from core.ir import matrix, ops
from core.ir.capacity import check_capacity_dims, input_capacity_dims
from core.ir.invariance import replicated_fragments
from core.ir.kernel import func_name, unwrap
from core.ir.layout import broadcast_dims
from core.ir.liveness import lives, nbytes, peak, threadgroup_allocs, top_level
from core.ir.simd_uniformity import simdgroup_split
from core.ir.ops import FRAGMENT
from core.ir.stmt import as_int, children, is_kernel_attr, loads, visit_nodes
from core.target import METAL, SCALAR_PARAM_DTYPES, SUPPORTED, bits


# the DSL's names of the matrix intrinsics (core/language/simdgroup.py)
_MATRIX_NAMES = {"tl.simdgroup_fill": "make_filled_simdgroup_matrix",
                 "tl.simdgroup_load": "simdgroup_load", "tl.simdgroup_store": "simdgroup_store",
                 "tl.simdgroup_mma": "simdgroup_multiply_accumulate"}


def _is_matrix_call(node) -> bool:
    return isinstance(node, tvm.ir.Call) and isinstance(node.op, tvm.ir.Op) and \
        node.op.name in _MATRIX_NAMES


class _Verifier:
    def __init__(self, name: str):
        self.name = name

    def fail(self, construct, reason):
        raise KernelDefinitionError(reason, kernel=self.name, construct=construct)

    # ---- function level -------------------------------------------------------------
    def params(self, func):
        for p in func.params:
            if is_buffer_var(p):
                if str(p.ty.dtype) not in SUPPORTED:
                    self.fail(f"parameter '{p.name}'",
                              f"dtype {p.ty.dtype} is not supported; allowed: {SUPPORTED}")
            elif str(p.ty) not in SCALAR_PARAM_DTYPES:
                self.fail(f"scalar parameter '{p.name}'",
                          f"dtype {p.ty} is not allowed; allowed: "
                          f"{', '.join(SCALAR_PARAM_DTYPES)}")

    def body(self, func):
        self.nkernels = 0
        self.host(func.body)
        if self.nkernels == 0:
            self.fail("T.Kernel", "the prim_func has no `with T.Kernel(...)` block; "
                                  "at least one is required")

    def host(self, s):
        """A host-level statement: kernels, host loops, host scalars."""
        if is_kernel_attr(s):
            self.nkernels += 1
            self.kernel(unwrap(s))
        elif isinstance(s, tirx.SeqStmt):
            for k in s.seq:
                self.host(k)
        elif isinstance(s, tirx.For) and s.kind == tirx.ForKind.SERIAL:
            self.host(s.body)
        elif isinstance(s, tirx.For):
            kind = "parallel" if s.kind == tirx.ForKind.PARALLEL else "non-serial"
            self.fail("host loop", f"a {kind} loop "
                      f"'for {s.loop_var.name} in ...' is outside every `with T.Kernel(...)` "
                      "block; at the host level only serial loops (range, T.serial) around "
                      "kernels are allowed (T.Parallel goes inside a kernel)")
        elif isinstance(s, tirx.IfThenElse):
            self.host(s.then_case)
            if s.else_case is not None:
                self.host(s.else_case)
        elif isinstance(s, (tirx.Bind, tirx.DeclBuffer)):
            pass
        elif not (isinstance(s, tirx.Evaluate) and as_int(s.value) is not None):
            self.fail("statement outside T.Kernel",
                      f"'{_short(s)}' is not inside a `with T.Kernel(...)` block; at the "
                      "host level only T.Kernel blocks, serial host loops and `if` around "
                      "them and scalar assignments are allowed")

    def capacity(self, func):
        check_capacity_dims(func, self.name)
        input_capacity_dims(func, self.name)   # TileLang's: tensor names, dims in range

    # ---- kernel level ---------------------------------------------------------------
    def kernel(self, nest):
        tags = [str(a.node.thread_tag) for a in nest.attrs]
        if len(set(tags)) != len(tags):
            self.fail("T.Kernel", "T.Kernel blocks cannot be nested; write them one after "
                                  "another to launch several kernels")
        self.shared_bytes = 0
        self.nest, self.guards, self.splits = nest, [], {}
        self.replicated, per_thread = replicated_fragments(nest)
        self.stmt(nest.body, parallel=None)
        for st in per_thread:
            self.fail(f"fragment '{st.buffer.name}'",
                      f"is written as {st.buffer.name}[{', '.join(map(str, st.indices))}] = "
                      f"{st.value} outside T.Parallel, where every thread holds the whole "
                      "fragment and computes the same value into its own copy; this element "
                      "or value (or the `if` around the store) depends on the thread, so the "
                      "copies would differ. Write it inside T.Parallel, or keep per-thread "
                      "values in T.alloc_local")
        if self.shared_bytes > METAL.threadgroup_memory_bytes:
            # buffers whose lives do not overlap share bytes (pass merge_threadgroup)
            stmts = top_level(nest.body)
            allocs = threadgroup_allocs(nest.body)
            size = {a.buffer.__chandle__(): nbytes(a.buffer) for a in allocs}
            most, at = peak(stmts, lives(stmts, size), size)
            if most > METAL.threadgroup_memory_bytes:
                live = ", ".join(f"'{a.buffer.name}' ({size[a.buffer.__chandle__()]} bytes)"
                                 for a in allocs if a.buffer.__chandle__() in at)
                self.fail("T.alloc_shared",
                          f"threadgroup memory live at once in one kernel ({live}) totals "
                          f"{most} bytes; Apple GPUs allow at most "
                          f"{METAL.threadgroup_memory_bytes}")

    def stmt(self, s, parallel):
        if is_kernel_attr(s):
            self.fail("T.Kernel", "T.Kernel blocks cannot be nested; write them one after "
                                  "another to launch several kernels")
        if isinstance(s, tirx.AllocBuffer):
            self.alloc(s.buffer)
        elif isinstance(s, tirx.For) and s.kind == tirx.ForKind.PARALLEL:
            self.parallel(s, parallel)
            return
        elif isinstance(s, tirx.For):
            self.exprs([s.min, s.extent], parallel, "loop bounds")
            self.guarded(s, parallel, [(f"the bounds of loop '{s.loop_var.name}'", e)
                                       for e in (s.min, s.extent)])
            return
        elif isinstance(s, tirx.While):
            self.guarded(s, parallel, [("the condition of a while loop", s.condition)])
            return
        elif isinstance(s, tirx.Evaluate) and ops.is_tile_call(s.value):
            if parallel is not None:
                self.fail(f"T.{s.value.op.name[3:]}",
                          "tile operations are not allowed inside T.Parallel; "
                          "call them at kernel level")
            self.tile_op(s.value)
            return
        elif isinstance(s, tirx.BufferStore):
            self.access(s.buffer, s.indices, parallel, write=True)
            self.exprs([s.value, *s.indices], parallel, "store")
        elif isinstance(s, tirx.IfThenElse):
            self.exprs([s.condition], parallel, "if condition")
            self.guarded(s, parallel, [(f"`if {_short(s.condition)}`", s.condition)])
            return
        elif isinstance(s, tirx.Evaluate) and _is_matrix_call(s.value):
            self.matrix_call(s.value, parallel)
        elif isinstance(s, tirx.Evaluate):
            self.exprs([s.value], parallel, "expression")
        for k in children(s):
            self.stmt(k, parallel)

    def guarded(self, s, parallel, guards):
        """The children of `s` under its condition or loop bounds (`guards`: (what, expr))."""
        self.guards.extend(guards)
        for k in children(s):
            self.stmt(k, parallel)
        del self.guards[len(self.guards) - len(guards):]

    def alloc(self, buf):
        scope = ops.buffer_scope(buf)
        if scope == "shared":
            shape = [as_int(d) for d in buf.ty.shape]
            self.shared_bytes += prod(shape) * bits(str(buf.ty.dtype)) // 8

    def parallel(self, loop, outer):
        if outer is not None:
            self.fail("T.Parallel", "T.Parallel loops cannot be nested; use one "
                                    "T.Parallel(m, n) with several extents")
        loops = []
        s = loop
        while isinstance(s, tirx.For) and s.kind == tirx.ForKind.PARALLEL:
            if as_int(s.extent) is None or as_int(s.min) != 0:
                self.fail("T.Parallel", f"extent {s.extent} is not a compile-time constant; "
                                        "T.Parallel needs constant extents (use a tile size)")
            loops.append(s)
            s = s.body
        self.stmt(s, parallel=tuple(loops))

    # ---- accesses ---------------------------------------------------------------------
    def exprs(self, exprs, parallel, what):
        for e in exprs:
            self.no_bool_arithmetic(e, what)
            for ld in loads(e):
                if is_buffer_var(ld.source):
                    self.access(ld.source, ld.indices, parallel, write=False)

    def no_bool_arithmetic(self, expr, what):
        bad = []   # collected, raised outside the walk (an exception inside it turns into
                   # a RuntimeError on the way through the FFI)

        def visit(node):
            if type(node).__name__ in _ARITHMETIC and str(node.ty.dtype).startswith("bool"):
                bad.append(node)
        visit_nodes(expr, (tvm.ir.Expr, visit))
        if bad:
            self.fail(what, f"arithmetic ({type(bad[0]).__name__}) on bool values in "
                            f"'{_short(bad[0])}'; cast to an integer type first "
                            "(T.cast(x, \"int32\")) or use logical and/or/not")

    def matrix_call(self, call, parallel):
        """T.simdgroup_load/store/... : the simdgroup's collective operation, so not one
        element of a T.Parallel; its matrix operands are the only way to a matrix."""
        construct = "T." + _MATRIX_NAMES[call.op.name]
        if parallel is not None:
            self.fail(construct, "is an operation of the whole simdgroup and cannot be one "
                                 "element of T.Parallel; call it at kernel level")
        for what, expr in self.guards:
            key = expr.__chandle__()   # one answer per guard, however many calls it holds
            if key not in self.splits:
                self.splits[key] = simdgroup_split(expr, self.nest)
            split = self.splits[key]
            if split is not None:
                self.fail(construct, f"is an operation of the whole simdgroup (its 32 lanes "
                          f"hold the 8x8 matrices together) under {what}, which splits a "
                          f"simdgroup: {split.describe()}. Every lane of a simdgroup must run "
                          "it: make the condition the same on a simdgroup's lanes (e.g. "
                          "depend on the simdgroup index, thread // 32) or move the "
                          "operation out of it")
        for a in call.args:
            is_matrix = isinstance(a, tvm.ir.TensorLoad) and \
                ops.buffer_scope(a.source) == matrix.MATRIX_SCOPE
            self.exprs(list(a.indices) if is_matrix else [a], parallel, construct)

    def access(self, buf, indices, parallel, write):
        if ops.buffer_scope(buf) == matrix.MATRIX_SCOPE:
            self.fail(f"simdgroup matrix '{buf.name}'",
                      f"is {'written' if write else 'read'} element-wise; an 8x8 simdgroup "
                      "matrix's elements are spread over its simdgroup's lanes in an "
                      "undocumented layout; use T.simdgroup_store to memory and read that")
        for idx in indices:
            if isinstance(idx, tvm.ir.Expr) and not str(idx.ty.dtype).startswith("int"):
                self.fail(f"buffer '{buf.name}'",
                          f"index {idx} has dtype {idx.ty.dtype}; indices must be integers")
        if ops.buffer_scope(buf) != FRAGMENT:
            return
        verb = "written" if write else "read"
        if parallel is None:
            return  # every thread holds it (layout_inference); lower_tile_ops checks values
        shape = tuple(as_int(d) for d in buf.ty.shape)
        extents = tuple(as_int(lp.extent) for lp in parallel)
        loop_vars = [lp.loop_var for lp in parallel]
        if _indexed_by_loop(indices, shape, loop_vars, extents):
            return
        if not write and buf.__chandle__() in self.replicated:
            return  # every thread holds it whole: any element is local
        if not write and shape != extents and \
                broadcast_dims(indices, loop_vars, shape) is not None:
            return  # a broadcast read (`mx[i]` in T.Parallel(bM, N), `mx[0]` of a (1,)
                    # fragment); layouts decide later
        self.fail(f"fragment '{buf.name}'",
                  f"is {verb} as {buf.name}[{', '.join(map(str, indices))}] in "
                  f"T.Parallel{extents}; a fragment of shape {shape} must be indexed by "
                  "the loop variables of a T.Parallel with the same extents, in order "
                  "(a fragment of lower rank may be read with a subset of them, in order)")

    # ---- tile ops ---------------------------------------------------------------------
    def tile_op(self, call):
        name = call.op.name
        if name == "tl.copy":
            src, dst = (ops.decode_region(a) for a in call.args)
            self.copy(src, dst)
        elif name == "tl.atomic_tile":  # T.atomic_*'s tile form: a copy that updates
            src, dst = (ops.decode_region(a) for a in call.args[:2])
            self.copy(src, dst, f"T.atomic_{call.args[2].value}")
        elif name == "tl.fill":
            region = ops.decode_region(call.args[0])
            self.region(region, "T.fill")
            self.whole_fragment(region, "T.fill")
        elif name == "tl.gemm":
            self.gemm(call)

    def gemm(self, call):
        regions = [ops.decode_region(a) for a in call.args[:3]]
        tiles = []
        for r, role in zip(regions, "ABC"):
            construct = f"T.gemm operand {role} '{r.name}'"
            allowed = ("shared", FRAGMENT, "global")
            if r.scope not in allowed:
                self.fail(construct, f"is in {r.scope} memory; allowed: " + (
                    "a T.alloc_fragment or T.alloc_shared accumulator, or a tile of a "
                    "device tensor" if role == "C" else
                    "T.alloc_shared, T.alloc_fragment or a tile of a device tensor"))
            self.region(r, "T.gemm")
            self.whole_fragment(r, "T.gemm")
            tile = matrix.operand_tile(r)
            if tile is None:
                self.fail(construct, "must be a 2-D tile with constant extents: the whole "
                                     "buffer or a slice whose extents other than the last "
                                     "two are 1")
            tiles.append(tile)
        a, b, c = (ops.buffer_dtype(r.buffer) for r in regions)
        if a != b or a not in matrix.INPUT_DTYPES:
            self.fail("T.gemm", f"operands A ({a}) and B ({b}) must have one dtype among "
                                f"{', '.join(matrix.INPUT_DTYPES)}")
        if regions[2].scope == "global":
            if c not in matrix.GLOBAL_C_DTYPES:
                self.fail(f"T.gemm operand C '{regions[2].name}'",
                          f"has dtype {c}; a C in device memory must be one of "
                          f"{', '.join(matrix.GLOBAL_C_DTYPES)} (accumulation is float32; "
                          "float16/bfloat16 are converted on the way in and out)")
        elif c != "float32":
            self.fail(f"T.gemm operand C '{regions[2].name}'",
                      f"has dtype {c}; the accumulator must be float32")
        (m, k), (kb, n), (mc, nc) = tiles
        if as_int(call.args[3]):
            m, k = k, m
        if as_int(call.args[4]):
            kb, n = n, kb
        if (m, n, k) != (mc, nc, kb):
            self.fail("T.gemm", f"shapes do not agree: op(A) is ({m}, {k}), op(B) is ({kb}, "
                                f"{n}), C is ({mc}, {nc}); need A [M, K] (or [K, M] with "
                                "transpose_A), B [K, N] (or [N, K] with transpose_B), C [M, N]")

    def region(self, r, construct):
        rank = len(r.buffer.ty.shape)
        if len(r.mins) != rank:
            self.fail(f"{construct} operand '{r.name}'",
                      f"has {len(r.mins)} indices but the buffer has rank {rank}")
        if r.extents is None or ops.buffer_scope(r.buffer) == "global":
            return
        for m, e, d in zip(r.mins, r.extents, r.buffer.ty.shape):
            m, e, d = as_int(m), as_int(e), as_int(d)
            if None not in (m, e, d) and (m < 0 or m + e > d):
                self.fail(f"{construct} operand '{r.name}'",
                          f"tile [{m}, {m + e}) exceeds the on-chip buffer's extent {d}")

    def whole_fragment(self, r, construct):
        if ops.buffer_scope(r.buffer) != FRAGMENT:
            return
        shape = tuple(as_int(d) for d in r.buffer.ty.shape)
        ext = shape if r.extents is None else tuple(as_int(e) for e in r.extents)
        if ext != shape or any(as_int(m) != 0 for m in r.mins):
            self.fail(f"{construct} operand '{r.name}'",
                      f"touches part of fragment '{r.name}' (shape {shape}); fragments are "
                      "copied and filled whole")

    def copy(self, src, dst, construct="T.copy"):
        self.region(src, construct)
        self.region(dst, construct)
        if src.extents is None and dst.extents is None:
            self.fail(construct, f"neither '{src.name}' nor '{dst.name}' gives the tile's "
                                "extents; pass one operand whole or as a slice")
        for r in (src, dst):
            self.whole_fragment(r, construct)
        se, de = _tile_extents(src), _tile_extents(dst)
        if se is not None and de is not None and not _same_extents(se, de):
            self.fail(construct, f"source '{src.name}' tile {_fmt(se)} and destination "
                                f"'{dst.name}' tile {_fmt(de)} differ; the extents must "
                                "match (unit dimensions are ignored)")
        for r, other in ((src, de), (dst, se)):
            if r.extents is None and other is not None and len(other) > len(r.mins):
                self.fail(construct, f"tile {_fmt(other)} has more dimensions than "
                                    f"'{r.name}' (rank {len(r.mins)})")


def _indexed_by_loop(indices, shape, loop_vars, extents) -> bool:
    """`F[indices]` names the loop's own element: the fragment's shape is the loop's
    extents and its indices the loop variables, in order, once unit extents are dropped on
    both sides (`acc[j]` in T.Parallel(1, D))."""
    def squeeze(idx, ext):
        return [(i, e) for i, e in zip(idx, ext) if e != 1]
    mine, loop = squeeze(indices, shape), squeeze(loop_vars, extents)
    return len(mine) == len(loop) and all(
        isinstance(i, tvm.ir.Var) and i.same_as(v) and e == f
        for (i, e), (v, f) in zip(mine, loop))


_ARITHMETIC = ("Add", "Sub", "Mul", "Div", "Mod", "FloorDiv", "FloorMod")


def _tile_extents(r):
    if r.extents is None:
        return None
    return tuple(e for e in r.extents if as_int(e) != 1) or (tirx.const(1, "int32"),)


def _same_extents(a, b):
    if len(a) != len(b):
        return False
    analyzer = tvm.sym.Analyzer()
    return all(analyzer.can_prove_equal(x, y) for x, y in zip(a, b))


def _fmt(ext):
    return "(" + ", ".join(str(e) for e in ext) + ")"


def _short(s):
    return str(s).strip().splitlines()[-1].strip()[:80]


def verify(func: tirx.PrimFunc) -> tirx.PrimFunc:
    name = func_name(func)
    v = _Verifier(name)
    v.params(func)
    v.capacity(func)
    v.body(func)
    return func
