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
