"""The Triton kernel (backend ``triton``) on the CPU through Triton's interpreter, tiny shapes.

Triton decides at decoration time whether a kernel is interpreted, from ``TRITON_INTERPRET``, which
tests/conftest.py sets for the whole session on machines without a GPU. On a GPU these cases are
skipped here and tests/backends/test_triton_gpu.py runs the compiled kernel, reusing
:func:`support.check_against_golden`.

What "right" means (the kernel cannot be bit-identical with the golden model: it accumulates in
another order, takes P relative to the merged maximum, skips fully masked blocks, splits decode;
for ``pasa_rs`` it also takes P as an FP32 exp rounded once to FP16 where the golden model rounds
S' − m', ρ·(S' − m') and exp to FP16 and sums l' in FP16): on every case, (1) the output's relative
RMSE against float64 attention is no worse than the golden model's by more than the allocation's
margin, (2) the output is close to the golden model's, (3) the lse is as accurate as the golden's,
and (4) rows with no key give out 0, lse −∞, identically.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

pytest.importorskip("triton")

from pasa_npu import interface  # noqa: E402
from support import check_against_golden, draw, interpreted, ref64, rel_rmse, shift_overflow  # noqa: E402


PRECISIONS = ("fp32", "pasa_fp32", "pasa", "pasa_rs", "fp32_frame")
#: (b, n, nkv, s1, s2, d, bias, mask kind, band, shift): tails in S1 and S2, GQA, decode (split-KV
#: and its merge), causal (blocks skipped), a dense mask with a fully masked row, and Q, K ~ N(30, 1)
#: whose scores (~5000·... ≈ 30·30·32/√32) are far from zero: FP16 S = Q·Kᵀ overflows there.
CASES = {
    "tails": (1, 2, 2, 20, 40, 32, 0.0, None, None, "prepass"),
    "gqa_decode": (2, 4, 2, 1, 50, 32, 0.0, None, None, "prepass"),
    "causal_fused": (1, 2, 1, 40, 40, 16, 0.0, None, (None, 0), "fused"),
    "band_mask": (1, 2, 1, 24, 40, 32, 0.0, "rows", (-9, 3), "prepass"),
    "biased": (1, 2, 1, 20, 70, 32, 30.0, None, None, "prepass"),
    # Whole KV blocks (S2 a multiple of every allocation's block, D a power of two): the kernel's unmasked path.
    "whole_blocks": (1, 4, 2, 24, 128, 32, 3.0, None, None, "prepass"),
    "whole_blocks_causal": (1, 2, 1, 40, 128, 32, 0.0, None, (None, 0), "prepass"),
}


@interpreted
@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("case", list(CASES))
def test_kernel_matches_golden_and_float64(precision, case):
    b, n, nkv, s1, s2, d, bias, mask_kind, band, shift = CASES[case]
    q, k, v = draw(b, n, nkv, s1, s2, d, bias=bias, seed=len(case) + 7 * len(precision))
    mask = None
    if mask_kind == "rows":
        gen = torch.Generator().manual_seed(3)
        mask = torch.rand(1, n, s1, s2, generator=gen) < 0.3
        mask[:, 0, 5, :] = True  # a row with no key: out 0, lse −∞
    check_against_golden(q, k, v, precision=precision, block_kv=16, mask=mask, band=band, shift=shift)


@pytest.mark.parametrize("s2, d, paged, precision, even", [
    (128, 32, False, "fp32_frame", True), (128, 32, False, "fp32", True), (120, 32, False, "fp32_frame", False),
    (128, 48, False, "fp32_frame", False), (256, 256, False, "fp32_frame", False), (128, 32, True, "fp32_frame", False),
    (128, 32, False, "pasa_rs", False)])
def test_kv_blocks_are_read_unmasked_only_where_every_block_is_whole(s2, d, paged, precision, even):
    """EVEN_KV (K and V read without a mask, scores without the tail's) exactly where a dense fp32 or fp32_frame
    call's KV blocks are all whole: S2 a multiple of the block and D a power of two up to 128; a paged call reads
    its batches' own lengths."""
    from pasa_npu.backends import triton as tb

    q = torch.zeros(1, 2, 8, d, dtype=torch.float16)
    k = torch.zeros(1, 2, s2, d, dtype=torch.float16)
    kw = dict(precision=precision, beta=None, block_kv=16, scale=1.0, mask=None)
    if paged:
        cache = k.reshape(s2 // 16, 2, 16, d).contiguous()  # (blocks, Nkv, page, D)
        table = torch.arange(s2 // 16, dtype=torch.int32)[None]
        info = torch.tensor([[8, s2, -8, s2, 0]], dtype=torch.int32)
        plan = tb.AttentionPlan(q, cache, cache, block_table=table, page=16, kv_info=info, **kw)
    else:
        plan = tb.AttentionPlan(q, k, k, **kw)
    assert plan._attend[0].constexprs["EVEN_KV"] is even


@interpreted
def test_pasa_is_finite_and_accurate_where_fp16_scores_overflow():
    q, k, v = draw(1, 1, 1, 16, 48, 64, bias=40.0, seed=5)  # Q·Kᵀ ≈ 64·1600 ≈ 1e5 > 65504
    assert torch.isinf((q.float() @ k.float().mT).half()).any()
    err_k, _ = check_against_golden(q, k, v, precision="pasa_fp32", block_kv=16)
    assert err_k < 0.05


#: pasa_rs only: (b, n, nkv, s1, s2, d, bias, band). "window" is a band whose later tiles skip the
#: first KV blocks, so their block 1 (the block computed twice, the frame of the row state and the
#: start of the lag-2 excess) is the first block they visit, not the sequence's first block.
RS_CASES = {
    "gqa_tails": (1, 4, 2, 20, 72, 32, 3.0, None),
    # 19 blocks, tiles starting at blocks 3 to 5: the pre-pass's frame terms of 8 blocks per product,
    # counted from each tile's first block.
    "many_blocks": (1, 2, 1, 40, 300, 32, 5.0, (60, 250)),
    "window": (1, 1, 1, 40, 80, 32, 10.0, (10, 30)),
    "decode_window": (2, 8, 2, 1, 90, 32, 10.0, (20, 80)),
}


@interpreted
@pytest.mark.parametrize("shift", ["prepass", "fused"])
@pytest.mark.parametrize("case", list(RS_CASES))
def test_pasa_rs_prepass_and_fused_centring(case, shift):
    """The centring pre-pass and the centring fused into the loop, on GQA, tails, biased keys, a
    skipped-block window and a split decode with a band (some splits see no key of some rows)."""
    b, n, nkv, s1, s2, d, bias, band = RS_CASES[case]
    q, k, v = draw(b, n, nkv, s1, s2, d, bias=bias, seed=len(case))
    check_against_golden(q, k, v, precision="pasa_rs", block_kv=16, band=band, shift=shift)


@interpreted
@pytest.mark.filterwarnings("ignore:overflow encountered in cast")  # the FP16 S' that overflows, on purpose
@pytest.mark.parametrize("shift", ["prepass", "fused"])
def test_pasa_rs_safety_net_keeps_overflowing_rows_finite(shift):
    """Blocks 2 and 3 overflow FP16 S' for every row: the golden model recomputes those rows in FP32,
    and pasa_fp32 is NaN. The kernel takes FP32 S − ψ for those
    rows and stays finite. Its error is that of its FP32 accumulation of Q̂·K' ≈ 40 000 (u = 0: the
    block's signs mix), which the golden model makes exact: measured over 4 draws, 0.9-3× the golden
    model's RMSE and 1.0-1.21× the kernel's own fp32 FlashAttention's on the same accumulator."""
    from pasa_npu import golden
    from pasa_npu.backends import triton as tb

    q, k, v = shift_overflow()
    stats = {}
    g_out, g_lse = golden.attention(q.numpy(), k.numpy(), v.numpy(), precision="pasa_rs", scale=0.125,
                                    block_kv=16, stats=stats)
    assert stats["recomputed_row_blocks"] > 0
    p_out, _ = golden.attention(q.numpy(), k.numpy(), v.numpy(), precision="pasa_fp32", scale=0.125, block_kv=16)
    assert torch.isnan(torch.from_numpy(p_out)).all()
    out, lse = tb.attention(q, k, v, precision="pasa_rs", beta=None, block_q=128, block_kv=16, scale=0.125,
                            mask=None, shift=shift)
    f_out, _ = tb.attention(q, k, v, precision="fp32", beta=None, block_q=128, block_kv=16, scale=0.125, mask=None)
    r_out, r_lse = ref64(q, k, v, 0.125, None)
    assert torch.isfinite(out).all() and torch.isfinite(lse).all()
    err_k, err_f = rel_rmse(out, r_out), rel_rmse(f_out, r_out)
    assert err_k <= 1.3 * err_f and err_k < 1e-2, (err_k, err_f)
    # |lse| ≈ 40 000, where an FP32 ulp is 0.004.
    assert float((lse.double() - r_lse).abs().max()) < 0.02


def resonance(b=1, n=2, s1=32, s2=200, d=64, phase=180.0, amplitude=34.0, seed=0):
    """Q/K resonance (pasa_npu.accuracy's hard case, smaller): a cosine shared along D by Q and by K,
    whose keys sit at 40 ± amplitude·cos(θ + phase); at phase 180° the row maxima of most blocks
    land far from their lag-2 shift, so that pasa_rs reshifts them."""
    gen = torch.Generator().manual_seed(seed)
    theta = 2 * torch.pi * 3 * torch.arange(d) / d
    amp = lambda *shape: amplitude - 2 + 4 * torch.rand(*shape, 1, generator=gen)  # noqa: E731
    q = amp(b, n, s1) * torch.cos(theta) + torch.randn(b, n, s1, d, generator=gen)
    k = 40 + amp(b, n, s2) * torch.cos(theta + torch.pi * phase / 180) + torch.randn(b, n, s2, d, generator=gen)
    v = torch.randn(b, n, s2, d, generator=gen)
    return tuple(t.half() for t in (q, k, v))


@interpreted
@pytest.mark.parametrize("shift", ["prepass", "fused"])
def test_pasa_rs_reshift_on_resonance(shift):
    """Blocks the golden model reshifts (counted through its stats) are reshifted by the kernel too:
    it matches the golden model and float64 (measured: kernel/golden RMSE 1.13, both at the level of
    fp32 FlashAttention)."""
    from pasa_npu import golden

    q, k, v = resonance()
    stats = {}
    golden.attention(q.numpy(), k.numpy(), v.numpy(), precision="pasa_rs", scale=0.125, block_kv=32, stats=stats)
    assert stats["reshifted_row_blocks"] > 0
    check_against_golden(q, k, v, precision="pasa_rs", block_kv=32, shift=shift)


@interpreted
@pytest.mark.parametrize("shift", ["prepass", "fused"])
@pytest.mark.parametrize("scale", [32768.0, 1e6])
def test_pasa_rs_large_scale(scale, shift):
    """N(0, 1) inputs at a scale of 2·10⁴ and more, where Q̂ = Q·2^⌊log₂ scale⌋ overflowed FP16 (NaN output
    and lse): Q̂ is now never larger than Q and ρ carries the scale (blockwise.row_shift_constants); the
    kernel is finite and matches the golden model and float64 as on ordinary scales."""
    q, k, v = draw(1, 2, 2, 24, 150, 32, seed=5)
    check_against_golden(q, k, v, precision="pasa_rs", block_kv=32, shift=shift, scale=scale)


#: Scaled key levels of the KV blocks of :func:`staircase`: up by more than FRAME_UP (blocks 3, 5 and 19), and
#: more than FRAME_DOWN below the frame for FRAME_DOWN_BLOCKS blocks (7-14).
STAIRS = (0, 4, 15, 15, 32, 32, 20, 20, 20, 20, 20, 20, 20, 20, 20, 20, 20, 8, 40, 40)


def staircase(seed=0, n=2, s1=32, d=32, block_kv=16):
    """Scores exact in FP32 (entries multiples of 1/4, at most 4; scale 1/4), so that the kernel and the golden
    model take their decisions on the same S: Q·Kᵀ's first dimension carries block j's level STAIRS[j] (scaled)
    in the even query rows and a quarter of it in the odd ones, so that a tile's rows move at different blocks."""
    rng = np.random.default_rng(seed)
    q = rng.integers(-4, 5, (1, n, s1, d)) / 4
    k = rng.integers(-4, 5, (1, 1, block_kv * len(STAIRS), d)) / 4
    q[..., 0] = np.where(np.arange(s1) % 2 == 0, 4.0, 1.0)
    k[..., 0] = np.repeat(STAIRS, block_kv)
    v = rng.standard_normal(k.shape)
    return tuple(x.astype(np.float16) for x in (q, k, v))


@interpreted
def test_fp32_frame_is_the_golden_model_bit_for_bit_where_the_scores_are():
    """fp32_frame's frames move up, down and in some rows of a tile only; with scores exact in FP32 the kernel
    takes the golden model's decisions (its tile of 16 rows of one head, the interpreter's BLOCK_M), and its
    output is the golden model's bit for bit, lse within an ulp: the kernel's other differences (one running
    accumulator rescaled in place, P·V and P·1 in the tensor cores' order, the scale folded into the exp) did
    not show here. The same golden model without its move down, or without its moves up, differs from the
    kernel in a quarter and two thirds of the outputs."""
    from pasa_npu import blockwise, golden
    from pasa_npu.backends import triton as tb

    q, k, v = staircase()
    kw = dict(precision="fp32_frame", scale=0.25, block_q=16, block_kv=16)
    stats = {}
    want, want_lse = golden.attention(q, k, v, stats=stats, **kw)
    assert stats["moved_tile_blocks"] > 3 * stats["tile_blocks"] // len(STAIRS)  # moves after the first block
    out, lse = tb.attention(*(torch.from_numpy(x) for x in (q, k, v)), beta=None, mask=None, **kw)
    np.testing.assert_array_equal(out.numpy(), want)
    np.testing.assert_allclose(lse.numpy(), want_lse, rtol=2.0 ** -23, atol=0)
    for rule in ("FRAME_DOWN_BLOCKS", "FRAME_UP"):
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(blockwise, rule, 10**9)
            other, _ = golden.attention(q, k, v, **kw)
        assert (out.numpy() != other).mean() > 0.2, rule


@interpreted
def test_fp32_frame_moves_down_only_to_its_limit_below_the_row_maximum():
    """A key far above a sea of others: the kernel's frame moves down once, to FRAME_DROP_LIMIT below the
    row's maximum, as the golden model's; a move measured from the moved frame instead scales the closed sums
    by e^60 per move and overflows FP32 (NaN) after the second."""
    from pasa_npu import golden
    from pasa_npu.backends import triton as tb
    from support import far_peak

    q, k, v, scale, block_kv = far_peak(rows=16)
    kw = dict(precision="fp32_frame", scale=scale, block_q=16, block_kv=block_kv)
    want, want_lse = golden.attention(q, k, v, **kw)
    out, lse = tb.attention(*(torch.from_numpy(x) for x in (q, k, v)), beta=None, mask=None, **kw)
    assert torch.isfinite(out).all() and torch.isfinite(lse).all()
    np.testing.assert_array_equal(out.numpy(), want)
    np.testing.assert_allclose(lse.numpy(), want_lse, rtol=2.0 ** -23, atol=0)


def sea_below_a_sink(d: int, heads: int = 1, rows: int = 32, keys: int = 640, seed: int = 0):
    """Key 0 scores 261/16 ≈ 16.3 (scaled, scale 1/16) above a sea of equal keys and holds a zero value, so the
    output is the sea's values weighted by its P. Against the sink's frame a sea key's P = e^-16.3 is an FP16
    subnormal of 1.4 ulps, rounded to 1; fp32_frame moves the frame down to the sea after FRAME_DOWN_BLOCKS
    blocks below it: at key 512 with 64-key blocks, never in 640 keys with 128-key blocks, so the two blocks'
    outputs differ by a quarter. Scores exact in FP32; ``rows`` >= 2 kernel tiles, so the kernel does not split
    the keys (each split would set its own frames). (q, k, v) FP16 (1, heads, ·, d), and the scale."""
    rng = np.random.default_rng(seed)
    q = np.zeros((1, heads, rows, d))
    q[..., 0] = 1.0
    k = rng.integers(-4, 5, (1, heads, keys, d)) / 4
    k[..., 0] = -261.0
    k[..., 0, 0] = 0.0
    v = rng.standard_normal(k.shape) * 1000
    v[..., 0, :] = 0.0
    return (*(torch.from_numpy(x.astype(np.float16)) for x in (q, k, v)), 1 / 16)


@interpreted
@pytest.mark.parametrize("d, block", [(160, 64), (64, 128)])
def test_fp32_frame_default_block_on_the_kernel_is_64_keys_above_d128(d, block):
    """block_kv=None on the Triton backend: fp32_frame's block is 64 keys above D = 128, 128 up to it, and the
    kernel's output is the golden model's at that block, not at the other; an explicit block_kv is honoured."""
    from pasa_npu import golden

    q, k, v, scale = sea_below_a_sink(d)
    want = {n: torch.from_numpy(golden.attention(q.numpy(), k.numpy(), v.numpy(), precision="fp32_frame",
                                                 scale=scale, block_kv=n)[0]) for n in (64, 128)}
    assert rel_rmse(want[64], want[128]) > 0.1
    kw = dict(num_heads=1, input_layout="BNSD", scale=scale, backend="triton")
    out, _ = interface.fused_attention(q, k, v, **kw)
    other = 64 + 128 - block
    assert rel_rmse(out, want[block]) < 1e-3 and rel_rmse(out, want[other]) > 0.1
    if block == 64:
        out, _ = interface.fused_attention(q, k, v, block_kv=128, **kw)
        assert rel_rmse(out, want[128]) < 1e-3


@pytest.mark.parametrize("d", [64, 128, 256])
def test_fp32_frame_p1_takes_16_columns_where_they_cost_no_pipeline_stage(monkeypatch, d):
    """fp32_frame's P·1 is 16 columns wide (a wgmma that reads P where P·V does) wherever that keeps the tiles and
    pipeline stages fp32 takes on the H100, and 8 (Hopper's narrowest product) where 16 would cost a stage: at
    D = 128, where three stages of 128-key K and V tiles leave less than 4 KB of shared memory."""
    from pasa_npu.backends import triton as tb
    from pasa_npu.precision import get_allocation
    from pasa_npu.problem import default_block_kv

    monkeypatch.setattr(tb, "_INTERPRET", False)
    block = default_block_kv(get_allocation("fp32_frame"), d, "triton")
    fp32 = tb._config(d, False, block, 4096)
    framed = tb._config(d, True, block, 4096, framed=True)
    assert framed[:4] == fp32[:4]
    assert framed[4] == (8 if d == 128 else 16)


@interpreted
@pytest.mark.parametrize("precision, d, block", [("fp32_frame", 160, 64), ("fp32_frame", 128, 128),
                                                 ("pasa_rs", 160, 128)])
def test_every_form_takes_the_backends_default_block(monkeypatch, precision, d, block):
    """The default block reaches the kernel's plan in every form of a call: the first call, the repeated
    (planned) one, the .out form with its workspace, decode, PageAttention and TND with a block table; an
    explicit block_kv reaches it as given."""
    from pasa_npu.backends import triton as tb

    seen = []
    plan_init = tb.AttentionPlan.__init__

    def spy(self, *args, block_kv, **kw):
        seen.append(block_kv)
        plan_init(self, *args, block_kv=block_kv, **kw)

    monkeypatch.setattr(tb.AttentionPlan, "__init__", spy)
    q, k, v = draw(1, 2, 1, 3, 80, d, seed=2)
    kw = dict(num_heads=2, num_key_value_heads=1, input_layout="BNSD", scale=d ** -0.5, precision=precision,
              backend="triton", softmax_lse_flag=True)
    out, lse = interface.fused_attention(q, k, v, **kw)
    interface.fused_attention(q, k, v, **kw)  # planned
    ws = interface.fused_attention_workspace(q, k, v, **kw)
    interface.fused_attention_out(q, k, v, out=(torch.empty_like(out), torch.empty_like(lse)), workspace=ws, **kw)
    interface.fused_attention(q[:, :, :1], k, v, **kw)  # decode (split over the keys)
    page = 16
    kc, vc = (t[0].reshape(5, page, d) for t in (k, v))  # (blocks, page, Nkv·D), Nkv = 1
    table = torch.arange(5, dtype=torch.int32)[None]
    paged = dict(kw, block_table=table, block_size=page, actual_seq_lengths_kv=[80])
    interface.fused_attention(q.transpose(1, 2).reshape(1, 3, 2 * d), kc, vc, **dict(paged, input_layout="BSH"))
    interface.fused_attention(q[0].transpose(0, 1), kc, vc, actual_seq_lengths=[3], **dict(paged, input_layout="TND"))
    assert seen and set(seen) == {block}, seen
    seen.clear()
    interface.fused_attention(q, k, v, block_kv=32, **kw)
    assert seen == [32]


@interpreted
def test_fused_attention_routes_layouts_varlen_and_causal_to_the_kernel():
    """fused_attention(backend="triton") against the reference backend through the same front end:
    BSH layout, GQA, FIA's bottom-right causal mode (passed to the kernel as a band) and varlen."""
    q, k, v = draw(2, 4, 2, 24, 40, 16, seed=11)
    bsh = [t.transpose(1, 2).reshape(t.shape[0], t.shape[2], -1) for t in (q, k, v)]
    compressed = torch.triu(torch.ones(2048, 2048, dtype=torch.bool), diagonal=1)
    kw = dict(num_heads=4, num_key_value_heads=2, scale=0.25, input_layout="BSH", sparse_mode=3,
              atten_mask=compressed, actual_seq_lengths_kv=[40, 29], softmax_lse_flag=True,
              precision="pasa_fp32", block_kv=16)
    out, lse = interface.fused_attention(*bsh, backend="triton", **kw)
    ref, ref_lse = interface.fused_attention(*bsh, backend="reference", **kw)
    assert rel_rmse(out, ref) < 3e-3
    torch.testing.assert_close(lse, ref_lse, rtol=1e-4, atol=2e-3)


@interpreted
def test_user_mask_with_band_padding_and_varlen():
    """sparse_mode 0: a user mask larger than (S1, S2) (FIA's alignment padding, read through strides)
    combined with a pre/next-tokens band, per-batch query lengths; against the reference backend."""
    q, k, v = draw(2, 4, 2, 20, 40, 16, seed=3)
    mask = torch.rand(2, 1, 32, 48, generator=torch.Generator().manual_seed(4)) < 0.3
    kw = dict(num_heads=4, num_key_value_heads=2, input_layout="BNSD", atten_mask=mask, sparse_mode=0,
              pre_tokens=5, next_tokens=3, actual_seq_lengths=[20, 13], softmax_lse_flag=True,
              block_kv=16, scale=0.25, precision="pasa_fp32")
    out, lse = interface.fused_attention(q, k, v, backend="triton", **kw)
    ref, ref_lse = interface.fused_attention(q, k, v, backend="reference", **kw)
    assert rel_rmse(out, ref) < 3e-3
    torch.testing.assert_close(lse, ref_lse, rtol=1e-4, atol=2e-3)


@interpreted
def test_band_reaches_the_kernel_undensified(monkeypatch):
    from pasa_npu.backends import triton as tb

    seen = {}

    class Spy(tb.AttentionPlan):
        def __init__(self, *a, **kw):
            seen.update(mask=kw["mask"], band=kw.get("band"))
            super().__init__(*a, **kw)

    monkeypatch.setattr(tb, "AttentionPlan", Spy)
    q, k, v = draw(1, 2, 2, 20, 20, 16)
    interface.fused_attention(q, k, v, num_heads=2, input_layout="BNSD", sparse_mode=2, backend="triton",
                              atten_mask=torch.triu(torch.ones(2048, 2048, dtype=torch.bool), 1))
    assert seen == {"mask": None, "band": (None, 0)}


@interpreted
@pytest.mark.parametrize("kw, exc, match", [
    (dict(precision="fp16"), ValueError,
     r"precision 'fp16' is not computed by backend='triton' \(it computes \('fp32', 'pasa', 'pasa_fp32', 'pasa_rs', "
     r"'fp32_frame'\)\)"),
    (dict(precision="bf16"), ValueError, "precision must be one of"),
    (dict(block_kv=48), ValueError, r"block_kv must be one of \(16, 32, 64, 128, 256\)"),
    (dict(precision="pasa_rs", block_kv=48), ValueError, "block_kv must be one of"),
    (dict(precision="pasa_rs", scale=0.0), ValueError, "scale must be positive"),
    (dict(precision="fp32_frame", scale=-0.5), ValueError, "scale must be positive"),
    (dict(precision="fp32_frame", block_kv=48), ValueError, "block_kv must be one of"),
    (dict(shift="inline"), ValueError, r"shift must be one of \('prepass', 'fused'\)"),
    (dict(dtype=torch.float32), ValueError, "q must be a 4-D float16 tensor"),
])
def test_bad_arguments_are_refused(kw, exc, match):
    from pasa_npu.backends import triton as tb

    q, k, v = draw(1, 1, 1, 4, 4, 16)
    if "dtype" in kw:
        q = q.to(kw.pop("dtype"))
    args = dict(precision="pasa", beta=None, block_q=16, block_kv=16, scale=0.25, mask=None) | kw
    with pytest.raises(exc, match=match):
        tb.attention(q, k, v, **args)


@interpreted
def test_pasa_rs_frame_table_past_its_limit_runs_over_ranges_of_query_tiles(monkeypatch):
    """pasa_rs's pre-pass frame table grows as S1·S2: past its limit the kernel is launched over ranges of
    16 query tiles in turn (the longest rows first), each reusing a table of 16 tiles, with the same
    results bit for bit (the pre-pass at every length; the fused form it replaces was ~3x slower)."""
    from pasa_npu.backends import triton as tb

    q, k, v = draw(1, 4, 1, 80, 48, 32, bias=3.0, seed=9)  # 320 rows: 20 tiles of 16 in the interpreter
    kw = dict(precision="pasa_rs", beta=None, block_kv=16, scale=32 ** -0.5, mask=None, band=(None, 30))
    whole = tb.AttentionPlan(q, k, v, **kw)
    monkeypatch.setattr(tb, "_FRAME_LIMIT", 8)
    ranges = tb.AttentionPlan(q, k, v, **kw)
    assert [a.grid[0] for a in whole._attend] == [20] and [a.grid[0] for a in ranges._attend] == [4, 16]
    assert ranges._scratch < whole._scratch
    out, lse = ranges(q, k, v, None, None)
    ref, ref_lse = whole(q, k, v, None, None)
    assert torch.equal(out, ref) and torch.equal(lse, ref_lse)
