"""The HTTP layer: routes that parse and validate a request, enqueue it with the batcher, and shape its answer
as OpenAI's API does (text-embeddings-inference's ``/v1/embeddings``, llama.cpp's completions). It never calls
the model.

Around the routes, one ASGI guard checks the API key, refuses bodies over the size limit before they are read,
and counts every request and its latency for ``/metrics``. Errors are answered in OpenAI's shape with a message
and never a traceback (that goes to the server's log).
"""

import base64
import json
import sys
import time
import traceback
import uuid
from contextlib import asynccontextmanager
from typing import Any

import numpy as np
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect
from starlette.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route

from attnkit.serve.auth import OPEN_PATHS, authorized
from attnkit.serve.batcher import Batcher, QueueFull, ShuttingDown
from attnkit.serve.json_numbers import rows_as_json
from attnkit.serve.metrics import Metrics
from attnkit.serve.models import Generation, ServedModel, TooLong
from attnkit.serve.schemas import Limits, RequestError, parse_chat, parse_completion, parse_json, parse_texts

__all__ = ["create_app"]

ROUTES = ("/health", "/metrics", "/v1/models", "/v1/embeddings", "/v1/classify", "/v1/completions",
          "/v1/chat/completions")


class _EventStream(StreamingResponse):
    """Server-sent events whose generator is always closed when the response ends, also when the client went
    away mid-stream (the generation then stops at its next token), and a client gone is no error."""

    def __init__(self, events):
        super().__init__(events, media_type="text/event-stream",
                         headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})
        self.events = events

    async def __call__(self, scope, receive, send):
        try:
            await super().__call__(scope, receive, send)
        except (ClientDisconnect, OSError):
            pass
        finally:
            await self.events.aclose()


class _Asgi:
    """An ASGI application as a Starlette route's endpoint (Starlette wraps a plain function as request ->
    response)."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        await self.app(scope, receive, send)


def _error(status, message, param=None, kind="invalid_request_error", headers=None):
    return JSONResponse(RequestError(status, message, param, kind).body(), status_code=status, headers=headers)


def _json(value):
    # Floats as repr: a float32 or float64 read back from the text is the same number, bit for bit.
    return Response(json.dumps(value, separators=(",", ":"), allow_nan=False), media_type="application/json")


async def _read_body(receive, limit):
    size, chunks = 0, []
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ClientDisconnect()
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise RequestError(413, f"the request body is larger than this server's limit of {limit} bytes")
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)


def create_app(model: ServedModel, *, api_keys: list[bytes] | None = None, max_batch_tokens: int = 16384,
               max_batch_sequences: int = 16, max_queue: int = 512, max_body_bytes: int = 2**21,
               limits: Limits | None = None, on_ready: Any = None) -> Any:
    """The ASGI application serving ``model``.

    Parameters
    ----------
    model : ServedModel
    api_keys : list of bytes, optional
        When given, every route but ``/health`` needs ``Authorization: Bearer`` one of them (401 otherwise).
    max_batch_tokens, max_batch_sequences, max_queue : int
        The batcher's token budget per call, most sequences generated together and most requests waiting
        (:class:`attnkit.serve.batcher.Batcher`).
    max_body_bytes : int
        Larger request bodies are refused (413).
    limits : Limits, optional
        Most inputs, generated tokens and continuations per request.
    on_ready : callable, optional
        Called once the batcher runs (the server prints where it listens).

    Returns
    -------
    starlette.applications.Starlette, wrapped in the guard (auth, body size, metrics)
    """
    limits = limits or Limits()
    metrics = Metrics()
    batcher = Batcher(model, max_batch_tokens=max_batch_tokens, max_batch_sequences=max_batch_sequences,
                      max_queue=max_queue, metrics=metrics, refuse_long=limits.long_inputs == "refuse")
    created = int(time.time())

    @asynccontextmanager
    async def lifespan(app):
        batcher.start()
        if on_ready is not None:
            on_ready()
        yield
        import asyncio

        await asyncio.to_thread(batcher.close)  # every request in flight has been answered by now

    def endpoint(path, kinds):
        """A POST route of ``kinds`` of model: its body read within the limit and parsed as a JSON object, the
        refusals and failures answered in OpenAI's shape. A plain ASGI application, which the guard calls
        directly for a POST (Starlette's routing and request wrapping took a third of the event loop's time per
        embedding request); Starlette's router, which also holds it, answers the other methods (405)."""

        def wrap(handler):
            async def route(scope, receive, send):
                response = await respond(receive)
                await response(scope, receive, send)

            async def respond(receive):
                if model.kind not in kinds:
                    return _error(404, f"{path} is not served: this server's model is of the kind {model.kind!r}, "
                                       f"answered at {', '.join(model.endpoints)}", kind="not_found_error")
                try:
                    body = parse_json(await _read_body(receive, max_body_bytes))
                    return await handler(body)
                except RequestError as error:
                    return JSONResponse(error.body(), status_code=error.status)
                except QueueFull as error:
                    return _error(429, str(error), kind="rate_limit_error",
                                  headers={"Retry-After": str(error.retry_after)})
                except ShuttingDown as error:
                    return _error(503, str(error), kind="server_error")
                except ClientDisconnect:
                    return Response(status_code=499)
                except Exception:  # the model failed: the traceback is the server's, never the client's
                    traceback.print_exc(file=sys.stderr)
                    return _error(500, "the model failed to answer this request (see the server's log)",
                                  kind="server_error")

            return Route(path, _Asgi(route), methods=["POST"])

        return wrap

    def long_error(texts, long, param):
        """The 413 naming the first of ``long`` ((index, tokens) of the texts longer than the model's positions)."""
        index, tokens = long[0]
        name = param if len(texts) == 1 else f"{param}[{index}]"
        more = f" (and {len(long) - 1} more)" if len(long) > 1 else ""
        return RequestError(413, f"'{name}'{more} has {tokens} tokens, more than this model's {model.max_positions} "
                                 "positions; this server refuses longer inputs rather than truncating them "
                                 "(attnkit serve --long-inputs refuse)", param=name)

    async def encoded_call(kind, texts):
        """An embedding or classification of ``texts`` by the batcher; with ``long_inputs="refuse"`` its worker
        finds the long texts as it encodes them (counting them here took the event loop's time per request)."""
        try:
            return await batcher.submit(kind, texts)
        except TooLong as error:
            raise long_error(texts, error.long, "input") from None

    @endpoint("/v1/embeddings", ("embeddings",))
    async def embeddings(body):
        request = parse_texts(body, limits, dimensions=model.width)
        rows, tokens = await encoded_call("embed", request.texts)
        head = {"object": "list", "model": model.name, "usage": {"prompt_tokens": tokens, "total_tokens": tokens}}
        if request.encoding_format == "base64":
            data = [base64.b64encode(np.asarray(row, dtype="<f4").tobytes()).decode("ascii") for row in rows]
            return _json(dict(head, data=[{"object": "embedding", "index": i, "embedding": e}
                                          for i, e in enumerate(data)]))
        # The float rows written by the compiled core (json_numbers), the rest by json: the same text json.dumps
        # gives, but for the spelling of some numbers.
        items = ",".join(f'{{"object":"embedding","index":{i},"embedding":[{text}]}}'
                         for i, text in enumerate(rows_as_json(rows)))
        return Response(json.dumps(head, separators=(",", ":"))[:-1] + ',"data":[' + items + "]}",
                        media_type="application/json")

    @endpoint("/v1/classify", ("classifier",))
    async def classify(body):
        request = parse_texts(body, limits)
        proba, tokens = await encoded_call("classify", request.texts)
        labels = model.labels
        return _json({"object": "list", "model": model.name, "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
                      "data": [{"object": "classification", "index": i, "label": labels[int(np.argmax(row))],
                                "probabilities": [{"label": label, "probability": p}
                                                  for label, p in zip(labels, row.tolist())]}
                               for i, row in enumerate(proba)]})

    def _usage(generation):
        completion = sum(generation.completion_tokens)
        return {"prompt_tokens": generation.prompt_tokens, "completion_tokens": completion,
                "total_tokens": generation.prompt_tokens + completion}

    async def _generate(request, chat):
        ident, now = f"{'chatcmpl' if chat else 'cmpl'}-{uuid.uuid4().hex}", int(time.time())
        source = request.messages if chat else request.prompt
        if limits.long_inputs == "refuse":  # else the template is not rendered here
            prompt = model.prompt_of(source)
            long = model.too_long([prompt])
            if long:
                raise long_error([prompt], long, "messages" if chat else "prompt")
        if request.stream:
            pieces = await batcher.stream(source, request.options)
            return _EventStream(_events(pieces, ident, now, chat))
        generation, _ = await batcher.submit("generate", [source], request.options)
        if chat:
            choices = [{"index": i, "message": {"role": "assistant", "content": text}, "logprobs": None,
                        "finish_reason": reason}
                       for i, (text, reason) in enumerate(zip(generation.texts, generation.finish_reasons))]
        else:
            choices = [{"index": i, "text": text, "logprobs": None, "finish_reason": reason}
                       for i, (text, reason) in enumerate(zip(generation.texts, generation.finish_reasons))]
        return _json({"id": ident, "object": "chat.completion" if chat else "text_completion", "created": now,
                      "model": model.name, "choices": choices, "usage": _usage(generation)})

    def _chunk(ident, now, chat, piece, finish=None, first=False):
        if chat:
            delta: dict[str, Any] = {} if piece is None else {"content": piece}
            if first:
                delta = {"role": "assistant", "content": ""}
            choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
        else:
            choice = {"index": 0, "text": piece or "", "logprobs": None, "finish_reason": finish}
        return {"id": ident, "object": "chat.completion.chunk" if chat else "text_completion", "created": now,
                "model": model.name, "choices": [choice]}

    async def _events(pieces, ident, now, chat):
        def event(value):
            return f"data: {json.dumps(value, separators=(',', ':'))}\n\n"

        if chat:
            yield event(_chunk(ident, now, chat, None, first=True))
        try:
            async for piece in pieces:
                if isinstance(piece, Generation):
                    yield event(_chunk(ident, now, chat, None, finish=piece.finish_reasons[0]))
                else:
                    yield event(_chunk(ident, now, chat, piece))
        except Exception:  # the response has started: the error is the stream's last event
            traceback.print_exc(file=sys.stderr)
            yield event(RequestError(500, "the model failed during generation (see the server's log)",
                                     kind="server_error").body())
        finally:
            await pieces.aclose()  # the client went away: the generation stops at its next token
        yield "data: [DONE]\n\n"

    @endpoint("/v1/completions", ("language-model",))
    async def completions(body):
        return await _generate(parse_completion(body, limits), chat=False)

    @endpoint("/v1/chat/completions", ("language-model",))
    async def chat_completions(body):
        if not model.can_chat:
            raise RequestError(400, f"{model.name} has no chat template (a model trained from scratch); use "
                                    "/v1/completions with a prompt", "messages")
        return await _generate(parse_chat(body, limits), chat=True)

    async def health(request):
        if batcher.closing:
            return JSONResponse({"status": "shutting down"}, status_code=503)
        return JSONResponse({"status": "ok", "model": model.name, "kind": model.kind})

    async def models(request):
        return JSONResponse({"object": "list", "data": [{"id": model.name, "object": "model", "created": created,
                                                         "owned_by": "attnkit", "kind": model.kind}]})

    async def metrics_text(request):
        return PlainTextResponse(metrics.render(), media_type="text/plain; version=0.0.4; charset=utf-8")

    async def http_error(request, error):
        return _error(error.status_code, f"{request.method} {request.url.path}: {error.detail}",
                      kind="not_found_error" if error.status_code == 404 else "invalid_request_error")

    posts = [embeddings, classify, completions, chat_completions]
    routes = [Route("/health", health), Route("/metrics", metrics_text), Route("/v1/models", models), *posts]
    app = Starlette(routes=routes, lifespan=lifespan, exception_handlers={HTTPException: http_error})
    return _Guard(app, api_keys, max_body_bytes, metrics, {route.path: route.endpoint for route in posts})


class _Guard:
    """ASGI middleware: the API key, the body size announced by Content-Length, and the request metrics; POST
    requests to ``posts`` (path -> ASGI application) go straight to their route."""

    def __init__(self, app, api_keys, max_body_bytes, metrics, posts):
        self.app, self.api_keys, self.max_body_bytes, self.metrics = app, api_keys, max_body_bytes, metrics
        self.posts = posts

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        path, start, status = scope["path"], time.perf_counter(), [500]
        route = path if path in ROUTES else "other"  # hostile paths must not grow the metrics without bound

        async def counted(message):
            if message["type"] == "http.response.start":
                status[0] = message["status"]
            await send(message)

        try:
            refusal = self._refusal(scope, path)
            if refusal is not None:
                await refusal(scope, receive, counted)
            elif scope["method"] == "POST" and path in self.posts:
                await self.posts[path](scope, receive, counted)
            else:
                await self.app(scope, receive, counted)
        finally:
            self.metrics.requests.inc(route=route, status=status[0])
            self.metrics.latency.observe(time.perf_counter() - start, route=route)

    def _refusal(self, scope, path):
        headers = dict(scope["headers"])
        if self.api_keys is not None and path not in OPEN_PATHS \
                and not authorized(headers.get(b"authorization"), self.api_keys):
            return _error(401, "a valid API key is required: Authorization: Bearer KEY", kind="authentication_error",
                          headers={"WWW-Authenticate": "Bearer"})
        length = headers.get(b"content-length", b"0").strip(b" \t")  # HTTP allows whitespace around the value
        if not length.isdigit():
            return _error(400, "the Content-Length header must be a number")
        if int(length) > self.max_body_bytes:
            return _error(413, f"the request body is larger than this server's limit of {self.max_body_bytes} bytes")
        return None
