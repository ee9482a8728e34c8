"""The baseline of bench_serve.py: sentence-transformers behind the same ASGI stack as ``attnkit serve``
(uvicorn + starlette), answering /v1/embeddings one request at a time: ``python _st_server.py MODEL``, MODEL a
checkpoint directory, zip or installed package as ``attnkit serve`` takes it."""

import socket
import sys
import tempfile

import uvicorn
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.responses import JSONResponse
from starlette.routing import Route

from _pretrained_models import checkpoint_directory, sentence_transformer


def main():
    with tempfile.TemporaryDirectory() as scratch:  # a package's zip, extracted: ST reads only directories
        serve(sentence_transformer(checkpoint_directory(sys.argv[1], scratch)))


def serve(model):
    async def embeddings(request):
        body = await request.json()
        texts = [body["input"]] if isinstance(body["input"], str) else body["input"]
        vectors = await run_in_threadpool(model.encode, texts)
        return JSONResponse({"object": "list", "data": [{"object": "embedding", "index": i, "embedding": v.tolist()}
                                                        for i, v in enumerate(vectors)]})

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(2048)  # before the address is printed: a client connecting at once waits in the backlog
    print(f"sentence-transformers on http://127.0.0.1:{sock.getsockname()[1]} ", flush=True)
    uvicorn.Server(uvicorn.Config(Starlette(routes=[Route("/v1/embeddings", embeddings, methods=["POST"])]),
                                  log_level="warning")).run(sockets=[sock])


if __name__ == "__main__":
    main()
