"""``attnkit bench``: run the benchmark scripts of a source checkout and print their tables.

The scripts live in ``benchmarks/`` beside ``python/`` in the repository, not in the installed
package (they need the baselines, the data and the harness, none of which a wheel ships). So the
command looks for that folder: ``--benchmarks DIR``, else ``$ATTNKIT_BENCHMARKS``, else the checkout
this package was installed from in editable mode, else ``./benchmarks``.
"""

import os
import subprocess
import sys
import time
from pathlib import Path

__all__ = ["add_arguments", "find_benchmarks", "run"]

ENV_VAR = "ATTNKIT_BENCHMARKS"


def add_arguments(parser):
    """The ``bench`` subcommand's options."""
    parser.add_argument("names", nargs="*", help="benchmarks to run, e.g. attention random_features "
                                                 "(default: every bench_*.py; see --list)")
    parser.add_argument("--full", action="store_true",
                        help="full sizes and repeats, writing results/<name>.md (default: --quick, prints only)")
    parser.add_argument("--list", action="store_true", help="list the benchmarks and exit")
    parser.add_argument("--benchmarks", type=Path, default=None,
                        help=f"the benchmarks folder of a source checkout (default: ${ENV_VAR}, the editable "
                             "install's checkout, or ./benchmarks)")
    parser.add_argument("--repeats", type=int, default=None, help="passed to each script")
    parser.add_argument("--threads", type=int, default=None, help="passed to each script")


def find_benchmarks(explicit=None):
    """The benchmarks folder, or a ValueError saying where it looked."""
    here = Path(__file__).resolve()
    if explicit is None and os.environ.get(ENV_VAR):
        explicit = os.environ[ENV_VAR]  # chosen as --benchmarks is: no quiet fallback to another folder
    candidates = [Path(explicit)] if explicit is not None else [
        here.parents[3] / "benchmarks",  # python/attnkit/cli/bench.py in a checkout
        Path.cwd() / "benchmarks",
    ]
    for folder in candidates:
        if (folder / "_harness.py").is_file():
            return folder
    raise ValueError("no benchmarks folder (with _harness.py) found; looked in "
                     f"{', '.join(str(c) for c in candidates)}. The benchmarks ship with the source "
                     f"repository, not the wheel: clone it and pass --benchmarks DIR or set {ENV_VAR}")


def scripts(folder):
    """Benchmark name -> script path, for every ``bench_*.py`` in ``folder``."""
    return {path.stem.removeprefix("bench_"): path for path in sorted(folder.glob("bench_*.py"))}


def run(args):
    """Run the chosen scripts one after another; returns the exit code (0 if all succeeded)."""
    try:
        folder = find_benchmarks(args.benchmarks)
    except ValueError as error:
        print(f"attnkit bench: {error}", file=sys.stderr)
        return 2
    available = scripts(folder)
    if args.list:
        print("\n".join(available))
        return 0
    unknown = [name for name in args.names if name not in available]
    if unknown:
        print(f"attnkit bench: unknown benchmark {unknown[0]!r}; available: {', '.join(available)}", file=sys.stderr)
        return 2
    for option in ("repeats", "threads"):
        value = getattr(args, option)
        if value is not None and value < 1:
            print(f"attnkit bench: --{option} must be >= 1, got {value}", file=sys.stderr)
            return 2
    extra = [] if args.full else ["--quick"]
    for option in ("repeats", "threads"):
        if getattr(args, option) is not None:
            extra += [f"--{option}", str(getattr(args, option))]
    failed = []
    for name in args.names or list(available):
        print(f"\n=== {name} ({available[name].name} {' '.join(extra)})", flush=True)
        start = time.perf_counter()
        code = subprocess.call([sys.executable, str(available[name]), *extra], cwd=folder)
        print(f"=== {name}: {'ok' if code == 0 else f'exit code {code}'} in {time.perf_counter() - start:.0f} s",
              flush=True)
        if code:
            failed.append(name)
    if failed:
        print(f"attnkit bench: failed: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0
