"""``fp32_frame``: FP32 scores, FP16 P against a per-row frame, O and l summed from the same FP16 P.

Targets (issue: the fast default must keep ``pasa_rs``'s accuracy): relative RMSE against float64 at
most 3 × the fp32 allocation's on every draw and 1.5 × at the median, |lse − lse64| ≤ max(10 × fp32's,
1e-3), never NaN, Inf or a zero row where float64 attention has none. The frame's rules (moves up,
moves down, the merge of segments) each have a test that fails without them.
"""

from __future__ import annotations

import numpy as np
import pytest

from pasa_npu import accuracy, blockwise, golden, metrics
from pasa_npu.accuracy import Case
from pasa_npu.precision import get_allocation

torch = pytest.importorskip("torch")

from pasa_npu.backends import reference  # noqa: E402
from support import assert_within_fp32, far_peak, run_draws, sink_and_sea  # noqa: E402

# A drifting key level moves the frame up in every block; spread and resonance put scores at
# ±60 000 and ±75 000; the band skips blocks; decode is one row. The whole hard sweep runs in
# `pasa-npu accuracy` (docs/accuracy_hard).
HARD = [Case("resonance", 180, 34), Case("drift", 10, 1), Case("spread", 0, 60000), Case("band", 10, 1),
        Case("decode", 10, 1), Case("shift_overflow", -39000, 40000)]
SEEDS = 3


def test_hard_cases_within_the_targets_on_every_draw():
    assert_within_fp32(run_draws(HARD, SEEDS, ALLOCATION), ALLOCATION, worst=3, median=1.5)


#: One small shape per coverage class of the targets (the full sweep: `pasa-npu accuracy --hard-only`,
#: docs/accuracy_default): (case, query rows, keys), None for the case's own.
COVERAGE = [
    (Case("tail", 10, 1), 16, 300), (Case("d80", 10, 1), 16, 300), (Case("d256", 10, 1), 16, 300),
    (Case("gqa", 10, 1), 8, 300), (Case("causal", 10, 1), 64, 300), (Case("padding", 10, 1), 8, 300),
    (Case("decode", 10, 1), None, 1000), (Case("learnable_sink", 3, 1), 16, 300),
    (Case("scale_ties", 20000, 1), 32, 384), (Case("long_fall", 12, 1), 1, 8192),
    (Case("long_spread", 0, 60000), 1, 4096),
]
#: The allocation under test (set it to "pasa" or "fp16_fp32" to see these tests fail).
ALLOCATION = "fp32_frame"


@pytest.mark.parametrize("case, s1, s2", COVERAGE, ids=[c.dist for c, _, _ in COVERAGE])
def test_coverage_classes_within_the_targets(case, s1, s2):
    """Every draw finite, no zero row, RMSE ≤ 3 × fp32's (1 × where fp32's is 0) and lse within
    max(10 × fp32's, 1e-3); the median ratio ≤ 1.5."""
    assert_within_fp32(run_draws([case], SEEDS, ALLOCATION, s1=s1, s2=s2), ALLOCATION, worst=3, median=1.5)


def rising(rise, d=64, blocks=4, rows=3, seed=0):
    """Scaled scores ≈ N(0, 0.1) except block 3, whose scores lie ``rise`` higher (scale 1/8)."""
    rng = np.random.default_rng(seed)
    q = np.zeros((1, 1, rows, d))
    q[..., 0] = 8.0
    k = rng.standard_normal((1, 1, 128 * blocks, d)) * 0.01
    k[..., :, 0] = rng.standard_normal(128 * blocks) * 0.1
    k[..., 256:384, 0] += rise
    v = rng.standard_normal((1, 1, 128 * blocks, d))
    return (*(x.astype(np.float16) for x in (q, k, v)), 0.125)


@pytest.mark.parametrize("rise, moves", [(blockwise.FRAME_UP - 2, 1), (blockwise.FRAME_UP + 2, 2)])
def test_frame_moves_up_only_above_its_limit(rise, moves):
    """Block 1 sets every row's frame; block 3 moves it only where its scores rise more than
    FRAME_UP above the frame. Either way the result is as accurate as fp32's."""
    q, k, v, scale = rising(rise)
    stats = {}
    out, lse = golden.attention(q, k, v, precision="fp32_frame", scale=scale, stats=stats)
    assert stats["moved_row_blocks"] == moves * q.shape[2]
    ref, ref_lse = golden.reference(q, k, v, scale=scale)
    out32, _ = golden.attention(q, k, v, precision="fp32", scale=scale)
    assert metrics.rmse(out, ref) <= 1.5 * metrics.rmse(out32, ref)
    assert np.abs(lse - ref_lse).max() < 1e-3


def test_frame_moves_down_under_a_sea_of_small_weights(monkeypatch):
    """With the frame on a sink 12.47 above 131 072 near-equal keys, the sea's P are FP16 subnormals
    (e^-12.47 ≈ 64.5 steps of 2^-24) that all round alike, while the sea carries a third of the weight;
    after FRAME_DOWN_BLOCKS blocks far below, the frame moves down to the sea. Without that move
    the output is measurably less accurate. (fp32, whose l sums FP32 P while P·V takes FP16 P, is
    worse still on this input.)"""
    q, k, v, scale = sink_and_sea(12.47, keys=131072)
    ref, _ = golden.reference(q, k, v, scale=scale)
    err32 = metrics.rmse(golden.attention(q, k, v, precision="fp32", scale=scale)[0], ref)
    stats = {}
    out, _ = golden.attention(q, k, v, precision="fp32_frame", scale=scale, stats=stats)
    assert stats["moved_row_blocks"] == 2 * q.shape[2]  # block 1, then once down
    err = metrics.rmse(out, ref)
    assert err <= err32
    monkeypatch.setattr(blockwise, "FRAME_DOWN_BLOCKS", 10**9)
    stuck, _ = golden.attention(q, k, v, precision="fp32_frame", scale=scale)
    assert metrics.rmse(stuck, ref) > 1.5 * err


@pytest.mark.parametrize("scale", [2e4, 1e6, 1e-6])
def test_extreme_scales_finite_and_accurate(scale):
    """The frame is subtracted before the scale is applied, so no scale overflows the FP16 P."""
    rng = np.random.default_rng(3)
    q, k, v = (rng.standard_normal((1, 2, 40, 64)).astype(np.float16) for _ in range(3))
    k = np.concatenate([k, k], axis=2)
    v = np.concatenate([v, v[..., ::-1, :]], axis=2)
    ref, ref_lse = golden.reference(q, k, v, scale=scale)
    out, lse = golden.attention(q, k, v, precision="fp32_frame", scale=scale, block_kv=32)
    out32, lse32 = golden.attention(q, k, v, precision="fp32", scale=scale, block_kv=32)
    assert np.isfinite(out).all() and np.isfinite(lse).all()
    assert metrics.rmse(out, ref) <= 1.5 * max(metrics.rmse(out32, ref), 1e-4)
    assert np.abs(lse - ref_lse).max() <= max(10 * np.abs(lse32 - ref_lse).max(), 1e-3 * max(1.0, scale))


def test_a_tile_closes_its_running_sums_together():
    """The rows of a query tile share the cube's running sums, so a move in one row closes the
    segment of every row of its tile: with one row rising and the others not, the tile size changes
    the others' rounding (both ways accurate), and without any later move it changes no bit."""
    q, k, v, scale = rising(blockwise.FRAME_UP + 2, rows=4)
    q[..., 1:, 0] = 2.0  # rows 1-3 see a rise of a quarter: below the limit
    ref, _ = golden.reference(q, k, v, scale=scale)
    together = golden.attention(q, k, v, precision="fp32_frame", scale=scale, block_q=4)
    apart = golden.attention(q, k, v, precision="fp32_frame", scale=scale, block_q=1)
    np.testing.assert_array_equal(together[0][..., 0, :], apart[0][..., 0, :])
    for out, _ in (together, apart):
        assert metrics.rmse(out, ref) < 1e-3
    calm = rising(0.5, rows=4)
    a, b = (golden.attention(*calm[:3], precision="fp32_frame", scale=calm[3], block_q=bq) for bq in (4, 1))
    np.testing.assert_array_equal(a[0], b[0])
    np.testing.assert_array_equal(a[1], b[1])


def test_group_tile_closes_the_heads_of_a_group_together():
    """``group_tile`` makes the query heads of a KV group one tile (the kernel's packed decode): a move
    in one head then closes the others' segments; accuracy is the same either way."""
    q, k, v, scale = rising(blockwise.FRAME_UP + 2, rows=1)
    q = np.concatenate([q, q / 4], axis=1)  # head 1 rises by a quarter as much
    ops = golden.NumpyOps
    q32, k32, v32 = (x.astype(np.float32) for x in (q, k, v))
    alloc = get_allocation("fp32_frame")
    runs = [blockwise.grouped_attention(ops, q32, k32, v32, alloc=alloc, scale=scale, group_tile=g) for g in (False, True)]
    ref, _ = golden.reference(q, k, v, scale=scale)
    for out, _ in runs:
        assert metrics.rmse(out, ref) < 1e-3
    np.testing.assert_array_equal(runs[0][0][:, 0], runs[1][0][:, 0])  # the head that moved


@pytest.mark.parametrize("kind", ["tails_gqa_mask", "band"])
def test_reference_backend_bit_identical_to_golden(kind):
    rng = np.random.default_rng(21)
    q = rng.standard_normal((2, 4, 70, 48)).astype(np.float16)
    k = (rng.standard_normal((2, 2, 300, 48)) * 3).astype(np.float16)
    v = rng.standard_normal((2, 2, 300, 48)).astype(np.float16)
    mask = rng.random((2, 4, 70, 300)) < 0.3 if kind == "tails_gqa_mask" else None
    band = (-100, 20) if kind == "band" else None
    kw = dict(precision="fp32_frame", scale=0.3, block_q=32, block_kv=64)
    want = golden.attention(q, k, v, mask=mask, band=band, **kw)
    got = reference.attention(*(torch.from_numpy(x) for x in (q, k, v)), beta=None, block_q=32, block_kv=64,
                              precision="fp32_frame", scale=0.3,
                              mask=None if mask is None else torch.from_numpy(mask), band=band)
    np.testing.assert_array_equal(got[0].numpy(), want[0])
    np.testing.assert_array_equal(got[1].numpy(), want[1])


def test_frame_moves_down_at_most_drop_limit_below_the_row_maximum():
    """One key 200 (scaled) above a sea of others: the frame may move down to the sea only by
    FRAME_DROP_LIMIT below the row's maximum, once; moving again from the moved frame would scale the
    closed sums by e^60 per move and overflow FP32 (NaN output) after the second."""
    q, k, v, scale, block = far_peak()
    ref, ref_lse = golden.reference(q, k, v, scale=scale)
    stats = {}
    out, lse = golden.attention(q, k, v, precision="fp32_frame", scale=scale, block_kv=block, stats=stats)
    assert np.isfinite(out).all() and np.isfinite(lse).all()
    np.testing.assert_array_equal(out, golden.attention(q, k, v, precision="fp32", scale=scale, block_kv=block)[0])
    assert np.abs(lse - ref_lse).max() < 1e-6
    assert stats["moved_row_blocks"] == 2  # the first block, then one move down to the limit


def test_reference_backend_bit_identical_to_golden_through_moves_down_and_a_sink():
    """A falling key level moves frames down (the limit from the row's maximum included) and up; a sink
    joins at the end: the reference backend follows golden bit for bit."""
    q, k, v, call = accuracy.draw_hard(Case("long_fall", 150, 1), np.random.default_rng(5), s1=3, s2=1024)
    q = np.concatenate([q, -q], axis=1)  # head 1's scores rise
    sink = np.array([1.5, -3.0], np.float32)
    kw = dict(precision="fp32_frame", scale=call["scale"], block_q=2, block_kv=16)
    stats = {}
    want = golden.attention(q, k, v, sink=sink, stats=stats, **kw)
    assert stats["moved_row_blocks"] > 2 * q.shape[2] * 2  # moves beyond each row's first block
    got = reference.attention(*(torch.from_numpy(x.astype(np.float16)) for x in (q, k, v)), beta=None, mask=None,
                              sink=torch.from_numpy(sink), **kw)
    np.testing.assert_array_equal(got[0].numpy(), want[0])
    np.testing.assert_array_equal(got[1].numpy(), want[1])
