"""The C++ kernels under AddressSanitizer + UndefinedBehaviorSanitizer.

The extension is built a second time, with ``-DATTNKIT_SANITIZE=address,undefined``, into its own
folder (``build-sanitize/``, reused between runs so that a rebuild is incremental), and the kernels'
property tests and the fuzz suite run against that build in a subprocess, with a reduced Hypothesis
budget. Any sanitizer report fails the test. Skipped, with the reason, where cmake, the build
backend or the compiler's sanitizer runtimes are missing.
"""

import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from attnkit import _core

ROOT = Path(__file__).resolve().parents[1]
BUILD = ROOT / "build-sanitize"
SITE = BUILD / "site"
TESTS = [f"tests/test_ops_{name}.py" for name in ("attention", "attention_backward", "linear_attention",
                                                  "linear_attention_backward", "softmax", "random_features",
                                                  "normalization", "activations", "cross_entropy", "positions",
                                                  "matmul", "int8_linear", "optim", "block_quantized",
                                                  "decoding_plan")]
TESTS.append("tests/test_fuzz_ops.py")
REPORTS = ("ERROR: AddressSanitizer", "runtime error:", "ERROR: LeakSanitizer")


def _runtime(name):
    """Path of the C++ compiler's sanitizer runtime, or None."""
    compiler = os.environ.get("CXX") or shutil.which("g++") or shutil.which("c++")
    if compiler is None:
        return None
    found = subprocess.run([compiler, f"-print-file-name={name}"], capture_output=True, text=True).stdout.strip()
    return found if found and os.path.isabs(found) and os.path.exists(found) else None


def _skip_reason():
    if not (ROOT / "CMakeLists.txt").is_file():
        return "not run from a source checkout"
    if shutil.which("cmake") is None:
        return "cmake is not on PATH"
    for module in ("scikit_build_core", "pybind11"):
        if importlib.util.find_spec(module) is None:
            return f"{module} is not installed (it is in the test extra)"
    if _runtime("libasan.so") is None or _runtime("libubsan.so") is None:
        return "the C++ compiler has no AddressSanitizer/UBSan runtime (libasan.so, libubsan.so)"
    if any(type(finder).__module__.startswith("_editable") for finder in sys.meta_path):
        # An editable install's import hook answers before PYTHONPATH: the subprocess would test it.
        return "attnkit is an editable install here; the sanitizer step runs from a regular install (.ci/run)"
    return None


@pytest.mark.slow
@pytest.mark.skipif(_skip_reason() is not None, reason=str(_skip_reason()))
def test_kernels_under_address_and_undefined_behaviour_sanitizers():
    build = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-deps", "--no-build-isolation", "--upgrade", "--quiet",
         "--target", str(SITE), f"-Cbuild-dir={BUILD / 'cmake'}", "-Ccmake.build-type=RelWithDebInfo",
         "-Ccmake.define.ATTNKIT_SANITIZE=address,undefined",
         f"-Ccmake.define.ATTNKIT_ISAS={';'.join(_core.available_isas())}", str(ROOT)],
        capture_output=True, text=True, timeout=3000)
    assert build.returncode == 0, build.stdout[-3000:] + build.stderr[-3000:]
    # The C++ runtime preloaded beside ASan's: python is no C++ program, so libstdc++ arrives with the extension,
    # after ASan has looked for the __cxa_throw it wraps, and the first exception a binding raises (a refused
    # argument, as ops.adamw_update_many's binding checks its lists) then aborts in ASan's own CHECK.
    preload = " ".join(os.path.realpath(path) for path in (_runtime("libasan.so"), _runtime("libstdc++.so")) if path)
    env = {**os.environ, "PYTHONPATH": str(SITE), "LD_PRELOAD": preload,
           # CPython's allocations look like leaks to LeakSanitizer; the kernels' memory is checked by ASan.
           "ASAN_OPTIONS": "detect_leaks=0:halt_on_error=1:detect_odr_violation=0",
           "UBSAN_OPTIONS": "halt_on_error=1:print_stacktrace=1", "HYPOTHESIS_PROFILE": "sanitize"}
    probe = "import attnkit._core as c; print(c.__file__, c.build_info()['sanitize'])"
    where = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, cwd=ROOT / "tests")
    path, _, sanitize = where.stdout.strip().rpartition(" ")
    assert path.startswith(str(SITE)) and sanitize == "address,undefined", \
        f"the sanitized build is not the one imported: {where}"
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", *TESTS], env=env,
                         capture_output=True, text=True, cwd=ROOT, timeout=3000)
    output = run.stdout + run.stderr
    assert not any(report in output for report in REPORTS), output[-6000:]
    assert run.returncode == 0, output[-6000:]
