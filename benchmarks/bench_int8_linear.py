"""attnkit's dynamically quantised int8 linear map (``ops.int8_linear``) against its float32 GEMM
(``ops.matmul``), NumPy (OpenBLAS) float32, onnxruntime's dynamic int8 MatMul and torch's dynamic
int8 Linear, at the dense-layer shapes of a MiniLM encoder (hidden 384, intermediate 1536) for
2048 and 4096 (= 32 x 128) tokens, at 1 and 2 threads. One table file (``results/int8_linear.md``).

Every int8 time includes quantising the activations (attnkit and onnxruntime quantise per call;
torch too); weights are quantised once beforehand. Every call computes ``x @ W + b`` into a
preallocated ``out`` where the library allows it (attnkit, NumPy); onnxruntime and torch allocate
their outputs. attnkit's int8 kernel runs with VNNI (vpdpbusd) where the CPU has it, and for
comparison without (``set_int8_vnni(False)``: the exact pmaddwd product that CI machines without VNNI
run) and under the AVX2 ISA.

The baselines: onnxruntime's ``quantize_dynamic`` of a one-MatMul-plus-Add ONNX graph (per-channel
s8 weights, u8 activations quantised per tensor: ``DynamicQuantizeMatMul``/``MatMulInteger``), and
torch's ``quantize_dynamic`` of an ``nn.Linear`` (fbgemm: per-tensor u8 activations, and on x86
``reduce_range`` 7-bit activations against the pmaddubsw saturation attnkit avoids exactly).

What the runs found (Zen 4, AMD EPYC, 2 cores shared with other jobs at load average 5-6, so every
wall time carries a dagger and swings by tens of percent between runs; the one-thread CPU-time table is
the steadier one):

- With VNNI the kernel takes under 1/3 of the CPU time of attnkit's float32 GEMM (3.2-3.4x at one
  thread, 2.8-4.3x in wall time at one and two threads), quantisation of x included: 2048 x 384 x 1536
  in 6.6 ms of CPU against 22.3 ms, ~180 GMAC/s of the ~224 that one vpdpbusd a cycle allows.
- Against onnxruntime's dynamic int8 MatMul: 0.93-1.12x its CPU time at one thread (torch's dynamic
  Linear 0.96-1.15x), on par; in wall time at two threads ahead at every shape of the last run
  (1.19-1.96x). Quantising x costs ~0.85 ms of the 7 at k = 1536 (two passes over the 12 MB of x and
  one over the quantised rows to lay them out in MR-row panels): the place to look for more.
- Without VNNI (the exact pmaddwd product, AVX-512BW or AVX2) it is 1.3-1.5x float32: two pmaddwd and
  two adds per 64 products where VNNI needs one instruction. The 7-bit activations that would let
  pmaddubsw run without saturating (torch's reduce_range) would double the activation error instead.
- Error: attnkit's per-row activation scales give ~0.008 of the largest output, onnxruntime's
  per-tensor activation scale ~0.012, torch's 7-bit per-tensor activations ~0.02.
- Tuning steps (CPU time, 2048 x 384 x 1536, one core): quantised rows laid out in MR-row panels (one
  pointer for the 12 broadcasts; GCC had spilled the 12 row pointers) and the exact path's (a0, a2),
  (a1, a3) pairs prepared once per row: exact path 16.8 -> 15.4 ms, VNNI within noise; a one-pass
  epilogue: VNNI 7.25 -> 6.8 ms; two accumulator chains in the min/max pass and a pointer-stepped panel
  copy: 2048 x 1536 x 16 (almost all quantisation) 1.64 -> 1.43 ms.

Run ``python benchmarks/bench_int8_linear.py --help`` for the options.
"""

import math
import os
import tempfile
import time
from pathlib import Path

# As in bench_matmul.py: attnkit's passive OpenMP wait policy before _harness imports torch.
if "OMP_WAIT_POLICY" not in os.environ and "GOMP_SPINCOUNT" not in os.environ:
    os.environ["OMP_WAIT_POLICY"] = "PASSIVE"

import numpy as np  # noqa: E402

import _harness as harness  # noqa: E402
import attnkit  # noqa: E402
from attnkit import _core, ops  # noqa: E402

# (tokens, in_features, out_features): MiniLM's attention projections, FFN up and FFN down.
SHAPES = [(m, k, n) for m in (2048, 4096) for k, n in ((384, 384), (384, 1536), (1536, 384))]
QUICK_SHAPES = [(256, 384, 384), (256, 384, 1536)]
TARGET_OVER_F32 = 2.0   # int8 (VNNI) over attnkit float32, quantisation included
TARGET_OVER_ORT = 1.0   # int8 (VNNI) over onnxruntime's dynamic int8


def onnx_session(weight, bias, threads):
    """An onnxruntime session of ``x @ weight + bias`` quantised with ``quantize_dynamic``, or None."""
    try:
        import onnx
        import onnxruntime
        from onnx import TensorProto, helper, numpy_helper
        from onnxruntime.quantization import QuantType, quantize_dynamic
    except ImportError:
        print("note: onnx/onnxruntime are not importable; their column is skipped (pip install onnxruntime onnx)")
        return None
    k, n = weight.shape
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["xw"]), helper.make_node("Add", ["xw", "b"], ["y"])],
        "linear",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["m", k])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["m", n])],
        [numpy_helper.from_array(weight, "w"), numpy_helper.from_array(bias, "b")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    with tempfile.TemporaryDirectory() as tmp:
        src, dst = Path(tmp) / "linear.onnx", Path(tmp) / "linear.int8.onnx"
        onnx.save(model, src)
        quantize_dynamic(src, dst, weight_type=QuantType.QInt8, per_channel=True)
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        return onnxruntime.InferenceSession(str(dst), options, providers=["CPUExecutionProvider"])


def torch_linear(torch, weight, bias):
    """torch's dynamically quantised ``nn.Linear`` computing ``x @ weight + bias``, or None."""
    if torch is None:
        return None
    k, n = weight.shape
    linear = torch.nn.Linear(k, n)
    linear.weight.data = torch.from_numpy(np.ascontiguousarray(weight.T))
    linear.bias.data = torch.from_numpy(bias)
    return torch.ao.quantization.quantize_dynamic(torch.nn.Sequential(linear), {torch.nn.Linear}, dtype=torch.qint8)


def int8_call(x, qweight, bias, out, threads, isa, vnni):
    def call():
        _core.set_isa(isa)
        if _core.int8_vnni_available():
            _core.set_int8_vnni(vnni)
        attnkit.set_num_threads(threads)
        return ops.int8_linear(x, qweight, bias=bias, out=out)

    return call


def float_call(x, weight, bias, out, threads, isa):
    def call():
        _core.set_isa(isa)
        attnkit.set_num_threads(threads)
        return ops.matmul(x, weight, bias=bias, out=out)

    return call


def cpu_time(fn, blocks=5, min_seconds=0.05):
    """Least CPU time of this process per call over ``blocks`` loops of calls: on a shared machine the
    time a one-thread call spends descheduled counts in its wall time but not here."""
    start = time.process_time()
    fn()
    calls = max(1, math.ceil(min_seconds / max(time.process_time() - start, 1e-6)))
    best = math.inf
    for _ in range(blocks):
        start = time.process_time()
        for _ in range(calls):
            fn()
        best = min(best, (time.process_time() - start) / calls)
    return best


def rel_error(y, exact):
    return float(np.max(np.abs(np.asarray(y, np.float64) - exact)) / np.max(np.abs(exact)))


def bench(report, args, shapes, torch, threads):
    best = _core.available_isas()[-1]
    vnni = _core.int8_vnni_available()
    variants = [("int8 vnni", best, True)] if vnni else []
    variants += [(f"int8 {best}", best, False)] + ([("int8 avx2", "avx2", False)] if best != "avx2" and
                                                     "avx2" in _core.available_isas() else [])
    names = [v[0] for v in variants]
    lead = names[0]
    table = report.table(
        f"{threads} thread{'s' if threads > 1 else ''}: x (m, k) @ W (k, n) + b",
        ["m, k, n", "attnkit f32", *(f"attnkit {v}" for v in names), "NumPy f32", "onnxruntime int8",
         "torch int8", f"{lead} / f32", f"{lead} / onnxruntime", f"{lead} / torch", "f32 / NumPy",
         "rel. error attnkit int8", "rel. error onnxruntime", "rel. error torch"],
        "Median time of one call ± interquartile range. Ratios: the other's time / attnkit int8's "
        f"({lead}; > 1: attnkit int8 is faster). *rel. error*: max |y - x @ W - b| / max |x @ W + b| "
        "against the float64 product (x standard normal, W uniform +-1/sqrt(k) as nn.Linear's init).",
    )
    cpu = None if threads > 1 else report.table(
        "1 thread, CPU time", ["m, k, n", "attnkit f32", f"attnkit {lead}", "onnxruntime int8", "torch int8",
                               f"{lead} / f32", f"{lead} / onnxruntime", f"{lead} / torch"],
        "The least CPU time of the process per call over 5 loops of calls, after the table above: with other "
        "jobs on the machine, a one-thread call's wall time includes the time it waits for a core, this "
        "does not (caches and memory bandwidth are still shared).")
    rng = np.random.default_rng(0)
    for m, k, n in shapes:
        x = rng.standard_normal((m, k)).astype(np.float32)
        weight = rng.uniform(-1, 1, (k, n)).astype(np.float32) / np.float32(np.sqrt(k))
        bias = rng.uniform(-0.1, 0.1, n).astype(np.float32)
        qweight = ops.quantize_linear_weight(weight)
        out = np.empty((m, n), np.float32)
        session = onnx_session(weight, bias, threads)
        tlinear = torch_linear(torch, weight, bias)
        tx = None if torch is None else torch.from_numpy(x)
        fns = {"f32": float_call(x, weight, bias, out, threads, best)}
        fns.update({v: int8_call(x, qweight, bias, out, threads, isa, on) for v, isa, on in variants})
        fns["numpy"] = lambda x=x, w=weight, o=out, b=bias: np.add(np.matmul(x, w, out=o), b, out=o)
        fns["onnxruntime"] = None if session is None else (lambda s=session, x=x: s.run(None, {"x": x})[0])
        fns["torch"] = None if tlinear is None else (lambda f=tlinear, x=tx: f(x).numpy())
        results = {}
        for name, fn in fns.items():
            if fn is not None:
                results[name] = np.array(fn())
        timings = harness.compare(fns, repeats=args.repeats)
        exact = x.astype(np.float64) @ weight + bias
        t = timings
        errors = {name: rel_error(results[name], exact) for name in ("int8 vnni" if vnni else lead, "onnxruntime",
                                                                     "torch") if name in results}
        table.add_row(
            f"{m}, {k}, {n}", harness.fmt_time(t["f32"]), *(harness.fmt_time(t[v]) for v in names),
            harness.fmt_time(t["numpy"]), harness.fmt_time(t.get("onnxruntime")), harness.fmt_time(t.get("torch")),
            harness.fmt_ratio(harness.ratio(t["f32"], t[lead])),
            harness.fmt_ratio(harness.ratio(t.get("onnxruntime"), t[lead])),
            harness.fmt_ratio(harness.ratio(t.get("torch"), t[lead])),
            harness.fmt_ratio(harness.ratio(t["numpy"], t["f32"])),
            *(harness.fmt_number(errors.get(name)) for name in (lead, "onnxruntime", "torch")),
        )
        report.data[f"{threads}T {m}x{k}x{n}"] = {name: timing.as_dict() for name, timing in t.items()}
        report.data[f"{threads}T {m}x{k}x{n}"]["errors"] = errors
        if cpu is not None:
            timed = ("f32", lead, "onnxruntime", "torch")
            c = {name: cpu_time(fn) for name, fn in fns.items() if fn is not None and name in timed}
            cpu.add_row(f"{m}, {k}, {n}", *(f"{1e3 * c[name]:.3g} ms" if name in c else "–"
                                             for name in ("f32", lead, "onnxruntime", "torch")),
                        *(harness.fmt_ratio(c[name] / c[lead]) if name in c else "–"
                          for name in ("f32", "onnxruntime", "torch")))
            report.data[f"{threads}T {m}x{k}x{n}"]["cpu seconds"] = c
    _core.set_isa(best)
    if vnni:
        _core.set_int8_vnni(True)


def targets(report, threads_list):
    lines = []
    for threads in threads_list:
        for key, data in report.data.items():
            if not key.startswith(f"{threads}T "):
                continue
            lead = "int8 vnni" if "int8 vnni" in data else next(name for name in data if name.startswith("int8"))
            over_f32 = data["f32"]["median"] / data[lead]["median"]
            line = f"- {key}: {lead} {over_f32:.2f}x attnkit f32 (target {TARGET_OVER_F32}x: " + (
                "met" if over_f32 >= TARGET_OVER_F32 else "MISSED") + ")"
            if "onnxruntime" in data:
                over_ort = data["onnxruntime"]["median"] / data[lead]["median"]
                line += f", {over_ort:.2f}x onnxruntime (target {TARGET_OVER_ORT}x: " + (
                    "met" if over_ort >= TARGET_OVER_ORT else "MISSED") + ")"
            lines.append(line)
    report.text("Targets", lines)


def main(argv=None):
    parser = harness.make_parser(__doc__.splitlines()[0])
    args = harness.parse_args(parser, "int8_linear", argv)
    torch = harness.load_torch()
    report = harness.Report(args, "int8 linear map (dynamic quantisation) vs float32 and other int8 runtimes", torch)
    report.env["int8 kernel"] = (f"{_core.get_int8_variant()} (VNNI "
                                 f"{'available' if _core.int8_vnni_available() else 'not available'})")
    shapes = QUICK_SHAPES if args.quick else SHAPES
    threads_list = sorted({1, args.threads}, reverse=True)
    for threads in threads_list:
        harness.set_threads(threads, torch)
        bench(report, args, shapes, torch, threads)
    targets(report, threads_list)
    report.write()


if __name__ == "__main__":
    main()
