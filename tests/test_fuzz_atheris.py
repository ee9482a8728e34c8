"""The coverage-guided fuzzer (tests/fuzz/atheris_ops.py) for a bounded time: no crash, no exception
other than the clear errors. Skipped where atheris is not installed (it is in the test extra on
x86-64 Linux, where it has wheels)."""

import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("atheris", reason="atheris is not installed (test extra, x86-64 Linux only)")

HARNESS = Path(__file__).resolve().parent / "fuzz" / "atheris_ops.py"


def test_atheris_finds_nothing_in_the_ops(tmp_path):
    result = subprocess.run([sys.executable, str(HARNESS), "-max_total_time=15", "-seed=1", "-rss_limit_mb=4096",
                             f"-artifact_prefix={tmp_path}/"], capture_output=True, text=True, timeout=300)
    tail = (result.stdout + result.stderr)[-3000:]
    assert result.returncode == 0, tail
    assert "Done" in tail and not list(tmp_path.iterdir()), tail
