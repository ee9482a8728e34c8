"""GPT-style generation: attnkit's CausalLM decoding against Hugging Face transformers' GPT-2, in tokens/s.

The model: one small GPT configuration in both (4 layers, d_model 256, 4 heads, d_ff 1024, vocabulary 8,192, learned
positions, tanh GELU, tied output, float32, random weights): attnkit's ``nn.CausalLM`` and transformers'
``GPT2LMHeadModel``. For each batch size (1 and 32) and context (128, 512, 2048 tokens of prompt), each call reads
the prompt (not timed) and then generates ``--new`` tokens greedily, one step per token (timed inside the call, the
median over the calls): tokens/s counts the batch's new tokens. (The steps used to be timed as a whole call less a
call that only read the prompt: at batch 32 and 512 positions the prompt's second outweighs the 32 steps' quarter
second, and the difference of the two noisy medians once put attnkit's steps at 1,316 tokens/s where they run at
~4,000.) Rows:

- attnkit with the key/value cache (``CausalLM.prefill`` + ``step``);
- attnkit with linear attention's recurrent state (S_i, Z_i: constant memory per step);
- attnkit without a cache: a forward over the whole prefix at every step (what nanoGPT's ``generate`` does);
- transformers GPT-2 with its cache (``past_key_values``), in torch ``--threads`` threads.

Each at ``--threads`` threads and (unless ``--quick``) at one. Memory per generated token: the bytes the caches
hold per token of context. Targets (issue 32): cache >= 2x transformers at batch 1, >= 1.2x at batch 32, and >= 5x
attnkit's own no-cache path at a 512-token context.

Run ``python benchmarks/bench_generation.py --help`` for the options.
"""

import statistics
import time

import numpy as np

import _harness as harness
from attnkit.nn import CausalLM

CONFIG = dict(n_layers=4, d_model=256, n_heads=4, vocab=8192)
CONTEXTS = (128, 512, 2048)
BATCHES = (1, 32)
TARGETS = {"transformers batch 1": 2.0, "transformers batch 32": 1.2, "no cache at 512": 5.0}


def attnkit_model(attention="softmax", max_len=2048 + 64):
    return CausalLM(CONFIG["vocab"], np.random.default_rng(0), d_model=CONFIG["d_model"], n_heads=CONFIG["n_heads"],
                    n_layers=CONFIG["n_layers"], max_len=max_len, attention=attention, dropout=0.0)


def attnkit_generate(model, prompt, new, cached=True):
    """A callable that generates ``new`` tokens greedily after ``prompt`` (B, C), read beforehand when cached."""
    if not cached:
        def run():
            ids = prompt
            for _ in range(new):
                logits, _ = model.forward(ids)
                ids = np.concatenate([ids, np.argmax(logits[:, -1], axis=-1)[:, None]], axis=1)
            return ids[:, prompt.shape[1]:]
        return run

    def run():
        cache = model.start(prompt.shape[0], capacity=prompt.shape[1] + new)
        logits = model.prefill(prompt, cache)
        state["cache_bytes"] = cache_bytes(cache) / (prompt.shape[0] * prompt.shape[1])
        out = []
        start = time.perf_counter()
        for _ in range(new):
            token = np.argmax(logits, axis=-1)
            out.append(token)
            logits = model.step(token, cache)
        state["decode"].append(time.perf_counter() - start)
        return out

    state = {"decode": []}
    run.state = state
    return run


def cache_bytes(cache):
    total = 0
    for layer in cache.layers:
        if layer.state is not None:
            total += sum(a.nbytes for a in (layer.state.s, layer.state.z) if a is not None)
        elif layer.kept():
            keys, values = layer.keys_values()
            total += keys.base.nbytes + values.base.nbytes
    return total


def transformers_model(torch):
    from transformers import GPT2Config, GPT2LMHeadModel

    config = GPT2Config(vocab_size=CONFIG["vocab"], n_positions=2048 + 64, n_embd=CONFIG["d_model"],
                        n_layer=CONFIG["n_layers"], n_head=CONFIG["n_heads"], activation_function="gelu_new",
                        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    torch.manual_seed(0)
    return GPT2LMHeadModel(config).eval()


def transformers_generate(torch, model, prompt, new):
    ids = torch.from_numpy(prompt)

    def run():
        with torch.no_grad():
            out = model(ids, use_cache=True)
            past, logits = out.past_key_values, out.logits[:, -1]
            tokens = []
            start = time.perf_counter()
            for _ in range(new):
                token = logits.argmax(-1, keepdim=True)
                tokens.append(token)
                out = model(token, past_key_values=past, use_cache=True)
                past, logits = out.past_key_values, out.logits[:, -1]
            state["decode"].append(time.perf_counter() - start)
        return tokens

    state = {"decode": []}
    run.state = state
    return run


def tokens_per_second(fns, timings, name, tokens):
    """New tokens per second of ``name``: its steps' own time where it records one (the median over its calls),
    else (recomputing, which reads no prompt first) the whole call's."""
    if timings.get(name) is None:
        return None
    decode = getattr(fns[name], "state", {}).get("decode")
    return tokens / (statistics.median(decode) if decode else timings[name].median)


def prompt_of(batch, context):
    """The prompt of ids (batch, context) both libraries continue: the same for a batch and context in any process."""
    return np.random.default_rng(context + batch).integers(0, CONFIG["vocab"], size=(batch, context))


def attnkit_rates(batch, context, new, repeats):
    """attnkit's new tokens/s at ``batch`` x ``context`` (with the cache, the linear state, recomputing where that
    finishes in reasonable time) and the cache's bytes per token."""
    softmax, linear = attnkit_model(), attnkit_model("linear")
    prompt = prompt_of(batch, context)
    fns = {"cache": attnkit_generate(softmax, prompt, new), "linear": attnkit_generate(linear, prompt, new)}
    # Recomputing is O(new x context): only where it finishes in reasonable time.
    if batch * context <= 512 * 32 // 4 or (batch == 1 and context <= 2048):
        fns["nocache"] = attnkit_generate(softmax, prompt, new, cached=False)
    timings = harness.compare(fns, repeats=repeats, max_seconds=20.0)
    rates = {name: tokens_per_second(fns, timings, name, batch * new) for name in fns}
    return rates, fns["cache"].state.get("cache_bytes", float("nan"))


def main(argv=None):
    parser = harness.make_parser(__doc__.splitlines()[0])
    parser.add_argument("--new", type=int, default=32, help="tokens generated per row (default 32)")
    parser.add_argument("--batches", default=",".join(map(str, BATCHES)),
                        help=f"comma-separated batch sizes (default {','.join(map(str, BATCHES))})")
    parser.add_argument("--contexts", default=None,
                        help=f"comma-separated prompt lengths (default {','.join(map(str, CONTEXTS))}; quick: 128,512)")
    args = harness.parse_args(parser, "generation", argv)
    batches = tuple(int(b) for b in args.batches.split(","))
    contexts = tuple(int(c) for c in args.contexts.split(",")) if args.contexts else \
        (128, 512) if args.quick else CONTEXTS
    torch = harness.load_torch()
    try:
        import transformers  # noqa: F401
    except ImportError:
        print("note: transformers is not importable; its rows are skipped")
        torch = None
    report = harness.Report(args, "GPT-style generation: attnkit against transformers' GPT-2", torch)
    if max(contexts) + args.new > 2048 + 64:
        parser.error("--contexts: the models hold 2,112 positions, prompt + --new must fit")
    hf = None if torch is None else transformers_model(torch)
    table = report.table(
        f"Greedy generation of {args.new} tokens after a prompt (decoding only: the steps timed inside each call)",
        ["threads", "batch", "context", "attnkit cache", "linear state", "no cache", "transformers", "vs transformers",
         "cache vs no cache", "cache bytes/token"],
        note=f"{CONFIG['n_layers']} layers, d_model {CONFIG['d_model']}, {CONFIG['n_heads']} heads, vocabulary "
             f"{CONFIG['vocab']:,}, float32, random weights. Cells: new tokens per second over the batch. attnkit "
             "runs in a child process without torch, on its own OpenMP runtime (passive threads), as its users run "
             "it (harness.as_users_run); transformers here, with torch's defaults.")
    ratios = {}
    thread_counts = [args.threads] if args.quick or args.threads == 1 else [args.threads, 1]
    for threads in thread_counts:
        harness.set_threads(threads, torch)
        for batch in batches:
            for context in contexts:
                s, bytes_per_token = harness.as_users_run(attnkit_rates, batch, context, args.new, args.repeats,
                                                          threads=threads)
                s = {name: s.get(name) for name in ("cache", "linear", "nocache")}
                s["hf"] = None
                if hf is not None:
                    fns = {"hf": transformers_generate(torch, hf, prompt_of(batch, context), args.new)}
                    s["hf"] = tokens_per_second(fns, harness.compare(fns, repeats=args.repeats, max_seconds=20.0),
                                                "hf", batch * args.new)
                vs_hf = None if None in (s["hf"], s["cache"]) else s["cache"] / s["hf"]
                vs_nocache = None if None in (s["nocache"], s["cache"]) else s["cache"] / s["nocache"]
                ratios[(threads, batch, context)] = (vs_hf, vs_nocache)
                table.add_row(str(threads), str(batch), f"{context:,}",
                              *[("—" if s[n] is None else f"{s[n]:,.0f}") for n in ("cache", "linear", "nocache",
                                                                                      "hf")],
                              "—" if vs_hf is None else harness.fmt_ratio(vs_hf),
                              "—" if vs_nocache is None else harness.fmt_ratio(vs_nocache),
                              harness.fmt_bytes(bytes_per_token))
    lines = []
    top = thread_counts[0]
    for batch, goal, label in ((1, TARGETS["transformers batch 1"], "batch 1"),
                               (32, TARGETS["transformers batch 32"], "batch 32")):
        got = [ratios[(top, batch, c)][0] for c in contexts
               if (top, batch, c) in ratios and ratios[(top, batch, c)][0] is not None]
        if got:
            lines.append(f"- cache vs transformers, {label}, {top} threads: {min(got):.2f}x-{max(got):.2f}x over "
                         f"contexts (target >= {goal}x): " + ("met" if min(got) >= goal else "**not met**"))
    at512 = ratios.get((top, 1, 512), (None, None))[1]
    if at512 is not None:
        lines.append(f"- cache vs no cache at a 512-token context, batch 1: {at512:.1f}x (target >= "
                     f"{TARGETS['no cache at 512']}x): " + ("met" if at512 >= TARGETS["no cache at 512"]
                                                           else "**not met**"))
    report.text("Targets", lines or ["- transformers not installed: no comparison"])
    report.data = {f"{t}/{b}/{c}": {"vs_transformers": r[0], "vs_no_cache": r[1]} for (t, b, c), r in ratios.items()}
    report.write()
    return 0


if __name__ == "__main__":
    main()
