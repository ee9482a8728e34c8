"""Generated sentences of English and French for the tokenizer tests (tests/test_text_*.py)."""

from hypothesis import strategies as st

# Words and punctuation of English and French, written as each language writes them; a sentence is
# words joined by spaces, each word maybe wrapped or followed by punctuation.
WORDS = ["C'est", "l'homme", "j'ai", "qu'il", "aujourd'hui", "d'accord", "don't", "it's", "I'm", "can't", "we'll",
          "peut-être", "est-ce", "vingt-et-un", "well-known", "3.5", "10,000", "U.S.", "the", "Été", "naïve"]
AFTER = ["", ",", ".", "...", "!", " !", "?", " ?", ";", " ;", ":", " :", "%", " %"]
WRAPS = [("", ""), ("(", ")"), ('"', '"'), ("« ", " »"), ("$", "")]


@st.composite
def sentences(draw):
    parts = []
    for word in draw(st.lists(st.sampled_from(WORDS), min_size=1, max_size=8)):
        before, after = draw(st.sampled_from(WRAPS))
        parts.append(before + word + after + draw(st.sampled_from(AFTER)))
    return " ".join(parts)
