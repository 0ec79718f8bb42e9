"""pasa_npu.metrics: the paper's relative RMSE (eq. 19) and the overflow statistics.

Expected values are computed here independently (explicit sums in Python floats / float64), never
by calling the code under test a second time.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from pasa_npu import metrics

torch = pytest.importorskip("torch")


def _eq19(computed, golden) -> float:
    """‖O_computed − O_golden‖₂ / ‖O_golden‖₂ over all elements, with plain Python sums."""
    c = [float(x) for x in np.asarray(computed, dtype=np.float64).ravel()]
    g = [float(x) for x in np.asarray(golden, dtype=np.float64).ravel()]
    num = math.fsum((a - b) ** 2 for a, b in zip(c, g))
    den = math.fsum(b * b for b in g)
    return math.sqrt(num) / math.sqrt(den)


def test_rmse_hand_computed_value():
    # computed − golden = (0.3, −0.4), norm 0.5, over ‖(3, 4)‖ = 5.
    assert metrics.rmse([3.3, 3.6], [3.0, 4.0]) == pytest.approx(0.1, rel=1e-12)
    assert metrics.rmse([3.0, 4.0], [3.0, 4.0]) == 0.0


@pytest.mark.parametrize("shape", [(7,), (2, 3, 5), (1, 4, 9, 16)])
def test_rmse_matches_eq19_on_random_arrays(shape):
    rng = np.random.default_rng(1901)
    golden = rng.standard_normal(shape)
    computed = golden + 1e-3 * rng.standard_normal(shape)
    assert metrics.rmse(computed, golden) == pytest.approx(_eq19(computed, golden), rel=1e-12)


def test_rmse_is_relative_scale_invariant_and_not_symmetric():
    rng = np.random.default_rng(1902)
    g = rng.standard_normal((3, 8))
    c = g + 0.01 * rng.standard_normal((3, 8))
    # eq. 19 is normalised by the golden norm: scaling both leaves it unchanged
    assert metrics.rmse(1e4 * c, 1e4 * g) == pytest.approx(metrics.rmse(c, g), rel=1e-12)
    # the denominator is the golden's norm, not the computed one's
    assert metrics.rmse(c, g) == pytest.approx(_eq19(c, g), rel=1e-12)
    assert metrics.rmse(g, c) == pytest.approx(_eq19(g, c), rel=1e-12)
    assert metrics.rmse(c, g) != metrics.rmse(g, c)


def test_rmse_accepts_fp16_and_torch_tensors():
    rng = np.random.default_rng(1903)
    g = rng.standard_normal((2, 5)).astype(np.float16)
    c = (g.astype(np.float64) + 0.01).astype(np.float16)
    expected = _eq19(c.astype(np.float64), g.astype(np.float64))
    assert metrics.rmse(c, g) == pytest.approx(expected, rel=1e-12)
    assert metrics.rmse(torch.from_numpy(c), torch.from_numpy(g)) == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_rmse_is_nan_if_computed_not_finite(bad):
    g = np.ones((2, 3))
    c = g.copy()
    c[1, 2] = bad
    assert math.isnan(metrics.rmse(c, g))


def test_rmse_shape_mismatch_raises():
    with pytest.raises(ValueError):
        metrics.rmse(np.zeros((2, 3)), np.ones(3))  # broadcastable, still refused
    with pytest.raises(ValueError):
        metrics.rmse(np.zeros((2, 3)), np.ones((3, 2)))


def test_nan_fraction_and_nonfinite_fraction():
    x = np.zeros(20, dtype=np.float16)
    x[[1, 5, 7]] = np.nan
    x[[2, 9]] = np.inf
    x[11] = -np.inf
    assert metrics.nan_fraction(x) == pytest.approx(3 / 20)
    assert metrics.nonfinite_fraction(x) == pytest.approx(6 / 20)
    assert metrics.nan_fraction(np.ones((4, 4))) == 0.0
    assert metrics.nan_fraction(torch.full((2, 2), float("nan"), dtype=torch.float16)) == 1.0


def test_max_abs_error():
    g = np.array([[1.0, -2.0, 3.0], [0.5, 0.25, -7.0]])
    c = g + np.array([[0.0, 0.125, -0.5], [1e-3, 0.0, 0.75]])
    assert metrics.max_abs_error(c, g) == 0.75
    assert metrics.max_abs_error(torch.from_numpy(c), torch.from_numpy(g)) == 0.75
    c[0, 0] = np.nan
    assert math.isnan(metrics.max_abs_error(c, g))
    c[0, 0] = np.inf
    assert metrics.max_abs_error(c, g) == np.inf


def test_max_abs_error_shape_mismatch_raises():
    with pytest.raises(ValueError):
        metrics.max_abs_error(np.zeros((2, 3)), np.zeros(3))
