"""merge_partials: attention over split key sets, merged through lse, equals attention over all keys."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from pasa_npu import golden
from pasa_npu.merge import merge_partials

LSE_NO_KEY = float(torch.finfo(torch.float32).min)


def _parts(q, k, v, cuts, mask=None):
    outs, lses = [], []
    for c0, c1 in zip(cuts[:-1], cuts[1:]):
        m = None if mask is None else mask[..., c0:c1]
        o, l = golden.reference(q, k[:, :, c0:c1], v[:, :, c0:c1], scale=0.125, mask=m)
        outs.append(torch.from_numpy(o))
        lses.append(torch.from_numpy(l))
    return outs, lses


@pytest.mark.parametrize("seed", range(4))
def test_merge_of_key_shards_equals_attention_over_all_keys(seed):
    rng = np.random.default_rng(seed)
    q = rng.normal(3.0, 1.0, (2, 3, 5, 64))
    k = rng.normal(3.0, 1.0, (2, 3, 37, 64))
    v = rng.normal(0.0, 1.0, (2, 3, 37, 64))
    cuts = sorted({0, 37, *rng.integers(1, 37, 3).tolist()})
    outs, lses = _parts(q, k, v, cuts)
    out, lse = merge_partials(outs, lses)
    want_o, want_l = golden.reference(q, k, v, scale=0.125)
    # The merge runs in FP32: each weight exp(lse_p − lse) carries the FP32 rounding of lse_p (a few
    # ulps of |lse|, ~72 here), and the output a few ulps of its own scale.
    eps = np.finfo(np.float32).eps
    bound = (4 * eps * np.abs(want_l).max() + 8 * eps) * np.abs(want_o).max()
    np.testing.assert_allclose(out.numpy(), want_o, rtol=0, atol=bound)
    np.testing.assert_allclose(lse.numpy(), want_l, rtol=4 * eps)
    # One stacked tensor is the same as a list of partials.
    out2, lse2 = merge_partials(torch.stack(outs), torch.stack(lses))
    assert torch.equal(out, out2) and torch.equal(lse, lse2)


def test_rows_without_keys_in_a_part_get_no_weight_and_fully_masked_rows_stay_empty():
    rng = np.random.default_rng(7)
    q = rng.normal(size=(1, 1, 3, 16))
    k = rng.normal(size=(1, 1, 8, 16))
    v = rng.normal(size=(1, 1, 8, 16))
    mask = np.zeros((1, 1, 3, 8), bool)
    mask[0, 0, 0, :4] = True   # row 0: nothing in the first part
    mask[0, 0, 2, :] = True    # row 2: nothing anywhere
    outs, lses = _parts(q, k, v, [0, 4, 8], mask)
    assert np.isneginf(lses[0][0, 0, 0].item())
    out, lse = merge_partials(outs, lses, out_dtype=torch.float32)
    want_o, want_l = golden.reference(q, k, v, scale=0.125, mask=mask)
    np.testing.assert_allclose(out[0, 0, :2].numpy(), want_o[0, 0, :2], rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(lse[0, 0, :2].numpy(), want_l[0, 0, :2], rtol=1e-6)
    assert torch.all(out[0, 0, 2] == 0) and torch.isneginf(lse[0, 0, 2])
    assert out.dtype == torch.float32 and lse.dtype == torch.float32


def test_fia_sentinels_no_key_and_padded_rows():
    o = torch.ones(2, 3, 4)
    lse = torch.tensor([[LSE_NO_KEY, 0.0, float("inf")], [LSE_NO_KEY, 1.0, float("inf")]])
    out, merged = merge_partials(o, lse)
    assert merged[0].item() == LSE_NO_KEY and torch.all(out[0] == 1)  # both parts report no key: equal weights, lse stays the sentinel
    assert merged[1].item() == pytest.approx(np.log(np.exp(0.0) + np.exp(1.0)))
    assert torch.isposinf(merged[2]) and torch.all(out[2] == 0)


def test_the_lse_fused_attention_returns_merges_as_it_is():
    """fused_attention returns lse (B, N, S, 1), FIA's shape: merge_partials takes it without a squeeze and
    gives it back in that shape, with the numbers of the squeezed call."""
    import pasa_npu

    rng = np.random.default_rng(3)
    q, k, v = (torch.from_numpy(rng.normal(size=s)).half() for s in ((1, 2, 5, 32), (1, 2, 40, 32), (1, 2, 40, 32)))
    parts = [pasa_npu.fused_attention(q, k[:, :, c0:c1], v[:, :, c0:c1], num_heads=2, input_layout="BNSD",
                                      softmax_lse_flag=True) for c0, c1 in ((0, 17), (17, 40))]
    assert parts[0][1].shape == (1, 2, 5, 1)
    out, lse = merge_partials([o for o, _ in parts], [l for _, l in parts])
    out_sq, lse_sq = merge_partials([o for o, _ in parts], [l[..., 0] for _, l in parts])
    assert lse.shape == (1, 2, 5, 1) and torch.equal(lse[..., 0], lse_sq) and torch.equal(out, out_sq)


@pytest.mark.parametrize("outs, lses, match", [
    ([], [], "at least one partial"),
    ([torch.zeros(2, 4)], [torch.zeros(2), torch.zeros(2)], "as many partials"),
    ([torch.zeros(2, 4)], [torch.zeros(3)], "shape without the last dim"),
    ([torch.zeros(2, 4), torch.zeros(3, 4)], [torch.zeros(2), torch.zeros(3)], "one shape"),
])
def test_bad_partials_are_refused(outs, lses, match):
    with pytest.raises(ValueError, match=match):
        merge_partials(outs, lses)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (runs on the GPU machine)")
def test_cuda_merge_runs_the_triton_combine_and_agrees_with_the_torch_merge():
    g = torch.Generator().manual_seed(3)
    outs = torch.randn(5, 2, 3, 7, 64, generator=g)
    lses = torch.randn(5, 2, 3, 7, generator=g) * 10
    lses[0, 0, 0, 0] = float("inf")                       # a padded row
    lses[:, 1, 2, 3] = float("-inf")                      # a row with no key anywhere
    lses[1, 1, 0] = LSE_NO_KEY                            # no key in one part
    want_o, want_l = merge_partials(outs, lses, out_dtype=torch.float16)
    got_o, got_l = merge_partials(outs.cuda(), lses.cuda(), out_dtype=torch.float16)
    assert torch.equal(torch.isposinf(got_l.cpu()), torch.isposinf(want_l))
    assert torch.allclose(got_o.cpu().float(), want_o.float(), atol=2e-3, rtol=2e-3)
    finite = torch.isfinite(want_l)
    assert torch.allclose(got_l.cpu()[finite], want_l[finite], rtol=1e-6, atol=1e-5)
    assert torch.isneginf(got_l[1, 2, 3]).item() and torch.all(got_o[1, 2, 3] == 0)


def _layout_inputs(layout, rng, b=2, n=3, s=3, s2=24, d=8):
    """q, k, v in ``layout`` with S1 = N (a BSND output read as BNSD would then merge the wrong rows unnoticed),
    and the fused_attention keyword arguments of that layout."""
    if layout == "TND":
        q, k, v = (torch.from_numpy(rng.normal(size=(b * t, n, d))).half() for t in (s, s2, s2))
        return q, k, v, dict(actual_seq_lengths=[s * (i + 1) for i in range(b)],
                             actual_seq_lengths_kv=[s2 * (i + 1) for i in range(b)])
    q, k, v = (torch.from_numpy(rng.normal(size=(b, n, t, d))).half() for t in (s, s2, s2))
    if layout in ("BSND", "BSH"):
        q, k, v = (x.transpose(1, 2).contiguous() for x in (q, k, v))
    if layout == "BSH":
        q, k, v = (x.flatten(-2) for x in (q, k, v))
    return q, k, v, {}


def _key_split(layout, x, lengths, c0, c1):
    """The keys c0:c1 of each batch of ``x`` (keys or values) in ``layout``."""
    if layout == "TND":
        return torch.cat([x[start + c0:start + c1] for start in range(0, x.shape[0], lengths)])
    return x[:, :, c0:c1] if layout.startswith("BNSD") else x[:, c0:c1]


@pytest.mark.parametrize("layout", ["BSH", "BSND", "BNSD", "BNSD_BSND", "TND"])
def test_merge_takes_what_fused_attention_returns_in_every_layout(layout):
    """Partials of fused_attention over two key splits, merged with the call's input_layout, equal the call over
    all keys (fp32: the splits round as the whole call does, but for the merge's FP32 arithmetic)."""
    import pasa_npu

    q, k, v, kw = _layout_inputs(layout, np.random.default_rng(11))
    call = dict(num_heads=3, input_layout=layout, softmax_lse_flag=True, precision="fp32", **kw)
    want_o, want_l = pasa_npu.fused_attention(q, k, v, **call)
    if layout == "TND":
        call.update(actual_seq_lengths_kv=[12 * (i + 1) for i in range(2)])
    parts = [pasa_npu.fused_attention(q, _key_split(layout, k, 24, c0, c1), _key_split(layout, v, 24, c0, c1), **call)
             for c0, c1 in ((0, 12), (12, 24))]
    out, lse = merge_partials([o for o, _ in parts], [l for _, l in parts], input_layout=layout)
    assert out.shape == want_o.shape and out.dtype == want_o.dtype and lse.shape == want_l.shape
    torch.testing.assert_close(out.float(), want_o.float(), rtol=0, atol=2e-3)
    torch.testing.assert_close(lse, want_l, rtol=1e-6, atol=1e-6)


def test_merge_of_outputs_without_lse_says_to_turn_the_flag_on():
    import pasa_npu

    q, k, v, _ = _layout_inputs("BSND", np.random.default_rng(0))
    parts = [pasa_npu.fused_attention(q, k, v, num_heads=3, input_layout="BSND") for _ in range(2)]
    for layout in (None, "BSND"):
        with pytest.raises(ValueError, match="softmax_lse_flag=True"):
            merge_partials([o for o, _ in parts], [l for _, l in parts], input_layout=layout)


@pytest.mark.parametrize("kwargs, error, match", [
    (dict(outs=[torch.ones(2, 4, dtype=torch.int32)] * 2), TypeError, "outs must be floating-point"),
    (dict(lses=[torch.zeros(2, dtype=torch.int64)] * 2), TypeError, "lses must be floating-point"),
    (dict(out_dtype=torch.int32), ValueError, "out_dtype must be a floating-point"),
    (dict(out_dtype="float16"), TypeError, "out_dtype must be None or a floating-point torch.dtype"),
    (dict(input_layout="SBH"), ValueError, "input_layout must be None or one of"),
    (dict(input_layout="BSND"), ValueError, r"BSND partials must be outputs \(B, S, N, D\)"),
])
def test_bad_types_and_layouts_are_refused_by_name(kwargs, error, match):
    call = {"outs": [torch.ones(2, 4)] * 2, "lses": [torch.zeros(2)] * 2, **kwargs}
    with pytest.raises(error, match=match):
        merge_partials(call.pop("outs"), call.pop("lses"), **call)
