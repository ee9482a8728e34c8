"""Where a :class:`TransformerClassifier` starts: from scratch, or from a pretrained checkpoint.

Every decision that depends on the start gathers here, in one of two objects with the same methods:
the "auto" defaults (learning rate, passes, pooling, how long texts are read, the n-gram bag and TF-IDF
stack), the checks of the parameters, the tokenizer and token space, the network's config and its initial
weights.
The classifier asks ``start_of(self)`` and never branches on ``pretrained`` itself.
"""

import functools
import math

from attnkit.estimators._token_space import PretrainedSpace, VocabularySpace
from attnkit.nn.windows import view_tokens
from attnkit.pretrained.checkpoint import load_checkpoint
from attnkit.text import Vocabulary

__all__ = ["FineTuning", "FromMaskedLM", "FromScratch", "start_of"]

RELATIVE_DISTANCE = 16  # clipping distance of positional="relative"
SCRATCH_EPOCHS = 10  # max_iter="auto" from scratch
# Fine-tuning: about FINE_TUNING_UPDATES optimiser updates, in FINE_TUNING_EPOCHS passes. Small sets need
# several passes to move the pretrained weights (3 passes of 450 texts are 45 updates); large ones need few.
FINE_TUNING_UPDATES = 1000
FINE_TUNING_EPOCHS = (3, 10)
# ... reading at most FINE_TUNING_TOKENS tokens in all (long documents: fewer passes, fractional ones), in
# epochs of at most EPOCH_TOKENS tokens, each ending in a validation (see TrainingOptions.epoch_updates).
# 1.5M tokens are ~17 min of MiniLM on a 2-core Zen 3 (1,440 tokens/s): issue 30's 20-minute budget for
# 5,000 reviews, validation included.
FINE_TUNING_TOKENS = 1_500_000
EPOCH_TOKENS = 500_000
# batch_size="auto": BATCH_SIZE texts an update, but SMALL_BATCH_SIZE when fine-tuning where the token budget
# leaves fewer than FINE_TUNING_UPDATES updates of BATCH_SIZE (long documents): on IMDB reviews (seed 0), 16
# gave 0.915 where 32 gave 0.904, and 8 0.911 (benchmarks/results/eval_pretrained_imdb.md). Only there: short
# sentences get thousands of updates of 32 within the budget, and were measured so.
BATCH_SIZE = 32
SMALL_BATCH_SIZE = 16
# What a pretrained checkpoint decides: these must keep their defaults with pretrained=...
ARCHITECTURE_PARAMS = ("tokenizer", "lowercase", "max_features", "min_df", "d_model", "n_heads", "n_layers", "d_ff",
                       "attention", "positional")


def start_of(clf):
    """The start of classifier ``clf``, by its ``pretrained`` parameter (the checkpoint is read when first
    needed, once per start)."""
    if clf.pretrained is None:
        return FromScratch()
    if hasattr(clf.pretrained, "fill_mask"):  # a MaskedLanguageModel (imported here it would be a cycle)
        return FromMaskedLM(clf.pretrained)
    return FineTuning(clf.pretrained)


class FromScratch:
    """attnkit's tokenizer, a vocabulary learnt from the training texts, a randomly initialised encoder with a
    ``<cls>`` token, and the n-gram bag beside it."""

    tokenizer = None  # the classifier's ``tokenizer`` parameter decides
    learning_rate = 1e-3
    bag_ngrams = 2
    tfidf_stack = False  # the n-gram bag, trained with the encoder, reads whole texts instead
    pooling = "cls"
    # The n-gram bag reads whole texts; the encoder then reads their ends at the cost of max_len.
    long_texts = "head_tail"

    def check(self, clf):
        if clf.d_model % clf.n_heads:
            raise ValueError(f"d_model ({clf.d_model}) must be divisible by n_heads ({clf.n_heads})")

    def max_epochs(self, clf, n_samples):
        return SCRATCH_EPOCHS

    def batch_size(self, clf, samples):
        return BATCH_SIZE

    def plan_epochs(self, clf, samples):
        """(epochs, updates per epoch or None) of ``max_iter="auto"``: whole passes."""
        return self.max_epochs(clf, len(samples)), None

    def token_space(self):
        """The token space known before reading the texts: none, the vocabulary is learnt from them."""
        return None

    def learnt_token_space(self, clf, tokens):
        return VocabularySpace(Vocabulary.build(tokens, max_features=clf.max_features, min_df=clf.min_df))

    def network_config(self, clf, token_space):
        pooling = clf._pooling()
        return {
            "vocab_size": token_space.vocab_size, "n_classes": len(clf.classes_), "d_model": clf.d_model,
            "n_heads": clf.n_heads, "n_layers": clf.n_layers, "d_ff": clf.d_ff, "dropout": float(clf.dropout),
            "attention": clf.attention, "positional": clf.positional, "pooling": pooling,
            "max_len": clf.max_len + 1, "relative_distance": RELATIVE_DISTANCE, "bag_ngrams": clf._bag_ngrams(),
            **clf._long_text_options((1, 0) if pooling == "cls" else (0, 0)),
        }

    def initial_weights(self):
        return {}


class FineTuning:
    """A pretrained checkpoint's tokenizer, vocabulary and encoder, every parameter fine-tuned; the head (and
    the n-gram bag, if asked for) from scratch."""

    tokenizer = "pretrained"
    # 1e-4 for MiniLM: on 3,000 IMDB reviews it beat 5e-5 by a point (0.881 vs 0.872, head + tail, mean pooling;
    # benchmarks/results/eval_pretrained_imdb.md).
    learning_rate = 1e-4
    bag_ngrams = 0  # on 3,000 rt-polarity sentences the bag cost a fine-tuned encoder about a point
    # A linear model fitted apart and weighed on held-out texts instead (benchmarks/results/eval_pretrained_imdb.md)
    tfidf_stack = True
    pooling = "mean"  # sentence-transformers checkpoints are trained to be read so
    long_texts = "chunks"  # IMDB reviews: benchmarks/results/eval_pretrained_imdb.md

    def __init__(self, source):
        self.source = source

    @functools.cached_property
    def checkpoint(self):
        return load_checkpoint(self.source)

    def check(self, clf):
        defaults = type(clf)().get_params()
        changed = [f"{name}={getattr(clf, name)!r}" for name in ARCHITECTURE_PARAMS
                   if getattr(clf, name) != defaults[name]]
        if changed:
            raise ValueError(f"with pretrained={self.source!r} the checkpoint decides the tokenizer, vocabulary "
                             f"and architecture; leave {', '.join(changed)} at their defaults")
        if clf.mlm_epochs:
            raise ValueError(f"mlm_epochs={clf.mlm_epochs} pre-trains an encoder from scratch; with pretrained=... "
                             "the encoder is pretrained already: set mlm_epochs=0")

    def max_epochs(self, clf, n_samples, batch_size=None):
        """Passes for about FINE_TUNING_UPDATES updates of ``batch_size`` texts (the classifier's, by default),
        within FINE_TUNING_EPOCHS."""
        low, high = FINE_TUNING_EPOCHS
        if n_samples is None:
            return low
        updates_per_epoch = math.ceil(n_samples / (batch_size or clf._batch_size()))
        return min(high, max(low, math.ceil(FINE_TUNING_UPDATES / updates_per_epoch)))

    def batch_size(self, clf, samples):
        """SMALL_BATCH_SIZE where the token budget cuts a plan of BATCH_SIZE texts to fewer than
        FINE_TUNING_UPDATES updates, else BATCH_SIZE."""
        if samples is None or clf.max_iter != "auto":
            return BATCH_SIZE
        passes, per_pass, _ = self._passes(clf, samples, BATCH_SIZE)
        cut = passes < self.max_epochs(clf, len(samples), BATCH_SIZE)
        return SMALL_BATCH_SIZE if cut and passes * per_pass < FINE_TUNING_UPDATES else BATCH_SIZE

    def plan_epochs(self, clf, samples):
        """(epochs, updates per epoch or None): :meth:`max_epochs` passes, but at most FINE_TUNING_TOKENS
        tokens read (what the encoder reads: see :func:`attnkit.nn.windows.view_tokens`), cut into epochs of at
        most EPOCH_TOKENS."""
        passes, per_pass, tokens = self._passes(clf, samples, clf._batch_size(samples))
        parts = max(1, math.ceil(tokens / EPOCH_TOKENS))
        return max(1, round(passes * parts)), (math.ceil(per_pass / parts) if parts > 1 else None)

    def _passes(self, clf, samples, batch_size):
        """(passes, updates per pass, tokens per pass) of fine-tuning on ``samples`` in batches of ``batch_size``:
        :meth:`max_epochs` passes, or fewer (a fraction) where they would read more than FINE_TUNING_TOKENS."""
        config = clf._network_config
        tokens = int(view_tokens(samples.lengths, how=config["long_texts"], max_len=config["max_len"],
                                 specials=config["specials"]).sum())
        passes = min(self.max_epochs(clf, len(samples), batch_size), FINE_TUNING_TOKENS / max(tokens, 1))
        return passes, math.ceil(len(samples) / batch_size), tokens

    def token_space(self):
        """The checkpoint's tokenizer and vocabulary, known before reading the texts."""
        return PretrainedSpace(self.checkpoint.tokenizer, self.checkpoint.config.vocab_size)

    def learnt_token_space(self, clf, tokens):
        return None

    def network_config(self, clf, token_space):
        config = self.checkpoint.config
        return {"vocab_size": config.vocab_size, "n_classes": len(clf.classes_), "dropout": float(clf.dropout),
                "pooling": clf._pooling(), "max_len": min(clf.max_len + 2, config.max_position_embeddings),
                "bag_ngrams": clf._bag_ngrams(), **clf._long_text_options(token_space.specials()),
                **self.checkpoint.network_options()}

    def initial_weights(self):
        """The encoder's arrays, by the classifier's own names."""
        return self.checkpoint.weights


class FromMaskedLM(FromScratch):
    """A fitted :class:`attnkit.MaskedLanguageModel`'s vocabulary, embedding and encoder (the course's pretrain
    then fine-tune recipe on one's own text); the rest as from scratch (the head, the n-gram bag, the "auto"
    choices), so that the two differ only by the pretraining."""

    def __init__(self, mlm):
        self.mlm = mlm

    def check(self, clf):
        super().check(clf)
        if not self.mlm.__sklearn_is_fitted__():
            raise ValueError("pretrained=MaskedLanguageModel(...) is not fitted: fit it on text first (note that "
                             "sklearn.base.clone, as GridSearchCV uses, clones it unfitted)")
        mlm = self.mlm._network_config
        route = self.mlm._input
        differ = [f"{name}={getattr(clf, name)!r} (the model's: {value!r})" for name, value in (
            ("tokenizer", route["tokenizer"]), ("lowercase", route["lowercase"]), ("d_model", mlm["d_model"]),
            ("n_heads", mlm["n_heads"]), ("n_layers", mlm["n_layers"]), ("d_ff", mlm["d_ff"]),
            ("attention", mlm["attention"]), ("positional", mlm["positional"])) if getattr(clf, name) != value]
        if differ:
            raise ValueError("with pretrained=MaskedLanguageModel(...), the classifier's tokenizer and encoder must "
                             f"be the masked-language model's: {', '.join(differ)}")
        if clf.max_len > route["max_len"] and clf.positional == "learned":
            raise ValueError(f"max_len={clf.max_len} is longer than the masked-language model's learned positions "
                             f"({route['max_len']})")
        if clf.mlm_epochs:
            raise ValueError(f"mlm_epochs={clf.mlm_epochs} pre-trains the encoder again; with "
                             "pretrained=MaskedLanguageModel(...) it is pretrained: set mlm_epochs=0")

    def token_space(self):
        return VocabularySpace(self.mlm._vocabulary())

    def learnt_token_space(self, clf, tokens):
        return None

    def network_config(self, clf, token_space):
        config = super().network_config(clf, token_space)
        if clf.positional == "learned":  # the table's rows are the masked-language model's
            config["n_positions"] = self.mlm._network_config["max_len"]
        return config

    def initial_weights(self):
        """The embedding's and the encoder's arrays (the masked-token output's bias is left behind)."""
        return {name: value for name, value in self.mlm._weights.items()
                if name.startswith(("embedding.", "encoder."))}
