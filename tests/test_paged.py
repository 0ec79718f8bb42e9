"""PageAttention (FIA's block_table / block_size): paged key/value caches against dense ones and float64."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import pasa_npu
from pasa_npu import golden

COMPRESSED = torch.triu(torch.ones(2048, 2048, dtype=torch.bool), diagonal=1)


def _paged(k, v, lens, page, rng, four_d, spare=3, share=False):
    """Scatter dense (B, Nkv, S2, D) keys/values into shuffled pages of a shared cache; returns the caches
    and the (B, max_blocks) int32 table. ``share``: batch 1 reuses batch 0's first page (a shared prefix)."""
    b, nkv, s2, d = k.shape
    need = [-(-n // page) for n in lens]
    max_blocks = max(need) + 1
    total = sum(need) + spare
    order = rng.permutation(total)
    table = torch.full((b, max_blocks), int(total - 1), dtype=torch.int32)  # unused entries: any valid id
    kc = torch.randn(total, nkv, page, d).half()  # pages no table entry reads hold garbage
    vc = torch.randn(total, nkv, page, d).half()
    nxt = 0
    for i in range(b):
        for p in range(need[i]):
            if share and i == 1 and p == 0:
                table[i, p] = table[0, 0]
                continue
            blk = int(order[nxt])
            nxt += 1
            table[i, p] = blk
            c0, c1 = p * page, min((p + 1) * page, lens[i])
            kc[blk, :, :c1 - c0] = k[i, :, c0:c1]
            vc[blk, :, :c1 - c0] = v[i, :, c0:c1]
    if not four_d:  # (num_blocks, page, Nkv·D)
        kc, vc = (c.transpose(1, 2).reshape(total, page, nkv * d) for c in (kc, vc))
    return kc, vc, table


def _inputs(b, n, nkv, s1, s2, d, seed, mean=0.0):
    g = torch.Generator().manual_seed(seed)
    q = (torch.randn(b, n, s1, d, generator=g) + mean).half()
    k = (torch.randn(b, nkv, s2, d, generator=g) + mean).half()
    v = torch.randn(b, nkv, s2, d, generator=g).half()
    return q, k, v


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
    (dict(block_table="short"), r"actual_seq_lengths_kv\[0\] = 40 must be in \[0, 32\]"),
    (dict(block_table="float"), "block_table must be a 2-D int32 tensor"),
    (dict(block_table="rows"), "block_table must have one row per batch"),
    (dict(block_size=100), "block_size must be a multiple of 16 from 16 to 512"),
    (dict(block_size=32), r"key/value caches with block_table .PageAttention. must be"),
    (dict(actual_seq_lengths_kv=None), "actual_seq_lengths_kv is required with block_table"),
    (dict(block_table=None), "block_size is FIA's PageAttention page length and needs a block_table"),
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


def test_paged_tnd_and_kernels_without_tables_say_so():
    q, kc, vc, table, kw = _bad_setup()
    with pytest.raises(ValueError, match="not 'TND'"):
        pasa_npu.fused_attention(q[0].transpose(0, 1), kc, vc, **dict(kw, input_layout="TND"), block_table=table)
    with pytest.raises(ValueError, match="backend='npu': the AscendC kernel does not walk a block_table yet"):
        pasa_npu.fused_attention(q, kc, vc, block_table=table, backend="npu", precision="pasa_fp32", **kw)
    assert math.isfinite(float(pasa_npu.fused_attention(q, kc, vc, block_table=table, **kw)[0].float().sum()))


# --- the Triton kernel reading the caches through the table (tests/conftest.py: the interpreter on CPU) ---

TRITON_PRECISIONS = ["fp32", "pasa_fp32", "pasa", "pasa_rs"]
#: Output error (RMS relative to float64) and lse error each allocation is held to against float64 on these
#: inputs (keys with mean 2: the case PASA is for). PASA's Algorithm 1 recovers lse through I·F (off by ~1e-2
#: here), so its lse is held to equality with the dense kernel only.
TRITON_BOUNDS = {"fp32": (1e-3, 2e-3), "pasa_fp32": (1.5e-2, None), "pasa": (1.5e-2, None), "pasa_rs": (1e-3, 2e-3)}


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


@pytest.mark.parametrize("precision", TRITON_PRECISIONS)
@pytest.mark.parametrize("four_d", [False, True])
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


def test_triton_paged_bad_launch_arguments_are_named():
    q, kc, vc, table, kw = _bad_setup()
    from pasa_npu.backends.triton import attention
    args = dict(precision="fp32", beta=None, block_q=16, block_kv=16, scale=0.25, mask=None, block_table=table,
                page=16)
    with pytest.raises(ValueError, match="kv_info must be a contiguous"):
        attention(q, kc, vc, kv_info=torch.tensor([40, 20]), **args)
    with pytest.raises(ValueError, match="kv_info must be a contiguous"):
        attention(q, kc, vc, kv_info=torch.zeros(2, 3, dtype=torch.int32), **args)
    with pytest.raises(ValueError, match="block_table must be a"):
        attention(q, kc, vc, kv_info=torch.zeros(2, 4, dtype=torch.int32), **dict(args, block_table=table.long()))


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
    (out, lse), (dense, dense_lse) = _triton_pair(q, kc, vc, table, k, v, kv_lens, page, precision, nkv,
                                                  sparse_mode=3, atten_mask=COMPRESSED, actual_seq_lengths=q_lens)
    assert torch.equal(out, dense) and torch.equal(lse, dense_lse)
    _check_float64_rows(out, lse, q, k, v, q_lens, kv_lens, precision,
                        mask_of=lambda i, r, c: np.triu(np.ones((r, c), bool), k=c - r + 1))


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
    (out, lse), (dense, dense_lse) = _triton_pair(q, kc, vc, table, k, v, kv_lens, page, precision, nkv,
                                                  sparse_mode=3, atten_mask=COMPRESSED, actual_seq_lengths=q_lens)
    assert torch.equal(out, dense) and torch.equal(lse, dense_lse)
    _check_float64_rows(out, lse, q, k, v, q_lens, kv_lens, precision,
                        mask_of=lambda i, r, c: np.triu(np.ones((r, c), bool), k=c - r + 1))


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


def test_default_allocation_on_131072_paged_keys_is_as_accurate_as_fp32():
    """Long-context decode from a paged cache: 131 072 near-equal keys in 1024 shuffled pages (FP16 l
    of the published allocations overflows past ~65k such keys). The default allocation's output is
    finite, equals dense decode, and its error against float64 is within 2x FP32 FA's; lse within
    max(10x FP32 FA's, 1e-3)."""
    rng = np.random.default_rng(131072)
    b, n, nkv, d, page, length = 1, 2, 1, 64, 128, 131072
    g = torch.Generator().manual_seed(7)
    q = (0.05 * torch.randn(b, n, 1, d, generator=g)).half()
    k = (0.05 * torch.randn(b, nkv, length, d, generator=g)).half()
    v = (torch.randn(b, nkv, length, d, generator=g) + 3).half()
    kc, vc, table = _paged(k, v, [length], page, rng, four_d=True, spare=0)
    kw = dict(num_heads=n, num_key_value_heads=nkv, input_layout="BNSD", scale=d ** -0.5, softmax_lse_flag=True,
              actual_seq_lengths_kv=[length])
    out, lse = pasa_npu.fused_attention(q, kc, vc, block_table=table, block_size=page, **kw)
    dense, dense_lse = pasa_npu.fused_attention(q, k, v, **kw)
    fa32, fa32_lse = pasa_npu.fused_attention(q, k, v, precision="fp32", **kw)
    assert torch.equal(out, dense) and torch.equal(lse, dense_lse) and torch.isfinite(out).all()
    ref, ref_lse = golden.reference(q.numpy(), k.numpy(), v.numpy(), scale=d ** -0.5)

    def rel(x):
        return float(np.sqrt(((x.float().numpy() - ref) ** 2).mean() / (ref ** 2).mean()))

    assert rel(out) <= 2 * rel(fa32), (rel(out), rel(fa32))
    lse_err = np.abs(lse[..., 0].numpy() - ref_lse).max()
    assert lse_err <= max(10 * np.abs(fa32_lse[..., 0].numpy() - ref_lse).max(), 1e-3)
