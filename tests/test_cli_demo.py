"""attnkit.cli.demo: ``attnkit demo`` (attention, classifier and seq2seq parts); the dispatch of attnkit.cli
(``attnkit show-config``, ``python -m attnkit``)."""

import os
import sys

import pytest

from attnkit.cli import demo, main


@pytest.fixture
def quick_demo(monkeypatch):
    monkeypatch.setattr(demo, "DEMO_CLASSIFIER", {**demo.DEMO_CLASSIFIER, "max_iter": 1})


def test_demo_prints_both_models_and_a_text_map_without_matplotlib(quick_demo, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "matplotlib.pyplot", None)
    demo.demo_classifier()
    out = capsys.readouterr().out
    assert "bag of words and bigrams + logistic regression: accuracy 0." in out
    assert "TransformerClassifier (d_model=32" in out and "accuracy " in out
    lines = out.splitlines()
    header = next(i for i, line in enumerate(lines) if "<cls>" in line)
    assert lines[header].split() == ["<cls>", "the", "movie", "was", "not", "very", "good", "and", "truly", "awful"]
    assert len(lines[header + 1 :]) == 10 and lines[header + 1].split()[0] == "<cls>"


def test_demo_draws_a_png_with_matplotlib(quick_demo, capsys):
    pytest.importorskip("matplotlib").use("Agg")
    demo.demo_classifier()
    path = capsys.readouterr().out.strip().splitlines()[-1].split("drawn to ")[1]
    assert os.path.getsize(path) > 1000


def test_demo_runs_every_part(quick_demo, capsys):
    assert main(["demo", "--pairs", "60", "--epochs", "1"]) == 0
    out = capsys.readouterr().out
    assert "max |attnkit - numpy reference|" in out
    assert "TransformerClassifier" in out
    assert "Seq2SeqTransformer on the case task" in out and "exact match on 200 new sentences" in out
    assert "cross-attention (rows: generated characters" in out
    assert "isa_available" in out


@pytest.mark.parametrize("options", [["--pairs", "0"], ["--pairs", "-3"], ["--epochs", "0"]])
def test_bad_options_exit_2_before_any_work(options, capsys):
    assert main(["demo", *options]) == 2
    err = capsys.readouterr()
    assert f"{options[0]} must be >= 1" in err.err and "Traceback" not in err.err and err.out == ""


def test_version(capsys):
    import attnkit

    with pytest.raises(SystemExit) as done:
        main(["--version"])
    assert done.value.code == 0 and capsys.readouterr().out == f"attnkit {attnkit.__version__}\n"


def test_show_config(capsys):
    assert main(["show-config"]) == 0
    assert "isa_available" in capsys.readouterr().out


def test_python_dash_m_attnkit_dispatches_to_the_command():
    import subprocess

    result = subprocess.run([sys.executable, "-m", "attnkit", "show-config"], capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0 and "isa_available" in result.stdout
