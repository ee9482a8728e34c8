"""An encoder-decoder transformer over token ids: the model inside :class:`attnkit.Seq2SeqTransformer`.

Source ids -> TokenEmbedding -> Encoder -> memory; target ids shifted right (``<bos>`` first) ->
TokenEmbedding -> Decoder (causal self-attention, cross-attention over the memory) -> Linear -> next-
token logits. The encoder and the decoder may have different widths: the decoder's cross-attention
projects the memory from the encoder's width.
"""

import numpy as np

from attnkit._validation import check_int
from attnkit.nn.layers import Linear
from attnkit.nn.module import Module
from attnkit.nn.positional import MAX_POSITIONS
from attnkit.nn.token_embedding import TokenEmbedding
from attnkit.nn.transformer import Decoder, Encoder

__all__ = ["EncoderDecoder"]

POSITIONAL_KINDS = ("sinusoidal", "learned", "relative", None)


class EncoderDecoder(Module):
    """Encoder-decoder transformer with a hand-written backward.

    Parameters
    ----------
    source_vocab_size, target_vocab_size : int
        Number of source and target ids; id 0 is padding in both.
    rng : numpy.random.Generator or int
        Initial weights, dropout masks and Performer features.
    encoder_d_model, decoder_d_model : int, default=128
        Widths of the encoder and the decoder.
    n_heads : int, default=4
    encoder_layers, decoder_layers : int, default=2
    d_ff : int, optional
        Feed-forward width (default: 4 x each stack's width).
    dropout : float, default=0.1
    attention : {"softmax", "linear", "performer"}, default="softmax"
        Every attention of the model; the decoder's self-attention is causal (with linear attention:
        the prefix-sum form).
    positional : {"sinusoidal", "learned", "relative", None}, default="sinusoidal"
        Absolute encodings added to the embeddings, relative-position logit biases in every
        self-attention (clipped at ``relative_window``), or no positions at all (an ablation).
    max_source_len, max_target_len : int, default=256
        Longest sequences (learned positions need them).
    relative_window : int, default=16
        Clipping distance of relative positions.
    """

    def __init__(self, source_vocab_size, target_vocab_size, rng, *, encoder_d_model=128, decoder_d_model=128,
                 n_heads=4, encoder_layers=2, decoder_layers=2, d_ff=None, dropout=0.1, attention="softmax",
                 positional="sinusoidal", max_source_len=256, max_target_len=256, relative_window=16):
        super().__init__()
        if positional not in POSITIONAL_KINDS:
            raise ValueError(f"positional must be one of {POSITIONAL_KINDS}, got {positional!r}")
        rng = np.random.default_rng(rng)
        d_enc = check_int(encoder_d_model, "encoder_d_model", minimum=1)
        d_dec = check_int(decoder_d_model, "decoder_d_model", minimum=1)
        for name, value in (("max_source_len", max_source_len), ("max_target_len", max_target_len)):
            check_int(value, name, minimum=1, maximum=MAX_POSITIONS)
        absolute = positional if positional in ("sinusoidal", "learned") else None
        relative = check_int(relative_window, "relative_window", minimum=1) if positional == "relative" else None
        self.source_embedding = TokenEmbedding(source_vocab_size, d_enc, rng, positional=absolute,
                                               max_len=max_source_len, dropout=dropout)
        self.encoder = Encoder(encoder_layers, d_enc, n_heads, d_ff or 4 * d_enc, rng, dropout=dropout,
                               attention=attention, relative_positions=relative)
        self.target_embedding = TokenEmbedding(target_vocab_size, d_dec, rng, positional=absolute,
                                               max_len=max_target_len, dropout=dropout)
        self.decoder = Decoder(decoder_layers, d_dec, n_heads, d_ff or 4 * d_dec, rng, d_memory=d_enc, dropout=dropout,
                               attention=attention, relative_positions=relative)
        self.output = Linear(d_dec, target_vocab_size, rng)

    def encode(self, source, source_lengths, training=False):
        """Memory (B, M, encoder_d_model) of source ids (B, M) whose real lengths are ``source_lengths``."""
        x, c_embed = self.source_embedding.forward(source, training)
        memory, c_enc = self.encoder.forward(x, training, key_lengths=source_lengths)
        return memory, (c_embed, c_enc)

    def embed_target(self, ids, offset=0):
        """Decoder inputs (B, n, decoder_d_model) of target ids at positions offset.. (inference)."""
        return self.target_embedding.forward(ids, offset=offset)[0]

    def project(self, h):
        """Next-token logits of decoder outputs (..., decoder_d_model)."""
        return self.output.forward(h)[0]

    def forward(self, source, source_lengths, target_in, training=False):
        """Logits (B, N, target_vocab_size) of the next target token after each of ``target_in`` (B, N)
        (teacher forcing: ``target_in`` starts with ``<bos>``)."""
        memory, c_src = self.encode(source, source_lengths, training)
        y, c_tgt = self.target_embedding.forward(target_in, training)
        h, c_dec = self.decoder.forward(y, training, memory=memory, memory_lengths=source_lengths)
        logits, c_out = self.output.forward(h, training)
        return logits, (c_src, c_tgt, c_dec, c_out)

    def backward(self, grad, cache):
        """Accumulate every parameter's gradient from d(loss)/d(logits)."""
        (c_embed, c_enc), c_tgt, c_dec, c_out = cache
        dh = self.output.backward(grad, c_out)
        dy, dmemory = self.decoder.backward(dh, c_dec)
        self.target_embedding.backward(dy, c_tgt)
        dx = self.encoder.backward(dmemory, c_enc)
        self.source_embedding.backward(dx, c_embed)

    def attention_weights(self, source, source_lengths, target_in):
        """Inference-mode attention weights, for inspection (softmax attention only).

        Returns
        -------
        dict
            ``"encoder"``: per encoder layer (B, H, M, M); ``"decoder"``: per decoder layer, causal
            self-attention (B, H, N, N); ``"cross"``: per decoder layer (B, H, N, M).
        """
        memory, weights = self.encoder.attention_weights(self.source_embedding.forward(source)[0],
                                                         key_lengths=source_lengths)
        maps: dict[str, list[np.ndarray]] = {"encoder": weights, "decoder": [], "cross": []}
        y = self.embed_target(target_in)
        for layer in self.decoder.layers:
            y, (self_weights, cross_weights) = layer.attention_weights(y, memory=memory, memory_lengths=source_lengths)
            maps["decoder"].append(self_weights)
            maps["cross"].append(cross_weights)
        return maps
