"""attnkit.pretrained.sentence: sentence-transformers' pooling, normalisation and max_seq_length as an
optional part of a checkpoint (None without its files)."""

import json

import pytest

from attnkit.pretrained.files import open_checkpoint
from attnkit.pretrained.sentence import SentenceTransformers, read_sentence_transformers

MODULES = [{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
           {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
           {"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"}]


def _files(tmp_path, **contents):
    for name, value in contents.items():
        path = tmp_path / name.replace("__", "/")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(value if isinstance(value, str) else json.dumps(value))
    return open_checkpoint(tmp_path)


def test_the_three_files_together(tmp_path):
    files = _files(tmp_path, **{"modules.json": MODULES, "1_Pooling__config.json": {"pooling_mode_cls_token": True},
                                "sentence_bert_config.json": {"max_seq_length": 128}})
    assert read_sentence_transformers(files, 512) == SentenceTransformers(pooling="cls", normalize=True, max_len=128)


@pytest.mark.parametrize(("contents", "expected"), [
    ({}, None),
    ({"config.json": {"model_type": "bert"}}, None),
    ({"modules.json": {"not": "a list"}}, None),  # what is not sentence-transformers' shape is not read
    ({"sentence_bert_config.json": {"max_seq_length": 64}}, SentenceTransformers(None, False, 64)),
    ({"modules.json": MODULES[:1]}, SentenceTransformers(None, False, None)),
    ({"modules.json": MODULES}, SentenceTransformers(None, True, None)),  # its Pooling folder has no config.json
])
def test_what_the_checkpoint_does_not_say_is_none(tmp_path, contents, expected):
    assert read_sentence_transformers(_files(tmp_path, **contents), 512) == expected


@pytest.mark.parametrize(("contents", "match"), [
    ({"sentence_bert_config.json": {"max_seq_length": 1000}}, r"max_seq_length 1000 is not in \[2, 512\]"),
    ({"sentence_bert_config.json": {"max_seq_length": "128"}}, "max_seq_length must be an integer, got '128'"),
    ({"modules.json": MODULES, "1_Pooling__config.json": {"pooling_mode_weightedmean_tokens": True}},
     r"1_Pooling/config.json asks for pooling \['pooling_mode_weightedmean_tokens'\]; attnkit pools by one of"),
    ({"modules.json": "[oops"}, "modules.json is not valid JSON"),
])
def test_refusals_name_the_file(tmp_path, contents, match):
    with pytest.raises(ValueError, match=f"^{tmp_path}: .*{match}"):
        read_sentence_transformers(_files(tmp_path, **contents), 512)
