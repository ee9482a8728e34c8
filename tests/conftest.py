"""Shared fixtures: every-ISA kernel runs, Hypothesis profiles, the external data directory."""

import os
import warnings
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

REPO_ROOT = Path(__file__).resolve().parents[1]

# After a failure, Hypothesis's pytest plugin imports its patch writer, which imports libcst when
# that is installed; libcst emits a DeprecationWarning at import, and "warnings are errors" turns it
# into an INTERNALERROR that hides the real failure. Import it now, with warnings silenced.
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    try:
        import hypothesis.extra._patching  # noqa: F401
    except ImportError:
        pass

# "ci" keeps the whole suite (every ISA variant included) to a few minutes on 2 cores;
# HYPOTHESIS_PROFILE=thorough is for a nightly or pre-release run.
settings.register_profile("ci", deadline=None, max_examples=100, suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("thorough", deadline=None, max_examples=500, suppress_health_check=[HealthCheck.too_slow])
# Under AddressSanitizer (test_sanitizers.py) everything runs several times slower.
settings.register_profile("sanitize", deadline=None, max_examples=15, suppress_health_check=list(HealthCheck))
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


def pytest_generate_tests(metafunc):
    # Imported here, not at the top, so that tests of the pure-NumPy reference run without a build.
    if "isa" in metafunc.fixturenames:
        from attnkit import _core

        metafunc.parametrize("isa", _core.available_isas(), indirect=True, scope="module")


@pytest.fixture(scope="module")
def isa(request):
    """Name of the kernel ISA the test runs under; the previous one is restored afterwards.

    Module-scoped so that Hypothesis tests may use it (the ISA is process state, the same for
    every example) and pytest groups the tests of a module by ISA.
    """
    from attnkit import _core

    previous = _core.get_isa()
    _core.set_isa(request.param)
    yield request.param
    _core.set_isa(previous)


@pytest.fixture(params=[1, 2], ids=["kernel-threads-1", "kernel-threads-2"], scope="module")
def kernel_threads(request):
    """The number of threads kernels run on (restored afterwards); module-scoped like ``isa``."""
    import attnkit

    before = attnkit.get_num_threads()
    attnkit.set_num_threads(request.param)
    yield request.param
    attnkit.set_num_threads(before)


@pytest.fixture(scope="session")
def data_dir():
    """The shared data directory: $ATTNKIT_DATA, else ../shared/data next to the repository."""
    path = Path(os.environ.get("ATTNKIT_DATA", REPO_ROOT.parent / "shared" / "data"))
    if not path.is_dir():
        pytest.skip(f"test data directory {path} not found; set ATTNKIT_DATA to where it lives")
    return path


# -- attnkit serve (tests/test_serve_*.py): one real server per small model, shared by the modules that use it.
@pytest.fixture(scope="session")
def serve_models(tmp_path_factory):
    """Paths of the small models the serve tests serve (tests/serve_server.py's ``tiny_models``)."""
    pytest.importorskip("tokenizers")
    pytest.importorskip("gguf")
    from serve_server import tiny_models

    return tiny_models(tmp_path_factory.mktemp("serve-models"))


def _server(model, *options, stop=None):
    import signal

    from serve_server import Server, skip_without_serve_extra

    skip_without_serve_extra()

    server = Server(model, *options)
    yield server
    assert server.stop(stop or signal.SIGTERM) == 0, server.stderr[-3000:]
    assert "Traceback" not in server.stderr, server.stderr[-3000:]


@pytest.fixture(scope="session")
def embedding_server(serve_models):
    """``attnkit serve`` of a tiny BERT checkpoint directory (a TransformerEmbedder)."""
    yield from _server(serve_models["embedder"])


SERVE_API_KEY = "s3cret-key"


@pytest.fixture(scope="session")
def classifier_server(serve_models, tmp_path_factory):
    """``attnkit serve`` of a saved TransformerClassifier, behind the API key SERVE_API_KEY; stopped with SIGINT
    (Ctrl-C), which must end it cleanly (exit code 0, no traceback)."""
    import signal

    keys = tmp_path_factory.mktemp("serve-keys") / "keys"
    keys.write_text(f"# the tests' key\n{SERVE_API_KEY}\n")
    yield from _server(serve_models["classifier"], "--api-key-file", str(keys), stop=signal.SIGINT)


@pytest.fixture(scope="session")
def lm_server(serve_models):
    """``attnkit serve`` of a saved CausalLanguageModel (a tiny Llama, fine-tuned; with a chat template)."""
    yield from _server(serve_models["lm"])
