"""What a verbose training run prints: one line per epoch, and progress within an epoch, since an epoch of
long documents can take minutes: a tqdm bar on a terminal (when tqdm is installed), else a plain line every
``PROGRESS_SECONDS`` (a bar redrawn into a redirected log is only noise), with the updates done, tokens/s, the
loss and the epoch's time left."""

import sys
import time

__all__ = ["EpochProgress", "epoch_line"]

PROGRESS_SECONDS = 30.0


class EpochProgress:
    """Progress within one epoch of ``n_updates`` updates (silent unless ``verbose``)."""

    def __init__(self, verbose, label, epoch, n_updates):
        self.label, self.epoch, self.n_updates = label, epoch, n_updates
        self.done = self.tokens = 0
        self.start = self.last_line = time.perf_counter()
        self.bar = self.verbose = None
        if not verbose:
            return
        self.verbose = True
        if sys.stdout.isatty():
            try:
                from tqdm.auto import tqdm
            except ImportError:
                return
            self.bar = tqdm(total=n_updates, desc=f"{label} {epoch}", unit="update", leave=False, file=sys.stdout)

    def update(self, loss, tokens):
        """One update done, of ``tokens`` tokens, at training loss ``loss``."""
        self.done += 1
        self.tokens += tokens
        if not self.verbose:
            return
        now = time.perf_counter()
        speed = self.tokens / max(now - self.start, 1e-9)
        if self.bar is not None:
            self.bar.set_postfix(loss=f"{loss:.4f}", tokens_per_s=f"{speed:,.0f}", refresh=False)
            self.bar.update(1)
        elif now - self.last_line >= PROGRESS_SECONDS and self.done < self.n_updates:
            self.last_line = now
            left = (self.n_updates - self.done) * (now - self.start) / self.done
            print(f"  {self.label} {self.epoch}: {self.done}/{self.n_updates} updates  loss {loss:.4f}  "
                  f"{speed:,.0f} tokens/s  {_duration(left)} left in the epoch", flush=True)

    def close(self):
        """The epoch's seconds so far and its tokens per second."""
        if self.bar is not None:
            self.bar.close()
        seconds = time.perf_counter() - self.start
        return seconds, self.tokens / max(seconds, 1e-9)


def epoch_line(history, label, epoch, total, tokens_per_second, elapsed, improved, score_name, with_validation):
    """The verbose line of an epoch: losses, validation score, speed and time."""
    parts = [f"{label} {epoch:>3}/{total}", f"loss {history.loss_curve[-1]:.4f}"]
    if with_validation:
        parts.append(f"val loss {history.validation_loss_curve[-1]:.4f}")
        parts.append(f"val {score_name} {history.validation_scores[-1]:.4f}")
    parts.append(f"{tokens_per_second:,.0f} tokens/s")
    parts.append(f"elapsed {elapsed:.1f} s" + (" *" if improved else ""))
    return "  ".join(parts)


def _duration(seconds):
    minutes, seconds = divmod(round(seconds), 60)
    return f"{minutes} min {seconds:02d} s" if minutes else f"{seconds} s"
