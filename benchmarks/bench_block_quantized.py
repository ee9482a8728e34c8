"""attnkit's GGML block-quantised product (``ops.block_quantized_matmul``) against its float32 GEMM
(``ops.matmul``) on the weight shapes of SmolLM2-135M (hidden 576, 3 KV heads of 64, FFN 1536, vocabulary
49152): one token (m = 1, decoding, the matrix-vector kernel that dequantises in registers), a shared
decoding step of 16 sequences (m = 16) and a 512-token prompt (m = 512: dequantised panels through the
packed GEMM), at 1 and 2 threads; each with float32 inputs and with int8 inputs (llama.cpp's arithmetic,
over the blocks packed in groups of 16 columns). One table file (``results/block_quantized.md``).

*GB/s* is the bytes of weights read per call (the blocks for attnkit's quantised kernel, n_in x n_out x 4
for float32) over the median time: a decoding step is bound by memory, so this is the figure to hold
against the machine's bandwidth (~12 GB/s on the Zen 3 VM it was written on). The smaller matrices
(0.07-0.6 MB of blocks) stay in L2/L3 across the repeats, so they can exceed it.

Run ``python benchmarks/bench_block_quantized.py --help`` for the options.
"""

import os

# As in bench_matmul.py: attnkit's passive OpenMP wait policy before _harness imports torch.
if "OMP_WAIT_POLICY" not in os.environ and "GOMP_SPINCOUNT" not in os.environ:
    os.environ["OMP_WAIT_POLICY"] = "PASSIVE"

import numpy as np  # noqa: E402

import _harness as harness  # noqa: E402
from attnkit import ops  # noqa: E402

# (n_in, n_out, kind): attention q/o, k/v, FFN [gate | up] (one matrix, as the checkpoint loads it), FFN down,
# tied output embedding.
SHAPES = [(576, 576, "q4_1"), (576, 192, "q4_1"), (576, 3072, "q4_1"), (1536, 576, "q4_1"), (576, 49152, "q8_0")]
QUICK_SHAPES = SHAPES[:2]
# The prompt's product on the 49152-row table takes seconds per call in float32: left out of the m = 512 table.
PROMPT_MAX_OUT = 4096


def _calls(x, weight, qweight):
    out, out_f32, out_int8 = (np.empty((x.shape[0], weight.shape[1]), np.float32) for _ in range(3))
    int8 = qweight.with_activations("int8")
    return {
        "quantized": lambda: ops.block_quantized_matmul(x, qweight, out=out),
        "f32": lambda: ops.matmul(x, weight, out=out_f32),
        "int8": lambda: ops.block_quantized_matmul(x, int8, out=out_int8),
    }


def bench(report, args, threads, m, shapes):
    table = report.table(
        f"{threads} thread{'s' if threads > 1 else ''}: x ({m}, n_in) @ W (n_in, n_out)",
        ["n_in, n_out", "kind", "blocks", "attnkit quantized", "GB/s", "GFLOP/s", "attnkit f32 matmul", "GB/s f32",
         "GFLOP/s f32", "f32 / quantized", "rel. error", "int8 inputs", "GFLOP/s int8", "float32 inputs / int8"],
        "Median time of one call ± interquartile range. *GB/s*: bytes of weights read per call / time (blocks "
        "for the quantized kernel, 4 n_in n_out for float32; the figure for m = 1). *GFLOP/s*: 2 m n_in n_out / time "
        "(the figure for m = 512). *f32 / quantized* > 1: the quantized product is "
        "faster. *rel. error*: max |y - x @ dequantize(W)| / max |x| @ |W| against the float64 product. *int8 "
        "inputs*: the same blocks with x read as int8 codes (``with_activations('int8')``).",
    )
    rng = np.random.default_rng(0)
    for n_in, n_out, kind in shapes:
        weight = (rng.standard_normal((n_in, n_out)) / np.sqrt(n_in)).astype(np.float32)
        qweight = ops.quantize_blocks(weight, kind)
        x = rng.standard_normal((m, n_in)).astype(np.float32)
        t = harness.compare(_calls(x, weight, qweight), repeats=args.repeats)
        exact = x.astype(np.float64) @ qweight.dequantize().astype(np.float64)
        scale = float((np.abs(x.astype(np.float64)) @ np.abs(qweight.dequantize().astype(np.float64))).max())
        error = float(np.abs(np.asarray(t["quantized"].result) - exact).max()) / scale
        gbs = qweight.nbytes / t["quantized"].median / 1e9
        gbs_f32 = weight.nbytes / t["f32"].median / 1e9
        flops = 2 * m * n_in * n_out / 1e9
        table.add_row(f"{n_in}, {n_out}", kind, harness.fmt_bytes(qweight.nbytes), harness.fmt_time(t["quantized"]),
                      f"{gbs:.1f}", f"{flops / t['quantized'].median:.1f}", harness.fmt_time(t["f32"]),
                      f"{gbs_f32:.1f}", f"{flops / t['f32'].median:.1f}",
                      harness.fmt_ratio(harness.ratio(t["f32"], t["quantized"])), harness.fmt_number(error),
                      harness.fmt_time(t["int8"]), f"{flops / t['int8'].median:.1f}",
                      harness.fmt_ratio(harness.ratio(t["quantized"], t["int8"])))
        report.data[f"{threads}T m={m} {n_in}x{n_out} {kind}"] = {
            "timings": {name: timing.as_dict() for name, timing in t.items()}, "blocks_bytes": qweight.nbytes,
            "gb_per_s": gbs, "gb_per_s_f32": gbs_f32, "rel_error": error}


def main(argv=None):
    parser = harness.make_parser(__doc__.splitlines()[0])
    args = harness.parse_args(parser, "block_quantized", argv)
    report = harness.Report(args, "GGML block-quantised weights (Q4_1, Q8_0) vs float32, SmolLM2-135M shapes")
    shapes = QUICK_SHAPES if args.quick else SHAPES
    threads_list = harness.thread_counts(args)
    for threads in threads_list:
        harness.set_threads(threads)
        bench(report, args, threads, 1, shapes)
    for threads in threads_list:
        harness.set_threads(threads)
        bench(report, args, threads, 16, shapes)
    for threads in threads_list:
        harness.set_threads(threads)
        bench(report, args, threads, 512, [s for s in shapes if s[1] <= PROMPT_MAX_OUT])
    report.write()


if __name__ == "__main__":
    main()
