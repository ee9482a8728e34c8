"""``attnkit demo`` (attention, classifier and seq2seq parts) and ``attnkit show-config``."""

import os
import sys

import pytest

from attnkit import __main__ as cli


@pytest.fixture
def quick_demo(monkeypatch):
    monkeypatch.setattr(cli, "DEMO_CLASSIFIER", {**cli.DEMO_CLASSIFIER, "max_iter": 1})


def test_demo_prints_both_models_and_a_text_map_without_matplotlib(quick_demo, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "matplotlib.pyplot", None)
    cli.demo_classifier()
    out = capsys.readouterr().out
    assert "bag of words and bigrams + logistic regression: accuracy 0." in out
    assert "TransformerClassifier (d_model=32" in out and "accuracy " in out
    lines = out.splitlines()
    header = next(i for i, line in enumerate(lines) if "<cls>" in line)
    assert lines[header].split() == ["<cls>", "the", "movie", "was", "not", "very", "good", "and", "truly", "awful"]
    assert len(lines[header + 1 :]) == 10 and lines[header + 1].split()[0] == "<cls>"


def test_demo_draws_a_png_with_matplotlib(quick_demo, capsys):
    pytest.importorskip("matplotlib").use("Agg")
    cli.demo_classifier()
    path = capsys.readouterr().out.strip().splitlines()[-1].split("drawn to ")[1]
    assert os.path.getsize(path) > 1000


def test_demo_runs_every_part(quick_demo, capsys):
    assert cli.main(["demo", "--pairs", "60", "--epochs", "1"]) == 0
    out = capsys.readouterr().out
    assert "max |attnkit - numpy reference|" in out
    assert "TransformerClassifier" in out
    assert "Seq2SeqTransformer on the case task" in out and "exact match on 200 new sentences" in out
    assert "cross-attention (rows: generated characters" in out
    assert "isa_available" in out


def test_show_config(capsys):
    assert cli.main(["show-config"]) == 0
    assert "isa_available" in capsys.readouterr().out
