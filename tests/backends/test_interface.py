"""fused_attention: FIA's semantics (docs/fia.md) against an independent float64 reference.

The reference below is plain float64 softmax attention. Its masks are built with Python loops over
(i, j), directly from the rules of FIA's documentation (torch_npu/_op_plugin_docs.py and CANN's
sparse_mode description): mode 0 keeps -pre_tokens <= j - i <= next_tokens counted from the top-left
corner; mode 4 keeps the same band counted from the bottom-right corner, written here in
bottom-right coordinates (i' = S1-1-i, j' = S2-1-j); mode 2 keeps j <= i; mode 3 keeps the keys on
or left of the diagonal through the bottom-right corner.
"""

from __future__ import annotations

import functools
import math

import pytest
import torch

from pasa_npu.interface import FP16_MAX, LSE_NO_KEY, fused_attention
from pasa_npu.precision import ALLOCATIONS, PRECISIONS

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import assume, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

INT_MAX = 2147483647
COMPRESSED = torch.triu(torch.ones(2048, 2048, dtype=torch.bool), diagonal=1)


# ------------------------------------------------------------------------------------------------
# the independent reference
# ------------------------------------------------------------------------------------------------

def keep_rule(mode, s1, s2, pre=INT_MAX, nxt=INT_MAX, user=None):
    """(s1, s2) bool, True = the key is attended to, from FIA's documented rules, one (i, j) at a time.
    ``user`` is the user's mask (True = masked out) for modes 0 and 1."""
    keep = torch.ones(s1, s2, dtype=torch.bool)
    for i in range(s1):
        for j in range(s2):
            if mode == 0:
                ok = True if user is None else (-pre <= j - i <= nxt)
            elif mode == 1:
                ok = True
            elif mode == 2:  # leftUpCausal
                ok = j <= i
            elif mode == 3:  # rightDownCausal: bottom-right aligned lower triangle
                ok = (s2 - 1 - j) >= (s1 - 1 - i)
            elif mode == 4:  # band from the bottom-right corner
                ib, jb = s1 - 1 - i, s2 - 1 - j
                ok = (-nxt <= jb - ib <= pre)
            else:
                raise AssertionError(mode)
            if user is not None and bool(user[i, j]):
                ok = False
            keep[i, j] = ok
    return keep


def ref_attention(q, k, v, keep, scale):
    """q (B, N, S1, D), k/v (B, Nkv, S2, D), keep broadcastable to (B, N, S1, S2), True = attended.
    Returns float64 out (B, N, S1, D) and lse (B, N, S1); rows with no key: out 0, lse LSE_NO_KEY."""
    q, k, v = q.double(), k.double(), v.double()
    g = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(g, 1), v.repeat_interleave(g, 1)
    s = torch.einsum("bnid,bnjd->bnij", q, k) * scale
    keep = torch.broadcast_to(keep, s.shape)
    s = s.masked_fill(~keep, float("-inf"))
    lse = torch.logsumexp(s, dim=-1)
    any_key = keep.any(-1)
    p = torch.where(keep, torch.exp(s - torch.where(any_key, lse, 0.0)[..., None]), 0.0)
    out = torch.einsum("bnij,bnjd->bnid", p, v)
    lse = torch.where(any_key, lse, LSE_NO_KEY)
    return out, lse


def rel_rmse(a, b):
    a, b = a.double(), b.double()
    return float(((a - b) ** 2).mean().sqrt() / (b ** 2).mean().sqrt().clamp_min(1e-30))


def assert_matches(out, ref, rtol=2e-3, atol=4e-3):
    assert out.shape == ref.shape
    assert torch.isfinite(out.float()).all()
    assert rel_rmse(out, ref) < rtol, rel_rmse(out, ref)
    assert float((out.double() - ref).abs().max()) < atol


def rnd(*shape, dtype=torch.float16, seed=0, mean=0.0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(*shape, generator=g, dtype=torch.float64) + mean).to(dtype)


def qkv(b=2, n=4, nkv=None, s1=37, s2=53, d=32, seed=0, dtype=torch.float16):
    nkv = nkv or n
    return (rnd(b, n, s1, d, seed=seed, dtype=dtype), rnd(b, nkv, s2, d, seed=seed + 1, dtype=dtype),
            rnd(b, nkv, s2, d, seed=seed + 2, dtype=dtype))


def bnsd_call(q, k, v, **kw):
    kw.setdefault("num_heads", q.shape[1])
    kw.setdefault("num_key_value_heads", k.shape[1])
    kw.setdefault("scale", 1 / math.sqrt(q.shape[-1]))
    kw.setdefault("precision", "fp32")
    return fused_attention(q, k, v, input_layout="BNSD", **kw)


# ------------------------------------------------------------------------------------------------
# plain attention, layouts, GQA
# ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("precision,tol,lse_tol", [("fp32", 2e-3, 1e-4), ("fp16_fp32", 3e-3, 3e-3),
                                                   ("pasa", 1e-2, 5e-2), ("pasa_fp32", 1e-2, 5e-2)])
def test_unmasked_matches_float64(precision, tol, lse_tol):
    q, k, v = qkv(s1=70, s2=150, d=64)
    scale = 1 / 8
    out, lse = bnsd_call(q, k, v, scale=scale, precision=precision, softmax_lse_flag=True)
    ref, ref_lse = ref_attention(q, k, v, torch.ones(1, dtype=torch.bool), scale)
    assert out.dtype == torch.float16
    assert rel_rmse(out, ref) < tol
    assert lse.shape == (2, 4, 70, 1) and lse.dtype == torch.float32
    assert float((lse[..., 0].double() - ref_lse).abs().max()) < lse_tol


def _layouts(q, k, v):
    """The same problem in every layout: (layout, q, k, v, out -> BNSD)."""
    b, n, s1, d = q.shape
    nkv, s2 = k.shape[1], k.shape[2]
    bsnd = [t.transpose(1, 2).contiguous() for t in (q, k, v)]
    bsh = [bsnd[0].reshape(b, s1, n * d), bsnd[1].reshape(b, s2, nkv * d), bsnd[2].reshape(b, s2, nkv * d)]
    return [
        ("BNSD", (q, k, v), lambda o: o),
        ("BNSD_BSND", (q, k, v), lambda o: o.transpose(1, 2)),
        ("BSND", bsnd, lambda o: o.transpose(1, 2)),
        ("BSH", bsh, lambda o: o.reshape(b, s1, n, d).transpose(1, 2)),
    ]


@pytest.mark.parametrize("nkv", [4, 2, 1])
def test_every_layout_gives_the_same_numbers(nkv):
    q, k, v = qkv(b=2, n=4, nkv=nkv, s1=33, s2=47, d=16)
    kw = dict(num_heads=4, num_key_value_heads=nkv, scale=0.25, precision="fp32", softmax_lse_flag=True)
    results = {}
    for layout, (lq, lk, lv), back in _layouts(q, k, v):
        out, lse = fused_attention(lq, lk, lv, input_layout=layout, **kw)
        expected_shape = {"BNSD": (2, 4, 33, 16), "BNSD_BSND": (2, 33, 4, 16), "BSND": (2, 33, 4, 16),
                          "BSH": (2, 33, 64)}[layout]
        assert out.shape == expected_shape
        assert lse.shape == (2, 4, 33, 1)
        results[layout] = (back(out), lse)
    base_out, base_lse = results["BNSD"]
    for layout, (o, l) in results.items():
        assert torch.equal(o, base_out), layout
        assert torch.equal(l, base_lse), layout
    ref, _ = ref_attention(q, k, v, torch.ones(1, dtype=torch.bool), 0.25)
    assert_matches(base_out, ref)


def test_tnd_equals_per_sequence_bnsd():
    n, d = 2, 16
    lens_q, lens_k = [5, 0, 17, 9], [12, 4, 17, 1]
    t, tk = sum(lens_q), sum(lens_k)
    q, k, v = rnd(t + 3, n, d, seed=1), rnd(tk, 1, d, seed=2), rnd(tk, 1, d, seed=3)  # 3 trailing pad rows
    cum = lambda xs: [sum(xs[:i + 1]) for i in range(len(xs))]  # noqa: E731
    out, lse = fused_attention(q, k, v, input_layout="TND", num_heads=n, num_key_value_heads=1, scale=0.3,
                               actual_seq_lengths=cum(lens_q), actual_seq_lengths_kv=cum(lens_k),
                               sparse_mode=3, atten_mask=COMPRESSED, precision="fp32", softmax_lse_flag=True)
    assert out.shape == (t + 3, n, d) and lse.shape == (t + 3, n, 1)
    q0 = k0 = 0
    for r, c in zip(lens_q, lens_k):
        if r:
            qb, kb, vb = (x.transpose(0, 1)[None] for x in (q[q0:q0 + r], k[k0:k0 + c], v[k0:k0 + c]))
            ref, ref_lse = ref_attention(qb, kb, vb, keep_rule(3, r, c), 0.3)
            assert_matches(out[q0:q0 + r].transpose(0, 1)[None], ref)
            assert torch.allclose(lse[q0:q0 + r, :, 0].T[None].double(), ref_lse, atol=1e-4)
        q0, k0 = q0 + r, k0 + c
    assert torch.all(out[t:] == 0) and torch.all(lse[t:] == math.inf)  # rows past the last sequence


def test_gqa_and_mqa_equal_explicitly_repeated_kv():
    q, k, v = qkv(n=6, nkv=2, s1=20, s2=41, d=32)
    for precision in ("fp32", "pasa"):
        out, lse = bnsd_call(q, k, v, precision=precision, softmax_lse_flag=True)
        out_rep, lse_rep = bnsd_call(q, k.repeat_interleave(3, 1), v.repeat_interleave(3, 1),
                                     num_key_value_heads=0, precision=precision, softmax_lse_flag=True)
        assert torch.allclose(out.float(), out_rep.float(), atol=1e-3, rtol=0)
        assert torch.allclose(lse, lse_rep, atol=1e-2)
    q1, k1, v1 = qkv(n=4, nkv=1, s1=9, s2=30, d=16, seed=5)
    out, _ = bnsd_call(q1, k1, v1)
    ref, _ = ref_attention(q1, k1.expand(-1, 4, -1, -1), v1.expand(-1, 4, -1, -1), torch.ones(1, dtype=torch.bool),
                           0.25)
    assert_matches(out, ref)


# ------------------------------------------------------------------------------------------------
# masks and sparse modes
# ------------------------------------------------------------------------------------------------

def _random_mask(b, s1, s2, seed, p=0.3, full_rows=()):
    g = torch.Generator().manual_seed(seed)
    m = torch.rand(b, s1, s2, generator=g) < p
    for r in full_rows:
        m[:, r] = True
    return m


def test_sparse_mode_0_explicit_mask_every_shape_and_dtype():
    b, n, s1, s2 = 2, 3, 21, 34
    q, k, v = qkv(b=b, n=n, s1=s1, s2=s2, d=16, seed=3)
    m = _random_mask(b, s1, s2, seed=4, full_rows=(5,))
    keep = torch.stack([keep_rule(0, s1, s2, user=m[i]) for i in range(b)])[:, None]
    ref, ref_lse = ref_attention(q, k, v, keep, 0.25)
    variants = [
        m[:, None],                                   # (B, 1, S1, S2)
        m[:, None].expand(b, n, s1, s2),              # (B, N, S1, S2)
        m[:, None].to(torch.int8), m[:, None].to(torch.uint8),
    ]
    for mask in variants:
        out, lse = bnsd_call(q, k, v, atten_mask=mask, scale=0.25, softmax_lse_flag=True)
        assert_matches(out, ref)
        assert torch.allclose(lse[..., 0].double(), ref_lse, atol=1e-4)
        assert torch.all(out[:, :, 5] == 0) and torch.all(lse[:, :, 5, 0] == LSE_NO_KEY)  # fully masked row
    # batch-shared masks: (S1, S2), (1, S1, S2), (1, 1, S1, S2), and a larger (aligned) one read top-left
    m0 = m[0]
    keep0 = keep_rule(0, s1, s2, user=m0)
    ref0, _ = ref_attention(q, k, v, keep0, 0.25)
    big = torch.ones(s1 + 11, s2 + 30, dtype=torch.bool)
    big[:s1, :s2] = m0
    for mask in (m0, m0[None], m0[None, None], big):
        out, _ = bnsd_call(q, k, v, atten_mask=mask, scale=0.25)
        assert_matches(out, ref0)


@pytest.mark.parametrize("pre,nxt", [(INT_MAX, 0), (3, 2), (9, -3), (-3, 7), (0, 0), (20, INT_MAX),
                                     (2**63 - 1, 2**63 - 1), (2**63 - 1, -(2**62)), (-5, 2**63 - 1)])
def test_sparse_mode_0_band_from_pre_and_next_tokens(pre, nxt):
    s1, s2 = 12, 10  # the shape of CANN's sparse_mode 0 figures
    q, k, v = qkv(b=1, n=2, s1=s1, s2=s2, d=16, seed=7)
    none = torch.zeros(s1, s2, dtype=torch.bool)
    out, lse = bnsd_call(q, k, v, atten_mask=none, pre_tokens=pre, next_tokens=nxt, softmax_lse_flag=True)
    ref, ref_lse = ref_attention(q, k, v, keep_rule(0, s1, s2, pre, nxt, user=none), 0.25)
    assert_matches(out, ref)
    assert torch.allclose(lse[..., 0].double(), ref_lse, atol=1e-4)


def test_sparse_mode_0_band_combines_with_the_mask_and_needs_the_mask():
    s1, s2 = 30, 30
    q, k, v = qkv(b=1, n=2, s1=s1, s2=s2, d=16, seed=8)
    m = _random_mask(1, s1, s2, seed=9)[0]
    out, _ = bnsd_call(q, k, v, atten_mask=m, pre_tokens=4, next_tokens=1)
    ref, _ = ref_attention(q, k, v, keep_rule(0, s1, s2, 4, 1, user=m), 0.25)
    assert_matches(out, ref)
    # without a mask, mode 0 ignores pre/next tokens (FIA: internally INT_MAX)
    out, _ = bnsd_call(q, k, v, pre_tokens=0, next_tokens=0)
    ref, _ = ref_attention(q, k, v, torch.ones(1, dtype=torch.bool), 0.25)
    assert_matches(out, ref)


def test_sparse_mode_1_uses_the_mask_alone():
    s1, s2 = 25, 40
    q, k, v = qkv(b=2, n=2, s1=s1, s2=s2, d=16, seed=10)
    m = _random_mask(2, s1, s2, seed=11, p=0.5)
    out, _ = bnsd_call(q, k, v, atten_mask=m[:, None], sparse_mode=1, pre_tokens=0, next_tokens=0)
    keep = torch.stack([keep_rule(1, s1, s2, user=m[i]) for i in range(2)])[:, None]
    ref, _ = ref_attention(q, k, v, keep, 0.25)
    assert_matches(out, ref)


@pytest.mark.parametrize("mode", [2, 3])
@pytest.mark.parametrize("s1,s2", [(20, 20), (13, 31), (31, 13)])
def test_sparse_modes_2_and_3_causal(mode, s1, s2):
    q, k, v = qkv(b=2, n=2, s1=s1, s2=s2, d=16, seed=12)
    out, lse = bnsd_call(q, k, v, atten_mask=COMPRESSED, sparse_mode=mode, pre_tokens=1, next_tokens=1,
                         softmax_lse_flag=True)
    ref, ref_lse = ref_attention(q, k, v, keep_rule(mode, s1, s2), 0.25)
    assert_matches(out, ref)
    assert torch.allclose(lse[..., 0].double(), ref_lse, atol=1e-4)
    if mode == 3 and s1 > s2:  # the top s1 - s2 rows see no key: output 0
        assert torch.all(out[:, :, : s1 - s2] == 0)
        assert torch.all(lse[:, :, : s1 - s2] == LSE_NO_KEY)


@pytest.mark.parametrize("pre,nxt,s1,s2", [(6, 4, 12, 16), (3, 0, 20, 20), (0, 3, 9, 25), (5, -2, 17, 11),
                                           (-2, 6, 15, 15)])
@pytest.mark.parametrize("mask_shape", [(2048, 2048), (1, 2048, 2048), (1, 1, 2048, 2048)])
def test_sparse_mode_4_band_from_the_bottom_right(pre, nxt, s1, s2, mask_shape):
    q, k, v = qkv(b=1, n=2, s1=s1, s2=s2, d=16, seed=13)
    out, lse = bnsd_call(q, k, v, atten_mask=COMPRESSED.reshape(mask_shape).to(torch.uint8), sparse_mode=4,
                         pre_tokens=pre, next_tokens=nxt, softmax_lse_flag=True)
    ref, ref_lse = ref_attention(q, k, v, keep_rule(4, s1, s2, pre, nxt), 0.25)
    assert_matches(out, ref)
    assert torch.allclose(lse[..., 0].double(), ref_lse, atol=1e-4)


def test_fully_masked_rows_are_zero_for_every_inner_precise():
    q, k, v = qkv(b=1, n=2, s1=8, s2=8, d=16, seed=14)
    m = torch.zeros(8, 8, dtype=torch.bool)
    m[3] = True
    outs = [bnsd_call(q, k, v, atten_mask=m, inner_precise=ip, softmax_lse_flag=True) for ip in range(4)]
    for out, lse in outs:
        assert torch.all(out[:, :, 3] == 0) and torch.all(lse[:, :, 3] == LSE_NO_KEY)
        assert torch.equal(out, outs[0][0])


# ------------------------------------------------------------------------------------------------
# valid lengths (actual_seq_lengths, actual_seq_lengths_kv)
# ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("mode", [0, 3, 4])
def test_varlen_equals_each_batch_alone_and_pads_like_fia(mode):
    b, n, s1, s2 = 3, 2, 40, 150
    lq, lk = [40, 17, 0], [150, 131, 7]
    q, k, v = qkv(b=b, n=n, nkv=1, s1=s1, s2=s2, d=16, seed=15)
    kw = dict(sparse_mode=mode, pre_tokens=10, next_tokens=3, softmax_lse_flag=True)
    if mode:
        kw["atten_mask"] = COMPRESSED
    out, lse = bnsd_call(q, k, v, actual_seq_lengths=lq, actual_seq_lengths_kv=lk, **kw)
    for i in range(b):
        r, c = lq[i], lk[i]
        if r:
            alone, alone_lse = bnsd_call(q[i:i + 1, :, :r], k[i:i + 1, :, :c], v[i:i + 1, :, :c], **kw)
            assert torch.equal(out[i:i + 1, :, :r], alone)  # the same computation: tails are real tails
            assert torch.equal(lse[i:i + 1, :, :r], alone_lse)
            keep = keep_rule(mode, r, c, 10, 3) if mode else torch.ones(1, dtype=torch.bool)
            ref, _ = ref_attention(q[i:i + 1, :, :r], k[i:i + 1, :, :c], v[i:i + 1, :, :c], keep, 0.25)
            assert_matches(alone, ref)
        assert torch.all(out[i, :, r:] == 0)                 # FIA: padded query rows are 0 ...
        assert torch.all(lse[i, :, r:] == math.inf)          # ... and their lse is +inf


def test_varlen_with_explicit_mask_slices_the_top_left_corner():
    b, n, s1, s2 = 2, 2, 20, 30
    q, k, v = qkv(b=b, n=n, s1=s1, s2=s2, d=16, seed=16)
    m = _random_mask(b, s1, s2, seed=17)
    out, _ = bnsd_call(q, k, v, atten_mask=m[:, None], actual_seq_lengths=[20, 11], actual_seq_lengths_kv=[9, 30],
                       pre_tokens=6, next_tokens=2)
    for i, (r, c) in enumerate([(20, 9), (11, 30)]):
        ref, _ = ref_attention(q[i:i + 1, :, :r], k[i:i + 1, :, :c], v[i:i + 1, :, :c],
                               keep_rule(0, r, c, 6, 2, user=m[i, :r, :c]), 0.25)
        assert_matches(out[i:i + 1, :, :r], ref)


def test_varlen_list_rules_one_value_or_first_b():
    q, k, v = qkv(b=3, n=2, s1=10, s2=20, d=16, seed=18)
    one, _ = bnsd_call(q, k, v, actual_seq_lengths=[6], actual_seq_lengths_kv=torch.tensor([13]))
    full, _ = bnsd_call(q, k, v, actual_seq_lengths=[6, 6, 6], actual_seq_lengths_kv=[13, 13, 13])
    longer, _ = bnsd_call(q, k, v, actual_seq_lengths=[6, 6, 6, 99], actual_seq_lengths_kv=[13, 13, 13, 0])
    assert torch.equal(one, full) and torch.equal(longer, full)
    ref, _ = ref_attention(q[:, :, :6], k[:, :, :13], v[:, :, :13], torch.ones(1, dtype=torch.bool), 0.25)
    assert_matches(full[:, :, :6], ref)


def test_decode_single_query_row():
    b, n, nkv, s2 = 3, 4, 2, 60
    q, k, v = qkv(b=b, n=n, nkv=nkv, s1=1, s2=s2, d=32, seed=19)
    lk = [60, 23, 1]
    m = _random_mask(b, 1, s2, seed=20, p=0.2)[:, 0]  # FIA's decode mask (B, KV_S)
    # actual_seq_lengths, sparse_mode's rule and pre/next tokens have no effect when Q_S == 1 (FIA)
    out, lse = bnsd_call(q, k, v, atten_mask=m, actual_seq_lengths_kv=lk, actual_seq_lengths=[0, 0, 0],
                         pre_tokens=0, next_tokens=0, softmax_lse_flag=True)
    assert out.shape == (b, n, 1, 32) and lse.shape == (b, n, 1, 1)
    for i in range(b):
        c = lk[i]
        keep = ~m[i, :c].reshape(1, 1, 1, c)
        ref, ref_lse = ref_attention(q[i:i + 1], k[i:i + 1, :, :c], v[i:i + 1, :, :c], keep, 1 / math.sqrt(32))
        assert_matches(out[i:i + 1], ref)
        assert torch.allclose(lse[i:i + 1, ..., 0].double(), ref_lse, atol=1e-4)
    out3, _ = bnsd_call(q, k, v, atten_mask=COMPRESSED, sparse_mode=2)  # mode 2 ignored at Q_S == 1
    ref, _ = ref_attention(q, k, v, torch.ones(1, dtype=torch.bool), 1 / math.sqrt(32))
    assert_matches(out3, ref)


@settings(max_examples=12, deadline=None, derandomize=True, database=None)
@given(b=st.integers(1, 3), g=st.sampled_from([1, 2]), nkv=st.integers(1, 2), s1=st.integers(2, 40),
       s2=st.integers(1, 300), mode=st.sampled_from([0, 2, 3, 4]), pre=st.integers(0, 40), nxt=st.integers(-5, 40),
       data=st.data())
def test_random_shapes_lengths_and_modes(b, g, nkv, s1, s2, mode, pre, nxt, data):
    assume(pre + nxt >= 0)  # an empty band is refused (test_bad_arguments_are_named)
    n = g * nkv
    lq = data.draw(st.lists(st.integers(0, s1), min_size=b, max_size=b))
    lk = data.draw(st.lists(st.integers(0, s2), min_size=b, max_size=b))
    q, k, v = qkv(b=b, n=n, nkv=nkv, s1=s1, s2=s2, d=8, seed=s1 * 1000 + s2)
    kw = dict(sparse_mode=mode, pre_tokens=pre, next_tokens=nxt, block_q=16, block_kv=64, softmax_lse_flag=True)
    if mode:
        kw["atten_mask"] = COMPRESSED
    if mode == 0:
        user = _random_mask(1, s1, s2, seed=b)[0]
        kw["atten_mask"] = user
    out, lse = bnsd_call(q, k, v, actual_seq_lengths=lq, actual_seq_lengths_kv=lk, scale=0.3, **kw)
    for i in range(b):
        r, c = lq[i], lk[i]
        assert torch.all(out[i, :, r:] == 0) and torch.all(lse[i, :, r:] == math.inf)
        if r == 0:
            continue
        keep = keep_rule(mode, r, c, pre, nxt, user=user[:r, :c] if mode == 0 else None)
        ref, ref_lse = ref_attention(q[i:i + 1, :, :r], k[i:i + 1, :, :c], v[i:i + 1, :, :c], keep, 0.3)
        assert float((out[i:i + 1, :, :r].double() - ref).abs().max()) < 4e-3
        assert torch.allclose(lse[i:i + 1, :, :r, 0].double(), ref_lse, atol=1e-4)


# ------------------------------------------------------------------------------------------------
# lse, empty tensors, dtypes, precision selection
# ------------------------------------------------------------------------------------------------

def test_lse_flag_off_gives_fias_placeholder():
    q, k, v = qkv(s1=5, s2=7, d=8)
    _, lse = bnsd_call(q, k, v)
    assert lse.shape == (1,) and lse.dtype == torch.float32 and float(lse[0]) == 0.0


def test_lse_is_in_the_true_scale():
    q, k, v = qkv(b=1, n=1, s1=4, s2=300, d=64, seed=21)
    q = q * 3  # large scores: lse far from log(S2)
    for scale in (0.125, 1.0):
        _, lse = bnsd_call(q, k, v, scale=scale, softmax_lse_flag=True)
        s = (q.double() @ k.double().transpose(-1, -2)) * scale
        assert torch.allclose(lse[..., 0].double(), torch.logsumexp(s, -1), rtol=1e-6, atol=1e-4)


def test_empty_tensors():
    # key/value empty (S2 = 0): FIA fills the output with zeros
    q, k, v = qkv(b=2, n=2, s1=5, s2=0, d=8)
    out, lse = bnsd_call(q, k, v, softmax_lse_flag=True)
    assert out.shape == (2, 2, 5, 8) and torch.all(out == 0) and torch.all(lse == LSE_NO_KEY)
    # query empty (B = 0 or S1 = 0): FIA returns at once; shapes follow the layout
    for shape_q, shape_kv in (((0, 4, 16), (0, 9, 16)), ((2, 0, 16), (2, 9, 16))):
        kv = torch.zeros(shape_kv, dtype=torch.float16)
        out, lse = fused_attention(torch.zeros(shape_q, dtype=torch.float16), kv, kv, num_heads=2,
                                   softmax_lse_flag=True)
        assert out.shape == shape_q and lse.shape == (shape_q[0], 2, shape_q[1], 1)
    # a batch whose valid kv length is 0 sees no key
    q, k, v = qkv(b=2, n=2, s1=3, s2=6, d=8)
    out, lse = bnsd_call(q, k, v, actual_seq_lengths_kv=[6, 0], softmax_lse_flag=True)
    assert torch.all(out[1] == 0) and torch.all(lse[1] == LSE_NO_KEY) and torch.any(out[0] != 0)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_bf16_and_fp32_are_converted_and_the_dtype_is_kept(dtype):
    q, k, v = qkv(s1=9, s2=19, d=16, dtype=dtype, seed=22)
    out, lse = bnsd_call(q, k, v, softmax_lse_flag=True)
    assert out.dtype == dtype and lse.dtype == torch.float32
    out16, lse16 = bnsd_call(q.half(), k.half(), v.half(), softmax_lse_flag=True)
    assert torch.equal(out, out16.to(dtype)) and torch.equal(lse, lse16)


@pytest.mark.parametrize("how", ["argument", "environment"])
def test_out_of_fp16_range_and_non_finite_inputs_are_refused_when_checked(how, monkeypatch):
    if how == "argument":
        call = functools.partial(bnsd_call, check_inputs=True)
    else:
        monkeypatch.setenv("PASA_NPU_CHECK_INPUTS", "1")
        call = bnsd_call
    q, k, v = qkv(s1=4, s2=4, d=8, dtype=torch.bfloat16)
    big = k.clone()
    big[0, 0, 0, 0] = 70000.0
    with pytest.raises(ValueError, match=r"key.*exceeds FP16's range"):
        call(q, big, v)
    qf = q.float()
    qf[1, 1, 1, 1] = -65600.0
    with pytest.raises(ValueError, match=r"query.*exceeds FP16's range"):
        call(qf, k.float(), v.float())
    edge = q.float()
    edge[0, 0, 0, 0] = FP16_MAX  # exactly representable: accepted
    call(edge, k.float(), v.float())
    q16, k16, v16 = qkv(s1=4, s2=4, d=8)
    for name, bad in (("query", float("nan")), ("key", float("inf")), ("value", float("-inf"))):
        args = {"query": q16.clone(), "key": k16.clone(), "value": v16.clone()}
        args[name][0, 0, 0, 0] = bad
        with pytest.raises(ValueError, match=rf"{name} contains NaN or Inf"):
            call(args["query"], args["key"], args["value"])


def test_unchecked_non_finite_inputs_reach_only_the_rows_they_touch(monkeypatch):
    """Without the value checks (the default, no host-device synchronisation) a NaN key poisons the
    rows that attend to it and no other, as in any attention (docs/fia.md)."""
    monkeypatch.delenv("PASA_NPU_CHECK_INPUTS", raising=False)
    q, k, v = qkv(b=1, n=2, s1=4, s2=6, d=8)
    k[0, 0, 2, 0] = float("nan")
    out, _ = bnsd_call(q, k, v)
    assert torch.isnan(out[0, 0]).all(dim=-1).all() and torch.isfinite(out[0, 1]).all()
    big = v.float()
    big[0, 1, 0, 0] = 1e6  # becomes Inf in FP16
    out, _ = bnsd_call(q.float(), k.float().nan_to_num(0.0), big)
    assert torch.isfinite(out[0, 0]).all() and not torch.isfinite(out[0, 1]).all()


def test_precision_none_follows_inner_precise():
    q, k, v = qkv(s1=30, s2=50, d=32, seed=23)
    for ip, name in ((0, "fp32"), (2, "fp32"), (1, "fp16_fp32"), (3, "fp16_fp32")):
        a, _ = bnsd_call(q, k, v, precision=None, inner_precise=ip)
        b, _ = bnsd_call(q, k, v, precision=name)
        assert torch.equal(a, b)
    fp32, _ = bnsd_call(q, k, v, precision="fp32")
    f16, _ = bnsd_call(q, k, v, precision="fp16")
    assert not torch.equal(fp32, f16)  # the allocation reaches the backend


def test_pasa_survives_scores_that_overflow_fp16():
    # Q·Kᵀ ≈ 64 · 40 · 40 ≈ 1e5 > 65504: the all-FP16 allocation overflows, PASA's shifted scores do not.
    q = rnd(1, 1, 16, 64, seed=24, mean=40.0)
    k = rnd(1, 1, 128, 64, seed=25, mean=40.0)
    v = rnd(1, 1, 128, 64, seed=26)
    ref, _ = ref_attention(q, k, v, torch.ones(1, dtype=torch.bool), 1 / 8)
    out16, _ = bnsd_call(q, k, v, scale=1 / 8, precision="fp16", safety_net=False)
    assert not torch.isfinite(out16.float()).all()
    out, _ = bnsd_call(q, k, v, scale=1 / 8, precision="pasa", safety_net=False)
    assert torch.isfinite(out.float()).all() and rel_rmse(out, ref) < 2e-2


def test_safety_net_recomputes_overflowed_rows_on_the_fp32_path():
    # Head 0 overflows in FP16 (scores ~1e5), head 1 does not: only head 0's rows are recomputed.
    q = torch.cat([rnd(1, 1, 16, 64, seed=24, mean=40.0), rnd(1, 1, 16, 64, seed=30)], dim=1)
    k = torch.cat([rnd(1, 1, 128, 64, seed=25, mean=40.0), rnd(1, 1, 128, 64, seed=31)], dim=1)
    v = rnd(1, 2, 128, 64, seed=26)
    raw, raw_lse = bnsd_call(q, k, v, scale=1 / 8, precision="fp16", safety_net=False, softmax_lse_flag=True)
    out, lse = bnsd_call(q, k, v, scale=1 / 8, precision="fp16", softmax_lse_flag=True)
    wide, wide_lse = bnsd_call(q, k, v, scale=1 / 8, precision="fp32", softmax_lse_flag=True)
    assert not torch.isfinite(raw[:, 0]).any() and torch.isfinite(raw[:, 1]).all()
    assert torch.equal(out[:, 0], wide[:, 0]) and torch.equal(lse[:, 0], wide_lse[:, 0])
    assert torch.equal(out[:, 1], raw[:, 1]) and torch.equal(lse[:, 1], raw_lse[:, 1])
    # Padded rows keep their +inf lse and are not "overflowed": varlen costs no recompute of them.
    out, lse = bnsd_call(q, k, v, scale=1 / 8, precision="fp16", softmax_lse_flag=True, actual_seq_lengths=[9])
    assert torch.all(lse[:, :, 9:] == math.inf) and torch.all(out[:, :, 9:] == 0)
    assert torch.equal(out[:, 0, :9], wide[:, 0, :9])


def test_block_size_and_beta():
    q, k, v = qkv(s1=40, s2=200, d=32, seed=27)
    ref, _ = ref_attention(q, k, v, torch.ones(1, dtype=torch.bool), 1 / math.sqrt(32))
    for bq, bkv in ((16, 16), (8, 32), (128, 64)):
        out, _ = bnsd_call(q, k, v, block_q=bq, block_kv=bkv)
        assert_matches(out, ref)
    a, _ = bnsd_call(q, k, v, precision="pasa", beta=0.9)
    b, _ = bnsd_call(q, k, v, precision="pasa", beta=0.99)
    assert rel_rmse(a, ref) < 1e-2 and rel_rmse(b, ref) < 1e-2 and not torch.equal(a, b)


# ------------------------------------------------------------------------------------------------
# errors: each names the argument
# ------------------------------------------------------------------------------------------------

def _ok():
    q, k, v = qkv(b=2, n=4, nkv=2, s1=6, s2=8, d=8)
    return q, k, v, dict(num_heads=4, num_key_value_heads=2, input_layout="BNSD")


def test_triton_backend_refuses_cpu_tensors_without_the_interpreter(monkeypatch):
    from pasa_npu.backends import triton as tb

    monkeypatch.setattr(tb, "_INTERPRET", False)  # tests/conftest.py turns the interpreter on without a GPU
    q, k, v, kw = _ok()
    with pytest.raises(RuntimeError, match="backend='triton': needs CUDA tensors"):
        fused_attention(q, k, v, **kw, backend="triton")


@pytest.mark.parametrize("change,exc,match", [
    (dict(query=[1.0]), TypeError, "query must be a torch.Tensor"),
    (dict(key=None), TypeError, "key must be a torch.Tensor"),
    (dict(value=3), TypeError, "value must be a torch.Tensor"),
    (dict(query="int8"), ValueError, "query must be float16, bfloat16 or float32"),
    (dict(key="float32"), ValueError, "key must have query's dtype"),
    (dict(value="bfloat16"), ValueError, "value must have query's dtype"),
    (dict(input_layout="SBH"), ValueError, "input_layout must be one of"),
    (dict(input_layout=1), TypeError, "input_layout must be a str"),
    (dict(input_layout="BSH"), ValueError, "query must be 3-D"),
    (dict(num_heads=3), ValueError, "num_heads"),
    (dict(num_heads=0), ValueError, "num_heads must be >= 1"),
    (dict(num_heads=4.0), TypeError, "num_heads must be an int"),
    (dict(num_key_value_heads=3), ValueError, "num_key_value_heads"),
    (dict(num_key_value_heads=4), ValueError, "num_key_value_heads .4. must equal key's N dim"),
    (dict(num_key_value_heads=-1), ValueError, "num_key_value_heads must be >= 0"),
    (dict(key="shorter_value"), ValueError, "value must have key's shape"),
    (dict(key="other_d"), ValueError, "key's head dim"),
    (dict(key="other_b"), ValueError, "key's batch"),
    (dict(sparse_mode=5), ValueError, "sparse_mode must be one of"),
    (dict(sparse_mode=True), TypeError, "sparse_mode must be an int"),
    (dict(inner_precise=4), ValueError, "inner_precise must be one of"),
    (dict(scale=0.0), ValueError, "scale must be a positive finite number"),
    (dict(scale=float("nan")), ValueError, "scale must be a positive finite number"),
    (dict(scale=-1.0), ValueError, "scale must be a positive finite number"),
    (dict(scale="1"), TypeError, "scale must be a real number"),
    (dict(scale=1e37), ValueError, r"scale must be a positive finite number at most 2\*\*64"),
    (dict(scale=float("inf")), ValueError, "scale must be a positive finite number"),
    (dict(precision="bf16"), ValueError, "precision must be one of"),
    (dict(precision=3), TypeError, "precision must be None or one of"),
    (dict(backend="cuda"), ValueError, "backend must be None or one of"),
    (dict(backend="npu", precision="fp16"), ValueError, r"backend='npu': the AscendC kernel implements precision"),
    (dict(backend="npu", precision="pasa", block_kv=64), ValueError, r"KV block is 128.*block_kv=64"),
    (dict(block_q=0), ValueError, "block_q must be None or a positive int"),
    (dict(block_kv=-1), ValueError, "block_kv must be None or a positive int"),
    (dict(block_kv=16.0), TypeError, "block_kv must be None or a positive int"),
    (dict(block_table=torch.zeros(2, 1, dtype=torch.int32)), ValueError, "block_size must be a multiple of 16"),
    (dict(block_size=(16, 64)), TypeError, "block_size must be an int .FIA's PageAttention"),
    (dict(check_inputs=1), TypeError, "check_inputs must be None or a bool"),
    (dict(safety_net=None), TypeError, "safety_net must be a bool"),
    (dict(beta=1.0), ValueError, r"beta must be None or in \[0, 1\)"),
    (dict(beta=-0.1), ValueError, r"beta must be None or in \[0, 1\)"),
    (dict(beta="0.9"), TypeError, "beta"),
    (dict(softmax_lse_flag=1), TypeError, "softmax_lse_flag must be a bool"),
    (dict(pre_tokens=1.5), TypeError, "pre_tokens must be an int"),
    (dict(pre_tokens=2**70), ValueError, r"pre_tokens must be in \[-9223372036854775807, 9223372036854775807\]"),
    (dict(next_tokens=-2**63), ValueError, r"next_tokens must be in \[-9223372036854775807, "),
    (dict(next_tokens=None), TypeError, "next_tokens must be an int"),
    (dict(actual_seq_lengths=[6, 7]), ValueError, r"actual_seq_lengths\[1\] = 7"),
    (dict(actual_seq_lengths=[7, 6]), ValueError, r"actual_seq_lengths\[0\] = 7 must be in \[0, 6\]"),
    (dict(actual_seq_lengths=[-1, 6]), ValueError, r"actual_seq_lengths\[0\] = -1"),
    (dict(actual_seq_lengths=[]), ValueError, "actual_seq_lengths must have 1 or at least"),
    (dict(actual_seq_lengths=5), TypeError, "actual_seq_lengths must be None, a sequence"),
    (dict(actual_seq_lengths=[2.0, 3.0]), TypeError, "actual_seq_lengths must hold ints"),
    (dict(actual_seq_lengths_kv=[9]), ValueError, r"actual_seq_lengths_kv\[0\] = 9 must be in \[0, 8\]"),
    (dict(actual_seq_lengths_kv=torch.tensor([1.0, 2.0])), TypeError, "actual_seq_lengths_kv must be"),
    (dict(atten_mask="float"), ValueError, "atten_mask must be a bool, int8 or uint8"),
    (dict(atten_mask="int2", check_inputs=True), ValueError, "atten_mask of dtype int8/uint8 must hold only 0"),
    (dict(atten_mask="small"), ValueError, "atten_mask shape"),
    (dict(atten_mask="5d"), ValueError, "atten_mask must be 2-, 3- or 4-D"),
    (dict(atten_mask="batch3"), ValueError, "atten_mask shape"),
    (dict(atten_mask=[[True]]), TypeError, "atten_mask must be a torch.Tensor"),
    (dict(sparse_mode=1), ValueError, "atten_mask is required for sparse_mode=1"),
    (dict(sparse_mode=3), ValueError, "atten_mask is required for sparse_mode=3"),
    (dict(sparse_mode=2, atten_mask="small"), ValueError, "compressed causal mask of shape"),
    (dict(sparse_mode=4, atten_mask="lower", check_inputs=True), ValueError, "must be the compressed causal mask"),
    (dict(sparse_mode=4, atten_mask="compressed", pre_tokens=-3, next_tokens=2), ValueError,
     r"pre_tokens \(-3\) \+ next_tokens \(2\) must be >= 0"),
    (dict(atten_mask="zeros", pre_tokens=1, next_tokens=-2), ValueError, "pre_tokens .1. . next_tokens .-2."),
])
def test_bad_arguments_are_named(change, exc, match):
    q, k, v, kw = _ok()
    tensors = {"query": q, "key": k, "value": v}
    change = dict(change)
    for name in ("query", "key", "value"):
        if name in change:
            val = change.pop(name)
            if val in ("int8", "float32", "bfloat16"):
                tensors[name] = tensors[name].to(getattr(torch, val))
            elif val == "shorter_value":
                tensors["value"] = tensors["value"][:, :, :5]
            elif val == "other_d":
                tensors["key"] = torch.zeros(2, 2, 8, 4, dtype=torch.float16)
                tensors["value"] = tensors["key"]
            elif val == "other_b":
                tensors["key"] = torch.zeros(1, 2, 8, 8, dtype=torch.float16)
                tensors["value"] = tensors["key"]
            else:
                tensors[name] = val
    masks = {"float": torch.zeros(6, 8, dtype=torch.float16), "int2": torch.full((6, 8), 2, dtype=torch.int8),
             "small": torch.zeros(5, 8, dtype=torch.bool), "5d": torch.zeros(1, 1, 1, 6, 8, dtype=torch.bool),
             "batch3": torch.zeros(3, 6, 8, dtype=torch.bool), "lower": ~COMPRESSED, "compressed": COMPRESSED,
             "zeros": torch.zeros(6, 8, dtype=torch.bool)}
    if isinstance(change.get("atten_mask"), str):
        change["atten_mask"] = masks[change["atten_mask"]]
    kw.update(change)
    with pytest.raises(exc, match=match):
        fused_attention(tensors["query"], tensors["key"], tensors["value"], **kw)


def test_layout_specific_errors():
    q = torch.zeros(2, 6, 12, dtype=torch.float16)  # BSH, H = 12
    k = torch.zeros(2, 8, 6, dtype=torch.float16)
    with pytest.raises(ValueError, match=r"num_heads \(5\) must divide query's hidden size H = 12"):
        fused_attention(q, k, k, num_heads=5)
    with pytest.raises(ValueError, match="key's hidden size 6 must be num_heads"):
        fused_attention(q, k, k, num_heads=4)  # D = 3, 4 KV heads would need H_kv = 12
    fused_attention(q, k, k, num_heads=4, num_key_value_heads=2)  # 2 KV heads of D = 3: fine
    with pytest.raises(ValueError, match="num_heads .4. must equal query's N dim 6"):
        fused_attention(torch.zeros(2, 6, 3, 8, dtype=torch.float16), torch.zeros(2, 6, 3, 8, dtype=torch.float16),
                        torch.zeros(2, 6, 3, 8, dtype=torch.float16), num_heads=4, input_layout="BNSD")
    with pytest.raises(ValueError, match="head dim D .* must be >= 1"):
        fused_attention(torch.zeros(1, 2, 3, 0), torch.zeros(1, 2, 3, 0), torch.zeros(1, 2, 3, 0), num_heads=2,
                        input_layout="BNSD")
    t = torch.zeros(10, 2, 8, dtype=torch.float16)
    with pytest.raises(ValueError, match="actual_seq_lengths is required with input_layout='TND'"):
        fused_attention(t, t, t, num_heads=2, input_layout="TND")
    with pytest.raises(ValueError, match="actual_seq_lengths must be cumulative"):
        fused_attention(t, t, t, num_heads=2, input_layout="TND", actual_seq_lengths=[5, 3],
                        actual_seq_lengths_kv=[5, 10])
    with pytest.raises(ValueError, match=r"actual_seq_lengths_kv\[-1\] = 11 exceeds"):
        fused_attention(t, t, t, num_heads=2, input_layout="TND", actual_seq_lengths=[5, 10],
                        actual_seq_lengths_kv=[5, 11])
    with pytest.raises(ValueError, match="one entry per batch"):
        fused_attention(t, t, t, num_heads=2, input_layout="TND", actual_seq_lengths=[5, 10],
                        actual_seq_lengths_kv=[10])
    with pytest.raises(ValueError, match="input_layout='TND' supports sparse_mode 0 without atten_mask"):
        fused_attention(t, t, t, num_heads=2, input_layout="TND", actual_seq_lengths=[10], actual_seq_lengths_kv=[10],
                        atten_mask=torch.zeros(10, 10, dtype=torch.bool))
    with pytest.raises(ValueError, match="query must be 3-D .T, N, D."):
        fused_attention(t[None], t[None], t[None], num_heads=2, input_layout="TND", actual_seq_lengths=[10],
                        actual_seq_lengths_kv=[10])


def test_mixed_devices_are_refused():
    q, k, v = qkv(s1=3, s2=3, d=8)
    meta = torch.zeros(2, 4, 3, 8, dtype=torch.float16, device="meta")
    with pytest.raises(ValueError, match="key is on meta but query is on cpu"):
        bnsd_call(q, meta, v)
    with pytest.raises(ValueError, match="atten_mask is on meta"):
        bnsd_call(q, k, v, atten_mask=torch.zeros(3, 3, dtype=torch.bool, device="meta"))


def test_meta_tensors_are_refused_by_the_call_and_shaped_by_the_operator():
    meta = torch.zeros(2, 4, 3, 8, dtype=torch.float16, device="meta")
    with pytest.raises(ValueError, match="query, key and value are meta tensors"):
        bnsd_call(meta, meta, meta)
    op = torch.ops.pasa_npu.fused_attention
    out, lse = op(meta, meta, meta, None, None, None, actual_seq_lengths=None, actual_seq_lengths_kv=None, num_heads=4,
                  scale=0.25, pre_tokens=INT_MAX, next_tokens=INT_MAX, input_layout="BNSD", num_key_value_heads=0,
                  sparse_mode=0, inner_precise=0, block_size=0, softmax_lse_flag=True, precision=None, beta=None,
                  block_q=None, block_kv=None, backend=None, check_inputs=None, safety_net=True)
    assert out.device.type == "meta" and out.shape == meta.shape and lse.shape == (2, 4, 3, 1)


@pytest.mark.skipif(not torch.cuda.is_available(),
                    reason="needs a CUDA GPU (CI has none); run on the GPU machine: "
                           "PYTHONPATH=python python3 -m pytest tests/backends/test_interface.py -k cuda")
@pytest.mark.parametrize("precision", ["pasa", "fp16"])
def test_cuda_tensors_give_the_cpu_numbers_in_every_layout(precision):
    """The reference backend on the GPU; in the FP16-state allocations the emulation is exact, so
    every layout, with GQA, a causal mode and varlen, gives the CPU's output bits. lse = m + log l
    (+ I·F) is computed in FP32, where CUDA's log may differ in the last bit."""
    q, k, v = qkv(b=2, n=4, nkv=2, s1=70, s2=150, d=64)
    kw = dict(num_heads=4, num_key_value_heads=2, scale=0.125, precision=precision, softmax_lse_flag=True,
              sparse_mode=3, atten_mask=COMPRESSED, actual_seq_lengths_kv=[150, 101], backend="reference")
    for layout, (lq, lk, lv), _ in _layouts(q, k, v):
        cpu_out, cpu_lse = fused_attention(lq, lk, lv, input_layout=layout, **kw)
        gpu = fused_attention(lq.cuda(), lk.cuda(), lv.cuda(), input_layout=layout,
                              **{**kw, "atten_mask": COMPRESSED.cuda()})
        assert gpu[0].device.type == "cuda"
        assert torch.equal(gpu[0].cpu(), cpu_out), layout
        torch.testing.assert_close(gpu[1].cpu(), cpu_lse, rtol=4e-6, atol=1e-6, msg=layout)


@pytest.mark.parametrize("scale", [2e4, 1e6, 2.0**64])
def test_every_allocation_computes_a_large_scale_or_refuses_it_by_name(scale):
    """N(0, 1) inputs at a large scale (pasa_rs once returned NaN from ~2·10⁴ on): with the safety net,
    every allocation is finite, with an lse within 10⁻⁶ of float64's (relative) and as accurate as fp32 where
    its scores are FP32 or its overflowing rows are recomputed on the fp32 path; fp16_fp32 (FP16 scores, which
    do not overflow here) is its golden model's result, its lse within the FP16 rounding of the scores (2⁻¹¹).
    PASA's M refuses a scale beyond 65504, by name."""
    from pasa_npu import golden

    q, k, v = qkv(b=1, n=2, s1=24, s2=300, d=64, seed=40)
    ref, ref_lse = ref_attention(q, k, v, torch.ones(1, dtype=torch.bool), scale)
    fp32, _ = bnsd_call(q, k, v, scale=scale, precision="fp32")
    for precision in PRECISIONS:
        if ALLOCATIONS[precision].shifted and scale > 65504:
            with pytest.raises(ValueError, match=r"scale must be in \[.*\] for the shifting matrix"):
                bnsd_call(q, k, v, scale=scale, precision=precision)
            continue
        out, lse = bnsd_call(q, k, v, scale=scale, precision=precision, softmax_lse_flag=True)
        assert torch.isfinite(out).all() and torch.isfinite(lse).all(), precision
        lse_tol = 2.0**-11 if precision == "fp16_fp32" else 1e-6
        assert float(((lse[..., 0].double() - ref_lse) / ref_lse).abs().max()) < lse_tol, precision
        if precision == "fp16_fp32":
            g_out, _ = golden.attention(q.numpy(), k.numpy(), v.numpy(), precision=precision, scale=scale)
            assert torch.equal(out, torch.from_numpy(g_out))
        else:
            assert rel_rmse(out, ref) <= 2 * rel_rmse(fp32, ref) + 1e-6, precision


def test_a_scale_the_shift_matrix_cannot_hold_is_refused_by_name_before_any_work():
    q, k, v = qkv(s1=4, s2=8, d=16)
    with pytest.raises(ValueError, match=r"scale must be in \[.*\] for the shifting matrix"):
        bnsd_call(q, k, v, scale=1e6, precision="pasa_fp32")
    out, _ = bnsd_call(q, k, v, scale=1e6, precision="fp32")  # no shift matrix: any finite scale
    assert out.shape == q.shape
