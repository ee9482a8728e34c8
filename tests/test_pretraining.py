"""attnkit.estimators._pretraining: masked-language-model pre-training lowers its loss and changes only the encoder."""

import numpy as np

from attnkit import nn
from attnkit.estimators._pretraining import pretrain_masked_lm
from attnkit.estimators._training import TrainingOptions


def _docs(rng, n=300):
    """Sentences of a tiny grammar: "<cls> a X b Y" where Y is determined by X, so fills are learnable."""
    pairs = {5: 9, 6: 10, 7: 11, 8: 12}
    docs = []
    for x in rng.integers(5, 9, size=n):
        docs.append([2, 13, int(x), 14, pairs[int(x)]])
    return docs


def test_masked_lm_loss_falls_and_only_embedding_and_encoder_change():
    rng = np.random.default_rng(0)
    network = nn.SequenceClassifier(15, 2, rng, d_model=16, n_heads=2, d_ff=32, n_layers=1, dropout=0.0)
    head_before = {k: v.copy() for k, v in network.head.params.items()}
    table_before = network.embedding.tokens.params["weight"].copy()
    options = TrainingOptions(max_epochs=15, batch_size=16, learning_rate=1e-2, n_iter_no_change=99)
    history = pretrain_masked_lm(network, _docs(rng), options, rng=rng)
    assert len(history.loss_curve) == 15
    assert history.loss_curve[-1] < 0.5 * history.loss_curve[0]
    assert all(np.array_equal(v, head_before[k]) for k, v in network.head.params.items())
    assert not np.array_equal(network.embedding.tokens.params["weight"], table_before)
    assert "output.bias" not in dict((n, p) for n, p, _ in network.named_parameters())


def test_pretraining_fills_in_a_hidden_word():
    rng = np.random.default_rng(1)
    network = nn.SequenceClassifier(15, 2, rng, d_model=16, n_heads=2, d_ff=32, n_layers=1, dropout=0.0)
    options = TrainingOptions(max_epochs=25, batch_size=16, learning_rate=1e-2, n_iter_no_change=99)
    pretrain_masked_lm(network, _docs(rng), options, rng=rng)
    table = network.embedding.tokens
    output = nn.TiedOutput(table)  # the bias is dropped after pre-training; the table carries the fit
    ids = np.array([[2, 13, 6, 14, 1]])  # "<cls> a 6 b <mask>"
    hidden, _ = network.encode(ids, lengths=np.array([5]))
    logits, _ = output.forward(hidden[0, 4])
    assert int(np.argmax(logits[5:])) + 5 == 10
