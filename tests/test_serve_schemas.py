"""attnkit.serve.schemas: request bodies checked field by field, into the estimator's keywords; every refusal
names its field (the HTTP tests check the same over the wire)."""

import pytest

from attnkit.serve.schemas import Limits, RequestError, parse_chat, parse_completion, parse_json, parse_texts

LIMITS = Limits(max_inputs=4, max_tokens=64, max_n=3)


def _refused(parse, body, param, status=400):
    with pytest.raises(RequestError) as caught:
        parse(body, LIMITS)
    assert caught.value.status == status and caught.value.param == param
    assert f"'{param}'" in caught.value.message
    return caught.value


def test_json_bodies_must_be_objects():
    assert parse_json(b'{"input": "x"}') == {"input": "x"}
    # ... and an integer past Python's 4,300 digits, which json.loads refuses with a ValueError (it was a 500)
    for body in (b"nope", b"[]", b'"x"', b"\xff", b"[" * 100_000, b'{"input": "a", "user": 1' + b"0" * 4300 + b"}"):
        with pytest.raises(RequestError) as caught:
            parse_json(body)
        assert caught.value.status == 400 and "JSON" in caught.value.message


def test_texts():
    assert parse_texts({"input": "x"}, LIMITS).texts == ["x"]
    assert parse_texts({"input": ["a", ""], "encoding_format": "base64"}, LIMITS, dimensions=8).encoding_format == \
        "base64"
    assert parse_texts({"input": "a", "dimensions": 8}, LIMITS, dimensions=8).texts == ["a"]
    _refused(parse_texts, {"input": ["a"] * 5}, "input", 413)
    _refused(parse_texts, {"input": [None]}, "input[0]")
    _refused(parse_texts, {"input": True}, "input")
    assert _refused(parse_texts, {"input": None}, "input").message.endswith("got null")  # not "got null null"
    # a classification refuses the embeddings' own fields rather than ignoring them
    _refused(parse_texts, {"input": "a", "encoding_format": "base64"}, "encoding_format")
    _refused(parse_texts, {"input": "a", "dimensions": 3}, "dimensions")


def test_completion_options_are_the_estimators_keywords():
    greedy = parse_completion({"prompt": "a", "temperature": 0, "max_tokens": 5, "stop": "\n"}, LIMITS)
    assert greedy.options == {"max_new_tokens": 5, "stop": ["\n"], "strategy": "greedy"}
    sampled = parse_completion({"prompt": ["a"], "top_p": 0.5, "n": 3, "seed": 1}, LIMITS)
    assert sampled.prompt == "a" and sampled.n == 3
    assert sampled.options == {"max_new_tokens": 16, "stop": None, "strategy": "sample", "temperature": 1.0,
                               "top_p": 0.5, "random_state": 1, "n_returns": 3}
    assert parse_completion({"prompt": "a", "max_completion_tokens": 7}, LIMITS).options["max_new_tokens"] == 7


@pytest.mark.parametrize(("body", "param"), [
    ({"prompt": "a", "max_tokens": 65}, "max_tokens"), ({"prompt": "a", "max_tokens": True}, "max_tokens"),
    ({"prompt": "a", "n": 4}, "n"), ({"prompt": "a", "temperature": -0.1}, "temperature"),
    ({"prompt": "a", "top_p": 1.5}, "top_p"), ({"prompt": "a", "seed": 1.5}, "seed"),
    ({"prompt": "a", "stop": ["a"] * 5}, "stop"), ({"prompt": "a", "stop": 3}, "stop"),
    ({"prompt": "a", "echo": True}, "echo"), ({"prompt": "a", "presence_penalty": 0.5}, "presence_penalty"),
    ({"prompt": None}, "prompt"), ({"prompt": "a", "model": []}, "model"),
    ({"prompt": "a", "logprobs": 0}, "logprobs"), ({"prompt": "a", "presence_penalty": False}, "presence_penalty"),
])
def test_completion_refusals_name_the_field(body, param):
    _refused(parse_completion, body, param)


def test_chat_messages():
    request = parse_chat({"messages": [{"role": "user", "content": [{"type": "text", "text": "hi "},
                                                                     {"type": "text", "text": "there"}]}]}, LIMITS)
    assert request.messages == [{"role": "user", "content": "hi there"}]
    _refused(parse_chat, {"messages": "hi"}, "messages")
    _refused(parse_chat, {"messages": ["hi"]}, "messages[0]")
    _refused(parse_chat, {"messages": [{"role": "user", "content": [{"type": "image_url"}]}]}, "messages[0].content")
    _refused(parse_chat, {"messages": [{"role": "user", "content": "x"}] * 5}, "messages", 413)
