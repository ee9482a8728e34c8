"""Coverage-guided fuzzing of the public ops with atheris (libFuzzer): bytes -> an op, arrays of
fuzzer-chosen dtype, shape and bits, and keyword values. Any exception other than ValueError,
TypeError or MemoryError, and any crash, is a finding.

Run directly: ``python tests/fuzz/atheris_ops.py -runs=20000`` (libFuzzer flags pass through);
test_fuzz_atheris.py runs it for a bounded time. Coverage guidance needs attnkit imported through
the ordinary import system (a regular install): scikit-build-core's editable install loads it with
its own finder, which atheris does not instrument, and the fuzzer then mutates unguided.
"""

import sys

import atheris
import numpy as np

# Coverage feedback from attnkit's own Python code only: instrumenting everything loaded (NumPy,
# scikit-learn) takes minutes at start-up.
with atheris.instrument_imports(include=["attnkit"]):
    import attnkit
    from attnkit import ops

DTYPES = [np.float16, np.float32, np.float64, np.int32, np.bool_, np.complex64]
OPS = ["attention", "linear_attention", "softmax", "log_softmax", "random_fourier_features", "positions",
       "layer_norm", "cross_entropy", "matmul", "state"]


def array(fdp):
    ndim = fdp.ConsumeIntInRange(0, 4)
    shape = tuple(fdp.ConsumeIntInRange(0, 4) for _ in range(ndim))
    dtype = np.dtype(DTYPES[fdp.ConsumeIntInRange(0, len(DTYPES) - 1)])
    size = int(np.prod(shape)) * dtype.itemsize
    raw = fdp.ConsumeBytes(size).ljust(size, b"\0")
    arr = np.frombuffer(raw, dtype=dtype).reshape(shape)  # read-only, any bit pattern (NaN, inf, subnormal)
    return arr[..., ::2] if fdp.ConsumeBool() and arr.ndim else arr


def one_input(data):
    fdp = atheris.FuzzedDataProvider(data)
    op = OPS[fdp.ConsumeIntInRange(0, len(OPS) - 1)]
    a, b, c = array(fdp), array(fdp), array(fdp)
    lengths = np.array([fdp.ConsumeIntInRange(-2, 8) for _ in range(fdp.ConsumeIntInRange(0, 3))])
    number = fdp.ConsumeFloat()
    try:
        with np.errstate(all="ignore"):
            if op == "attention":
                attnkit.scaled_dot_product_attention(
                    a, b, c, key_lengths=lengths if fdp.ConsumeBool() else None, causal=fdp.ConsumeBool(),
                    scale=number if fdp.ConsumeBool() else None, return_weights=fdp.ConsumeBool())
            elif op == "linear_attention":
                attnkit.linear_attention(a, b, c, causal=fdp.ConsumeBool(), eps=abs(number) % 1,
                                         key_lengths=lengths if fdp.ConsumeBool() else None)
            elif op in ("softmax", "log_softmax"):
                getattr(attnkit, op)(a, axis=fdp.ConsumeIntInRange(-5, 5))
            elif op == "random_fourier_features":
                attnkit.random_fourier_features(a, b, offsets=c if fdp.ConsumeBool() else None,
                                                kind="cos" if fdp.ConsumeBool() else "sincos")
            elif op == "positions":
                attnkit.sinusoidal_positions(fdp.ConsumeIntInRange(-2, 64), fdp.ConsumeIntInRange(-2, 64), base=number)
            elif op == "layer_norm":
                ops.layer_norm(a, b if fdp.ConsumeBool() else None, c if fdp.ConsumeBool() else None)
            elif op == "cross_entropy":
                ops.cross_entropy(a, b, label_smoothing=number)
            elif op == "matmul":
                ops.matmul(a, b, bias=c if fdp.ConsumeBool() else None,
                           out=np.array(c) if fdp.ConsumeBool() else None, accumulate=fdp.ConsumeBool())
            else:
                state = attnkit.LinearAttentionState()
                state.step(a, b, c)
                state.attend(a)
    except (ValueError, TypeError, MemoryError):
        pass


if __name__ == "__main__":
    atheris.Setup(sys.argv, one_input)
    atheris.Fuzz()
