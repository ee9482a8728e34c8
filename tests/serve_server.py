"""The real server in a child process for the serve tests: ``attnkit serve MODEL --port 0`` started as a user
starts it, its address read from the line it prints, stopped with SIGTERM; and the small models it serves,
written or fitted in seconds."""

import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest

READY = re.compile(r"attnkit serve: (\S+) model (\S+) on (http://\S+) ")
START_TIMEOUT = 60  # seconds: importing, reading the model, binding (a loaded 2-core machine is slow)


def skip_without_serve_extra():
    """Skip the calling test (or module) when uvicorn or starlette is missing; neither is imported here."""
    import importlib.util

    if any(importlib.util.find_spec(name) is None for name in ("uvicorn", "starlette")):
        pytest.skip("the serve extra is not installed (pip install 'attnkit[serve]')", allow_module_level=True)


class Server:
    """``attnkit serve`` in a child process: ``url``, ``stderr`` (what it logged) and ``stop()``."""

    def __init__(self, model, *options, env=None):
        command = [sys.executable, "-m", "attnkit", "serve", str(model), "--port", "0", "--threads", "1", *options]
        self.process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                        env={**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})})
        self.stderr_lines: list[str] = []
        self._drain = threading.Thread(target=self._drain_stderr, daemon=True)
        self._drain.start()
        self.banner = self._wait_ready()
        self.kind, self.name, self.url = READY.search(self.banner).groups()

    def _drain_stderr(self):
        for line in self.process.stderr:
            self.stderr_lines.append(line)

    def _wait_ready(self):
        deadline = time.monotonic() + START_TIMEOUT
        result: list[str] = []
        reader = threading.Thread(target=lambda: result.append(self.process.stdout.readline()), daemon=True)
        reader.start()
        reader.join(max(0.0, deadline - time.monotonic()))
        if not result or not READY.search(result[0]):
            self.process.kill()
            self.wait()
            raise RuntimeError(f"the server did not start: {result}\n{''.join(self.stderr_lines)[-3000:]}")
        return result[0]

    @property
    def stderr(self):
        return "".join(self.stderr_lines)

    def client(self, **kwargs):
        return httpx.Client(base_url=self.url, timeout=60, **kwargs)

    def metric(self, name, headers=None):
        """The sum of a metric's samples named exactly ``name`` (any labels)."""
        text = httpx.get(f"{self.url}/metrics", headers=headers, timeout=30).text
        return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
                   if line.startswith(name) and line[len(name)] in " {")

    def send(self, number=signal.SIGTERM):
        """Send the server a signal."""
        self.process.send_signal(number)

    def stop(self, number=signal.SIGTERM, timeout=30):
        """A signal (SIGTERM), then the exit code (its pipes closed)."""
        if self.process.poll() is None:
            self.process.send_signal(number)
        try:
            return self.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            return self.wait(timeout)

    def wait(self, timeout=30):
        """The exit code, once the process has ended (its pipes closed)."""
        code = self.process.wait(timeout)
        self._drain.join(timeout)
        self.process.stdout.close()
        self.process.stderr.close()
        return code


def tiny_models(folder):
    """{"embedder": a tiny BERT checkpoint directory, "classifier": a saved TransformerClassifier, "gguf": a tiny
    Llama GGUF file with a chat template (random weights), "lm": that Llama fine-tuned for a second to write
    English and saved (its chat template kept), "seq2seq": a saved Seq2SeqTransformer (not servable)}."""
    from attnkit import CausalLanguageModel, Seq2SeqTransformer, TransformerClassifier
    from attnkit.datasets import make_case_pairs, make_negation_sentences
    from attnkit.testing.gguf import write_tiny_llama_gguf
    from tiny_bert import write_tiny_bert

    folder = Path(folder)
    paths = {"embedder": write_tiny_bert(folder / "tiny-bert"), "gguf": folder / "tiny-llama.gguf",
             "lm": folder / "tiny-llama.npz", "classifier": folder / "classifier.npz",
             "seq2seq": folder / "seq2seq.npz"}
    write_tiny_llama_gguf(paths["gguf"])  # with a ChatML template
    texts = ["Hello world, the cat sat on the mat and the dog sat on the log. " * 32]  # one text: no end in sight
    CausalLanguageModel(pretrained=str(paths["gguf"]), context_length=64, max_iter=60, batch_size=8,
                        learning_rate=1e-2, validation_fraction=None, early_stopping=False, eval_interval=60,
                        random_state=0).fit(texts).save(paths["lm"])
    X, y = make_negation_sentences(120, random_state=0)
    labels = ["negative", "positive"]
    TransformerClassifier(d_model=16, n_heads=2, d_ff=32, n_layers=1, max_iter=2, early_stopping=False,
                          random_state=0).fit(X, [labels[v] for v in y]).save(paths["classifier"])
    X, y = make_case_pairs(10, random_state=0)
    Seq2SeqTransformer(d_model=8, n_heads=2, d_ff=16, encoder_layers=1, decoder_layers=1, max_iter=1,
                       max_target_len=8, early_stopping=False, random_state=0).fit(X, y).save(paths["seq2seq"])
    return paths
