"""``attnkit demo``: a causal, padded attention batch checked against the NumPy reference, a classifier that
learns where word order decides the label (beside a bag of words), a seq2seq model that learns to rewrite
case, and the build's configuration."""

import os
import tempfile
import time

import numpy as np

__all__ = ["add_arguments", "run"]


def add_arguments(parser):
    """The ``demo`` subcommand's options."""
    parser.add_argument("--pairs", type=int, default=2000, help="training pairs of the seq2seq part")
    parser.add_argument("--epochs", type=int, default=20, help="training epochs of the seq2seq part")


# The demo's classifier: small enough to learn the negation task in seconds on 2 cores.
DEMO_CLASSIFIER = dict(d_model=32, n_heads=2, d_ff=64, n_layers=2, dropout=0.0, learning_rate=3e-3, batch_size=16,
                       max_iter=8, early_stopping=False, random_state=0)


def run(args):
    """The demo: a small causal, padded attention batch checked against the NumPy reference, then the
    classifier, the seq2seq model and the configuration; returns the exit code."""
    import sys

    import attnkit
    from attnkit import reference

    for option in ("pairs", "epochs"):  # before any work: --pairs 0 failed after the classifier, with a traceback
        if getattr(args, option) < 1:
            print(f"attnkit demo: --{option} must be >= 1, got {getattr(args, option)}", file=sys.stderr)
            return 2
    rng = np.random.default_rng(0)
    batch, heads, n, d = 4, 8, 128, 64
    q, k, v = (rng.standard_normal((batch, heads, n, d), dtype=np.float32) for _ in range(3))
    lengths = np.array([128, 100, 64, 17])
    print(f"Causal self-attention, batch={batch} heads={heads} N={n} d={d}, key lengths {lengths.tolist()}")
    start = time.perf_counter()
    out = np.asarray(attnkit.scaled_dot_product_attention(q, k, v, key_lengths=lengths, causal=True))
    elapsed = time.perf_counter() - start
    expected = reference.scaled_dot_product_attention(q, k, v, key_lengths=lengths, causal=True)
    print(f"output shape {out.shape}, {elapsed * 1e3:.2f} ms; "
          f"max |attnkit - numpy reference| = {np.abs(out - expected).max():.2e}")
    _, weights = attnkit.scaled_dot_product_attention(
        q[3, 0, :6, :], k[3, 0, :6, :], v[3, 0, :6, :], causal=True, return_weights=True)
    print("attention weights of the first 6 positions (causal):")
    print(np.array2string(weights, precision=2, suppress_small=True))
    print()
    demo_classifier()
    print()
    demo_seq2seq(args)
    print()
    attnkit.show_config()
    return 0


def demo_classifier():
    """Train a TransformerClassifier on the generated negation task, next to a bag-of-words model."""
    from sklearn.feature_extraction.text import CountVectorizer
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline

    from attnkit import TransformerClassifier
    from attnkit.datasets import make_negation_sentences

    texts, labels = make_negation_sentences(2000, random_state=0)
    X, y, X_test, y_test = texts[:1600], labels[:1600], texts[1600:], labels[1600:]
    print(f"Sentiment where word order matters ({len(X)} generated sentences to train, {len(X_test)} to test), "
          f'e.g. "{X_test[0]}" -> {"positive" if y_test[0] else "negative"}')
    bag = make_pipeline(CountVectorizer(ngram_range=(1, 2), token_pattern=r"\S+"), LogisticRegression())
    print(f"  bag of words and bigrams + logistic regression: accuracy {bag.fit(X, y).score(X_test, y_test):.3f}")
    start = time.perf_counter()
    clf = TransformerClassifier(**DEMO_CLASSIFIER).fit(X, y)
    print(f"  TransformerClassifier ({', '.join(f'{k}={v}' for k, v in DEMO_CLASSIFIER.items())}): "
          f"accuracy {clf.score(X_test, y_test):.3f}, fit {time.perf_counter() - start:.1f} s")
    sentence = "the movie was not very good and truly awful"
    attention = clf.attention_maps([sentence])[0]
    print(f'  attention of the last layer, head 0, for "{sentence}" '
          f"(predicted {'positive' if clf.predict([sentence])[0] else 'negative'}):")
    try:
        from attnkit.plotting import plot_attention

        path = os.path.join(tempfile.gettempdir(), "attnkit-demo-attention.png")
        plot_attention(attention, head=0).savefig(path, bbox_inches="tight")
        print(f"  drawn to {path}")
    except ImportError:
        _print_attention(attention["tokens"], attention["weights"][-1, 0])


def _print_attention(tokens, weights):
    width = max(len(t) for t in tokens)
    print(" " * (width + 2) + " ".join(f"{t[:5]:>5}" for t in tokens))
    for token, row in zip(tokens, weights):
        print(f"  {token:>{width}} " + " ".join(f"{w:5.2f}" for w in row))


SHADES = " .:-=+*#%@"  # weight 0 .. 1, for printing attention maps as text


def demo_seq2seq(args):
    """Train the case-rewriting task briefly; print decodes and a cross-attention map."""
    from attnkit import Seq2SeqTransformer
    from attnkit.datasets import make_case_pairs

    X, y = make_case_pairs(args.pairs, random_state=0, max_words=4)
    X_test, y_test = make_case_pairs(200, random_state=1, max_words=4)
    print(f"Seq2SeqTransformer on the case task ('<U> I am a student' -> 'I AM A STUDENT'), "
          f"{len(X)} pairs, {args.epochs} epochs:")
    model = Seq2SeqTransformer(d_model=48, n_heads=4, encoder_layers=1, decoder_layers=1, max_iter=args.epochs,
                               early_stopping=False, random_state=0, verbose=1)
    start = time.perf_counter()
    model.fit(X, y)
    print(f"fit in {time.perf_counter() - start:.1f} s; exact match on 200 new sentences: "
          f"{model.score(X_test, y_test):.1%}")
    for source, greedy, beam in zip(X_test[:3], model.predict(X_test[:3]),
                                    model.predict(X_test[:3], strategy="beam", num_beams=4)):
        print(f"  {source!r:32} greedy {greedy!r:24} beam {beam!r}")
    maps = model.attention_maps(X_test[:1])[0]
    weights = maps["cross"][-1].mean(axis=0)  # the last layer, averaged over the heads
    print("cross-attention (rows: generated characters, columns: source characters):")
    print("    " + "".join(t[0] if len(t) == 1 else "$" for t in maps["source_tokens"]))
    for token, row in zip(maps["target_tokens"], weights):
        shades = "".join(SHADES[min(int(w * len(SHADES)), len(SHADES) - 1)] for w in row / row.max())
        print(f"  {token if len(token) == 1 else '$'} {shades}")
