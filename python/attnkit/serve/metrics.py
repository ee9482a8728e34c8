"""The server's Prometheus metrics, written in the text exposition format by hand (no client library): counters,
gauges and histograms, each optionally by labels, safe to update from the event loop and the worker thread."""

import bisect
import threading
from typing import Any

__all__ = ["Counter", "Gauge", "Histogram", "Metrics"]

LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
SIZE_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)
TOKEN_BUCKETS = (16, 64, 256, 1024, 4096, 16384, 65536)


def _escape(value):
    return str(value).replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _labels(pairs):
    return "{" + ",".join(f'{k}="{_escape(v)}"' for k, v in pairs) + "}" if pairs else ""


def _number(value):
    return repr(float(value)) if not float(value).is_integer() else str(int(value))


class _Metric:
    kind = ""

    def __init__(self, name, help_text):
        self.name, self.help, self._lock = name, help_text, threading.Lock()
        self._values: dict[tuple, Any] = {}

    def _header(self):
        return [f"# HELP {self.name} {self.help}", f"# TYPE {self.name} {self.kind}"]


class Counter(_Metric):
    """A total that only grows."""

    kind = "counter"

    def inc(self, amount: float = 1, **labels) -> None:
        """Add ``amount`` to the count of ``labels``."""
        key = tuple(sorted(labels.items()))
        with self._lock:
            self._values[key] = self._values.get(key, 0) + amount

    def render(self) -> list[str]:
        """Exposition lines."""
        with self._lock:
            items = sorted(self._values.items())
        return self._header() + [f"{self.name}{_labels(k)} {_number(v)}" for k, v in (items or [((), 0)])]


class Gauge(_Metric):
    """A value that goes up and down."""

    kind = "gauge"

    def set(self, value: float) -> None:
        """The current value."""
        with self._lock:
            self._values[()] = value

    def render(self) -> list[str]:
        """Exposition lines."""
        with self._lock:
            value = self._values.get((), 0)
        return self._header() + [f"{self.name} {_number(value)}"]


class Histogram(_Metric):
    """Counts of observations by upper bound, their sum and count (Prometheus' cumulative buckets)."""

    kind = "histogram"

    def __init__(self, name, help_text, buckets):
        super().__init__(name, help_text)
        self.buckets = tuple(buckets)

    def observe(self, value: float, **labels) -> None:
        """Record one observation."""
        key = tuple(sorted(labels.items()))
        with self._lock:
            counts, total = self._values.get(key, ([0] * (len(self.buckets) + 1), 0.0))
            counts[bisect.bisect_left(self.buckets, value)] += 1
            self._values[key] = (counts, total + value)

    def render(self) -> list[str]:
        """Exposition lines."""
        with self._lock:
            items = sorted((k, (list(c), s)) for k, (c, s) in self._values.items())
        lines = self._header()
        for key, (counts, total) in items:
            running = 0
            for bound, count in zip((*self.buckets, float("inf")), counts):
                running += count
                le = "+Inf" if bound == float("inf") else _number(bound)
                lines.append(f"{self.name}_bucket{_labels((*key, ('le', le)))} {running}")
            lines += [f"{self.name}_sum{_labels(key)} {_number(total)}", f"{self.name}_count{_labels(key)} {running}"]
        return lines


class Metrics:
    """Every metric the server keeps."""

    def __init__(self):
        self.requests = Counter("attnkit_requests_total", "HTTP requests answered, by route and status code.")
        self.latency = Histogram("attnkit_request_duration_seconds", "Time from a request's arrival to the end of "
                                 "its response, by route.", LATENCY_BUCKETS)
        self.queue_seconds = Histogram("attnkit_queue_duration_seconds", "Time a job waited in the queue.",
                                       LATENCY_BUCKETS)
        self.batch_size = Histogram("attnkit_batch_size", "Inputs per call of the model.", SIZE_BUCKETS)
        self.batch_tokens = Histogram("attnkit_batch_tokens", "Tokens per embedding or classification call.",
                                      TOKEN_BUCKETS)
        self.queue_depth = Gauge("attnkit_queue_depth", "Requests waiting for the model.")
        self.tokens = Counter("attnkit_tokens_total", "Tokens processed: input (read) and generated.")
        self.rejected = Counter("attnkit_queue_rejected_total", "Requests refused with 429 (the queue was full).")
        self.streams_cancelled = Counter("attnkit_streams_cancelled_total",
                                         "Streamed generations stopped because their client went away.")

    def render(self) -> str:
        """The exposition text of every metric."""
        metrics = (self.requests, self.latency, self.queue_seconds, self.batch_size, self.batch_tokens,
                   self.queue_depth, self.tokens, self.rejected, self.streams_cancelled)
        return "\n".join(line for metric in metrics for line in metric.render()) + "\n"
