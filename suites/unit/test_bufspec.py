"""Buffer specs of `harness emu` (harness/bufspec.py): DTYPE:SHAPE[:FILL] -> NumPy array."""

import ml_dtypes
import numpy as np
import pytest

from harness.bufspec import BufferSpecError, parse_spec


@pytest.mark.parametrize("word, dtype", [
    ("float32", np.float32), ("f32", np.float32), ("F32", np.float32),
    ("float16", np.float16), ("half", np.float16), ("f16", np.float16),
    ("bfloat16", ml_dtypes.bfloat16), ("bf16", ml_dtypes.bfloat16),
    ("int32", np.int32), ("i32", np.int32), ("uint32", np.uint32), ("u32", np.uint32),
    ("int64", np.int64), ("int16", np.int16), ("uint16", np.uint16),
    ("int8", np.int8), ("uint8", np.uint8), ("bool", np.bool_),
])
def test_dtype_names_and_aliases(word, dtype):
    array = parse_spec(f"{word}:3").make()
    assert array.dtype == np.dtype(dtype)
    assert array.shape == (3,)


@pytest.mark.parametrize("shape_text, shape", [
    ("1", (1,)), ("1024", (1024,)), ("64x256", (64, 256)), ("2x3x4", (2, 3, 4)),
])
def test_shapes(shape_text, shape):
    spec = parse_spec(f"f32:{shape_text}")
    assert spec.shape == shape
    array = spec.make()
    assert array.shape == shape and array.flags.c_contiguous


def test_default_fill_is_zeros():
    assert parse_spec("i32:2x2").fill == "zeros"
    np.testing.assert_array_equal(parse_spec("i32:2x2").make(), np.zeros((2, 2), np.int32))


def test_ones_and_arange():
    np.testing.assert_array_equal(parse_spec("f16:4:ones").make(), np.ones(4, np.float16))
    arange = parse_spec("u32:2x3:arange").make()
    np.testing.assert_array_equal(arange, np.arange(6, dtype=np.uint32).reshape(2, 3))
    np.testing.assert_array_equal(parse_spec("bool:4:arange").make(), [False, True, False, True])


def test_random_is_seeded_per_buffer_index():
    spec = parse_spec("f32:256:random")
    first, again = spec.make(seed=3, index=0), spec.make(seed=3, index=0)
    np.testing.assert_array_equal(first, again)
    assert not np.array_equal(first, spec.make(seed=3, index=1))
    assert not np.array_equal(first, spec.make(seed=4, index=0))
    assert 0.5 < first.std() < 1.5 and abs(first.mean()) < 0.3  # standard normal


def test_random_integers_are_small():
    signed = parse_spec("i8:1000:random").make(seed=1)
    assert signed.min() >= -8 and signed.max() < 8 and (signed < 0).any()
    unsigned = parse_spec("u32:1000:random").make(seed=1)
    assert unsigned.min() >= 0 and unsigned.max() < 16
    flags = parse_spec("bool:100:random").make(seed=1)
    assert flags.dtype == np.bool_ and flags.any() and not flags.all()


def test_random_bfloat16_is_finite_and_varied():
    values = parse_spec("bf16:64:random").make().astype(np.float32)
    assert np.isfinite(values).all() and len(np.unique(values)) > 32


def test_value_fills_every_element():
    np.testing.assert_array_equal(parse_spec("u32:1:value=1000").make(), [1000])
    np.testing.assert_array_equal(parse_spec("i32:3:value=-0x10").make(), [-16, -16, -16])
    halves = parse_spec("f16:2x2:value=0.5").make()
    assert halves.dtype == np.float16 and (halves == 0.5).all()
    assert np.isinf(parse_spec("f32:2:value=-inf").make()).all()
    np.testing.assert_array_equal(parse_spec("bool:2:value=true").make(), [True, True])


def test_values_one_per_element():
    array = parse_spec("i32:2x2:values=7,-3,0x10,0").make()
    np.testing.assert_array_equal(array, [[7, -3], [16, 0]])
    np.testing.assert_array_equal(parse_spec("f32:2:values=1.5, 2").make(), [1.5, 2.0])


def test_npy_file(tmp_path):
    path = tmp_path / "x.npy"
    np.save(path, np.arange(6, dtype=np.float64).reshape(2, 3))
    array = parse_spec(f"f32:2x3:{path}").make()
    assert array.dtype == np.float32
    np.testing.assert_array_equal(array, np.arange(6).reshape(2, 3))


def test_npy_bfloat16_round_trip(tmp_path):
    original = np.array([1.5, -2.0, 3.25], ml_dtypes.bfloat16)
    np.save(tmp_path / "b.npy", original)  # stored as raw 2-byte voids
    loaded = parse_spec(f"bf16:3:{tmp_path / 'b.npy'}").make()
    assert loaded.dtype == np.dtype(ml_dtypes.bfloat16)
    np.testing.assert_array_equal(loaded.astype(np.float32), [1.5, -2.0, 3.25])


def test_npy_shape_mismatch_is_an_error(tmp_path):
    np.save(tmp_path / "x.npy", np.zeros(5, np.float32))
    with pytest.raises(BufferSpecError, match="holds shape 5, the spec says 2x3"):
        parse_spec(f"f32:2x3:{tmp_path / 'x.npy'}").make()


def test_npy_missing_file_is_an_error_at_make_time(tmp_path):
    spec = parse_spec(f"f32:4:{tmp_path / 'missing.npy'}")  # parsing does not read files
    with pytest.raises(BufferSpecError, match="cannot read"):
        spec.make()


@pytest.mark.parametrize("text, message", [
    ("f32", r"expected DTYPE:SHAPE\[:FILL\]"),
    (":4", r"expected DTYPE:SHAPE\[:FILL\]"),
    ("f32:", r"expected DTYPE:SHAPE\[:FILL\]"),
    ("float:4", "unknown dtype 'float'; known: float32"),
    ("f32:0", "bad shape '0'; expected positive integers"),
    ("f32:-4", "bad shape"),
    ("f32:4x", "bad shape '4x'"),
    ("f32:four", "bad shape"),
    ("f32:4:twos", "unknown fill 'twos'; expected one of zeros, ones, arange, random"),
    ("u8:1:value=256", r"256 does not fit uint8 \[0, 255\]"),
    ("i8:1:value=-129", "does not fit int8"),
    ("i32:1:value=1.5", "'1.5' is not an integer"),
    ("f32:1:value=abc", "'abc' is not a number"),
    ("bool:1:value=yes", "is not true/false/0/1"),
    ("i32:3:values=1,2", r"values= gives 2 values for shape 3 \(3 elements\)"),
    ("i32:1:values=", "'' is not an integer"),
])
def test_bad_specs_name_the_spec_and_the_problem(text, message):
    with pytest.raises(BufferSpecError, match=message) as info:
        parse_spec(text)
    assert f"buffer '{text}'" in str(info.value)
