"""A GGUF file's tokenizer and chat template, rebuilt from its metadata.

A GGUF file carries its tokenizer as arrays (``tokenizer.ggml.tokens``, ``token_type``, ``merges``) and
names the pre-tokenizer llama.cpp must apply (``tokenizer.ggml.pre``); this module rebuilds the same
tokenizer with Hugging Face ``tokenizers``: byte-level BPE (GPT-2's byte-to-character map) over llama.cpp's
pre-tokenizer regexes, applied in turn as in ``llama-vocab.cpp``. Control tokens (``token_type`` 3, e.g.
``<|im_start|>``) are special tokens: one id each wherever they appear in a text.

The chat template is a Jinja program from the file, so it is rendered in jinja2's immutable sandbox (as
Hugging Face ``transformers`` does): it can build a string from the messages and nothing else.
"""

from attnkit.pretrained.tokenizer import require_extra

__all__ = ["PRE_TOKENIZERS", "chat_prompt", "tokenizer_from_gguf"]

# GPT-2's split: contractions, letters, digits, other symbols, each with at most one leading space.
GPT2_REGEX = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)"
# tokenizer.ggml.pre -> the regexes llama.cpp's llama_vocab applies one after the other (each splits the
# pieces of the last). 'smollm' (LLAMA_VOCAB_PRE_TYPE_SMOLLM, like starcoder) isolates every digit first:
# Hugging Face's tokenizer.json for SmolLM2 says the same with Digits(individual_digits=True) then ByteLevel.
PRE_TOKENIZERS = {
    "gpt2": (GPT2_REGEX,),
    "smollm": (r"\p{N}", GPT2_REGEX),
    "starcoder": (r"\p{N}", GPT2_REGEX),
}
CONTROL = 3  # llama_token_type LLAMA_TOKEN_TYPE_CONTROL
USER_DEFINED = 4


def tokenizer_from_gguf(metadata):
    """A ``tokenizers.Tokenizer`` equal to the one llama.cpp builds from a GGUF file's metadata.

    Parameters
    ----------
    metadata : mapping
        :attr:`attnkit.pretrained.gguf_file.GGUFFile.metadata`.

    Returns
    -------
    tokenizers.Tokenizer
        No padding or truncation; a BOS token is added only when ``tokenizer.ggml.add_bos_token`` is true.
        ``decode(ids, skip_special_tokens=False)`` gives the text back.

    Raises
    ------
    ImportError
        Without ``tokenizers`` (``pip install 'attnkit[pretrained]'``).
    ValueError
        For a ``tokenizer.ggml.model`` other than 'gpt2' (byte-level BPE) or a ``tokenizer.ggml.pre`` attnkit
        does not know, naming them; for tokens, token types or merges that are missing, of the wrong type, of
        different lengths, duplicated, or merges of unknown tokens.
    """
    tokenizers = require_extra("tokenizers")
    model = metadata.get("tokenizer.ggml.model")
    if model != "gpt2":
        raise ValueError(f"tokenizer.ggml.model is {model!r}; attnkit rebuilds 'gpt2' (byte-level BPE) tokenizers")
    pre = metadata.get("tokenizer.ggml.pre", "gpt2")
    if pre not in PRE_TOKENIZERS:
        raise ValueError(f"tokenizer.ggml.pre is {pre!r}; attnkit knows llama.cpp's pre-tokenizers "
                         f"{', '.join(map(repr, PRE_TOKENIZERS))}")
    tokens = _list(metadata, "tokenizer.ggml.tokens", str)
    types = _list(metadata, "tokenizer.ggml.token_type", int)
    merges = _list(metadata, "tokenizer.ggml.merges", str)
    if len(types) != len(tokens):
        raise ValueError(f"tokenizer.ggml.token_type has {len(types)} entries, expected one per token ({len(tokens)})")
    vocab = {token: i for i, token in enumerate(tokens)}
    if len(vocab) != len(tokens):
        raise ValueError("tokenizer.ggml.tokens holds a token twice")
    pairs = []
    for merge in merges:
        pair = tuple(merge.split(" "))
        if len(pair) != 2 or pair[0] not in vocab or pair[1] not in vocab or "".join(pair) not in vocab:
            raise ValueError(f"tokenizer.ggml.merges holds {merge!r}; expected two tokens of the vocabulary, "
                             "separated by one space, whose join is a token too")
        pairs.append(pair)
    tokenizer = tokenizers.Tokenizer(tokenizers.models.BPE(vocab=vocab, merges=pairs))
    pre_tokenizers = tokenizers.pre_tokenizers
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Split(tokenizers.Regex(regex), behavior="isolated") for regex in PRE_TOKENIZERS[pre]]
        + [pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tokenizer.decoder = tokenizers.decoders.ByteLevel()
    tokenizer.add_special_tokens([tokenizers.AddedToken(token, special=True, normalized=False)
                                  for token, kind in zip(tokens, types) if kind == CONTROL])
    tokenizer.add_tokens([tokenizers.AddedToken(token, special=False, normalized=False)
                          for token, kind in zip(tokens, types) if kind == USER_DEFINED])
    if metadata.get("tokenizer.ggml.add_bos_token") is True:
        bos = metadata.get("tokenizer.ggml.bos_token_id")
        if not isinstance(bos, int) or not 0 <= bos < len(tokens):
            raise ValueError(f"tokenizer.ggml.add_bos_token is true but tokenizer.ggml.bos_token_id is {bos!r}")
        tokenizer.post_processor = tokenizers.processors.TemplateProcessing(
            single=f"{tokens[bos]} $A", pair=f"{tokens[bos]} $A $B", special_tokens=[(tokens[bos], bos)])
    return tokenizer


def _list(metadata, key, kind):
    value = metadata.get(key)
    if not isinstance(value, list) or not value or not all(type(item) is kind for item in value):
        raise ValueError(f"GGUF metadata key {key!r} must be a non-empty list of {kind.__name__}, got "
                         f"{type(value).__name__}")
    return value


def chat_prompt(metadata, messages, add_generation_prompt=True):
    """The text of a conversation as the model was trained to read it: ``tokenizer.chat_template`` rendered.

    Parameters
    ----------
    metadata : mapping
        :attr:`attnkit.pretrained.gguf_file.GGUFFile.metadata`, with a ``tokenizer.chat_template``.
    messages : list of dict
        ``{"role": str, "content": str}`` each, e.g. ``[{"role": "user", "content": "Hi"}]``.
    add_generation_prompt : bool, default=True
        End with the opening of the assistant's turn (``<|im_start|>assistant\\n`` in ChatML).

    Returns
    -------
    str
        Special tokens appear as text; :func:`tokenizer_from_gguf` reads each as one id.

    Raises
    ------
    ImportError
        Without jinja2 (``pip install 'attnkit[pretrained]'``).
    ValueError
        For a file without a chat template, messages of the wrong form (naming the first bad one), or a
        template that fails or tries something the sandbox forbids.

    Examples
    --------
    >>> from attnkit.pretrained.gguf_tokenizer import chat_prompt
    >>> template = "{% for m in messages %}<|im_start|>{{ m['role'] }}\\n{{ m['content'] }}<|im_end|>\\n{% endfor %}"
    >>> chat_prompt({"tokenizer.chat_template": template}, [{"role": "user", "content": "Hi"}], False)
    '<|im_start|>user\\nHi<|im_end|>\\n'
    """
    template = metadata.get("tokenizer.chat_template")
    if not isinstance(template, str):
        raise ValueError("the GGUF metadata has no tokenizer.chat_template (a str); this model has no chat format")
    if not isinstance(messages, list) or not messages:
        raise ValueError(f"messages must be a non-empty list of {{'role': str, 'content': str}}, got "
                         f"{type(messages).__name__}")
    for i, message in enumerate(messages):
        if not (isinstance(message, dict) and set(message) == {"role", "content"}
                and all(isinstance(message[key], str) for key in ("role", "content"))):
            raise ValueError(f"messages[{i}] must be {{'role': str, 'content': str}}, got {message!r:.80}")
    if not isinstance(add_generation_prompt, bool):
        raise ValueError(f"add_generation_prompt must be a bool, got {type(add_generation_prompt).__name__}")
    require_extra("jinja2")
    from jinja2 import TemplateError
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    def raise_exception(message):
        raise TemplateError(message)

    environment = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    environment.globals["raise_exception"] = raise_exception
    tokens = metadata.get("tokenizer.ggml.tokens")

    def token(key):
        index = metadata.get(key)
        return tokens[index] if isinstance(tokens, list) and isinstance(index, int) and 0 <= index < len(tokens) \
            else ""

    try:
        return environment.from_string(template).render(
            messages=[dict(message) for message in messages], add_generation_prompt=add_generation_prompt,
            bos_token=token("tokenizer.ggml.bos_token_id"), eos_token=token("tokenizer.ggml.eos_token_id"))
    except TemplateError as error:  # SecurityError (the sandbox) is a TemplateError too
        raise ValueError(f"tokenizer.chat_template failed: {type(error).__name__}: {error}") from None
