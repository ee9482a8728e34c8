"""attnkit.text.subword: BPE and unigram pieces learnt from a corpus, exact round trips, determinism."""

import json
import pickle

import pytest
from hypothesis import given, settings

from attnkit.text import SubwordTokenizer
from text_samples import sentences

_CORPUS = ["C'est l'homme d'aujourd'hui, d'accord ?", "I don't know; it's well-known.", "Bonjour ! « Quoi ? »",
           "It costs $3.5 (10,000 yen)...", "Peut-être est-ce vingt-et-un."] * 4


@pytest.mark.parametrize("kind", SubwordTokenizer.KINDS)
def test_subword_round_trip_and_determinism(kind):
    tokenizer = SubwordTokenizer(kind, lowercase=False).fit(_CORPUS, vocab_size=300)
    for sentence in _CORPUS + ["Une  phrase\tnouvelle !"]:
        assert tokenizer.detokenize(tokenizer(sentence)) == " ".join(sentence.split())
    assert tokenizer(" ") == []
    assert SubwordTokenizer(kind, lowercase=False).fit(_CORPUS, vocab_size=300) == tokenizer
    restored = SubwordTokenizer.from_config(json.loads(json.dumps(tokenizer.get_config())))
    assert restored == tokenizer and restored("Bonjour !") == tokenizer("Bonjour !")
    assert pickle.loads(pickle.dumps(tokenizer))("Quoi ?") == tokenizer("Quoi ?")

@settings(max_examples=50, deadline=None)
@given(sentences())
def test_bpe_round_trip_of_generated_sentences(sentence):
    tokenizer = _BPE
    assert tokenizer.detokenize(tokenizer(sentence)) == sentence.lower()


_BPE = SubwordTokenizer("bpe").fit(_CORPUS, vocab_size=400)

def test_subword_errors(monkeypatch):
    with pytest.raises(ValueError, match="kind must be one of"):
        SubwordTokenizer("word")
    with pytest.raises(ValueError, match="not trained"):
        SubwordTokenizer("bpe")("text")
    with pytest.raises(ValueError, match="vocab_size must be"):
        SubwordTokenizer("bpe").fit(_CORPUS, vocab_size=0)
    with pytest.raises(ValueError, match="cannot learn 5 unigram pieces"):
        SubwordTokenizer("unigram").fit(_CORPUS, vocab_size=5)
    monkeypatch.setitem(__import__("sys").modules, "tokenizers", None)
    with pytest.raises(ImportError, match="attnkit\\[pretrained\\]"):
        SubwordTokenizer("bpe").fit(_CORPUS)


@pytest.mark.parametrize("kind", SubwordTokenizer.KINDS)
def test_keep_whitespace_spells_every_space_tab_and_newline(kind):
    tokenizer = SubwordTokenizer(kind, lowercase=False, keep_whitespace=True).fit(_CORPUS, vocab_size=300)
    for text in ["  Bonjour !\n\n\tQuoi ?  ", "\n", "a  b"]:
        assert tokenizer.detokenize(tokenizer(text)) == text
    restored = SubwordTokenizer.from_config(json.loads(json.dumps(tokenizer.get_config())))
    assert restored == tokenizer and restored.keep_whitespace
    with pytest.raises(TypeError, match="keep_whitespace must be a bool"):
        SubwordTokenizer(kind, keep_whitespace="yes")


@pytest.mark.parametrize("kind", ["bpe", "unigram"])
def test_a_lone_surrogate_is_named(kind):
    tokenizer = SubwordTokenizer(kind).fit(["the cat sat on the mat", "a dog sat on a log"] * 5, 30)
    with pytest.raises(ValueError, match="not valid Unicode"):
        tokenizer("the \udc00 cat")
