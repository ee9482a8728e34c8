"""elu+1 linear attention, attnkit against what a torch user writes, forward and forward + backward.

One run, one table file (``results/linear_vs_torch.md``), at the thread count given and at 1 thread:

- *torch einsum* (non-causal): ``phi = elu(x) + 1``, ``S = einsum(phi(K), V)``, ``Z = phi(K).sum``,
  ``num / (phi(Q) . Z + eps)``: two einsums and elementwise passes;
- *torch chunked* (causal): 64-row chunks, the form fast-transformers and flash-linear-attention give in
  plain torch: inside a chunk ``tril(phi(Q) phi(K)^T) V``, across chunks the exclusive prefix sums of the
  chunks' ``phi(K)^T V`` and ``phi(K)^T 1`` (all chunks at once, no Python loop over them);
- *torch cumsum* (causal): the naive form, ``cumsum`` of the outer products ``phi(k_j) v_j^T``, which the
  earlier benchmark compared against; only where its B·H·N·d·dv intermediates stay under 2 GiB.

Shapes: the long one of issue 18 (B=1, H=8, N=4096, d=64) and the estimators' padded batches (B=32 and
64, H=4, N=32-128, d=32 and 64, real lengths drawn between N/4 and N). Padding: attnkit skips padded keys
(``key_lengths``); torch zeroes their features (``phi(K) * mask``), which is what a torch user does. The
backward is ``LinearAttentionContext.backward`` against torch autograd of the same formulation, with the
same output gradient. *ratio* = torch time / attnkit time (> 1: attnkit is faster); medians of interleaved
repeats.

Run ``python benchmarks/bench_linear_vs_torch.py --help`` for the options.
"""

import numpy as np

import _harness as harness
import attnkit

EPS = 1e-6
CHUNK = 64
CUMSUM_MAX_BYTES = 2 * 2**30
LONG = [(1, 8, 4096, 64)]
PADDED = [(b, 4, n, d) for b in (32, 64) for n in (32, 64, 128) for d in (32, 64)]
QUICK = [(1, 8, 512, 64), (32, 4, 64, 32)]


def torch_einsum(torch, q, k, v, keep):
    elu = torch.nn.functional.elu
    phi_q, phi_k = elu(q) + 1, elu(k) + 1
    if keep is not None:
        phi_k = phi_k * keep
    s = torch.einsum("bhnd,bhne->bhde", phi_k, v)
    z = phi_k.sum(dim=2)
    return torch.einsum("bhnd,bhde->bhne", phi_q, s) / (torch.einsum("bhnd,bhd->bhn", phi_q, z)[..., None] + EPS)


def torch_chunked(torch, q, k, v, keep):
    elu = torch.nn.functional.elu
    phi_q, phi_k = elu(q) + 1, elu(k) + 1
    if keep is not None:
        phi_k = phi_k * keep
    b, h, n, d = q.shape
    c = min(CHUNK, n)
    qc, kc, vc = (x.reshape(b, h, n // c, c, x.shape[-1]) for x in (phi_q, phi_k, v))
    kv = kc.transpose(-1, -2) @ vc  # (b, h, chunks, d, dv)
    s = kv.cumsum(dim=2) - kv  # what the chunks before each one carry
    z = kc.sum(dim=-2)
    z_before = z.cumsum(dim=2) - z
    inside = (qc @ kc.transpose(-1, -2)).tril()
    num = qc @ s + inside @ vc
    den = (qc * z_before[..., None, :]).sum(dim=-1) + inside.sum(dim=-1)
    return (num / (den[..., None] + EPS)).reshape(b, h, n, -1)


def torch_cumsum(torch, q, k, v, keep):
    elu = torch.nn.functional.elu
    phi_q, phi_k = elu(q) + 1, elu(k) + 1
    if keep is not None:
        phi_k = phi_k * keep
    s = torch.cumsum(torch.einsum("bhnd,bhne->bhnde", phi_k, v), dim=2)
    z = torch.cumsum(phi_k, dim=2)
    return torch.einsum("bhnd,bhnde->bhne", phi_q, s) / ((phi_q * z).sum(dim=-1, keepdim=True) + EPS)


def _inputs(shape, rng, padded):
    b, h, n, d = shape
    q, k, v = (rng.standard_normal(shape, dtype=np.float32) for _ in range(3))
    dout = rng.standard_normal(shape, dtype=np.float32)
    lengths = rng.integers(n // 4, n + 1, size=b) if padded else None
    return q, k, v, dout, lengths


def _calls(torch, shape, causal, q, k, v, dout, lengths):
    """{name: (forward, forward + backward)} for attnkit and the torch formulations of this case."""

    def ours_forward():
        return attnkit.linear_attention(q, k, v, feature_map="elu", causal=causal, key_lengths=lengths)

    def ours_training():
        out, context = attnkit.linear_attention(q, k, v, feature_map="elu", causal=causal, key_lengths=lengths,
                                                return_context=True)
        return context.backward(dout)

    calls = {"attnkit": (ours_forward, ours_training)}
    if torch is None:
        return calls
    tq, tk, tv, tdout = (torch.from_numpy(a) for a in (q, k, v, dout))
    keep = None
    if lengths is not None:
        keep = (torch.arange(shape[2])[None, :] < torch.from_numpy(lengths)[:, None]).float()[:, None, :, None]
    forms = {"torch chunked": torch_chunked, "torch cumsum": torch_cumsum} if causal else {"torch einsum": torch_einsum}
    cumsum_bytes = 2 * shape[0] * shape[1] * shape[2] * shape[3] * shape[3] * 4
    for name, form in forms.items():
        if name == "torch cumsum" and cumsum_bytes > CUMSUM_MAX_BYTES:
            continue

        def forward(form=form):
            return form(torch, tq, tk, tv, keep)

        def training(form=form):
            with torch.enable_grad():
                leaves = [x.clone().requires_grad_() for x in (tq, tk, tv)]
                form(torch, *leaves, keep).backward(tdout)
            return [x.grad for x in leaves]

        calls[name] = (forward, training)
    return calls


def bench(report, args, torch, shapes, threads):
    harness.set_threads(threads, torch)
    table = report.table(
        f"elu+1 linear attention, float32, {threads} thread{'s' if threads > 1 else ''}",
        ["case", "B, H, N, d", "pass", "attnkit", "torch chunked / einsum", "ratio", "torch cumsum", "ratio",
         "max abs diff"],
        "Median time per call ± interquartile range. *ratio* = torch / attnkit (> 1: attnkit is faster). "
        "*pass*: forward alone, or forward + backward (dq, dk, dv). Padded shapes: attnkit skips padded keys "
        "(key_lengths), torch zeroes their features. *max abs diff*: forward outputs at real positions, attnkit "
        "against the first torch formulation.",
    )
    rng = np.random.default_rng(0)
    raw = []
    for shape in shapes:
        padded = shape[0] > 1
        q, k, v, dout, lengths = _inputs(shape, rng, padded)
        for causal in (False, True):
            case = ("causal" if causal else "non-causal") + (", padded" if padded else "")
            calls = _calls(torch, shape, causal, q, k, v, dout, lengths)
            for index, label in enumerate(("forward", "fwd + bwd")):
                timings = harness.compare({name: pair[index] for name, pair in calls.items()}, repeats=args.repeats)
                ours = timings["attnkit"]
                first = timings.get("torch chunked", timings.get("torch einsum"))
                naive = timings.get("torch cumsum")
                diff = "–"
                if index == 0 and first is not None:
                    real = np.ones(shape[:1] + (1, shape[2], 1), dtype=bool) if lengths is None else \
                        (np.arange(shape[2]) < lengths[:, None])[:, None, :, None]
                    gap = np.abs(np.asarray(ours.result) - first.result.numpy())
                    diff = harness.fmt_number(float(np.max(np.where(real, gap, 0))), 2)
                table.add_row(case, ", ".join(map(str, shape)), label, harness.fmt_time(ours),
                              harness.fmt_time(first) if first else "–",
                              harness.fmt_ratio(harness.ratio(first, ours)) if first else "–",
                              harness.fmt_time(naive) if naive else "–",
                              harness.fmt_ratio(harness.ratio(naive, ours)) if naive else "–", diff)
                raw.append({"threads": threads, "case": case, "shape": shape, "pass": label,
                            **{name: t.as_dict() for name, t in timings.items()}})
    report.data.setdefault("runs", []).extend(raw)


def main(argv=None):
    parser = harness.make_parser(__doc__.splitlines()[0])
    args = harness.parse_args(parser, "linear_vs_torch", argv)
    torch = harness.load_torch()
    report = harness.Report(args, "Linear attention: attnkit against torch's einsum, chunked and cumsum forms",
                            torch)
    shapes = QUICK if args.quick else LONG + PADDED
    for threads in dict.fromkeys((args.threads, 1)):
        bench(report, args, torch, shapes, threads)
    report.write()


if __name__ == "__main__":
    main()
