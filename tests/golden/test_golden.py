"""The NumPy golden model (pasa_npu.golden) against exact float64 attention, and its properties.

Every expected value is either float64 math done here (or golden.reference, which is plain
float64 softmax attention), or a property: GQA = repeated K/V, block_q independence, shift
invariance, overflow where FP16 must overflow. Inputs are fresh seeded random arrays, rounded to
FP16 before the float64 reference sees them, so only the emulated arithmetic is measured.

Error bounds (relative RMSE of eq. 19 over the whole output, and max |lse − lse64|):

* fp32: the roundings beyond FP32 are the final FP16 output (relative rms 2⁻¹¹/√3 ≈ 2.8e-4) and
  P fed to P·V in FP16 (2⁻¹² per weight, averaging out over the keys): bound 1e-3. lse in FP32: 2e-5 absolute (FP32 log/sum of ~10 terms, |lse| < 10).
* fp16_fp32: + S rounded to FP16, |δs| ≤ scale·ulp16(|S|)/2 ≈ 2⁻¹²·|s| (rms ~3e-4 relative
  effect on the output): bound 2e-3. lse is 1-Lipschitz in max-norm of the scores, and l is FP32,
  so |δlse| ≤ max_j scale·ulp16(|S_j|)/2 (+ FP32 slack): computed per row here, a proved bound.
* fp16: + P, l, O in FP16 (a few FP16 unit roundoffs u = 2⁻¹¹ ≈ 4.9e-4 each): bound 3e-3. lse: the
  S bound above + 16·u (the FP16 tree sum of l has depth ≤ 7 per block, plus block merges and the
  FP16 rounding of exp's argument).
* pasa_fp32: S' is rounded in FP16 like S, but the block means of S' enter through the recovery
  coefficient I = β/(1−β) ≈ 64; their rounding errors average down by √n over the block, so the
  error is ≈ I/√128 ≈ 5.7× that of fp16_fp32: bound 1e-2 (measured ≤ 3e-3).
* pasa: pasa_fp32 plus FP16 state and an FP16 tree sum for the mean: bound 1.5e-2 (measured ≤ 4.5e-3).
* pasa_rs: S' in FP16 like fp16_fp32, but around a per-row shift near the row max (the reshift
  keeps the block max within 2 of it where it matters), the rest FP32: fp16_fp32's bound 2e-3.
  lse: 1e-3 (the package's target max(10 × fp32's, 1e-3)).
  lse of both PASA allocations adds I·F, F's rounding amplified by I ≈ 64: bound 5e-2 absolute
  (measured ≤ 1.2e-2; ≈ 4× margin).
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from pasa_npu import beta as beta_mod
from pasa_npu import golden, metrics
from pasa_npu.precision import ALLOCATIONS, PRECISIONS

RMSE_BOUND = {"fp32": 1e-3, "fp32_frame": 1e-3, "fp16_fp32": 2e-3, "fp16": 3e-3, "pasa_fp32": 1e-2, "pasa": 1.5e-2, "pasa_rs": 2e-3}
U16 = 2.0**-11
FP16_MAX = 65504.0


def f16(x):
    """Round to FP16 and hand back float64 (so the reference sees exactly the emulated inputs)."""
    return np.asarray(x).astype(np.float16).astype(np.float64)


def rand_qkv(rng, b, n, nkv, s1, s2, d, mean=0.0):
    q = f16(rng.standard_normal((b, n, s1, d)) + mean)
    k = f16(rng.standard_normal((b, nkv, s2, d)) + mean)
    v = f16(rng.standard_normal((b, nkv, s2, d)) + mean)
    return q, k, v


def ulp16(x):
    """Spacing of FP16 numbers at |x| (normal range; subnormal spacing below 2⁻¹⁴)."""
    ax = np.maximum(np.abs(x), 2.0**-14)
    return 2.0 ** (np.floor(np.log2(ax)) - 10)


def s_rounding_bound(q, k, scale, mask):
    """Per row: max over unmasked keys of scale·ulp16(|S|)/2, S = Q·Kᵀ in float64."""
    g = q.shape[1] // k.shape[1]
    s = np.matmul(q, np.swapaxes(np.repeat(k, g, axis=1), -1, -2))
    err = scale * ulp16(s) / 2
    if mask is not None:
        err = np.where(np.broadcast_to(mask, err.shape), 0.0, err)
    return err.max(axis=-1)


def lse_bound(precision, q, k, scale, mask, s2, block_kv):
    if precision == "fp32":
        return 2e-5
    sb = s_rounding_bound(q, k, scale, mask) + 2e-5
    if precision == "fp16_fp32":
        return sb
    if precision == "fp16":
        return sb + 16 * U16
    if precision == "pasa_rs":
        return 1e-3  # the package's target: max(10 × fp32's, 1e-3); measured ≤ 2e-4 here
    return 5e-2


# (B, N, Nkv, S1, S2, D, mask kind): tails everywhere, S2 < block, GQA, MQA, decode, masks
CASES = {
    "tails": (1, 2, 2, 37, 200, 64, None),
    "s2_lt_block": (2, 2, 2, 19, 50, 64, None),
    "gqa": (1, 4, 2, 33, 160, 64, "random"),
    "mqa": (2, 4, 1, 17, 129, 32, None),
    "causal": (1, 2, 1, 70, 150, 64, "causal"),
    "decode": (3, 4, 2, 1, 300, 128, None),
    "d128_multi": (1, 2, 2, 40, 384, 128, "random"),
}


def make_mask(kind, rng, b, n, s1, s2):
    if kind is None:
        return None
    if kind == "causal":
        return golden.causal_mask(s1, s2)
    m = rng.random((b, n, s1, s2)) < 0.3
    m[..., 0] = False  # no fully masked rows here (they have their own test)
    return m


def test_float64_reference_is_softmax_attention():
    """The oracle itself, against a per-row loop written here: query head h reads KV head
    h // (N/Nkv), masked keys get weight 0, lse = log Σ exp(scale·q·k)."""
    rng = np.random.default_rng(99)
    b, n, nkv, s1, s2, d = 2, 4, 2, 3, 7, 5
    q = rng.standard_normal((b, n, s1, d))
    k = rng.standard_normal((b, nkv, s2, d))
    v = rng.standard_normal((b, nkv, s2, d))
    mask = rng.random((b, n, s1, s2)) < 0.3
    mask[1, 2, 0] = True
    out, lse = golden.reference(q, k, v, scale=0.4, mask=mask)
    for bi in range(b):
        for h in range(n):
            kv = h // (n // nkv)
            for i in range(s1):
                keep = [j for j in range(s2) if not mask[bi, h, i, j]]
                if not keep:
                    assert (out[bi, h, i] == 0).all() and lse[bi, h, i] == -np.inf
                    continue
                sc = [0.4 * math.fsum(q[bi, h, i] * k[bi, kv, j]) for j in keep]
                w = [math.exp(x) for x in sc]
                z = math.fsum(w)
                o = sum(wj * v[bi, kv, j] for wj, j in zip(w, keep)) / z
                np.testing.assert_allclose(out[bi, h, i], o, rtol=1e-12, atol=1e-14)
                assert lse[bi, h, i] == pytest.approx(math.log(z), rel=1e-12)


@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("case", list(CASES))
def test_accuracy_vs_float64(precision, case):
    b, n, nkv, s1, s2, d, mkind = CASES[case]
    rng = np.random.default_rng(100 + list(CASES).index(case))
    q, k, v = rand_qkv(rng, b, n, nkv, s1, s2, d)
    mask = make_mask(mkind, rng, b, n, s1, s2)
    scale = 1 / math.sqrt(d)
    ref_o, ref_l = golden.reference(q, k, v, scale=scale, mask=mask)
    out, lse = golden.attention(q, k, v, precision=precision, scale=scale, mask=mask)
    assert out.dtype == np.float16 and out.shape == (b, n, s1, d)
    assert lse.dtype == np.float32 and lse.shape == (b, n, s1)
    assert np.isfinite(out).all() and np.isfinite(lse).all()
    assert metrics.rmse(out, ref_o) < RMSE_BOUND[precision]
    err = np.abs(lse.astype(np.float64) - ref_l)
    assert (err <= lse_bound(precision, q, k, scale, mask, s2, 128)).all(), err.max()


def test_causal_flag_is_the_top_left_causal_band():
    """causal=True is the band (None, 0) (query i sees keys 0..i), intersected with a band given with it;
    in exact attention it equals the causal mask built here."""
    rng = np.random.default_rng(11)
    q, k, v = rand_qkv(rng, 1, 2, 2, 20, 45, 32)
    for p in PRECISIONS:
        kw = dict(precision=p, scale=0.2, block_q=8, block_kv=16)
        a = golden.attention(q, k, v, causal=True, **kw)
        bb = golden.attention(q, k, v, band=(None, 0), **kw)
        np.testing.assert_array_equal(a[0], bb[0])
        np.testing.assert_array_equal(a[1], bb[1])
        c = golden.attention(q, k, v, causal=True, band=(-5, 3), **kw)
        d = golden.attention(q, k, v, band=(-5, 0), **kw)
        np.testing.assert_array_equal(c[0], d[0])
        np.testing.assert_array_equal(c[1], d[1])
    m = np.triu(np.ones((20, 45), bool), 1)
    np.testing.assert_array_equal(golden.reference(q, k, v, scale=0.2, causal=True)[0],
                                  golden.reference(q, k, v, scale=0.2, mask=m)[0])


@pytest.mark.parametrize("precision", PRECISIONS)
def test_fully_masked_rows(precision):
    rng = np.random.default_rng(12)
    b, n, s1, s2, d = 1, 2, 9, 140, 32
    q, k, v = rand_qkv(rng, b, n, n, s1, s2, d)
    mask = rng.random((b, n, s1, s2)) < 0.5
    mask[0, 0, 3] = True
    mask[0, 1, [0, 8]] = True
    mask[0, 0, 5] = False
    out, lse = golden.attention(q, k, v, precision=precision, scale=0.25, mask=mask, block_kv=64)
    empty = mask.all(-1)
    assert empty.sum() == 3
    assert (out[empty] == 0).all()
    assert np.isneginf(lse[empty]).all()
    assert np.isfinite(out[~empty]).all() and np.isfinite(lse[~empty]).all()
    ref_o, ref_l = golden.reference(q, k, v, scale=0.25, mask=mask)
    assert metrics.rmse(out[~empty], ref_o[~empty]) < RMSE_BOUND[precision]
    # a fully masked first block (every row masks keys 0..63) must not poison later blocks
    m2 = np.zeros((s1, s2), bool)
    m2[:, :64] = True
    out2, lse2 = golden.attention(q, k, v, precision=precision, scale=0.25, mask=m2, block_kv=64)
    r2o, r2l = golden.reference(q, k, v, scale=0.25, mask=m2)
    assert np.isfinite(out2).all()
    assert metrics.rmse(out2, r2o) < RMSE_BOUND[precision]


# ---------------------------------------------------------------------------------------------
# Structural properties: bit-for-bit


@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("nkv", [1, 2])
def test_gqa_equals_repeated_kv(precision, nkv):
    rng = np.random.default_rng(13 + nkv)
    b, n, s1, s2, d = 2, 4, 21, 150, 32
    q, k, v = rand_qkv(rng, b, n, nkv, s1, s2, d)
    mask = rng.random((b, n, s1, s2)) < 0.2  # a per-head mask
    g = n // nkv
    kr, vr = np.repeat(k, g, axis=1), np.repeat(v, g, axis=1)
    for m in (None, mask):
        o1, l1 = golden.attention(q, k, v, precision=precision, scale=0.17, mask=m, block_kv=64)
        o2, l2 = golden.attention(q, kr, vr, precision=precision, scale=0.17, mask=m, block_kv=64)
        np.testing.assert_array_equal(o1, o2)
        np.testing.assert_array_equal(l1, l2)


@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("band", [(-40, 5), (None, 0), (None, 230 - 70)], ids=["window", "causal", "causal_bottom"])
def test_band_tiles_visit_only_the_blocks_the_band_shows(precision, band):
    """A band decides which KV blocks a tile of block_q rows visits: each tile's rows come out bit for bit
    as a call on those rows alone against the keys of the blocks the band keeps some key of for the tile
    (found key by key here), with the band as a plain mask. So PASA's F, and pasa_rs's block 1 and shift
    lag, start at the tile's first visited block. FlashAttention's allocations give the same bits as the
    band as a mask on every block (a hidden block leaves their state unchanged)."""
    rng = np.random.default_rng(16)
    s1, s2, bq, bkv = 70, 230, 16, 32
    q, k, v = rand_qkv(rng, 1, 2, 1, s1, s2, 32, mean=2.0)
    lo, hi = band
    rel = np.arange(s2)[None, :] - np.arange(s1)[:, None]
    hidden = (rel > hi) | (False if lo is None else rel < lo)
    out, lse = golden.attention(q, k, v, precision=precision, scale=0.2, band=band, block_q=bq, block_kv=bkv)
    for r0 in range(0, s1, bq):
        r1 = min(r0 + bq, s1)
        live = np.flatnonzero(~hidden[r0:r1].all(axis=0))
        c0, c1 = live[0] // bkv * bkv, min(-(-(live[-1] + 1) // bkv) * bkv, s2)
        o, l = golden.attention(q[:, :, r0:r1], k[:, :, c0:c1], v[:, :, c0:c1], precision=precision, scale=0.2,
                                mask=hidden[r0:r1, c0:c1], block_q=bq, block_kv=bkv)
        np.testing.assert_array_equal(out[:, :, r0:r1], o)
        np.testing.assert_array_equal(lse[:, :, r0:r1], l)
    every = golden.attention(q, k, v, precision=precision, scale=0.2, mask=hidden, block_q=bq, block_kv=bkv)
    if not (ALLOCATIONS[precision].shifted or ALLOCATIONS[precision].row_shifted):
        np.testing.assert_array_equal(out, every[0])
        np.testing.assert_array_equal(lse, every[1])
    ref, ref_lse = golden.reference(q, k, v, scale=0.2, band=band)
    np.testing.assert_array_equal(ref, golden.reference(q, k, v, scale=0.2, mask=hidden)[0])
    assert metrics.rmse(out, ref) < RMSE_BOUND[precision]


@pytest.mark.parametrize("precision", [p for p in PRECISIONS if not ALLOCATIONS[p].framed])
def test_block_q_does_not_change_any_bit(precision):
    """Without a band rows are independent: the query tile changes no rounding. (``fp32_frame``'s
    tile closes its running sums together: tests/golden/test_fp32_frame.py.)"""
    rng = np.random.default_rng(14)
    q, k, v = rand_qkv(rng, 1, 4, 2, 45, 170, 32)
    mask = rng.random((1, 4, 45, 170)) < 0.25
    base = golden.attention(q, k, v, precision=precision, scale=0.2, mask=mask, block_q=128)
    for bq in (1, 7, 16, 45):
        o, l = golden.attention(q, k, v, precision=precision, scale=0.2, mask=mask, block_q=bq)
        np.testing.assert_array_equal(o, base[0])
        np.testing.assert_array_equal(l, base[1])


@pytest.mark.parametrize("precision", PRECISIONS)
def test_block_kv_whole_vs_split_both_accurate(precision):
    rng = np.random.default_rng(15)
    s2 = 192
    q, k, v = rand_qkv(rng, 1, 2, 2, 24, s2, 64)
    ref_o, _ = golden.reference(q, k, v, scale=0.125)
    outs = {}
    for bkv in (s2, 128, 64, 50):
        o, l = golden.attention(q, k, v, precision=precision, scale=0.125, block_kv=bkv)
        assert metrics.rmse(o, ref_o) < RMSE_BOUND[precision], bkv
        outs[bkv] = o
    # the two splits differ only by rounding (P is rounded to FP16 relative to different maxima)
    for bkv in (128, 64, 50):
        assert metrics.rmse(outs[bkv], outs[s2]) < 2 * RMSE_BOUND[precision]


def test_invalid_arguments():
    rng = np.random.default_rng(16)
    q, k, v = rand_qkv(rng, 1, 2, 2, 4, 8, 16)
    with pytest.raises(ValueError):
        golden.attention(q, k, v, precision="bf16", scale=0.25)
    with pytest.raises(ValueError):
        golden.attention(q, k, v, precision="fp16", scale=0.25, block_kv=0)
    with pytest.raises(ValueError):
        golden.attention(q, k, v, precision="fp16", scale=0.25, block_q=-1)
    with pytest.raises(ValueError):
        golden.attention(q[:, :, :, :8], k, v, precision="fp16", scale=0.25)
    with pytest.raises(ValueError):  # 3 query heads on 2 KV heads
        golden.attention(q[:, :1].repeat(3, axis=1), k, v, precision="fp16", scale=0.25)
    with pytest.raises(TypeError):
        golden.attention(q, k, v, precision="fp16", scale=0.25, mask=np.zeros((4, 8)))
    with pytest.raises(ValueError):
        golden.attention(q, k, v, precision="fp16", scale=0.25, mask=np.zeros((4, 7), bool))


# ---------------------------------------------------------------------------------------------
# Overflow


def test_uniform_30_overflows_fp16_but_not_pasa():
    """The paper's Table 4 row 1 (uniform, x0 = 30, Am = 0.5, D = 128): q·k ≈ 128·900 = 115200 >
    65504, so every row of S has an Inf in FP16: FP16-S FlashAttention returns NaN in every row.
    PASA shifts K by its mean before the product and stays finite."""
    rng = np.random.default_rng(17)
    b, n, s1, s2, d = 1, 2, 48, 256, 128
    q, k, v = (f16(rng.uniform(29.5, 30.5, (b, n, s, d))) for s in (s1, s2, s2))
    scale = 1 / math.sqrt(d)
    # independent premise: every row has a score beyond FP16's range
    assert (np.matmul(q, np.swapaxes(k, -1, -2)).min(axis=-1) > FP16_MAX).all()
    ref_o, ref_l = golden.reference(q, k, v, scale=scale)
    for p in ("fp16", "fp16_fp32"):
        out, lse = golden.attention(q, k, v, precision=p, scale=scale)
        assert np.isnan(out).any(axis=-1).all()  # every output row
        assert metrics.nan_fraction(out) == 1.0
        assert math.isnan(metrics.rmse(out, ref_o))
    # Bounds in the paper's metric (V ≈ 30, so eq. 19 is dominated by the constant 30): fp32 is
    # limited by the FP16 output (2.8e-4 relative); PASA's block means are ≈ (1−β)·q·k̄·scale ≈ 156,
    # whose FP16 rounding (ulp 0.125) is amplified by I ≈ 64, so the block weights are coarse.
    bounds = {"fp32": 1e-3, "pasa_fp32": 5e-3, "pasa": 1e-2}
    for p, bound in bounds.items():
        out, lse = golden.attention(q, k, v, precision=p, scale=scale)
        assert np.isfinite(out).all() and np.isfinite(lse).all(), p
        assert metrics.rmse(out, ref_o) < bound, p
        # and relative to the variation of the exact output around 30 (a stricter view): a
        # constant-30 answer scores ≈ 1 here
        assert metrics.rmse(out - 30, ref_o - 30) < {"fp32": 0.1, "pasa_fp32": 0.4, "pasa": 0.9}[p], p
    # lse is ~1.0e4 here; relative error small in every finite allocation
    for p in ("fp32", "pasa_fp32", "pasa"):
        _, lse = golden.attention(q, k, v, precision=p, scale=scale)
        assert np.max(np.abs(lse - ref_l) / np.abs(ref_l)) < 5e-3, p


@pytest.mark.parametrize("precision", ["fp16_fp32", "fp16"])
def test_fp16_score_boundary_65504_vs_65520(precision):
    """q·k = 65504 (FP16's largest finite) stays finite; q·k = 65520 (the tie halfway to 65536,
    which rounds to even = 65536 = Inf) gives Inf, hence a NaN output row; 65519 rounds to 65504."""
    d = 16
    scale = 0.25
    rng = np.random.default_rng(18)
    k = f16(rng.standard_normal((1, 1, 20, d)) * 0.1)
    v = f16(rng.standard_normal((1, 1, 20, d)))
    k[0, 0, 0, :] = 0.0
    k[0, 0, 0, 0] = 255.875  # exact in FP16 (ulp 1/8 in [128, 256))
    k[0, 0, 0, 1] = 1.0
    q = np.zeros((1, 1, 4, d))
    q[0, 0, :, 0] = 256.0
    q[0, 0, :, 1] = [0.0, 15.0, 16.0, 0.0]  # q·k0 = 65504, 65519, 65520, (row 3: small q)
    q[0, 0, 3] = f16(rng.standard_normal(d) * 0.1)
    s = np.matmul(q, np.swapaxes(k, -1, -2))[0, 0]
    assert s[0, 0] == 65504.0 and s[1, 0] == 65519.0 and s[2, 0] == 65520.0
    assert np.float16(65504.0) == 65504.0 and np.float16(65519.0) == 65504.0
    with np.errstate(over="ignore"):
        assert np.isinf(np.float16(65520.0))
    out, lse = golden.attention(q, k, v, precision=precision, scale=scale)
    out = out.astype(np.float64)
    # rows 0 and 1: key 0 outscores every other key by ~16000 (scaled): the output is v0 exactly
    np.testing.assert_array_equal(out[0, 0, 0], v[0, 0, 0])
    np.testing.assert_array_equal(out[0, 0, 1], v[0, 0, 0])
    assert np.isnan(out[0, 0, 2]).all()  # Inf score → m = Inf, Inf − Inf = NaN
    assert np.isfinite(out[0, 0, 3]).all()
    ref_o, _ = golden.reference(q[:, :, 3:], k, v, scale=scale)
    assert metrics.rmse(out[:, :, 3:], ref_o) < RMSE_BOUND[precision]
    # the FP32-S allocation has no such boundary
    out32, _ = golden.attention(q, k, v, precision="fp32", scale=scale)
    assert np.isfinite(out32).all()
    np.testing.assert_array_equal(out32[0, 0, 2].astype(np.float64), v[0, 0, 0])


@pytest.mark.parametrize("precision", PRECISIONS)
def test_inf_in_k_is_not_hidden(precision):
    """An Inf in K: rows with q_i·Inf = +Inf must come out NaN (FA: m = Inf, Inf − Inf); in PASA the
    Inf spreads through K' = M·K to every key of its block with both signs, so every row whose q
    has a non-zero entry in that dimension is NaN. Rows with q_i·Inf = −Inf merely mask that key in
    exact arithmetic too (float64 reference), and the FA allocations agree."""
    rng = np.random.default_rng(19)
    q, k, v = rand_qkv(rng, 1, 1, 1, 12, 100, 16)
    k[0, 0, 41, 3] = np.inf
    q[0, 0, 0, 3] = 0.0
    out, _ = golden.attention(q, k, v, precision=precision, scale=0.25, block_kv=64)
    pos = q[0, 0, :, 3] > 0
    neg = q[0, 0, :, 3] < 0
    assert pos.any() and neg.any()
    assert np.isnan(out[0, 0, pos]).all()
    if precision in ("pasa", "pasa_fp32"):
        assert np.isnan(out[0, 0, neg]).all()
    else:
        with np.errstate(invalid="ignore"):
            ref_o, _ = golden.reference(q[:, :, neg], k, v, scale=0.25)
        assert np.isfinite(out[0, 0, neg]).all()
        assert metrics.rmse(out[:, :, neg], ref_o) < RMSE_BOUND[precision]
    # an input beyond FP16's range becomes Inf on conversion, with the same result
    k2 = k.copy()
    k2[0, 0, 41, 3] = 1e5
    out2, _ = golden.attention(q, k2, v, precision=precision, scale=0.25, block_kv=64)
    np.testing.assert_array_equal(np.isnan(out2), np.isnan(out))


def test_nan_in_v_propagates():
    """A NaN in V reaches every row through P·V, even a row that masks that key (0·NaN = NaN on
    the matrix unit, and in the float64 reference); the other columns stay finite."""
    rng = np.random.default_rng(20)
    q, k, v = rand_qkv(rng, 1, 1, 1, 6, 40, 16)
    v[0, 0, 7, 2] = np.nan
    mask = np.zeros((6, 40), bool)
    mask[3, 7] = True
    with np.errstate(invalid="ignore"):
        ref_o, _ = golden.reference(q, k, v, scale=0.25, mask=mask)
    for p in PRECISIONS:
        out, _ = golden.attention(q, k, v, precision=p, scale=0.25, mask=mask)
        np.testing.assert_array_equal(np.isnan(out), np.isnan(ref_o))
        assert np.isnan(out[..., 2]).all() and np.isfinite(np.delete(out, 2, axis=-1)).all(), p


# ---------------------------------------------------------------------------------------------
# PASA: shift invariance and β = 0


def test_exact_attention_is_invariant_to_a_common_key_shift():
    rng = np.random.default_rng(21)
    q = rng.standard_normal((1, 2, 8, 32))
    k = rng.standard_normal((1, 2, 50, 32))
    v = rng.standard_normal((1, 2, 50, 32))
    c = 7.0 * rng.standard_normal(32)
    o1, l1 = golden.reference(q, k, v, scale=0.2)
    o2, l2 = golden.reference(q, k + c, v, scale=0.2)
    np.testing.assert_allclose(o2, o1, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(l2, l1 + 0.2 * (q @ c), rtol=1e-12)


@pytest.mark.parametrize("qmean, c0, pasa_bound", [(0.0, 1024.0, 1e-2), (1.0, 1024.0, 5e-2)])
def test_pasa_removes_key_bias_single_block(qmean, c0, pasa_bound):
    """k + c with c = c0·1: the bias q·c is a per-row constant. FP16 FA rounds |S| ≈ 1e4–1e5 to
    FP16 (ulp 8–64 before scaling) and degrades (qmean 0) or overflows (qmean 1: q·c ≈ 1.3e5).
    PASA subtracts β·mean(K) before the product: S' keeps only (1 − β_eff)·q·c·scale ≈ 15 (qmean 0)
    or ≈ 180 (qmean 1), whose FP16 rounding (ulp 1/64 resp. 1/8) bounds its error."""
    rng = np.random.default_rng(22)
    d, s2 = 128, 128
    q = f16(rng.standard_normal((1, 2, 64, d)) + qmean)
    k = f16(rng.standard_normal((1, 2, s2, d)) + c0)
    v = f16(rng.standard_normal((1, 2, s2, d)))
    scale = 1 / math.sqrt(d)
    ref_o, _ = golden.reference(q, k, v, scale=scale)
    for p in ("pasa", "pasa_fp32"):
        out, _ = golden.attention(q, k, v, precision=p, scale=scale)
        assert metrics.rmse(out, ref_o) < pasa_bound, p
    for p in ("fp16", "fp16_fp32"):
        out, _ = golden.attention(q, k, v, precision=p, scale=scale)
        if qmean:
            assert metrics.nan_fraction(out) == 1.0
        else:
            assert metrics.rmse(out, ref_o) > 0.1  # measured ≈ 0.2–0.3


def test_pasa_fp32_removes_key_bias_multi_block():
    """Several full KV blocks and a key bias c = 64: PASA with FP32 row state stays near its
    unbiased accuracy, FP16-S FA's error grows ~30×. (All-FP16 PASA does not: its FP16 block means
    carry the bias' rounding, amplified by the invariance β/(1−β) ≈ 64 when the mean is recovered.)"""
    rng = np.random.default_rng(23)
    d, s2 = 128, 384
    q = f16(rng.standard_normal((1, 2, 64, d)))
    k = rng.standard_normal((1, 2, s2, d))
    v = f16(rng.standard_normal((1, 2, s2, d)))
    scale = 1 / math.sqrt(d)
    errs = {}
    for c0 in (0.0, 64.0):
        kc = f16(k + c0)
        ref_o, _ = golden.reference(q, kc, v, scale=scale)
        for p in ("pasa_fp32", "fp16_fp32"):
            out, _ = golden.attention(q, kc, v, precision=p, scale=scale)
            errs[p, c0] = metrics.rmse(out, ref_o)
    assert errs["pasa_fp32", 64.0] < 1e-2
    assert errs["fp16_fp32", 64.0] > 10 * errs["fp16_fp32", 0.0]
    assert errs["pasa_fp32", 64.0] < errs["fp16_fp32", 64.0] / 2


@pytest.mark.parametrize("precision,s2,bias,block_kv,lse_tol", [
    ("pasa", 200, 4.0, 128, 5e-2), ("pasa_fp32", 200, 4.0, 128, 5e-2),  # a tail of 72 keys
    ("pasa", 200, 4.0, 100, 5e-2), ("pasa_fp32", 200, 4.0, 100, 5e-2),  # control: two full blocks
    # one short block (S2 < block_kv) with a large bias; with S2 = 128 (a full block) the lse error
    # is ≈ 0.04 (I times the rounding of F)
    ("pasa_fp32", 100, 256.0, 128, 0.2),
])
def test_pasa_tail_block_with_key_bias(precision, s2, bias, block_kv, lse_tol):
    """Keys with a common bias (k ~ N(bias, 1)): a tail block must be recovered as accurately as full
    blocks are. (A tail shifted by its own M(β/n_j) but recovered with the full block's I gave rmse
    ≈ 0.05–0.1 at a bias of 4, ≈ 0.6 at 64, and an lse off by ≈ 10 for one short block at 256.)"""
    rng = np.random.default_rng(24)
    d = 128
    q = f16(rng.standard_normal((1, 1, 16, d)))
    k = f16(rng.standard_normal((1, 1, s2, d)) + bias)
    v = f16(rng.standard_normal((1, 1, s2, d)))
    scale = 1 / math.sqrt(d)
    ref_o, ref_l = golden.reference(q, k, v, scale=scale)
    out, lse = golden.attention(q, k, v, precision=precision, scale=scale, block_kv=block_kv)
    assert metrics.rmse(out, ref_o) < RMSE_BOUND[precision]
    assert np.max(np.abs(lse - ref_l)) < lse_tol


def test_pasa_mean_does_not_overflow_when_scores_are_finite():
    rng = np.random.default_rng(26)
    d = 128
    q = f16(rng.standard_normal((1, 1, 4, d)) + 1.0)
    k = f16(rng.standard_normal((1, 1, 128, d)) + 4096.0)
    v = f16(rng.standard_normal((1, 1, 128, d)))
    scale = 1 / math.sqrt(d)
    # independent premise: the shifted scores S' = Q·(M·K)ᵀ themselves are far inside FP16's range
    b = beta_mod.default_beta(128, scale)
    diag, off = beta_mod.shift_entries(b, 128, "float16", scale)
    m = np.full((128, 128), off)
    np.fill_diagonal(m, diag)
    s_shift = f16(q[0, 0] @ f16(m @ k[0, 0]).T)
    assert np.abs(s_shift).max() < 2000
    assert (np.abs(s_shift.sum(-1)) > FP16_MAX).all()  # …but their row sums are not
    out, _ = golden.attention(q, k, v, precision="pasa", scale=scale)
    assert np.isfinite(out).all()


def test_pasa_beta_zero_uniform30_mean_does_not_overflow():
    rng = np.random.default_rng(30)
    qu, ku, vu = (f16(rng.uniform(29.5, 30.5, (1, 1, s, 128))) for s in (8, 128, 128))
    s_scaled = qu[0, 0] @ ku[0, 0].T / math.sqrt(128)
    assert s_scaled.max() < FP16_MAX / 4
    o, _ = golden.attention(qu, ku, vu, precision="pasa", scale=128**-0.5, beta=0.0)
    assert np.isfinite(o).all()


def test_pasa_beta_zero_is_flash_attention():
    """β = 0: M = scale·I, I = 0, no shift. With D = 64 the scale 1/8 is a power of two, so
    S' = fl16(Q·(K/8)ᵀ) equals FA's fl16(fl16(Q·Kᵀ)/8) and only the merge order differs: the
    output is close to FP16 FA's and as accurate."""
    rng = np.random.default_rng(27)
    q, k, v = rand_qkv(rng, 1, 2, 2, 30, 300, 64)
    ref_o, ref_l = golden.reference(q, k, v, scale=0.125)
    o_fa, l_fa = golden.attention(q, k, v, precision="fp16", scale=0.125)
    for p in ("pasa", "pasa_fp32"):
        o, l = golden.attention(q, k, v, precision=p, scale=0.125, beta=0.0)
        assert metrics.rmse(o, ref_o) < RMSE_BOUND["fp16"], p
        assert np.max(np.abs(l - ref_l)) < 1e-2, p
        assert metrics.rmse(o, o_fa) < 1e-3, p  # ≈ the FP16 state's own rounding noise
    # The scale is folded into M, so even without a shift PASA never forms the unscaled Q·Kᵀ: on
    # uniform-30 inputs (Q·Kᵀ ≈ 115200 > 65504, FA overflows) S' = Q·(K/√128)ᵀ ≈ 10180 is finite.
    rng = np.random.default_rng(28)
    qu, ku, vu = (f16(rng.uniform(29.5, 30.5, (1, 1, s, 128))) for s in (8, 128, 128))
    ru, _ = golden.reference(qu, ku, vu, scale=128**-0.5)
    o, _ = golden.attention(qu, ku, vu, precision="fp16", scale=128**-0.5)
    assert np.isnan(o).any(-1).all()
    for p in ("pasa", "pasa_fp32"):
        o, _ = golden.attention(qu, ku, vu, precision=p, scale=128**-0.5, beta=0.0)
        assert np.isfinite(o).all(), p
        assert metrics.rmse(o, ru) < 1e-2, p


def test_pasa_explicit_beta_changes_the_shift():
    """β is honoured: β = 0.9375 (I = 15, exact M) is a different computation than the default, and
    both are accurate on unbiased inputs."""
    rng = np.random.default_rng(29)
    q, k, v = rand_qkv(rng, 1, 2, 2, 16, 256, 64)
    ref_o, _ = golden.reference(q, k, v, scale=0.125)
    o_def, _ = golden.attention(q, k, v, precision="pasa", scale=0.125)
    o_b, _ = golden.attention(q, k, v, precision="pasa", scale=0.125, beta=0.9375)
    o_bd, _ = golden.attention(q, k, v, precision="pasa", scale=0.125, beta=beta_mod.default_beta(128, 0.125))
    np.testing.assert_array_equal(o_def, o_bd)
    assert not np.array_equal(o_def, o_b)
    assert metrics.rmse(o_b, ref_o) < RMSE_BOUND["pasa"]
