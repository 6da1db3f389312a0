"""Module API TileLang code calls outside kernels: core.cdiv, core.next_power_of_2,
kernel.get_kernel_source() / kernel.kernel_source, PassConfigKey and compile options."""

from __future__ import annotations

import pytest

import core
import core.language as T
from core.errors import MetaltileError
from core.options import METAL_MEANING, PassConfigKey
from harness.check.compare import assert_close
from harness.gen.inputs import random_tensor


def test_cdiv_and_next_power_of_2():
    assert [core.cdiv(a, 4) for a in (0, 1, 4, 5, 8, 9)] == [0, 1, 1, 2, 2, 3]
    assert [core.next_power_of_2(x) for x in (0, 1, 2, 3, 4, 5, 33, 1024, 1025)] == \
        [1, 1, 2, 4, 4, 8, 64, 1024, 2048]


def _staged(M=64):
    """A tile staged in threadgroup memory and read back by other threads: needs a
    barrier between the two copies."""
    @T.prim_func
    def staged(A: T.Tensor((M,), "float32"), B: T.Tensor((M,), "float32")):
        with T.Kernel(1, threads=M):
            S = T.alloc_shared((M,), "float32")
            T.copy(A, S)
            for i in T.Parallel(M):
                B[i] = S[M - 1 - i]
    return staged


def test_kernel_source(run):
    kernel = core.compile(_staged(), out_idx=[1], pass_configs={
        PassConfigKey.TL_DISABLE_TMA_LOWER: True, "tl.disable_warp_specialized": True})
    assert kernel.kernel_source == kernel.get_kernel_source() == kernel.msl
    assert "kernel" in kernel.kernel_source and "threadgroup_barrier" in kernel.kernel_source
    a = random_tensor((64,), "float32", 1)
    assert_close(run(kernel, a), a.flip(0), "float32")


def test_disable_thread_storage_sync_acts():
    kernel = core.compile(_staged(), out_idx=[1], pass_configs={
        PassConfigKey.TL_DISABLE_THREAD_STORAGE_SYNC: True})
    assert "threadgroup_barrier" not in kernel.msl
    kernel(random_tensor((64,), "float32", 2), backend="emu")
    assert "race" in {f.kind for f in kernel.last_run.findings}


def test_disable_race_and_init_checks_act():
    kernel = core.compile(_staged(), out_idx=[1], pass_configs={
        "tl.disable_thread_storage_sync": True, "tl.disable_data_race_check": True,
        "tl.disable_buffer_init_check": True})
    assert kernel.checks == ("bounds",)
    kernel(random_tensor((64,), "float32", 3), backend="emu")
    assert kernel.last_run.findings == []


@pytest.mark.parametrize("options,message", [
    (dict(pass_config={}), "unknown keyword 'pass_config'; allowed: target, out_idx"),
    (dict(pass_configs={"tl.disable_tmalower": True}),
     "unknown pass-config key 'tl.disable_tmalower'; accepted on Metal: "),
    (dict(pass_configs={PassConfigKey.TL_LAYOUT_VISUALIZATION_ENABLE: True}),
     "'tl.layout_visualization_enable' .* is not supported on Metal"),
    (dict(pass_configs={"tl.enable_fast_math": False}),
     "'tl.enable_fast_math' = False cannot be honoured on Metal"),
    (dict(execution_backend="cython"), "execution_backend='cython' is not supported"),
    (dict(compile_flags=["-O3"]), "compile_flags=\\['-O3'\\] is not supported"),
])
def test_bad_options_are_errors(options, message):
    with pytest.raises(MetaltileError, match=message):
        core.compile(_staged(), out_idx=[1], **options)


def test_every_key_has_tilelang_name_and_value():
    assert PassConfigKey("tl.disable_tma_lower") is PassConfigKey.TL_DISABLE_TMA_LOWER
    assert PassConfigKey.TL_DISABLE_TMA_LOWER == "tl.disable_tma_lower"
    assert set(METAL_MEANING) <= set(PassConfigKey)
    assert {kind for kind, _ in METAL_MEANING.values()} == {"acts", "nothing"}


def test_jit_decorator_checks_options_too():
    with pytest.raises(MetaltileError, match="unknown keyword 'outidx'"):
        core.jit(_staged(), outidx=[1])
