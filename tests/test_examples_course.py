"""The course's gallery scripts (examples/course/plot_*.py): each states what it reproduces and runs to its end,
as sphinx-gallery runs it (in its own directory, matplotlib drawing off screen)."""

import ast
import pathlib
import re
import runpy

import pytest

matplotlib = pytest.importorskip("matplotlib")
matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

COURSE = pathlib.Path(__file__).resolve().parents[1] / "examples" / "course"
SCRIPTS = sorted(COURSE.glob("plot_*.py"))


def test_the_gallery_has_its_scripts():
    assert len(SCRIPTS) >= 12, [p.name for p in SCRIPTS]
    readme = (COURSE / "README.txt").read_text(encoding="utf-8").splitlines()
    assert readme[0].strip() and set(readme[1].strip()) == {"="} and len(readme[1].strip()) >= len(readme[0].strip())


@pytest.mark.parametrize("path", SCRIPTS, ids=[p.stem for p in SCRIPTS])
def test_docstring_has_title_and_reproduces(path):
    doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8")), clean=True)
    assert doc, f"{path.name} has no module docstring"
    lines = doc.splitlines()
    title, underline = lines[0].strip(), lines[1].strip()
    assert title and set(underline) == {"="} and len(underline) >= len(title), f"{path.name}: no '=' underlined title"
    reproduces = [line for line in lines if line.startswith("Reproduces: ")]
    assert len(reproduces) == 1, f"{path.name}: needs one line starting with 'Reproduces: '"
    statement = " ".join(lines[lines.index(reproduces[0]):])
    assert re.search(r"got: .*\d", statement), f"{path.name}: the 'Reproduces:' sentence must say what it got"


@pytest.mark.parametrize("path", SCRIPTS, ids=[p.stem for p in SCRIPTS])
def test_script_runs(path, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(plt, "show", lambda *args, **kwargs: None)  # Agg cannot show; sphinx-gallery collects
    try:
        runpy.run_path(str(path), run_name="__main__")
        assert plt.get_fignums(), f"{path.name} drew no figure"
    finally:
        plt.close("all")
    assert capsys.readouterr().out.strip(), f"{path.name} printed nothing"
