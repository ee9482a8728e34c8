"""Masked-language-model pre-training of a text estimator's embedding and encoder on its own texts.

A short pass of BERT's objective (predict hidden tokens from the others) over the training texts
before the supervised epochs: the encoder learns how words combine from every token, not only from
one label per text. It runs in the same training loop as the supervised epochs.
"""

import numpy as np

from attnkit.estimators._training import train
from attnkit.nn import CrossEntropyLoss, Module, TiedOutput, mask_tokens
from attnkit.text import SPECIAL_TOKENS, Vocabulary, pad_sequences

__all__ = ["masked_lm_batch_loss", "pretrain_masked_lm"]

MASK_PROBABILITY = 0.15


def pretrain_masked_lm(network, docs, options, *, rng):
    """Train ``network``'s embedding and encoder to fill in masked tokens of ``docs``.

    Parameters
    ----------
    network : attnkit.nn.SequenceClassifier
        Anything with ``encode`` / ``backward_encode`` and ``embedding`` and ``encoder`` children
        whose token table is ``embedding.tokens``.
    docs : list of lists of int
        Token ids (special ids below ``len(SPECIAL_TOKENS)`` are never hidden nor predicted).
    options : attnkit.estimators._training.TrainingOptions
        The loop's options (no validation, no early stopping is used here).
    rng : numpy.random.Generator
        Shuffling and masking.

    Returns
    -------
    attnkit.estimators._training.History
        Its ``loss_curve`` is the masked tokens' mean cross-entropy per epoch.

    Notes
    -----
    Hidden tokens are replaced by ``<unk>`` (80%), a random token (10%) or left (10%); ``<unk>``
    serves as the mask because it already means "a word the model cannot see". The output layer
    is tied to the embedding table (:class:`attnkit.nn.TiedOutput`), so pre-training adds only a
    bias, which is dropped afterwards.
    """
    table = network.embedding.tokens
    trained = Module()  # what the optimiser sees: the network's embedding and encoder, and the output bias
    trained.embedding, trained.encoder = network.embedding, network.encoder
    trained.output = output = TiedOutput(table)
    lengths = np.fromiter((len(d) for d in docs), dtype=np.int64, count=len(docs))
    batch_loss = masked_lm_batch_loss(network, output, docs, np.random.default_rng(rng.integers(2**63)))
    return train(trained, batch_loss, lengths, options, rng=rng)


def masked_lm_batch_loss(network, output, docs, mask_rng, probability=MASK_PROBABILITY):
    """The training loop's ``batch_loss(indices)`` of BERT's objective on ``docs[indices]``: the corruption
    (:func:`attnkit.nn.mask_tokens`, ``<unk>`` as the mask) and the hidden tokens' mean cross-entropy, gradients
    accumulated into ``network`` (``encode`` / ``backward_encode``) and ``output`` (a :class:`TiedOutput`).
    Shared by the classifier's pre-pass and :class:`attnkit.MaskedLanguageModel`."""
    loss_fn = CrossEntropyLoss()
    vocab_size = output.embedding.num_embeddings

    def batch_loss(indices):
        ids, batch_lengths = pad_sequences([docs[i] for i in indices])
        corrupted, picked = mask_tokens(ids, batch_lengths, mask_rng, vocab_size=vocab_size,
                                        mask_id=Vocabulary.unk_id, first_ordinary_id=len(SPECIAL_TOKENS),
                                        probability=probability)
        if not picked.any():
            return 0.0, int(batch_lengths.sum())
        hidden, cache = network.encode(corrupted, training=True, lengths=batch_lengths)
        logits, c_out = output.forward(hidden[picked], training=True)
        loss, dlogits = loss_fn.forward(logits, ids[picked], training=True)
        grad_hidden = np.zeros_like(hidden)
        grad_hidden[picked] = output.backward(loss_fn.backward(1.0, dlogits), c_out)
        network.backward_encode(grad_hidden, cache)
        return float(loss), int(batch_lengths.sum())

    return batch_loss
