"""The rules of a tensor table: how one checkpoint tensor becomes one or more of attnkit's parameters.

A table maps each checkpoint name to one rule. Every rule knows the shape it expects (checked before it
runs) and the attnkit names it writes; it stores float32, C-contiguous arrays. Hugging Face keeps a linear
layer's weight as (out, in) and attnkit as (in, out), hence ``transpose``; GPT-2's ``Conv1D`` is (in, out)
already but fuses q, k and v into one ``c_attn`` (:class:`Split`); llama.cpp's converter reorders the rows
of Q and K for its rotary layout (:class:`PermuteRows`, with :mod:`attnkit.pretrained.rotary_rows`).
"""

import dataclasses

import numpy as np

__all__ = ["PermuteRows", "Rename", "Rule", "Split"]


def _stored(value, transpose):
    return np.ascontiguousarray(value.T if transpose else value, dtype=np.float32)


@dataclasses.dataclass(frozen=True)
class Rename:
    """One tensor under attnkit's name, transposed where the layouts differ.

    Attributes
    ----------
    target : str
        attnkit's parameter name.
    shape : tuple of int
        The checkpoint tensor's shape (before any transpose).
    transpose : bool, default=False
    """

    target: str
    shape: tuple[int, ...]
    transpose: bool = False

    @property
    def targets(self) -> tuple[str, ...]:
        """The attnkit names this rule writes."""
        return (self.target,)

    def apply(self, value):
        """``{target: value}``, as float32."""
        return {self.target: _stored(value, self.transpose)}


@dataclasses.dataclass(frozen=True)
class Split:
    """A fused tensor cut into equal parts along one axis, one part per target.

    GPT-2's ``attn.c_attn.weight`` (d, 3d) is ``Split((wq, wk, wv), (d, 3 * d), axis=1)`` and its bias
    (3d,) ``Split((bq, bk, bv), (3 * d,), axis=0)``.

    Attributes
    ----------
    targets : tuple of str
        attnkit's names, in the order the parts are fused.
    shape : tuple of int
        The fused tensor's shape; ``shape[axis]`` must divide evenly.
    axis : int
    transpose : bool, default=False
        Transpose each part (for a fused (out, in) weight).
    """

    targets: tuple[str, ...]
    shape: tuple[int, ...]
    axis: int
    transpose: bool = False

    def __post_init__(self):
        if len(self.targets) < 2 or len(set(self.targets)) != len(self.targets):
            raise ValueError(f"Split needs two or more distinct targets, got {self.targets}")
        if not -len(self.shape) <= self.axis < len(self.shape) or self.shape[self.axis] % len(self.targets):
            raise ValueError(f"Split of shape {self.shape} along axis {self.axis} into {len(self.targets)} equal "
                             "parts is not possible")

    def apply(self, value):
        """``{target: part}`` for each equal part of ``value`` along ``axis``, as float32."""
        parts = np.split(value, len(self.targets), axis=self.axis)
        return {target: _stored(part, self.transpose) for target, part in zip(self.targets, parts)}


@dataclasses.dataclass(frozen=True, eq=False)
class PermuteRows:
    """A tensor whose rows are reordered: row ``i`` of the result is row ``rows[i]`` of the checkpoint's.

    Attributes
    ----------
    target : str
    shape : tuple of int
        The checkpoint tensor's shape; ``rows`` is a permutation of ``range(shape[0])``.
    rows : ndarray of int
        E.g. :func:`attnkit.pretrained.rotary_rows.interleaved_to_half` for a GGUF Q or K weight.
    transpose : bool, default=False
        Transpose after the rows are reordered.
    """

    target: str
    shape: tuple[int, ...]
    rows: np.ndarray
    transpose: bool = False

    def __post_init__(self):
        rows = np.asarray(self.rows)
        if not self.shape or rows.shape != (self.shape[0],) or not np.array_equal(np.sort(rows),
                                                                                   np.arange(self.shape[0])):
            raise ValueError(f"PermuteRows of shape {self.shape} needs a permutation of its {self.shape[:1]} rows")

    @property
    def targets(self) -> tuple[str, ...]:
        """The attnkit names this rule writes."""
        return (self.target,)

    def apply(self, value):
        """``{target: value[rows]}``, as float32."""
        return {self.target: _stored(value[self.rows], self.transpose)}


Rule = Rename | Split | PermuteRows
