"""pasa_npu.beta: the optimal-accuracy condition for β (paper §2.3, Appendices A-C, Table 3).

Expected values come from the paper's Table 3 (n = 128, FP16, unscaled M), from the algebra of
the rounded shifting matrix redone here in float64, or from independent roundings (NumPy's
float16 conversion; an exact float64 round-to-nearest-even for bfloat16 written here).
"""

from __future__ import annotations

import math
import re

import numpy as np
import pytest

from pasa_npu import beta as B

# ---------------------------------------------------------------------------------------------
# Table 3 as printed in the paper: initial β, Inva, Inva_r, rel. err. (percent), optimized β
# (None where the paper prints the start value 0.9 itself), optimized Inva and Inva_r.
TABLE3 = [
    (0.9, "9.000", "8.971", 0.32, None, "8.971", "8.971"),
    (1 - 2**-4, "15.00", "15.00", 0.0, "0.937500", "15.00", "15.00"),
    (1 - 2**-5, "31.00", "31.25", 0.81, "0.968994", "31.25", "31.25"),
    (1 - 2**-6, "63.00", "63.50", 0.79, "0.984497", "63.50", "63.50"),
    (0.99, "99.00", "102.2", 3.23, "0.990311", "102.2", "102.2"),
    (0.999, "999.0", "1031", 3.20, "0.999031", "1031", "1031"),
]


def _four_sig(x: float) -> str:
    """The paper prints invariances with four significant figures."""
    return f"{x:#.4g}".rstrip(".")


def _rne_bits(x: float, bits: int) -> float:
    """Exact round-to-nearest-even of a float64 to ``bits`` significant bits (normal range)."""
    if x == 0.0:
        return 0.0
    _, e = math.frexp(x)  # x = m·2^e, 0.5 <= |m| < 1
    quantum = math.ldexp(1.0, e - bits)
    return round(x / quantum) * quantum  # x / quantum is exact; Python's round ties to even


def _bf16(x: float) -> float:
    return _rne_bits(x, 8)


def _fp16(x: float) -> float:
    return float(np.float16(x))


# ---------------------------------------------------------------------------------------------
# Table 3


@pytest.mark.parametrize("row", TABLE3, ids=[f"start={r[0]:.6g}" for r in TABLE3])
def test_table3_optimized_beta(row):
    start, _, _, _, printed_beta, printed_inva, _ = row
    b = B.optimal_beta(start, 128, "float16")
    if printed_beta is None:
        # The paper prints "0.9"; its own Inva column (8.971) pins the optimum to 8.971/9.971.
        assert abs(b - 0.9) < 5e-4
        assert b != 0.9  # the start point is not a fixed point
    else:
        assert f"{b:.6f}" == printed_beta
    assert _four_sig(B.ideal_invariance(b)) == printed_inva


@pytest.mark.parametrize("row", TABLE3, ids=[f"start={r[0]:.6g}" for r in TABLE3])
def test_table3_invariances_at_start(row):
    start, printed_inva, printed_inva_r, _, _, _, printed_opt_inva_r = row
    assert _four_sig(B.ideal_invariance(start)) == printed_inva
    assert _four_sig(B.practical_invariance(start, 128, "float16")) == printed_inva_r
    b = B.optimal_beta(start, 128, "float16")
    assert _four_sig(B.practical_invariance(b, 128, "float16")) == printed_opt_inva_r


@pytest.mark.parametrize("row", TABLE3, ids=[f"start={r[0]:.6g}" for r in TABLE3])
def test_table3_initial_relative_error(row):
    """Rel. err = |Inva − Inva_r| / Inva. The paper's percentages are *truncated* to two decimals:
    the exact values are 0.3237 %, 0 %, 0.8128 %, 0.7999 %, 3.2387 %, 3.2095 %, printed as 0.32, 0.0,
    0.81, 0.79, 3.23, 3.20 (rounding would give 0.80, 3.24, 3.21). So the honest check is
    printed <= 100·rel < printed + 0.01."""
    start, _, _, printed_pct, *_ = row
    inva, inva_r = B.ideal_invariance(start), B.practical_invariance(start, 128, "float16")
    pct = 100 * abs(inva - inva_r) / inva
    assert printed_pct - 1e-12 <= pct < printed_pct + 0.01
    if printed_pct == 0.0:
        assert inva_r == inva  # 1 − 2⁻⁴: both entries of M exact in FP16, Inva = 15 exactly


def test_table3_via_invariance_table_and_zero_error_at_optimum():
    rows = B.invariance_table(128, "float16")
    assert [r["initial_beta"] for r in rows] == [r[0] for r in TABLE3]
    for r, printed in zip(rows, TABLE3):
        assert r["optimized_rel_err"] < 1e-12  # Table 3: 0.0 % for every optimized β
        assert r["optimized_inva"] == pytest.approx(r["optimized_inva_r"], rel=1e-12)
        assert r["initial_rel_err"] == pytest.approx(
            abs(r["initial_inva"] - r["initial_inva_r"]) / r["initial_inva"], rel=1e-12)
        if printed[4] is not None:
            assert f"{r['optimized_beta']:.6f}" == printed[4]
    text = B.format_invariance_table(rows)
    assert "0.984497" in text and "0.968994" in text


def test_paper_starts_are_the_module_constants():
    assert B.TABLE3_START == (0.9, 0.9375, 0.96875, 0.984375, 0.99, 0.999)
    assert B.DEFAULT_START == 0.984375


def test_entries_of_m_match_numpy_float16_rounding():
    # eq. 21, independently: a = fl(1 − β/n) + b, b = fl(β/n), with NumPy's float16 rounding
    for start in B.TABLE3_START:
        diag, off = B.shift_entries(start, 128, "float16")
        assert diag == _fp16(1 - start / 128)
        assert off == _fp16(-start / 128)
        b = _fp16(start / 128)
        a = _fp16(1 - start / 128) + b
        f = b * 128 / (a * (a - b * 128)) + (1 - a) / a  # eq. 20
        assert B.practical_invariance(start, 128, "float16") == pytest.approx(f, rel=1e-14)


# ---------------------------------------------------------------------------------------------
# The fixed point


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("n", [128, 64, 100, 37])
@pytest.mark.parametrize("scale", [None, 1 / math.sqrt(64), 1 / math.sqrt(128), 0.1])
def test_optimum_is_a_fixed_point(dtype, n, scale):
    b = B.optimal_beta(1 - 2**-6, n, dtype, scale)
    assert 0.0 < b < 1.0
    # at the optimum the ideal and practical invariances agree (eq. 16)
    assert B.ideal_invariance(b) == pytest.approx(B.practical_invariance(b, n, dtype, scale), rel=1e-9)
    # and restarting from it stays there
    assert B.optimal_beta(b, n, dtype, scale) == pytest.approx(b, rel=1e-12)


def test_power_of_two_scale_does_not_change_beta():
    # scaling M by 2^-k scales both entries exactly (no new rounding), so the effective β and the
    # optimum are those of the unscaled M
    for n in (128, 64, 37):
        for s in (0.125, 0.0625):
            assert B.optimal_beta(1 - 2**-6, n, "float16", s) == B.optimal_beta(1 - 2**-6, n, "float16")


def test_non_power_of_two_scale_changes_beta():
    # D = 128: scale 1/√128 is not a power of two; docs/golden.md quotes 0.984711 for it
    b = B.optimal_beta(1 - 2**-6, 128, "float16", 1 / math.sqrt(128))
    assert f"{b:.6f}" == "0.984711"
    assert b != B.optimal_beta(1 - 2**-6, 128, "float16")


def test_default_beta():
    assert B.default_beta() == B.optimal_beta(1 - 2**-6, 128, "float16")
    assert f"{B.default_beta():.6f}" == "0.984497"  # the β the paper adopts
    s = 1 / math.sqrt(128)
    b = B.default_beta(128, s)
    assert B.practical_invariance(b, 128, "float16", s) == pytest.approx(B.ideal_invariance(b), rel=1e-9)
    b64 = B.default_beta(64, None)
    assert B.practical_invariance(b64, 64, "float16") == pytest.approx(B.ideal_invariance(b64), rel=1e-9)


def test_optimal_beta_reports_non_convergence():
    with pytest.raises(ValueError):
        B.optimal_beta(0.9, 128, "float16", max_iter=1)


# ---------------------------------------------------------------------------------------------
# Inva_r is the exact mean-recovery coefficient of the rounded M (independent float64 check)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("n", [128, 64, 37, 100, 1])
@pytest.mark.parametrize("scale", [None, 1 / math.sqrt(64), 1 / math.sqrt(128)])
@pytest.mark.parametrize("beta", [0.9, 0.9375, 0.984375, 0.99, 0.5])
def test_practical_invariance_recovers_the_mean(dtype, n, scale, beta):
    """With M built in float64 from the stored entries and divided by the scale, S' = S·M has
    rowmean(S) = (1 + f)·rowmean(S'): f is the exact coefficient for the *rounded* M
    (M = a·I − b·J gives mean(S') = (a − b·n)·mean(S) and 1 + f = 1/(a − b·n))."""
    try:
        f = B.practical_invariance(beta, n, dtype, scale)
    except ValueError:
        pytest.skip("rounded M singular for this combination")  # covered by its own test
    diag, off = B.shift_entries(beta, n, dtype, scale)
    s = 1.0 if scale is None else scale
    m = np.full((n, n), off, dtype=np.float64)
    np.fill_diagonal(m, diag)
    m /= s
    rng = np.random.default_rng(2300 + n)
    scores = rng.standard_normal((6, n)) * 3 + rng.standard_normal((6, 1)) * 50  # rows with a bias
    shifted = scores @ m
    lhs = scores.mean(axis=1)
    rhs = (1 + f) * shifted.mean(axis=1)
    np.testing.assert_allclose(rhs, lhs, rtol=1e-10, atol=1e-10 * np.abs(scores).max())


@pytest.mark.parametrize("n", [128, 37])
def test_ideal_beta_recovers_exactly_without_rounding(n):
    # control: the unrounded M = I − β/n·J recovers the mean with exactly β/(1−β)
    beta = 0.984375
    m = np.eye(n) - beta / n * np.ones((n, n))
    rng = np.random.default_rng(2400)
    scores = rng.standard_normal((4, n)) + 20
    np.testing.assert_allclose((1 + B.ideal_invariance(beta)) * (scores @ m).mean(1), scores.mean(1), rtol=1e-12)


@pytest.mark.parametrize("scale", [None, 1 / math.sqrt(128), 0.3])
@pytest.mark.parametrize("n", [128, 37, 1000])
def test_shift_entries_rounding(scale, n):
    s = 1.0 if scale is None else scale
    for beta in (0.9, 0.984375, 0.999, 0.25):
        d16, o16 = B.shift_entries(beta, n, "float16", scale)
        assert d16 == _fp16((1 - beta / n) * s)
        assert o16 == _fp16(-beta / n * s)
        d, o = B.shift_entries(beta, n, "bfloat16", scale)
        assert d == _bf16((1 - beta / n) * s)
        assert o == _bf16(-beta / n * s)


def test_round_to_bfloat16_matches_exact_rne():
    rng = np.random.default_rng(2500)
    xs = np.concatenate([rng.standard_normal(2000) * 10.0 ** rng.integers(-6, 6, 2000),
                         [1.0, -1.0, 1 + 2**-8, 1 + 3 * 2**-8, 1 + 2**-9 + 2**-30, 0.0078125]])
    got = B.round_to(xs, "bfloat16")
    expected = np.array([_bf16(float(x)) for x in xs])
    np.testing.assert_array_equal(got, expected)
    # ties go to even: 1 + 2^-8 is halfway between 1 and 1 + 2^-7 → 1; 1 + 3·2^-8 → 1 + 2^-6
    assert B.round_to(1 + 2**-8, "bfloat16") == 1.0
    assert B.round_to(1 + 3 * 2**-8, "bfloat16") == 1 + 2**-6


def test_round_to_float16_is_numpy_rounding():
    xs = np.array([1 + 2**-11, 1 + 3 * 2**-11, 65504.0, 65519.99, 1e-5, -0.1])
    np.testing.assert_array_equal(B.round_to(xs, "float16"), xs.astype(np.float16).astype(np.float64))


# ---------------------------------------------------------------------------------------------
# bfloat16 start 0.999 at n = 128: the rounded M is singular


def test_bfloat16_0999_is_singular():
    # Independently: 0.999/128 = 0.0078047 rounds (8 significant bits) to 2⁻⁷ and 1 − 0.999/128
    # to 1 − 2⁻⁷, so a = (1 − 2⁻⁷) + 2⁻⁷ = 1 and a − b·n = 1 − 2⁻⁷·128 = 0: no inverse.
    assert _bf16(0.999 / 128) == 2**-7
    assert _bf16(1 - 0.999 / 128) == 1 - 2**-7
    assert B.shift_entries(0.999, 128, "bfloat16") == (1 - 2**-7, -(2**-7))
    with pytest.raises(ValueError):
        B.practical_invariance(0.999, 128, "bfloat16")
    with pytest.raises(ValueError):
        B.optimal_beta(0.999, 128, "bfloat16")
    row = B.invariance_table(128, "bfloat16")[-1]
    assert row["initial_beta"] == 0.999
    assert math.isnan(row["initial_inva_r"]) and math.isnan(row["initial_rel_err"])
    assert math.isnan(row["optimized_beta"]) and math.isnan(row["optimized_inva_r"])
    # the other rows of the bfloat16 table are finite fixed points
    for r in B.invariance_table(128, "bfloat16")[:-1]:
        assert r["optimized_rel_err"] < 1e-12


# ---------------------------------------------------------------------------------------------
# Argument checking


@pytest.mark.parametrize("bad_beta", [-0.1, 1.0, 1.5, float("nan")])
def test_beta_outside_unit_interval_raises(bad_beta):
    with pytest.raises(ValueError):
        B.shift_entries(bad_beta, 128)
    with pytest.raises(ValueError):
        B.practical_invariance(bad_beta, 128)
    with pytest.raises(ValueError):
        B.ideal_invariance(bad_beta)
    with pytest.raises(ValueError):
        B.optimal_beta(bad_beta, 128)


@pytest.mark.parametrize("bad_dtype", ["float32", "fp16", "float64", None])
def test_bad_dtype_raises(bad_dtype):
    with pytest.raises(ValueError):
        B.shift_entries(0.9, 128, bad_dtype)
    with pytest.raises(ValueError):
        B.practical_invariance(0.9, 128, bad_dtype)
    with pytest.raises(ValueError):
        B.optimal_beta(0.9, 128, bad_dtype)
    with pytest.raises(ValueError):
        B.round_to(1.0, bad_dtype)


@pytest.mark.parametrize("bad_n", [0, -1, 2.5, 128.0])
def test_bad_block_kv_raises(bad_n):
    with pytest.raises(ValueError):
        B.shift_entries(0.9, bad_n)
    with pytest.raises(ValueError):
        B.practical_invariance(0.9, bad_n)
    with pytest.raises(ValueError):
        B.optimal_beta(0.9, bad_n)


@pytest.mark.parametrize("bad_scale", [0.0, -0.125, float("inf"), float("nan")])
def test_bad_scale_raises(bad_scale):
    with pytest.raises(ValueError):
        B.shift_entries(0.9, 128, "float16", bad_scale)
    with pytest.raises(ValueError):
        B.optimal_beta(0.9, 128, "float16", bad_scale)


def test_scale_range():
    # float16: the diagonal overflows above 65504; below n·2⁻¹⁸ the off-diagonal is a subnormal of
    # fewer than 64 steps of 2⁻²⁴
    assert B.scale_range(128) == (2.0**-11, 65504.0)
    assert B.scale_range(16) == (2.0**-14, 65504.0)
    lo, hi = B.scale_range(128, "bfloat16")
    assert lo == 128 * 2.0**-127 and hi == (2 - 2.0**-7) * 2.0**127  # bfloat16's largest finite value


@pytest.mark.parametrize("n", [16, 64, 128, 256])
def test_default_beta_at_the_ends_of_the_scale_range(n):
    # both ends, and scales that worked before the range existed (muP's 1/D at D = 256, 0.001), give
    # a converged optimum near the paper's β with finite, nonzero entries of M
    for scale in (*B.scale_range(n), 1 / 256, 1e-3):
        b = B.default_beta(n, scale)
        assert 0.9 < b < 1.0
        diag, off = B.shift_entries(b, n, "float16", scale)
        assert np.isfinite(diag) and off < 0.0
        assert B.practical_invariance(b, n, "float16", scale) == pytest.approx(B.ideal_invariance(b), rel=1e-9)


@pytest.mark.parametrize("scale", [1e6, 65505.0, 4.8e-4, 3e-5, 1e-6])
def test_scale_outside_the_range_names_scale(scale):
    # Unchecked, the fixed-point iteration fails on its own terms: 1e6 with "beta must be in [0, 1),
    # got nan" (M's diagonal rounds to Inf), tiny scales with a negative beta or a singular M.
    match = r"^scale must be in \[0\.000488281, 65504\] .* got " + re.escape(repr(scale))
    for call in (lambda: B.default_beta(128, scale), lambda: B.optimal_beta(0.9, 128, "float16", scale),
                 lambda: B.shift_entries(0.9, 128, "float16", scale),
                 lambda: B.practical_invariance(0.9, 128, "float16", scale),
                 lambda: B.invariance_table(128, "float16", scale)):
        with pytest.raises(ValueError, match=match):
            call()


def test_scale_none_is_one_and_checked_for_the_block_length():
    assert B.default_beta(128, None) == B.default_beta(128, 1.0)
    with pytest.raises(ValueError, match=r"got None \(None means 1\)"):
        B.default_beta(2**19)  # n·2⁻¹⁸ = 2 > 1


@pytest.mark.parametrize("bad", ["0.1", True, [0.1]])
def test_scale_of_the_wrong_type_raises_type_error(bad):
    with pytest.raises(TypeError, match="scale must be None or a real number"):
        B.shift_entries(0.9, 128, "float16", bad)


def test_beta_zero_is_allowed_and_trivial():
    assert B.ideal_invariance(0.0) == 0.0
    assert B.shift_entries(0.0, 128) == (1.0, 0.0)
    assert B.practical_invariance(0.0, 128) == 0.0
