"""The serving path: TND with a block table (mixed prefill, decode and speculative requests in one call),
FIA v2's names and learnable sinks, the ``.out`` forms and their workspace, bad input, and the one call
path of eager and compiled calls. The CUDA graph cases run on a GPU machine."""

from __future__ import annotations

import math
import sys

import numpy as np
import pytest
import torch

import pasa_npu
from pasa_npu import golden
from pasa_npu.precision import DEFAULT_PRECISION, PRECISIONS
from pasa_npu.problem import LSE_NO_KEY, make_problem
from support import COMPRESSED, _paged, interpreted, rel_rmse

HAS_CUDA = torch.cuda.is_available()
needs_cuda = pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA GPU (runs on the GPU machine)")


def _sinks_near(lse64: np.ndarray, offsets) -> np.ndarray:
    """One sink per head at its rows' median float64 lse plus an offset: the sink then carries a weight
    comparable to the keys' (offset 0: about half of every row's), or dominates (a large offset)."""
    return np.array([np.median(lse64[0, h][np.isfinite(lse64[0, h])]) + o for h, o in enumerate(offsets)], np.float32)


# ------------------------------------------------------------------------------------------------
# sinks in the golden loop, every allocation
# ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("seed", [0, 1])
def test_sinks_join_once_in_every_allocation(seed):
    """Biased keys over three KV blocks (a tail), GQA, a row with every key masked: every allocation with
    sinks against float64 with sinks. A sink added per block, or shifted with the keys, would be off by far
    more than these bounds; the masked row attends to its sink alone (out 0, lse the sink exactly). The
    join costs no allocation more than its own error: with sinks each is within 1.5x (plus FP16's output
    rounding) of its error without, and the default allocation and pasa_rs stay within 1.5x of fp32 FlashAttention."""
    rng = np.random.default_rng(seed)
    b, n, nkv, s1, s2, d = 1, 4, 2, 24, 300, 64
    q = (rng.standard_normal((b, n, s1, d)) + 2).astype(np.float16)
    k = (rng.standard_normal((b, nkv, s2, d)) + 2).astype(np.float16)
    v = rng.standard_normal((b, nkv, s2, d)).astype(np.float16)
    mask = np.zeros((s1, s2), bool)
    mask[7] = True
    scale = d ** -0.5
    plain, plain_lse = golden.reference(q, k, v, scale=scale, mask=mask)
    sink = _sinks_near(plain_lse, [-2.0, 0.0, 1.5, 30.0])
    ref, ref_lse = golden.reference(q, k, v, scale=scale, mask=mask, sink=sink)
    live = np.ones(s1, bool)
    live[7] = False
    errors = {}
    for precision in PRECISIONS:
        out, lse = golden.attention(q, k, v, precision=precision, scale=scale, mask=mask, sink=sink)
        base, _ = golden.attention(q, k, v, precision=precision, scale=scale, mask=mask)
        assert np.all(out[:, :, 7] == 0) and np.array_equal(lse[0, :, 7], sink), precision
        err = rel_rmse(torch.from_numpy(out[:, :3, live]), torch.from_numpy(ref[:, :3, live]))
        err_base = rel_rmse(torch.from_numpy(base[:, :3, live]), torch.from_numpy(plain[:, :3, live]))
        assert err <= 1.5 * err_base + 1e-3, (precision, err, err_base)
        assert np.abs(lse[0][:, live] - ref_lse[0][:, live]).max() <= \
            1.5 * np.abs(golden.attention(q, k, v, precision=precision, scale=scale, mask=mask)[1][0][:, live]
                          - plain_lse[0][:, live]).max() + 1e-3, precision
        errors[precision] = err
    for precision in (DEFAULT_PRECISION, "pasa_rs"):
        assert errors[precision] <= 1.5 * errors["fp32"], (precision, errors)


def test_merge_partials_adds_a_sink_once():
    """Keys split in three parts, merged with the sink: float64 attention over all keys with the sink."""
    rng = np.random.default_rng(3)
    q = rng.standard_normal((1, 2, 5, 16))
    k = rng.standard_normal((1, 2, 60, 16))
    v = rng.standard_normal((1, 2, 60, 16))
    sink = np.array([0.5, 3.0])
    parts = [golden.reference(q, k[:, :, a:a + 20], v[:, :, a:a + 20], scale=0.25) for a in (0, 20, 40)]
    out, lse = pasa_npu.merge_partials([torch.from_numpy(o) for o, _ in parts], [torch.from_numpy(l) for _, l in parts],
                                       sink=torch.tensor(sink)[:, None])
    ref, ref_lse = golden.reference(q, k, v, scale=0.25, sink=sink)
    assert torch.allclose(out.double(), torch.from_numpy(ref), atol=1e-6)
    assert torch.allclose(lse.double(), torch.from_numpy(ref_lse), atol=1e-6)


# ------------------------------------------------------------------------------------------------
# TND with a block table: a mixed batch
# ------------------------------------------------------------------------------------------------

#: (query rows, key length) per request: a prefill, a chunked prefill, a decode, a speculative decode
#: of 4 tokens, a request with no query row this step, a speculative request with no key yet, and a
#: prefill of 20 rows (more than FIA's 16 only where FIA routes to its decode kernel, see docs/fia.md).
MIXED = [(7, 7), (5, 41), (1, 50), (4, 37), (0, 9), (4, 0), (20, 26)]
N, NKV, D, PAGE = 4, 2, 32, 16


def _mixed(seed=0, requests=MIXED, pad=3, mean=1.0, four_d=False):
    """A TND query of the requests' rows (and ``pad`` rows past the last), their keys and values dense
    (B, Nkv, S2, D), the same in shuffled pages and the table, the cumulative query lengths and key lengths."""
    rng = np.random.default_rng(seed)
    g = torch.Generator().manual_seed(seed)
    q_lens, kv_lens = [r for r, _ in requests], [c for _, c in requests]
    q = (torch.randn(sum(q_lens) + pad, N, D, generator=g) + mean).half()
    k = (torch.randn(len(requests), NKV, max(kv_lens), D, generator=g) + mean).half()
    v = torch.randn(len(requests), NKV, max(kv_lens), D, generator=g).half()
    kc, vc, table = _paged(k, v, kv_lens, PAGE, rng, four_d)
    return q, k, v, kc, vc, table, [int(x) for x in np.cumsum(q_lens)], kv_lens


def _band_mask(mode, r, c, pre=8, nxt=0):
    rel = np.arange(c)[None, :] - np.arange(r)[:, None]
    if mode == 0:
        return None
    if mode == 3:
        return rel > c - r
    return (rel - (c - r) < -pre) | (rel - (c - r) > nxt)  # 4: bottom-right band


def _check_against_float64(q, k, v, cum, kv_lens, out, lse, mode, sink, bound):
    """Every request's rows against float64 (relative RMS error below ``bound``, the lse within 2e-3), rows
    with no key out 0 and lse the sink or FIA's lowest, rows past the last request padding."""
    q0 = 0
    for i, (q1, c) in enumerate(zip(cum, kv_lens)):
        r = q1 - q0
        if r:
            rows = slice(q0, q1)
            qq = q[rows].transpose(0, 1)[None].numpy()
            if c:
                ref, ref_lse = golden.reference(qq, k[i:i + 1, :, :c].numpy(), v[i:i + 1, :, :c].numpy(),
                                                scale=D ** -0.5, mask=_band_mask(mode, r, c),
                                                sink=None if sink is None else sink.numpy())
            else:  # no key: the sink alone, or nothing
                ref = np.zeros((1, N, r, D))
                ref_lse = np.broadcast_to(-np.inf if sink is None else sink.numpy()[:, None], (1, N, r))
            got = out[rows].transpose(0, 1).float().numpy()
            got_lse = lse[rows, :, 0].T.numpy()
            fin = np.isfinite(ref_lse[0])
            if fin.any():
                assert np.sqrt(((got - ref[0])[fin] ** 2).mean() / max((ref[0][fin] ** 2).mean(), 1e-30)) < bound, i
                assert np.abs(got_lse[fin] - ref_lse[0][fin]).max() < 2e-3, i
            assert np.all(got[~fin] == 0) and np.all(got_lse[~fin] == LSE_NO_KEY), i
        q0 = q1
    assert torch.all(out[cum[-1]:] == 0) and torch.all(lse[cum[-1]:] == math.inf)


def _tnd_kw(cum, kv_lens, table, mode, sink=None, **extra):
    kw = dict(num_query_heads=N, num_key_value_heads=NKV, input_layout="TND", softmax_scale=D ** -0.5,
              return_softmax_lse=True, actual_seq_qlen=cum, actual_seq_kvlen=kv_lens, block_table=table,
              block_size=PAGE, sparse_mode=mode, learnable_sink=sink, **extra)
    if mode:
        kw.update(atten_mask=COMPRESSED, pre_tokens=8, next_tokens=0)
    return kw


@pytest.mark.parametrize("mode, sink", [(0, False), (3, True), (4, False)])
def test_reference_tnd_paged_is_each_request_alone(mode, sink):
    """The reference backend on a mixed TND batch with a table gives every request exactly what the request
    alone (its rows, its keys dense, a TND call without a table) gives, and float64's numbers; GQA 2:1."""
    q, k, v, kc, vc, table, cum, kv_lens = _mixed()
    s = torch.tensor([0.3, -1.0, 2.0, 0.0]) if sink else None
    out, lse = pasa_npu.fused_attention_v2(q, kc, vc, **_tnd_kw(cum, kv_lens, table, mode, s), precision="fp32")
    assert out.shape == q.shape and lse.shape == (q.shape[0], N, 1)
    q0 = 0
    for i, (q1, c) in enumerate(zip(cum, kv_lens)):
        if q1 > q0:
            alone = pasa_npu.fused_attention_v2(
                q[q0:q1], k[i, :, :c].transpose(0, 1), v[i, :, :c].transpose(0, 1),
                **dict(_tnd_kw([q1 - q0], [c], None, mode, s), block_size=0), precision="fp32")
            assert torch.equal(out[q0:q1], alone[0]) and torch.equal(lse[q0:q1], alone[1]), i
        q0 = q1
    _check_against_float64(q, k, v, cum, kv_lens, out, lse, mode, s, 3e-3)


@interpreted
@pytest.mark.parametrize("precision, mode, four_d", [("fp32", 3, False), ("pasa_rs", 3, True), ("fp32_frame", 4, False),
                                                     ("pasa", 0, True), ("fp32_frame", 3, True)])
def test_triton_tnd_paged_mixed_batch(precision, mode, four_d):
    """The Triton kernel reads each request's query rows at its cumulative offset and its keys through the
    table, in one launch (no gathered copy): the mixed batch within the float64 bounds of the dense kernel
    (tests/serving/test_paged.py), close to the reference backend, with sinks."""
    from support import TRITON_BOUNDS

    q, k, v, kc, vc, table, cum, kv_lens = _mixed(seed=1, mean=2.0, four_d=four_d)
    sink = torch.tensor([0.3, -1.0, 2.0, 0.0])
    kw = _tnd_kw(cum, kv_lens, table, mode, sink, precision=precision, block_kv=16)
    out, lse = pasa_npu.fused_attention_v2(q, kc, vc, backend="triton", **kw)
    ref_out, ref_lse = pasa_npu.fused_attention_v2(q, kc, vc, backend="reference", **kw)
    assert torch.equal(lse == LSE_NO_KEY, ref_lse == LSE_NO_KEY)
    assert rel_rmse(out, ref_out) < 2e-2
    if TRITON_BOUNDS[precision][1] is not None:  # PASA's Algorithm 1 recovers its lse through I·F
        _check_against_float64(q, k, v, cum, kv_lens, out, lse, mode, sink, TRITON_BOUNDS[precision][0])


@interpreted
@pytest.mark.parametrize("precision", ["pasa_rs", "fp32_frame"])
def test_triton_tnd_decode_splits_and_device_lengths(precision):
    """Decode and speculative requests only (one query tile per KV head): the kernel splits each request's
    KV blocks and the last split to finish merges them, joining the sink once and writing the TND rows. Lengths
    left on the device (as CUDA tensors are; here CPU tensors through the plan) give the same numbers,
    and lengths that overrun the query or a table row are clamped: nothing is read out of bounds."""
    from pasa_npu.backends import triton as tb

    # fp32's KV block is 128 keys under the interpreter: two of them to split
    requests = [(1, 70), (2, 40), (1, 0), (4, 150)] if precision == "fp32" else [(1, 40), (2, 25), (1, 0), (4, 70)]
    q, k, v, kc, vc, table, cum, kv_lens = _mixed(seed=2, requests=requests, pad=0)
    sink = torch.tensor([0.3, -1.0, 2.0, 0.0])
    kw = dict(num_heads=N, num_key_value_heads=NKV, input_layout="TND", scale=D ** -0.5, softmax_lse_flag=True,
              actual_seq_lengths=cum, actual_seq_lengths_kv=kv_lens, block_table=table, block_size=PAGE,
              sparse_mode=3, atten_mask=COMPRESSED, precision=precision, block_kv=16, learnable_sink=sink)
    problem = make_problem(q, kc, vc, **kw)
    host = tb._plan(problem, final=True)
    on_device = problem._replace(q_lens=None, kv_lens=None, device_lens=(torch.tensor(cum), torch.tensor(kv_lens)))
    device = tb._plan(on_device, final=True)
    assert host._splits == device._splits == 2
    out, lse = host(*tb.plan_inputs(problem))
    assert torch.equal(out, device(*tb.plan_inputs(on_device))[0])
    _check_against_float64(q, k, v, cum, kv_lens, out, lse[..., None], 3, sink, 3e-3)
    if precision == "fp32":  # lengths past the query's rows and a table row's keys
        bad = on_device._replace(device_lens=(torch.tensor([1, 3, 99, 2]), torch.tensor([45, 10 ** 6, 0, 60])))
        bad_out, bad_lse = device(*tb.plan_inputs(bad))
        assert torch.isfinite(bad_out).all() and not torch.isnan(bad_lse).any()


# ------------------------------------------------------------------------------------------------
# the .out forms and the workspace
# ------------------------------------------------------------------------------------------------

def test_out_form_writes_the_callers_tensors():
    """Reference backend: the .out form writes contiguous and strided buffers, returns them, and leaves a
    placeholder lse alone when no lse is asked for."""
    q, k, v, kc, vc, table, cum, kv_lens = _mixed(seed=3)
    kw = _tnd_kw(cum, kv_lens, table, 3, torch.tensor([0.3, -1.0, 2.0, 0.0]))
    want = pasa_npu.fused_attention_v2(q, kc, vc, **kw)
    out = torch.full_like(q, 7.0)
    lse = torch.full((q.shape[0], N, 1), 7.0)
    got = pasa_npu.fused_attention_v2_out(q, kc, vc, out=[out, lse], **kw)
    assert got[0] is out and got[1] is lse and torch.equal(out, want[0]) and torch.equal(lse, want[1])
    strided = torch.zeros(N, q.shape[0], D, dtype=q.dtype).transpose(0, 1)
    placeholder = torch.full((1,), 7.0, dtype=torch.float16)
    pasa_npu.fused_attention_v2_out(q, kc, vc, out=(strided, placeholder), **dict(kw, return_softmax_lse=False))
    assert torch.equal(strided, want[0]) and placeholder.item() == 7.0


@interpreted
def test_triton_out_form_writes_in_place_from_the_workspace(monkeypatch):
    """Triton: the .out form's kernels write the caller's tensors, their scratch in the workspace (no
    new tensor in the plan's call), the first call and the planned ones alike, equal to the functional
    form. A workspace sized for a larger call serves a smaller one; one too small is refused."""
    from pasa_npu.backends import triton as tb

    big = _mixed(seed=4, requests=[(1, 140), (4, 150)], pad=0)  # split into two KV blocks of 128
    small = _mixed(seed=5, requests=[(1, 20), (2, 33)], pad=1)
    kw = dict(precision="fp32", backend="triton")
    workspace = pasa_npu.fused_attention_v2_workspace(big[0], big[3], big[4], **_tnd_kw(*big[6:], big[5], 3), **kw)
    assert workspace.dtype == torch.uint8 and workspace.numel() > 0
    call, new_empty = tb.AttentionPlan.__call__, torch.Tensor.new_empty

    def new_empty_outside_the_plan(self, *args, **kwargs):  # (Triton's interpreter copies its arguments)
        assert sys._getframe(1).f_code.co_filename != tb.__file__, "the plan made a tensor"
        return new_empty(self, *args, **kwargs)

    def no_new_tensors(self, *args, **kwargs):
        with monkeypatch.context() as m:
            m.setattr(torch.Tensor, "new_empty", new_empty_outside_the_plan)
            return call(self, *args, **kwargs)

    sink = torch.tensor([0.3, -1.0, 2.0, 0.0])
    for q, _, _, kc, vc, table, cum, kv_lens in (big, small, small):  # unplanned, then planned
        args = _tnd_kw(cum, kv_lens, table, 3, sink, **kw)
        out, lse = torch.empty_like(q), torch.empty(q.shape[0], N, 1)
        monkeypatch.setattr(tb.AttentionPlan, "__call__", no_new_tensors)
        pasa_npu.fused_attention_v2_out(q, kc, vc, out=(out, lse), workspace=workspace, **args)
        monkeypatch.setattr(tb.AttentionPlan, "__call__", call)
        want = pasa_npu.fused_attention_v2(q, kc, vc, **args)
        assert torch.equal(out, want[0]) and torch.equal(lse, want[1])
    q, _, _, kc, vc, table, cum, kv_lens = big
    with pytest.raises(ValueError, match="workspace holds 16 bytes, this call needs"):
        pasa_npu.fused_attention_v2_out(q, kc, vc, out=(torch.empty_like(q), torch.empty(q.shape[0], N, 1)),
                                        workspace=workspace[:16], **_tnd_kw(cum, kv_lens, table, 3, sink, **kw))


@interpreted
def test_workspace_bound_covers_every_smaller_call():
    """The workspace of the largest shape holds the scratch every smaller call needs (B, query rows, keys,
    heads no larger), over prefill (pre-pass tables) and decode (split partials) shapes alike."""
    from pasa_npu.backends import triton as tb

    rng = np.random.default_rng(0)
    for precision in ("pasa_rs", "pasa", "fp32", "fp32_frame"):
        bound = None
        for b, s1, blocks in ((6, 40, 8), (1, 1, 8), (2, 3, 5), (6, 40, 1), (3, 8, 8), (1, 40, 2), (6, 1, 8)):
            n, nkv = 8, 2
            q = torch.zeros(b, n, s1, D, dtype=torch.float16)
            kc = torch.zeros(blocks * b, PAGE, nkv * D, dtype=torch.float16)
            table = torch.from_numpy(rng.permutation(blocks * b).reshape(b, blocks).astype(np.int32))
            info = torch.tensor([[s1, blocks * PAGE, -s1, 0, 0]] * b, dtype=torch.int32)
            plan = tb.AttentionPlan(q, kc, kc, precision=precision, beta=None, block_kv=16, scale=0.1, mask=None,
                                    block_table=table, page=PAGE, kv_info=info)
            bound = plan.workspace_bound if bound is None else bound
            assert plan.workspace_bytes <= bound, (precision, b, s1, blocks)
            assert plan.workspace_bytes <= plan.workspace_bound


# ------------------------------------------------------------------------------------------------
# bad input
# ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("change, error, match", [
    (dict(actual_seq_qlen=[7, 5, 13, 17, 17, 21, 41]), ValueError,
     r"actual_seq_qlen must be cumulative \(non-decreasing\).*actual_seq_qlen\[1\] = 5 < 7"),
    (dict(actual_seq_qlen=[7, 12, 13, 17, 17, 21, 45]), ValueError, r"actual_seq_qlen\[-1\] = 45 exceeds the 44 rows"),
    (dict(actual_seq_kvlen=[7, 41, 50, 37, 9, 0, 90]), ValueError,
     r"actual_seq_kvlen\[6\] = 90 must be in \[0, 80\]: a block_table row addresses at most 80 keys"),
    (dict(actual_seq_kvlen=[7, 41]), ValueError, r"actual_seq_kvlen must have at least one entry per batch \(B = 7"),
    (dict(learnable_sink=torch.zeros(3)), ValueError,
     r"learnable_sink must be .* of shape \(num_query_heads,\) = \(4,\)"),
    (dict(learnable_sink=torch.zeros(4, dtype=torch.int32)), ValueError, r"learnable_sink must be a float32, bfloat16"),
    (dict(learnable_sink=torch.zeros(1, 4)), ValueError, r"learnable_sink must be .* got a torch.float32 tensor of "
                                                         r"shape \(1, 4\)"),
    (dict(learnable_sink=[0.0] * 4), TypeError, "learnable_sink must be None or a torch.Tensor"),
    (dict(softmax_scale=0.0), ValueError, "softmax_scale must be a positive finite number"),
    (dict(query_rope="q"), ValueError, "query_rope set: MLA rope inputs, which pasa-npu does not implement"),
    (dict(antiquant_scale=None), TypeError, "unexpected keyword argument 'antiquant_scale'"),
])
def test_bad_serving_input_is_named(change, error, match):
    q, k, v, kc, vc, table, cum, kv_lens = _mixed()
    kw = dict(_tnd_kw(cum, kv_lens, table, 3), **change)
    if kw.get("query_rope") == "q":
        kw["query_rope"] = q
    with pytest.raises(error, match=match):
        pasa_npu.fused_attention_v2(q, kc, vc, **kw)


@pytest.mark.parametrize("out, match", [
    ("short", r"out\[0\] \(attention_out\) must be a torch.float16 tensor of shape \(44, 4, 32\)"),
    ("float", r"out\[0\] \(attention_out\) must be a torch.float16 tensor"),
    ("lse", r"out\[1\] \(softmax_lse\) must be a torch.float32 tensor of shape \(44, 4, 1\)"),
    ("meta", r"out\[0\] \(attention_out\) is on meta but query is on cpu"),
    ("one", r"out must be a pair \(attention_out, softmax_lse\) of tensors, got tuple of 1"),
    ("workspace", r"workspace must be a contiguous 1-D uint8 tensor"),
    ("grad", r"out\[0\] \(attention_out\) requires grad: the .out form writes its results into out in place"),
])
def test_bad_out_and_workspace_are_named(out, match):
    q, k, v, kc, vc, table, cum, kv_lens = _mixed()
    lse = torch.empty(q.shape[0], N, 1)
    pairs = {"short": (q[:-1], lse), "float": (q.float(), lse), "lse": (q, lse[:, :, 0]),
             "meta": (torch.empty_like(q, device="meta"), lse), "one": (q,), "workspace": (torch.empty_like(q), lse),
             "grad": (torch.empty_like(q, requires_grad=True), lse)}
    workspace = torch.empty(64) if out == "workspace" else None
    with pytest.raises((ValueError, TypeError), match=match):
        pasa_npu.fused_attention_v2_out(q, kc, vc, out=pairs[out], workspace=workspace,
                                        **_tnd_kw(cum, kv_lens, table, 3))


def test_workspace_of_v2_names_a_v1_keyword_as_given():
    """FIA v1's ``scale`` passed to the v2 workspace form is named as the caller wrote it, not as its v2 twin."""
    q, k, v, kc, vc, table, cum, kv_lens = _mixed()
    with pytest.raises(TypeError, match=r"fused_attention_v2_workspace\(\) got an unexpected keyword argument 'scale'"):
        pasa_npu.fused_attention_v2_workspace(q, kc, vc, scale=0.5, **_tnd_kw(cum, kv_lens, table, 3))


def test_npu_tensors_run_tnd_with_a_table_and_sinks_on_the_ascendc_kernel(monkeypatch):
    """On NPU tensors the device's backend order takes TND with a table and sinks to the AscendC kernel, not the
    reference emulator. (CPU tensors stand in for NPU ones here, through the device's backend order: the npu
    backend runs on the CPU's host model.)"""
    from pasa_npu import backends

    q, k, v, kc, vc, table, cum, kv_lens = _mixed()
    kw = _tnd_kw(cum, kv_lens, table, 3, sink=torch.tensor([0.3, -1.0, 2.0, 0.0]))
    ref = pasa_npu.fused_attention_v2(q, kc, vc, **kw)
    if backends.get("npu").unavailable_reason(q.device) is not None:
        pytest.skip("the host model is not built")
    monkeypatch.setitem(backends._ORDER, "cpu", ("npu", "reference"))
    from pasa_npu.backends import npu

    launches = []
    launch = npu.launch_host_model
    monkeypatch.setattr(npu, "launch_host_model", lambda call: launches.append(call) or launch(call))
    out = pasa_npu.fused_attention_v2(q, kc, vc, **kw)
    assert len(launches) == 1 and launches[0].attrs["input_layout"] == "TND"
    assert launches[0].block_table is not None and launches[0].learnable_sink is not None
    assert torch.isfinite(out[0]).all() and (out[0].float() - ref[0].float()).abs().max() < 2e-2
    assert (out[1] - ref[1]).abs().nan_to_num().max() < 1e-3


# ------------------------------------------------------------------------------------------------
# one call path: eager and compiled agree on every argument
# ------------------------------------------------------------------------------------------------

def _eager_and_compiled(call, *tensors):
    eager = call(*tensors)
    torch._dynamo.reset()
    compiled = torch.compile(call, fullgraph=True, backend="aot_eager")(*tensors)
    return eager, compiled


MASK = torch.rand(4, 6, generator=torch.Generator().manual_seed(0)) < 0.3
#: Calls that between them give every option a value other than its default, eager and compiled.
ONE_PATH = {
    "v1": lambda q, k, v, kc, vc, table, cum, kv: pasa_npu.fused_attention(
        q[:8].reshape(2, 4, N * D), k[:2, :, :6].transpose(1, 2).reshape(2, 6, NKV * D),
        v[:2, :, :6].transpose(1, 2).reshape(2, 6, NKV * D), atten_mask=MASK,
        actual_seq_lengths=[4, 3], actual_seq_lengths_kv=[6, 5], num_heads=N, scale=0.2, pre_tokens=3,
        next_tokens=1, input_layout="BSH", num_key_value_heads=NKV, inner_precise=2, softmax_lse_flag=True,
        precision="pasa_fp32", beta=0.9, block_q=2, block_kv=16, backend="reference", check_inputs=True,
        safety_net=False),
    "v2_tnd_paged": lambda q, k, v, kc, vc, table, cum, kv: pasa_npu.fused_attention_v2(
        q, kc, vc, **_tnd_kw(cum, kv, table, 4, torch.tensor([0.3, -1.0, 2.0, 0.0])), inner_precise=1,
        precision=None),
    "v1_bnsd_causal": lambda q, k, v, kc, vc, table, cum, kv: pasa_npu.fused_attention(
        q[:12].reshape(1, 12, N, D).transpose(1, 2), k[:1], v[:1], num_heads=N, num_key_value_heads=NKV,
        input_layout="BNSD_BSND", sparse_mode=2, atten_mask=COMPRESSED, precision="fp32"),
}


@pytest.mark.parametrize("name", list(ONE_PATH))
def test_compiled_calls_equal_eager_calls(name):
    eager, compiled = _eager_and_compiled(ONE_PATH[name], *_mixed(seed=6))
    assert torch.equal(eager[0], compiled[0]) and torch.equal(eager[1], compiled[1])


def test_compiled_out_form_equals_eager():
    q, k, v, kc, vc, table, cum, kv_lens = _mixed(seed=7)
    kw = _tnd_kw(cum, kv_lens, table, 3, torch.tensor([0.3, -1.0, 2.0, 0.0]))

    def call(q, kc, vc):
        out, lse = torch.empty_like(q), torch.empty(q.shape[0], N, 1)
        return pasa_npu.fused_attention_v2_out(q, kc, vc, out=(out, lse), **kw)

    eager, compiled = _eager_and_compiled(call, q, kc, vc)
    assert torch.equal(eager[0], compiled[0]) and torch.equal(eager[1], compiled[1])


# ------------------------------------------------------------------------------------------------
# CUDA: graph capture of the .out form with new lengths and tables, no allocation
# ------------------------------------------------------------------------------------------------

def _cuda_step(seed, requests, t, table_width, num_blocks):
    """One serving step on the GPU: a TND query padded to ``t`` rows, its requests' pages in a shared cache
    of ``num_blocks`` pages, a table of ``table_width`` pages per request."""
    rng = np.random.default_rng(seed)
    g = torch.Generator().manual_seed(seed)
    kv_lens = [c for _, c in requests]
    cum = torch.tensor(np.cumsum([r for r, _ in requests]), dtype=torch.int32)
    q = torch.randn(t, N, D, generator=g).half()
    kc = torch.randn(num_blocks, PAGE, NKV * D, generator=g).half()
    vc = torch.randn(num_blocks, PAGE, NKV * D, generator=g).half()
    table = torch.from_numpy(rng.choice(num_blocks, (len(requests), table_width), replace=False).astype(np.int32))
    return [x.cuda() for x in (q, kc, vc, table, cum, torch.tensor(kv_lens, dtype=torch.int32))]


@needs_cuda
@pytest.mark.parametrize("precision", ["fp32", "pasa_rs"])
def test_cuda_graph_replays_new_lengths_and_tables(precision):
    """Capture the .out form of a TND paged call with its lengths as CUDA tensors; write the next steps'
    queries, caches, tables and lengths into the same buffers and replay: each replay equals the eager call
    on those values, and float64."""
    steps = [[(1, 40), (4, 100), (2, 63), (1, 5)], [(4, 127), (1, 1), (4, 64), (3, 30)],
             [(1, 128), (0, 77), (4, 4), (2, 90)]]
    static = _cuda_step(0, steps[0], 16, 8, 64)
    sink = torch.tensor([0.3, -1.0, 2.0, 0.0], device="cuda")
    kw = dict(num_query_heads=N, num_key_value_heads=NKV, input_layout="TND", softmax_scale=D ** -0.5,
              return_softmax_lse=True, block_size=PAGE, sparse_mode=3, atten_mask=COMPRESSED.cuda(),
              learnable_sink=sink, precision=precision)

    def call(q, kc, vc, table, cum, kv, out, lse, workspace):
        return pasa_npu.fused_attention_v2_out(q, kc, vc, block_table=table, actual_seq_qlen=cum, actual_seq_kvlen=kv,
                                               out=(out, lse), workspace=workspace, **kw)

    out, lse = torch.empty_like(static[0]), torch.empty(16, N, 1, device="cuda")
    workspace = pasa_npu.fused_attention_v2_workspace(*static[:3], block_table=static[3], actual_seq_qlen=static[4],
                                                      actual_seq_kvlen=static[5], **kw)
    call(*static, out, lse, workspace)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        call(*static, out, lse, workspace)
    for seed, requests in enumerate(steps[1:], 1):
        fresh = _cuda_step(seed, requests, 16, 8, 64)
        for dst, src in zip(static, fresh):
            dst.copy_(src)
        graph.replay()
        want_out, want_lse = torch.empty_like(out), torch.empty_like(lse)
        call(*fresh, want_out, want_lse, None)
        assert torch.equal(out, want_out) and torch.equal(lse, want_lse)
        q, kc, vc, table, cum, kv = (x.cpu() for x in fresh)
        k = kc[table.long()].reshape(len(requests), -1, NKV, D).transpose(1, 2)
        v = vc[table.long()].reshape(len(requests), -1, NKV, D).transpose(1, 2)
        _check_against_float64(q, k, v, cum.tolist(), kv.tolist(), out.cpu(), lse.cpu(), 3, sink.cpu(), 3e-3)


@needs_cuda
def test_cuda_planned_out_call_allocates_nothing():
    """A repeated .out call (planned) with a workspace makes no allocation on the device."""
    q, kc, vc, table, cum, kv = _cuda_step(0, [(1, 40), (4, 100), (7, 63)], 12, 8, 64)
    kw = dict(num_query_heads=N, num_key_value_heads=NKV, input_layout="TND", softmax_scale=D ** -0.5,
              return_softmax_lse=True, block_size=PAGE, sparse_mode=3, atten_mask=COMPRESSED.cuda(),
              block_table=table, actual_seq_qlen=cum.tolist(), actual_seq_kvlen=kv.tolist())
    out, lse = torch.empty_like(q), torch.empty(12, N, 1, device="cuda")
    workspace = pasa_npu.fused_attention_v2_workspace(q, kc, vc, **kw)
    for _ in range(2):  # compile, then plan
        pasa_npu.fused_attention_v2_out(q, kc, vc, out=(out, lse), workspace=workspace, **kw)
    torch.cuda.synchronize()
    before = torch.cuda.memory_stats()["allocation.all.allocated"]
    pasa_npu.fused_attention_v2_out(q, kc, vc, out=(out, lse), workspace=workspace, **kw)
    assert torch.cuda.memory_stats()["allocation.all.allocated"] == before
