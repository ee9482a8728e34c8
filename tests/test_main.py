"""The command line: ``attnkit demo`` and ``attnkit show-config``."""

from attnkit.__main__ import main


def test_demo_runs_every_part(capsys):
    assert main(["demo", "--pairs", "60", "--epochs", "1"]) == 0
    out = capsys.readouterr().out
    assert "max |attnkit - numpy reference|" in out
    assert "Seq2SeqTransformer on the case task" in out and "exact match on 200 new sentences" in out
    assert "cross-attention" in out
    assert "isa" in out


def test_show_config(capsys):
    assert main(["show-config"]) == 0
    assert "isa_available" in capsys.readouterr().out
