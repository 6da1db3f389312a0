"""TileLang's low-level simdgroup matrix intrinsics and element pointers.

    M = T.alloc_local((64 * n,), dtype, scope="metal.simdgroup")   n 8x8 matrices
    T.make_filled_simdgroup_matrix(M.data, i, value)               M[i] := value everywhere
    T.simdgroup_load(M.data, i, ptr, stride, 8, 8, transpose)      M[i] := the 8x8 tile at ptr
    T.simdgroup_store(M.data, i, ptr, stride, 8, 8, transpose)     the 8x8 tile at ptr := M[i]
    T.simdgroup_multiply_accumulate(D.data, i, A.data, j, B.data, k, C.data, l)
                                                                   D[i] := A[j] @ B[k] + C[l]
    T.access_ptr(A[r, c], "r" | "w" | "rw")   the address of element A[r, c]
    T.address_of(A[r, c])                     the same

These are TVM's Metal builtins as TileLang's Metal dialect exports them (a matrix buffer
holds 64 elements per matrix; `i` is the matrix's number; only 8x8 tiles). They become the
matrix intrinsics of core/ir/matrix.py, which T.gemm's lowering uses too, so the barrier
planner sees each load and store as the whole 8x8 tile it touches (rows `stride` elements
apart from the pointer), whatever pointer form the kernel used; what a tile op does (read
or write) comes from the op, and a T.access_ptr mask that contradicts it (a load through
a "w" pointer) is an error. A T.access_ptr passed elsewhere (T.call_extern) keeps its mask
and extent for the barrier planner (core/ir/ops.py: AccessPointer).
Matrix buffers are scope MATRIX_SCOPE with one element per matrix; the kernel reaches them
only through these intrinsics (element access is an error: an 8x8 matrix's per-lane
layout is not documented).
"""

from __future__ import annotations

from numbers import Integral

import tvm
from tvm import tirx
from tvm.tirx.script.builder import ir as _ir

from core.errors import KernelDefinitionError
from core.ir import matrix, ops
from core.language.dtypes import dtype_name
from core.language.kernel import _current

ELEMENTS = matrix.TILE * matrix.TILE   # elements TileLang declares per matrix


def alloc_matrices(shape, dtype, construct="T.alloc_local"):
    """A buffer of 8x8 simdgroup matrices for a declaration of `shape` elements (64 each)."""
    dims = (shape,) if isinstance(shape, Integral) or tvm.ir.is_prim_expr(shape) else shape
    size = 1
    for d in dims:
        if isinstance(d, tirx.IntImm):
            d = int(d.value)
        if not isinstance(d, Integral) or d <= 0:
            raise KernelDefinitionError(
                f"shape {tuple(dims)} must be positive compile-time constants for simdgroup "
                "matrices", construct=construct)
        size *= d
    dt = dtype_name(dtype, construct=construct)
    if dt not in matrix.INPUT_DTYPES:
        raise KernelDefinitionError(
            f"scope 'metal.simdgroup' with dtype {dt}: Metal's simdgroup matrices are "
            f"{', '.join(matrix.INPUT_DTYPES)}", construct=construct)
    if size % ELEMENTS:
        raise KernelDefinitionError(
            f"scope 'metal.simdgroup' with {size} elements: each 8x8 simdgroup matrix holds "
            f"{ELEMENTS}; declare a multiple of {ELEMENTS}", construct=construct)
    return _ir.alloc_buffer((size // ELEMENTS,), dt, scope=matrix.MATRIX_SCOPE)


def _matrix(d, index, construct, what="d"):
    """BufferLoad(matrices, [index]) of the matrix buffer `d` (`M.data` or `M`)."""
    buf = d
    if isinstance(d, tvm.ir.Call) and d.op.name == "tirx.buffer_data":
        buf = d.args[0]
    scope = getattr(getattr(buf, "ty", None), "storage_scope", None)
    if scope is None or str(scope) != matrix.MATRIX_SCOPE:
        raise KernelDefinitionError(
            f"{what}={d!r} is not a simdgroup matrix buffer; declare it with "
            "T.alloc_local((64 * n,), dtype, scope=\"metal.simdgroup\") and pass M.data",
            construct=construct)
    if isinstance(index, bool) or not (isinstance(index, Integral) or tvm.ir.is_prim_expr(index)):
        raise KernelDefinitionError(f"matrix index {index!r} must be an integer expression",
                                    construct=construct)
    count = int(buf.ty.shape[0])
    if isinstance(index, Integral) and not 0 <= index < count:
        raise KernelDefinitionError(
            f"matrix index {index} is outside buffer '{buf.name}' of {count} matrices",
            construct=construct)
    return tirx.BufferLoad(buf, [tirx.const(int(index), "int32") if isinstance(index, Integral)
                                 else index])


def _shape_is_8x8(col, row, construct):
    for v in (col, row):
        v = int(v.value) if isinstance(v, tirx.IntImm) else v
        if v != matrix.TILE:
            raise KernelDefinitionError(
                f"a {col}x{row} tile: Metal's simdgroup matrices are 8x8 only",
                construct=construct)


def _pointer(ptr, construct, use):
    """The BufferLoad an element pointer (T.access_ptr / T.address_of) points at; a
    T.access_ptr's mask must allow `use` ("read" or "write")."""
    if isinstance(ptr, tvm.ir.TensorLoad):
        return ptr
    pointer = ops.access_pointer(ptr)
    if pointer is not None:
        if not (pointer.reads if use == "read" else pointer.writes):
            mode = "r" if pointer.reads else "w"
            raise KernelDefinitionError(
                f"the pointer is T.access_ptr({pointer.element.source.name}[...], "
                f"\"{mode}\"), {'write' if mode == 'w' else 'read'}-only, but "
                f"{construct[2:]} {use}s the tile through it; pass \"{use[0]}\" or \"rw\"",
                construct=construct)
        return pointer.element
    if isinstance(ptr, tvm.ir.Call) and ptr.op.name == "tirx.address_of" and \
            isinstance(ptr.args[0], tvm.ir.TensorLoad):
        return ptr.args[0]
    raise KernelDefinitionError(
        f"pointer {ptr!r} must be T.access_ptr(buf[...], mode) or T.address_of(buf[...]) "
        "of a device or threadgroup buffer", construct=construct)


def _flag(x, construct):
    if isinstance(x, bool):
        return x
    if isinstance(x, tirx.IntImm):
        return bool(x.value)
    raise KernelDefinitionError(f"transpose_matrix={x!r} must be a compile-time bool",
                                construct=construct)


def make_filled_simdgroup_matrix(d, index, value, col=8, row=8):
    """Matrix `index` of `d` := `value` in every element."""
    construct = "T.make_filled_simdgroup_matrix"
    _current(construct)
    _shape_is_8x8(col, row, construct)
    mat = _matrix(d, index, construct)
    value = tirx.const(value, str(mat.source.ty.dtype)) if isinstance(value, (int, float)) \
        else tirx.Cast(str(mat.source.ty.dtype), value)
    _ir.evaluate(matrix.fill(mat, value).value)


def _tile(construct, build, d, index, ptr, stride, col, row, transpose_matrix):
    _current(construct)
    _shape_is_8x8(col, row, construct)
    mat = _matrix(d, index, construct)
    target = _pointer(ptr, construct, "read" if build is matrix.load else "write")
    if str(target.source.ty.storage_scope) not in ("global", "", "shared"):
        raise KernelDefinitionError(
            f"pointer into '{target.source.name}' ({target.source.ty.storage_scope}): "
            "simdgroup matrices load from and store to device or threadgroup memory",
            construct=construct)
    if str(target.source.ty.dtype) != str(mat.source.ty.dtype):
        raise KernelDefinitionError(
            f"matrix '{mat.source.name}' is {mat.source.ty.dtype} but "
            f"'{target.source.name}' is {target.source.ty.dtype}; MSL's simdgroup_load/"
            "store do not convert", construct=construct)
    _ir.evaluate(build(mat, target, stride, 0, 0, _flag(transpose_matrix, construct)).value)


def simdgroup_load(d, index, ptr, stride, col=8, row=8, transpose_matrix=False):
    """Matrix `index` of `d` := the 8x8 tile at `ptr`, rows `stride` elements apart."""
    _tile("T.simdgroup_load", matrix.load, d, index, ptr, stride, col, row, transpose_matrix)


def simdgroup_store(d, index, ptr, stride, col=8, row=8, transpose_matrix=False):
    """The 8x8 tile at `ptr`, rows `stride` elements apart := matrix `index` of `d`."""
    _tile("T.simdgroup_store", matrix.store, d, index, ptr, stride, col, row, transpose_matrix)


def simdgroup_multiply_accumulate(d, index_d, a, index_a, b, index_b, c, index_c):
    """d[index_d] := a[index_a] @ b[index_b] + c[index_c] (8x8 simdgroup matrices)."""
    construct = "T.simdgroup_multiply_accumulate"
    _current(construct)
    mats = [_matrix(m, i, construct, what) for m, i, what in
            ((d, index_d, "d"), (a, index_a, "a"), (b, index_b, "b"), (c, index_c, "c"))]
    _ir.evaluate(matrix.mma(*mats).value)


_MASKS = {"r": 1, "w": 2, "rw": 3}


def access_ptr(base, access_type="r", *extents, offset=0, extent=None, ignore_last_ndim=0):
    """The address of element `base` (`A[r, c]`, or a buffer: its first element), moved on
    by `offset` elements, as `tl.access_ptr` (core/ir/ops.py: AccessPointer) carrying the
    access mask ("r", "w", "rw" or 1-3) and the elements touched from there (`extent`, or
    the product of `extents`; unknown when neither is a constant). A simdgroup load or
    store takes its pointer's footprint from its own tile and refuses a mask that
    contradicts it; any other use (T.call_extern) is, for the barrier planner, a read
    and/or a write, as the mask says, of those elements (of any element when unknown)."""
    construct = "T.access_ptr"
    mask = _MASKS.get(access_type, access_type)
    if isinstance(mask, bool) or mask not in (1, 2, 3):
        raise KernelDefinitionError(f"access_type={access_type!r}; allowed: 'r', 'w', 'rw' "
                                    "(or 1, 2, 3)", construct=construct)
    touched = _touched(extent, extents)
    if ignore_last_ndim:
        raise KernelDefinitionError(f"ignore_last_ndim={ignore_last_ndim}: only the "
                                    "element's own address (0) is supported", construct=construct)
    if isinstance(base, tvm.ir.TensorLoad):
        load = base
    elif getattr(getattr(base, "ty", None), "storage_scope", None) is not None and \
            not tvm.ir.is_prim_expr(base):
        load = tirx.BufferLoad(base, [tirx.const(0, "int32")] * len(base.ty.shape))
    else:
        raise KernelDefinitionError(f"base {base!r} must be a buffer element (A[i, j]) or a "
                                    "buffer", construct=construct)
    if not (isinstance(offset, Integral) and offset == 0):
        *lead, last = load.indices
        load = tirx.BufferLoad(load.source, [*lead, last + offset])
    return ops.call("tl.access_ptr", tirx.address_of(load), tirx.const(mask, "int32"),
                    tirx.const(touched, "int32"))


def _touched(extent, extents) -> int:
    """The constant element count `extent` (or the product of `extents`) gives, else 0."""
    dims = [extent] if extent is not None else list(extents)
    total = 1 if dims else 0
    for d in dims:
        d = int(d.value) if isinstance(d, tirx.IntImm) else d
        if not isinstance(d, Integral) or isinstance(d, bool) or d <= 0:
            return 0
        total *= int(d)
    return total


def address_of(obj):
    """The address of buffer element `obj` (`A[i, j]`)."""
    if not isinstance(obj, tvm.ir.TensorLoad):
        raise KernelDefinitionError(f"{obj!r} must be a buffer element (A[i, j])",
                                    construct="T.address_of")
    return tirx.address_of(obj)
