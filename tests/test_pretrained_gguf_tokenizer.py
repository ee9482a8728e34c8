"""attnkit.pretrained.gguf_tokenizer: a GGUF's byte-level BPE rebuilt with tokenizers (llama.cpp's 'smollm'
pre-tokenizer: digits one by one, then GPT-2's split), control tokens as single ids, decode giving the text
back; the chat template rendered in jinja2's sandbox. On SmolLM2-135M-Instruct, the ids are compared with
llama.cpp's own tokenizer (llama-cpp-python) when it is installed."""

import json

import pytest

pytest.importorskip("gguf")
tokenizers = pytest.importorskip("tokenizers")

from attnkit.pretrained.gguf_file import read_gguf  # noqa: E402
from attnkit.pretrained.gguf_tokenizer import chat_prompt, tokenizer_from_gguf  # noqa: E402
from attnkit.testing.gguf import CHAT_TEMPLATE, tiny_llama_metadata  # noqa: E402
from test_pretrained_gguf_file import smollm2_path  # noqa: E402

TEXTS = ["Hello world! 12345 3.14", "don't I'm", "the cat on the mat", "a  b\n\n\tc   \n", "  leading spaces",
         "café 日本語 🙂", "<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n", "x<|im_end|>y", "",
         "Ünïcödé — “quotes” 'single' ½ ١٢٣ ٣", "\r\n\r\nwindows", "tab\tand\u00a0nbsp"]


@pytest.fixture(scope="module")
def tiny():
    return tiny_llama_metadata()


def test_bytes_merges_and_digits(tiny):
    tokenizer = tokenizer_from_gguf(tiny)
    tokens = tiny["tokenizer.ggml.tokens"]
    encoding = tokenizer.encode("Hello world 123")
    assert encoding.tokens == ["Hello", "Ġworld", "Ġ", "1", "2", "3"]  # the merge "1 2" never applies: digits split
    assert encoding.ids == [tokens.index(token) for token in encoding.tokens]
    gpt2 = tokenizer_from_gguf({**tiny, "tokenizer.ggml.pre": "gpt2"})
    assert gpt2.encode("Hello world 123").tokens == ["Hello", "Ġworld", "Ġ", "12", "3"]


def test_control_tokens_are_single_ids(tiny):
    tokenizer = tokenizer_from_gguf(tiny)
    ids = tokenizer.encode("<|im_start|>user\nHi<|im_end|>").ids
    assert ids[0] == 1 and ids[-1] == 2 and 1 not in ids[1:-1]
    assert tokenizer.get_vocab_size() == len(tiny["tokenizer.ggml.tokens"])


@pytest.mark.parametrize("text", TEXTS)
def test_decode_gives_the_text_back(tiny, text):
    tokenizer = tokenizer_from_gguf(tiny)
    assert tokenizer.decode(tokenizer.encode(text).ids, skip_special_tokens=False) == text


def test_bos_is_added_when_the_file_says_so(tiny):
    tokenizer = tokenizer_from_gguf({**tiny, "tokenizer.ggml.add_bos_token": True})
    assert tokenizer.encode("the cat").ids[0] == 1


@pytest.mark.parametrize(("changes", "message"), [
    ({"tokenizer.ggml.model": "llama"}, r"tokenizer.ggml.model is 'llama'; attnkit rebuilds 'gpt2'"),
    ({"tokenizer.ggml.pre": "qwen2"}, r"tokenizer.ggml.pre is 'qwen2'; attnkit knows llama.cpp's pre-tokenizers"),
    ({"tokenizer.ggml.tokens": None}, "'tokenizer.ggml.tokens' must be a non-empty list of str, got NoneType"),
    ({"tokenizer.ggml.token_type": [1, 2]}, "token_type has 2 entries, expected one per token"),
    ({"tokenizer.ggml.merges": ["Ġ t", "q z"]}, "merges holds 'q z'; expected two tokens of the vocabulary"),
    ({"tokenizer.ggml.merges": ["Ġt he"] + ["abc"]}, "merges holds 'abc'"),
    ({"tokenizer.ggml.add_bos_token": True, "tokenizer.ggml.bos_token_id": 9999}, "bos_token_id is 9999"),
])
def test_tokenizers_attnkit_cannot_rebuild_are_refused(tiny, changes, message):
    metadata = {**tiny, **changes}
    if "tokenizer.ggml.tokens" in changes and changes["tokenizer.ggml.tokens"] is None:
        del metadata["tokenizer.ggml.tokens"]
    with pytest.raises(ValueError, match=message):
        tokenizer_from_gguf(metadata)


def test_a_duplicated_token_is_refused(tiny):
    tokens = list(tiny["tokenizer.ggml.tokens"])
    tokens[-1] = tokens[-2]
    with pytest.raises(ValueError, match="holds a token twice"):
        tokenizer_from_gguf({**tiny, "tokenizer.ggml.tokens": tokens})


def test_the_chat_template(tiny):
    pytest.importorskip("jinja2")
    messages = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"}]
    assert chat_prompt(tiny, messages) == \
        "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nHello<|im_end|>\n<|im_start|>assistant\n"
    assert chat_prompt(tiny, messages[:1], add_generation_prompt=False) == "<|im_start|>user\nHi<|im_end|>\n"
    assert tiny["tokenizer.chat_template"] == CHAT_TEMPLATE


@pytest.mark.parametrize(("messages", "message"), [
    ([], "messages must be a non-empty list"),
    ("Hi", "messages must be a non-empty list"),
    ([{"role": "user"}], r"messages\[0\] must be \{'role': str, 'content': str\}"),
    ([{"role": "user", "content": "a"}, {"role": "user", "content": 3}], r"messages\[1\] must be"),
    ([{"role": "user", "content": "a", "name": "x"}], r"messages\[0\] must be"),
])
def test_bad_messages_are_refused(tiny, messages, message):
    with pytest.raises(ValueError, match=message):
        chat_prompt(tiny, messages)


@pytest.mark.parametrize(("template", "message"), [
    ("{{ messages.__class__.__mro__[1].__subclasses__() }}", "SecurityError"),
    ("{% set x = messages.append(1) %}", "SecurityError"),
    ("{{ raise_exception('no system messages') }}", "no system messages"),
    ("{% for %}", "TemplateSyntaxError"),
])
def test_the_template_runs_in_a_sandbox(tiny, template, message):
    pytest.importorskip("jinja2")
    with pytest.raises(ValueError, match=f"tokenizer.chat_template failed: .*{message}"):
        chat_prompt({**tiny, "tokenizer.chat_template": template}, [{"role": "user", "content": "Hi"}])


def test_a_file_without_a_chat_template(tiny):
    with pytest.raises(ValueError, match="has no tokenizer.chat_template"):
        chat_prompt({**tiny, "tokenizer.chat_template": None}, [{"role": "user", "content": "Hi"}])


def test_without_jinja2_the_error_names_the_extra(tiny, monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "jinja2", None)
    with pytest.raises(ImportError, match=r"jinja2 is missing\): pip install 'attnkit\[pretrained\]'"):
        chat_prompt(tiny, [{"role": "user", "content": "Hi"}])


@pytest.fixture(scope="module")
def smollm2():
    path = smollm2_path()
    metadata = read_gguf(path).metadata
    return path, metadata, tokenizer_from_gguf(metadata)


def test_smollm2_chat_prompt_and_ids(smollm2):
    pytest.importorskip("jinja2")
    _, metadata, tokenizer = smollm2
    prompt = chat_prompt(metadata, [{"role": "user", "content": "Hi"}])
    assert prompt.startswith("<|im_start|>system\nYou are a helpful AI assistant named SmolLM")
    assert prompt.endswith("<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n")
    ids = tokenizer.encode(prompt).ids
    assert ids[:3] == [1, 9690, 198] and ids[-4:] == [1, 520, 9531, 198]  # <|im_start|> system \n ... assistant \n
    assert tokenizer.decode(ids, skip_special_tokens=False) == prompt


def _paragraphs(data_dir):
    """English (news, reviews, Shakespeare) and Hindi paragraphs of the shared data."""
    texts = []
    with open(data_dir / "bbc_news_summary" / "bbc_news_summary.jsonl", encoding="utf-8") as lines:
        texts += [json.loads(line)["article"][:3000] for line, _ in zip(lines, range(40))]
    with open(data_dir / "imdb_reviews" / "test.jsonl", encoding="utf-8") as lines:
        texts += [json.loads(line)["text"] for line, _ in zip(lines, range(40))]
    shakespeare = (data_dir / "tinyshakespeare" / "input.txt").read_text(encoding="utf-8")
    texts += [shakespeare[start:start + 2000] for start in range(0, 80_000, 4000)]
    hindi = data_dir / "dakshina_hi_translit" / "hi.romanized.rejoined.dev.native.txt"
    if hindi.is_file():
        texts += hindi.read_text(encoding="utf-8").splitlines()[:20]
    return texts


def test_smollm2_ids_equal_llama_cpps(smollm2, data_dir):
    llama_cpp = pytest.importorskip("llama_cpp", reason="llama-cpp-python (llama.cpp's own tokenizer) is not installed")
    path, _, tokenizer = smollm2
    reference = llama_cpp.Llama(model_path=path, vocab_only=True, verbose=False)
    texts = TEXTS + ["12345 3.14 1,000,000 2024-11-26", "don't I'm we'll they've", "   \n\n\n  \t\t x  ",
                     "<|endoftext|><repo_name>a<file_sep>"] + _paragraphs(data_dir)
    differ = [text for text in texts if tokenizer.encode(text).ids !=
              reference.tokenize(text.encode("utf-8"), add_bos=False, special=True)]
    assert not differ, f"{len(differ)} of {len(texts)} texts tokenize differently, e.g. {differ[0][:200]!r}"


def test_the_docstring_examples_run():
    import doctest

    pytest.importorskip("jinja2")
    from attnkit.pretrained import gguf_tokenizer

    result = doctest.testmod(gguf_tokenizer)
    assert result.attempted > 0 and result.failed == 0
