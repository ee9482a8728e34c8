"""attnkit.serve.server and ``attnkit serve``: the command's checks and messages, the serve extra imported only
when a server is made, and a clean stop on SIGINT."""

import socket
import subprocess
import sys

import pytest

from attnkit.cli import main


def test_import_attnkit_does_not_import_the_server_stack():
    code = "import sys, attnkit, attnkit.cli, attnkit.serve; print(sorted({'uvicorn', 'starlette'} & set(sys.modules)))"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout == "[]\n"


def test_a_missing_serve_extra_is_named(monkeypatch):
    import importlib.util

    from attnkit.serve import require_serve_extra

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None if name == "uvicorn" else real(name))
    with pytest.raises(ImportError, match=r"needs uvicorn: pip install 'attnkit\[serve\]'"):
        require_serve_extra()


@pytest.mark.parametrize(("options", "message"), [
    (["--max-queue", "0"], "--max-queue must be >= 1, got 0"),
    (["--max-batch-sequences", "0"], "--max-batch-sequences must be >= 1, got 0"),
    (["--max-batch-sequences", "33"], "--max-batch-sequences must be from 1 to 32"),
    (["--port", "70000"], "--port must be from 0 to 65535"),
    (["--threads", "100000"], "--threads must be from 1 to 1024"),  # it started, then answered every call 500
    (["--host", ""], "--host must be an address to listen on"),  # an unset $HOST listened on every interface
    (["--api-key-file", "/nonexistent/keys"], "No such file"),
])
def test_bad_options_exit_2_with_a_message(serve_models, capsys, options, message):
    assert main(["serve", str(serve_models["classifier"]), *options]) == 2
    assert message in capsys.readouterr().err


def test_an_unservable_model_or_a_busy_port_exits_2(serve_models, capsys):
    assert main(["serve", str(serve_models["seq2seq"]), "--port", "0"]) == 2
    assert "does not serve" in capsys.readouterr().err
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert main(["serve", str(serve_models["classifier"]), "--port", str(port)]) == 2
    assert f"cannot listen on 127.0.0.1:{port}" in capsys.readouterr().err  # before the model was read


def test_the_server_says_where_it_listens_and_what_it_serves(classifier_server):
    # The fixture stops this server with SIGINT and checks that it ends cleanly: exit code 0, no traceback.
    assert classifier_server.banner.startswith(
        f"attnkit serve: classifier model classifier.npz on {classifier_server.url} (/v1/models, /health, "
        "/metrics, /v1/classify); API key required; Ctrl-C or SIGTERM stops it")


def test_a_damaged_gguf_file_is_named_as_one(tmp_path, capsys):
    # it was read as an attnkit file: "not a complete .npz archive"
    damaged = tmp_path / "model.gguf"
    damaged.write_bytes(b"not a gguf at all" * 10)
    assert main(["serve", str(damaged), "--port", "0"]) == 2
    assert "is not a GGUF file (it does not start with the bytes b'GGUF'" in capsys.readouterr().err
