"""The Triton kernel on a CUDA GPU: golden model (the reference backend's loop, on the GPU) and float64
over shapes with tails, GQA, masks, decode and inputs that overflow FP16 FlashAttention; PageAttention
prefill against the dense kernel (bit for bit) and float64.

CI has no GPU: every case here is skipped there. On the GPU machine:
    PYTHONPATH=python python3 -m pytest -q tests/backends/test_triton_gpu.py
The criteria are test_triton_interpret.check_against_golden's (module docstring there).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

pytest.importorskip("triton")
if not torch.cuda.is_available():
    pytest.skip("needs a CUDA GPU (CI has none); run on the GPU machine: "
                "PYTHONPATH=python python3 -m pytest -q tests/backends/test_triton_gpu.py", allow_module_level=True)

from support import check_against_golden, draw, ref64, rel_rmse, shift_overflow  # noqa: E402

from pasa_npu import interface  # noqa: E402

PRECISIONS = ("fp32", "pasa_fp32", "pasa", "pasa_rs", "fp32_frame")
#: (b, n, nkv, s1, s2, d, bias, mask, band, block_kv)
CASES = {
    "tails_d64": (1, 4, 4, 300, 520, 64, 0.0, None, None, 128),
    "gqa_d128": (2, 8, 2, 257, 1000, 128, 0.0, None, None, 128),
    "gqa7_d128": (1, 7, 1, 130, 700, 128, 0.0, None, None, 128),  # a tile spans two heads
    "d256": (1, 2, 2, 200, 300, 256, 0.0, None, None, 128),
    "d256_block64": (1, 4, 2, 300, 700, 256, 0.0, None, (None, 0), 64),  # fp32_frame's default block there
    "d96_block64": (1, 2, 1, 100, 333, 96, 0.0, None, None, 64),
    "causal": (1, 4, 2, 700, 700, 128, 0.0, None, (None, 0), 128),
    "band_bottom_right": (1, 2, 2, 300, 900, 64, 0.0, None, (600 - 64, 600 + 32), 128),
    "dense_mask": (2, 4, 4, 150, 400, 64, 0.0, "random", None, 128),
    "decode_mha": (2, 16, 16, 1, 4100, 128, 0.0, None, None, 128),
    "decode_gqa": (2, 28, 4, 1, 3000, 128, 0.0, None, None, 128),
    "decode_d256": (1, 4, 2, 1, 700, 256, 0.0, None, None, 128),
    "short_d256": (1, 2, 1, 30, 500, 256, 0.0, None, None, 128),  # one 64-row tile per KV head
    "biased30": (1, 4, 1, 256, 1024, 128, 30.0, None, None, 128),
    "biased30_causal": (1, 4, 4, 512, 512, 64, 30.0, None, (None, 0), 128),
    # Whole KV blocks (fp32 and fp32_frame read them unmasked): split-KV decode, and a user mask.
    "whole_blocks_decode": (2, 16, 4, 1, 4096, 128, 0.0, None, None, 128),
    "whole_blocks_mask": (1, 4, 4, 150, 512, 64, 0.0, "random", None, 128),
}


@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("case", list(CASES))
def test_kernel_matches_golden_and_float64(case, precision):
    b, n, nkv, s1, s2, d, bias, mask_kind, band, block_kv = CASES[case]
    q, k, v = draw(b, n, nkv, s1, s2, d, bias=bias, seed=list(CASES).index(case), device="cuda")
    mask = None
    if mask_kind == "random":
        mask = torch.rand(b, 1, s1, s2, device="cuda") < 0.5
        mask[0, 0, 7] = True  # a row with no key
    both = case == "tails_d64" or (precision == "pasa_rs" and case.startswith(("decode", "band")))
    for shift in ("prepass", "fused") if both else ("prepass",):
        check_against_golden(q, k, v, precision=precision, block_kv=block_kv, mask=mask, band=band, shift=shift)


def test_overflowing_input_pasa_finite_fp16_scores_not():
    """Q, K ~ N(30, 1), d = 128: FP16 Q·Kᵀ ≈ 115 000 overflows; PASA stays finite and accurate, and
    row-shifted PASA within a few times FP32 FlashAttention's error."""
    q, k, v = draw(1, 8, 8, 1024, 2048, 128, bias=30.0, seed=4, device="cuda")
    assert torch.isinf(q[0, 0, :64] @ k[0, 0, :64].mT).any()  # FP16 scores overflow
    for precision, bound in (("pasa_fp32", 0.05), ("pasa_rs", 1e-3)):
        err_k, _ = check_against_golden(q, k, v, precision=precision)
        assert err_k < bound, (precision, err_k)


@pytest.mark.parametrize("shift", ["prepass", "fused"])
def test_pasa_rs_safety_net_keeps_overflowing_rows_finite(shift):
    """test_triton_interpret's safety-net case at D = 128 and 128-key blocks (scaled scores ±60 000, so
    that S' in units of Q̂ = Q/16 still overflows): blocks 2 and 3 overflow FP16 S' for every row; the
    kernel keeps those rows in FP32 and stays finite, within 2× its fp32 FlashAttention's error."""
    from pasa_npu import golden
    from pasa_npu.backends import triton as tb

    q, k, v = shift_overflow(s1=256, s2=1024, d=128, level=-60000.0, peak=60000.0, block_kv=128)
    scale = 128 ** -0.5
    stats = {}
    golden.attention(q.numpy(), k.numpy(), v.numpy(), precision="pasa_rs", scale=scale,
                     block_kv=128, stats=stats)
    assert stats["recomputed_row_blocks"] > 0
    q, k, v = (t.cuda() for t in (q, k, v))
    out, lse = tb.attention(q, k, v, precision="pasa_rs", beta=None, block_q=128, block_kv=128, scale=scale,
                            mask=None, shift=shift)
    f_out, _ = tb.attention(q, k, v, precision="fp32", beta=None, block_q=128, block_kv=128, scale=scale, mask=None)
    r_out, r_lse = ref64(q, k, v, scale, None)
    assert torch.isfinite(out).all() and torch.isfinite(lse).all()
    err_k, err_f = rel_rmse(out, r_out), rel_rmse(f_out, r_out)
    # Measured on an H100: 1.4e-3 against fp32 FlashAttention's 0.9e-3 (golden 1.1e-3): on top of the
    # FP32 accumulation both share, pasa_rs rounds the shifted scores of the unrecomputed blocks to FP16.
    assert err_k <= 2.0 * err_f and err_k < 1e-2, (err_k, err_f)
    assert float((lse.double() - r_lse).abs().max()) < 0.05  # |lse| ≈ 60 000, where an FP32 ulp is 0.004


@pytest.mark.parametrize("shift", ["prepass", "fused"])
@pytest.mark.parametrize("scale", [2e4, 1e6])
def test_pasa_rs_large_scale(scale, shift):
    """test_triton_interpret's large-scale case at D = 128 and 128-key blocks, prefill and decode: N(0, 1)
    inputs at a scale where Q̂ = Q·2^⌊log₂ scale⌋ overflowed FP16; the kernel is finite and matches the
    golden model and float64."""
    for s1 in (256, 1):
        q, k, v = draw(2, 8, 2, s1, 1000, 128, seed=11, device="cuda")
        check_against_golden(q, k, v, precision="pasa_rs", shift=shift, scale=scale)


def _hard_input(name: str, seed: int):
    """(q, k, v, scale) on the GPU, D = 128: Q, K ~ N(30, 1) (FP16 Q·Kᵀ overflows); pasa_npu.accuracy's
    resonance (scores ≈ ±75 000) and drift (the key level rises ~150 scaled units a block: every block moves
    fp32_frame's frames); a sink 12.5 above a sea of 131 072 near-equal keys (test_fp32_frame's: the frame
    moves down to the sea); N(0, 1) at scale 2·10⁴, prefill and decode; the biased input as a decode of one KV head
    over 16 384 keys."""
    from support import sink_and_sea

    from pasa_npu import accuracy
    from pasa_npu.accuracy import Case

    rng = np.random.default_rng(seed)
    if name == "biased30":
        return (*draw(1, 4, 1, 256, 1024, 128, bias=30.0, seed=seed, device="cuda"), 128 ** -0.5)
    if name == "biased30_decode":  # one KV head over 16k keys: the most KV splits (_MAX_SPLITS) merge in the launch
        return (*draw(1, 8, 1, 1, 16384, 128, bias=30.0, seed=seed, device="cuda"), 128 ** -0.5)
    if name in ("resonance", "drift"):
        case = Case("resonance", 180, 34) if name == "resonance" else Case("drift", 10, 1)
        q, k, v, call = accuracy.draw_hard(case, rng)
        return (*(torch.from_numpy(x).half().cuda() for x in (q, k, v)), float(call["scale"]))
    if name == "sink_sea":
        q, k, v, scale = sink_and_sea(12.47, keys=131072, seed=seed)
        return (*(torch.from_numpy(x).cuda() for x in (q, k, v)), float(scale))
    s1 = 1 if name == "scale2e4_decode" else 256
    return (*draw(2, 8, 2, s1, 1000, 128, seed=seed, device="cuda"), 2e4)


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("name", ["biased30", "biased30_decode", "resonance", "drift", "sink_sea", "scale2e4",
                                  "scale2e4_decode"])
def test_fp32_frame_hard_inputs_within_fp32_error(name, seed):
    """fp32_frame on the hard inputs: finite, within the golden model's and float64's bounds
    (check_against_golden), and within 1.5× the error of the kernel's fp32 FlashAttention on the same input."""
    from pasa_npu.backends import triton as tb

    q, k, v, scale = _hard_input(name, seed)
    err_k, _ = check_against_golden(q, k, v, precision="fp32_frame", scale=scale)
    f_out, _ = tb.attention(q, k, v, precision="fp32", beta=None, block_q=128, block_kv=128, scale=scale, mask=None)
    err_f = rel_rmse(f_out, ref64(q, k, v, scale, None)[0])
    assert err_k <= 1.5 * err_f + 1e-6, (err_k, err_f)


def test_cuda_tensors_default_to_the_triton_backend(monkeypatch):
    from pasa_npu.backends import triton as tb

    calls = []

    class Spy(tb.AttentionPlan):
        def __init__(self, *a, **kw):
            calls.append(kw)
            super().__init__(*a, **kw)

    monkeypatch.setattr(tb, "AttentionPlan", Spy)
    q, k, v = draw(1, 4, 2, 64, 200, 64, device="cuda")
    compressed = torch.triu(torch.ones(2048, 2048, dtype=torch.bool, device="cuda"), 1)
    out, lse = interface.fused_attention(q, k, v, num_heads=4, num_key_value_heads=2, input_layout="BNSD",
                                         scale=0.125, sparse_mode=2, atten_mask=compressed, softmax_lse_flag=True)
    assert len(calls) == 1 and calls[0]["band"] == (None, 0) and calls[0]["mask"] is None
    ref, ref_lse = interface.fused_attention(q, k, v, num_heads=4, num_key_value_heads=2, input_layout="BNSD",
                                             scale=0.125, sparse_mode=2, atten_mask=compressed,
                                             softmax_lse_flag=True, backend="reference")
    assert rel_rmse(out, ref) < 3e-3
    torch.testing.assert_close(lse, ref_lse, rtol=1e-4, atol=2e-3)
    # fp16 is not a Triton allocation, nor is PASA with a 48-key block: the reference backend computes them.
    for kw in (dict(precision="fp16"), dict(precision="pasa_fp32", block_kv=48)):
        interface.fused_attention(q, k, v, num_heads=4, num_key_value_heads=2, input_layout="BNSD", **kw)
    assert len(calls) == 1


# --- PageAttention prefill: the caches read through the table by the pre-passes and the kernel ---

from support import COMPRESSED, TRITON_BOUNDS, _inputs, _paged  # noqa: E402

#: FIA's page lengths around the kernel's 128-key block: below (16), equal (128), above (512), and
#: lengths a KV block straddles (48, 144); each with one of the two cache layouts.
PAGES = [(16, True), (48, False), (128, True), (144, False), (512, True)]


def _paged_pair(q, k, v, kv_lens, page, four_d, precision, seed, **extra):
    """The paged Triton call on shuffled caches (batch 1 sharing batch 0's first page, so its dense keys
    are made to say the same) and the dense Triton call on the same keys, both on the GPU."""
    import numpy as np

    kc, vc, table = _paged(k, v, kv_lens, page, np.random.default_rng(seed), four_d, share=True)
    k[1, :, :page], v[1, :, :page] = k[0, :, :page], v[0, :, :page]
    n, d = q.shape[1], q.shape[3]
    kw = dict(num_heads=n, num_key_value_heads=k.shape[1], input_layout="BNSD", scale=d ** -0.5,
              softmax_lse_flag=True, actual_seq_lengths_kv=kv_lens, precision=precision, backend="triton", **extra)
    q, k, v, kc, vc, table = (t.cuda() for t in (q, k, v, kc, vc, table))
    paged = interface.fused_attention(q, kc, vc, block_table=table, block_size=page, **kw)
    return paged, interface.fused_attention(q, k, v, **kw), (q, k, v)


def _check_rows_float64(out, lse, q, k, v, q_lens, kv_lens, precision, mask_of):
    """Batch i's first q_lens[i] rows against float64 within test_paged's bounds; the rest FIA's padding."""
    err_bound, lse_bound = TRITON_BOUNDS[precision]
    for i, (r, c) in enumerate(zip(q_lens, kv_lens)):
        assert torch.all(out[i, :, r:] == 0) and torch.all(lse[i, :, r:] == float("inf"))
        ref, ref_lse = ref64(q[i:i + 1, :, :r], k[i:i + 1, :, :c], v[i:i + 1, :, :c], q.shape[-1] ** -0.5,
                             mask_of(i, r, c).to(q.device))
        err = rel_rmse(out[i:i + 1, :, :r], ref)
        assert err < err_bound, (precision, i, err)
        live = torch.isfinite(ref_lse)
        if lse_bound is not None:
            lse_err = float((lse[i:i + 1, :, :r, 0].double() - ref_lse)[live].abs().max())
            assert lse_err < lse_bound, (precision, i, lse_err)


@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("page, four_d", PAGES)
def test_paged_prefill_equals_dense_bit_for_bit(page, four_d, precision):
    """Prefill from a paged cache: 300 queries (per batch 300, 200, 77) over 1100, 700, 333 keys, GQA 4:1,
    D = 128, bottom-right causal, shuffled pages with a shared first page and partial last pages. Every
    batch's dense call tiles its rows alike (128-row tiles, more than one per KV head: PASA's pre-pass),
    so the paged result equals the dense Triton result bit for bit; valid rows within float64 bounds."""
    b, n, nkv, s1, d = 3, 8, 2, 300, 128
    kv_lens, q_lens = [1100, 700, 333], [300, 200, 77]
    q, k, v = _inputs(b, n, nkv, s1, max(kv_lens), d, seed=page, mean=2.0)
    (out, lse), (dense, dense_lse), (q, k, v) = _paged_pair(
        q, k, v, kv_lens, page, four_d, precision, page, actual_seq_lengths=q_lens, sparse_mode=3,
        atten_mask=COMPRESSED.cuda())
    assert torch.equal(out, dense) and torch.equal(lse, dense_lse)
    _check_rows_float64(out, lse, q, k, v, q_lens, kv_lens, precision,
                        lambda i, r, c: torch.ones(r, c, dtype=torch.bool).triu(c - r + 1))


@pytest.mark.parametrize("precision", ["fp32", "pasa_rs"])
def test_paged_prefill_user_mask_equals_dense(precision):
    """A full atten_mask (sparse_mode 0, (B, 1, S1, S2)) with per-batch query and key lengths on pages of 144
    (3-D layout): equal to the dense Triton result bit for bit, within float64 bounds."""
    b, n, nkv, s1, d, page = 2, 8, 2, 256, 128, 144
    kv_lens, q_lens = [900, 500], [256, 150]
    q, k, v = _inputs(b, n, nkv, s1, max(kv_lens), d, seed=3, mean=2.0)
    mask = torch.rand(b, 1, s1, 2048, generator=torch.Generator().manual_seed(3)) < 0.2  # past the table's reach
    (out, lse), (dense, dense_lse), (q, k, v) = _paged_pair(
        q, k, v, kv_lens, page, False, precision, 3, actual_seq_lengths=q_lens, atten_mask=mask.cuda())
    assert torch.equal(out, dense) and torch.equal(lse, dense_lse)
    _check_rows_float64(out, lse, q, k, v, q_lens, kv_lens, precision,
                        lambda i, r, c: mask[i:i + 1, :, :r, :c])
