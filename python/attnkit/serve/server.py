"""Running the application under uvicorn: the socket bound before the model is announced, and uvicorn's own
handling of SIGINT and SIGTERM (stop accepting, finish every request in flight, then close the batcher)."""

import signal
import socket
import sys
from typing import Any

from attnkit.serve.schemas import Limits

__all__ = ["bind", "run"]

SWITCH_INTERVAL = 0.0005  # seconds: sys.setswitchinterval while serving (see run)


def bind(host: str = "127.0.0.1", port: int = 8000) -> socket.socket:
    """A listening socket on ``host:port`` (``port=0``: any free port). Bound before the model is read, so that a
    busy address fails at once rather than after a long load.

    Raises
    ------
    OSError
        If the address is in use or not this machine's.
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # IPPROTO_TCP spelled out: asyncio switches Nagle's algorithm off (TCP_NODELAY) only on connections of a
    # socket that says so, and with it on, a response's headers and body written apart waited 40 ms for an ACK.
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(2048)  # connections made as soon as the address is printed wait in the backlog
    except OSError:
        sock.close()
        raise
    return sock


def run(model: Any, sock: socket.socket, *, api_keys: list[bytes] | None = None, max_batch_tokens: int = 16384,
        max_batch_sequences: int = 16, max_queue: int = 512, max_body_bytes: int = 2**21, limits: Limits | None = None,
        log_level: str = "warning") -> None:
    """Serve ``model`` (a :class:`~attnkit.serve.models.ServedModel`) on ``sock`` (from :func:`bind`) until SIGINT
    or SIGTERM, then close the socket.

    Prints ``attnkit serve: <kind> model <name> on http://HOST:PORT (<endpoints>)...`` once it answers requests.
    """
    import uvicorn

    from attnkit.serve.app import create_app

    host, bound = sock.getsockname()[:2]
    where = f"[{host}]" if sock.family == socket.AF_INET6 else host

    def announce():
        print(f"attnkit serve: {model.kind} model {model.name} on http://{where}:{bound} "
              f"({', '.join(('/v1/models', '/health', '/metrics', *model.endpoints))}); "
              f"{'API key required' if api_keys else 'no API key'}; Ctrl-C or SIGTERM stops it", flush=True)

    app = create_app(model, api_keys=api_keys, max_batch_tokens=max_batch_tokens,
                     max_batch_sequences=max_batch_sequences, max_queue=max_queue,
                     max_body_bytes=max_body_bytes, limits=limits, on_ready=announce)
    config = uvicorn.Config(app, log_level=log_level, lifespan="on", access_log=False, server_header=False)
    # uvicorn stops gracefully on SIGINT / SIGTERM, then raises the signal again for the handler it found:
    # this one, so that a requested stop ends the command normally (exit code 0, no KeyboardInterrupt).
    received: list[str] = []
    previous = {number: signal.signal(number, lambda n, frame: received.append(signal.Signals(n).name))
                for number in (signal.SIGINT, signal.SIGTERM)}
    # The event loop parses a burst of requests without blocking, holding the GIL up to the switch interval
    # while the model's threads wait for it between kernels: 0.5 ms, not 5, gave 2.5% more embedding requests
    # a second at concurrency 32 (594 -> 609, MiniLM on 2 cores, two servers taking turns); generation unchanged.
    interval = sys.getswitchinterval()
    sys.setswitchinterval(SWITCH_INTERVAL)
    try:
        uvicorn.Server(config).run(sockets=[sock])
    finally:
        sys.setswitchinterval(interval)
        sock.close()
        for number, handler in previous.items():
            signal.signal(number, handler)
    print(f"attnkit serve: stopped{' on ' + received[0] if received else ''}", file=sys.stderr, flush=True)
