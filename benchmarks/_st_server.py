"""The baseline of bench_serve.py: sentence-transformers behind the same ASGI stack as ``attnkit serve``
(uvicorn + starlette), answering /v1/embeddings one request at a time: ``python _st_server.py MODEL``, MODEL a
checkpoint directory, zip or installed package as ``attnkit serve`` takes it."""

import asyncio
import concurrent.futures
import socket
import sys
import tempfile

import uvicorn
from starlette.applications import Starlette
from starlette.responses import JSONResponse
from starlette.routing import Route

from _pretrained_models import checkpoint_directory, sentence_transformer


def main():
    with tempfile.TemporaryDirectory() as scratch:  # a package's zip, extracted: ST reads only directories
        serve(sentence_transformer(checkpoint_directory(sys.argv[1], scratch)))


def serve(model):
    # One thread owns the model, as torch models are served: Starlette's pool would hand calls to whichever of its
    # threads is free, each with its own OpenMP team (13.0 against 14-15.5 ms a sentence at concurrency 1).
    worker = concurrent.futures.ThreadPoolExecutor(max_workers=1)

    async def embeddings(request):
        body = await request.json()
        texts = [body["input"]] if isinstance(body["input"], str) else body["input"]
        vectors = await asyncio.get_running_loop().run_in_executor(worker, model.encode, texts)
        return JSONResponse({"object": "list", "data": [{"object": "embedding", "index": i, "embedding": v.tolist()}
                                                        for i, v in enumerate(vectors)]})

    # IPPROTO_TCP spelled out, as attnkit's server binds (attnkit/serve/server.py): asyncio switches Nagle's algorithm
    # off only on connections of such a socket, and with it on each response waited ~40 ms for an ACK (seen on a
    # Zen 5 VM: 60 ms a sentence at concurrency 1 against 10 ms, and every earlier run's baseline was handicapped).
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.bind(("127.0.0.1", 0))
    sock.listen(2048)  # before the address is printed: a client connecting at once waits in the backlog
    print(f"sentence-transformers on http://127.0.0.1:{sock.getsockname()[1]} ", flush=True)
    uvicorn.Server(uvicorn.Config(Starlette(routes=[Route("/v1/embeddings", embeddings, methods=["POST"])]),
                                  log_level="warning")).run(sockets=[sock])


if __name__ == "__main__":
    main()
