"""``attnkit serve``: a fitted model behind HTTP, with OpenAI's request and response shapes.

:mod:`~attnkit.serve.models` reads the model and is the only code that calls it; :mod:`~attnkit.serve.batcher`
owns the queue and gathers concurrent requests into batches; :mod:`~attnkit.serve.app` parses, validates and
enqueues (:mod:`~attnkit.serve.schemas`), checks keys (:mod:`~attnkit.serve.auth`) and keeps the metrics
(:mod:`~attnkit.serve.metrics`); :mod:`~attnkit.serve.server` runs it all under uvicorn.

Needs the ``serve`` extra (``pip install 'attnkit[serve]'``: uvicorn and starlette, with httptools and uvloop);
``import attnkit`` never imports them, and this package imports them only when a server is made.
"""

import importlib.util

__all__ = ["require_serve_extra"]


def require_serve_extra() -> None:
    """Raise an ImportError naming the ``serve`` extra when uvicorn or starlette is missing."""
    missing = [name for name in ("uvicorn", "starlette") if importlib.util.find_spec(name) is None]
    if missing:
        raise ImportError(f"attnkit serve needs {' and '.join(missing)}: pip install 'attnkit[serve]'")
