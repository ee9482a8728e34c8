"""The real data sets of ``eval_seq2seq.py`` (the case task is :func:`attnkit.datasets.make_case_pairs`).

Each loader reads one folder of ``shared/data`` (see its SOURCE.md), applies the filter the
evaluation describes and returns a fixed-seed split: training pairs, and held-out sources with
every reference they have. A loader whose file is missing raises :class:`MissingData`, which the
evaluation reports as a skipped section.
"""

import json
import re
import unicodedata
from pathlib import Path

import numpy as np

# The English prefixes of the PyTorch seq2seq tutorial, on its normalised text ("I'm" -> "i m").
TUTORIAL_PREFIXES = ("i am ", "i m ", "he is", "he s ", "she is", "she s ", "you are", "you re ", "we are",
                     "we re ", "they are", "they re ")
TUTORIAL_MAX_LENGTH = 10


class MissingData(Exception):
    """A data file of shared/data is not there."""


def _require(path):
    path = Path(path)
    if not path.is_file():
        raise MissingData(f"{path} not found")
    return path


def _held_out(n_items, fraction, seed):
    """A boolean mask of the held-out items: ``round(fraction * n)`` of them, drawn with ``seed``."""
    rng = np.random.default_rng(seed)
    mask = np.zeros(n_items, bool)
    mask[rng.permutation(n_items)[: round(fraction * n_items)]] = True
    return mask


# --------------------------------------------------------------------------------------------- Tatoeba


def _tutorial_normalise(text):
    """The PyTorch tutorial's normalizeString: lowercase, strip accents, keep letters and ! ? only."""
    text = "".join(c for c in unicodedata.normalize("NFD", text.lower().strip()) if unicodedata.category(c) != "Mn")
    text = re.sub(r"([.!?])", r" \1", text)
    return re.sub(r"[^a-zA-Z!?]+", r" ", text).strip()


def tatoeba(folder, test_fraction, seed):
    """English -> French pairs kept by the PyTorch tutorial's filter, split by English sentence.

    The filter (on the tutorial's normalised text): both sides shorter than 10 words, English side
    starting with one of :data:`TUTORIAL_PREFIXES`. The model sees the original sentences (case,
    accents, punctuation). ``test_fraction`` of the distinct English sentences are held out with all
    their translations, which serve as references together (so no held-out source is in training).

    Returns
    -------
    train : (list of str, list of str)
        English and French sentences.
    test : (list of str, list of list of str)
        Distinct English sentences and their French translations.
    n_pairs : int
        Pairs kept by the filter.
    """
    path = _require(Path(folder) / "tatoeba_eng_fra" / "eng-fra.txt")
    translations = {}
    n_pairs = 0
    for line in path.read_text(encoding="utf-8").splitlines():
        english, french = line.split("\t")
        e, f = _tutorial_normalise(english), _tutorial_normalise(french)
        if (len(e.split(" ")) < TUTORIAL_MAX_LENGTH and len(f.split(" ")) < TUTORIAL_MAX_LENGTH
                and e.startswith(TUTORIAL_PREFIXES)):
            translations.setdefault(english, []).append(french)
            n_pairs += 1
    sources = list(translations)
    held = _held_out(len(sources), test_fraction, seed)
    train = [(e, f) for e, h in zip(sources, held) if not h for f in translations[e]]
    test = [e for e, h in zip(sources, held) if h]
    return ([e for e, _ in train], [f for _, f in train]), (test, [translations[e] for e in test]), n_pairs


def french_detokenize(text):
    """Re-attach French elisions that the word tokenizer's detokenizer spaces out (``"J ' ai"`` -> ``"J'ai"``)."""
    return re.sub(r"(\w) ' (?=\w)", r"\1'", text)


# --------------------------------------------------------------------------------------------- CMUdict

_CMU_WORD = re.compile(r"^[a-z']+$")


def cmudict(folder, n_train, n_test, seed):
    """Grapheme -> phoneme pairs of CMUdict, split by word, stress digits removed (39 phonemes).

    Only words of letters and apostrophes are kept (no abbreviations with periods, no digits). A
    word's alternative pronunciations (``word(2)``) all go to the same side of the split; in
    training each is a pair of its own, in testing they are the references together.
    ``n_test`` words are held out with ``seed``, and ``n_train`` of the others (drawn with the same
    seed) are trained on.

    Returns
    -------
    train : (list of str, list of str)
        Spelled-out words (``"h e l l o"``) and phoneme strings (``"HH AH L OW"``).
    test : (list of str, list of list of str)
        Spelled-out words and their pronunciations.
    n_words : int
        Distinct words kept.
    """
    path = _require(Path(folder) / "cmudict" / "cmudict.dict")
    pronunciations = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        entry = line.split(" #", 1)[0].split()
        word = re.sub(r"\(\d+\)$", "", entry[0])
        if _CMU_WORD.match(word):
            phones = " ".join(re.sub(r"\d", "", p) for p in entry[1:])
            if phones not in pronunciations.setdefault(word, []):
                pronunciations[word].append(phones)
    words = sorted(pronunciations)
    order = np.random.default_rng(seed).permutation(len(words))
    test = [words[i] for i in order[:n_test]]
    train_words = [words[i] for i in order[n_test : n_test + n_train]]
    train = [(" ".join(w), p) for w in train_words for p in pronunciations[w]]
    return (([w for w, _ in train], [p for _, p in train]),
            ([" ".join(w) for w in test], [pronunciations[w] for w in test]), len(words))


# ----------------------------------------------------------------------------------------------- BBC

# The articles' sentences end with . ! ? and a space before a capital letter or a quote.
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z\"'])")


def lead_sentence(article):
    """The article's first sentence (the classic extractive baseline for a headline)."""
    return _SENTENCE_END.split(article.strip(), 1)[0]


def bbc(folder, test_fraction, seed, n_train=None):
    """Article -> headline pairs of the BBC News Summary set, de-duplicated, split at random.

    Returns
    -------
    train : (list of str, list of str)
        Articles (paragraphs joined by spaces) and headlines.
    test : (list of str, list of str)
        The same for the held-out articles.
    n_articles : int
        Distinct articles.
    """
    path = _require(Path(folder) / "bbc_news_summary" / "bbc_news_summary.jsonl")
    seen, articles, headlines = set(), [], []
    for line in path.read_text(encoding="utf-8").splitlines():
        row = json.loads(line)
        key = (row["headline"], row["article"])
        if key not in seen:
            seen.add(key)
            articles.append(row["article"].replace("\n", " "))
            headlines.append(row["headline"])
    held = _held_out(len(articles), test_fraction, seed)
    train = [i for i in range(len(articles)) if not held[i]][:n_train]
    test = np.flatnonzero(held)
    return (([articles[i] for i in train], [headlines[i] for i in train]),
            ([articles[i] for i in test], [headlines[i] for i in test]), len(articles))
