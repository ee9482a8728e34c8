"""Peak memory of one call, measured in a fresh subprocess.

``tracemalloc`` only sees Python's allocator, not ``new``/``malloc`` in C++ kernels, so
:func:`peak_memory` runs the call in a child process and reads the operating system's account
of its resident memory instead. The child builds the inputs and warms up (a small call of the same
kind, so one-off costs such as OpenMP thread stacks and code pages are not charged to the call),
then resets the resident high-water mark (``VmHWM``, by writing ``5`` to
``/proc/self/clear_refs``), makes the call and reads ``VmHWM`` again. ``peak - resident before``
is every page the call touched, output included; the output's size is reported separately and
subtracted to give the call's *extra* memory. Where ``clear_refs`` is unavailable (not Linux) the
child falls back to ``ru_maxrss``, which cannot be reset and so only gives a lower bound.
"""

import dataclasses
import gc
import importlib.util
import json
import os
import re
import resource
import subprocess
import sys
from pathlib import Path


@dataclasses.dataclass(frozen=True)
class PeakMemory:
    """Resident memory of one call, measured in a fresh process (see the module docstring).

    Attributes
    ----------
    peak_bytes : int
        Resident high-water mark during the call minus resident memory just before it.
    output_bytes : int
        Size of what the call returned.
    input_bytes : int
        Size of the inputs, as reported by the factory.
    method : str
        How the high-water mark was read.
    """

    peak_bytes: int
    output_bytes: int
    input_bytes: int
    method: str

    @property
    def extra_bytes(self):
        """Memory the call used beyond its output."""
        return self.peak_bytes - self.output_bytes

    @property
    def extra_fraction(self):
        """:attr:`extra_bytes` as a fraction of the inputs' size."""
        return self.extra_bytes / self.input_bytes


def peak_memory(factory, params, threads):
    """Peak memory of one call, measured in a fresh subprocess.

    Parameters
    ----------
    factory : str
        ``"path/to/bench_x.py:function"``. The function takes ``**params`` and returns
        ``(call, input_bytes)``: it builds the inputs, warms up with a small call of the same
        kind, and returns a zero-argument callable making the call to measure.
    params : dict
        JSON-serialisable keyword arguments of the factory.
    threads : int
        Thread count in the child, set through ``OMP_NUM_THREADS`` (and the BLAS variables) so
        that the thread pools have their final size before the measured call.

    Returns
    -------
    PeakMemory
    """
    cmd = [sys.executable, __file__, "--peak-memory-child", factory, json.dumps(params)]
    env = dict(os.environ)
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        env[var] = str(threads)
    done = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if done.returncode != 0:
        raise RuntimeError(f"peak-memory child failed:\n{done.stderr}")
    return PeakMemory(**json.loads(done.stdout.strip().splitlines()[-1]))


def _status_kib(field):
    match = re.search(rf"^{field}:\s+(\d+) kB", Path("/proc/self/status").read_text(), re.MULTILINE)
    return int(match.group(1))


def _reset_high_water_mark():
    """Reset VmHWM to the current RSS; False where the kernel does not allow it."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        return False
    return True


def _nbytes(result):
    if isinstance(result, tuple):
        return sum(map(_nbytes, result))
    return int(result.nbytes)


def _peak_memory_child(factory, params):
    path, func = factory.rsplit(":", 1)
    spec = importlib.util.spec_from_file_location(Path(path).stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    call, input_bytes = getattr(module, func)(**json.loads(params))
    gc.collect()
    gc.disable()
    if _reset_high_water_mark():
        before = _status_kib("VmRSS") * 1024
        result = call()
        peak = _status_kib("VmHWM") * 1024
        method = "VmHWM reset by /proc/self/clear_refs"
    else:
        before = _maxrss_bytes()
        result = call()
        peak = _maxrss_bytes()
        method = "ru_maxrss delta (lower bound)"
    record = {"peak_bytes": peak - before, "output_bytes": _nbytes(result),
              "input_bytes": int(input_bytes), "method": method}
    print(json.dumps(record))


def _maxrss_bytes():
    # ru_maxrss is in KiB on Linux and in bytes on macOS.
    scale = 1 if sys.platform == "darwin" else 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * scale


if __name__ == "__main__" and sys.argv[1:2] == ["--peak-memory-child"]:
    _peak_memory_child(*sys.argv[2:4])
