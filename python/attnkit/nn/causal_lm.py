"""A decoder-only (GPT-style) language model over token ids: embedding, causal decoder, next-token logits.

Ids (B, N) -> :class:`TokenEmbedding` (token table E, absolute positions, dropout) -> :class:`CausalDecoder`
(pre-LN blocks, a final norm) -> logits (B, N, vocab_size) of the token after each position: ``h @ E.T``
with tied weights (Press & Wolf 2017, GPT-2), else a :class:`Linear` head. Generation decodes one token at
a time over the decoder's key/value cache (:meth:`CausalLM.start`, :meth:`CausalLM.step`).
"""

from typing import Any, NamedTuple

import numpy as np

from attnkit import ops
from attnkit._validation import check_bool, check_int, check_real
from attnkit.nn.causal_decoder import CausalDecoder
from attnkit.nn.layers import Linear, add_product, dense
from attnkit.nn.module import Module
from attnkit.nn.positional import MAX_POSITIONS
from attnkit.nn.token_embedding import TokenEmbedding
from attnkit.nn.transformer import PACKED_READ_ROWS, PLAN_READ_ROWS

__all__ = ["CausalLM"]

POSITIONAL_KINDS = ("learned", "sinusoidal", "relative", "rotary", None)


class CausalLMCache(NamedTuple):
    """What :meth:`CausalLM.backward` needs: the embedding's, the decoder's and the output's caches (the
    output's is the decoder output h with tied weights)."""

    embedding: Any
    decoder: Any
    output: Any


class CausalLM(Module):
    """GPT-style language model: next-token logits (B, N, vocab_size) of token ids (B, N), with a
    hand-written backward and cached one-token-at-a-time decoding.

    Every id is a token (no padding row): right-padded batches give their real ``lengths`` instead, and the
    padded positions' logits are not meaningful.

    Parameters
    ----------
    vocab_size : int
        Number of token ids.
    rng : numpy.random.Generator or int
        Initial weights, dropout masks and Performer features.
    d_model : int, default=128
        Width; a multiple of ``n_heads``.
    n_heads : int, default=4
    n_layers : int, default=4
    d_ff : int, optional
        Feed-forward width (default 4 x d_model).
    dropout : float, default=0.0
        Dropout of the embeddings, of every sublayer's output and after the feed-forward activation.
    attention : {"softmax", "linear", "performer"}, default="softmax"
        The causal self-attention (linear and Performer in their prefix-sum form).
    positional : {"learned", "sinusoidal", "relative", "rotary", None}, default="learned"
        A learned position table of ``max_len`` rows (GPT-2) or sinusoidal encodings added to the token
        vectors, learned relative-position biases in every self-attention (clipped at ``relative_distance``;
        softmax attention only), rotary positions turning every self-attention's queries and keys (Llama;
        ``rotary_base``; softmax attention only), or no positions (causal attention alone tells a position how
        many tokens precede it).
    max_len : int, default=256
        Context length: the rows of the learned position table, which refuses longer inputs.
    relative_distance : int, default=16
        Clipping distance of relative positions.
    norm : {"layer", "rms"}, default="layer"
        The blocks' and the final norm.
    activation : {"gelu_tanh", "gelu", "relu", "swiglu"}, default="gelu_tanh"
        The feed-forward activation ("swiglu": Llama's gated unit, ``d_ff`` wide).
    window : int, optional
        Each position attends to itself and the ``window`` positions before it (softmax attention only);
        decoding then keeps ``window + 1`` positions per layer.
    tie_weights : bool, default=True
        Logits ``h @ E.T`` with the token table E (one parameter, whose gradient sums both uses), or a
        separate ``Linear(d_model, vocab_size)`` head.
    n_kv_heads : int, optional
        Grouped-query attention: key/value heads shared by groups of ``n_heads / n_kv_heads`` query heads.
    rotary_base : float, default=10000.0
        Wavelength base of rotary positions (``positional="rotary"``).
    bias : bool, default=True
        Biases in the attention projections, the feed-forward maps and an untied output layer.
    norm_eps : float, optional
        The norms' eps (default 1e-5 for LayerNorm, 1e-6 for RMSNorm).

    Attributes
    ----------
    embedding : TokenEmbedding
        Its ``tokens`` table is E, drawn from ``N(0, 1 / d_model)``: with the final norm's unit-scale output,
        the tied logits start near unit scale (a first loss near log(vocab_size)).
    decoder : CausalDecoder
    output : Linear or None
        The head (None with tied weights).

    Examples
    --------
    >>> import numpy as np
    >>> from attnkit.nn import CausalLM
    >>> model = CausalLM(10, np.random.default_rng(0), d_model=8, n_heads=2, n_layers=2, max_len=6)
    >>> ids = np.array([[1, 4, 2, 7], [3, 3, 9, 0]])
    >>> logits, cache = model.forward(ids)
    >>> logits.shape  # (B, N, vocab_size): the token after each position
    (2, 4, 10)
    >>> state = model.start(2)
    >>> steps = [model.step(ids[:, t], state) for t in range(4)]
    >>> steps[0].shape  # (B, vocab_size)
    (2, 10)
    >>> bool(np.allclose(np.stack(steps, axis=1), logits, atol=1e-5))
    True
    >>> [w.shape for w in model.attention_weights(ids)]  # per layer (B, H, N, N)
    [(2, 2, 4, 4), (2, 2, 4, 4)]
    """

    def __init__(self, vocab_size, rng, *, d_model=128, n_heads=4, n_layers=4, d_ff=None, dropout=0.0,
                 attention="softmax", positional="learned", max_len=256, relative_distance=16, norm="layer",
                 activation="gelu_tanh", window=None, tie_weights=True, n_kv_heads=None, rotary_base=10000.0, bias=True,
                 norm_eps=None):
        super().__init__()
        if not (positional is None or isinstance(positional, str)) or positional not in POSITIONAL_KINDS:
            raise ValueError(f"positional must be one of {POSITIONAL_KINDS}, got {positional!r}")
        self.vocab_size = check_int(vocab_size, "vocab_size", minimum=1)
        d_model = check_int(d_model, "d_model", minimum=1)
        d_ff = 4 * d_model if d_ff is None else check_int(d_ff, "d_ff", minimum=1)
        self.max_len = check_int(max_len, "max_len", minimum=1, maximum=MAX_POSITIONS)
        relative_distance = check_int(relative_distance, "relative_distance", minimum=1)
        if not 0.0 <= check_real(dropout, "dropout") < 1.0:
            raise ValueError(f"dropout: the drop probability p must be in [0, 1), got {dropout}")
        self.tie_weights = check_bool(tie_weights, "tie_weights")
        if positional == "relative" and attention != "softmax":
            raise ValueError(f"positional='relative' needs attention='softmax', got {attention!r} (relative positions "
                             "are logit biases, which linear attention has no logits to add to)")
        rng = np.random.default_rng(rng)
        absolute = positional if positional in ("learned", "sinusoidal") else None
        self.embedding = TokenEmbedding(self.vocab_size, d_model, rng, positional=absolute, max_len=self.max_len,
                                        dropout=dropout, padding_idx=None, init_std=d_model**-0.5)
        if positional == "rotary" and attention != "softmax":
            raise ValueError(f"positional='rotary' needs attention='softmax', got {attention!r}")
        self.decoder = CausalDecoder(n_layers, d_model, n_heads, d_ff, rng, dropout=dropout, attention=attention,
                                     activation=activation,
                                     relative_positions=relative_distance if positional == "relative" else None,
                                     norm=norm, window=window, n_kv_heads=n_kv_heads,
                                     rotary_base=rotary_base if positional == "rotary" else None, bias=bias,
                                     norm_eps=norm_eps)
        self.output = None if self.tie_weights else Linear(d_model, self.vocab_size, rng, bias=bias)

    def forward(self, ids, training=False, *, lengths=None):
        """Next-token logits and the cache for :meth:`backward`.

        Parameters
        ----------
        ids : array of int, shape (B, N)
            Token ids in ``[0, vocab_size)``; N <= ``max_len`` with learned positions.
        training : bool, default=False
            Dropout is active in training.
        lengths : array of int, shape (B,), optional
            Real length of each right-padded row: no position attends to the padding after it.

        Returns
        -------
        logits : ndarray of shape (B, N, vocab_size)
            ``logits[b, t]``: scores of the token after ``ids[b, :t + 1]``.
        cache : CausalLMCache
        """
        ids = self._check_ids(ids, ndim=2)
        x, c_embed = self.embedding.forward(ids, training)
        h, c_dec = self.decoder.forward(x, training, key_lengths=lengths)
        logits, c_out = self._project(h, training)
        return logits, CausalLMCache(c_embed, c_dec, c_out)

    def backward(self, grad, cache):
        """Accumulate every parameter's gradient from d(loss)/d(logits) (B, N, vocab_size)."""
        if self.output is None:
            dh = self._tied_backward(grad, cache.output)
        else:
            dh = self.output.backward(grad, cache.output)
        self.embedding.backward(self.decoder.backward(dh, cache.decoder), cache.embedding)

    def attention_weights(self, ids, *, lengths=None):
        """Inference-mode self-attention weights of every layer, for inspection (softmax attention only).

        Returns
        -------
        list of ndarray of shape (B, H, N, N)
            One per layer, first to last; row t holds the weights of the positions <= t.
        """
        x = self.embedding.forward(self._check_ids(ids, ndim=2))[0]
        weights = []
        for layer in self.decoder.layers:
            x, w = layer.attention_weights(x, key_lengths=lengths)
            weights.append(w)
        return weights

    # -- incremental decoding (inference only) ------------------------------------------------------------
    def start(self, batch_size, *, capacity=16):
        """An empty :class:`DecoderCache` for decoding ``batch_size`` rows one token at a time
        (:meth:`CausalDecoder.start`); ``capacity`` positions fit before the key/value buffers first grow. With tied
        weights it holds a snapshot of the token table (``output_weight``): train no further while decoding."""
        cache = self.decoder.start(batch_size, capacity=capacity)
        table = self.embedding.tokens.params["weight"]
        if self.output is None and isinstance(table, np.ndarray):
            # the tied table, transposed once per generation rather than read across per token
            cache.output_weight = np.ascontiguousarray(table.T)
        return cache

    def step(self, ids, cache):
        """Next-token logits (B, vocab_size) after one new token per row, ``ids`` (B,), at position
        ``cache.length``; the cache is updated in place. Equals row ``cache.length`` of :meth:`forward` over the
        whole prefix (inference mode). In a cache of rows at different positions (:meth:`DecoderCache.join`, when
        :meth:`steps_mixed_positions`), row b's at ``cache.lengths[b]``."""
        ids = self._check_ids(ids, ndim=1)
        if ids.shape[0] != cache.batch_size:
            raise ValueError(f"ids must have shape (batch_size={cache.batch_size},), got {ids.shape}")
        lengths = cache.lengths
        if (lengths == lengths[0]).all():
            x = self.embedding.forward(ids[:, None], offset=int(lengths[0]))[0]
        else:  # the rows of each position together (embedding is row by row: the bits of each row alone)
            x = None
            for n in np.unique(lengths):
                part = self.embedding.forward(ids[lengths == n, None], offset=int(n))[0]
                x = np.empty((ids.shape[0],) + part.shape[1:], part.dtype) if x is None else x
                x[lengths == n] = part
        h, _ = self.decoder.step(x, cache)
        return self._project(h[:, 0], weight=cache.output_weight)[0]

    def prefill(self, ids, cache, *, lengths=None):
        """Next-token logits (B, vocab_size) after feeding a whole prompt, ``ids`` (B, T), at positions
        ``cache.length, ...``: :meth:`step` for each column in turn, at once (one causal attention call per layer
        with softmax attention). Only the last position is projected to the vocabulary.

        ``lengths`` (B,): prompts of different lengths, right-padded in ``ids``, read in one call into an empty
        cache where :meth:`steps_mixed_positions`: row b's logits are those after its ``lengths[b]`` tokens, and
        its cache holds them at its own length (causal attention never lets a prompt's tokens see the padding
        after them; what the padding writes past a row's length is never read, and its next step overwrites it).
        """
        ids = self._check_ids(ids, ndim=2)
        if ids.shape[0] != cache.batch_size or ids.shape[1] < 1:
            raise ValueError(f"ids must have shape (batch_size={cache.batch_size}, T >= 1), got {ids.shape}")
        if lengths is not None:
            lengths = np.asarray(lengths)
            if lengths.shape != (ids.shape[0],) or lengths.dtype.kind not in "iu" or lengths.min() < 1 \
                    or lengths.max() > ids.shape[1]:
                raise ValueError(f"lengths must hold one length in [1, {ids.shape[1]}] per row of ids, got {lengths!r}")
            if cache.length != 0 or cache.plan is None:
                raise ValueError("lengths needs an empty cache of a decoder that steps rows at their own positions "
                                 "(steps_mixed_positions())")
        counts = np.full(ids.shape[0], ids.shape[1]) if lengths is None else lengths.astype(np.int64)
        if self.reads_rows(cache, int(counts.sum())):
            # A short prompt's tokens as rows of one plan step: no padding, and each row a step's operations.
            sequences = np.repeat(np.arange(ids.shape[0]), counts)
            tokens = ids[sequences, np.concatenate([np.arange(n) for n in counts])]
            return self.read_rows(tokens, sequences, cache, at=np.cumsum(counts) - 1)
        x = self.embedding.forward(ids, offset=cache.length)[0]
        h, _ = self.decoder.step(x, cache)
        if lengths is None:
            return self._project(h[:, -1], weight=cache.output_weight)[0]
        for layer in cache.layers:
            layer.lengths = lengths.astype(np.int64)
        return self._project(h[np.arange(ids.shape[0]), lengths - 1], weight=cache.output_weight)[0]

    def reads_rows(self, cache, rows):
        """Whether :meth:`read_rows` takes ``rows`` tokens into ``cache``: a decoding plan (without hard attention)
        over float32 embeddings, and at most :func:`attnkit.nn.transformer.plan_read_rows` rows (past
        ``PLAN_READ_ROWS``, an output layer whose rows keep their bits at any count too)."""
        return self.decoder.plan_reads(cache, rows) and (rows <= PLAN_READ_ROWS or self._head_exact()) and all(
            isinstance(p, ops.BlockQuantizedMatrix) or p.dtype == np.float32
            for _, p, _ in self.embedding.named_parameters())

    def read_rows_at_once(self):
        """The most prompt tokens :meth:`read_rows` and :meth:`prefill` take in one plan step with each row's bits
        those of a step of its own (where the decoder runs as a plan): ``PACKED_READ_ROWS`` where every weight
        product reads int8 inputs from packed blocks, else ``PLAN_READ_ROWS``."""
        matrices = [p for _, p, _ in self.decoder.named_parameters()
                    if isinstance(p, ops.BlockQuantizedMatrix) or p.ndim == 2]
        packed = all(isinstance(p, ops.BlockQuantizedMatrix) and p.packed is not None for p in matrices)
        return PACKED_READ_ROWS if packed and self._head_exact() else PLAN_READ_ROWS

    def _head_exact(self):
        """Whether the output layer's product gives each row its bits at any row count: float32, or blocks read
        with int8 inputs from packed ones."""
        head = self.output.params["weight"] if self.output is not None else self.embedding.tokens.params["weight"]
        return not isinstance(head, ops.BlockQuantizedMatrix) or head.packed is not None

    def read_rows(self, ids, sequences, cache, *, at):
        """Feed tokens ``ids`` (R,) to the cache rows ``sequences`` (R,) in one decoding-plan step
        (:meth:`reads_rows`): each cache row's tokens in order, from its length on (prompts being read, and one
        token of rows being decoded, side by side). Returns the logits (len(at), vocab_size) after rows ``at``
        of ``ids``. Each row gets the operations of a :meth:`step` of its own: the same bits."""
        ids, sequences = self._check_ids(ids, ndim=1), np.asarray(sequences, dtype=np.int64)
        if sequences.shape != ids.shape or (ids.size and not 0 <= sequences.min() <= sequences.max()
                                            < cache.batch_size):
            raise ValueError(f"sequences must hold a cache row in [0, {cache.batch_size}) per id, got {sequences!r}")
        if not self.reads_rows(cache, ids.size):
            raise ValueError(f"read_rows needs a decoding plan over float32 embeddings and at most "
                             f"{self.read_rows_at_once()} ids (reads_rows), got {ids.size}")
        order = np.argsort(sequences, kind="stable")  # each row's rank among its sequence's rows, in order
        firsts = np.searchsorted(sequences[order], sequences[order])
        rank = np.empty_like(sequences)
        rank[order] = np.arange(ids.size) - firsts
        positions = cache.lengths[sequences] + rank
        x = np.empty((ids.size, cache.plan.d_model), np.float32)
        for n in np.unique(positions):  # the embedding of each position's rows at once (row by row: its bits)
            x[positions == n] = self.embedding.forward(ids[positions == n, None], offset=int(n))[0][:, 0]
        h = self.decoder.read_rows(x, sequences, positions, cache)
        return self._project(h[np.asarray(at)], weight=cache.output_weight)[0]

    def steps_mixed_positions(self):
        """Whether :meth:`step` decodes a batch whose rows are at different positions (prompts of different lengths:
        a :meth:`prefill` with ``lengths``, or a :meth:`DecoderCache.join`): when the decoder's steps run as a plan
        (:meth:`attnkit.nn.CausalDecoder.decoding_plan`: float32 or block-quantised weights, no hard attention),
        the one step that takes a position per row."""
        return self.decoder.decoding_plan() is not None

    def reorder(self, cache, indices):
        """A new cache whose batch row i is row ``indices[i]`` of ``cache`` (beam search); ``cache`` stays valid."""
        return self.decoder.reorder(cache, indices)

    # -- the output layer ---------------------------------------------------------------------------------
    def _project(self, h, training=False, weight=None):
        """Logits (..., vocab_size) of decoder outputs h (..., d_model), and the output's cache; ``weight``: the
        tied table's transpose in rows, when a decoding cache holds one (the same products, read faster)."""
        if self.output is not None:
            return self.output.forward(h, training)
        table = self.embedding.tokens.params["weight"]
        if not isinstance(table, np.ndarray):  # block-quantised: E stored by rows, which as a matrix is E.T
            weight = table
        elif weight is None:
            weight = table.T
        logits = dense(h.reshape(-1, h.shape[-1]), weight)
        return logits.reshape(h.shape[:-1] + (self.vocab_size,)), h

    def _tied_backward(self, grad, h):
        """dh of the tied logits ``h @ E.T``; adds ``grad.T @ h`` into E's gradient."""
        table = self.embedding.tokens.params["weight"]
        flat_grad = np.asarray(grad).reshape(-1, self.vocab_size)
        add_product(self.embedding.tokens.grads["weight"], flat_grad.T, h.reshape(-1, table.shape[1]))
        return ops.matmul(flat_grad, table).reshape(h.shape)

    @staticmethod
    def _check_ids(ids, *, ndim):
        ids = np.asarray(ids)
        if ids.ndim != ndim:
            expected = "(B, N)" if ndim == 2 else "(B,)"
            raise ValueError(f"ids must have shape {expected}, got {ids.shape}")
        return ids
