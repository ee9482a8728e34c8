"""Type information: the package is marked typed, the compiled module's stub matches it, and mypy
passes over the package (with the settings in pyproject.toml)."""

import ast
import importlib.resources
import importlib.util
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from attnkit import _core

ROOT = Path(__file__).resolve().parents[1]


def test_the_package_is_marked_typed_and_ships_the_stub():
    package = importlib.resources.files("attnkit")
    assert package.joinpath("py.typed").is_file()
    assert package.joinpath("_core.pyi").is_file()


def test_the_stub_declares_exactly_the_compiled_functions_and_classes():
    stub = ast.parse(importlib.resources.files("attnkit").joinpath("_core.pyi").read_text())
    declared = {node.name for node in stub.body if isinstance(node, (ast.FunctionDef, ast.ClassDef))}
    compiled = {name for name in dir(_core) if not name.startswith("_") and callable(getattr(_core, name))}
    assert declared == compiled, "regenerate python/attnkit/_core.pyi with pybind11-stubgen attnkit._core"


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("mypy") is None and not importlib.util.find_spec("mypy"),
                    reason="mypy is not installed (it is in the test extra)")
@pytest.mark.skipif(not (ROOT / "pyproject.toml").is_file(), reason="not run from a source checkout")
def test_mypy_passes():
    result = subprocess.run([sys.executable, "-m", "mypy", "--no-incremental"], cwd=ROOT, capture_output=True,
                            text=True, timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
