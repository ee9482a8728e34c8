"""API keys: read from a file, checked on every request but ``/health`` (``Authorization: Bearer KEY``), in
constant time."""

import hmac
import os

__all__ = ["OPEN_PATHS", "authorized", "read_api_keys"]

OPEN_PATHS = ("/health",)  # answered without a key: a load balancer's probe carries none


def read_api_keys(path: str | os.PathLike[str]) -> list[bytes]:
    """The keys of ``path``: one per line, surrounding whitespace and blank lines and ``#`` comments ignored.

    Raises
    ------
    ValueError
        If the file holds no key.
    """
    with open(path, encoding="utf-8") as f:
        keys = [line.strip().encode() for line in f if line.strip() and not line.lstrip().startswith("#")]
    if not keys:
        raise ValueError(f"the API key file {os.fspath(path)} holds no key (one per line)")
    return keys


def authorized(header: bytes | None, keys: list[bytes]) -> bool:
    """Whether an ``Authorization`` header value carries one of ``keys`` as a Bearer token. Every key is
    compared, each with :func:`hmac.compare_digest`, so the time taken tells nothing about the keys."""
    if header is None:
        return False
    scheme, _, token = header.partition(b" ")
    if scheme.lower() != b"bearer":
        return False
    token = token.strip()
    matches = [hmac.compare_digest(token, key) for key in keys]
    return any(matches)
