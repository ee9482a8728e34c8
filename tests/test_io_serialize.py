"""nn.serialize: exact round trips of arrays and JSON config, files readable without pickle."""

import io
import json

import numpy as np
import pytest
from numpy.testing import assert_array_equal

from attnkit.io import serialize
from attnkit.nn import LearnedPositions, RelativePositionBias

STATES = {
    "model": {
        "encoder.0.attn.weight": np.arange(6, dtype=np.float32).reshape(2, 3) / 7,
        "pos.weight": np.array([[np.nan, np.inf], [-0.0, 1e-45]], dtype=np.float32),
        "empty": np.zeros((0, 4)),
    },
    "optimizer": {"step": np.array(12, dtype=np.int64), "exp_avg.w": np.float64([1 / 3])},
    "extras": {"mask": np.array([True, False]), "tokens": np.array([3, 1, 4], dtype=np.int32)},
    "nothing": {},
}
CONFIG = {"d_model": 64, "betas": (0.9, 0.98), "max_norm": float("inf"), "vocab": ["<pad>", "é", "a b"],
          "nested": {"flag": True, "none": None}, "seed": np.int64(7), "rate": np.float32(0.5)}


def assert_states_equal(got, expected):
    assert list(got) == list(expected)
    for group, named in expected.items():
        assert sorted(got[group]) == sorted(named)
        for name, value in named.items():
            assert got[group][name].dtype == value.dtype and got[group][name].shape == value.shape
            assert_array_equal(got[group][name], value)
            assert got[group][name].tobytes() == value.tobytes()  # bit for bit (NaN payloads, -0.0)


def expected_config():
    return {**CONFIG, "betas": [0.9, 0.98], "seed": 7, "rate": 0.5}


def test_arrays_round_trip():
    arrays = serialize.to_arrays(STATES, CONFIG)
    assert arrays[serialize.META_KEY].shape == () and arrays[serialize.META_KEY].dtype.kind == "U"
    states, config = serialize.from_arrays(arrays)
    assert_states_equal(states, STATES)
    assert config == expected_config()


@pytest.mark.parametrize("compress", [False, True])
def test_file_round_trip_without_pickle(tmp_path, compress):
    path = tmp_path / "checkpoint.npz"
    serialize.save(path, STATES, CONFIG, compress=compress)
    with np.load(path, allow_pickle=False) as npz:  # every entry is a plain array
        assert set(npz.files) == set(serialize.to_arrays(STATES))
    states, config = serialize.load(path)
    assert_states_equal(states, STATES)
    assert config == expected_config()


def test_whole_model_round_trip():
    model = RelativePositionBias(4, 3, rng=0)
    model.add_child("positions", LearnedPositions(5, 2, rng=1))
    buffer = io.BytesIO()
    serialize.save(buffer, {"model": model.state_dict()}, {"heads": 4, "max_distance": 3})
    buffer.seek(0)
    states, config = serialize.load(buffer)
    restored = RelativePositionBias(**config, rng=2)
    restored.add_child("positions", LearnedPositions(5, 2, rng=3))
    restored.load_state_dict(states["model"])
    assert_states_equal({"model": restored.state_dict()}, {"model": model.state_dict()})


def test_arrays_are_copied():
    value = np.zeros(3)
    arrays = serialize.to_arrays({"model": {"w": value}})
    value[0] = 1
    assert arrays["model/w"][0] == 0


@pytest.mark.parametrize(
    ("states", "config", "error", "match"),
    [
        ({"model": {"w": np.array([object()])}}, None, TypeError, "model/w must be numeric"),
        ({"model": {"w": np.array(["a"])}}, None, TypeError, "model/w must be numeric"),
        ({"a/b": {}}, None, ValueError, "group names"),
        ({"": {}}, None, ValueError, "group names"),
        ({"__attnkit__": {}}, None, ValueError, "group names"),
        ({}, {"f": lambda: 0}, TypeError, "config must be JSON-able"),
        ({}, {"a": np.zeros(2)}, TypeError, "config must be JSON-able"),
        ({}, [1, 2], TypeError, "config must be a dict"),
    ],
)
def test_refuses_what_cannot_round_trip(states, config, error, match):
    with pytest.raises(error, match=match):
        serialize.to_arrays(states, config)


def test_refuses_foreign_or_newer_files(tmp_path):
    with pytest.raises(ValueError, match="not an attnkit checkpoint"):
        serialize.from_arrays({"w": np.zeros(2)})
    meta = {"format": "attnkit", "version": serialize.FORMAT_VERSION + 1, "groups": [], "config": {}}
    with pytest.raises(ValueError, match="unsupported checkpoint format"):
        serialize.from_arrays({serialize.META_KEY: np.array(json.dumps(meta))})
    arrays = serialize.to_arrays({"model": {}})
    with pytest.raises(ValueError, match="belongs to no saved group"):
        serialize.from_arrays({**arrays, "other/w": np.zeros(1)})
    path = tmp_path / "pickled.npz"
    np.savez(path, **serialize.to_arrays({"model": {}}), objects=np.array([{"a": 1}], dtype=object))
    with pytest.raises(ValueError, match="allow_pickle"):
        serialize.load(path)
