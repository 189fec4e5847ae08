"""The few special functions the mechanisms calibrate with, in the standard library: no SciPy at run time.

SciPy would add more than 100 MiB to the runtime install for four functions: the normal CDF and its
logarithm (the analytic Gaussian mechanism's delta), ``logsumexp`` (Purkayastha's angle CDF) and Brent's
root finder (both calibrations). These follow SciPy's algorithms (``ndtr``, ``log_ndtr``'s asymptotic
series, ``brentq``); ``tests/test_mechanisms.py`` checks them against SciPy where it is installed.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from ..errors import InvalidInputError

__all__ = ["ndtr", "log_ndtr", "logsumexp", "brentq"]

_SQRT_HALF = math.sqrt(0.5)
_LOG_SQRT_2PI = 0.5 * math.log(2.0 * math.pi)


def ndtr(x: float) -> float:
    """The standard normal CDF ``Phi(x)``, accurate in both tails (erf near 0, erfc beyond)."""
    z = x * _SQRT_HALF
    if abs(z) < _SQRT_HALF:
        return 0.5 + 0.5 * math.erf(z)
    tail = 0.5 * math.erfc(abs(z))
    return 1.0 - tail if z > 0 else tail


def log_ndtr(x: float) -> float:
    """``log Phi(x)`` without underflow or cancellation: the asymptotic series below -20, ``log1p`` above 0."""
    if x > 0.0:
        return math.log1p(-ndtr(-x))
    if x > -20.0:
        return math.log(ndtr(x))
    log_lhs = -0.5 * x * x - math.log(-x) - _LOG_SQRT_2PI
    total, last, numerator, factor, sign, i = 1.0, 0.0, 1.0, 1.0, 1.0, 0
    while abs(last - total) > np.finfo(float).eps:
        i += 1
        last = total
        sign = -sign
        factor /= x * x
        numerator *= 2 * i - 1
        total += sign * numerator * factor
    return log_lhs + math.log(total)


def logsumexp(a: np.ndarray) -> float:
    """``log(sum(exp(a)))`` without overflow (entries may be ``-inf``)."""
    a = np.asarray(a, dtype=np.float64)
    top = float(np.max(a))
    if not math.isfinite(top):
        return top
    return top + math.log(float(np.sum(np.exp(a - top))))


def brentq(
    f: Callable[[float], float], a: float, b: float, *, xtol: float = 2e-12, rtol: float = 8.9e-16, maxiter: int = 100
) -> float:
    """A root of ``f`` in ``[a, b]`` by Brent's method (SciPy's ``brentq``: inverse quadratic steps, else bisection).

    Raises:
        InvalidInputError: ``f(a)`` and ``f(b)`` have the same sign, or no convergence in ``maxiter`` steps.
    """
    xpre, xcur = float(a), float(b)
    fpre, fcur = f(xpre), f(xcur)
    if fpre == 0:
        return xpre
    if fcur == 0:
        return xcur
    if math.copysign(1.0, fpre) == math.copysign(1.0, fcur):
        raise InvalidInputError("brentq: f(a) and f(b) must have opposite signs")
    xblk = fblk = spre = scur = 0.0
    for _ in range(maxiter):
        if fpre != 0 and fcur != 0 and math.copysign(1.0, fpre) != math.copysign(1.0, fcur):
            xblk, fblk = xpre, fpre
            spre = scur = xcur - xpre
        if abs(fblk) < abs(fcur):
            xpre, xcur, xblk = xcur, xblk, xcur
            fpre, fcur, fblk = fcur, fblk, fcur
        delta = (xtol + rtol * abs(xcur)) / 2
        sbis = (xblk - xcur) / 2
        if fcur == 0 or abs(sbis) < delta:
            return xcur
        if abs(spre) > delta and abs(fcur) < abs(fpre):
            if xpre == xblk:  # interpolate
                stry = -fcur * (xcur - xpre) / (fcur - fpre)
            else:  # extrapolate
                dpre = (fpre - fcur) / (xpre - xcur)
                dblk = (fblk - fcur) / (xblk - xcur)
                stry = -fcur * (fblk * dblk - fpre * dpre) / (dblk * dpre * (fblk - fpre))
            if 2 * abs(stry) < min(abs(spre), 3 * abs(sbis) - delta):  # a good short step
                spre, scur = scur, stry
            else:
                spre = scur = sbis
        else:
            spre = scur = sbis
        xpre, fpre = xcur, fcur
        xcur += scur if abs(scur) > delta else (delta if sbis > 0 else -delta)
        fcur = f(xcur)
    raise InvalidInputError(f"brentq did not converge in {maxiter} iterations")
