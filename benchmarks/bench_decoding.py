"""Incremental decoding: the decoder's key/value cache against recomputing the prefix, in tokens/s.

The model: a 2-layer pre-LayerNorm decoder (d_model=128, 4 heads, d_ff=512, float32) attending over a
random encoder output of 32 positions (lengths uniform in [16, 32]), batch 32, 64 positions generated.
Three parts, one table file (``results/decoding.md``), each timed at ``--threads`` threads and (unless
``--quick``) at one, so that a kernel's win reads apart from a threading win:

1. the decoder alone: 64 positions by ``Decoder.start`` + 64 ``Decoder.step`` calls (cached) against
   64 ``Decoder.forward`` calls over the prefixes 1..64, keeping the last row (uncached), for softmax
   attention, softmax with relative positions, causal linear attention (elu) and Performer;
2. end to end: ``attnkit.decoding.generate`` with a 1000-token embedding and output layer, greedy and
   beam search (4 beams), cached and uncached (``DecoderModel(cached=...)``). A model with random
   weights rarely ends early; ``min_length`` keeps every sequence at the full length;
3. one cached step's attention call: a single query against Nk cached keys (B=32, 4 heads, d_head=32)
   through ``ops.scaled_dot_product_attention`` against a NumPy softmax, and the same call with
   Nq=Nk (the block shape the tiled kernel is written for), per query row.

Run ``python benchmarks/bench_decoding.py --help`` for the options.
"""

import functools

import numpy as np

import _harness as harness
from attnkit import nn, ops
from attnkit.nn.decoding import DecoderModel, generate

D_MODEL, HEADS, D_FF, LAYERS = 128, 4, 512, 2
VOCAB, MEMORY = 1000, 32
KINDS = {"softmax": dict(attention="softmax"), "softmax + relative positions": dict(relative_positions=16),
         "linear (elu)": dict(attention="linear"), "performer (128 features)": dict(attention="performer")}
SIZES = (32, 64)  # batch, positions generated
QUICK_SIZES = (4, 16)


def make_inputs(batch, rng):
    memory = rng.standard_normal((batch, MEMORY, D_MODEL)).astype(np.float32)
    return memory, rng.integers(MEMORY // 2, MEMORY + 1, size=batch)


def thread_rounds(args, rng):
    """Yield each thread count with the threads set and ``rng`` rewound, so every count times the same
    inputs (and ``--threads``, first, the inputs of a run without the loop); ``--threads`` again after."""
    state = rng.bit_generator.state
    for threads in harness.thread_counts(args):
        harness.set_threads(threads)
        rng.bit_generator.state = state
        yield threads
    harness.set_threads(args.threads)


def decoder_alone(decoder, x, memory, lengths, cached):
    if cached:
        cache = decoder.start(memory, lengths, capacity=x.shape[1])
        return np.concatenate([decoder.step(x[:, t : t + 1], cache)[0] for t in range(x.shape[1])], axis=1)
    rows = [decoder.forward(x[:, : t + 1], memory=memory, memory_lengths=lengths)[0][:, -1:]
            for t in range(x.shape[1])]
    return np.concatenate(rows, axis=1)


def bench_decoder(report, args, rng):
    batch, steps = QUICK_SIZES if args.quick else SIZES
    table = report.table(
        "The decoder alone", ["threads", "attention", "cached", "uncached", "cached tokens/s", "uncached tokens/s",
                              "speed-up", "max abs diff"],
        note=f"Batch {batch}, {steps} positions, memory {MEMORY}; tokens/s = batch x positions / time. "
             "*max abs diff*: cached against uncached outputs (float32).")
    raw = []
    for threads in thread_rounds(args, rng):
        for name, options in KINDS.items():
            decoder = nn.Decoder(LAYERS, D_MODEL, HEADS, D_FF, np.random.default_rng(0), dropout=0.0, **options)
            x = rng.standard_normal((batch, steps, D_MODEL)).astype(np.float32)
            memory, lengths = make_inputs(batch, rng)
            timings = harness.compare({mode: functools.partial(decoder_alone, decoder, x, memory, lengths,
                                                               mode == "cached")
                                       for mode in ("cached", "uncached")}, repeats=args.repeats)
            cached, uncached = timings["cached"], timings["uncached"]
            diff = float(np.abs(cached.result - uncached.result).max())
            table.add_row(threads, name, harness.fmt_time(cached), harness.fmt_time(uncached),
                          f"{batch * steps / cached.median:,.0f}", f"{batch * steps / uncached.median:,.0f}",
                          harness.fmt_ratio(harness.ratio(uncached, cached)), f"{diff:.1e}")
            raw.append({"threads": threads, "attention": name, **{mode: t.as_dict() for mode, t in timings.items()}})
    report.data["decoder"] = raw


class Generator(nn.Module):
    """Embedding + sinusoidal positions + the decoder + an output layer."""

    def __init__(self, rng, **options):
        super().__init__()
        self.add_child("embed", nn.Embedding(VOCAB, D_MODEL, rng))
        self.add_child("positions", nn.SinusoidalPositions(D_MODEL))
        self.add_child("decoder", nn.Decoder(LAYERS, D_MODEL, HEADS, D_FF, rng, dropout=0.0, **options))
        self.add_child("out", nn.Linear(D_MODEL, VOCAB, rng))

    def embed(self, ids, offset):
        return self.children["positions"].forward(self.children["embed"].forward(ids)[0], offset=offset)[0]

    def project(self, h):
        return self.children["out"].forward(h)[0]


def bench_generate(report, args, rng):
    batch, steps = QUICK_SIZES if args.quick else SIZES
    table = report.table(
        "End to end: generate()", ["threads", "attention", "strategy", "cached", "uncached", "cached tokens/s",
                                   "uncached tokens/s", "speed-up", "same tokens"],
        note=f"Batch {batch} inputs, {steps} tokens each (min_length={steps - 1}, max_length={steps}), vocabulary "
             f"{VOCAB}; beam search decodes 4 rows per input and tokens/s counts the returned tokens.")
    raw = []
    for threads in thread_rounds(args, rng):
        for name in ("softmax", "linear (elu)"):
            model = Generator(np.random.default_rng(1), **KINDS[name])
            memory, lengths = make_inputs(batch, rng)
            for strategy in ("greedy", "beam"):
                def run(cached, model=model, memory=memory, lengths=lengths, strategy=strategy):
                    decoding_model = DecoderModel(model.children["decoder"], memory, lengths, embed=model.embed,
                                                  project=model.project, cached=cached, capacity=steps)
                    hyps = generate(decoding_model, batch, bos_id=1, eos_id=0, strategy=strategy, num_beams=4,
                                    min_length=steps - 1, max_length=steps)
                    return [h[0].tokens.tolist() for h in hyps]

                timings = harness.compare({"cached": lambda run=run: run(True), "uncached": lambda run=run: run(False)},
                                          repeats=args.repeats)
                cached, uncached = timings["cached"], timings["uncached"]
                tokens = sum(map(len, cached.result))
                table.add_row(threads, name, strategy, harness.fmt_time(cached), harness.fmt_time(uncached),
                              f"{tokens / cached.median:,.0f}", f"{tokens / uncached.median:,.0f}",
                              harness.fmt_ratio(harness.ratio(uncached, cached)),
                              "yes" if cached.result == uncached.result else "no")
                raw.append({"threads": threads, "attention": name, "strategy": strategy,
                            **{mode: t.as_dict() for mode, t in timings.items()}})
    report.data["generate"] = raw


def numpy_attention(q, k, v):
    logits = q @ np.swapaxes(k, -1, -2) / np.sqrt(q.shape[-1], dtype=q.dtype)
    weights = np.exp(logits - logits.max(axis=-1, keepdims=True))
    return (weights / weights.sum(axis=-1, keepdims=True)) @ v


def bench_single_query(report, args, rng):
    batch = QUICK_SIZES[0] if args.quick else SIZES[0]
    table = report.table(
        "One query against the cache: the attention call of a step",
        ["threads", "Nk", "kernel, Nq=1", "NumPy, Nq=1", "kernel vs NumPy", "kernel, Nq=Nk, per row",
         "Nq=1 vs per row of Nq=Nk"],
        note=f"q (B={batch}, H={HEADS}, Nq, 32), k and v (B, H, Nk, 32), float32, through "
             "`ops.scaled_dot_product_attention` (validation included). *per row of Nq=Nk*: the time of a "
             "full non-causal Nk x Nk call divided by Nk, what a query costs inside a block; the last "
             "column is that over the Nq=1 time (below 1: a lone query costs more than a query in a block).")
    raw = []
    for threads in thread_rounds(args, rng):
        for nk in (16, 64, 256):
            q, k, v = (rng.standard_normal((batch, HEADS, n, 32)).astype(np.float32) for n in (1, nk, nk))
            qq = rng.standard_normal((batch, HEADS, nk, 32)).astype(np.float32)
            timings = harness.compare({"kernel": lambda q=q, k=k, v=v: ops.scaled_dot_product_attention(q, k, v),
                                       "numpy": lambda q=q, k=k, v=v: numpy_attention(q, k, v),
                                       "block": lambda qq=qq, k=k, v=v: ops.scaled_dot_product_attention(qq, k, v)},
                                      repeats=args.repeats)
            per_row = timings["block"].median / nk
            table.add_row(threads, nk, harness.fmt_time(timings["kernel"]), harness.fmt_time(timings["numpy"]),
                          harness.fmt_ratio(harness.ratio(timings["numpy"], timings["kernel"])),
                          f"{per_row * 1e6:.3g} µs", harness.fmt_ratio(per_row / timings["kernel"].median))
            raw.append({"threads": threads, "nk": nk, **{name: t.as_dict() for name, t in timings.items()}})
    report.data["single_query"] = raw


def main(argv=None):
    parser = harness.make_parser(__doc__.splitlines()[0])
    args = harness.parse_args(parser, "decoding", argv)
    harness.set_threads(args.threads)
    report = harness.Report(args, "Incremental decoding: key/value cache vs recomputing the prefix")
    rng = np.random.default_rng(0)
    bench_decoder(report, args, rng)
    bench_generate(report, args, rng)
    bench_single_query(report, args, rng)
    report.write()


if __name__ == "__main__":
    main()
