"""Words or characters: :class:`Tokenizer` splits English and French text the Penn Treebank way and joins
tokens back into the exact text."""

import re

import numpy as np

__all__ = ["Tokenizer"]

# Contractions are split as the Penn Treebank does ("don't" -> "do" "n't", "it's" -> "it" "'s"), so
# the negation is one token whatever verb it follows; SST-2 and most English corpora are split so.
# French elisions keep their apostrophe ("c'est" -> "c'" "est"); other inner apostrophes and hyphens
# stay inside the word ("aujourd'hui", "o'clock", "peut-être"). Numbers keep their inner separators
# ("10,000", "3.5", "10:30", "9/11") and abbreviations their dots
# ("U.S.", "p.m."). A space before ! ? ; : % (French typography) is kept in the token
# (" !"), so that detokenize can put it back.
_WORD_PATTERN = re.compile(
    r"""\w+(?=n't\b)                                     # "do" of "don't", "ca" of "can't"
      | n't\b                                            # the negation clitic
      | '(?:s|m|d|re|ve|ll)\b                            # 's 'm 'd 're 've 'll
      | \b(?:[cdjlmnst]|qu|jusqu|lorsqu|puisqu|quoiqu|presqu)'(?=\w)   # c' l' qu' ... (French elision)
      | \d+(?:[.,:/]\d+)+                                # 10,000  3.5  10:30  9/11
      | (?:[^\W\d_]\.){2,}                               # U.S.  p.m.
      | \w+(?:-\w+|'(?!(?:s|m|d|re|ve|ll|t)\b)\w+)*      # words, hyphenated words, aujourd'hui
      | (?<=\S)\s+[!?;:%]                                # French spaced punctuation: " !"
      | [^\w\s]                                          # any other character: one punctuation token each
    """,
    re.VERBOSE | re.IGNORECASE,
)
# Typographic apostrophes become ASCII ones before matching, so "don’t" splits like "don't".
_APOSTROPHES = str.maketrans({"\u2019": "'", "\u02bc": "'", "\u2018": "'"})
# For detokenize: tokens written without a space before them, and after them. Straight quotes open
# and close in turn; guillemets take the French inner spaces, as words do.
_NO_SPACE_BEFORE = re.compile(r"^(?:[.,!?;:%)\]}\u2026\u201d]|n't|'(?:s|m|d|re|ve|ll))$", re.IGNORECASE)
_NO_SPACE_AFTER = frozenset("([{$#\u201c")
_STRAIGHT_QUOTES = frozenset("\"'")


class Tokenizer:
    """Split text into word or character tokens, and join tokens back into text.

    Parameters
    ----------
    kind : {"word", "char"}, default="word"
        ``"word"``: a regular expression keeps words (hyphenated words whole) and numbers
        (``"10,000"``) and makes each punctuation mark a token; contractions are split as in the
        Penn Treebank (``"don't"`` -> ``"do"``, ``"n't"``; ``"it's"`` -> ``"it"``, ``"'s"``).
        ``"char"``: every character is a token, spaces included.
    lowercase : bool, default=True
        Lowercase the text first.
    spacing : bool, default=True
        Word tokens: a mark that French spacing puts after a space (``! ? ; : %``) keeps that space
        in its token (``"Quoi ?"`` -> ``"Quoi"``, ``" ?"``), so :meth:`detokenize` restores it. False
        makes it the same token however it is spaced (``"great!"`` and ``"great !"`` read alike):
        what a model that reads text but never writes it wants (the classifier, a source side).

    Examples
    --------
    >>> Tokenizer()("Hello, world! It's 3.5 stars.")
    ['hello', ',', 'world', '!', 'it', "'s", '3.5', 'stars', '.']
    >>> Tokenizer("char", lowercase=False)("Hi!")
    ['H', 'i', '!']
    """

    KINDS = ("word", "char")

    def __init__(self, kind="word", *, lowercase=True, spacing=True):
        if kind not in self.KINDS:
            raise ValueError(f"kind must be one of {self.KINDS}, got {kind!r}")
        for name, value in (("lowercase", lowercase), ("spacing", spacing)):
            if not isinstance(value, (bool, np.bool_)):
                raise TypeError(f"{name} must be a bool, got {type(value).__name__} {value!r}")
        self.kind = kind
        self.lowercase = bool(lowercase)
        self.spacing = bool(spacing)

    def __call__(self, text):
        """The tokens of one string, a list of str (empty for an empty string)."""
        if self.lowercase:
            text = text.lower()
        if self.kind == "char":
            return list(text)
        tokens = _WORD_PATTERN.findall(text.translate(_APOSTROPHES))
        if not self.spacing:
            return [token.lstrip() for token in tokens]
        return [" " + token.lstrip() if token[0].isspace() else token for token in tokens]

    def detokenize(self, tokens):
        """Join tokens into a string: characters end to end; words with single spaces, except before
        punctuation that closes (``. , ! ? ) n't 's``), after punctuation that opens (``( $``) and
        after an elision (``c' l' qu'``); straight quotes open and close in turn.

        ``detokenize(tokenizer(text))`` gives back ``text`` with its whitespace runs made single
        spaces (and lowercased, when lowercasing), for English and French text written as usual:
        either spacing before ``! ? ; : %`` and inside guillemets (``« oui »``). Not restored:
        typographic apostrophes (they come back as ``'``), guillemets written without inner spaces,
        and spacing that no convention uses (``"a ,b"``, ``"(a )"``, ``"100$"``). A lone ``'`` after a
        word in ``s`` is read as a plural possessive (``"the boys' room"``) unless a single quote is open.
        """
        if self.kind == "char":
            return "".join(tokens)
        out: list[str] = []
        glued = True  # the next token follows without a space (at the start, after an opening mark)
        open_quotes: set[str] = set()
        for token in tokens:
            if token == "'" and token not in open_quotes and out and out[-1][-1:] in "sS":
                space_before, space_after = False, True  # a plural possessive: "the boys' room"
            elif token in _STRAIGHT_QUOTES:
                closing = token in open_quotes
                open_quotes ^= {token}
                space_before, space_after = not closing, closing
            else:
                space_before = not (token[:1].isspace() or _NO_SPACE_BEFORE.match(token))
                space_after = token not in _NO_SPACE_AFTER and not (len(token) > 1 and token.endswith("'"))
            if space_before and not glued:
                out.append(" ")
            out.append(token)
            glued = not space_after
        return "".join(out).lstrip()

    def get_config(self):
        """JSON-able constructor arguments: ``Tokenizer(**tokenizer.get_config())`` is equal."""
        return {"kind": self.kind, "lowercase": self.lowercase, "spacing": self.spacing}

    @classmethod
    def from_config(cls, config):
        return cls(**config)

    def __eq__(self, other):
        return isinstance(other, Tokenizer) and self.get_config() == other.get_config()

    def __hash__(self):
        return hash((self.kind, self.lowercase, self.spacing))

    def __repr__(self):
        spacing = "" if self.spacing else ", spacing=False"
        return f"Tokenizer({self.kind!r}, lowercase={self.lowercase}{spacing})"
