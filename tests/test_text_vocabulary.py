"""attnkit.text.vocabulary: tokens <-> ids with the special tokens first, cut-offs, configs."""

import json

import numpy as np
import pytest

from attnkit.text import SPECIAL_TOKENS, Tokenizer, Vocabulary


def test_special_ids_come_first():
    vocab = Vocabulary(["x"])
    assert vocab.tokens[: len(SPECIAL_TOKENS)] == list(SPECIAL_TOKENS)
    assert (vocab.pad_id, vocab.unk_id, vocab.cls_id, vocab.bos_id, vocab.eos_id) == (0, 1, 2, 3, 4)
    assert vocab.index["x"] == 5 and len(vocab) == 6 and "x" in vocab and "y" not in vocab

def test_build_orders_by_count_then_first_seen():
    docs = [["b", "a", "c"], ["a", "c"], ["c", "d"]]
    assert Vocabulary.build(docs).tokens[5:] == ["c", "a", "b", "d"]

def test_min_df_counts_documents_not_occurrences():
    docs = [["a", "a", "a"], ["b"], ["b"]]
    assert Vocabulary.build(docs, min_df=2).tokens[5:] == ["b"]
    assert Vocabulary.build(docs, min_df=0.5).tokens[5:] == ["b"]  # ceil(0.5 * 3) = 2 documents
    assert Vocabulary.build(docs, min_df=1.0).tokens[5:] == []

def test_max_features_keeps_the_most_frequent():
    docs = [["a", "b", "b", "c", "c", "c"]]
    assert Vocabulary.build(docs, max_features=2).tokens[5:] == ["c", "b"]

def test_build_drops_special_tokens_seen_in_text():
    assert Vocabulary.build([["<pad>", "<unk>", "x"]]).tokens[5:] == ["x"]

@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"min_df": 0}, ValueError, "min_df must be >= 1"),
        ({"min_df": 1.5}, ValueError, r"min_df must be in \(0, 1\]"),
        ({"min_df": "2"}, TypeError, "min_df must be an int or a float"),
        ({"min_df": True}, TypeError, "min_df must be an int or a float"),
        ({"max_features": 0}, ValueError, "max_features must be >= 1"),
        ({"max_features": 2.0}, TypeError, "max_features must be an int or None"),
    ],
)
def test_build_rejects_bad_cutoffs(kwargs, error, match):
    with pytest.raises(error, match=match):
        Vocabulary.build([["a"]], **kwargs)

def test_duplicate_tokens_are_refused():
    with pytest.raises(ValueError, match="tokens must be unique"):
        Vocabulary(["a", "a"])
    with pytest.raises(ValueError, match="'<eos>'"):
        Vocabulary(["<eos>"])

def test_encode_unknown_prefix_suffix_truncation():
    vocab = Vocabulary(["good", "film"])
    assert vocab.encode(["good", "bad", "film"]) == [5, 1, 6]
    assert vocab.encode(["good", "bad", "film"], prefix=[vocab.bos_id], suffix=[vocab.eos_id], max_len=2) == [
        3, 5, 1, 4]
    assert vocab.encode([]) == []

def test_decode_skips_specials_and_stops_at_eos():
    vocab = Vocabulary(["good", "film"])
    assert vocab.decode([3, 5, 1, 6, 4, 5, 0]) == ["good", "<unk>", "film"]
    assert vocab.decode([3, 5, 4, 6], skip_special=False) == ["<bos>", "good", "<eos>", "film"]
    assert vocab.decode(np.array([5, 6])) == ["good", "film"]
    with pytest.raises(ValueError, match=r"ids must be in \[0, 7\)"):
        vocab.decode([7])
    with pytest.raises(ValueError, match="got -1"):
        vocab.decode([-1])

def test_vocabulary_config_is_json_and_round_trips():
    vocab = Vocabulary(["b", "a", "n't"])
    restored = Vocabulary.from_config(json.loads(json.dumps(vocab.get_config())))
    assert restored == vocab and hash(restored) == hash(vocab) and restored.index == vocab.index
    ints = Vocabulary([17, 3])  # token-id input: the ids themselves are the tokens
    assert Vocabulary.from_config(json.loads(json.dumps(ints.get_config()))).encode([3, 9]) == [6, 1]
    assert "Vocabulary(7 tokens" in repr(ints)

def test_char_vocabulary_round_trip_through_text():
    tokenizer = Tokenizer("char", lowercase=False)
    texts = ["Hello", "world!"]
    vocab = Vocabulary.build(tokenizer(t) for t in texts)
    ids = vocab.encode(tokenizer("Hello world!"), prefix=[vocab.bos_id], suffix=[vocab.eos_id])
    assert tokenizer.detokenize(vocab.decode(ids)) == "Hello<unk>world!"
