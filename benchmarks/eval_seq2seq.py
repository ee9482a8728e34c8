"""Seq2SeqTransformer on the course's case task and three real data sets: quality, fit time, decoding speed.

Sections (each a fresh model, ``random_state=0``; sizes in the result file):

0. ``defaults``: the case task with every parameter at its default, over 3 seeds (the course's own check:
   >= 99.5% exact match on new pairs for every seed); alone: ``--tasks defaults --out
   results/seq2seq_defaults.md``.
1. The case task: ``"<U> i am a Student" -> "I AM A STUDENT"``, ``"<L> ..." -> lower case``, generated
   from a word list; exact match on held-out sentences with the default softmax attention, with
   ``attention="linear"`` and with ``positional=None``.
2. Softmax vs Performer vs linear attention on that task: quality and speed side by side (fit time,
   greedy decoding with and without the key/value cache), and a figure ``results/seq2seq.png``.
3. Tatoeba English -> French, filtered as the PyTorch seq2seq tutorial does: BLEU and chrF (sacreBLEU's
   definitions, :mod:`attnkit.metrics`) with greedy and beam search, fit time, decoding tokens/s with
   and without the cache.
4. CMUdict grapheme -> phoneme, split by word: word and phoneme error rates.
5. BBC News article -> headline: ROUGE-L against the lead-sentence baseline, and top-p samples.

The data sets are read from ``--data`` (default ``../shared/data`` beside the repository); a missing
one skips its section with a message. ``--quick`` is a smoke test of a few minutes (tiny sizes, no
result file unless ``--out``); the default run takes about half an hour on two cores.
"""

import time
from pathlib import Path

import numpy as np

import _harness as harness
import _seq2seq_data as data
from attnkit import Seq2SeqTransformer, decoding
from attnkit.datasets import CASE_WORDS, make_case_pairs
from attnkit.metrics import bleu, chrf, edit_distance, rouge_l, word_error_rate
from attnkit.text import pad_sequences

REPO = harness.RESULTS_DIR.parent.parent
SEED = 0  # every split and every model
TEST_FRACTION = 0.1

# Training sizes (pairs, epochs) and evaluation sizes of the default run and of --quick.
SIZES = {
    "default": dict(defaults_train=2000, defaults_test=500, defaults_seeds=3,
                    case_train=3000, case_test=500, case_epochs=20, tatoeba_epochs=20, speed_sentences=200,
                    g2p_train=36000, g2p_test=2000, g2p_epochs=8, bbc_train=None, bbc_epochs=30),
    "quick": dict(defaults_train=300, defaults_test=100, defaults_seeds=1,
                  case_train=600, case_test=100, case_epochs=3, tatoeba_epochs=2, speed_sentences=30,
                  g2p_train=1500, g2p_test=200, g2p_epochs=2, bbc_train=200, bbc_epochs=2),
}

# Model sizes, chosen so that the default run fits the time budget of a 2-core machine.
CASE_MODEL = dict(d_model=64, d_ff=256, n_heads=4, encoder_layers=2, decoder_layers=2, learning_rate=3e-3,
                  early_stopping=False)
TATOEBA_MODEL = dict(tokenizer="word", d_model=128, d_ff=256, n_heads=4, encoder_layers=2, decoder_layers=2,
                     max_source_len=24, max_target_len=24, early_stopping=True, n_iter_no_change=3)
G2P_MODEL = dict(tokenizer="word", d_model=128, d_ff=256, n_heads=4, encoder_layers=2, decoder_layers=2,
                 max_source_len=32, max_target_len=32, learning_rate=3e-3, early_stopping=True, n_iter_no_change=3)
BBC_SOURCE_TOKENS = 64
BBC_MODEL = dict(tokenizer="word", lowercase=True, d_model=128, d_ff=256, n_heads=4, encoder_layers=2, decoder_layers=2,
                 max_source_len=BBC_SOURCE_TOKENS, max_target_len=20, max_source_features=8000,
                 early_stopping=True, n_iter_no_change=3)
BEAMS = 4
SAMPLES, TOP_P = 5, 0.9
ATTENTIONS = ("softmax", "performer", "linear")


def _describe(params):
    return ", ".join(f"{k}={v!r}" for k, v in params.items())


def fit(label, X, y, **params):
    """A fitted Seq2SeqTransformer and its fit time in seconds (printed as it goes)."""
    print(f"\n[{time.strftime('%H:%M:%S')}] fitting {label} on {len(X)} pairs ...", flush=True)
    model = Seq2SeqTransformer(random_state=SEED, **params)
    start = time.perf_counter()
    model.fit(X, y)
    seconds = time.perf_counter() - start
    print(f"  {model.n_iter_} epochs in {seconds:.0f} s", flush=True)
    return model, seconds


def generate(model, X, *, cached=True, **params):
    """``model.predict``'s hypotheses, with the decoder's key/value cache or without it.

    The loop of ``Seq2SeqTransformer._generate`` with :class:`attnkit.decoding.DecoderModel`'s
    ``cached`` exposed (``predict`` always uses the cache); returns a list of lists of Hypothesis.
    """
    net, vocab = model.model_, model.target_vocabulary_
    sources = model._encode_sources([model.tokenizer_(x) for x in X])
    out = [None] * len(sources)
    for rows in model._inference_batches([len(s) for s in sources]):
        source, lengths = pad_sequences([sources[i] for i in rows])
        memory, _ = net.encode(source, lengths)
        decoder = decoding.DecoderModel(net.children["decoder"], memory, lengths, embed=net.embed_target,
                                        project=net.project, cached=cached, capacity=model.max_target_len)
        found = decoding.generate(decoder, len(rows), bos_id=vocab.bos_id, eos_id=vocab.eos_id,
                                  max_length=model.max_target_len, **params)
        for i, hyps in zip(rows, found):
            out[i] = hyps
    return out


def decoding_speed(model, X, strategies, repeats):
    """Output tokens per second of each (strategy, cached) and whether both give the same tokens."""
    fns = {}
    for strategy, params in strategies.items():
        for cached in (True, False):
            fns[strategy, cached] = lambda p=params, c=cached: generate(model, X, cached=c, **p)
    timings = harness.compare(fns, repeats=repeats)
    rows = {}
    for strategy in strategies:
        hyps = [timings[strategy, c].result for c in (True, False)]
        tokens = sum(h[0].tokens.size + h[0].finished for h in hyps[0])
        same = all(np.array_equal(a[0].tokens, b[0].tokens) for a, b in zip(*hyps))
        rows[strategy] = dict(tokens=tokens, same=same, cached=timings[strategy, True],
                              uncached=timings[strategy, False])
    return rows


def _texts(model, hypotheses):
    return [model._detokenize(hyps[0].tokens) for hyps in hypotheses]


def _rate(tokens, timing):
    return f"{tokens / timing.median:,.0f}" + (" †" if timing.contended else "")


# ------------------------------------------------------------------------------------------- case task


def case_section(report, args, sizes):
    """Fits of the case task: softmax, linear and Performer attention, and no positions."""
    X, y = make_case_pairs(sizes["case_train"], random_state=SEED)
    seen = set(X)
    held_out = [(x, t) for x, t in zip(*make_case_pairs(2 * sizes["case_test"], random_state=SEED + 1))
                if x not in seen][: sizes["case_test"]]
    X_test, y_test = [x for x, _ in held_out], [t for _, t in held_out]
    epochs = sizes["case_epochs"]
    variants = {"softmax": {}, "linear": {"attention": "linear"}, "performer": {"attention": "performer"},
                "softmax, positional=None": {"positional": None}}
    results = {}
    for name, extra in variants.items():
        model, seconds = fit(f"case task, {name}", X, y, max_iter=epochs, **CASE_MODEL, **extra)
        predicted = model.predict(X_test)
        results[name] = dict(
            model=model, seconds=seconds, loss_curve=model.loss_curve_,
            exact=float(np.mean([p == t for p, t in zip(predicted, y_test)])),
            cer=word_error_rate([list(t) for t in y_test], [list(p) for p in predicted]),
            examples=[(x, p) for x, p, t in zip(X_test, predicted, y_test) if p != t][:2],
        )
    table = report.table(
        "Case task: what each part contributes",
        ["model", "held-out exact match", "character error rate", "fit time", "epochs"],
        f"`attnkit.datasets.make_case_pairs`: {sizes['case_train']} training pairs (seed {SEED}) and "
        f"{len(X_test)} held-out ones (seed {SEED + 1}, none of them a training source): 3-6 words of a "
        f"{len(CASE_WORDS)}-word list, capitalised half of the time, tag `<U>` or `<L>`. "
        f"Character tokens; {_describe(CASE_MODEL)}, max_iter={epochs}; greedy decoding.",
    )
    for name in ("softmax", "linear", "softmax, positional=None"):
        r = results[name]
        table.add_row(name if name != "softmax" else "softmax, sinusoidal positions (default)",
                      f"{100 * r['exact']:.1f}%", f"{100 * r['cer']:.2f}%", f"{r['seconds']:.0f} s", epochs)
    lines = []
    for name, r in results.items():
        for source, got in r["examples"]:
            lines.append(f"- {name}: `{source}` -> `{got}`")
    report.text("Case task: held-out errors (first two per model)", lines or ["- none"])
    return results, (X_test, y_test)


def defaults_section(report, args, sizes):
    """The case task with every parameter at its default, over several seeds: the course's own check."""
    X_test, y_test = make_case_pairs(sizes["defaults_test"], random_state=999)
    rows = []
    for seed in range(sizes["defaults_seeds"]):
        X, y = make_case_pairs(sizes["defaults_train"], random_state=100 + seed)
        unseen = [i for i, x in enumerate(X_test) if x not in set(X)]
        print(f"\n[{time.strftime('%H:%M:%S')}] fitting the defaults, seed {seed} ...", flush=True)
        start = time.perf_counter()
        model = Seq2SeqTransformer(random_state=seed).fit(X, y)
        seconds = time.perf_counter() - start
        predicted = model.predict([X_test[i] for i in unseen])
        exact = float(np.mean([p == y_test[i] for p, i in zip(predicted, unseen)]))
        rows.append(dict(seed=seed, exact=exact, n_test=len(unseen), seconds=seconds, epochs=model.n_iter_))
    table = report.table(
        "Case task with the defaults: `Seq2SeqTransformer(random_state=seed).fit(X, y)`",
        ["seed", "held-out exact match", "test pairs", "fit time", "epochs"],
        f"`make_case_pairs({sizes['defaults_train']}, random_state=100 + seed)` to train; "
        f"`make_case_pairs({sizes['defaults_test']}, random_state=999)` to test, less any source seen in "
        "training; greedy decoding. Target: >= 99.5% on every seed.")
    for r in rows:
        table.add_row(r["seed"], f"{100 * r['exact']:.1f}%", r["n_test"], f"{r['seconds']:.0f} s", r["epochs"])
    worst = min(r["exact"] for r in rows)
    report.text("Case task with the defaults: verdict",
                [f"- mean {100 * np.mean([r['exact'] for r in rows]):.2f}%, worst seed {100 * worst:.1f}%: target "
                 + ("met" if worst >= 0.995 else "**not met**")])
    return rows


def attention_section(report, args, sizes, case_results, case_test):
    """Softmax vs Performer vs linear attention on the case task: quality and speed."""
    X_test, _ = case_test
    X_speed = X_test[: sizes["speed_sentences"]]
    table = report.table(
        "Softmax vs Performer vs linear attention (case task)",
        ["attention", "exact match", "char. error rate", "fit time", "s / epoch", "greedy tokens/s, cache",
         "without cache", "cache speed-up"],
        f"The models of the case task above (same data, sizes and epochs). Decoding: greedy, "
        f"{len(X_speed)} held-out sources, median of the repeats; the cache holds the projected keys "
        "and values of the past (softmax) or the running sums of causal linear and Performer attention; "
        "without it the decoder reruns the whole prefix at every step.",
    )
    for name in ATTENTIONS:
        r = case_results[name]
        speed = decoding_speed(r["model"], X_speed, {"greedy": {}}, args.repeats)["greedy"]
        r["speed"] = speed
        table.add_row(name, f"{100 * r['exact']:.1f}%", f"{100 * r['cer']:.2f}%", f"{r['seconds']:.0f} s",
                      f"{r['seconds'] / r['model'].n_iter_:.1f} s", _rate(speed["tokens"], speed["cached"]),
                      _rate(speed["tokens"], speed["uncached"]),
                      harness.fmt_ratio(harness.ratio(speed["uncached"], speed["cached"]))
                      + ("" if speed["same"] else " (outputs differ!)"))
    if args.out is not None:
        png = args.out.with_suffix(".png")
        if plot_attention(case_results, png):
            report.text("Figure", [f"![softmax vs Performer vs linear attention]({png.name})"])


def plot_attention(results, path):
    """Loss curves, held-out exact match and decoding speed of the three attentions; False without matplotlib."""
    try:
        import matplotlib
    except ImportError:
        print("note: matplotlib is not installed; the figure is skipped (pip install matplotlib)")
        return False
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    colours = [dict(zip(ATTENTIONS, ("tab:blue", "tab:orange", "tab:green")))[n] for n in ATTENTIONS]
    fig, axes = plt.subplots(1, 4, figsize=(16, 4), constrained_layout=True)
    for name, colour in zip(ATTENTIONS, colours):
        curve = results[name]["loss_curve"]
        axes[0].plot(range(1, len(curve) + 1), curve, color=colour, marker="o", ms=3, label=name)
    axes[0].set(xlabel="epoch", ylabel="training loss (label-smoothed)", title="training loss")
    axes[0].legend()
    per_epoch = [results[n]["seconds"] / results[n]["model"].n_iter_ for n in ATTENTIONS]
    panels = ((axes[1], [100 * results[n]["exact"] for n in ATTENTIONS], "held-out exact match (%)",
               "quality (greedy)", "{:.1f}%", 110),
              (axes[2], per_epoch, "seconds per epoch", "training time", "{:.1f} s", 1.15 * max(per_epoch)))
    for ax, values, ylabel, title, label, top in panels:
        ax.bar(ATTENTIONS, values, color=colours)
        for i, value in enumerate(values):
            ax.text(i, value, label.format(value), ha="center", va="bottom")
        ax.set(ylabel=ylabel, title=title, ylim=(0, top))
    x = np.arange(len(ATTENTIONS))
    for offset, key, label, hatch in ((-0.2, "cached", "with cache", None), (0.2, "uncached", "without cache", "//")):
        rates = [results[n]["speed"]["tokens"] / results[n]["speed"][key].median for n in ATTENTIONS]
        axes[3].bar(x + offset, rates, 0.4, color=colours, hatch=hatch, label=label, edgecolor="black", linewidth=0.5)
    axes[3].set_xticks(x, ATTENTIONS)
    axes[3].set_yscale("log")
    axes[3].set(ylabel="generated tokens / s (log scale)", title="greedy decoding speed")
    axes[3].legend()
    fig.suptitle("Case task (character seq2seq): softmax vs Performer vs linear attention")
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return True


# --------------------------------------------------------------------------------------------- Tatoeba


def tatoeba_section(report, args, sizes):
    (X, y), (X_test, refs), n_pairs = data.tatoeba(args.data, TEST_FRACTION, SEED)
    if args.quick:
        X, y, X_test, refs = X[:1500], y[:1500], X_test[:100], refs[:100]
    model, seconds = fit("Tatoeba eng->fra", X, y, max_iter=sizes["tatoeba_epochs"], **TATOEBA_MODEL)
    scores = {}
    for strategy, params in (("greedy", {}), (f"beam {BEAMS}", {"strategy": "beam", "num_beams": BEAMS})):
        hyps = [data.french_detokenize(t) for t in _texts(model, generate(model, X_test, **params))]
        scores[strategy] = dict(bleu=bleu(refs, hyps), chrf=chrf(refs, hyps), hyps=hyps)
    table = report.table(
        "Tatoeba English -> French",
        ["decoding", "BLEU", "chrF", "fit time", "epochs"],
        f"{n_pairs:,} pairs pass the PyTorch tutorial's filter (both sides < {data.TUTORIAL_MAX_LENGTH} words "
        "after its normalisation, English starting with i am / he is / she is / you are / we are / they are or "
        f"their contractions); {TEST_FRACTION:.0%} of the distinct English sentences are held out (seed {SEED}) "
        f"with all their translations: {len(X_test)} test sentences with {sum(map(len, refs))} references "
        f"(multi-reference BLEU and chrF, case-sensitive, sacreBLEU's defaults), {len(X)} training pairs. The "
        "model sees the original text (case, accents). Word tokens; "
        f"{_describe(TATOEBA_MODEL)}, max_iter={sizes['tatoeba_epochs']}, early stopping on 10% of the training "
        "pairs. Outputs are detokenized and French elisions re-attached (`J ' ai` -> `J'ai`).",
    )
    for strategy, s in scores.items():
        table.add_row(strategy, f"{s['bleu']:.1f}", f"{s['chrf']:.1f}", f"{seconds:.0f} s", model.n_iter_)
    report.text("Tatoeba: examples (greedy)", [
        f"- `{x}` -> `{h}` (reference: `{r[0]}`)" for x, h, r in list(zip(X_test, scores["greedy"]["hyps"], refs))[:8]])
    speed = decoding_speed(model, X_test[: sizes["speed_sentences"]],
                           {"greedy": {}, f"beam {BEAMS}": {"strategy": "beam", "num_beams": BEAMS}}, args.repeats)
    table = report.table(
        "Tatoeba: decoding speed with and without the key/value cache",
        ["decoding", "output tokens", "tokens/s, cache", "time, cache", "tokens/s, no cache", "time, no cache",
         "cache speed-up", "same output"],
        f"{sizes['speed_sentences']} test sentences, batched as `predict` batches them; output tokens include "
        "the end token; beam search counts the returned hypothesis only.",
    )
    for strategy, r in speed.items():
        table.add_row(strategy, r["tokens"], _rate(r["tokens"], r["cached"]), harness.fmt_time(r["cached"]),
                      _rate(r["tokens"], r["uncached"]), harness.fmt_time(r["uncached"]),
                      harness.fmt_ratio(harness.ratio(r["uncached"], r["cached"])), "yes" if r["same"] else "NO")
    return {"n_pairs": n_pairs, "speed_sentences": len(X_test[: sizes["speed_sentences"]]), "fit_seconds": seconds,
            "epochs": model.n_iter_,
            "scores": {k: {"bleu": v["bleu"], "chrf": v["chrf"]} for k, v in scores.items()},
            "speed": {k: {"tokens": v["tokens"], "cached_s": v["cached"].median, "uncached_s": v["uncached"].median}
                      for k, v in speed.items()}}


# --------------------------------------------------------------------------------------------- CMUdict


def g2p_errors(references, hypotheses):
    """Word error rate (share of words matching none of their pronunciations) and phoneme error rate
    (edit distance to the closest pronunciation over its length, summed over the words)."""
    closest = [min(refs, key=lambda r: edit_distance(r, h)) for refs, h in zip(references, hypotheses)]
    wrong = [h not in refs for refs, h in zip(references, hypotheses)]
    return float(np.mean(wrong)), word_error_rate(closest, hypotheses)


def cmudict_section(report, args, sizes):
    (X, y), (X_test, refs), n_words = data.cmudict(args.data, sizes["g2p_train"], sizes["g2p_test"], SEED)
    model, seconds = fit("CMUdict g2p", X, y, max_iter=sizes["g2p_epochs"], **G2P_MODEL)
    table = report.table(
        "CMUdict grapheme -> phoneme",
        ["decoding", "word error rate", "phoneme error rate", "fit time", "epochs"],
        f"{n_words:,} distinct words of letters and apostrophes; {sizes['g2p_test']} held-out words (seed {SEED}), "
        f"trained on {sizes['g2p_train']:,} other words ({len(X):,} pronunciations); stress digits removed (39 "
        "phonemes, as in the published CMUdict G2P results). A word is right when the output equals any of its "
        "pronunciations; the phoneme error rate is the edit distance to the closest one over its length. "
        "One tokenizer serves both sides, so the source is spelled out with spaces (`h e l l o`) and "
        "`tokenizer=\"word\"` makes each letter and each phoneme (`HH AH L OW`) a token. "
        f"{_describe(G2P_MODEL)}, max_iter={sizes['g2p_epochs']}, early stopping on 10%.",
    )
    results = {}
    for strategy, params in (("greedy", {}), (f"beam {BEAMS}", {"strategy": "beam", "num_beams": BEAMS})):
        hyps = _texts(model, generate(model, X_test, **params))
        wer, per = g2p_errors(refs, hyps)
        results[strategy] = {"wer": wer, "per": per}
        table.add_row(strategy, f"{100 * wer:.1f}%", f"{100 * per:.1f}%", f"{seconds:.0f} s", model.n_iter_)
    return {"n_words": n_words, "train_words": sizes["g2p_train"], "fit_seconds": seconds, "epochs": model.n_iter_,
            "scores": results}


# ------------------------------------------------------------------------------------------------- BBC


def bbc_section(report, args, sizes):
    (X, y), (X_test, refs), n_articles = data.bbc(args.data, TEST_FRACTION, SEED, sizes["bbc_train"])
    model, seconds = fit("BBC headlines", X, y, max_iter=sizes["bbc_epochs"], **BBC_MODEL)
    greedy = model.predict(X_test)
    beam = model.predict(X_test, strategy="beam", num_beams=BEAMS, no_repeat_ngram_size=2)
    samples = model.predict(X_test, strategy="sample", top_p=TOP_P, num_return_sequences=SAMPLES,
                            random_state=SEED)
    leads = [data.lead_sentence(a) for a in X_test]
    first_words = [" ".join(a.split()[:8]) for a in X_test]
    per_sample = [rouge_l(refs, [s[j] for s in samples]) for j in range(SAMPLES)]
    oracle = float(np.mean([max(rouge_l([r], [s]) for s in ss) for r, ss in zip(refs, samples)]))
    distinct = float(np.mean([len(set(ss)) for ss in samples]))
    rows = [
        ("lead sentence (baseline)", rouge_l(refs, leads)),
        ("first 8 words (baseline)", rouge_l(refs, first_words)),
        ("model, greedy", rouge_l(refs, list(greedy))),
        (f"model, beam {BEAMS} (no repeated bigram)", rouge_l(refs, list(beam))),
        (f"model, top-p {TOP_P} sample (mean of {SAMPLES})", float(np.mean(per_sample))),
        (f"model, best of {SAMPLES} samples (oracle)", oracle),
    ]
    table = report.table(
        "BBC News: article -> headline",
        ["headline", "ROUGE-L F"],
        f"{n_articles:,} distinct articles; {TEST_FRACTION:.0%} held out (seed {SEED}): {len(X_test)} test, "
        f"{len(X)} training articles. The source is the article's first {BBC_SOURCE_TOKENS - 1} word tokens. "
        f"ROUGE-L F-measure (rouge-score's tokenizer, no stemming), mean over articles. {_describe(BBC_MODEL)}, "
        f"max_iter={sizes['bbc_epochs']}, early stopping on 10%; fit {seconds:.0f} s, {model.n_iter_} epochs. "
        f"Samples: {SAMPLES} per article, top_p={TOP_P}, {distinct:.1f} distinct on average.",
    )
    for name, score in rows:
        table.add_row(name, f"{score:.3f}")
    report.text("BBC: examples", [
        f"- reference `{r}`; greedy `{g}`; samples: " + " / ".join(f"`{s}`" for s in ss[:3])
        for r, g, ss in list(zip(refs, greedy, samples))[:6]])
    return {"n_articles": n_articles, "n_train": len(X), "fit_seconds": seconds, "epochs": model.n_iter_,
            "rouge_l": dict(rows), "distinct_samples": distinct}


# -------------------------------------------------------------------------------------------- findings

PUBLISHED_G2P_WER = 0.25  # seq2seq models on CMUdict's standard split (e.g. Yao & Zweig, 2015): about 25%


def _compare(a, b, unit=""):
    return f"{a:.1f}{unit} vs {b:.1f}{unit}"


def findings(results):
    """The bullet points under the tables, their numbers read from the results of this run."""
    lines = []
    case = results.get("case")
    if case:
        base, linear, bag = case["softmax"], case["linear"], case["softmax, positional=None"]
        lines.append(
            f"- Case task: exact match {100 * base['exact']:.1f}% with softmax attention and sinusoidal positions, "
            f"{100 * linear['exact']:.1f}% with linear attention, {100 * bag['exact']:.1f}% without positions. "
            "Without positional encodings the encoder sees a bag of characters (attention is permutation-"
            "invariant), so the decoder cannot tell in which order to copy them; the tag and the character "
            "set are all it can use.")
        perf = case["performer"]
        slower = {n: case[n]["fit_seconds"] / base["fit_seconds"] for n in ("performer", "linear")}
        lines.append(
            f"- Attention kinds on the case task: exact match softmax {100 * base['exact']:.1f}%, Performer "
            f"{100 * perf['exact']:.1f}%, linear {100 * linear['exact']:.1f}%; fit time {base['fit_seconds']:.0f} s, "
            f"{perf['fit_seconds']:.0f} s ({slower['performer']:.2f}x softmax's) and {linear['fit_seconds']:.0f} s "
            f"({slower['linear']:.2f}x). Sequences here are 20-45 characters: exact attention over so few keys "
            "is cheap, and Performer's 128 random features per 16-wide head are more work than it; linear "
            "attention's O(N) cost pays off only at long sequences (linear_attention.md has the crossover).")
        speedups = ", ".join(f"{n} {c['uncached_s'] / c['cached_s']:.1f}x" for n, c in case.items() if "cached_s" in c)
        lines.append(f"- Greedy decoding with the cache vs rerunning the decoder over the prefix (case task, outputs "
                     f"of ~20-45 characters): {speedups} faster.")
    tatoeba = results.get("tatoeba")
    if tatoeba:
        greedy, beam = tatoeba["scores"]["greedy"], tatoeba["scores"][f"beam {BEAMS}"]
        speed = tatoeba["speed"]["greedy"]
        lines.append(
            f"- Tatoeba: BLEU {_compare(greedy['bleu'], beam['bleu'])} (greedy vs beam {BEAMS}), chrF "
            f"{_compare(greedy['chrf'], beam['chrf'])}, after {tatoeba['fit_seconds'] / 60:.1f} min of training. "
            f"The outputs are short (~{speed['tokens'] / tatoeba['speed_sentences']:.0f} tokens), so the cache saves "
            f"little there ({speed['uncached_s'] / speed['cached_s']:.2f}x for greedy): the O(T^2) recomputation it "
            "avoids only dominates for longer outputs.")
    g2p = results.get("cmudict")
    if g2p:
        wer = min(v["wer"] for v in g2p["scores"].values())
        verdict = "under" if wer < PUBLISHED_G2P_WER else "above"
        lines.append(
            f"- CMUdict: best word error rate {100 * wer:.1f}%, {verdict} the ~{100 * PUBLISHED_G2P_WER:.0f}% of "
            "published seq2seq models (trained on the ~107k words of the standard split, for hours on a GPU); this "
            "model saw "
            f"{g2p['train_words']:,} words for {g2p['fit_seconds'] / 60:.1f} min.")
    news = results.get("bbc")
    if news:
        scores = news["rouge_l"]
        lead, model = scores["lead sentence (baseline)"], scores["model, greedy"]
        lines.append(
            f"- BBC headlines: ROUGE-L {model:.3f} for the model (greedy) against {lead:.3f} for the lead "
            f"sentence. With ~{news['n_train']:,} training articles and a word vocabulary mostly seen once, a "
            "headline model learns the style (short, present tense) more than the content; extractive baselines "
            "copy the right names.")
    return lines


# ------------------------------------------------------------------------------------------------ main


def main(argv=None):
    parser = harness.make_parser(__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=REPO.parent / "shared" / "data",
                        help="folder of the data sets (default: ../shared/data beside the repository)")
    parser.add_argument("--tasks", default="defaults,case,tatoeba,cmudict,bbc",
                        help="comma-separated sections to run (the attention comparison comes with case)")
    for name, value in SIZES["default"].items():
        parser.add_argument(f"--{name.replace('_', '-')}", type=int, default=None,
                            help=f"size: {name.replace('_', ' ')} (default {value}; quick: {SIZES['quick'][name]})")
    args = harness.parse_args(parser, "seq2seq", argv)
    sizes = {k: v if getattr(args, k) is None else getattr(args, k)
             for k, v in SIZES["quick" if args.quick else "default"].items()}
    tasks = [t.strip() for t in args.tasks.split(",") if t.strip()]
    unknown = set(tasks) - {"defaults", "case", "tatoeba", "cmudict", "bbc"}
    if unknown:
        parser.error(f"--tasks: unknown {sorted(unknown)}; choose among defaults, case, tatoeba, cmudict, bbc")

    harness.set_threads(args.threads)
    report = harness.Report(args, "Seq2SeqTransformer: case task, translation, grapheme-to-phoneme, headlines")
    start = time.perf_counter()
    sections = {
        "defaults": lambda: defaults_section(report, args, sizes),
        "case": lambda: _case_and_attention(report, args, sizes),
        "tatoeba": lambda: tatoeba_section(report, args, sizes),
        "cmudict": lambda: cmudict_section(report, args, sizes),
        "bbc": lambda: bbc_section(report, args, sizes),
    }
    for task in tasks:
        try:
            report.data[task] = sections[task]()
        except data.MissingData as error:
            message = f"skipped: {error} (pass --data to point at the data sets)"
            print(f"\n{task}: {message}")
            report.text(f"{task}: skipped", [message])
    report.text("What the numbers show", findings(report.data))
    report.text("Run", [f"Whole run: {(time.perf_counter() - start) / 60:.1f} min. Sizes: {_describe(sizes)}."])
    report.write()


def _case_and_attention(report, args, sizes):
    results, test = case_section(report, args, sizes)
    attention_section(report, args, sizes, results, test)
    return {name: {"exact": r["exact"], "cer": r["cer"], "fit_seconds": r["seconds"], "loss_curve": r["loss_curve"],
                   **({"greedy_tokens": r["speed"]["tokens"], "cached_s": r["speed"]["cached"].median,
                       "uncached_s": r["speed"]["uncached"].median} if "speed" in r else {})}
            for name, r in results.items()}


if __name__ == "__main__":
    main()
