"""The layering is a contract (pyproject.toml's [tool.importlinter]): cli > serve > estimators > pretrained > nn >
ops, and the oracle (attnkit.reference) and test helpers (attnkit.testing) never imported by the library. CI checks
it here with import-linter's ``lint-imports``, as a developer does."""

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_every_layer_imports_only_the_ones_below_it():
    if importlib.util.find_spec("importlinter") is None:
        pytest.skip("import-linter is not installed (it is in the test extra)")
    import attnkit

    # The checker reads the installed package's sources: the same files the tests import.
    env = {**os.environ, "PYTHONPATH": str(Path(attnkit.__file__).parents[1])}
    # lint-imports run by this interpreter, not the first on PATH (another environment's, reading another attnkit).
    command = [sys.executable, "-c", "import sys; from importlinter.cli import lint_imports_command; "
               "sys.exit(lint_imports_command())", "--config", str(ROOT / "pyproject.toml")]
    result = subprocess.run(command, capture_output=True, text=True, env=env, timeout=300)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    assert "2 kept, 0 broken" in result.stdout
