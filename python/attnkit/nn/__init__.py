"""Transformer layers with hand-written backward passes, an optimiser and losses (no autograd)."""

from attnkit.io import serialize  # its public name of 0.1.0; it lives with the file formats, in attnkit.io
from attnkit.nn.attention import MultiHeadAttention, hard_attention
from attnkit.nn.block import BlockConfig, TransformerBlock
from attnkit.nn.cache import CrossAttentionCache, DecoderCache, SelfAttentionCache
from attnkit.nn.causal_decoder import CausalDecoder, CausalDecoderLayer
from attnkit.nn.causal_lm import CausalLM
from attnkit.nn.encoder_decoder import EncoderDecoder
from attnkit.nn.layers import Dropout, Embedding, FeedForward, LayerNorm, Linear, RMSNorm
from attnkit.nn.losses import CrossEntropyLoss
from attnkit.nn.masked_lm import MaskedLM, TiedOutput, mask_tokens
from attnkit.nn.module import Module
from attnkit.nn.ngram_bag import NgramBag
from attnkit.nn.optim import AdamW, WarmupSchedule, clip_coefficient, clip_grad_norm, default_decay
from attnkit.nn.packed import PackedEncoder
from attnkit.nn.pooling import SequencePooling
from attnkit.nn.positional import LearnedPositions, RelativePositionBias, SinusoidalPositions
from attnkit.nn.sequence_classifier import SequenceClassifier
from attnkit.nn.text_encoder import TextEncoder
from attnkit.nn.token_embedding import TokenEmbedding
from attnkit.nn.transformer import Decoder, DecoderLayer, Encoder, EncoderLayer

__all__ = [
    "AdamW",
    "BlockConfig",
    "CausalDecoder",
    "CausalDecoderLayer",
    "CausalLM",
    "CrossAttentionCache",
    "CrossEntropyLoss",
    "Decoder",
    "DecoderCache",
    "DecoderLayer",
    "Dropout",
    "Embedding",
    "Encoder",
    "EncoderDecoder",
    "EncoderLayer",
    "FeedForward",
    "LayerNorm",
    "LearnedPositions",
    "Linear",
    "MaskedLM",
    "Module",
    "NgramBag",
    "MultiHeadAttention",
    "PackedEncoder",
    "RMSNorm",
    "RelativePositionBias",
    "SelfAttentionCache",
    "SequenceClassifier",
    "SequencePooling",
    "SinusoidalPositions",
    "TextEncoder",
    "TiedOutput",
    "TokenEmbedding",
    "TransformerBlock",
    "WarmupSchedule",
    "clip_coefficient",
    "clip_grad_norm",
    "default_decay",
    "hard_attention",
    "mask_tokens",
    "serialize",
]
