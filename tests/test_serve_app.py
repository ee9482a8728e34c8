"""attnkit.serve.app: every endpoint of the real server (``attnkit serve`` in a child process, driven over
loopback HTTP), answers in OpenAI's shapes equal bit for bit to the estimator's own calls, server-sent events,
the official ``openai`` client, and refusals (4xx naming the field, never a traceback)."""

import base64
import json
import time

import numpy as np
import pytest

httpx = pytest.importorskip("httpx")
from serve_server import skip_without_serve_extra  # noqa: E402

skip_without_serve_extra()

from attnkit.serve.models import load_model  # noqa: E402
from serve_server import Server  # noqa: E402

TEXTS = ["the film was good", "not very good at all", "a great movie", "the plot was dull but the acting was fun"]


@pytest.fixture(scope="module")
def local(serve_models):
    """The served models, read in this process as the server reads them."""
    return {kind: load_model(serve_models[kind], threads=1) for kind in ("embedder", "classifier", "lm")}


def _events(response):
    """The JSON payloads of a server-sent event stream, up to [DONE] (which must come last)."""
    payloads = [line[len("data: "):] for line in response.iter_lines() if line.startswith("data: ")]
    assert payloads[-1] == "[DONE]"
    return [json.loads(p) for p in payloads[:-1]]


# ------------------------------------------------------------------------------------------------- always
def test_health_models_and_metrics(embedding_server):
    with embedding_server.client() as client:
        health = client.get("/health")
        assert health.status_code == 200 and health.json()["status"] == "ok"
        models = client.get("/v1/models").json()
        assert models["object"] == "list" and models["data"][0]["id"] == "tiny-bert"
        assert models["data"][0]["object"] == "model"
        client.post("/v1/embeddings", json={"input": "the film"})
        metrics = client.get("/metrics")
    assert metrics.headers["content-type"].startswith("text/plain")
    text = metrics.text
    for name in ("attnkit_requests_total", "attnkit_request_duration_seconds_bucket", "attnkit_batch_size_bucket",
                 "attnkit_queue_depth", "attnkit_tokens_total"):
        assert f"\n{name}" in text, name
    assert 'attnkit_requests_total{route="/v1/embeddings",status="200"}' in text
    assert embedding_server.banner.startswith("attnkit serve: embeddings model tiny-bert on http://127.0.0.1:")


def test_unknown_routes_and_methods_are_refused_in_openai_shape(embedding_server):
    with embedding_server.client() as client:
        missing = client.get("/v1/nothing")
        wrong_method = client.get("/v1/embeddings")
        other_kind = client.post("/v1/completions", json={"prompt": "x"})
    assert missing.status_code == 404 and "error" in missing.json()
    assert wrong_method.status_code == 405 and "error" in wrong_method.json()
    assert other_kind.status_code == 404
    assert "of the kind 'embeddings', answered at /v1/embeddings" in other_kind.json()["error"]["message"]


# --------------------------------------------------------------------------------------------- embeddings
def test_embeddings_equal_the_in_process_call_bit_for_bit(embedding_server, local):
    expected = local["embedder"].embed(TEXTS)
    with embedding_server.client() as client:
        floats = client.post("/v1/embeddings", json={"input": TEXTS, "model": "tiny-bert"}).json()
        packed = client.post("/v1/embeddings", json={"input": TEXTS, "encoding_format": "base64"}).json()
        one = client.post("/v1/embeddings", json={"input": TEXTS[1]}).json()
    assert floats["object"] == "list" and floats["model"] == "tiny-bert"
    assert [d["index"] for d in floats["data"]] == [0, 1, 2, 3] and floats["data"][0]["object"] == "embedding"
    assert np.array_equal(np.array([d["embedding"] for d in floats["data"]], dtype=np.float32), expected)
    decoded = np.stack([np.frombuffer(base64.b64decode(d["embedding"]), dtype="<f4") for d in packed["data"]])
    assert np.array_equal(decoded, expected)
    assert np.array_equal(np.array(one["data"][0]["embedding"], dtype=np.float32), expected[1])
    tokens = sum(local["embedder"].count_tokens(TEXTS))
    assert floats["usage"] == {"prompt_tokens": tokens, "total_tokens": tokens}


def test_a_content_length_with_whitespace_around_it_is_read(embedding_server):
    import socket

    host, port = embedding_server.url.split("//")[1].rsplit(":", 1)
    body = b'{"input": "ok"}'
    with socket.create_connection((host, int(port)), timeout=30) as conn:  # HTTP allows "Content-Length: 15 "
        conn.sendall(b"POST /v1/embeddings HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     b"Content-Length: %d \r\nConnection: close\r\n\r\n%s" % (len(body), body))
        answer = b""
        while chunk := conn.recv(65536):
            answer += chunk
    assert answer.startswith(b"HTTP/1.1 200"), answer[:200]


@pytest.fixture(scope="module")
def small_body_server(serve_models):
    """The embedder served with a body limit of 200 bytes."""
    server = Server(serve_models["embedder"], "--max-body-bytes", "200")
    yield server
    server.stop()


def _raw_post(server, head, body_parts, close_early=False):
    """Send a POST of ``head`` (request line and headers, without the blank line) and ``body_parts`` on one
    connection; the status line and body of the answer (b"" when ``close_early``: the client leaves)."""
    import socket

    host, port = server.url.split("//")[1].rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=30) as conn:
        conn.sendall(head + b"\r\nConnection: close\r\n\r\n")
        for part in body_parts:
            conn.sendall(part)
            time.sleep(0.01)
        if close_early:
            return b""
        answer = b""
        while chunk := conn.recv(65536):
            answer += chunk
    return answer


def _chunked(parts):
    return [b"%x\r\n%s\r\n" % (len(p), p) for p in parts] + [b"0\r\n\r\n"]


def test_bodies_over_the_limit_are_refused_announced_or_not(small_body_server, local):
    big = json.dumps({"input": "word " * 60}).encode()
    with small_body_server.client() as client:
        announced = client.post("/v1/embeddings", content=big, headers={"Content-Type": "application/json"})
    assert announced.status_code == 413 and "limit of 200 bytes" in announced.json()["error"]["message"]
    head = b"POST /v1/embeddings HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked"
    streamed = _raw_post(small_body_server, head, _chunked([big[:100], big[100:]]))
    assert streamed.startswith(b"HTTP/1.1 413") and b"limit of 200 bytes" in streamed
    small = json.dumps({"input": TEXTS[:2]}).encode()  # under the limit, in three chunks: read whole
    answer = _raw_post(small_body_server, head, _chunked([small[:10], small[10:30], small[30:]]))
    assert answer.startswith(b"HTTP/1.1 200")
    rows = [d["embedding"] for d in json.loads(answer.split(b"\r\n\r\n", 1)[1])["data"]]
    assert np.array_equal(np.array(rows, dtype=np.float32), local["embedder"].embed(TEXTS[:2]))


def test_a_client_that_leaves_before_its_body_is_sent_does_not_hurt_the_server(small_body_server):
    head = b"POST /v1/embeddings HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 150"
    _raw_post(small_body_server, head, [b'{"input": "half'], close_early=True)
    with small_body_server.client() as client:
        assert client.get("/health").json()["status"] == "ok"
        assert client.post("/v1/embeddings", json={"input": "ok"}).status_code == 200
    assert "Traceback" not in small_body_server.stderr


@pytest.mark.parametrize(("body", "status", "param"), [
    ({}, 400, "input"),
    ({"input": 3}, 400, "input"),
    ({"input": []}, 400, "input"),
    ({"input": ["ok", 5]}, 400, "input[1]"),
    ({"input": [[1, 2, 3]]}, 400, "input[0]"),
    ({"input": "ok", "encoding_format": "int8"}, 400, "encoding_format"),
    ({"input": "ok", "dimensions": 3}, 400, "dimensions"),
    ({"input": "ok", "model": 7}, 400, "model"),
    ({"input": ["a"] * 257}, 413, "input"),
])
def test_embedding_requests_of_the_wrong_shape_are_refused_naming_the_field(embedding_server, body, status, param):
    with embedding_server.client() as client:
        response = client.post("/v1/embeddings", json=body)
    assert response.status_code == status
    error = response.json()["error"]
    assert error["param"] == param and f"'{param}'" in error["message"]
    assert "Traceback" not in response.text


@pytest.mark.parametrize("content", [b"{not json", b"[1, 2]", b"\xff\xfe", b"", b"[" * 100_000])
def test_malformed_json_is_a_400_without_a_traceback(embedding_server, content):
    with embedding_server.client() as client:
        response = client.post("/v1/embeddings", content=content, headers={"content-type": "application/json"})
    assert response.status_code == 400
    assert "JSON" in response.json()["error"]["message"] and "Traceback" not in response.text


# --------------------------------------------------------------------------------------------- classifier
def test_classify_gives_labels_with_the_in_process_probabilities(classifier_server, local):
    from conftest import SERVE_API_KEY

    expected = local["classifier"].classify(TEXTS)
    with classifier_server.client(headers={"Authorization": f"Bearer {SERVE_API_KEY}"}) as client:
        response = client.post("/v1/classify", json={"input": TEXTS})
        refused = client.post("/v1/classify", json={"input": {"text": "x"}})
    data = response.json()["data"]
    assert [[p["label"] for p in d["probabilities"]] for d in data] == [["negative", "positive"]] * 4
    got = np.array([[p["probability"] for p in d["probabilities"]] for d in data])
    assert np.array_equal(got, expected)
    assert [d["label"] for d in data] == [["negative", "positive"][int(np.argmax(row))] for row in expected]
    assert refused.status_code == 400 and refused.json()["error"]["param"] == "input"


# --------------------------------------------------------------------------------------------- generation
def test_completions_equal_generate_bit_for_bit(lm_server, local):
    lm = local["lm"].estimator
    with lm_server.client() as client:
        greedy = client.post("/v1/completions", json={"prompt": "Hello world", "max_tokens": 12,
                                                      "temperature": 0}).json()
        sampled = client.post("/v1/completions", json={"prompt": "Hello", "max_tokens": 10, "temperature": 0.8,
                                                       "top_p": 0.9, "seed": 7, "n": 3}).json()
        stopped = client.post("/v1/completions", json={"prompt": "Hello world", "max_tokens": 12,
                                                       "temperature": 0, "stop": greedy["choices"][0]["text"][3:5]})
    assert greedy["object"] == "text_completion" and greedy["id"].startswith("cmpl-")
    assert greedy["choices"][0]["text"] == lm.generate(["Hello world"], 12)[0]
    assert greedy["usage"]["total_tokens"] == greedy["usage"]["prompt_tokens"] + greedy["usage"]["completion_tokens"]
    assert [c["text"] for c in sampled["choices"]] == lm.generate(
        ["Hello"], 10, strategy="sample", temperature=0.8, top_p=0.9, n_returns=3, random_state=7)[0]
    assert [c["index"] for c in sampled["choices"]] == [0, 1, 2]
    assert stopped.json()["choices"][0]["text"] == greedy["choices"][0]["text"][:3]
    assert stopped.json()["choices"][0]["finish_reason"] == "stop"


def test_streamed_completion_is_the_same_text_in_pieces(lm_server, local):
    lm = local["lm"].estimator
    with lm_server.client() as client, client.stream(
            "POST", "/v1/completions", json={"prompt": "Hello", "max_tokens": 20, "temperature": 0,
                                             "stream": True}) as response:
        assert response.headers["content-type"].startswith("text/event-stream")
        events = _events(response)
    pieces = [e["choices"][0]["text"] for e in events]
    assert len([p for p in pieces if p]) > 1
    assert "".join(pieces) == lm.generate(["Hello"], 20)[0]
    assert events[-1]["choices"][0]["finish_reason"] in ("stop", "length")


def test_chat_completions_stream_and_not(lm_server, local):
    lm = local["lm"].estimator
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hello"}]
    expected = lm.chat(messages, max_new_tokens=15)
    with lm_server.client() as client:
        whole = client.post("/v1/chat/completions", json={"messages": messages, "max_tokens": 15,
                                                          "temperature": 0}).json()
        with client.stream("POST", "/v1/chat/completions", json={"messages": messages, "max_tokens": 15,
                                                                 "temperature": 0, "stream": True}) as response:
            events = _events(response)
    assert whole["object"] == "chat.completion"
    assert whole["choices"][0]["message"] == {"role": "assistant", "content": expected}
    assert events[0]["choices"][0]["delta"]["role"] == "assistant"
    assert {e["object"] for e in events} == {"chat.completion.chunk"}
    assert "".join(e["choices"][0]["delta"].get("content", "") for e in events) == expected


@pytest.mark.parametrize(("route", "body", "param"), [
    ("/v1/completions", {"prompt": 5}, "prompt"),
    ("/v1/completions", {"prompt": ["a", "b"]}, "prompt"),
    ("/v1/completions", {"prompt": "a", "max_tokens": 0}, "max_tokens"),
    ("/v1/completions", {"prompt": "a", "max_tokens": "10"}, "max_tokens"),
    ("/v1/completions", {"prompt": "a", "temperature": 3}, "temperature"),
    ("/v1/completions", {"prompt": "a", "top_p": 0}, "top_p"),
    ("/v1/completions", {"prompt": "a", "n": 2, "temperature": 0}, "n"),
    ("/v1/completions", {"prompt": "a", "n": 2, "stream": True}, "n"),
    ("/v1/completions", {"prompt": "a", "seed": -1}, "seed"),
    ("/v1/completions", {"prompt": "a", "stop": [""]}, "stop"),
    ("/v1/completions", {"prompt": "a", "stream": "yes"}, "stream"),
    ("/v1/completions", {"prompt": "a", "logprobs": 2}, "logprobs"),
    ("/v1/chat/completions", {"messages": []}, "messages"),
    ("/v1/chat/completions", {"messages": [{"role": "robot", "content": "x"}]}, "messages[0].role"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": 3}]}, "messages[0].content"),
])
def test_generation_requests_of_the_wrong_shape_are_refused_naming_the_field(lm_server, route, body, param):
    with lm_server.client() as client:
        response = client.post(route, json=body)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["param"] == param and f"'{param}'" in error["message"]


def test_long_inputs_are_truncated_by_default_and_refused_when_configured(embedding_server, serve_models):
    from serve_server import Server

    long = "the film was good and " * 40  # 202 tokens for a model of 20 positions
    with embedding_server.client() as client:
        response = client.post("/v1/embeddings", json={"input": long})
    assert response.status_code == 200 and response.json()["usage"]["prompt_tokens"] == 20  # what it reads
    strict = {kind: Server(serve_models[kind], "--long-inputs", "refuse") for kind in ("embedder", "lm")}
    try:
        with strict["embedder"].client() as client:
            assert client.post("/v1/embeddings", json={"input": ["a film", "the film was good"]}).status_code == 200
            one = client.post("/v1/embeddings", json={"input": long})
            many = client.post("/v1/embeddings", json={"input": ["a film", long, long]})
        with strict["lm"].client() as client:
            assert client.post("/v1/completions", json={"prompt": "Hello", "max_tokens": 2}).status_code == 200
            prompt = client.post("/v1/completions", json={"prompt": long, "max_tokens": 2})
            chat = client.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": long}]})
    finally:
        for server in strict.values():
            assert server.stop() == 0, server.stderr[-3000:]
    assert (one.status_code, one.json()["error"]["param"]) == (413, "input")
    assert one.json()["error"]["message"].startswith("'input' has 202 tokens, more than this model's 20 positions")
    assert (many.status_code, many.json()["error"]["param"]) == (413, "input[1]")
    assert "'input[1]' (and 1 more) has 202 tokens" in many.json()["error"]["message"]
    assert (prompt.status_code, prompt.json()["error"]["param"]) == (413, "prompt")
    assert "more than this model's 64 positions" in prompt.json()["error"]["message"]
    assert (chat.status_code, chat.json()["error"]["param"]) == (413, "messages")


# ------------------------------------------------------------------------------------------ openai client
def test_the_official_openai_client_works(embedding_server, lm_server, local):
    openai = pytest.importorskip("openai")
    embeddings = openai.OpenAI(base_url=f"{embedding_server.url}/v1", api_key="unused", max_retries=0)
    result = embeddings.embeddings.create(model="tiny-bert", input=TEXTS[:2])  # the client asks for base64
    assert np.array_equal(np.array([d.embedding for d in result.data], dtype=np.float32),
                          local["embedder"].embed(TEXTS[:2]))
    lm = local["lm"].estimator
    client = openai.OpenAI(base_url=f"{lm_server.url}/v1", api_key="unused", max_retries=0)
    completion = client.completions.create(model="tiny-llama.npz", prompt="Hello", max_tokens=8, temperature=0)
    assert completion.choices[0].text == lm.generate(["Hello"], 8)[0]
    messages = [{"role": "user", "content": "Hello"}]
    chunks = client.chat.completions.create(model="tiny-llama.npz", messages=messages, max_tokens=8,
                                            temperature=0, stream=True)
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == lm.chat(messages, max_new_tokens=8)
