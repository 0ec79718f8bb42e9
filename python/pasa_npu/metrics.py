"""Accuracy metrics: the paper's relative RMSE (eq. 19), NaN/Inf fractions, max abs error."""

from __future__ import annotations

import numpy as np


def _f64(x) -> np.ndarray:
    if hasattr(x, "detach"):  # a torch tensor
        x = x.detach().cpu().double().numpy()
    return np.asarray(x, dtype=np.float64)


def rmse(computed, golden) -> float:
    """Relative RMSE of eq. 19: ‖O_computed − O_golden‖₂ / ‖O_golden‖₂ (Frobenius norms over all
    elements). NaN if ``computed`` holds any NaN or Inf."""
    c, g = _f64(computed), _f64(golden)
    if c.shape != g.shape:
        raise ValueError(f"computed and golden shapes differ: {c.shape} vs {g.shape}")
    if not np.isfinite(c).all():
        return float("nan")
    return float(np.linalg.norm(c - g) / np.linalg.norm(g))


def nan_fraction(x) -> float:
    """Fraction of elements that are NaN (Table 4's 'NaN percentage' divided by 100)."""
    return float(np.isnan(_f64(x)).mean())


def nonfinite_fraction(x) -> float:
    """Fraction of elements that are NaN or ±Inf."""
    return float((~np.isfinite(_f64(x))).mean())


def max_abs_error(computed, golden) -> float:
    """max |computed − golden| over all elements (NaN if any element of ``computed`` is NaN)."""
    c, g = _f64(computed), _f64(golden)
    if c.shape != g.shape:
        raise ValueError(f"computed and golden shapes differ: {c.shape} vs {g.shape}")
    return float(np.max(np.abs(c - g))) if c.size else 0.0
