"""TextCodec: whole texts to ids and back, whitespace and case as written, for every kind; saved as JSON."""

import json
import pickle

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from attnkit.text import SPECIAL_TOKENS, TextCodec

CORPUS = ["First Citizen:\nBefore we proceed any further, hear me speak.\n\nAll:\n\tSpeak, speak.\n",
          "Café crème, naïve façade — 🙂 done.\n"] * 5


@pytest.mark.parametrize("kind", ["char", "bpe", "unigram"])
def test_texts_come_back_exactly(kind):
    if kind != "char":
        pytest.importorskip("tokenizers")
    codec = TextCodec(kind, max_features=200 if kind != "char" else None).fit(CORPUS)
    for text in CORPUS + ["  Speak\n\n  hear  me\t"]:
        ids = codec.encode(text)
        assert ids.dtype == np.int64 and ids.min() >= len(SPECIAL_TOKENS)
        assert codec.decode(ids) == text
    assert codec.decode([codec.eot_id, *codec.encode("All:"), codec.eot_id]) == "All:"  # specials dropped


def test_char_codec_reads_unseen_characters_as_unk():
    codec = TextCodec("char").fit(["abc"])
    assert codec.encode("abz").tolist()[-1] == codec.unk_id and codec.size == len(SPECIAL_TOKENS) + 3
    assert codec.token_strings([codec.eot_id, *codec.encode("ab")]) == ["<eos>", "a", "b"]


def test_word_codec_spaces_words_as_the_tokenizer_does():
    codec = TextCodec("word", lowercase=True).fit(["Hello, World!\nIt's fine."])
    assert codec.decode(codec.encode("Hello, world! It's fine.")) == "hello, world! it's fine."


@settings(max_examples=30, deadline=None)
@given(st.text(alphabet=st.sampled_from("ab \n\tçé🙂"), max_size=30))
def test_bpe_round_trip_of_any_text_over_its_alphabet(text):
    assert _BPE.decode(_BPE.encode(text)) == text


@pytest.mark.parametrize("kind", ["char", "word", "bpe", "unigram"])
def test_config_and_pickle_round_trip(kind):
    if kind in ("bpe", "unigram"):
        pytest.importorskip("tokenizers")
    codec = TextCodec(kind, max_features=150 if kind in ("bpe", "unigram") else None).fit(CORPUS)
    for other in (TextCodec.from_config(json.loads(json.dumps(codec.get_config()))), pickle.loads(pickle.dumps(codec))):
        assert other.size == codec.size
        np.testing.assert_array_equal(other.encode(CORPUS[0]), codec.encode(CORPUS[0]))
        assert other.decode(codec.encode(CORPUS[1])) == codec.decode(codec.encode(CORPUS[1]))


def test_a_tokenizers_tokenizer_shifts_its_ids_past_the_specials():
    tokenizers = pytest.importorskip("tokenizers")
    hf = tokenizers.Tokenizer(tokenizers.models.BPE())
    hf.pre_tokenizer = tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=False)
    hf.decoder = tokenizers.decoders.ByteLevel()
    hf.train_from_iterator(CORPUS, tokenizers.trainers.BpeTrainer(
        vocab_size=300, show_progress=False, initial_alphabet=tokenizers.pre_tokenizers.ByteLevel.alphabet()))
    codec = TextCodec(hf).fit(CORPUS)
    ids = codec.encode(CORPUS[1])
    assert ids.tolist() == [i + len(SPECIAL_TOKENS) for i in hf.encode(CORPUS[1]).ids]
    assert codec.decode(ids) == CORPUS[1] and codec.size == hf.get_vocab_size() + len(SPECIAL_TOKENS)
    restored = TextCodec.from_config(json.loads(json.dumps(codec.get_config())))
    np.testing.assert_array_equal(restored.encode("speak"), codec.encode("speak"))
    with pytest.raises(ValueError, match="not valid Unicode"):  # tokenizers' own TypeError, named
        codec.encode("half an emoji \ud83d")


def test_errors():
    with pytest.raises(ValueError, match="tokenizer must be one of"):
        TextCodec("bytes")
    with pytest.raises(ValueError, match="not fitted"):
        TextCodec("char").encode("a")
    with pytest.raises(ValueError, match="not fitted"):
        _ = TextCodec("char").size
    with pytest.raises(TypeError, match="single str"):
        TextCodec("char").fit("abc")


_BPE = TextCodec("bpe", max_features=300).fit(["ab ab\n\tçé 🙂 ba"] * 10) if __import__("importlib").util.find_spec(
    "tokenizers") else TextCodec("char").fit(["ab \n\tçé🙂"])
