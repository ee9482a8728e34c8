"""The batcher: it owns the request queue and the model, and is the only caller of the model.

The HTTP layer submits jobs (:meth:`Batcher.submit`, :meth:`Batcher.stream`) from the event loop and awaits
their results; one worker thread takes them in arrival order. Embedding and classification jobs waiting together
are joined into one call of the estimator, up to ``max_batch_tokens`` tokens (text-embeddings-inference's
dynamic batching by token budget: the worker takes what has queued while it was busy, waiting briefly for the
clients it just answered, :meth:`Batcher._gather`), and each job gets back its own rows, matched by its id. The
worker encodes each job's texts once, off the event loop: their tokens for the budget and the response's
``usage``, their ids for the call. The estimator's kernels release the GIL, so the event loop keeps parsing
requests while the model runs.

Generation requests and streams share decoding steps (continuous batching) where the model decodes rows at their
own positions (a decoding plan, ``CausalLanguageModel._shared_generation``): a request arriving while others
decode joins them at the next step, up to ``max_batch_sequences`` sequences, and one that ends (or whose
client goes away, :meth:`Job.cancel`) leaves at once; each gets the tokens it would get alone (greedy search
and sampling, seeded or not: every sequence draws from its own generator). Beam search runs a request at a time.
Elsewhere, generation requests (not streamed) waiting together with the same options are decoded as one batch
(``CausalLanguageModel.generate``; seeded sampling alone, since its draws would depend on its place in the
batch), and streams run one at a time.

Why one worker: a second would only take cores from the first (the kernels already run on ``--threads``
threads) and would make the results of a request depend on what ran beside it.
"""

import asyncio
import collections
import ctypes
import functools
import itertools
import sys
import threading
import time
import traceback
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from attnkit.serve.metrics import Metrics
from attnkit.serve.models import ServedModel, TooLong

__all__ = ["Batcher", "Job", "QueueFull", "ShuttingDown"]

BATCHED = ("embed", "classify")  # the job kinds whose inputs are joined into one call
# How long the worker may wait for a batch to fill (Batcher._gather): a share of the last call's time, capped.
GATHER_SHARE, GATHER_SECONDS = 0.25, 0.02
_END = object()  # the last item of a stream's queue


class QueueFull(Exception):
    """The queue holds ``max_queue`` requests: the client should retry after ``retry_after`` seconds."""

    def __init__(self, retry_after: int):
        super().__init__(f"the server's queue is full; retry after {retry_after} s")
        self.retry_after = retry_after


class ShuttingDown(Exception):
    """The server is stopping and takes no new requests."""


@dataclass
class Job:
    """One request's work: ``kind`` is "embed", "classify", "generate" or "stream"."""

    id: int
    kind: str
    inputs: list[Any]
    options: dict[str, Any]
    tokens: int
    loop: asyncio.AbstractEventLoop
    future: asyncio.Future
    pieces: asyncio.Queue | None = None
    encoded: list[Any] | None = None  # an embedding or classification job's inputs as the model reads them
    cancelled: threading.Event = field(default_factory=threading.Event)
    queued_at: float = field(default_factory=time.perf_counter)

    def cancel(self) -> None:
        """Stop the job's work at the next token (its client went away)."""
        self.cancelled.set()

    def resolve(self, value: Any = None, error: BaseException | None = None) -> None:
        """Answer the job on its event loop (from the worker thread)."""
        self.loop.call_soon_threadsafe(_settle, self.future, value, error)

    def put(self, piece: Any) -> None:
        """Hand a stream's next piece to its event loop (from the worker thread)."""
        assert self.pieces is not None
        self.loop.call_soon_threadsafe(self.pieces.put_nowait, piece)


def _settle(future, value, error):
    if future.done():  # the client went away and the handler was cancelled
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(value)


class Batcher:
    """A bounded queue of jobs and the worker thread that runs them on ``model``.

    Parameters
    ----------
    model : ServedModel
    max_batch_tokens : int
        Most tokens (as the model reads them) of one embedding or classification call; a single request of
        more runs alone.
    max_batch_sequences : int, default=16
        Most sequences generated in shared steps (a request of ``n`` continuations counts ``n``; one of more
        runs alone). Steps of up to 32 rows stream a quantised model's weights in shared passes
        (ops.block_quantized_matmul): SmolLM2's step of 16 rows costs about 4.4 steps of one.
    max_queue : int
        Most requests waiting; one more is refused with :class:`QueueFull`.
    metrics : Metrics
    refuse_long : bool, default=False
        An embedding or classification request with a text longer than the model's positions fails with
        :class:`attnkit.serve.models.TooLong` (found as the worker encodes it), the others go on.
    """

    def __init__(self, model: ServedModel, *, max_batch_tokens: int, max_queue: int, metrics: Metrics,
                 max_batch_sequences: int = 16, refuse_long: bool = False):
        self.model, self.max_batch_tokens, self.max_queue, self.metrics = model, max_batch_tokens, max_queue, metrics
        self.max_batch_sequences, self.refuse_long = max_batch_sequences, refuse_long
        self._queue: collections.deque[Job] = collections.deque()
        self._ready = threading.Condition()
        self._closing = False
        self._ids = itertools.count()
        self._worker = threading.Thread(target=self._run, name="attnkit-serve-batcher", daemon=True)
        # A running mean of the time a job holds the worker (between answers, in shared steps), for Retry-After.
        self._busy_seconds = 1.0
        self._trimmed = 0.0  # when the worker last handed freed memory back (time.monotonic)
        # Jobs of the last embedding or classification call and jobs queued when it ended; its seconds (_gather).
        self._last_batch = (0, 0.0)

    # -- the event loop's side --------------------------------------------------------------------------------
    def start(self) -> None:
        """Start the worker thread."""
        self._worker.start()

    def _enqueue(self, kind, inputs, options, pieces=None):
        if self._closing:
            raise ShuttingDown("the server is shutting down")
        loop = asyncio.get_running_loop()  # tokens: counted by the worker as it encodes (_encode)
        job = Job(next(self._ids), kind, inputs, options, 0, loop, loop.create_future(), pieces)
        with self._ready:
            if len(self._queue) >= self.max_queue:
                self.metrics.rejected.inc()
                raise QueueFull(max(1, round(self._busy_seconds * len(self._queue))))
            self._queue.append(job)
            self.metrics.queue_depth.set(len(self._queue))
            self._ready.notify()
        return job

    async def submit(self, kind: str, inputs: list[Any], options: dict[str, Any] | None = None) -> tuple[Any, int]:
        """Queue a job and await its result and the tokens of its inputs: float32 embeddings (embed), float64
        probabilities (classify), or a :class:`~attnkit.serve.models.Generation` (generate: ``inputs`` is one
        prompt, or one list of chat messages)."""
        job = self._enqueue(kind, inputs, options or {})
        try:
            return await job.future, job.tokens
        finally:
            job.cancel()  # a no-op once answered; stops the work if the handler was cancelled

    async def stream(self, request: Any, options: dict[str, Any]):
        """Queue a streamed generation of a prompt or a conversation; an async iterator of its pieces of text,
        then of its :class:`~attnkit.serve.models.Generation`. The job is queued at the call (so a full queue
        raises here, before any response starts); leaving the iteration early stops the generation at the next
        token."""
        job = self._enqueue("stream", [request], options, pieces=asyncio.Queue())
        return self._pieces(job)

    @staticmethod
    async def _pieces(job):
        assert job.pieces is not None
        try:
            while True:
                piece = await job.pieces.get()
                if piece is _END:
                    break
                yield piece
            yield await job.future  # raises the generation's error, if any
        finally:
            job.cancel()

    def close(self) -> None:
        """Take no more jobs, finish those queued, and stop the worker (blocks until it has)."""
        with self._ready:
            self._closing = True
            self._ready.notify()
        if self._worker.is_alive():
            self._worker.join()

    @property
    def closing(self) -> bool:
        """Whether :meth:`close` was called."""
        return self._closing

    # -- the worker's side ------------------------------------------------------------------------------------
    def _run(self):
        while True:
            with self._ready:
                if not self._queue and not self._closing and time.monotonic() - self._trimmed > 1.0:
                    _release_freed_memory()  # idle, at most once a second: after a burst, before waiting
                    self._trimmed = time.monotonic()
                while not self._queue and not self._closing:
                    self._ready.wait()
                if not self._queue:
                    return
                if self._queue[0].kind in BATCHED:
                    self._gather()
                jobs = self._take()
                self.metrics.queue_depth.set(len(self._queue))
            if jobs[0].kind in BATCHED:
                jobs = self._within_budget(jobs)
            start = time.perf_counter()
            for job in jobs:
                self.metrics.queue_seconds.observe(start - job.queued_at)
            if not self._work(jobs):
                self._note_busy(time.perf_counter() - start)

    def _gather(self):
        """Wait briefly, holding the lock, for batched jobs to queue up: while fewer wait than the last call took plus
        those that queued during it (the clients seen at once), for at most GATHER_SHARE of the last call's time
        (GATHER_SECONDS at most). The clients just answered are sending their next requests, which the event loop
        parses on the same cores: taking the one or two already there ran calls of one or two sentences (7 ms for
        MiniLM on 2 cores, against 2 ms a sentence in a call of 32: a small call is bound by reading the weights)
        between the full ones. A single client (a last call of one job, none queued behind it) never waits."""
        wanted = self._last_batch[0]
        deadline = time.monotonic() + min(GATHER_SECONDS, GATHER_SHARE * self._last_batch[1])
        while len(self._queue) < wanted and not self._closing:
            left = deadline - time.monotonic()
            if left <= 0:
                return
            self._ready.wait(left)

    def _take(self):
        """The next job, and with an embedding or classification job those of its kind queued behind it that may
        fit the token budget (in arrival order: :meth:`_within_budget` encodes them and keeps those that do)."""
        jobs = [self._queue.popleft()]
        if jobs[0].kind in BATCHED:
            texts = len(jobs[0].inputs)  # every text is at least one token: more texts cannot fit
            while (self._queue and self._queue[0].kind == jobs[0].kind
                   and texts + len(self._queue[0].inputs) <= self.max_batch_tokens):
                texts += len(self._queue[0].inputs)
                jobs.append(self._queue.popleft())
        elif jobs[0].kind == "generate" and _batchable(jobs[0].options):
            sequences = _sequences(jobs[0].options)
            while (self._queue and self._queue[0].kind == "generate" and self._queue[0].options == jobs[0].options
                   and sequences + _sequences(jobs[0].options) <= self.max_batch_sequences):
                sequences += _sequences(jobs[0].options)
                jobs.append(self._queue.popleft())
        return jobs

    def _within_budget(self, jobs):
        """``jobs`` (from :meth:`_take`) encoded, the first and those after it within the token budget; the rest back
        at the head of the queue, in their order, encoded. A job whose texts cannot be encoded is answered with the
        error, the others go on."""
        fresh = [job for job in jobs if job.encoded is None]
        try:
            self._encode(fresh)
        except Exception:  # one request's failure is its own: each is encoded again alone
            for job in fresh:
                try:
                    self._encode([job])
                except TooLong as error:  # the client's input, refused: no traceback in the server's log
                    job.resolve(error=error)
                except Exception as error:
                    traceback.print_exc(file=sys.stderr)
                    job.resolve(error=error)
            jobs = [job for job in jobs if job.encoded is not None]
        taken, budget = 0, self.max_batch_tokens
        while taken < len(jobs) and (taken == 0 or jobs[taken].tokens <= budget):
            budget -= jobs[taken].tokens
            taken += 1
        if taken < len(jobs):
            with self._ready:
                self._queue.extendleft(reversed(jobs[taken:]))
                self.metrics.queue_depth.set(len(self._queue))
        return jobs[:taken]

    def _encode(self, jobs):
        """Encode the texts of ``jobs`` in one call of the tokenizer; each job's ids and tokens."""
        encoded, counts = self.model.encode([text for job in jobs for text in job.inputs], refuse_long=self.refuse_long)
        start = 0
        for job in jobs:
            stop = start + len(job.inputs)
            job.encoded, job.tokens = encoded[start:stop], sum(counts[start:stop])
            start = stop

    def _note_busy(self, seconds):
        self._busy_seconds = 0.8 * self._busy_seconds + 0.2 * seconds

    def _work(self, jobs):
        """Run ``jobs``; True when the work noted its own time (shared steps note the time between answers: a
        loop of shared steps can last as long as requests keep arriving)."""
        live = [job for job in jobs if not job.cancelled.is_set()]
        if not live:
            return False
        if live[0].kind in ("generate", "stream") and _shareable(live[0].options):
            shared = self.model.shared_generation()
            if shared is not None:
                self._decode(shared, live)
                return True
        try:
            if live[0].kind in BATCHED:
                self._batch(live)
            elif live[0].kind == "generate":
                self._generate(live)
            else:
                self._stream(live[0])
        except Exception as error:  # answered as a 500 by the HTTP layer; the traceback goes to the server's log
            if len(live) > 1:  # one request's failure is its own, not its batch's: each runs again alone
                for job in live:
                    self._work([job])
                return False
            traceback.print_exc(file=sys.stderr)
            for job in live:
                job.resolve(error=error)
                if job.pieces is not None:
                    job.put(_END)
        return False

    def _batch(self, jobs):
        inputs = [one for job in jobs for one in job.encoded]
        call = self.model.embed_encoded if jobs[0].kind == "embed" else self.model.classify_encoded
        start = time.perf_counter()
        rows = call(inputs)
        self._last_batch = (len(jobs) + len(self._queue), time.perf_counter() - start)
        self.metrics.batch_size.observe(len(inputs))
        self.metrics.batch_tokens.observe(sum(job.tokens for job in jobs))
        self.metrics.tokens.inc(sum(job.tokens for job in jobs), kind="input")
        offsets = np.cumsum([0] + [len(job.inputs) for job in jobs])
        for job, start, stop in zip(jobs, offsets[:-1], offsets[1:]):
            job.resolve(rows[start:stop])

    def _decode(self, shared, jobs):
        """Continuous batching: ``jobs`` and the generation jobs queued behind them, as long as they can share
        steps, decoded in shared steps until every one is answered."""
        live: dict[int, Job] = {}
        last = time.perf_counter()  # the last answer
        for job in jobs:
            self._admit(shared, job, live)
        while live:
            with self._ready:  # requests that arrived meanwhile join at this step, in their order
                while (self._queue and self._queue[0].kind in ("generate", "stream")
                       and _shareable(self._queue[0].options)
                       and len(shared) + _sequences(self._queue[0].options) <= self.max_batch_sequences):
                    job = self._queue.popleft()
                    self.metrics.queue_seconds.observe(time.perf_counter() - job.queued_at)
                    self._admit(shared, job, live)
                self.metrics.queue_depth.set(len(self._queue))
            for key in [key for key, job in live.items() if job.cancelled.is_set()]:
                shared.remove(key)
                if live.pop(key).kind == "stream":
                    self.metrics.streams_cancelled.inc()
            if not live:
                break
            self.metrics.batch_size.observe(len(shared))
            try:
                events = shared.step()
            except Exception as error:  # the model failed: every request decoding with it gets the error
                traceback.print_exc(file=sys.stderr)
                for job in live.values():
                    job.resolve(error=error)
                    if job.pieces is not None:
                        job.put(_END)
                return
            for key, piece, texts in events:
                job = live[key]
                if piece:
                    job.put(piece)
                if texts is not None:
                    del live[key]
                    self._answer(job, texts)
                    now = time.perf_counter()
                    self._note_busy(now - last)
                    last = now

    def _admit(self, shared, job, live):
        """Start ``job`` in the shared steps, or answer its error (its arguments, checked as generate checks them)."""
        if job.cancelled.is_set():
            return
        options = dict(job.options)
        try:
            shared.add(job.id, self.model.prompt_of(job.inputs[0]), stream=job.kind == "stream", **options)
        except Exception as error:
            job.resolve(error=error)
            if job.pieces is not None:
                job.put(_END)
            return
        live[job.id] = job

    def _answer(self, job, texts):
        generation = self.model.generation_of(self.model.prompt_of(job.inputs[0]), texts, job.options)
        if job.kind == "stream":
            job.put(_END)
        self._count(generation)
        job.resolve(generation)

    def _generate(self, jobs):
        generations = self.model.generate_many([job.inputs[0] for job in jobs], jobs[0].options)
        self.metrics.batch_size.observe(len(jobs))
        for job, generation in zip(jobs, generations):
            self._count(generation)
            job.resolve(generation)

    def _stream(self, job):
        self.metrics.batch_size.observe(1)
        prompt = self.model.prompt_of(job.inputs[0])
        pieces, text = self.model.stream(prompt, job.options), []
        try:
            for piece in pieces:
                if job.cancelled.is_set():
                    self.metrics.streams_cancelled.inc()
                    break
                text.append(piece)
                job.put(piece)
        finally:
            pieces.close()  # type: ignore[attr-defined]
        generation = self.model.generation_of(prompt, ["".join(text)], job.options)
        self._count(generation)
        job.put(_END)
        job.resolve(generation)

    def _count(self, generation):
        self.metrics.tokens.inc(generation.prompt_tokens, kind="input")
        self.metrics.tokens.inc(sum(generation.completion_tokens), kind="generated")


def _release_freed_memory():
    """Hand the C heap's free pages back to the system (glibc's ``malloc_trim``; nothing elsewhere). A burst of
    shared decoding steps frees its key/value caches into the worker thread's heap, which kept them resident:
    a soak of 6,000 requests to SmolLM2 ended 14-17% above its resident size after warm-up, with nothing leaked
    (3,000 sequences decoded 16 at a time in one process stayed at 417-457 MiB throughout)."""
    try:
        _libc().malloc_trim(0)
    except (OSError, AttributeError):
        pass


@functools.cache
def _libc():
    return ctypes.CDLL(None)


def _shareable(options):
    """Whether a generation may join shared decoding steps: greedy search and sampling."""
    return options.get("strategy") != "beam"


def _batchable(options):
    """Whether a generation may share its decoding steps: always, but for seeded sampling (its draws would
    depend on its place in the batch)."""
    return options.get("strategy") != "sample" or options.get("random_state") is None


def _sequences(options):
    """The sequences one generation request decodes."""
    return options.get("n_returns", 1) * (options.get("num_beams", 1) if options.get("strategy") == "beam" else 1)
