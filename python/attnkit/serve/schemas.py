"""Request bodies: parsed from JSON and checked field by field, into the plain values the batcher takes.

Every refusal is a :class:`RequestError` whose message names the field, what was expected and what was seen,
answered in OpenAI's error shape (``{"error": {"message", "type", "param", "code"}}``). Fields that OpenAI's API
has and this server does not honour are refused when given a value (``logprobs``, ``echo``, ...), never
silently ignored; fields it does not know are ignored, as clients send their own extras.
"""

import json
import numbers
from dataclasses import dataclass
from typing import Any

__all__ = ["ChatRequest", "CompletionRequest", "Limits", "RequestError", "TextsRequest", "parse_chat",
           "parse_completion", "parse_json", "parse_texts"]

MAX_STOP_STRINGS = 4  # as OpenAI
ROLES = ("system", "user", "assistant")
# OpenAI fields that would change the answer, which this server does not implement.
UNSUPPORTED = ("logprobs", "top_logprobs", "echo", "best_of", "suffix", "logit_bias", "tools", "functions",
               "tool_choice", "response_format")
NEUTRAL_PENALTY = 0  # presence_penalty / frequency_penalty: only their neutral value is accepted


class RequestError(Exception):
    """A request the server refuses: ``status`` (4xx), a message naming ``param``."""

    def __init__(self, status: int, message: str, param: str | None = None, kind: str = "invalid_request_error"):
        super().__init__(message)
        self.status, self.message, self.param, self.kind = status, message, param, kind

    def body(self) -> dict[str, Any]:
        """The response body, in OpenAI's shape."""
        return {"error": {"message": self.message, "type": self.kind, "param": self.param, "code": None}}


@dataclass(frozen=True)
class Limits:
    """What one request may hold. ``long_inputs``: texts (and prompts) with more tokens than the model's positions
    are read as the estimator reads them ("truncate": cut, or read in windows where it does that), or refused with
    413 ("refuse")."""

    max_inputs: int = 256
    max_tokens: int = 2048
    max_n: int = 16
    long_inputs: str = "truncate"


@dataclass
class TextsRequest:
    """/v1/embeddings and /v1/classify."""

    texts: list[str]
    encoding_format: str = "float"


@dataclass
class CompletionRequest:
    """/v1/completions: one prompt."""

    prompt: str
    options: dict[str, Any]
    n: int
    stream: bool


@dataclass
class ChatRequest:
    """/v1/chat/completions."""

    messages: list[dict[str, str]]
    options: dict[str, Any]
    n: int
    stream: bool


def _type_name(value):
    return "null" if value is None else {dict: "object", list: "array", str: "string", bool: "boolean"}.get(
        type(value), "number" if isinstance(value, numbers.Real) else type(value).__name__)


def _wrong(param, expected, value):
    shown = "" if value is None or isinstance(value, (dict, list)) else f" {json.dumps(value)[:80]}"
    return RequestError(400, f"'{param}' must be {expected}, got {_type_name(value)}{shown}", param)


def _text(value, param, expected="a string"):
    """``value`` if it is a string of valid Unicode (JSON's escapes can spell half a surrogate pair, which no
    tokenizer reads)."""
    if not isinstance(value, str):
        raise _wrong(param, expected, value)
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise RequestError(400, f"'{param}' must be valid Unicode, got a lone surrogate", param) from None
    return value


def parse_json(body: bytes) -> dict[str, Any]:
    """The request body as a JSON object."""
    try:
        value = json.loads(body)
    except ValueError as error:  # JSONDecodeError, UnicodeDecodeError, and an integer past Python's 4,300 digits
        raise RequestError(400, f"the request body is not valid JSON: {error}") from None
    except RecursionError:
        raise RequestError(400, "the request body is not valid JSON: nested too deeply") from None
    if not isinstance(value, dict):
        raise RequestError(400, f"the request body must be a JSON object, got {_type_name(value)}")
    return value


def _model(body):
    model = body.get("model")
    if model is not None and not isinstance(model, str):
        raise _wrong("model", "a string", model)


def _texts(body, param, limits):
    if param not in body:
        raise RequestError(400, f"'{param}' is required: a string or an array of strings", param)
    value = body[param]
    if isinstance(value, str):
        return [_text(value, param)]
    if not isinstance(value, list) or not value:
        raise _wrong(param, "a string or a non-empty array of strings", value)
    if len(value) > limits.max_inputs:
        raise RequestError(413, f"'{param}' holds {len(value)} inputs; this server takes at most {limits.max_inputs} "
                                "per request", param)
    return [_text(text, f"{param}[{i}]", "a string (token arrays are not accepted)") for i, text in enumerate(value)]


def parse_texts(body: dict[str, Any], limits: Limits, *, dimensions: int | None = None) -> TextsRequest:
    """An embeddings (``dimensions``: the model's width) or classification request."""
    _model(body)
    texts = _texts(body, "input", limits)
    encoding = body.get("encoding_format", "float")
    if dimensions is None:  # a classification: the embeddings' own fields are refused, not ignored
        for param in ("encoding_format", "dimensions"):
            if body.get(param) is not None:
                raise RequestError(400, f"'{param}' is a field of /v1/embeddings, not supported by /v1/classify",
                                   param)
        return TextsRequest(texts)
    if encoding not in ("float", "base64"):
        raise _wrong("encoding_format", '"float" or "base64"', encoding)
    wanted = body.get("dimensions")
    if wanted is not None and (isinstance(wanted, bool) or wanted != dimensions):
        raise RequestError(400, f"'dimensions' must be this model's {dimensions} (it cannot shorten its embeddings), "
                                f"got {json.dumps(wanted)[:80]}", "dimensions")
    return TextsRequest(texts, encoding)


def _integer(body, param, default, low, high):
    value = body.get(param, default)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise _wrong(param, f"an integer from {low} to {high}", value)
    return value


def _real(body, param, default, low, high, *, low_open=False):
    value = body.get(param, default)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not (
            (low < value if low_open else low <= value) and value <= high):
        raise _wrong(param, f"a number in {'(' if low_open else '['}{low}, {high}]", value)
    return float(value)


def _generation(body, limits):
    """(options for the estimator's generate/stream, n, stream) from OpenAI's sampling fields."""
    _model(body)
    for param in UNSUPPORTED:  # `is`: logprobs=0 asks for the chosen tokens' log-probabilities (0 == False)
        if (value := body.get(param)) is not None and value is not False:
            raise RequestError(400, f"'{param}' is not supported by this server", param)
    for param in ("presence_penalty", "frequency_penalty"):
        value = body.get(param)
        if value is not None and (isinstance(value, bool) or value != NEUTRAL_PENALTY):
            raise RequestError(400, f"'{param}' is not supported by this server (only 0)", param)
    max_tokens = _integer(body, "max_tokens", None, 1, limits.max_tokens)
    if "max_completion_tokens" in body:
        max_tokens = _integer(body, "max_completion_tokens", max_tokens, 1, limits.max_tokens)
    temperature = _real(body, "temperature", 1.0, 0, 2)
    top_p = _real(body, "top_p", 1.0, 0, 1, low_open=True)
    n = _integer(body, "n", 1, 1, limits.max_n)
    seed = body.get("seed")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2**63):
        raise _wrong("seed", "an integer from 0 to 2**63 - 1", seed)
    stop = body.get("stop")
    if isinstance(stop, str):
        stop = [stop]
    if stop is not None and (not isinstance(stop, list) or len(stop) > MAX_STOP_STRINGS
                             or not all(isinstance(s, str) and s for s in stop)):
        raise _wrong("stop", f"a non-empty string or an array of at most {MAX_STOP_STRINGS} of them", body["stop"])
    for i, text in enumerate(stop or ()):
        _text(text, f"stop[{i}]")
    stream = body.get("stream", False)
    if not isinstance(stream, bool):
        raise _wrong("stream", "a boolean", stream)
    if temperature == 0 and n > 1:
        raise RequestError(400, f"'n' must be 1 with temperature 0 (greedy decoding has one answer), got {n}", "n")
    if stream and n > 1:
        raise RequestError(400, f"'n' must be 1 when streaming, got {n}", "n")
    options: dict[str, Any] = {"max_new_tokens": max_tokens or 16, "stop": stop or None}
    if temperature == 0:
        options["strategy"] = "greedy"
    else:
        options.update(strategy="sample", temperature=temperature, top_p=top_p, random_state=seed)
    if n > 1:
        options["n_returns"] = n
    return options, n, stream


def parse_completion(body: dict[str, Any], limits: Limits) -> CompletionRequest:
    """A completions request (one prompt: a string, or an array of one string)."""
    options, n, stream = _generation(body, limits)
    prompt = body.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1:
        prompt = prompt[0]
    return CompletionRequest(_text(prompt, "prompt", "a string (one prompt per request)"), options, n, stream)


def parse_chat(body: dict[str, Any], limits: Limits) -> ChatRequest:
    """A chat completions request."""
    options, n, stream = _generation(body, limits)
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise _wrong("messages", "a non-empty array of messages", messages)
    if len(messages) > limits.max_inputs:
        raise RequestError(413, f"'messages' holds {len(messages)} messages; this server takes at most "
                                f"{limits.max_inputs}", "messages")
    out = []
    for i, message in enumerate(messages):
        if not isinstance(message, dict):
            raise _wrong(f"messages[{i}]", 'an object {"role", "content"}', message)
        role, content = message.get("role"), message.get("content")
        if role not in ROLES:
            raise _wrong(f"messages[{i}].role", " or ".join(f'"{r}"' for r in ROLES), role)
        if isinstance(content, list):  # content parts: only text
            if not all(isinstance(p, dict) and p.get("type") == "text" and isinstance(p.get("text"), str)
                       for p in content):
                raise _wrong(f"messages[{i}].content", 'a string or an array of {"type": "text", "text"} parts',
                             content)
            content = "".join(p["text"] for p in content)
        out.append({"role": role, "content": _text(content, f"messages[{i}].content")})
    return ChatRequest(out, options, n, stream)
