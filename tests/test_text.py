"""attnkit.text: the package's names and its docstring example (each module: tests/test_text_*.py)."""

import doctest

from attnkit import batching, text


def test_docstring_examples_run():
    result = doctest.testmod(text)
    assert result.attempted > 0 and result.failed == 0


def test_the_public_names_stay_where_they_were():
    assert text.pad_sequences is batching.pad_sequences
    assert text.length_sorted_batches is batching.length_sorted_batches
    assert {"SPECIAL_TOKENS", "SubwordTokenizer", "TextCodec", "Texts", "Tokenizer", "Vocabulary", "check_texts",
            "length_sorted_batches", "pad_sequences"} == set(text.__all__)
