"""Derive the polynomial of ``normal_tail`` in cpp/include/attnkit/simd.h (run once; needs mpmath).

For u >= 0, ``Phi(-u) = exp(-u^2 / 2) t H(y)`` with ``t = c / (c + u)`` and ``y = 2t - 1 = (c - u) / (c + u)``,
which maps u in [0, inf) onto y in (-1, 1]. H is analytic on [-1, 1] (the Mills ratio of the normal
distribution, times (c + u) / c), so its Chebyshev series converges geometrically: degree 11 reaches
float's and degree 25 double's relative precision. The series is computed at 50 digits, truncated
(near-minimax), converted to monomials in y (their size stays below 0.25, so Horner's rule is stable)
and printed as C++ initialisers.

Usage: python tools/fit_normal_tail.py
"""

import mpmath as mp

mp.mp.dps = 50
C = mp.mpf(3)
NODES = 80
DEGREES = {"float": 11, "double": 25}


def h(y):
    t = (1 + mp.mpf(y)) / 2
    if t == 0:
        return 1 / (C * mp.sqrt(2 * mp.pi))  # Phi(-u) exp(u^2/2) ~ 1 / (u sqrt(2 pi)) and t ~ c / u
    u = C / t - C
    return mp.erfc(u / mp.sqrt(2)) / 2 * mp.exp(u * u / 2) / t


def chebyshev_coefficients(n):
    angles = [mp.pi * (k + mp.mpf(1) / 2) / n for k in range(n)]
    values = [h(mp.cos(a)) for a in angles]
    return [2 * mp.fsum(v * mp.cos(j * a) for v, a in zip(values, angles)) / n for j in range(n)]


def to_monomials(coefficients):
    """sum_j a_j T_j(y), with a_0 halved, as monomial coefficients (lowest first)."""
    result = [mp.mpf(0)] * len(coefficients)
    previous, current = [mp.mpf(1)], [mp.mpf(0), mp.mpf(1)]
    for j, a in enumerate(coefficients):
        if j == 0:
            basis = previous
        elif j == 1:
            basis = current
        else:
            following = [mp.mpf(0)] + [2 * c for c in current]
            for i, c in enumerate(previous):
                following[i] -= c
            previous, current = current, following
            basis = current
        for i, c in enumerate(basis):
            result[i] += (a / 2 if j == 0 else a) * c
    return result


def main():
    series = chebyshev_coefficients(NODES)
    print(f"c = {mp.nstr(C, 3)}")
    for name, degree in DEGREES.items():
        tail = mp.fsum(abs(a) for a in series[degree + 1:])
        print(f"{name}: degree {degree}, truncation error <= {mp.nstr(tail, 3)} (H >= 0.133)")
        digits = 9 if name == "float" else 17
        suffix = "f" if name == "float" else ""
        values = [mp.nstr(c, digits, strip_zeros=False, min_fixed=-1, max_fixed=-1) + suffix
                  for c in to_monomials(series[: degree + 1])]
        print("  {" + ", ".join(values) + "}")


if __name__ == "__main__":
    main()
