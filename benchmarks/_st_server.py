"""The baseline of bench_serve.py: sentence-transformers behind the same ASGI stack as ``attnkit serve``
(uvicorn + starlette), answering /v1/embeddings one request at a time: ``python _st_server.py MODEL``."""

import socket
import sys

import uvicorn
from sentence_transformers import SentenceTransformer
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.responses import JSONResponse
from starlette.routing import Route


def main():
    model = SentenceTransformer(sys.argv[1], device="cpu")

    async def embeddings(request):
        body = await request.json()
        texts = [body["input"]] if isinstance(body["input"], str) else body["input"]
        vectors = await run_in_threadpool(model.encode, texts)
        return JSONResponse({"object": "list", "data": [{"object": "embedding", "index": i, "embedding": v.tolist()}
                                                        for i, v in enumerate(vectors)]})

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    print(f"sentence-transformers on http://127.0.0.1:{sock.getsockname()[1]} ", flush=True)
    uvicorn.Server(uvicorn.Config(Starlette(routes=[Route("/v1/embeddings", embeddings, methods=["POST"])]),
                                  log_level="warning")).run(sockets=[sock])


if __name__ == "__main__":
    main()
