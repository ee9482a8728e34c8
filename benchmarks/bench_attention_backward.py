"""The attention backward of a training step: from the forward's context vs the explicit op.

``nn.MultiHeadAttention`` runs its backward through the context its forward returned
(``return_context=True``): q, k, v, the mask, bias and key lengths are checked and laid out once per
step, and linear attention reuses the forward's features and sums. The explicit
``scaled_dot_product_attention_backward`` / ``linear_attention_backward`` check everything again
(and linear attention recomputes its features). Both give the same gradients, bit for bit; this
measures the time the context saves per layer backward, at the estimators' training shape, with
q, k and v laid out as the layer makes them (strided views of one projection). For scale, the
whole layer's backward (projections included) is timed too. At ``--threads`` threads and (unless
``--quick``) at one, so that a kernel's win reads apart from a threading win.

Run ``python benchmarks/bench_attention_backward.py --help`` for the options.
"""

import numpy as np

import _harness as harness
from attnkit import nn, ops

SHAPE = (32, 4, 128, 32)  # B, H, N, d_head: a training batch of the estimators
QUICK_SHAPE = (8, 4, 64, 32)


def _heads(layer, x, w, b):
    """x (B, N, d_model) projected into heads (B, H, N, d_head), as the layer does."""
    y = x.reshape(-1, x.shape[-1]) @ layer.params[w] + layer.params[b]
    return y.reshape(x.shape[:-1] + (layer.n_heads, layer.d_head)).swapaxes(-2, -3)


def _case(rng, shape, attention, causal, relative):
    """(explicit backward, context backward, layer backward) callables for one layer kind."""
    b, h, n, d_head = shape
    bias_module = nn.RelativePositionBias(h, 16, rng) if relative else None
    layer = nn.MultiHeadAttention(h * d_head, h, rng, attention=attention, causal=causal, position_bias=bias_module)
    x = rng.standard_normal((b, n, h * d_head), dtype=np.float32)
    lengths = None if causal else rng.integers(n // 2, n + 1, size=b)
    q, k, v = (_heads(layer, x, w, bias) for w, bias in (("wq", "bq"), ("wk", "bk"), ("wv", "bv")))
    bias = None if bias_module is None else bias_module.forward(n, n)[0]
    dheads = rng.standard_normal((b, h, n, d_head), dtype=np.float32)
    kw = dict(key_lengths=lengths, causal=causal)
    if attention == "softmax":
        out, lse, context = ops.scaled_dot_product_attention(q, k, v, bias=bias, return_lse=True, return_context=True,
                                                             **kw)

        def explicit():
            return ops.scaled_dot_product_attention_backward(dheads, q, k, v, out, lse, bias=bias,
                                                             bias_grad=relative, **kw)

        def reused():
            return context.backward(dheads, bias_grad=relative)
    else:
        out, context = ops.linear_attention(q, k, v, feature_map=layer.feature_map, return_context=True, **kw)

        def explicit():
            return ops.linear_attention_backward(dheads, q, k, v, feature_map=layer.feature_map, **kw)

        def reused():
            return context.backward(dheads)
    _, cache = layer.forward(x, key_lengths=lengths)
    grad = rng.standard_normal(x.shape, dtype=np.float32)
    return explicit, reused, lambda: layer.backward(grad, cache)


CASES = {
    "softmax, key_lengths": ("softmax", False, False),
    "softmax, causal": ("softmax", True, False),
    "softmax, causal, relative-position bias": ("softmax", True, True),
    "linear (elu), causal": ("linear", True, False),
    "performer (FAVOR+), key_lengths": ("performer", False, False),
}


def main(argv=None):
    parser = harness.make_parser(__doc__.splitlines()[0])
    args = harness.parse_args(parser, "attention_backward", argv)
    harness.set_threads(args.threads)
    report = harness.Report(args, "The attention backward: from the forward's context vs the explicit op")
    shape = QUICK_SHAPE if args.quick else SHAPE
    b, h, n, d_head = shape
    table = report.table(
        f"One layer's attention backward, B={b} H={h} N={n} d_head={d_head}, float32",
        ["threads", "layer", "explicit op", "context", "saved", "speed-up", "layer backward", "saved / layer"],
        "*explicit op*: `*_backward(dout, q, k, v, ...)`, which checks and lays out the inputs again (and, "
        "for linear attention, recomputes the features); *context*: `context.backward(dout)` of the "
        "forward's context; *speed-up*: explicit / context (> 1: the context is faster); *layer "
        "backward*: `MultiHeadAttention.backward` as it runs now (with the context); *saved / layer*: "
        "the time saved as a share of what the layer's backward took before (layer backward + saved). "
        "Timed in interleaved rounds. *threads*: attnkit's and NumPy's BLAS's; the summary uses the first "
        "thread count's rows.",
    )
    raw, ratios = [], []
    for threads in harness.thread_counts(args):
        harness.set_threads(threads)
        rng = np.random.default_rng(0)  # the same layers and inputs at every thread count
        for name, (attention, causal, relative) in CASES.items():
            explicit, reused, layer = _case(rng, shape, attention, causal, relative)
            timings = harness.compare({"explicit": explicit, "context": reused, "layer": layer}, repeats=args.repeats)
            e, c, lay = timings["explicit"], timings["context"], timings["layer"]
            saved = e.median - c.median
            if threads == args.threads:
                ratios.append(e.median / c.median)
            table.add_row(threads, name, harness.fmt_time(e), harness.fmt_time(c), f"{saved * 1e3:.3f} ms",
                          harness.fmt_ratio(e.median / c.median), harness.fmt_time(lay),
                          f"{100 * saved / (lay.median + saved):.1f}%")
            raw.append({"threads": threads, "case": name, **{key: value.as_dict() for key, value in timings.items()}})
    harness.set_threads(args.threads)
    report.data["cases"] = raw
    report.text("Summary", [
        f"- {args.threads} thread(s): the context's backward is {min(ratios):.2f}x to {max(ratios):.2f}x as fast "
        f"as the explicit op (geometric mean {harness.geomean(ratios):.2f}x).",
    ])
    report.write()


if __name__ == "__main__":
    main()
