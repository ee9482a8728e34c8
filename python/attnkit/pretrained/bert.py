"""BERT-family checkpoints: the configuration, and the one table that maps their tensors onto attnkit's
:class:`attnkit.nn.TextEncoder` (no second model implementation).

Every BERT-shaped model (BERT tiny/mini/small/base/large, MiniLM, the sentence-transformers models built on
them) is ``model_type: "bert"``: learned absolute positions, token types, a LayerNorm over the summed
embeddings, post-LN blocks, exact GELU (or another ``hidden_act``), ``layer_norm_eps`` from the config.
Hugging Face stores a linear layer's weight as (out, in); attnkit's as (in, out), hence the transposes.
"""

import dataclasses
import re

from attnkit.pretrained.architecture import Architecture, unsupported_model_type
from attnkit.pretrained.rules import Rename
from attnkit.pretrained.table import TensorNames, apply_table, check_layer_count

__all__ = ["ARCHITECTURE", "BertConfig", "map_weights"]

READS = "BERT-family checkpoints (model_type 'bert': BERT, MiniLM, and sentence-transformers models on them)"

# hidden_act -> attnkit's activation. "gelu" is the exact (erf) GELU in Hugging Face and in attnkit.
ACTIVATIONS = {"gelu": "gelu", "gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh", "relu": "relu"}

# Tensors of a checkpoint that the encoder does not use: a buffer, BertModel's pooler (sentence
# embeddings and fine-tuning pool the hidden states themselves), and pre-training heads.
IGNORED_PREFIXES = ("embeddings.position_ids", "pooler.", "cls.", "embeddings.token_type_ids")
# Sizes a config.json may give, inclusive: a config is untrusted input, and each size is checked against the
# tensors before anything of that size is built (BERT-large has 24 layers, 1024 wide, 30,522 tokens).
SIZE_LIMITS = {"vocab_size": (1, 2**24), "hidden_size": (1, 2**16), "num_hidden_layers": (1, 2**10),
               "num_attention_heads": (1, 2**10), "intermediate_size": (1, 2**18),
               "max_position_embeddings": (1, 2**20), "type_vocab_size": (0, 2**16), "pad_token_id": (0, 2**24)}
LAYER = re.compile(r"encoder\.layer\.(\d+)\.")


@dataclasses.dataclass(frozen=True)
class BertConfig:
    """The shape of a BERT-family encoder, read from a checkpoint's ``config.json``.

    Attributes
    ----------
    vocab_size, hidden_size, num_hidden_layers, num_attention_heads, intermediate_size : int
    max_position_embeddings, type_vocab_size : int
    hidden_act : str
        attnkit's name: "gelu" (exact), "gelu_tanh" or "relu".
    layer_norm_eps : float
    pad_token_id : int
    """

    vocab_size: int
    hidden_size: int
    num_hidden_layers: int
    num_attention_heads: int
    intermediate_size: int
    max_position_embeddings: int
    type_vocab_size: int
    hidden_act: str
    layer_norm_eps: float
    pad_token_id: int

    @classmethod
    def from_json(cls, config, source="config.json"):
        """Check a parsed ``config.json`` and keep what the encoder needs.

        Raises
        ------
        ValueError
            For another ``model_type`` (only "bert" is read), relative position embeddings, an unknown
            ``hidden_act``, or a missing or invalid size.
        """
        if not isinstance(config, dict):
            raise ValueError(f"{source} must hold a JSON object, got {type(config).__name__}")
        model_type = config.get("model_type")
        if model_type != "bert":
            raise unsupported_model_type(model_type, [READS], source)
        if config.get("position_embedding_type", "absolute") != "absolute":
            raise ValueError(f"{source}: position_embedding_type {config['position_embedding_type']!r} is not "
                             "supported (only 'absolute')")
        act = config.get("hidden_act", "gelu")
        if act not in ACTIVATIONS:
            raise ValueError(f"{source}: hidden_act {act!r} is not supported; expected one of {sorted(ACTIVATIONS)}")
        sizes = {}
        for key, (low, high) in SIZE_LIMITS.items():
            value = config.get(key, 0 if key == "pad_token_id" else None)
            if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
                raise ValueError(f"{source}: {key} must be an integer in [{low}, {high}], got {value!r}")
            sizes[key] = value
        if sizes["hidden_size"] % sizes["num_attention_heads"]:
            raise ValueError(f"{source}: hidden_size {sizes['hidden_size']} is not a multiple of num_attention_heads "
                             f"{sizes['num_attention_heads']}")
        if sizes["pad_token_id"] >= sizes["vocab_size"]:
            raise ValueError(f"{source}: pad_token_id {sizes['pad_token_id']} is outside the vocabulary "
                             f"(vocab_size {sizes['vocab_size']})")
        eps = config.get("layer_norm_eps", 1e-12)
        if isinstance(eps, bool) or not isinstance(eps, (int, float)) or not 0 <= eps < 1:
            raise ValueError(f"{source}: layer_norm_eps must be a number in [0, 1), got {eps!r}")
        return cls(hidden_act=ACTIVATIONS[act], layer_norm_eps=float(eps), **sizes)

    def encoder_options(self):
        """Keyword arguments of :class:`attnkit.nn.TextEncoder` (and ``SequenceClassifier``) for this shape."""
        return {
            "d_model": self.hidden_size, "n_heads": self.num_attention_heads, "n_layers": self.num_hidden_layers,
            "d_ff": self.intermediate_size, "positional": "learned", "n_positions": self.max_position_embeddings,
            "n_token_types": self.type_vocab_size, "embedding_norm": "layer", "norm_first": False,
            "norm_eps": self.layer_norm_eps, "activation": self.hidden_act, "padding_idx": self.pad_token_id,
            "ff_dropout": 0.0,  # BERT drops after the feed-forward's output (the residual's dropout), not inside
        }

    def tensor_table(self):
        """Canonical checkpoint name -> :mod:`rule <attnkit.pretrained.rules>`: the one mapping table."""
        d, f = self.hidden_size, self.intermediate_size
        table = {
            "embeddings.word_embeddings.weight": Rename("embedding.tokens.weight", (self.vocab_size, d)),
            "embeddings.position_embeddings.weight": Rename("embedding.positions.weight",
                                                            (self.max_position_embeddings, d)),
            "embeddings.LayerNorm.weight": Rename("embedding.norm.gamma", (d,)),
            "embeddings.LayerNorm.bias": Rename("embedding.norm.beta", (d,)),
        }
        if self.type_vocab_size:
            table["embeddings.token_type_embeddings.weight"] = Rename("embedding.token_types.weight",
                                                                      (self.type_vocab_size, d))
        for i in range(self.num_hidden_layers):
            hf, ak = f"encoder.layer.{i}.", f"encoder.layer{i}."
            attention, feed_forward = ak + "self_attention.", ak + "feed_forward."
            for name, short in (("query", "q"), ("key", "k"), ("value", "v")):
                table[f"{hf}attention.self.{name}.weight"] = Rename(f"{attention}sublayer.w{short}", (d, d), True)
                table[f"{hf}attention.self.{name}.bias"] = Rename(f"{attention}sublayer.b{short}", (d,))
            table[hf + "attention.output.dense.weight"] = Rename(attention + "sublayer.wo", (d, d), True)
            table[hf + "attention.output.dense.bias"] = Rename(attention + "sublayer.bo", (d,))
            table[hf + "attention.output.LayerNorm.weight"] = Rename(attention + "norm.gamma", (d,))
            table[hf + "attention.output.LayerNorm.bias"] = Rename(attention + "norm.beta", (d,))
            table[hf + "intermediate.dense.weight"] = Rename(feed_forward + "sublayer.linear1.weight", (f, d), True)
            table[hf + "intermediate.dense.bias"] = Rename(feed_forward + "sublayer.linear1.bias", (f,))
            table[hf + "output.dense.weight"] = Rename(feed_forward + "sublayer.linear2.weight", (d, f), True)
            table[hf + "output.dense.bias"] = Rename(feed_forward + "sublayer.linear2.bias", (d,))
            table[hf + "output.LayerNorm.weight"] = Rename(feed_forward + "norm.gamma", (d,))
            table[hf + "output.LayerNorm.bias"] = Rename(feed_forward + "norm.beta", (d,))
        return table


def _canonical(name):
    """A checkpoint name without the model prefix of BertFor* heads, with TF-era LayerNorm names."""
    if name.startswith("bert."):
        name = name[len("bert."):]
    return name.replace("LayerNorm.gamma", "LayerNorm.weight").replace("LayerNorm.beta", "LayerNorm.bias")


TENSOR_NAMES = TensorNames(model="a BERT encoder", layer=LAYER, layers="encoder layers",
                           layers_field="num_hidden_layers", canonical=_canonical, ignored=IGNORED_PREFIXES)


def map_weights(tensors, config, source="model.safetensors"):
    """The checkpoint's tensors as attnkit's parameters: ``{attnkit name: float32 array}``.

    Every tensor the encoder needs must be present with the shape the config implies, a float dtype and
    finite values; tensors of the pooler and of pre-training heads are ignored; anything else is refused.

    Raises
    ------
    ValueError
        Naming the missing, unexpected, misshapen, non-float or non-finite tensors, or a number of layers
        that is not the config's.
    """
    check_layer_count(tensors, config.num_hidden_layers, TENSOR_NAMES, source=source)  # the table has one per layer
    return apply_table(tensors, config.tensor_table(), TENSOR_NAMES, source=source)


ARCHITECTURE = Architecture(model_type="bert", reads=READS, read_config=BertConfig.from_json,
                            network_options=BertConfig.encoder_options, map_weights=map_weights)
