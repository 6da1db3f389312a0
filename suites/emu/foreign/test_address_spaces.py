"""MSL address spaces as part of the type (include/metal_stdlib.h): overloads and templates
that differ only in an address space dispatch as MSL does, member functions qualified by
the address space of their object compile, structs in device/constant/threadgroup memory
copy and call plain members, and every access is still seen by the checks. MSL written for
these tests, run with every check, values against numpy."""

from __future__ import annotations

import numpy as np

from core.runtime import emu
from foreigncase import close, msl_line, run_clean

HEAD = "#include <metal_stdlib>\nusing namespace metal;\n"

OVERLOADS = HEAD + """\
float where_from(device const float* p) { return 1.0f; }
float where_from(threadgroup const float* p) { return 2.0f; }
float where_from(thread const float* p) { return 3.0f; }
float where_from(constant float* p) { return 4.0f; }
float by_ref(device const float& x) { return x + 100.0f; }
float by_ref(thread const float& x) { return x + 200.0f; }
template <typename T> float space_of(T* p) {
  return is_same_v<remove_cv_t<T>, device float> ? 10.0f
       : is_same_v<remove_cv_t<T>, threadgroup float> ? 20.0f
       : is_same_v<remove_cv_t<T>, float> ? 30.0f : 40.0f;
}
constant float table[2] = {5.0f, 6.0f};
kernel void k(device float* y [[buffer(0)]], constant float* c [[buffer(1)]],
              uint i [[thread_index_in_threadgroup]]) {
  threadgroup float shared[8];
  float mine = float(i);
  shared[i] = mine;
  threadgroup_barrier(mem_flags::mem_threadgroup);
  device float* row = y + 8 * i;
  row[0] = where_from(y);
  row[1] = where_from(shared);
  row[2] = where_from(&mine);
  row[3] = where_from(table) + where_from(c) * 10.0f;
  row[4] = by_ref(c[0] + 0.0f) + by_ref(y[64 + i]);
  row[5] = space_of(y) + space_of(shared);
  row[6] = space_of(&mine);
  row[7] = shared[7 - i];
}
"""


def test_overloads_and_templates_dispatch_on_the_address_space():
    y = np.zeros(8 * 8 + 8, np.float32)
    y[64:] = np.arange(8) * 0.5
    c = np.array([7.0], np.float32)
    run_clean(OVERLOADS, "k", 1, 8, [y, c])
    i = np.arange(8, dtype=np.float32)
    want = np.stack([np.full(8, 1.0), np.full(8, 2.0), np.full(8, 3.0), np.full(8, 44.0),
                     # c[0] + 0.0f is a thread value; y[64 + i] is a device lvalue
                     207.0 + 100.0 + i * 0.5, np.full(8, 30.0), np.full(8, 30.0), 7.0 - i], 1)
    close(y[:64].reshape(8, 8), want.astype(np.float32))


MEMBERS = HEAD + """\
struct Scaled {
  float v;
  Scaled() = default;
  template <typename T> Scaled(T x) thread : v(float(x)) {}
  template <typename T> Scaled(T x) threadgroup : v(float(x)) {}
  float twice() const thread { return v * 2.0f; }
  float twice() const device { return v * 2.0f; }
  float twice() const threadgroup { return v * 2.0f; }
  float twice() const constant { return v * 2.0f; }
  void bump(float d) device { v += d; }
  float plain() const { return v + 0.5f; }
};
kernel void k(device float* y [[buffer(0)]], device Scaled* s [[buffer(1)]],
              constant Scaled& c [[buffer(2)]], uint i [[thread_index_in_threadgroup]]) {
  threadgroup Scaled held[4];
  held[i] = Scaled(i + 1);
  threadgroup_barrier(mem_flags::mem_threadgroup);
  Scaled copy = s[i];
  s[i].bump(1.0f);
  y[5 * i + 0] = s[i].twice();
  y[5 * i + 1] = c.twice();
  y[5 * i + 2] = held[3 - i].twice();
  y[5 * i + 3] = copy.twice();
  y[5 * i + 4] = s[i].plain() + c.plain();
}
"""


def test_member_functions_qualified_by_the_object_address_space():
    y = np.zeros(20, np.float32)
    s = np.array([1.0, 2.0, 3.0, 4.0], np.float32)
    c = np.array([10.0], np.float32)
    run_clean(MEMBERS, "k", 1, 4, [y, s, c])
    v = np.array([1.0, 2.0, 3.0, 4.0])
    want = np.stack([2 * (v + 1), np.full(4, 20.0), 2 * (4 - np.arange(4)), 2 * v,
                     v + 1 + 0.5 + 10.5], 1)
    close(y.reshape(4, 5), want.astype(np.float32))
    close(s, (v + 1).astype(np.float32))


def test_member_overloads_keep_the_lines_of_the_source():
    src = MEMBERS.replace("  y[5 * i + 4] = s[i].plain() + c.plain();",
                          "  y[5 * i + 4] = s[i + 4].plain();")
    res = emu.run_msl(src, "k", grid=1, threadgroup=4,
                      buffers=[np.zeros(20, np.float32), np.ones(4, np.float32),
                               np.ones(1, np.float32)])
    # the out-of-bounds read is made inside plain(), which follows the merged members
    bounds = [f for f in res.findings if f.kind == "bounds"]
    assert bounds and {f.line for f in bounds} == {msl_line(src, "float plain() const")}


def test_a_race_through_an_address_space_overload_is_still_seen():
    src = HEAD + """\
void put(threadgroup float* p, float v) { p[0] = v; }
void put(device float* p, float v) { p[0] = v; }
kernel void k(device float* y [[buffer(0)]], uint i [[thread_index_in_threadgroup]]) {
  threadgroup float cell[1];
  put(cell, float(i));
  put(y, float(i));
}
"""
    res = emu.run_msl(src, "k", grid=1, threadgroup=2, buffers=[np.zeros(1, np.float32)])
    races = {(f.address_space, f.line) for f in res.findings if f.kind == "race"}
    line = msl_line(src, "void put(threadgroup")
    assert ("threadgroup", line) in races and ("device", line + 1) in races, res.findings


def test_constant_structs_copy_into_thread_variables():
    src = HEAD + """\
struct Params { int n; float scale; };
kernel void k(device float* y [[buffer(0)]], constant Params& p [[buffer(1)]],
              uint i [[thread_position_in_grid]]) {
  Params local = p;
  local.scale *= 2.0f;
  if (int(i) < local.n) y[i] = float(i) * local.scale + p.scale;
}
"""
    params = np.zeros(2, np.float32)
    params.view(np.int32)[0] = 5
    params[1] = 1.5
    y = np.zeros(8, np.float32)
    run_clean(src, "k", 1, 8, [y, params])
    want = np.where(np.arange(8) < 5, np.arange(8) * 3.0 + 1.5, 0.0)
    close(y, want.astype(np.float32))
