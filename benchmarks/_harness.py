"""The one harness every ``bench_*.py`` uses, so that every result table looks the same.

It provides the command line (``--quick``, ``--repeats``, ``--threads``, ``--out``), pins the
thread count of attnkit, torch and the BLAS behind NumPy, records the environment (CPU, the ISA
attnkit dispatched to, threads, versions, date), times callables side by side (warm-up, several
repeats, median and spread, :func:`time.perf_counter`), renders markdown tables, writes them to
``benchmarks/results/<name>.md`` (raw numbers to ``<name>.json``), and re-exports
:func:`peak_memory` from ``_peak_memory.py`` (the peak memory of one call, in a fresh process).
"""

import argparse
import contextlib
import dataclasses
import datetime
import gc
import json
import math
import os
import platform
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from _peak_memory import PeakMemory, peak_memory

# PeakMemory and peak_memory are re-exported so that a benchmark imports only this module.
__all__ = [
    "CONTENTION_MARK", "PeakMemory", "Report", "Table", "Timing", "compare", "cpu_model",
    "environment", "fmt_bytes", "fmt_number", "fmt_ratio", "fmt_time", "geomean", "load_torch",
    "make_parser", "parse_args", "peak_memory", "ratio", "set_threads", "thread_counts", "usable_cpus",
]

# torch (when installed) is imported before any benchmark imports attnkit: attnkit sets
# OMP_WAIT_POLICY=PASSIVE for its own OpenMP runtime at import, and torch's bundled runtime, loaded
# afterwards, would inherit it. The baseline must run with its own defaults. But a process loads one
# libgomp.so.1: attnkit's compiled core then runs on torch's, whose threads spin (see
# without_torch), so a child measuring attnkit as its users get it never imports torch.
_WITHOUT_TORCH = "ATTNKIT_BENCH_WITHOUT_TORCH"
_torch_first = None
if os.environ.get(_WITHOUT_TORCH) != "1":
    try:
        import torch as _torch_first  # noqa: F401
    except ImportError:
        pass

RESULTS_DIR = Path(__file__).resolve().parent / "results"

# Pause when the timed callable changes. Thread pools spin-wait after a parallel region (OpenMP
# in attnkit and torch, OpenBLAS under NumPy for ~0.1 s) and on a two-core machine the spinning
# threads steal the cores from the next library: without this pause a repeat that followed the
# NumPy reference measured 2x slower. 0.1 s sits on the edge of OpenBLAS's spin (a transform
# measured 38 ms alone, 43 ms 0.1 s after a matmul, 40 ms after 0.15 s), so 0.2 s.
SETTLE_SECONDS = 0.2

# Untimed calls of the callable after that pause, for at least this long, before its timed repeat. After ~0.1 s
# idle, a 2-core VM ran attnkit's two-thread calls at one thread's speed for their first ~50 ms (2048 x 128 x
# 128 products: 550 us a call, then 330 us from the ~100th call on; NumPy's and torch's threads, which spin
# between calls, kept their speed): a repeat of ~50 ms right after the pause measured the slow start alone.
# The longest single call that is re-run: one of 2 s is not doubled for its first 50 ms (<= 2.5%).
REWARM_SECONDS, REWARM_MAX_CALL = 0.1, 2.0

# A timing taken while other processes used more than this share of the CPUs is marked (†).
CONTENTION_MARK = 0.10


# ----------------------------------------------------------------------------------- options


def make_parser(description):
    """Argument parser with the options every benchmark shares; add your own to it.

    Parameters
    ----------
    description : str
        First line of ``--help``.

    Returns
    -------
    argparse.ArgumentParser
    """
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument(
        "--quick",
        action="store_true",
        help="small sizes and 2 repeats, a smoke test; writes no result file unless --out is given",
    )
    parser.add_argument(
        "--repeats",
        type=int,
        default=None,
        help="timed repeats per measurement (default 5; quick: 2)",
    )
    parser.add_argument(
        "--threads",
        type=int,
        default=usable_cpus(),
        help="threads for attnkit, torch and BLAS (default: every CPU this process may use)",
    )
    parser.add_argument(
        "--out", type=Path, default=None, help="markdown file to write (default results/<name>.md)"
    )
    return parser


def parse_args(parser, name, argv=None):
    """Parse the command line and fill in the defaults that depend on ``--quick``.

    Parameters
    ----------
    parser : argparse.ArgumentParser
        From :func:`make_parser`.
    name : str
        Benchmark name; the default output is ``results/<name>.md`` (none in quick mode).
    argv : list of str, optional
        Defaults to ``sys.argv[1:]``.

    Returns
    -------
    argparse.Namespace
    """
    args = parser.parse_args(argv)
    if args.repeats is None:
        args.repeats = 2 if args.quick else 5
    if args.repeats < 1 or args.threads < 1:
        parser.error("--repeats and --threads must be >= 1")
    if args.out is None and not args.quick:
        args.out = RESULTS_DIR / f"{name}.md"
    args.name = name
    return args


def load_torch():
    """Return the ``torch`` module, or None (with a note on stdout) when it is not installed."""
    try:
        import torch
    except ImportError:
        print("note: torch is not importable; its columns are skipped (pip install torch==2.13.0)")
        return None
    torch.set_grad_enabled(False)
    return torch


_BLAS_LIMITS = []


def set_threads(n, torch=None):
    """Use ``n`` threads in attnkit, torch and every BLAS/OpenMP pool loaded so far.

    Parameters
    ----------
    n : int
        Thread count.
    torch : module or None
        From :func:`load_torch`.
    """
    import attnkit

    try:
        from threadpoolctl import threadpool_limits
    except ImportError:
        print("note: threadpoolctl is not installed; NumPy's BLAS keeps its own thread count")
    else:
        _BLAS_LIMITS.append(threadpool_limits(limits=n))
    attnkit.set_num_threads(n)
    if torch is not None:
        torch.set_num_threads(n)


def without_torch(function, *args, threads):
    """``function(*args)`` run in a child process that never imports torch, on ``threads`` threads; its result.

    torch is imported first in a benchmark's own process (above), and attnkit's compiled core then links to the
    OpenMP runtime torch loaded (a process holds one libgomp.so.1), set up before attnkit asked for passive
    threads: there attnkit's threads spin between parallel regions, as torch's do. attnkit without torch, as its
    users run it, waits passively. nanoGPT's recipe under AVX2 on a 2-core Zen 5 VM trained at 35.8 and 37.5
    iterations/s on torch's runtime, 34.1 and 32.3 on its own (the two taking turns). ``function`` and ``args``
    must pickle (``function`` at a module's top level).
    """
    import multiprocessing

    context = multiprocessing.get_context("spawn")
    os.environ[_WITHOUT_TORCH] = "1"  # inherited by the child, which imports the benchmark (and this module) anew
    try:
        with context.Pool(1, initializer=set_threads, initargs=(threads,)) as pool:
            return pool.apply(function, args)
    finally:
        del os.environ[_WITHOUT_TORCH]


def as_users_run(function, *args, threads):
    """``function(*args)`` on ``threads`` threads with attnkit as its users run it: in a child without torch
    (:func:`without_torch`) where torch is loaded here, else in this process."""
    if "torch" in sys.modules:
        return without_torch(function, *args, threads=threads)
    set_threads(threads)
    return function(*args)


def openmp_runtime():
    """Which OpenMP runtime attnkit's threads run on in this process, and how they wait."""
    runtimes = []
    with contextlib.suppress(OSError), open("/proc/self/maps") as maps:
        runtimes = sorted({line.split()[-1] for line in maps if "libgomp" in line and "scikit_learn" not in line})
    if any("torch" in path for path in runtimes):
        return "torch's libgomp (torch imported first): attnkit's threads spin, as torch's do"
    policy = os.environ.get("OMP_WAIT_POLICY", "libgomp's default")
    return f"its own libgomp ({policy.lower()} threads)" if runtimes else "unknown"


def thread_counts(args):
    """Thread counts a table is run at: ``--threads``, then 1 (with ``--quick`` only ``--threads``).

    Every table gives 1-thread figures next to the default ones so that a kernel's win reads apart
    from a threading win. ``--threads`` comes first: summaries and targets use its rows.

    Parameters
    ----------
    args : argparse.Namespace
        From :func:`parse_args`.

    Returns
    -------
    list of int
        Without duplicates (``--threads 1`` gives ``[1]``).
    """
    return [args.threads] if args.quick else sorted({args.threads, 1}, reverse=True)


# ------------------------------------------------------------------------------- environment


def usable_cpus():
    """CPUs this process may run on (its affinity mask where the OS has one)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count()


def cpu_model():
    """CPU model name from ``/proc/cpuinfo`` (``platform.processor()`` elsewhere)."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return platform.processor() or platform.machine()
    match = re.search(r"^model name\s*:\s*(.+)$", text, re.MULTILINE)
    name = match.group(1).strip() if match else platform.machine()
    family, model = (re.search(rf"^{key}\s*:\s*(\d+)$", text, re.MULTILINE) for key in ("cpu family", "model"))
    if family is None or model is None:
        return name
    family, model = int(family.group(1)), int(model.group(1))
    core = _amd_core(family, model) if "AMD" in text else None
    # Virtual machines often report a bare "AMD EPYC": the family and model tell Zen 3 (256-bit, no AVX-512)
    # from Zen 4 (AVX-512 on 256-bit units) and Zen 5 (512-bit units), whose speeds differ.
    return f"{name} (family {family}, model {model}{', ' + core if core else ''})"


def _amd_core(family, model):
    if family == 26:
        return "Zen 5"
    if family == 25:
        return "Zen 4" if 0x10 <= model <= 0x1F or 0x60 <= model <= 0x7F or 0xA0 <= model <= 0xAF else "Zen 3"
    return None


def _git_revision():
    root = Path(__file__).resolve().parent.parent
    try:
        result = subprocess.run(
            ["git", "-C", str(root), "describe", "--always", "--dirty"],
            capture_output=True,
            text=True,
            check=True,
        )
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return result.stdout.strip()


def _blas():
    try:
        from threadpoolctl import threadpool_info
    except ImportError:
        return "unknown"
    pools = [p for p in threadpool_info() if p["user_api"] == "blas"]
    return ", ".join(
        f"{p['internal_api']} {p['version']} ({p['num_threads']} threads)" for p in pools
    )


def _load_average():
    return " ".join(f"{x:.2f}" for x in os.getloadavg()) + " (1, 5, 15 min)"


def environment(torch=None):
    """What produced a result: CPU, ISA, threads, versions, date.

    Parameters
    ----------
    torch : module or None
        From :func:`load_torch`.

    Returns
    -------
    dict of str to str
    """
    import attnkit
    from attnkit import _core

    return {
        "CPU": f"{cpu_model()} ({usable_cpus()} usable of {os.cpu_count()} CPUs)",
        "attnkit ISA": f"{_core.get_isa()} (available: {', '.join(_core.available_isas())}; "
        f"int8 kernels: {_core.get_int8_variant()})",
        "threads": f"attnkit {attnkit.get_num_threads()}"
        + (f", torch {torch.get_num_threads()}" if torch is not None else ""),
        "attnkit's OpenMP runtime": openmp_runtime(),
        "attnkit": f"{getattr(attnkit, '__version__', 'unknown')} (git {_git_revision()})",
        "NumPy": f"{np.__version__}, BLAS: {_blas()}",
        "torch": (
            f"{torch.__version__} (CPU capability {torch.backends.cpu.get_cpu_capability()})"
            if torch is not None
            else "not installed"
        ),
        "Python": f"{platform.python_version()} on {platform.system()} {platform.release()}",
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        # Other work on the machine is the main source of noise on a small shared box.
        "load average at start": _load_average(),
    }


# ------------------------------------------------------------------------------------ timing


@dataclasses.dataclass(frozen=True)
class Timing:
    """Seconds per call of one callable.

    Attributes
    ----------
    median : float
        Median over the repeats of the mean time of one call.
    spread : float
        Interquartile range of the repeats divided by the median (0 with fewer than 2 repeats).
    repeats : int
        Timed repeats.
    number : int
        Calls per repeat (more than one for calls shorter than ``min_repeat_seconds``).
    contention : float or None
        Share of the machine's CPU time that other processes used while the repeats ran (the
        same for every callable of one :func:`compare`); None where ``/proc/stat`` is missing.
    result : object
        What the first warm-up call returned, for a correctness check next to the timing.
    """

    median: float
    spread: float
    repeats: int
    number: int
    contention: float | None
    result: object = dataclasses.field(repr=False, compare=False)

    @property
    def contended(self):
        """True when other processes used more than ``CONTENTION_MARK`` of the CPUs."""
        return self.contention is not None and self.contention > CONTENTION_MARK

    def as_dict(self):
        """The numbers, without ``result`` (for the JSON file)."""
        return {key: value for key, value in dataclasses.asdict(self).items() if key != "result"}


def _busy_seconds():
    """CPU seconds the whole machine has been busy (from /proc/stat), or None off Linux."""
    try:
        fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]
    except OSError:
        return None
    ticks = [int(f) for f in fields]
    idle = ticks[3] + ticks[4]  # idle + iowait; guest time is already counted in user
    return (sum(ticks[:8]) - idle) / os.sysconf("SC_CLK_TCK")


def _own_seconds():
    times = os.times()
    return times.user + times.system


def _time_block(fn, number):
    start = time.perf_counter()
    for _ in range(number):
        fn()
    return (time.perf_counter() - start) / number


def compare(fns, *, repeats, warmup=1, min_repeat_seconds=0.05, max_seconds=10.0):
    """Time several callables side by side, in interleaved rounds.

    Each callable is warmed up, then timed ``repeats`` times; repeat ``r`` of every callable
    runs before repeat ``r + 1`` of any, so a slow phase of a noisy machine hits all of them
    alike. Calls shorter than ``min_repeat_seconds`` are looped so one repeat lasts about that
    long. Between callables the machine settles (``SETTLE_SECONDS``), then the next runs untimed for
    ``REWARM_SECONDS`` before its repeat. A callable stops early, after at least 3 repeats, once its repeats have taken
    ``max_seconds`` in total.

    Parameters
    ----------
    fns : dict of str to callable
        Zero-argument callables; None values are skipped (a baseline that is not available).
    repeats : int
        Timed repeats.
    warmup : int, default=1
        Untimed calls before the first repeat, at least 1 (the first one's result is kept; the
        last one's time sets the loop count).
    min_repeat_seconds : float, default=0.05
        Shortest repeat.
    max_seconds : float, default=10.0
        Time budget of one callable's repeats.

    Returns
    -------
    dict of str to Timing
        Same keys as ``fns`` minus the None ones.
    """
    if warmup < 1:
        raise ValueError(f"warmup must be >= 1, got {warmup}")
    fns = {name: fn for name, fn in fns.items() if fn is not None}
    results, numbers, rewarm, times = {}, {}, {}, {name: [] for name in fns}
    gc_was_enabled = gc.isenabled()
    gc.disable()
    busy0, own0, wall0 = _busy_seconds(), _own_seconds(), time.perf_counter()
    try:
        for name, fn in fns.items():
            start = time.perf_counter()
            results[name] = fn()
            elapsed = time.perf_counter() - start
            for _ in range(warmup - 1):
                elapsed = _time_block(fn, 1)
            numbers[name] = max(1, math.ceil(min_repeat_seconds / max(elapsed, 1e-9)))
            rewarm[name] = 0 if elapsed > REWARM_MAX_CALL else max(1, math.ceil(REWARM_SECONDS / max(elapsed, 1e-9)))
            time.sleep(SETTLE_SECONDS)
        for _ in range(repeats):
            for name, fn in fns.items():
                spent = sum(times[name]) * numbers[name]
                if len(times[name]) >= 3 and spent > max_seconds:
                    continue
                if len(fns) > 1:
                    time.sleep(SETTLE_SECONDS)
                    for _ in range(rewarm[name]):  # untimed (REWARM_SECONDS)
                        fn()
                times[name].append(_time_block(fn, numbers[name]))
    finally:
        if gc_was_enabled:
            gc.enable()
    contention = None
    if busy0 is not None:
        others = (_busy_seconds() - busy0) - (_own_seconds() - own0)
        contention = max(0.0, others / (usable_cpus() * (time.perf_counter() - wall0)))
    timings = {}
    for name, ts in times.items():
        median = statistics.median(ts)
        spread = 0.0
        if len(ts) >= 2:
            q1, _, q3 = statistics.quantiles(ts, n=4, method="inclusive")
            spread = (q3 - q1) / median
        timings[name] = Timing(median, spread, len(ts), numbers[name], contention, results[name])
    return timings


# -------------------------------------------------------------------------------- formatting


def fmt_time(timing):
    """``"12.3 ms ±4%"``: the median in a readable unit and the relative spread.

    A dagger (``"12.3 ms ±4% †"``) marks a timing taken while other processes used more than
    10% of the machine's CPU time: on a small shared machine such numbers can be several times
    too slow (OpenMP barriers wait for a descheduled thread).
    """
    if timing is None:
        return "–"
    seconds = timing.median
    unit, scale = next(((u, s) for u, s in (("s", 1.0), ("ms", 1e-3)) if seconds >= s), ("µs", 1e-6))
    return f"{seconds / scale:.3g} {unit} ±{100 * timing.spread:.0f}%" + (" †" if timing.contended else "")


def fmt_ratio(ratio):
    """``"1.23x"``, or a dash for a missing ratio."""
    return "–" if ratio is None else f"{ratio:.2f}x"


def fmt_number(x, digits=3):
    """``x`` to ``digits`` significant digits, or a dash for None."""
    return "–" if x is None else f"{x:.{digits}g}"


def fmt_bytes(n):
    """``"12.3 MiB"``."""
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024


def ratio(baseline, candidate):
    """Speed-up of ``candidate`` over ``baseline`` (``> 1`` means the candidate is faster).

    Parameters
    ----------
    baseline, candidate : Timing or None

    Returns
    -------
    float or None
        ``baseline.median / candidate.median``; None when either is missing.
    """
    if baseline is None or candidate is None:
        return None
    return baseline.median / candidate.median


def geomean(values):
    """Geometric mean of the values that are not None (None when there are none)."""
    values = [v for v in values if v is not None]
    return math.exp(sum(map(math.log, values)) / len(values)) if values else None


# ------------------------------------------------------------------------------------ tables


class Table:
    """A markdown table that prints each row as it is added (long runs show progress).

    Parameters
    ----------
    title : str
        Heading of the section.
    columns : list of str
        Column headers.
    note : str, optional
        Paragraph under the heading (what the columns mean, how the inputs were made).
    """

    def __init__(self, title, columns, note=None):
        self.title = title
        self.columns = list(columns)
        self.note = note
        self.rows = []

    def _line(self, cells):
        return "| " + " | ".join(cells) + " |"

    def _head(self):
        lines = [f"## {self.title}", ""]
        if self.note:
            lines += [self.note, ""]
        lines += [self._line(self.columns), self._line(["---"] * len(self.columns))]
        return lines

    def add_row(self, *cells):
        """Append and print one row; ``cells`` are strings, one per column."""
        if len(cells) != len(self.columns):
            raise ValueError(f"row has {len(cells)} cells, expected {len(self.columns)}")
        if not self.rows:
            print("\n" + "\n".join(self._head()), flush=True)
        self.rows.append([str(c) for c in cells])
        print(self._line(self.rows[-1]), flush=True)

    def markdown(self):
        """The whole table as markdown."""
        return "\n".join(self._head() + [self._line(row) for row in self.rows])


class Report:
    """Environment header, tables and notes of one benchmark run; written once at the end.

    Parameters
    ----------
    args : argparse.Namespace
        From :func:`parse_args` (uses ``name``, ``out``, ``quick``, ``repeats``, ``threads``).
    title : str
        First heading of the file.
    torch : module or None
        From :func:`load_torch`.
    """

    def __init__(self, args, title, torch=None):
        self.args = args
        self.title = title
        self.env = environment(torch)
        self.env["command"] = " ".join(["python", *sys.argv])
        self.sections = []
        self.data = {}
        print(self._header(), flush=True)
        if os.getloadavg()[0] > 0.5 * usable_cpus():
            print("\nwarning: the machine is busy (load average above); timings will be noisy")

    def _header(self):
        lines = [f"# {self.title}", "", "| | |", "| --- | --- |"]
        lines += [f"| {key} | {value} |" for key, value in self.env.items()]
        lines += ["", "Times are medians ± interquartile range; † marks a time taken while other "
                  f"processes used more than {100 * CONTENTION_MARK:.0f}% of the CPUs (unreliable)."]
        return "\n".join(lines)

    def table(self, title, columns, note=None):
        """Start a :class:`Table` that becomes part of this report."""
        table = Table(title, columns, note)
        self.sections.append(table)
        return table

    def text(self, title, lines):
        """Add (and print) a section of plain markdown lines."""
        block = "\n".join([f"## {title}", "", *lines])
        self.sections.append(block)
        print("\n" + block, flush=True)

    def write(self):
        """Write ``<out>.md`` and the raw numbers in ``self.data`` to ``<out>.json``."""
        if self.args.out is None:
            print("\n(quick run: no result file written; pass --out to keep one)")
            return
        out = Path(self.args.out)
        out.parent.mkdir(parents=True, exist_ok=True)
        self.env["load average at end"] = _load_average()
        parts = [self._header()]
        parts += [s.markdown() if isinstance(s, Table) else s for s in self.sections]
        out.write_text("\n\n".join(parts) + "\n")
        raw = {"environment": self.env, "results": self.data}
        out.with_suffix(".json").write_text(json.dumps(raw, indent=1, default=float) + "\n")
        print(f"\nwrote {out} and {out.with_suffix('.json').name}")
