"""The layering is a contract (pyproject.toml's [tool.importlinter]): cli > serve > estimators > pretrained > nn >
ops, and the oracle (attnkit.reference) and test helpers (attnkit.testing) never imported by the library. CI checks
it here with import-linter's ``lint-imports``, as a developer does."""

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_every_layer_imports_only_the_ones_below_it():
    lint_imports = shutil.which("lint-imports")
    if lint_imports is None:
        pytest.skip("import-linter is not installed (it is in the test extra)")
    import attnkit

    # The checker reads the installed package's sources: the same files the tests import.
    env = {**os.environ, "PYTHONPATH": str(Path(attnkit.__file__).parents[1])}
    result = subprocess.run([lint_imports, "--config", str(ROOT / "pyproject.toml")], capture_output=True, text=True,
                            env=env, timeout=300)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    assert "2 kept, 0 broken" in result.stdout
