"""harness.bench.emu_against lays out each speed shape as one launch the workers can replay."""

import json

import numpy as np
import pytest
import torch

from core.runtime import emu
from harness.bench import emu_against
from harness.check.compare import assert_close
from harness.gen import family as families


@pytest.mark.parametrize("name", ["gemm-256", "softmax-256x1024"])
def test_a_written_job_replays_to_the_oracle(tmp_path, name):
    shape = next(s for s in emu_against.SHAPES if s.name == name)
    path, mismatch = emu_against.write_job(shape, tmp_path)
    assert mismatch is None
    meta = json.loads((tmp_path / f"{name}.json").read_text())
    with np.load(str(path) + ".npz") as z:
        buffers = [z[f"b{i}"].copy() for i in range(len(z.files))]
    res = emu.run_msl(meta["msl"], meta["kernel"], grid=tuple(meta["grid"]),
                      threadgroup=tuple(meta["threadgroup"]), buffers=buffers)
    assert res.findings == []
    built = families.get(shape.family).build(dict(shape.params))
    (want,) = built.oracle(list(built.inputs(0)))
    got = torch.from_numpy(buffers[-1]).view(want.dtype).reshape(want.shape)
    assert_close(got, want, what=name)


def test_a_shape_of_several_launches_is_refused(tmp_path):
    params = {"N": 4096, "dtype": "float16", "kernels": 3, "read": "tile_reverse", "shift": 0,
              "b1": 256, "b2": 256, "b3": 256, "t1": 256, "t2": 128, "t3": 256}
    shape = emu_against.Shape("chain3", "multikernel", params, "three kernels in a row")
    with pytest.raises(emu_against.EmuAgainstError, match="chain3: 3 launches"):
        emu_against.write_job(shape, tmp_path)


def test_unknown_shapes_are_a_usage_error_before_anything_is_checked_out(tmp_path, capsys):
    from harness.cli import main

    assert main(["emu-against", "HEAD", "--shapes", "gemm-256,nope", "--out",
                 str(tmp_path)]) == 2
    assert "unknown shapes ['nope']" in capsys.readouterr().err
    assert not (tmp_path / "against").exists()
    assert [s.name for s in emu_against.shapes_named(None)] == [s.name for s in
                                                                  emu_against.SHAPES]


def test_a_run_fails_on_an_error_or_any_disagreement():
    ok = {"same_outputs": True, "same_counters": True, "oracle": "pass"}
    assert not emu_against.failed({"rows": [ok, ok]})
    assert emu_against.failed({"rows": [ok, {"shape": "s", "error": "ref: boom"}]})
    assert emu_against.failed({"rows": [{**ok, "same_counters": False}]})
    assert emu_against.failed({"rows": [{**ok, "oracle": "mismatch"}]})
