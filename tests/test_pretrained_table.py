"""attnkit.pretrained.table: one table of mixed rules applied to small tensors, every refusal naming the
file and the tensor, and the layer count held to the tensors before any table is built."""

import re

import numpy as np
import pytest

from attnkit.pretrained.rotary_rows import interleaved_to_half
from attnkit.pretrained.rules import PermuteRows, Rename, Split
from attnkit.pretrained.table import TensorNames, apply_table, check_layer_count

NAMES = TensorNames(model="a test network", layer=re.compile(r"h\.(\d+)\."), layers="blocks",
                    layers_field="n_layer", canonical=lambda name: name.removeprefix("transformer."),
                    ignored=("h.0.attn.bias_buffer",))


def _table():
    return {"wte": Rename("tokens", (5, 4)),
            "h.0.attn.c_attn.weight": Split(("wq", "wk", "wv"), (4, 12), axis=1),
            "h.0.attn.c_proj.weight": Rename("wo", (4, 4), transpose=True),
            "h.0.rotary_q": PermuteRows("rq", (4, 2), interleaved_to_half(1, 4))}


def _tensors():
    rng = np.random.default_rng(0)
    return {"transformer.wte": rng.standard_normal((5, 4)).astype(np.float16),
            "transformer.h.0.attn.c_attn.weight": rng.standard_normal((4, 12)).astype(np.float32),
            "transformer.h.0.attn.c_proj.weight": rng.standard_normal((4, 4)).astype(np.float32),
            "transformer.h.0.rotary_q": rng.standard_normal((4, 2)),
            "transformer.h.0.attn.bias_buffer": np.ones((1, 1, 4, 4), np.int8)}


def test_a_table_of_mixed_rules_writes_every_target_as_float32():
    tensors = _tensors()
    weights = apply_table(tensors, _table(), NAMES, source="m.safetensors")
    assert set(weights) == {"tokens", "wq", "wk", "wv", "wo", "rq"}
    np.testing.assert_array_equal(weights["wk"], tensors["transformer.h.0.attn.c_attn.weight"][:, 4:8])
    np.testing.assert_array_equal(weights["wo"], tensors["transformer.h.0.attn.c_proj.weight"].T)
    np.testing.assert_array_equal(weights["rq"], tensors["transformer.h.0.rotary_q"][[0, 2, 1, 3]].astype(np.float32))
    assert all(w.dtype == np.float32 and w.flags.c_contiguous for w in weights.values())


@pytest.mark.parametrize(("change", "match"), [
    (lambda t: t.pop("transformer.wte"), r"^m.safetensors does not match a test network of its config: missing "
                                         r"\['wte'\], unexpected \[\]$"),
    (lambda t: t.update({"transformer.h.0.mlp": np.zeros(2)}), r"missing \[\], unexpected \['transformer.h.0.mlp'\]"),
    (lambda t: t.update({"transformer.h.0.attn.c_attn.weight": np.zeros((4, 9))}),
     r"^m.safetensors: tensor transformer.h.0.attn.c_attn.weight has shape \(4, 9\), but the config implies "
     r"\(4, 12\)$"),
    (lambda t: t.update({"transformer.wte": np.zeros((5, 4), np.int64)}),
     r"tensor transformer.wte must be floating point, got int64"),
    (lambda t: t["transformer.h.0.rotary_q"].__setitem__((1, 1), np.inf),
     r"tensor transformer.h.0.rotary_q holds non-finite values \(NaN or inf\)"),
])
def test_tensors_that_do_not_fit_the_table_are_refused_by_name(change, match):
    tensors = _tensors()
    change(tensors)
    with pytest.raises(ValueError, match=match):
        apply_table(tensors, _table(), NAMES, source="m.safetensors")


def test_a_table_that_writes_a_target_twice_is_a_bug_in_the_table():
    table = {**_table(), "wpe": Rename("wq", (4, 4))}
    with pytest.raises(RuntimeError, match=r"the tensor table of a test network writes \['wq'\] more than once"):
        apply_table(_tensors(), table, NAMES, source="m.safetensors")


def test_the_layer_count_is_checked_against_the_tensors_before_any_table():
    check_layer_count(_tensors(), 1, NAMES, source="m.safetensors")
    with pytest.raises(ValueError, match=r"^m.safetensors holds 1 blocks, but the config's n_layer is 1000000000$"):
        check_layer_count(_tensors(), 10**9, NAMES, source="m.safetensors")
