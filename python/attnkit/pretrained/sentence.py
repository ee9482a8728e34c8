"""What sentence-transformers' files say about turning an encoder's hidden states into a sentence embedding.

``modules.json`` lists the modules (a Pooling module, with its mode in its folder's ``config.json``; a
Normalize module), and ``sentence_bert_config.json`` gives ``max_seq_length``. A checkpoint without these
files (a plain BERT, a decoder) has no such part: :func:`read_sentence_transformers` gives None.
"""

import dataclasses

__all__ = ["SentenceTransformers", "read_sentence_transformers"]

POOLING_MODES = {"pooling_mode_cls_token": "cls", "pooling_mode_mean_tokens": "mean",
                 "pooling_mode_max_tokens": "max"}


@dataclasses.dataclass(frozen=True)
class SentenceTransformers:
    """How sentence-transformers uses the checkpoint.

    Attributes
    ----------
    pooling : {"mean", "cls", "max"} or None
        The pooling the model was trained with (None: modules.json lists no Pooling module).
    normalize : bool
        Whether its embeddings are L2-normalised (modules.json lists a Normalize module).
    max_len : int or None
        ``max_seq_length`` (tokens, special tokens included); None when sentence_bert_config.json gives none.
    """

    pooling: str | None
    normalize: bool
    max_len: int | None


def read_sentence_transformers(files, max_positions):
    """The sentence-transformers part of a checkpoint, or None when it has neither ``modules.json`` nor
    ``sentence_bert_config.json``.

    Parameters
    ----------
    files : CheckpointFiles
    max_positions : int
        The model's positions: ``max_seq_length`` may not exceed them.

    Raises
    ------
    ValueError
        For a pooling attnkit does not do, or a ``max_seq_length`` that is not an integer in
        [2, ``max_positions``], naming the file.
    """
    modules = files.read_json("modules.json", required=False)
    pooling, normalize = None, False
    if isinstance(modules, list):
        types = {str(m.get("type", "")).rsplit(".", 1)[-1]: m for m in modules if isinstance(m, dict)}
        normalize = "Normalize" in types
        if "Pooling" in types:
            pooling = _pooling(files, str(types["Pooling"].get("path", "")))
    sentence = files.read_json("sentence_bert_config.json", required=False)
    max_len = sentence.get("max_seq_length") if isinstance(sentence, dict) else None
    if max_len is not None and (isinstance(max_len, bool) or not isinstance(max_len, int)):
        raise ValueError(f"{files.description}: sentence_bert_config.json's max_seq_length must be an integer, "
                         f"got {max_len!r}")
    if max_len is not None and not 2 <= max_len <= max_positions:
        raise ValueError(f"{files.description}: sentence_bert_config.json's max_seq_length {max_len} is not in [2, "
                         f"{max_positions}] (the model's positions)")
    if not isinstance(modules, list) and not isinstance(sentence, dict):
        return None
    return SentenceTransformers(pooling=pooling, normalize=normalize, max_len=max_len)


def _pooling(files, path):
    """The one mode the Pooling module's config.json (in folder ``path``) switches on, or None without it."""
    pooling_config = files.read_json(f"{path}/config.json" if path else "config.json", required=False)
    if not isinstance(pooling_config, dict):
        return None
    modes = [mode for key, mode in POOLING_MODES.items() if pooling_config.get(key)]
    if len(modes) != 1 or any(pooling_config.get(k) for k in pooling_config
                              if k.startswith("pooling_mode") and k not in POOLING_MODES):
        raise ValueError(f"{files.description}: {path}/config.json asks for pooling "
                         f"{sorted(k for k, v in pooling_config.items() if v is True)}; attnkit pools "
                         "by one of mean, cls or max")
    return modes[0]
