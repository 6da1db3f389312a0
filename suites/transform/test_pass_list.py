"""docs/architecture.md's pass table, `pipeline.PASSES`, `pipeline.REQUIRED` and this
folder stay in step: every pass is a row, in pipeline order, marked **required** exactly
when it is in REQUIRED (with the reason), and has its `test_<pass>.py` here."""

from pathlib import Path

import pytest

import core.language as T
from core.transform import pipeline

HERE = Path(__file__).resolve().parent
DOC = HERE.parents[1] / "docs" / "architecture.md"
HEADER = "| pass | does | expects | guarantees | can it be disabled? | test |"


def table_rows() -> list:
    """[(pass name, {column: cell})] of the pass table, in the doc's order."""
    lines = DOC.read_text().splitlines()
    start = lines.index(HEADER)
    columns = [c.strip() for c in HEADER.strip("|").split("|")]
    rows = []
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        cells = [c.strip() for c in line.strip().strip("|").split(" | ")]
        assert len(cells) == len(columns), line[:80]
        row = dict(zip(columns, cells))
        rows.append((row["pass"].strip("`"), row))
    return rows


def test_the_table_lists_every_pass_in_pipeline_order():
    assert [name for name, _ in table_rows()] == list(pipeline.pass_names())


def test_required_passes_are_marked_with_their_reason():
    for name, row in table_rows():
        cell = row["can it be disabled?"]
        if name in pipeline.REQUIRED:
            assert cell.startswith("**required**: ") and len(cell) > 40, name
        else:
            assert cell.startswith("no"), name


def test_every_pass_has_its_test_file_named_in_the_table():
    for name, row in table_rows():
        path = f"test_{name}.py"
        assert (HERE / path).is_file(), path
        assert f"(../suites/transform/{path})" in row["test"], name


@T.prim_func
def _tiny(A: T.Tensor((64,), "float32"), B: T.Tensor((64,), "float32")):
    with T.Kernel(1, threads=64):
        for i in T.Parallel(64):
            B[i] = A[i]


@pytest.mark.parametrize("name", pipeline.pass_names())
def test_required_means_the_pipeline_refuses_to_disable_it(name):
    if name in pipeline.REQUIRED:
        with pytest.raises(ValueError, match=f"pass '{name}' cannot be disabled"):
            pipeline.run(_tiny, disable=(name,))
    else:
        pipeline.run(_tiny, disable=(name,))
