"""attnkit.pretrained.tokenizer: a checkpoint's tokenizer with its padding and truncation switched off,
truncation done as Hugging Face does it, and a state that pickles as text."""

import pickle

import pytest

from attnkit.pretrained.tokenizer import PretrainedTokenizer, require_extra
from tiny_bert import VOCAB, tokenizer_json

pytest.importorskip("tokenizers")


@pytest.fixture(scope="module")
def tokenizer():
    return PretrainedTokenizer(tokenizer_json())


def test_encode_adds_the_special_tokens_and_no_padding(tokenizer):
    ids, cut = tokenizer.encode(["The film was GOOD!", "", "playing"], max_len=20)
    assert cut == 0
    assert tokenizer.tokens(ids[0]) == ["[CLS]", "the", "film", "was", "good", "!", "[SEP]"]
    assert tokenizer.tokens(ids[1]) == ["[CLS]", "[SEP]"]  # tokenizer.json pads to 16: switched off
    assert tokenizer.tokens(ids[2]) == ["[CLS]", "play", "##ing", "[SEP]"]
    assert tokenizer.tokens(tokenizer.encode(["zebra"], 8)[0][0]) == ["[CLS]", "[UNK]", "[SEP]"]
    assert tokenizer.vocab_size == len(VOCAB) and tokenizer.token_id("[MASK]") == 4 and tokenizer.token_id("?") is None


def test_truncation_cuts_the_text_and_keeps_the_closing_token(tokenizer):
    ids, cut = tokenizer.encode(["the film " * 10, "a plot"], max_len=6)
    assert cut == 1 and [len(i) for i in ids] == [6, 4]
    assert tokenizer.tokens(ids[0]) == ["[CLS]", "the", "film", "the", "film", "[SEP]"]
    with pytest.raises(ValueError, match="max_len=1 leaves no room for the tokenizer's own special tokens"):
        tokenizer.encode(["a"], max_len=1)


def test_pickles_as_its_json_text(tokenizer):
    restored = pickle.loads(pickle.dumps(tokenizer))
    assert restored._tokenizer is None and restored.json_text == tokenizer.json_text
    assert restored.encode(["the plot"], 8) == tokenizer.encode(["the plot"], 8)


def test_bad_input():
    with pytest.raises(TypeError, match="json_text must be the text of tokenizer.json"):
        PretrainedTokenizer(b"{}")
    with pytest.raises(ValueError, match="tokenizer.json cannot be read by tokenizers"):
        PretrainedTokenizer('{"model": "nonsense"}')


def test_a_missing_extra_says_how_to_install_it(monkeypatch):
    import builtins

    real_import = builtins.__import__

    def no_safetensors(name, *args, **kwargs):
        if name.startswith("safetensors"):
            raise ImportError(name)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_safetensors)
    monkeypatch.delitem(__import__("sys").modules, "safetensors", raising=False)
    monkeypatch.delitem(__import__("sys").modules, "safetensors.numpy", raising=False)
    with pytest.raises(ImportError, match=r"pip install 'attnkit\[pretrained\]'"):
        require_extra("safetensors.numpy")
