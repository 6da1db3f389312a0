"""Python names that are C++ or MSL keywords (a kernel `extern`, a parameter `this`, a
variable `new`) are renamed in the MSL, never printed as they are (MSL is C++-based: they
would not compile); the kernel still computes what torch computes."""

from __future__ import annotations

import re

import core
import core.language as T
from core.target import MSL_KEYWORDS
from harness.check.compare import assert_close
from harness.gen.inputs import random_tensor


@T.prim_func
def extern(this: T.Tensor((64,), "float32"), register: T.Tensor((64,), "float32")):
    with T.Kernel(1, threads=64):
        tx = T.get_thread_binding()
        new = this[tx] * 2.0
        register[tx] = new + 1.0


def test_keyword_names_are_renamed_and_the_kernel_runs(run):
    kernel = core.compile(extern, out_idx=[1])
    names = set(re.findall(r"\b([A-Za-z_]\w*)\s*(?=\[\[buffer|\()", kernel.msl))
    assert "extern" not in {s.name for s in kernel.specs}
    assert not {"this", "register", "new"} & set(re.findall(r"\b\w+\b", kernel.msl)), names
    a = random_tensor((64,), "float32", 5)
    assert_close(run(kernel, a), a * 2 + 1, "float32")


def test_the_keyword_list_holds_cpp_and_msl_words():
    assert {"extern", "register", "typename", "virtual", "this", "new", "kernel",
            "threadgroup", "metal"} <= MSL_KEYWORDS
