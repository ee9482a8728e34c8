"""Text to token ids and back: tokenizers, a vocabulary with special tokens, padding, input checks.

Shared by the text estimators (:class:`attnkit.TransformerClassifier`, and a sequence-to-sequence
model's source and target sides): a :class:`Tokenizer` splits a string into tokens (words with
punctuation and contractions as their own tokens, or characters) and joins tokens back into text;
a :class:`Vocabulary` maps tokens to ids with five reserved ids (``<pad>`` = 0, ``<unk>``,
``<cls>``, ``<bos>``, ``<eos>``); a :class:`TextCodec` maps whole texts to ids and back for a language
model (whitespace kept); :func:`pad_sequences` turns id lists into a padded batch and its
lengths; :func:`check_texts` validates what a user passes as text. Tokenizers and vocabularies
describe themselves as JSON-able dicts (``get_config`` / ``from_config``), so a model file needs
no pickle.

Examples
--------
>>> from attnkit.text import Tokenizer, Vocabulary, pad_sequences
>>> tokenizer = Tokenizer("word")
>>> tokenizer("I don't like it.")
['i', 'do', "n't", 'like', 'it', '.']
>>> docs = [tokenizer(t) for t in ["a good film", "not a good film", "bad"]]
>>> vocab = Vocabulary.build(docs, min_df=2)
>>> vocab.tokens
['<pad>', '<unk>', '<cls>', '<bos>', '<eos>', 'a', 'good', 'film']
>>> ids = [vocab.encode(doc, prefix=[vocab.cls_id]) for doc in docs]
>>> ids
[[2, 5, 6, 7], [2, 1, 5, 6, 7], [2, 1]]
>>> batch, lengths = pad_sequences(ids)
>>> batch.tolist(), lengths.tolist()
([[2, 5, 6, 7, 0], [2, 1, 5, 6, 7], [2, 1, 0, 0, 0]], [4, 5, 2])
>>> tokenizer.detokenize(vocab.decode(ids[1]))
'<unk> a good film'
"""

from attnkit.batching import length_sorted_batches, pad_sequences
from attnkit.text.checks import Texts, check_texts
from attnkit.text.codec import TextCodec
from attnkit.text.subword import SubwordTokenizer
from attnkit.text.tokenizer import Tokenizer
from attnkit.text.vocabulary import SPECIAL_TOKENS, Vocabulary

__all__ = [
    "SPECIAL_TOKENS",
    "SubwordTokenizer",
    "TextCodec",
    "Texts",
    "Tokenizer",
    "Vocabulary",
    "check_texts",
    "length_sorted_batches",
    "pad_sequences",
]
