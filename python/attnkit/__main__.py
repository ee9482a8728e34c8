"""Command line: ``attnkit demo`` and ``attnkit show-config``."""

import argparse
import sys
import time

import numpy as np


def demo(args):
    """A small attention example: a causal, padded batch, checked against the NumPy reference."""
    import attnkit
    from attnkit import reference

    rng = np.random.default_rng(0)
    batch, heads, n, d = 4, 8, 128, 64
    q, k, v = (rng.standard_normal((batch, heads, n, d), dtype=np.float32) for _ in range(3))
    lengths = np.array([128, 100, 64, 17])
    print(f"Causal self-attention, batch={batch} heads={heads} N={n} d={d}, key lengths {lengths.tolist()}")
    start = time.perf_counter()
    out = attnkit.scaled_dot_product_attention(q, k, v, key_lengths=lengths, causal=True)
    elapsed = time.perf_counter() - start
    expected = reference.scaled_dot_product_attention(q, k, v, key_lengths=lengths, causal=True)
    print(f"output shape {out.shape}, {elapsed * 1e3:.2f} ms; "
          f"max |attnkit - numpy reference| = {np.abs(out - expected).max():.2e}")
    _, weights = attnkit.scaled_dot_product_attention(
        q[3, 0, :6, :], k[3, 0, :6, :], v[3, 0, :6, :], causal=True, return_weights=True)
    print("attention weights of the first 6 positions (causal):")
    print(np.array2string(weights, precision=2, suppress_small=True))
    print()
    attnkit.show_config()
    return 0


def main(argv=None):
    parser = argparse.ArgumentParser(prog="attnkit", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("demo", help="run a small attention example and print the configuration")
    sub.add_parser("show-config", help="print version, ISA, threads, compiler and flags")
    args = parser.parse_args(argv)
    if args.command == "demo":
        return demo(args)
    import attnkit

    attnkit.show_config()
    return 0


if __name__ == "__main__":
    sys.exit(main())
