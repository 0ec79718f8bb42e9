"""PageAttention (FIA's block_table / block_size): paged key/value caches against dense ones and float64."""

from __future__ import annotations

import importlib.util
import math

import numpy as np
import pytest
import torch

import pasa_npu
from pasa_npu import golden, npu_host_model
from support import COMPRESSED, TRITON_BOUNDS, _inputs, _paged, interpreted


#: Allocations, and whether their output and lse are held to float64 here (PASA's Algorithm 1 recovers
#: its lse through I·F, off by ~1e-2 on these inputs: it is held to equality with dense decode only).
PRECISIONS = [("fp32", True), ("pasa_fp32", False), ("pasa_rs", True)]


@pytest.mark.parametrize("four_d", [False, True])
@pytest.mark.parametrize("precision, accurate", PRECISIONS)
@pytest.mark.parametrize("seed", [0, 1])
def test_paged_decode_equals_dense_decode(four_d, precision, accurate, seed):
    rng = np.random.default_rng(seed)
    b, n, nkv, d, page = 3, 8, 2, 64, 32
    lens = [int(x) for x in rng.integers(1, 300, b)]
    lens[0] = 3 * page  # a full last page
    q, k, v = _inputs(b, n, nkv, 1, max(lens), d, seed, mean=2.0)
    kc, vc, table = _paged(k, v, lens, page, rng, four_d, share=seed == 1)
    if seed == 1:  # batch 1 shares batch 0's first page: make the dense keys say the same
        k[1, :, :page], v[1, :, :page] = k[0, :, :page], v[0, :, :page]
    kw = dict(num_heads=n, num_key_value_heads=nkv, input_layout="BNSD", scale=d ** -0.5, softmax_lse_flag=True,
              actual_seq_lengths_kv=lens, precision=precision)
    out, lse = pasa_npu.fused_attention(q, kc, vc, block_table=table, block_size=page, **kw)
    dense, dense_lse = pasa_npu.fused_attention(q, k, v, **kw)
    assert torch.equal(out, dense) and torch.equal(lse, dense_lse)
    for i, c in enumerate(lens if accurate else ()):
        ref, ref_lse = golden.reference(q[i:i + 1].numpy(), k[i:i + 1, :, :c].numpy(), v[i:i + 1, :, :c].numpy(),
                                        scale=d ** -0.5)
        err = np.sqrt(((out[i].float().numpy() - ref[0]) ** 2).mean() / (ref[0] ** 2).mean())
        assert err < 3e-3, (i, err)
        assert np.abs(lse[i, ..., 0].numpy() - ref_lse[0]).max() < 2e-3


def test_paged_multi_token_queries_with_causal_mask_and_bsh():
    """Speculative decoding: a few new tokens per sequence, bottom-right causal over the cache."""
    rng = np.random.default_rng(5)
    b, n, nkv, s1, d, page = 2, 4, 1, 4, 32, 16
    lens = [70, 37]
    q, k, v = _inputs(b, n, nkv, s1, max(lens), d, seed=5)
    kc, vc, table = _paged(k, v, lens, page, rng, four_d=False)
    qb = q.transpose(1, 2).reshape(b, s1, n * d)
    kw = dict(num_heads=n, num_key_value_heads=nkv, input_layout="BSH", scale=d ** -0.5, softmax_lse_flag=True,
              actual_seq_lengths_kv=lens, sparse_mode=3, atten_mask=COMPRESSED, precision="fp32")
    out, lse = pasa_npu.fused_attention(qb, kc, vc, block_table=table, block_size=page, **kw)
    for i, c in enumerate(lens):
        mask = np.triu(np.ones((s1, c), bool), k=c - s1 + 1)
        ref, ref_lse = golden.reference(q[i:i + 1].numpy(), k[i:i + 1, :, :c].numpy(), v[i:i + 1, :, :c].numpy(),
                                        scale=d ** -0.5, mask=mask)
        got = out[i].reshape(s1, n, d).transpose(0, 1).float().numpy()
        assert np.abs(got - ref[0]).max() < 2e-3
        assert np.abs(lse[i, ..., 0].numpy() - ref_lse[0]).max() < 1e-4


def _bad_setup():
    rng = np.random.default_rng(9)
    q, k, v = _inputs(2, 2, 2, 1, 40, 16, seed=9)
    kc, vc, table = _paged(k, v, [40, 20], 16, rng, four_d=True)
    kw = dict(num_heads=2, input_layout="BNSD", actual_seq_lengths_kv=[40, 20], block_size=16)
    return q, kc, vc, table, kw


@pytest.mark.parametrize("change, match", [
    (dict(block_table="out_of_range"), r"block_table\[0\] holds a block id outside the cache"),
    (dict(block_table="negative"), r"block_table\[0\] holds a block id outside the cache"),
    (dict(block_table="out_of_range", check_inputs=True), r"block_table holds block ids in \[.*\]; they must lie in"),
    (dict(block_table="short"), r"actual_seq_lengths_kv\[0\] = 40 must be in \[0, 32\] \(the keys a block_table "
                                r"row of 2 pages of block_size 16 addresses\)"),
    (dict(block_table="float"), "block_table must be a 2-D int32 tensor"),
    (dict(block_table="rows"), r"block_table must have a row for each batch \(at least B = 2 rows"),
    (dict(block_size=100), "block_size must be a multiple of 16 from 16 to 512"),
    (dict(block_size=32), r"key/value caches with block_table .PageAttention. must be"),
    (dict(actual_seq_lengths_kv=None), "actual_seq_lengths_kv is required with block_table"),
])
def test_bad_page_tables_are_named(change, match):
    q, kc, vc, table, kw = _bad_setup()
    tables = {"out_of_range": table.clone().index_fill_(1, torch.tensor([0]), kc.shape[0] + 5),
              "negative": table.clone().index_fill_(1, torch.tensor([0]), -1),
              "short": table[:, :2], "float": table.float(), "rows": table[:1]}
    kw.update(change)
    if isinstance(kw.get("block_table"), str):
        kw["block_table"] = tables[kw["block_table"]]
    elif "block_table" not in change:
        kw["block_table"] = table
    with pytest.raises(ValueError, match=match):
        pasa_npu.fused_attention(q, kc, vc, **kw)


# --- the Triton kernel reading the caches through the table (tests/conftest.py: the interpreter on CPU) ---

#: The table is read where the keys are: the attention kernel (the default's path; fp32 takes the same loads),
#: PASA's K' pre-pass (pasa_fp32 takes the same) and pasa_rs's centring pre-pass.
TRITON_PRECISIONS = ["pasa", "pasa_rs", "fp32_frame"]


def _triton_pair(q, kc, vc, table, k, v, lens, page, precision, nkv, **extra):
    """The paged call (one kernel over all batches) and the dense one (one call per batch), both Triton."""
    n, d = q.shape[1], q.shape[3]
    kw = dict(num_heads=n, num_key_value_heads=nkv, input_layout="BNSD", scale=d ** -0.5, softmax_lse_flag=True,
              actual_seq_lengths_kv=lens, precision=precision, backend="triton", block_kv=16, **extra)
    paged = pasa_npu.fused_attention(q, kc, vc, block_table=table, block_size=page, **kw)
    return paged, pasa_npu.fused_attention(q, k, v, **kw)


def _check_float64(out, lse, q, k, v, lens, precision, mask_of=None):
    err_bound, lse_bound = TRITON_BOUNDS[precision]
    d = q.shape[-1]
    for i, c in enumerate(lens):
        mask = None if mask_of is None else mask_of(c)
        if c == 0 or (mask is not None and mask.all()):
            continue
        ref, ref_lse = golden.reference(q[i:i + 1].numpy(), k[i:i + 1, :, :c].numpy(), v[i:i + 1, :, :c].numpy(),
                                        scale=d ** -0.5, mask=mask)
        live = np.isfinite(ref_lse[0])
        got = out[i].float().numpy()
        err = np.sqrt(((got - ref[0]) ** 2).mean() / (ref[0] ** 2).mean())
        assert err < err_bound, (i, err)
        if lse_bound is not None:
            assert np.abs(lse[i, ..., 0].numpy()[live] - ref_lse[0][live]).max() < lse_bound


@interpreted
@pytest.mark.parametrize("precision, four_d", [(p, False) for p in TRITON_PRECISIONS] + [("fp32_frame", True)])
def test_triton_paged_decode_equals_triton_dense(precision, four_d):
    """Decode, GQA 4:1, shuffled pages, batch 1 sharing batch 0's first page, partial last pages and an
    empty batch. The kernel's KV blocks and splits follow each batch's own key positions, not its pages,
    so under the interpreter (two splits, as for each dense call) paged and dense are bit-identical. On a
    GPU the paged call picks its split count for B·Nkv programs, the dense calls for Nkv each: fp32 then
    differs by the split merge's rounding, PASA by its per-split blocks (within the float64 bounds)."""
    rng = np.random.default_rng(3)
    b, n, nkv, d, page = 4, 8, 2, 32, 16
    lens = [48, 21, 0, 37]
    q, k, v = _inputs(b, n, nkv, 1, max(lens), d, seed=3, mean=2.0)
    kc, vc, table = _paged(k, v, lens, page, rng, four_d, share=True)
    k[1, :, :page], v[1, :, :page] = k[0, :, :page], v[0, :, :page]
    (out, lse), (dense, dense_lse) = _triton_pair(q, kc, vc, table, k, v, lens, page, precision, nkv)
    assert torch.equal(out, dense) and torch.equal(lse, dense_lse)
    assert torch.all(out[2] == 0) and torch.all(lse[2] < -1e38)  # no key: out 0 and FIA's lowest lse
    _check_float64(out, lse, q, k, v, lens, precision)


@interpreted
@pytest.mark.parametrize("precision", TRITON_PRECISIONS)
def test_triton_paged_spec_decode_bottom_right_causal(precision):
    """Speculative decoding: 4 new tokens per sequence, GQA 2:1, sparse_mode 3 (bottom-right causal over
    each batch's own length: the band moves with it); a batch of 3 keys leaves its first query row with
    none (out 0 and FIA's lowest lse, as the dense call gives)."""
    rng = np.random.default_rng(4)
    b, n, nkv, s1, d, page = 3, 4, 2, 4, 32, 16
    lens = [70, 3, 37]
    q, k, v = _inputs(b, n, nkv, s1, max(lens), d, seed=4, mean=2.0)
    kc, vc, table = _paged(k, v, lens, page, rng, four_d=False)
    (out, lse), (dense, dense_lse) = _triton_pair(q, kc, vc, table, k, v, lens, page, precision, nkv,
                                                  sparse_mode=3, atten_mask=COMPRESSED)
    assert torch.equal(out, dense) and torch.equal(lse, dense_lse)
    assert torch.all(out[1, :, 0] == 0) and torch.all(lse[1, :, 0] < -1e38)
    _check_float64(out, lse, q, k, v, lens, precision,
                   mask_of=lambda c: np.triu(np.ones((s1, c), bool), k=c - s1 + 1))


@interpreted
def test_triton_paged_bad_launch_arguments_are_named():
    q, kc, vc, table, kw = _bad_setup()
    from pasa_npu.backends.triton import attention
    args = dict(precision="fp32", beta=None, block_q=16, block_kv=16, scale=0.25, mask=None, block_table=table,
                page=16)
    with pytest.raises(ValueError, match="kv_info must be a contiguous"):
        attention(q, kc, vc, kv_info=torch.tensor([40, 20]), **args)
    with pytest.raises(ValueError, match="kv_info must be a contiguous"):
        attention(q, kc, vc, kv_info=torch.zeros(2, 4, dtype=torch.int32), **args)
    with pytest.raises(ValueError, match="block_table must be a"):
        attention(q, kc, vc, kv_info=torch.zeros(2, 5, dtype=torch.int32), **dict(args, block_table=table.long()))


def _check_float64_rows(out, lse, q, k, v, q_lens, kv_lens, precision, mask_of):
    """:func:`_check_float64` for per-batch query lengths: batch i's first q_lens[i] rows against float64,
    its other rows FIA's padding (out 0, lse +inf)."""
    err_bound, lse_bound = TRITON_BOUNDS[precision]
    d = q.shape[-1]
    for i, (r, c) in enumerate(zip(q_lens, kv_lens)):
        assert torch.all(out[i, :, r:] == 0) and torch.all(lse[i, :, r:] == math.inf)
        if r == 0 or c == 0:
            continue
        mask = mask_of(i, r, c)
        ref, ref_lse = golden.reference(q[i:i + 1, :, :r].numpy(), k[i:i + 1, :, :c].numpy(),
                                        v[i:i + 1, :, :c].numpy(), scale=d ** -0.5, mask=mask)
        live = np.isfinite(ref_lse[0])
        got = out[i, :, :r].float().numpy()
        err = np.sqrt(((got - ref[0]) ** 2).mean() / (ref[0] ** 2).mean())
        assert err < err_bound, (i, err)
        if lse_bound is not None:
            assert np.abs(lse[i, :, :r, 0].numpy()[live] - ref_lse[0][live]).max() < lse_bound


def _check_causal_paged_equals_dense(q, kc, vc, table, k, v, q_lens, kv_lens, page, precision, nkv):
    """Bottom-right causal with per-batch query lengths: the paged Triton call equals the dense Triton calls
    bit for bit, its valid rows within the float64 bounds."""
    (out, lse), (dense, dense_lse) = _triton_pair(q, kc, vc, table, k, v, kv_lens, page, precision, nkv,
                                                  sparse_mode=3, atten_mask=COMPRESSED, actual_seq_lengths=q_lens)
    assert torch.equal(out, dense) and torch.equal(lse, dense_lse)
    _check_float64_rows(out, lse, q, k, v, q_lens, kv_lens, precision,
                        mask_of=lambda i, r, c: np.triu(np.ones((r, c), bool), k=c - r + 1))


@interpreted
@pytest.mark.parametrize("precision", TRITON_PRECISIONS)
def test_triton_paged_prefill_with_query_lengths_equals_triton_dense(precision):
    """Prefill-sized queries (up to 40 rows per KV head: several of the interpreter's 16-row tiles, so
    PASA's shift runs as a pre-pass reading the pages), per-batch query and key lengths (a batch with no
    query row), bottom-right causal, GQA 2:1, shuffled pages of 16 with a shared first page: equal to the
    dense Triton calls (one per batch) bit for bit, valid rows within the float64 bounds, padded rows
    FIA's padding."""
    rng = np.random.default_rng(6)
    b, n, nkv, s1, d, page = 3, 4, 2, 20, 32, 16
    kv_lens, q_lens = [45, 26, 37], [20, 13, 0]
    q, k, v = _inputs(b, n, nkv, s1, max(kv_lens), d, seed=6, mean=2.0)
    kc, vc, table = _paged(k, v, kv_lens, page, rng, four_d=precision in ("fp32", "pasa"), share=True)
    k[1, :, :page], v[1, :, :page] = k[0, :, :page], v[0, :, :page]
    _check_causal_paged_equals_dense(q, kc, vc, table, k, v, q_lens, kv_lens, page, precision, nkv)


@interpreted
@pytest.mark.parametrize("precision", ["fp32", "pasa_rs"])
def test_triton_paged_split_decode_with_query_lengths(precision):
    """Speculative decoding with per-batch query lengths (4, 3, 1 of 4 rows): one query tile per KV head,
    so the kernel splits each batch's KV blocks (two splits under the interpreter) and merges them; the
    rows past a batch's length, which no program writes, come back as FIA's padding. Equal to the dense
    Triton calls bit for bit."""
    rng = np.random.default_rng(7)
    b, n, nkv, s1, d, page = 3, 4, 2, 4, 32, 16
    kv_lens, q_lens = [70, 40, 33], [4, 3, 1]
    q, k, v = _inputs(b, n, nkv, s1, max(kv_lens), d, seed=7, mean=2.0)
    kc, vc, table = _paged(k, v, kv_lens, page, rng, four_d=False)
    _check_causal_paged_equals_dense(q, kc, vc, table, k, v, q_lens, kv_lens, page, precision, nkv)


@interpreted
@pytest.mark.parametrize("precision", ["fp32", "pasa_rs"])
def test_triton_paged_user_mask_equals_triton_dense(precision):
    """A full atten_mask (sparse_mode 0, with a pre/next-tokens band) on a paged cache, read by key
    position as for dense keys; per-batch key lengths, a query row with every key masked (out 0, FIA's
    lowest lse): equal to the dense Triton calls bit for bit, within the float64 bounds."""
    rng = np.random.default_rng(8)
    b, n, nkv, s1, d, page = 2, 2, 1, 20, 32, 16
    kv_lens = [45, 30]
    q, k, v = _inputs(b, n, nkv, s1, max(kv_lens), d, seed=8, mean=2.0)
    kc, vc, table = _paged(k, v, kv_lens, page, rng, four_d=True)
    mask = torch.rand(b, 1, s1, table.shape[1] * page, generator=torch.Generator().manual_seed(8)) < 0.3
    mask[1, :, 4] = True
    (out, lse), (dense, dense_lse) = _triton_pair(q, kc, vc, table, k, v, kv_lens, page, precision, nkv,
                                                  atten_mask=mask, pre_tokens=12, next_tokens=20)
    assert torch.equal(out, dense) and torch.equal(lse, dense_lse)
    assert torch.all(out[1, :, 4] == 0) and torch.all(lse[1, :, 4] < -1e38)

    def mask_of(i, r, c):
        rel = np.arange(c)[None, :] - np.arange(r)[:, None]
        return mask[i, 0, :r, :c].numpy() | (rel < -12) | (rel > 20)

    _check_float64_rows(out, lse, q, k, v, [s1] * b, kv_lens, precision, mask_of)


def _long_paged_decode():
    """Long-context decode from a paged cache: 131 072 near-equal keys in 1024 shuffled pages (FP16 l
    of the published allocations overflows past ~65k such keys), with FP32 FA's output and lse and the
    float64 reference on the dense keys."""
    rng = np.random.default_rng(131072)
    b, n, nkv, d, page, length = 1, 2, 1, 64, 128, 131072
    g = torch.Generator().manual_seed(7)
    q = (0.05 * torch.randn(b, n, 1, d, generator=g)).half()
    k = (0.05 * torch.randn(b, nkv, length, d, generator=g)).half()
    v = (torch.randn(b, nkv, length, d, generator=g) + 3).half()
    kc, vc, table = _paged(k, v, [length], page, rng, four_d=True, spare=0)
    kw = dict(num_heads=n, num_key_value_heads=nkv, input_layout="BNSD", scale=d ** -0.5, softmax_lse_flag=True,
              actual_seq_lengths_kv=[length])
    fa32 = pasa_npu.fused_attention(q, k, v, precision="fp32", **kw)
    ref = golden.reference(q.numpy(), k.numpy(), v.numpy(), scale=d ** -0.5)
    return (q, k, v, kc, vc, table, page, kw), fa32, ref


def _assert_as_accurate_as_fp32(out, lse, fa32, ref):
    """Finite, output error against float64 within 2x FP32 FA's, lse within max(10x FP32 FA's, 1e-3)."""
    (fa32_out, fa32_lse), (ref_out, ref_lse) = fa32, ref

    def rel(x):
        return float(np.sqrt(((x.float().numpy() - ref_out) ** 2).mean() / (ref_out ** 2).mean()))

    assert torch.isfinite(out).all()
    assert rel(out) <= 2 * rel(fa32_out), (rel(out), rel(fa32_out))
    lse_err = np.abs(lse[..., 0].numpy() - ref_lse).max()
    assert lse_err <= max(10 * np.abs(fa32_lse[..., 0].numpy() - ref_lse).max(), 1e-3)


def test_default_allocation_on_131072_paged_keys_is_as_accurate_as_fp32():
    """The default allocation on the long paged decode: equal to dense decode, and as accurate as FP32 FA."""
    (q, k, v, kc, vc, table, page, kw), fa32, ref = _long_paged_decode()
    out, lse = pasa_npu.fused_attention(q, kc, vc, block_table=table, block_size=page, **kw)
    dense, dense_lse = pasa_npu.fused_attention(q, k, v, **kw)
    assert torch.equal(out, dense) and torch.equal(lse, dense_lse)
    _assert_as_accurate_as_fp32(out, lse, fa32, ref)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU: the compiled Triton kernel on 131072 "
                    "keys (CI runs the Triton paged cases above through the interpreter on small shapes)")
@pytest.mark.parametrize("precision", ["fp32_frame", "pasa_rs"])
def test_triton_overflow_free_allocations_on_131072_paged_keys_are_as_accurate_as_fp32(precision):
    """The Triton kernel's default and pasa_rs on the long paged decode, the caches read through the table on
    the GPU."""
    (q, _, _, kc, vc, table, page, kw), fa32, ref = _long_paged_decode()
    out, lse = pasa_npu.fused_attention(q.cuda(), kc.cuda(), vc.cuda(), block_table=table.cuda(), block_size=page,
                                        backend="triton", precision=precision, **kw)
    _assert_as_accurate_as_fp32(out.cpu(), lse.cpu(), fa32, ref)


# --- the AscendC kernel walking the table (backend="npu": the kernel on the host model) ---

needs_host_model = pytest.mark.skipif(importlib.util.find_spec("pasa_npu._npu_host_model") is None,
                                      reason="pasa_npu._npu_host_model is not built (pip install -e .)")
NPU_PRECISIONS = ["fp16_fp32", "pasa_fp32", "pasa", "pasa_rs", "fp32_frame"]


@needs_host_model
@pytest.mark.parametrize("precision", ["fp32_frame", "pasa_rs"])
def test_npu_overflow_free_allocations_on_131072_paged_keys_are_as_accurate_as_fp32(precision):
    """The AscendC kernel's default and pasa_rs on the long paged decode: 1024 pages walked through the table
    (split-KV over the AI cores, the splits merged through the true-scale lse), as accurate as FP32 FA."""
    (q, _, _, kc, vc, table, page, kw), fa32, ref = _long_paged_decode()
    out, lse = pasa_npu.fused_attention(q, kc, vc, block_table=table, block_size=page, backend="npu",
                                        precision=precision, safety_net=False, **kw)
    _assert_as_accurate_as_fp32(out, lse, fa32, ref)


def _dense_from_pages(kc, vc, table, nkv, d):
    """The dense (B, Nkv, max_blocks·page, D) keys and values that the table's rows describe, gathered
    independently of the library (every entry, live or not, so the dense call has the paged call's S2)."""
    out = []
    for cache in (kc, vc):
        rows = cache[table.long()]  # (B, max_blocks, page, Nkv·D) or (B, max_blocks, Nkv, page, D)
        b, blocks = table.shape
        if cache.ndim == 3:
            out.append(rows.reshape(b, -1, nkv, d).transpose(1, 2))
        else:
            out.append(rows.transpose(1, 2).reshape(b, nkv, -1, d))
    return out


def _npu_pair(q, kc, vc, table, lens, page, precision, nkv, layout="BNSD", **extra):
    """(paged, dense): the kernel reading the caches through the table, and the kernel on the dense
    keys gathered from them (same S2, same per-batch lengths, so the same tiling and KV blocks)."""
    n, d = q.shape[1], q.shape[3]
    k, v = _dense_from_pages(kc, vc, table, nkv, d)
    if layout == "BSH":
        q, k, v = (x.transpose(1, 2).reshape(x.shape[0], x.shape[2], -1) for x in (q, k, v))
    kw = dict(num_heads=n, num_key_value_heads=nkv, input_layout=layout, scale=d ** -0.5, softmax_lse_flag=True,
              actual_seq_lengths_kv=lens, precision=precision, backend="npu", safety_net=False, **extra)
    paged = pasa_npu.fused_attention(q, kc, vc, block_table=table, block_size=page, **kw)
    return paged, pasa_npu.fused_attention(q, k.contiguous(), v.contiguous(), **kw)


#: Page lengths that divide the 128-key block (16), equal it (128), straddle its boundaries (48, 144)
#: or hold several blocks (512), in both cache layouts ((num_blocks, Nkv, page, D) when four_d).
NPU_PAGES = [(16, True), (48, False), (48, True), (128, False), (144, True), (144, False), (512, True)]


@needs_host_model
@pytest.mark.parametrize("page, four_d", NPU_PAGES)
@pytest.mark.parametrize("precision", NPU_PRECISIONS)
def test_npu_paged_decode_is_bit_identical_to_dense_decode(precision, page, four_d):
    """Decode, GQA 4:1, shuffled pages, batch 1 sharing batch 0's first page, partial last pages and a
    batch with no key; 12 tasks on 24 AI cores, so the KV sequence is split across cores (split-KV)."""
    rng = np.random.default_rng(page)
    b, n, nkv, d = 3, 4, 1, 32
    lens = [2 * page, 130 + page // 2 + 5, 0]
    q, k, v = _inputs(b, n, nkv, 1, max(lens), d, seed=page, mean=2.0)
    kc, vc, table = _paged(k, v, lens, page, rng, four_d, share=True)
    (out, lse), (dense, dense_lse) = _npu_pair(q, kc, vc, table, lens, page, precision, nkv)
    assert torch.equal(out, dense) and torch.equal(lse, dense_lse)
    assert torch.all(out[2] == 0) and torch.all(lse[2] < -1e38)
    tiling = npu_host_model.tiling(q, kc, vc, block_table=table, block_size=page, num_heads=n,
                                   num_key_value_heads=nkv, input_layout="BNSD", actual_seq_lengths_kv=lens,
                                   precision=precision)
    assert tiling["hasBlockTable"] == 1 and tiling["pageSize"] == page and tiling["kvSplits"] > 1


@needs_host_model
@pytest.mark.parametrize("precision", NPU_PRECISIONS)
def test_npu_paged_decode_on_every_core_without_a_split(precision):
    """Decode with as many tasks as AI cores (2 batches x 12 KV heads, GQA 4:1, each task the 4 query heads
    of one KV head): one task per (b, kv head) walks all its KV blocks through the table, no split-KV."""
    rng = np.random.default_rng(24)
    b, n, nkv, d, page = 2, 48, 12, 16, 16
    lens = [300, 129]
    q, k, v = _inputs(b, n, nkv, 1, max(lens), d, seed=24, mean=2.0)
    kc, vc, table = _paged(k, v, lens, page, rng, four_d=False)
    (out, lse), (dense, dense_lse) = _npu_pair(q, kc, vc, table, lens, page, precision, nkv)
    assert torch.equal(out, dense) and torch.equal(lse, dense_lse)
    tiling = npu_host_model.tiling(q, kc, vc, block_table=table, block_size=page, num_heads=n,
                                   num_key_value_heads=nkv, input_layout="BNSD", actual_seq_lengths_kv=lens,
                                   precision=precision)
    assert tiling["kvSplits"] == 1 and tiling["totalTasks"] == 24


@needs_host_model
@pytest.mark.parametrize("page, four_d, causal", [(48, False, True), (144, True, False)])
@pytest.mark.parametrize("precision", NPU_PRECISIONS)
def test_npu_paged_short_queries_are_bit_identical_to_dense(precision, page, four_d, causal):
    """Five new tokens per sequence (speculative decoding), BSH query, GQA 2:1, optionally bottom-right
    causal over each batch's own length (sparse_mode 3)."""
    rng = np.random.default_rng(page + 1)
    b, n, nkv, s1, d = 2, 4, 2, 5, 32
    lens = [page + 200, 61]
    q, k, v = _inputs(b, n, nkv, s1, max(lens), d, seed=page + 1, mean=2.0)
    kc, vc, table = _paged(k, v, lens, page, rng, four_d)
    extra = dict(sparse_mode=3, atten_mask=COMPRESSED) if causal else {}
    (out, lse), (dense, dense_lse) = _npu_pair(q, kc, vc, table, lens, page, precision, nkv, layout="BSH", **extra)
    assert torch.equal(out, dense) and torch.equal(lse, dense_lse)


@needs_host_model
@pytest.mark.parametrize("table_kind, match", [
    ("out_of_range", r"block_table\[0\] holds a block id outside the cache's 8 blocks: entry 0 is 13"),
    ("negative", r"block_table\[1\] holds a block id outside the cache's 8 blocks: entry 1 is -1"),
    ("check_inputs", r"block_table holds block ids in \[.*\]; they must lie in"),
    ("short", r"actual_seq_lengths_kv\[0\] = 40 must be in \[0, 32\]"),
])
def test_npu_refuses_bad_tables_before_launch(table_kind, match):
    q, kc, vc, table, kw = _bad_setup()
    kw.update(backend="npu", precision="pasa_fp32")
    if table_kind == "out_of_range":
        table[0, 0] = kc.shape[0] + 5
    elif table_kind == "negative":
        table[1, 1] = -1
    elif table_kind == "check_inputs":
        table[0, 0] = -7  # a live page of batch 0: the check sees it before the launch
        kw["check_inputs"] = True
    else:
        table = table[:, :2]
    with pytest.raises(ValueError, match=match):
        pasa_npu.fused_attention(q, kc, vc, block_table=table, **kw)


@needs_host_model
def test_npu_ignores_table_entries_past_the_live_pages():
    """FIA's table rows are padded past each batch's live pages with anything; the kernel never reads
    those entries, so the result is the reference backend's."""
    q, kc, vc, table, kw = _bad_setup()
    table[1, 2:] = -1  # batch 1 has 20 keys: pages 0 and 1 only
    out, lse = pasa_npu.fused_attention(q, kc, vc, block_table=table, backend="npu", precision="pasa",
                                        softmax_lse_flag=True, **kw)
    ref, ref_lse = pasa_npu.fused_attention(q, kc, vc, block_table=table, backend="reference", precision="pasa",
                                            softmax_lse_flag=True, **kw)
    assert torch.equal(out, ref) and torch.equal(lse, ref_lse)


@needs_host_model
@pytest.mark.parametrize("change, match", [
    (dict(block_size=32), r"key/value caches with a block_table must be \(num_blocks >= 1, 32, 32\) or"),
    (dict(block_size=0), "block_size must be a multiple of 16 in \\[16, 512\\] with a block_table, got 0"),
    (dict(block_table="rows"), r"block_table must be 2-D \(B, max_blocks_per_seq\) with B = 2 rows"),
    (dict(block_table=None), "block_size is PageAttention's page length and needs a block_table"),
    (dict(actual_seq_lengths_kv=None), "actual_seq_lengths_kv is required with a block_table"),
])
def test_the_tiling_checks_page_attention_itself(change, match):
    """The op's own checks (pasa::ComputeTiling, which the CANN op's tiling runs too), called with the
    host model's arguments directly, past the Python front end's."""
    from pasa_npu.backends import npu

    q, kc, vc, table, _ = _bad_setup()
    args = dict(input_layout="BNSD", num_heads=2, num_key_value_heads=2, scale=0.25, beta=-1.0, sparse_mode=0,
                pre_tokens=2147483647, next_tokens=2147483647, precision="pasa_fp32", block_size=16)
    arrays = dict(actual_seq_lengths_kv=np.array([40, 20]), block_table=table.numpy())
    for key, value in change.items():
        (arrays if key in arrays else args)[key] = value
    if isinstance(arrays["block_table"], str):
        arrays["block_table"] = table.numpy()[:1]
    with pytest.raises(ValueError, match=match):
        npu.host_model().tiling(q.numpy(), kc.numpy(), vc.numpy(), **arrays, **args)


def _page_runs(table_row, page, first_key, keys, page_stride, row_stride):
    """How many runs of rows consecutive in GM keys [first_key, first_key + keys) of one batch make: the
    DataCopy issues of one KV block read through the table (pasa_kv_rows.h)."""
    pages = range(first_key // page, (first_key + keys - 1) // page + 1)
    return 1 + sum(int(table_row[p + 1]) * page_stride != int(table_row[p]) * page_stride + page * row_stride
                   for p in pages[:-1])


@needs_host_model
@pytest.mark.parametrize("precision", ["fp16_fp32", "pasa", "pasa_rs"])
@pytest.mark.parametrize("four_d, shuffled", [(True, True), (False, False)])
def test_npu_paged_decode_reads_what_dense_decode_reads(precision, four_d, shuffled):
    """The cost model's counts: a paged decode moves exactly the dense decode's bytes GM -> L1 (MTE2),
    in one more DataCopy per extra run of a KV block. A decode task's rows are the query heads of one KV
    head, so each block of K is read once per KV head by FlashAttention (S = Q K^T) and by PASA's pre-pass
    (K' = M K; S' reads K' from the workspace, dense), each block of V once per KV head. pasa_rs's pre-pass reads each block of K
    once per KV head on the AIC (its column sums) and once per 16-column strip on the AIVs (the
    centring, K' = K - u). Shuffled pages in a (num_blocks, Nkv,
    page, D) cache never continue each other in GM (Nkv = 2): a block makes one run per page it touches.
    Pages handed out in order in a (num_blocks, page, Nkv·D) cache do: one run per block, the dense count."""
    rng = np.random.default_rng(11)
    b, n, nkv, d, page = 2, 4, 2, 32, 48
    lens = [300, 157]
    q, k, v = _inputs(b, n, nkv, 1, max(lens), d, seed=11, mean=2.0)
    kc, vc, table = _paged(k, v, lens, page, rng, four_d)
    if not shuffled:  # the same pages laid out in table order: batch i's pages one after the other
        kc, vc = (c[table.flatten().long()] for c in (kc, vc))
        table = torch.arange(table.numel(), dtype=torch.int32).reshape(table.shape)
    kd, vd = _dense_from_pages(kc, vc, table, nkv, d)
    kw = dict(num_heads=n, num_key_value_heads=nkv, input_layout="BNSD", scale=d ** -0.5, actual_seq_lengths_kv=lens,
              precision=precision)
    _, _, paged = npu_host_model.count(q, kc, vc, cost={}, block_table=table, block_size=page, **kw)
    _, _, dense = npu_host_model.count(q, kd.contiguous(), vd.contiguous(), cost={}, **kw)

    def total(counters, key):
        return sum(c[key] for c in counters)

    assert total(paged, "mte2_bytes") == total(dense, "mte2_bytes")
    page_stride, row_stride = (nkv * page * d, d) if four_d else (page * nkv * d, nkv * d)
    extra_runs = [sum(_page_runs(table[i], page, j0, min(128, lens[i] - j0), page_stride, row_stride) - 1
                      for j0 in range(0, lens[i], 128)) for i in range(b)]
    k_reads = {"fp16_fp32": nkv, "pasa": nkv, "pasa_rs": nkv * (1 + d // 16)}[precision]
    assert total(paged, "mte2_calls") - total(dense, "mte2_calls") == (k_reads + nkv) * sum(extra_runs)
    assert sum(extra_runs) == (9 if shuffled else 0)  # docs/npu.md quotes the 9


@needs_host_model
@pytest.mark.parametrize("precision", ["fp16_fp32", "pasa"])
def test_npu_reads_each_table_entry_once_per_walk(precision):
    """One task (B = N = 1, 16 queries, 300 keys in pages of 48): its walk over the K blocks
    (FlashAttention's S = Q K^T, or PASA's K' pre-pass) and its walk over the V blocks each read each of
    the 7 live table entries once, though pages 2 and 5 straddle KV blocks; the dense call with the
    same lengths reads no table, so the paged call's extra scalar reads are 2 x 7."""
    rng = np.random.default_rng(48)
    b, n, nkv, s1, d, page, lens = 1, 1, 1, 16, 16, 48, [300]
    q, k, v = _inputs(b, n, nkv, s1, max(lens), d, seed=48)
    kc, vc, table = _paged(k, v, lens, page, rng, four_d=True)
    kd, vd = _dense_from_pages(kc, vc, table, nkv, d)
    kw = dict(num_heads=n, input_layout="BNSD", scale=d ** -0.5, actual_seq_lengths_kv=lens, precision=precision)
    _, _, paged = npu_host_model.count(q, kc, vc, cost={}, block_table=table, block_size=page, **kw)
    _, _, dense = npu_host_model.count(q, kd.contiguous(), vd.contiguous(), cost={}, **kw)
    assert len(paged) == 3  # one AI core: one K walk and one V walk
    assert paged[0]["scalar_accesses"] - dense[0]["scalar_accesses"] == 2 * -(-lens[0] // page)
    assert [c["scalar_accesses"] for c in paged[1:]] == [c["scalar_accesses"] for c in dense[1:]]
