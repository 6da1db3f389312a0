"""`@core.jit(...)`'s options and the APIs outside kernels, as TileLang code uses them:
every option is honoured or refused at decoration (never dropped), TileLang's
`execution_backend` names that mean "run it", `f.compile(*args)` / `f.get_tir(*args)` on
eager functions, and `get_tir` / `compile` / `par_compile` on a factory that returns a
prim_func."""

from __future__ import annotations

import pytest

import core
import core.language as T
from core.errors import KernelDefinitionError, LaunchError, MetaltileError
from harness.check.compare import assert_close
from harness.gen.inputs import random_tensor

NO_VECTORIZE = {core.PassConfigKey.TIR_DISABLE_VECTORIZE: True}


def _scale(**jit_options):
    """An eager element-wise kernel whose loads and stores vectorize (float4) by default."""
    @core.jit(**jit_options)
    def scale(A, factor: float = 2.0, block: int = 64):
        N = T.const("N")
        A: T.Tensor((N,), T.float32)
        B = T.empty((N,), T.float32)
        with T.Kernel(T.ceildiv(N, block * 4), threads=block) as bx:
            for i in T.Parallel(block * 4):
                B[bx * block * 4 + i] = A[bx * block * 4 + i] * factor
        return B
    return scale


def _factory(**jit_options):
    @core.jit(out_idx=[1], **jit_options)
    def scale(N: int, block: int = 64):
        @T.prim_func
        def main(A: T.Tensor((N,), "float32"), B: T.Tensor((N,), "float32")):
            with T.Kernel(T.ceildiv(N, block * 4), threads=block) as bx:
                for i in T.Parallel(block * 4):
                    B[bx * block * 4 + i] = A[bx * block * 4 + i] * 2.0
        return main
    return scale


# ---- pass_configs, verbose, debug_root_path, target: honoured ---------------------------

def test_eager_pass_configs_disable_vectorize(run):
    a = random_tensor((512,), "float32", 1)
    assert "float4" in _scale().compile(N=512).msl
    f = _scale(pass_configs=NO_VECTORIZE)
    assert "float4" not in f.compile(N=512).msl
    assert_close(run(f, a), a * 2.0, "float32")


def test_factory_and_prim_func_pass_configs(run):
    a = random_tensor((512,), "float32", 2)
    kernel = _factory(pass_configs=NO_VECTORIZE)(512)
    assert "float4" not in kernel.msl and "float4" in _factory()(512).msl
    assert_close(run(kernel, a), a * 2.0, "float32")
    compiled = core.jit(_factory().get_tir(512), out_idx=[1], pass_configs=NO_VECTORIZE)
    assert "float4" not in compiled.msl


def test_eager_pass_configs_in_par_compile():
    """par_compile's workers compile with the function's pass_configs, and its disk-cache
    key is the one core.compile uses for them (a vectorized kernel is never stored under
    the key of an unvectorized one, or back)."""
    f, g = _scale(pass_configs=NO_VECTORIZE), _scale()
    configs = [dict(N=256), dict(N=1024)]
    assert all("float4" not in k.msl for k in core.par_compile(f, configs))
    assert all("float4" in k.msl for k in core.par_compile(g, configs))


def test_eager_pass_config_checks_act():
    f = _scale(pass_configs={"tl.disable_data_race_check": True})
    assert f.compile(N=256).checks == ("uninit", "bounds")


def test_verbose_prints_each_compile(capsys):
    f = _scale(verbose=True)
    f.compile(N=768)
    f.compile(N=768)   # the specialization is cached: nothing more is compiled
    out = capsys.readouterr().out
    assert out.count("[core.jit] compiling scale") == 1
    assert out.count("[core.compile] scale: 1 device kernel(s)") == 1
    _factory(verbose=True, pass_configs=NO_VECTORIZE)(768)
    assert "passes disabled: vectorize" in capsys.readouterr().out


def test_debug_root_path_writes_kernel_and_program(tmp_path, run):
    f = _scale(debug_root_path=str(tmp_path / "dbg"))
    a = random_tensor((256,), "float32", 3)
    assert_close(run(f, a), a * 2.0, "float32")
    msl = (tmp_path / "dbg" / "tilelang_jit_kernel_scale.metal").read_text()
    assert msl == f.specialize(a).msl
    assert "T.prim_func" in (tmp_path / "dbg" / "tilelang_jit_program_scale.py").read_text()
    _factory(debug_root_path=str(tmp_path / "lazy"))(256)
    assert (tmp_path / "lazy" / "tilelang_jit_kernel_scale.metal").read_text().strip()


# ---- execution_backend: TileLang's names for "run it" -----------------------------------

@pytest.mark.parametrize("name,resolved", [("tvm_ffi", "tvm_ffi"), ("torch", "torch"),
                                           ("auto", "torch"), (None, "torch"),
                                           ("TVM_FFI", "tvm_ffi")])
def test_execution_backend_names_run(run, name, resolved):
    a = random_tensor((256,), "float32", 4)
    kernel = core.compile(_factory().get_tir(256), out_idx=[1], execution_backend=name)
    assert kernel.execution_backend == resolved
    assert_close(run(kernel, a), a * 2.0, "float32")
    f = _scale(execution_backend=name)
    assert f.compile(N=256).execution_backend == resolved
    assert_close(run(f, a), a * 2.0, "float32")
    assert _factory(execution_backend=name)(256).execution_backend == resolved


# ---- refused: a clear error at decoration ------------------------------------------------

@pytest.mark.parametrize("options,construct,parts", [
    (dict(pass_configs={"tl.disable_vectorise": True}), "@core.jit(pass_configs=...)",
     ["unknown pass-config key 'tl.disable_vectorise'", "accepted on Metal:",
      "tirx.disable_vectorize"]),
    (dict(pass_configs={core.PassConfigKey.TL_LAYOUT_VISUALIZATION_ENABLE: True}),
     "@core.jit(pass_configs=...)", ["is not supported on Metal"]),
    (dict(pass_configs={"tl.enable_fast_math": False}), "@core.jit(pass_configs=...)",
     ["= False cannot be honoured on Metal"]),
    (dict(execution_backend="cython"), "@core.jit",
     ["execution_backend='cython' is not supported on Metal", "accepted: None, 'auto', "
      "'torch', 'tvm_ffi'", "emulator"]),
    (dict(execution_backend="nvrtc"), "@core.jit", ["'nvrtc' is not supported"]),
    (dict(target_host="llvm"), "@core.jit", ["target_host='llvm' is not supported"]),
    (dict(compile_flags=["-O3"]), "@core.jit", ["compile_flags=['-O3'] is not supported"]),
    (dict(target="cuda"), "@core.jit(target=...)", ["target 'cuda' is not supported"]),
    (dict(outidx=[1]), "@core.jit", ["unknown keyword 'outidx'", "allowed: target, out_idx",
                                     "debug_root_path"]),
])
@pytest.mark.parametrize("make", [_scale, _factory], ids=["eager", "factory"])
def test_bad_jit_options_are_errors_at_decoration(make, options, construct, parts):
    with pytest.raises(MetaltileError) as info:
        make(**options)
    msg = str(info.value)
    assert msg.startswith(f"kernel 'scale', {construct}: "), msg
    for part in parts:
        assert part in msg, f"{part!r} not in {msg!r}"


def test_core_compile_execution_backend_error_lists_accepted():
    with pytest.raises(MetaltileError, match="core.compile: execution_backend='cutedsl' is "
                       "not supported on Metal .*accepted: None, 'auto', 'torch', 'tvm_ffi'"):
        core.compile(_factory().get_tir(256), out_idx=[1], execution_backend="cutedsl")


def test_out_idx_on_eager_function_is_an_error():
    with pytest.raises(MetaltileError) as info:
        _scale(out_idx=[-1])
    msg = str(info.value)
    assert "kernel 'scale', @core.jit(out_idx=...)" in msg
    assert "outputs are the T.empty tensors the function returns" in msg


# ---- f.compile(*args), f.get_tir(*args) -------------------------------------------------

@core.jit
def add(A, B, n: T.int32, block: int = 32):
    M, N = T.const("M, N")
    A: T.Tensor((M, N), T.float32)
    B: T.Tensor((M, N), T.float32)
    C = T.empty((M, N), T.float32)
    with T.Kernel(M, threads=block) as m:
        for i in T.Parallel(N):
            C[m, i] = A[m, i] + B[m, i] * n
    return C


def test_eager_compile_positional_like_a_call(run):
    a, b = random_tensor((4, 64), "float32", 5), random_tensor((4, 64), "float32", 6)
    kernel = add.compile(a, b, 3, 32)           # positional, as TileLang allows
    assert kernel is add.compile(M=4, N=64, block=32) is add.specialize(a, b, 3, 32)
    assert kernel is add.compile(a, N=64)       # B not given: its T.const as a keyword
    assert_close(run(kernel, a, b, 3), a + b * 3, "float32")
    func = add.get_tir(a, b, 3, block=32)
    assert [p.name for p in func.params] == ["A", "B", "n", "C"]
    assert [int(d) for d in func.params[3].ty.shape] == [4, 64]


@pytest.mark.parametrize("call,cls,parts", [
    (lambda: add.compile(random_tensor((4, 64), "float32", 7),
                         random_tensor((4, 32), "float32", 8)),
     LaunchError, ["kernel 'add'", "parameter 'B'", "dim 1 is 32", "T.const 'N' is 64"]),
    (lambda: add.compile(random_tensor((4,), "float32", 9)), LaunchError,
     ["parameter 'A'", "rank 1"]),
    (lambda: add.compile(M=4), KernelDefinitionError,
     ["kernel 'add'", "T.const 'N'", "has no value", "N=...", "parameter 'A'"]),
    (lambda: add.get_tir(random_tensor((4, 64), "float32", 10), block=2.5),
     KernelDefinitionError, ["parameter 'block'", "expected an int"]),
])
def test_eager_compile_positional_errors(call, cls, parts):
    with pytest.raises(cls) as info:
        call()
    for part in parts:
        assert part in str(info.value), f"{part!r} not in {str(info.value)!r}"


# ---- a factory returning a prim_func: get_tir, compile, par_compile ----------------------

def test_factory_get_tir_compile_par_compile(run):
    from tvm.tirx import PrimFunc

    f = _factory()
    func = f.get_tir(256, block=32)
    assert isinstance(func, PrimFunc) and [p.name for p in func.params] == ["A", "B"]
    kernel = f.compile(256, block=32)
    assert kernel is f(256, block=32)
    assert f.get_kernel_source(256, block=32) == kernel.msl
    k1, k2 = core.par_compile(f, [(256,), dict(N=512, block=32)])
    assert k1 is f(256) and k2 is f(N=512, block=32)
    a = random_tensor((512,), "float32", 11)
    assert_close(run(k2, a), a * 2.0, "float32")


def test_factory_not_returning_a_prim_func_is_an_error():
    @core.jit
    def nothing(N: int):
        return N

    with pytest.raises(MetaltileError, match="kernel 'nothing', @core.jit: returned int, not "
                       "a prim_func"):
        nothing.get_tir(4)
