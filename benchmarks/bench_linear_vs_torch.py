"""Linear attention with every built-in feature map, attnkit against what a torch user writes, forward and backward.

One run, one table file (``results/linear_vs_torch.md``), at the thread count given and at 1 thread. The
torch side computes each map's features itself, the same ones attnkit's map gives (its random maps' own
weights, ``fm.weights(d)``, as a tensor; queries and keys as ``fm.queries`` and ``fm.keys``):

- *elu+1*: ``elu(x) + 1``; *relu*: ``relu(x)`` (D = d);
- *polynomial* (degree 2, c = 1): ``[1, sqrt(2) x, x (x) x]``, the exact features of ``(q . k + 1)^2``,
  D = 1 + d + d^2 = 1057 at d = 32 (the only width it runs at: 4161 features at d = 64);
- *RFF softmax* (128 frequencies, ``softmax_kernel=True``): ``[sin(x W^T), cos(x W^T)] / sqrt(128)``
  (D = 256), the keys' also times ``exp(|k|^2 / 2 sigma^2)`` with ``sigma^2 = sqrt(d)`` (the queries'
  factor cancels);
- *FAVOR+* (128 positive random features): with ``u = x d^-1/4``, keys ``exp(u W^T - |u|^2 / 2) / sqrt(128)``,
  queries ``exp(u W^T - max_row(u W^T)) / sqrt(128)`` (Performer's stabiliser, detached from autograd).

Then, with ``phi_q`` and ``phi_k`` the two feature functions:

- *torch einsum* (non-causal): ``S = einsum(phi_k(K), V)``, ``Z = phi_k(K).sum``,
  ``num / (phi_q(Q) . Z + eps)``: two einsums and elementwise passes;
- *torch chunked* (causal): 64-row chunks, the form fast-transformers and flash-linear-attention give in
  plain torch: inside a chunk ``tril(phi_q(Q) phi_k(K)^T) V``, across chunks the exclusive prefix sums of
  the chunks' ``phi_k(K)^T V`` and ``phi_k(K)^T 1`` (all chunks at once, no Python loop over them);
- *torch cumsum* (causal): the naive form, ``cumsum`` of the outer products ``phi_k(k_j) v_j^T``, which the
  earlier benchmark compared against; only where its B·H·N·D·dv intermediates stay under 2 GiB.

Shapes: elu+1 at the long one of issue 18 (B=1, H=8, N=4096, d=64) and the estimators' padded batches
(B=32 and 64, H=4, N=32-128, d=32 and 64, real lengths drawn between N/4 and N); the other maps at the long
one and two of the padded ones, (32, 4, 64, 32) and (64, 4, 128, 64) (polynomial: only the first). Padding:
attnkit skips padded keys (``key_lengths``); torch zeroes their features (``phi_k(K) * mask``), which is what
a torch user does. The backward is ``LinearAttentionContext.backward`` against torch autograd of the same
formulation, with the same output gradient. *ratio* = torch time / attnkit time (> 1: attnkit is faster);
medians of interleaved repeats. The diff leaves out the rows where a guard, not the features, decides the
output (see ``_compared_rows``): random Fourier estimates of the softmax kernel cancel to ~0 or below for
many queries, where attnkit gives zeros and torch ``num / (den + eps)``.

Run ``python benchmarks/bench_linear_vs_torch.py --help`` for the options.
"""

import math

import numpy as np

import _harness as harness
import attnkit
from attnkit import feature_maps

EPS = 1e-6
CHUNK = 64
CUMSUM_MAX_BYTES = 2 * 2**30
TARGET = 2.0  # attnkit / torch (issue: >= 2x the form a torch user writes)
WELL_POSED = 1e-3
EPS_SHARE = 1e-5
LONG = [(1, 8, 4096, 64)]
PADDED = [(b, 4, n, d) for b in (32, 64) for n in (32, 64, 128) for d in (32, 64)]
FEW = LONG + [(32, 4, 64, 32), (64, 4, 128, 64)]
QUICK = [(1, 8, 256, 64), (32, 4, 32, 32)]
# label: (attnkit's map, shapes of a full run, of a quick run). Polynomial features only at d=32: at d=64
# they are D = 4161 wide.
MAPS = {
    "elu+1": (feature_maps.EluFeatureMap(), LONG + PADDED, QUICK),
    "relu": (feature_maps.ReluFeatureMap(), FEW, QUICK),
    "polynomial": (feature_maps.PolynomialFeatureMap(degree=2), [s for s in FEW if s[3] == 32],
                   [s for s in QUICK if s[3] == 32]),
    "RFF softmax": (feature_maps.RandomFourierFeatureMap(n_features=128, softmax_kernel=True, random_state=0),
                    FEW, QUICK),
    "FAVOR+": (feature_maps.PositiveRandomFeatureMap(n_features=128, random_state=0), FEW, QUICK),
}


def torch_features(torch, fm, d):
    """(phi_q, phi_k): torch functions of (..., n, d) giving the features attnkit's map ``fm`` gives queries
    and keys of width ``d``, with the random maps' own weights ``fm.weights(d)``."""
    if isinstance(fm, feature_maps.EluFeatureMap):
        def phi(x):
            return torch.nn.functional.elu(x) + 1
        return phi, phi
    if isinstance(fm, feature_maps.ReluFeatureMap):
        return torch.relu, torch.relu
    if isinstance(fm, feature_maps.PolynomialFeatureMap):
        def phi(x):
            parts, power = [], x.new_ones(x.shape[:-1] + (1,))
            for i in range(fm.degree + 1):
                parts.append(math.sqrt(math.comb(fm.degree, i) * fm.c ** (fm.degree - i)) * power)
                if i < fm.degree:
                    power = (power[..., :, None] * x[..., None, :]).flatten(-2)
            return torch.cat(parts, dim=-1)
        return phi, phi
    w = torch.from_numpy(fm.weights(d).T.astype(np.float32))
    if isinstance(fm, feature_maps.RandomFourierFeatureMap):
        def phi_q(x):
            z = x @ w
            return torch.cat([z.sin(), z.cos()], dim=-1) / math.sqrt(fm.n_features)

        def phi_k(x):  # the softmax kernel's exp(|k|^2 / 2 sigma^2); the queries' factor cancels
            return phi_q(x) * torch.exp((x * x).sum(dim=-1, keepdim=True) / (2 * fm.bandwidth(d) ** 2))
        return phi_q, phi_k
    scale = fm.scale if fm.scale is not None else d**-0.25

    def phi_q(x):  # Performer's stabiliser: each row's largest exponent, a constant for autograd
        z = (x * scale) @ w
        return torch.exp(z - z.amax(dim=-1, keepdim=True).detach()) / math.sqrt(fm.n_features)

    def phi_k(x):
        u = x * scale
        return torch.exp(u @ w - 0.5 * (u * u).sum(dim=-1, keepdim=True)) / math.sqrt(fm.n_features)
    return phi_q, phi_k


def _features(phi, q, k, keep):
    """phi(Q) and phi(K), padded keys' features zeroed."""
    phi_k = phi[1](k)
    if keep is not None:
        phi_k = phi_k * keep
    return phi[0](q), phi_k


def torch_einsum(torch, phi, q, k, v, keep):
    phi_q, phi_k = _features(phi, q, k, keep)
    s = torch.einsum("bhnd,bhne->bhde", phi_k, v)
    z = phi_k.sum(dim=2)
    return torch.einsum("bhnd,bhde->bhne", phi_q, s) / (torch.einsum("bhnd,bhd->bhn", phi_q, z)[..., None] + EPS)


def torch_chunked(torch, phi, q, k, v, keep):
    phi_q, phi_k = _features(phi, q, k, keep)
    b, h, n, _ = q.shape
    c = min(CHUNK, n)
    qc, kc, vc = (x.reshape(b, h, n // c, c, x.shape[-1]) for x in (phi_q, phi_k, v))
    kv = kc.transpose(-1, -2) @ vc  # (b, h, chunks, D, dv)
    s = kv.cumsum(dim=2) - kv  # what the chunks before each one carry
    z = kc.sum(dim=-2)
    z_before = z.cumsum(dim=2) - z
    inside = (qc @ kc.transpose(-1, -2)).tril()
    num = qc @ s + inside @ vc
    den = (qc * z_before[..., None, :]).sum(dim=-1) + inside.sum(dim=-1)
    return (num / (den[..., None] + EPS)).reshape(b, h, n, -1)


def torch_cumsum(torch, phi, q, k, v, keep):
    phi_q, phi_k = _features(phi, q, k, keep)
    s = torch.cumsum(torch.einsum("bhnd,bhne->bhnde", phi_k, v), dim=2)
    z = torch.cumsum(phi_k, dim=2)
    return torch.einsum("bhnd,bhnde->bhne", phi_q, s) / ((phi_q * z).sum(dim=-1, keepdim=True) + EPS)


def _inputs(shape, rng, padded):
    b, h, n, d = shape
    q, k, v = (rng.standard_normal(shape, dtype=np.float32) for _ in range(3))
    dout = rng.standard_normal(shape, dtype=np.float32)
    lengths = rng.integers(n // 4, n + 1, size=b) if padded else None
    return q, k, v, dout, lengths


def _calls(torch, fm, shape, causal, q, k, v, dout, lengths):
    """{name: (forward, forward + backward)} for attnkit and the torch formulations of this case."""

    def ours_forward():
        return attnkit.linear_attention(q, k, v, feature_map=fm, causal=causal, key_lengths=lengths)

    def ours_training():
        out, context = attnkit.linear_attention(q, k, v, feature_map=fm, causal=causal, key_lengths=lengths,
                                                return_context=True)
        return context.backward(dout)

    calls = {"attnkit": (ours_forward, ours_training)}
    if torch is None:
        return calls
    tq, tk, tv, tdout = (torch.from_numpy(a) for a in (q, k, v, dout))
    phi = torch_features(torch, fm, shape[3])
    keep = None
    if lengths is not None:
        keep = (torch.arange(shape[2])[None, :] < torch.from_numpy(lengths)[:, None]).float()[:, None, :, None]
    forms = {"torch chunked": torch_chunked, "torch cumsum": torch_cumsum} if causal else {"torch einsum": torch_einsum}
    cumsum_bytes = 2 * math.prod(shape[:3]) * fm.n_features_out(shape[3]) * shape[3] * 4
    for name, form in forms.items():
        if name == "torch cumsum" and cumsum_bytes >= CUMSUM_MAX_BYTES:
            continue

        def forward(form=form):
            return form(torch, phi, tq, tk, tv, keep)

        def training(form=form):
            with torch.enable_grad():
                leaves = [x.clone().requires_grad_() for x in (tq, tk, tv)]
                form(torch, phi, *leaves, keep).backward(tdout)
            return [x.grad for x in leaves]

        calls[name] = (forward, training)
    return calls


def _compared_rows(fm, q, k, lengths, causal):
    """The query rows the diff compares, (B, H, N) bool, and how many real rows it leaves out.

    A row is compared when its normaliser ``den_i = phi(q_i) . Z_i`` (in float64) is at least ``WELL_POSED``
    times ``|phi(q_i)| . |Z_i|`` and ``EPS / EPS_SHARE``: there neither guard decides the output, attnkit's
    relative one (zeros for an RFF estimate ~0 or negative) nor torch's ``+ EPS`` (1% of the first causal
    FAVOR+ rows' ``den``), and float32 rounding is amplified by less than ``1 / WELL_POSED``.
    """
    b, h, n, _ = q.shape
    real = np.ones((b, 1, n), dtype=bool) if lengths is None else (np.arange(n) < lengths[:, None])[:, None, :]
    phi_q = fm.queries(q).astype(np.float64)
    phi_k = fm.keys(k).astype(np.float64) * real[..., None]
    z = np.cumsum(phi_k, axis=2) if causal else phi_k.sum(axis=2, keepdims=True)
    den, mag = np.sum(phi_q * z, axis=-1), np.sum(np.abs(phi_q) * np.abs(z), axis=-1)
    rows = real & (den >= WELL_POSED * mag) & (EPS_SHARE * den >= EPS)
    return rows, int(np.broadcast_to(real, rows.shape).sum() - rows.sum())


def bench(report, args, torch, quick, threads):
    harness.set_threads(threads, torch)
    table = report.table(
        f"Linear attention, float32, {threads} thread{'s' if threads > 1 else ''}",
        ["feature map", "case", "B, H, N, d", "pass", "attnkit", "torch chunked / einsum", "ratio", "torch cumsum",
         "ratio", "max abs diff"],
        "Median time per call ± interquartile range. *ratio* = torch / attnkit (> 1: attnkit is faster). "
        "*feature map*: elu+1; relu; polynomial, degree 2, c = 1 (D = 1 + d + d², 1057 features: d = 32 only); "
        "RFF softmax, random Fourier features of exp(q·k / √d), 128 frequencies (D = 256); FAVOR+, 128 positive "
        "random features. Torch computes each map's features itself, with the random maps' own weights. "
        "*pass*: forward alone, or forward + backward (dq, dk, dv). Padded shapes: attnkit skips padded keys "
        "(key_lengths), torch zeroes their features. *torch cumsum*: only where its B·H·N·D·dv intermediates stay "
        "under 2 GiB. *max abs diff*: forward outputs, attnkit against the first torch formulation, at the real "
        "positions whose normaliser phi(q)·Z (float64) is at least 10⁻³ |phi(q)|·|Z| and 0.1. The rows left out "
        "(counted in the cell) are those where a guard decides the output, attnkit's relative eps (zeros for an "
        "RFF estimate ~0 or < 0) or torch's + 1e-6 (over 10⁻⁵ of the normaliser), or where float32 rounding is "
        "amplified over 1000-fold.",
    )
    rng = np.random.default_rng(0)
    shapes = dict.fromkeys(s for _, full, small in MAPS.values() for s in (small if quick else full))
    inputs = {shape: _inputs(shape, rng, shape[0] > 1) for shape in shapes}
    raw = []
    for label, (fm, full, small) in MAPS.items():
        for shape in small if quick else full:
            padded = shape[0] > 1
            q, k, v, dout, lengths = inputs[shape]
            for causal in (False, True):
                case = ("causal" if causal else "non-causal") + (", padded" if padded else "")
                calls = _calls(torch, fm, shape, causal, q, k, v, dout, lengths)
                for index, pass_label in enumerate(("forward", "fwd + bwd")):
                    timings = harness.compare({name: pair[index] for name, pair in calls.items()},
                                              repeats=args.repeats)
                    ours = timings["attnkit"]
                    first = timings.get("torch chunked", timings.get("torch einsum"))
                    naive = timings.get("torch cumsum")
                    diff = "–"
                    if index == 0 and first is not None:
                        rows, left_out = _compared_rows(fm, q, k, lengths, causal)
                        gap = np.abs(np.asarray(ours.result) - first.result.numpy())
                        diff = harness.fmt_number(float(np.max(np.where(rows[..., None], gap, 0))), 2)
                        if left_out:
                            diff += f" ({left_out} rows out)"
                    table.add_row(label, case, ", ".join(map(str, shape)), pass_label, harness.fmt_time(ours),
                                  harness.fmt_time(first) if first else "–",
                                  harness.fmt_ratio(harness.ratio(first, ours)) if first else "–",
                                  harness.fmt_time(naive) if naive else "–",
                                  harness.fmt_ratio(harness.ratio(naive, ours)) if naive else "–", diff)
                    raw.append({"threads": threads, "feature map": label, "case": case, "shape": shape,
                                "pass": pass_label, **{name: t.as_dict() for name, t in timings.items()}})
    report.data.setdefault("runs", []).extend(raw)


def summarise(report):
    """The 2x target (torch's chunked form for causal rows, its einsum form otherwise) over every row, per
    thread count: how many rows meet it and each that does not."""
    lines = []
    runs = report.data.get("runs", [])
    for threads in dict.fromkeys(run["threads"] for run in runs):
        ratios = []
        for run in (r for r in runs if r["threads"] == threads):
            first = run.get("torch chunked", run.get("torch einsum"))
            if first is not None:
                ratios.append((first["median"] / run["attnkit"]["median"], run))
        if not ratios:
            continue
        missed = [(ratio, run) for ratio, run in ratios if ratio < TARGET]
        lines.append(f"- {threads} thread(s): {len(ratios) - len(missed)} of {len(ratios)} rows at >= {TARGET}x torch "
                     "(chunked form for causal rows, einsum otherwise)" + (" -- met" if not missed else ""))
        for ratio, run in missed:
            shape = ", ".join(map(str, run["shape"]))
            digits = 2 if f"{ratio:.2f}" != f"{TARGET:.2f}" else 3  # 1.996 must not read as 2.00
            lines.append(f"  - {run['feature map']}, {run['case']} ({shape}), {run['pass']}: {ratio:.{digits}f}x -- "
                         "**not met**")
    report.text(f"Targets (>= {TARGET}x torch; the first thread count is the target's)",
                lines or ["- no baseline: nothing to compare"])


def main(argv=None):
    parser = harness.make_parser(__doc__.splitlines()[0])
    args = harness.parse_args(parser, "linear_vs_torch", argv)
    torch = harness.load_torch()
    report = harness.Report(args, "Linear attention: attnkit against torch's einsum, chunked and cumsum forms",
                            torch)
    for threads in dict.fromkeys((args.threads, 1)):
        bench(report, args, torch, args.quick, threads)
    summarise(report)
    report.write()


if __name__ == "__main__":
    main()
