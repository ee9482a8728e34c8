"""attnkit.serve.batcher: concurrent requests gathered into calls of the model within the token budget, each
answered with its own rows in order, equal bit for bit to the estimator's call on its inputs alone; a bounded
queue (429 and Retry-After over HTTP); a stream whose client goes away stops generating; SIGTERM answers every
request already accepted."""

import asyncio
import threading
import time

import numpy as np
import pytest

httpx = pytest.importorskip("httpx")
from serve_server import skip_without_serve_extra  # noqa: E402

skip_without_serve_extra()

from attnkit.serve import batcher as batcher_module  # noqa: E402
from attnkit.serve.batcher import Batcher, QueueFull, ShuttingDown  # noqa: E402
from attnkit.serve.metrics import Metrics  # noqa: E402
from attnkit.serve.models import load_model  # noqa: E402
from serve_server import Server  # noqa: E402

TEXTS = ["the film was good", "not very good at all", "a great movie", "the plot was dull but the acting was fun",
         "it was awful", "fun", "the acting was great and the plot was not dull", "a movie"]


@pytest.fixture(scope="module")
def embedder(serve_models):
    return load_model(serve_models["embedder"], threads=1)


def _histogram_counts(histogram):
    """{label key: (observations, sum)} of a Histogram."""
    return {key: (sum(counts), total) for key, (counts, total) in histogram._values.items()}


def test_queued_requests_are_joined_within_the_token_budget_and_answered_with_their_own_rows(embedder):
    requests = [TEXTS[i : i + 1 + i % 3] for i in range(8)]
    tokens = [sum(embedder.count_tokens(r)) for r in requests]
    budget = sum(tokens[:3])  # the first three requests fit one call, exactly

    async def main():
        batcher = Batcher(embedder, max_batch_tokens=budget, max_queue=100, metrics=Metrics())
        pending = [asyncio.ensure_future(batcher.submit("embed", r)) for r in requests]
        await asyncio.sleep(0)  # every job queued before the worker starts: it finds them all waiting
        batcher.start()
        answers = await asyncio.gather(*pending)
        await asyncio.to_thread(batcher.close)
        return answers, batcher.metrics

    answers, metrics = asyncio.run(main())
    for request, n_tokens, (rows, counted) in zip(requests, tokens, answers):
        assert counted == n_tokens
        assert np.array_equal(rows, embedder.embed(request))  # bit for bit, whatever it was batched with
    calls, texts = _histogram_counts(metrics.batch_size)[()]
    assert texts == sum(len(r) for r in requests)
    assert 2 <= calls < len(requests)  # joined, but not beyond the budget (all 8 would need more than 3's tokens)
    assert _histogram_counts(metrics.batch_tokens)[()] == (calls, sum(tokens))


def test_a_request_whose_texts_cannot_be_encoded_fails_alone(embedder):
    class Refusing(type(embedder)):  # the served embedder, refusing one text as a tokenizer might
        def encode(self, texts, **options):
            if "refused" in texts:
                raise ValueError("this text cannot be encoded")
            return super().encode(texts, **options)

    model = Refusing(embedder.estimator, embedder.kind, embedder.name)
    requests = [TEXTS[:2], ["refused"], TEXTS[2:3]]

    async def main():
        batcher = Batcher(model, max_batch_tokens=10_000, max_queue=100, metrics=Metrics())
        pending = [asyncio.ensure_future(batcher.submit("embed", r)) for r in requests]
        await asyncio.sleep(0)  # queued together: taken as one batch, encoded together, then each alone
        batcher.start()
        answers = await asyncio.gather(*pending, return_exceptions=True)
        await asyncio.to_thread(batcher.close)
        return answers, _histogram_counts(batcher.metrics.batch_size)[()]

    (first, refused, last), (calls, texts) = asyncio.run(main())
    assert isinstance(refused, ValueError) and "cannot be encoded" in str(refused)
    assert np.array_equal(first[0], embedder.embed(TEXTS[:2])) and np.array_equal(last[0], embedder.embed(TEXTS[2:3]))
    assert first[1] == sum(embedder.count_tokens(TEXTS[:2])) and (calls, texts) == (1, 3)


def test_a_refusing_batcher_fails_requests_with_long_texts_alone_and_quietly(embedder, capfd):
    from attnkit.serve.models import TooLong

    long = "the film was good and " * 40
    requests = [TEXTS[:2], ["fun", long], TEXTS[2:3]]

    async def main():
        batcher = Batcher(embedder, max_batch_tokens=10_000, max_queue=100, metrics=Metrics(), refuse_long=True)
        pending = [asyncio.ensure_future(batcher.submit("embed", r)) for r in requests]
        await asyncio.sleep(0)  # queued together: refused as one call, then each encoded alone
        batcher.start()
        answers = await asyncio.gather(*pending, return_exceptions=True)
        await asyncio.to_thread(batcher.close)
        return answers

    first, refused, last = asyncio.run(main())
    assert isinstance(refused, TooLong) and refused.long == [(1, 202)]
    assert np.array_equal(first[0], embedder.embed(TEXTS[:2])) and np.array_equal(last[0], embedder.embed(TEXTS[2:3]))
    assert "Traceback" not in capfd.readouterr().err  # a client's input, not the server's failure


@pytest.fixture(scope="module")
def language_model(serve_models):
    return load_model(serve_models["lm"], threads=1)


def test_queued_generations_share_decoding_steps_each_as_it_would_alone(language_model):
    greedy = {"strategy": "greedy", "max_new_tokens": 6}
    seeded = {"strategy": "sample", "temperature": 1.0, "top_p": 1.0, "random_state": 3, "max_new_tokens": 6}
    prompts = ["the film", "a movie was", "it", "the plot was not", "fun", "the acting"]
    jobs = [(p, greedy) for p in prompts[:4]] + [(p, seeded) for p in prompts[4:]] + [(prompts[0], greedy)]

    async def main():
        batcher = Batcher(language_model, max_batch_tokens=1, max_queue=100, metrics=Metrics())
        pending = [asyncio.ensure_future(batcher.submit("generate", [p], dict(o))) for p, o in jobs]
        await asyncio.sleep(0)  # every job queued before the worker starts
        batcher.start()
        answers = await asyncio.gather(*pending)
        await asyncio.to_thread(batcher.close)
        return [generation for generation, _ in answers], batcher.metrics

    generations, metrics = asyncio.run(main())
    for (prompt, options), generation in zip(jobs, generations):
        assert generation.texts == language_model.generate(prompt, dict(options)).texts  # the same tokens as alone
    # Continuous batching: the seven requests (greedy and seeded samples: each sequence draws from its own
    # generator) decode in the same steps, at most 6 (one token each), the first of them holding all seven.
    steps, rows = _histogram_counts(metrics.batch_size)[()]
    assert steps <= 6 and rows > len(jobs) * 3


def test_a_request_arriving_mid_decoding_joins_the_steps_under_way(language_model):
    """A long stream is decoding; a short request sent later is answered before the stream ends (it joined the
    steps under way rather than waiting for them to end), with the text it gets alone."""
    options = {"strategy": "greedy", "max_new_tokens": 400}

    async def main():
        batcher = Batcher(language_model, max_batch_tokens=1, max_queue=100, metrics=Metrics())
        batcher.start()
        pieces = await batcher.stream("the film", dict(options))
        first = await pieces.__anext__()
        short, _ = await batcher.submit("generate", ["a movie"], {"strategy": "greedy", "max_new_tokens": 3})
        rest = [piece async for piece in pieces]
        await asyncio.to_thread(batcher.close)
        return short, first, rest

    short, first, rest = asyncio.run(main())
    assert short.texts == language_model.generate("a movie", {"strategy": "greedy", "max_new_tokens": 3}).texts
    assert len(rest) > 5  # the stream was still going when the short request was answered
    text = first + "".join(p for p in rest[:-1])
    assert rest[-1].texts == [text] and text == "".join(language_model.stream("the film", dict(options)))


def test_after_a_batch_of_several_the_worker_waits_briefly_for_the_next_to_fill(embedder, monkeypatch):
    # The wait's cap made long (0.4 s) and its share of the last call's time unbounded, so that what is timed here
    # is the policy, not the machine: after a call of 6 jobs, the worker waits for 6 to queue, or for the cap.
    monkeypatch.setattr(batcher_module, "GATHER_SHARE", 1e6)
    monkeypatch.setattr(batcher_module, "GATHER_SECONDS", 0.4)

    async def after_six(then):
        batcher = Batcher(embedder, max_batch_tokens=10_000, max_queue=100, metrics=Metrics())
        first = [asyncio.ensure_future(batcher.submit("embed", [t])) for t in TEXTS[:6]]
        await asyncio.sleep(0)  # all 6 queued before the worker starts: one call
        batcher.start()
        await asyncio.gather(*first)
        timings = await then(batcher)
        await asyncio.to_thread(batcher.close)
        return timings, _histogram_counts(batcher.metrics.batch_size)[()]

    async def staggered(batcher):  # 6 jobs 20 ms apart: the worker waits for the sixth, then runs them at once
        jobs = []
        for text in TEXTS[:6]:
            jobs.append(asyncio.ensure_future(batcher.submit("embed", [text])))
            await asyncio.sleep(0.02)
        start = time.perf_counter()
        await asyncio.gather(*jobs)
        return time.perf_counter() - start

    async def alone_twice(batcher):  # the first waits for the cap and runs alone; after a call of one, no wait
        times = []
        for text in TEXTS[3:5]:
            start = time.perf_counter()
            await batcher.submit("embed", [text])
            times.append(time.perf_counter() - start)
        return times

    joined, (calls, texts) = asyncio.run(after_six(staggered))
    assert (calls, texts) == (2, 12) and joined < 0.3  # answered once the sixth arrived, not at the cap
    (capped, single), (calls, texts) = asyncio.run(after_six(alone_twice))
    assert (calls, texts) == (3, 8)
    assert capped >= 0.35 and single < 0.3  # a single client (a last call of one job) never waits


def test_a_full_queue_refuses_and_close_finishes_the_queued_jobs(embedder):
    async def main():
        batcher = Batcher(embedder, max_batch_tokens=1, max_queue=2, metrics=Metrics())
        first, second = (asyncio.ensure_future(batcher.submit("embed", [t])) for t in TEXTS[:2])
        await asyncio.sleep(0)
        with pytest.raises(QueueFull) as refused:
            await batcher.submit("embed", TEXTS[2:3])
        assert refused.value.retry_after >= 1
        batcher.start()
        closing = asyncio.ensure_future(asyncio.to_thread(batcher.close))
        answers = await asyncio.gather(first, second)
        await closing
        with pytest.raises(ShuttingDown):
            await batcher.submit("embed", TEXTS[:1])
        return answers

    for (rows, _), text in zip(asyncio.run(main()), TEXTS):
        assert np.array_equal(rows, embedder.embed([text]))


def test_concurrent_http_requests_each_get_their_own_rows_bit_for_bit(embedding_server, embedder):
    requests = [TEXTS[i % 8 : i % 8 + 1 + i % 4] for i in range(24)]
    results: list = [None] * len(requests)

    def send(i):
        with embedding_server.client() as client:
            results[i] = client.post("/v1/embeddings", json={"input": requests[i]}).json()

    threads = [threading.Thread(target=send, args=(i,)) for i in range(len(requests))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for request, result in zip(requests, results):
        assert np.array_equal(np.array([d["embedding"] for d in result["data"]], dtype=np.float32),
                              embedder.embed(request))


@pytest.fixture(scope="module")
def small_queue_server(serve_models):
    """The language model served with --max-queue 4 and one sequence decoding at a time (the last test of this
    module stops it with SIGTERM); long generations allowed, to keep the worker busy."""
    server = Server(serve_models["lm"], "--max-queue", "4", "--max-batch-sequences", "1", "--max-tokens", "100000")
    yield server
    server.stop()


def _wait_for_queue(server, depth):
    deadline = time.monotonic() + 10
    while server.metric("attnkit_queue_depth") < depth and time.monotonic() < deadline:
        time.sleep(0.01)


def test_a_full_queue_is_a_429_and_a_client_that_leaves_stops_its_generation(small_queue_server):
    server = small_queue_server
    with server.client() as client, client.stream("POST", "/v1/completions", json={
            "prompt": "Hello", "max_tokens": 100000, "temperature": 0, "stream": True}) as stream:
        lines = stream.iter_lines()  # kept: a finished iterator of lines would close the response
        assert next(line for line in lines if line.startswith("data: "))  # the worker is busy
        queued: list = []
        waiters = [threading.Thread(target=lambda: queued.append(httpx.post(
            f"{server.url}/v1/completions", json={"prompt": "Hi", "max_tokens": 2, "temperature": 0}, timeout=60)))
            for _ in range(4)]
        for waiter in waiters:
            waiter.start()
        _wait_for_queue(server, 4)
        refused = httpx.post(f"{server.url}/v1/completions", json={"prompt": "Hi", "max_tokens": 2}, timeout=60)
        assert refused.status_code == 429 and int(refused.headers["retry-after"]) >= 1
        assert refused.json()["error"]["type"] == "rate_limit_error"
    # the stream's client has gone: its generation stops, and the queued requests are answered
    for waiter in waiters:
        waiter.join(60)
    assert [r.status_code for r in queued] == [200] * 4
    deadline = time.monotonic() + 30
    while server.metric("attnkit_streams_cancelled_total") < 1 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert server.metric("attnkit_streams_cancelled_total") == 1
    generated = server.metric('attnkit_tokens_total{kind="generated"}')
    assert generated < 50000  # far from the 100,000 asked for


def test_sigterm_during_load_answers_every_accepted_request(small_queue_server, serve_models):
    server, lm = small_queue_server, load_model(serve_models["lm"], threads=1).estimator
    prompts = ["Hello", "Hello world", "the cat", "on the mat", "the dog"]  # one running, four queued
    answers: dict = {}

    def send(prompt):
        answers[prompt] = httpx.post(f"{server.url}/v1/completions", timeout=120,
                                     json={"prompt": prompt, "max_tokens": 600, "temperature": 0})

    threads = [threading.Thread(target=send, args=(p,)) for p in prompts]
    for thread in threads:
        thread.start()
    _wait_for_queue(server, len(prompts) - 1)
    server.send()
    for thread in threads:
        thread.join(120)
    assert server.wait(60) == 0
    for prompt in prompts:
        assert answers[prompt].status_code == 200, answers[prompt].text
        assert answers[prompt].json()["choices"][0]["text"] == lm.generate([prompt], 600)[0]
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"{server.url}/health", timeout=5)
