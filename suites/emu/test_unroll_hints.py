"""Loop-unroll hints are hints to Apple's compiler: the emulator runs and counts a hinted
loop as the rolled one (core/runtime/emu/translate.py, rewrite 2). clang's CPU build would
follow the hint and keep other loads than for the rolled loop -- here, a threadgroup
load that does not change inside the inner loop is hoisted out of the rolled loop, once per
outer step, but loaded on every unrolled copy -- and the bench's counters would then move
with the hint, not with the kernel's work."""

import numpy as np
import pytest

from core.runtime.emu.translate import translate
from emucase import HEADER, clean

SCALED_ROWS = r"""
kernel void scaled(device const float* x [[buffer(0)]], device const float* s [[buffer(1)]],
                   device float* y [[buffer(2)]],
                   uint tid [[thread_index_in_threadgroup]]) {
  threadgroup float ss[16];
  if (tid < 16) ss[tid] = s[tid];
  threadgroup_barrier(mem_flags::mem_threadgroup);
  float acc[64];
  for (int i = 0; i < 64; ++i) acc[i] = x[tid * 64 + i];
  for (int r = 0; r < 16; ++r) {
    HINT
    for (int l = 0; l < 4; ++l) {
      acc[r * 4 + l] = acc[r * 4 + l] * ss[r];
    }
  }
  for (int i = 0; i < 64; ++i) y[tid * 64 + i] = acc[i];
}
"""

HINTS = ["", "#pragma unroll", "#pragma unroll 4", "#pragma clang loop unroll(full)",
         '_Pragma("clang loop unroll(full)")']


def _run(hint, rng_seed=3):
    rng = np.random.default_rng(rng_seed)
    x = rng.standard_normal(32 * 64).astype(np.float32)
    s = rng.standard_normal(16).astype(np.float32)
    y = np.zeros_like(x)
    res = clean(SCALED_ROWS.replace("HINT", hint), "scaled", 1, 32, x, s, y)
    want = (x.reshape(32, 16, 4) * s[None, :, None]).reshape(-1)
    np.testing.assert_array_equal(y, want)
    return res.stats


@pytest.mark.parametrize("hint", HINTS[1:])
def test_a_hinted_loop_runs_and_counts_as_the_rolled_one(hint):
    rolled, hinted = _run(""), _run(hint)
    for counter in ("threadgroup_load_ops", "device_load_ops", "device_store_ops",
                    "threadgroup_bytes_read"):
        assert hinted[counter] == rolled[counter], (hint, counter)


def test_hints_are_emptied_in_place():
    body = HEADER + SCALED_ROWS.replace("HINT", "#pragma unroll")
    cpp = translate(body, "scaled").cpp
    assert "unroll" not in cpp
    # findings keep pointing at MSL lines: the loop stays as many lines below the kernel
    def below(text):
        lines = text.splitlines()
        return lines.index("  for (int r = 0; r < 16; ++r) {") - next(
            i for i, t in enumerate(lines) if t.startswith("kernel void scaled"))
    assert below(cpp) == below(body)
    assert cpp.splitlines()[cpp.splitlines().index("  for (int r = 0; r < 16; ++r) {") + 1] \
        .strip() == ""
