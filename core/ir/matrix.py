"""Simdgroup matrices: the gemm accumulator layout and the 8x8 matrix intrinsics.

A gemm accumulator C[M, N] (a float32 `T.alloc_fragment`) is held as 8x8 simdgroup
matrices, not in the blocked-cyclic layout of core/ir/layout.py. `AccumulatorLayout`
splits its (M/8) x (N/8) tiles over the threadgroup's simdgroups (s = tid // 32):
simdgroups form a wm x wn grid, simdgroup s owning the rectangle of sm x sn tiles whose
first tile is (row (s // wn) * sm, column (s % wn) * sn); its matrix i * sn + j holds tile
(row (s // wn) * sm + i, column (s % wn) * sn + j).

Matrices live in buffers of scope MATRIX_SCOPE, one element per 8x8 matrix (printed as
`simdgroup_float8x8 c[n];`). The intrinsics, as `Evaluate(Call)` statements; `mat` is
`BufferLoad(matrices, [i])`, `ptr` is `address_of(BufferLoad(buf, origin))`:

    tl.simdgroup_fill(mat, value)                    mat := value everywhere
    tl.simdgroup_load(mat, ptr, stride, x, y, tr)    mat := 8x8 tile of ptr (MSL simdgroup_load)
    tl.simdgroup_store(mat, ptr, stride, x, y, tr)   8x8 tile of ptr := mat
    tl.simdgroup_mma(d, a, b, c)                     d := a @ b + c

Load and store address element (r, c) at ptr[(y + r) * stride + x + c], or at
ptr[(y + c) * stride + x + r] when transposed: either way the tile touches
{ptr + (y + r) * stride + x + c : r, c < 8}, which `TileAccess` describes for the barrier
planner (store = write, load = read).
"""

from __future__ import annotations

from dataclasses import dataclass

from tvm import tirx

from core.errors import LoweringError
from core.ir import annotations as keys
from core.ir import ops
from core.ir.stmt import as_int, i32, walk
from core.target import METAL

MATRIX_SCOPE = "metal.simdgroup"
ACCUMULATOR = keys.SIMDGROUP_ACCUMULATOR   # set by layout_inference (core/ir/annotations.py)
TILE = METAL.matrix_tile
INPUT_DTYPES = METAL.matrix_dtypes
# dtypes of a T.gemm C in device memory: float32 matrices are stored there directly; the
# others through a float32 threadgroup stage that converts
GLOBAL_C_DTYPES = ("float32", "float16", "bfloat16")


@dataclass(frozen=True)
class AccumulatorLayout:
    shape: tuple            # (M, N)
    wm: int                 # simdgroup grid rows
    wn: int                 # simdgroup grid columns

    @classmethod
    def for_tile(cls, shape, threads: int, *, kernel=None, name="C") -> "AccumulatorLayout":
        """The partition with the fewest matrix loads per k step (sm + sn), or a clear
        error when the tile's 8x8 tiles cannot be split evenly over the simdgroups."""
        M, N = (int(d) for d in shape)
        construct = f"gemm accumulator '{name}'"
        if M % TILE or N % TILE:
            raise LoweringError(
                f"shape ({M}, {N}) is not a multiple of 8 in both dimensions; simdgroup "
                "matrices are 8x8", kernel=kernel, construct=construct)
        if threads % METAL.simd_width:
            raise LoweringError(
                f"the kernel has {threads} threads; T.gemm needs a multiple of "
                f"{METAL.simd_width} (whole simdgroups)", kernel=kernel, construct=construct)
        groups, tm, tn = threads // METAL.simd_width, M // TILE, N // TILE
        options = [(tm // wm + tn // (groups // wm), wm) for wm in range(1, groups + 1)
                   if groups % wm == 0 and tm % wm == 0 and tn % (groups // wm) == 0]
        if not options:
            raise LoweringError(
                f"the ({M}, {N}) tile has {tm} x {tn} 8x8 tiles, which cannot be split "
                f"evenly over {groups} simdgroups ({threads} threads); use a tile whose "
                "8x8 tile grid divides into the simdgroup count, or fewer threads",
                kernel=kernel, construct=construct)
        _, wm = min(options)
        return cls((M, N), wm, groups // wm)

    @property
    def sm(self) -> int:
        return self.shape[0] // TILE // self.wm

    @property
    def sn(self) -> int:
        return self.shape[1] // TILE // self.wn

    @property
    def count(self) -> int:
        """Matrices per simdgroup."""
        return self.sm * self.sn

    def origin(self, tid, i, j):
        """(row, column) of the first element of matrix (i, j) of the simdgroup of `tid`."""
        group = tirx.floordiv(tid, METAL.simd_width)
        row = (tirx.floordiv(group, self.wn) * self.sm + i) * TILE
        col = (tirx.floormod(group, self.wn) * self.sn + j) * TILE
        return row, col


def matrices(count: int, dtype: str, name: str):
    return tirx.decl_buffer((count,), dtype, name, scope=MATRIX_SCOPE)


def fill(mat, value):
    return tirx.Evaluate(ops.call("tl.simdgroup_fill", mat, value, dtype="int32"))


def load(mat, pointer, stride, x, y, transpose=False):
    return _tile_call("tl.simdgroup_load", mat, pointer, stride, x, y, transpose)


def store(mat, pointer, stride, x, y, transpose=False):
    return _tile_call("tl.simdgroup_store", mat, pointer, stride, x, y, transpose)


def mma(d, a, b, c):
    return tirx.Evaluate(ops.call("tl.simdgroup_mma", d, a, b, c, dtype="int32"))


def _tile_call(name, mat, pointer, stride, x, y, transpose):
    return tirx.Evaluate(ops.call(name, mat, tirx.address_of(pointer), i32(stride), i32(x),
                                  i32(y), tirx.const(bool(transpose), "bool"),
                                  dtype="int32"))


@dataclass(frozen=True)
class TileAccess:
    """The threadgroup or device memory one simdgroup_load/store touches."""
    buffer: object          # the buffer the pointer points into
    index: object           # flat element index of the pointer (None before flattening)
    stride: object
    x: object
    y: object
    write: bool
    rows: int = TILE
    cols: int = TILE

    @property
    def base(self):
        """Flat index of the tile's first element (None before flattening)."""
        return None if self.index is None else self.index + self.y * self.stride + self.x

    @property
    def reads(self) -> tuple:
        """Expressions evaluated to form the access (their own loads are plain reads)."""
        return tuple(e for e in (self.index, self.stride, self.x, self.y) if e is not None)


def tile_access(call) -> TileAccess | None:
    """The tile a `tl.simdgroup_load/store` call touches; None for any other expression."""
    for name, write in (("tl.simdgroup_load", False), ("tl.simdgroup_store", True)):
        if ops.is_tile_call_any(call, name):
            _, pointer, stride, x, y, _ = call.args
            target = pointer.args[0]
            index = target.indices[0] if len(target.indices) == 1 else None
            return TileAccess(target.source, index, stride, x, y, write)
    return None


def operand_tile(region) -> tuple | None:
    """(rows, cols) of a gemm operand region: a 2-D tile in the last two dimensions of its
    buffer (every other extent 1), with constant extents; None otherwise."""
    if region.extents is None or len(region.extents) < 2:
        return None
    ext = [as_int(e) for e in region.extents]
    if None in ext or any(e != 1 for e in ext[:-2]):
        return None
    return ext[-2], ext[-1]


def gemm_accumulators(stmt) -> list:
    """The C buffers of every `tl.gemm` in `stmt`, in order of first use."""
    found = []

    def visit(s):
        if isinstance(s, tirx.Evaluate) and ops.is_tile_call(s.value, "tl.gemm"):
            c = ops.decode_region(s.value.args[2]).buffer
            if not any(c.same_as(f) for f in found):
                found.append(c)

    walk(stmt, visit)
    return found
