"""The AscendC kernel on the serving path, run on the host model (npu_host_model.run: fused_attention's
validation and translation, the kernel's raw result): TND queries with dense keys and with a block table,
requests of every size mixed in one call, and FIA v2's learnable sinks."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest
import torch

import pasa_npu
from pasa_npu import npu_host_model

pytestmark = pytest.mark.skipif(importlib.util.find_spec("pasa_npu._npu_host_model") is None,
                                reason="pasa_npu._npu_host_model is not built (pip install -e .)")

COMPRESSED = torch.triu(torch.ones(2048, 2048, dtype=torch.bool), diagonal=1)
#: (query rows, keys) per request: chunked prefill, 1-token decode, 4- and 16-token speculative requests, a request
#: with no query row, a prefill of two query blocks, a request with no key. T has 3 padding rows past the last.
REQUESTS = [(37, 200), (1, 300), (4, 150), (16, 40), (0, 10), (130, 130), (2, 0)]
PADDING_ROWS = 3
#: sparse modes with their FIA arguments: none, top-left causal, bottom-right causal per request, a window.
MODES = {0: {}, 2: dict(sparse_mode=2, atten_mask=COMPRESSED), 3: dict(sparse_mode=3, atten_mask=COMPRESSED),
         4: dict(sparse_mode=4, atten_mask=COMPRESSED, pre_tokens=60, next_tokens=0)}
N, NKV, D, PAGE = 4, 2, 16, 48


def _requests(seed, mean=1.0):
    """TND query (T, N, D), dense TND keys/values (T_kv, Nkv, D) (biased keys: the case PASA is for), their
    cumulative lengths, and the same keys in shuffled pages of a shared cache with its table."""
    g = torch.Generator().manual_seed(seed)
    q_lens, kv_lens = zip(*REQUESTS)
    t, t_kv = sum(q_lens) + PADDING_ROWS, sum(kv_lens)
    q = torch.randn(t, N, D, generator=g).half()
    k = (torch.randn(t_kv, NKV, D, generator=g) + mean).half()
    v = torch.randn(t_kv, NKV, D, generator=g).half()
    pages = [-(-c // PAGE) for c in kv_lens]
    order = torch.randperm(sum(pages) + 2, generator=g)
    table = torch.full((len(REQUESTS), max(pages) + 1), int(order[-1]), dtype=torch.int32)
    kc = torch.randn(len(order), PAGE, NKV * D, generator=g).half()
    vc = torch.randn(len(order), PAGE, NKV * D, generator=g).half()
    used = 0
    for i, c in enumerate(kv_lens):
        k0 = sum(kv_lens[:i])
        for p in range(pages[i]):
            blk = int(order[used])
            used += 1
            table[i, p] = blk
            rows = min(PAGE, c - p * PAGE)
            kc[blk, :rows] = k[k0 + p * PAGE:k0 + p * PAGE + rows].reshape(rows, NKV * D)
            vc[blk, :rows] = v[k0 + p * PAGE:k0 + p * PAGE + rows].reshape(rows, NKV * D)
    return q, k, v, list(np.cumsum(q_lens)), list(np.cumsum(kv_lens)), kc, vc, table


def _kw(precision, mode, **extra):
    return dict(num_heads=N, num_key_value_heads=NKV, scale=D ** -0.5, softmax_lse_flag=True, precision=precision,
                **MODES[mode], **extra)


def _per_request(q, k, v, cq, ck, precision, mode, **extra):
    """Each request alone on dense BSND keys (a 1-row request as 2 rows with actual_seq_lengths [1], so that it
    takes the prefill path as a TND request does, not FIA's Q_S = 1 branch): its out (rows, N, D), lse (rows, N)."""
    results = []
    for i in range(len(cq)):
        q0, q1 = (cq[i - 1] if i else 0), cq[i]
        k0, k1 = (ck[i - 1] if i else 0), ck[i]
        rows = q1 - q0
        if rows == 0:
            results.append(None)
            continue
        qi = torch.zeros(1, max(rows, 2), N, D, dtype=torch.float16)
        qi[0, :rows] = q[q0:q1]
        lens = dict(actual_seq_lengths=[rows]) if rows == 1 else {}
        out, lse = npu_host_model.run(qi, k[None, k0:k1].contiguous(), v[None, k0:k1].contiguous(),
                                            input_layout="BSND", **lens, **_kw(precision, mode, **extra))
        results.append((out[0, :rows], lse[0, :, :rows, 0].T))
    return results


def _check_against_requests(out, lse, requests, cq):
    for i, res in enumerate(requests):
        if res is None:
            continue
        q0, q1 = (cq[i - 1] if i else 0), cq[i]
        assert torch.equal(out[q0:q1], res[0]), i
        assert torch.equal(lse[q0:q1, :, 0], res[1]), i
    assert torch.all(out[cq[-1]:] == 0) and torch.all(lse[cq[-1]:] == float("inf"))  # FIA's padding rows


@pytest.mark.parametrize("mode", sorted(MODES))
@pytest.mark.parametrize("precision", npu_host_model.PRECISIONS)
def test_tnd_is_bit_identical_to_each_request_alone(precision, mode):
    """A mixed serving step in one TND call, dense keys (cumulative lengths) and the same keys in shuffled pages
    of 48 through a block table: each request's rows bit for bit those of the kernel run on that request alone
    (dense BSND), in every allocation and sparse mode; GQA 2:1; the rows past the last request FIA's padding."""
    q, k, v, cq, ck, kc, vc, table = _requests(seed=mode)
    requests = _per_request(q, k, v, cq, ck, precision, mode)
    kw = _kw(precision, mode, input_layout="TND", actual_seq_lengths=cq)
    out, lse = npu_host_model.run(q, k, v, actual_seq_lengths_kv=ck, **kw)
    _check_against_requests(out, lse, requests, cq)
    kv_lens = [c for _, c in REQUESTS]
    out, lse = npu_host_model.run(q, kc, vc, actual_seq_lengths_kv=kv_lens, block_table=table, block_size=PAGE,
                                  **kw)
    _check_against_requests(out, lse, requests, cq)


def test_tnd_tiling_reads_the_requests():
    """The tiling of a TND call: B = the requests, S1 the most rows a request's tiles cover (the last runs to T),
    S2 the longest request's keys, batch strides 0, the band per request (mode 3), no split-KV or packed heads
    even where every request is one token."""
    q, k, v, cq, ck, kc, vc, table = _requests(seed=0)
    kw = dict(num_heads=N, num_key_value_heads=NKV, input_layout="TND", actual_seq_lengths=cq,
              actual_seq_lengths_kv=ck, sparse_mode=3, atten_mask=COMPRESSED)
    t = npu_host_model.tiling(q, k, v, **kw)
    assert (t["batch"], t["seqQ"], t["seqKv"], t["queryTokens"]) == (len(REQUESTS), 130, 300, q.shape[0])
    assert (t["qBatchStride"], t["kvBatchStride"], t["qRowStride"], t["kvRowStride"]) == (0, 0, N * D, NKV * D)
    assert t["bandMode"] == 1 and t["hasActualSeqQ"] == 1 and t["kvSplits"] == 1 and t["packedHeads"] == 1
    decode = npu_host_model.tiling(q[:3], k, v, **dict(kw, actual_seq_lengths=[1, 2, 3], actual_seq_lengths_kv=ck[:3]))
    assert (decode["seqQ"], decode["kvSplits"], decode["packedHeads"], decode["bandMode"]) == (1, 1, 1, 1)


def _host_args(q, k, v, cq, ck, **change):
    """The host model's own arguments (past the Python front end's checks), for the tiling's refusals."""
    arrays = dict(actual_seq_lengths=np.array(cq, np.int64), actual_seq_lengths_kv=np.array(ck, np.int64))
    args = dict(input_layout="TND", num_heads=N, num_key_value_heads=NKV, scale=0.25, beta=-1.0, sparse_mode=0,
                pre_tokens=2147483647, next_tokens=2147483647, precision="pasa_rs")
    for key, value in change.items():
        (arrays if key in arrays or key in ("atten_mask", "block_table") else args)[key] = value
    return (q.numpy(), k.numpy(), v.numpy()), arrays, args


@pytest.mark.parametrize("change, match", [
    (dict(actual_seq_lengths=np.array([5, 3], np.int64)), r"actual_seq_lengths must be cumulative \(non-decreasing"),
    (dict(actual_seq_lengths=np.array([5, 50], np.int64)), r"actual_seq_lengths's last entry 50 exceeds the tensor's "
                                                           r"40 rows"),
    (dict(actual_seq_lengths_kv=np.array([30, 20], np.int64)), r"actual_seq_lengths_kv must be cumulative"),
    (dict(actual_seq_lengths_kv=np.array([30, 90], np.int64)), r"actual_seq_lengths_kv's last entry 90 exceeds the "
                                                               r"tensor's 60 rows"),
    (dict(actual_seq_lengths_kv=np.array([30], np.int64)), r"actual_seq_lengths_kv must have one entry per batch"),
    (dict(actual_seq_lengths=None), r"actual_seq_lengths is required with input_layout TND"),
    (dict(num_heads=2, num_key_value_heads=2), r"num_heads must equal query's N dim \(input_layout TND\)"),
    (dict(atten_mask=np.zeros((1, 1, 40, 60), np.uint8)), r"input_layout TND takes no atten_mask"),
])
def test_the_tiling_refuses_bad_tnd_calls(change, match):
    """The op's own TND checks (pasa::ComputeTiling, which the CANN op's tiling runs too), before any launch."""
    from pasa_npu.backends import npu

    g = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(r, N if r == 40 else NKV, D, generator=g).half() for r in (40, 60, 60))
    arrays, lens, args = _host_args(q, k, v, [10, 40], [30, 60], **change)
    with pytest.raises(ValueError, match=match):
        npu.host_model().tiling(*arrays, **lens, **args)


def test_tnd_bad_requests_are_refused_before_launch():
    """The front end's TND checks hold for the kernel: decreasing lengths, a table too short for a request."""
    q, k, v, cq, ck, kc, vc, table = _requests(seed=0)
    kw = dict(_kw("pasa_rs", 3, input_layout="TND"), backend="npu")
    with pytest.raises(ValueError, match=r"actual_seq_lengths must be cumulative"):
        pasa_npu.fused_attention(q, k, v, actual_seq_lengths=cq[::-1], actual_seq_lengths_kv=ck, **kw)
    with pytest.raises(ValueError, match=r"actual_seq_lengths_kv\[0\] = 200 must be in \[0, 192\]"):
        pasa_npu.fused_attention(q, kc, vc, actual_seq_lengths=cq, actual_seq_lengths_kv=[c for _, c in REQUESTS],
                                 block_table=table[:, :4], block_size=PAGE, **kw)


# --- learnable sinks (FIA v2): the kernel against the golden model -----------------------------------------------

#: Sinks from far below the rows' lse to far above it, one per query head.
SINKS = torch.tensor([-3.0, 0.5, 4.0, 12.0])


def _sink_inputs(s1, s2, d, seed):
    """BNSD inputs (GQA 2:1, keys biased by 2 over several KV blocks) and a mask (sparse_mode 1) that hides every
    key of query row 3 and some keys of the others."""
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(1, N, s1, d, generator=g).half()
    k = (torch.randn(1, NKV, s2, d, generator=g) + 2).half()
    v = torch.randn(1, NKV, s2, d, generator=g).half()
    mask = torch.rand(1, 1, s1, s2, generator=g) < 0.2
    mask[..., min(3, s1 - 1), :] = True
    return q, k, v, mask


def _kernel_and_golden(precision, q, k, v, mask, sink):
    """(kernel out, lse) and (golden out, lse), the golden model configured as the kernel's tiling (its query block,
    fp32_frame's group tile for packed decode) with the host model's FP32 exp and log (see test_npu_host_model)."""
    from pasa_npu import golden
    from support import _model_exp_and_log

    d = q.shape[-1]
    kw = dict(num_heads=N, num_key_value_heads=NKV, input_layout="BNSD", scale=d ** -0.5, precision=precision)
    extra = {} if mask is None else dict(atten_mask=mask, sparse_mode=1)
    tiling = npu_host_model.tiling(q, k, v, learnable_sink=sink, **kw, **extra)
    out, lse = npu_host_model.run(q, k, v, softmax_lse_flag=True, learnable_sink=sink, **kw, **extra)
    with _model_exp_and_log():
        g_out, g_lse = golden.attention(q.numpy(), k.numpy(), v.numpy(), precision=precision, scale=d ** -0.5,
                                        block_q=tiling["blockQ"], mask=None if mask is None else mask.numpy(),
                                        sink=None if sink is None else sink.numpy(),
                                        group_tile=tiling["packedHeads"] > 1 and precision == "fp32_frame")
    return (out.numpy(), lse[..., 0].numpy()), (g_out, g_lse), tiling


@pytest.mark.parametrize("shape", ["prefill", "decode"])
@pytest.mark.parametrize("precision", npu_host_model.PRECISIONS)
def test_sinks_join_as_the_golden_model_joins_them(precision, shape):
    """The sink joins each allocation's finalisation as the golden model's _join_sink does: where the kernel
    equals the golden model bit for bit without a sink, it does with one; elsewhere (PASA's FP16 arithmetic,
    a split KV) it is no further from it with a sink than without (4 FP16 ulps, the host-model matrix's bound).
    Prefill: 40 rows over 300 keys, a row with every key masked (out 0, lse = its sink exactly). Decode: one
    query row, a GQA group's heads packed into a task, the KV split across cores, the sink added once in the
    combine."""
    from support import ulp_distance

    s1, mask = (40, True) if shape == "prefill" else (1, False)
    q, k, v, m = _sink_inputs(s1, 300, 64, seed=len(precision))
    m = m if mask else None
    (out, lse), (g_out, g_lse), tiling = _kernel_and_golden(precision, q, k, v, m, SINKS)
    (out0, lse0), (g_out0, g_lse0), _ = _kernel_and_golden(precision, q, k, v, m, None)
    assert not np.array_equal(out, out0)  # the sink matters here
    scale = np.abs(v.numpy()).max() / 16
    if np.array_equal(out0, g_out0) and np.array_equal(lse0, g_lse0):
        assert np.array_equal(out, g_out) and np.array_equal(lse, g_lse)
    else:
        assert ulp_distance(out, g_out, scale).max() <= max(4, ulp_distance(out0, g_out0, scale).max())
        assert np.abs(lse - g_lse).max() <= max(1e-4, 2 * np.abs(lse0 - g_lse0).max())
    if shape == "prefill":
        assert tiling["kvSplits"] == 1
        assert np.all(out[0, :, 3] == 0) and np.array_equal(lse[0, :, 3], SINKS.numpy())
        if precision in ("fp16_fp32", "pasa_rs", "fp32_frame"):  # bit-identical allocations (test_npu_host_model)
            assert np.array_equal(out, g_out) and np.array_equal(lse, g_lse)
    else:
        assert tiling["kvSplits"] > 1 and tiling["packedHeads"] == N // NKV and tiling["hasSink"] == 1


@pytest.mark.parametrize("precision", npu_host_model.PRECISIONS)
def test_tnd_with_sinks_is_bit_identical_to_each_request_alone(precision):
    """The mixed serving step of test_tnd_is_bit_identical_to_each_request_alone with sinks (bottom-right causal,
    through the table): each request's rows those of the kernel on that request alone with the same sinks; the
    request with no key attends to its sinks only (out 0, lse = the sinks)."""
    q, k, v, cq, ck, kc, vc, table = _requests(seed=7)
    requests = _per_request(q, k, v, cq, ck, precision, 3, learnable_sink=SINKS)
    kw = _kw(precision, 3, input_layout="TND", actual_seq_lengths=cq, learnable_sink=SINKS)
    out, lse = npu_host_model.run(q, kc, vc, actual_seq_lengths_kv=[c for _, c in REQUESTS], block_table=table,
                                  block_size=PAGE, **kw)
    _check_against_requests(out, lse, requests, cq)
    no_key = slice(cq[-2], cq[-1])  # the last request has no key
    assert torch.all(out[no_key] == 0) and torch.equal(lse[no_key, :, 0], SINKS.expand(2, N))


def test_the_tiling_refuses_a_sink_of_the_wrong_shape():
    from pasa_npu.backends import npu

    q, k, v, _ = _sink_inputs(8, 20, 16, seed=0)
    args = dict(input_layout="BNSD", num_heads=N, num_key_value_heads=NKV, scale=0.25, beta=-1.0, sparse_mode=0,
                pre_tokens=2147483647, next_tokens=2147483647, precision="pasa_rs")
    with pytest.raises(ValueError, match=r"learnable_sink must be 1-D \(num_heads,\) = \(4,\)"):
        npu.host_model().tiling(q.numpy(), k.numpy(), v.numpy(), learnable_sink=np.zeros(3, np.float32), **args)
