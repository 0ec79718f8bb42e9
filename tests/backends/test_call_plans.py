"""Repeated calls of ``fused_attention`` run from a plan (``interface._CallPlan``): the second call with a
signature plans it, later ones skip validation and backend selection. A planned call must give exactly what
the full path gives for its own inputs, validate exactly as before, and keep none of the inputs it was made
from.

The Triton backend plans; these tests run it on the GPU where there is one, else on the CPU through Triton's
interpreter (tests/conftest.py sets ``TRITON_INTERPRET=1`` there).
"""

from __future__ import annotations

import gc
import weakref

import numpy as np
import pytest
import torch

pytest.importorskip("triton")

from pasa_npu import interface  # noqa: E402
from pasa_npu.backends import triton as tb  # noqa: E402
from support import INTERPRETED, _paged  # noqa: E402

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
pytestmark = pytest.mark.skipif(DEVICE == "cpu" and not INTERPRETED,
                                reason="needs a GPU, or TRITON_INTERPRET=1 (tests/conftest.py sets it without one)")
COMPRESSED = torch.triu(torch.ones(2048, 2048, dtype=torch.bool), 1)


@pytest.fixture(autouse=True)
def fresh_plans(monkeypatch):
    monkeypatch.setattr(interface, "_PLANS", {})


def _draw(seed: int, b, n, nkv, s1, s2, d, layout):
    g = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(b, heads, s, d, generator=g).half() for heads, s in ((n, s1), (nkv, s2), (nkv, s2)))
    if layout == "BSH":
        q, k, v = (t.transpose(1, 2).reshape(t.shape[0], t.shape[2], -1) for t in (q, k, v))
    elif layout == "BSND":
        q, k, v = (t.transpose(1, 2).contiguous() for t in (q, k, v))
    return [t.to(DEVICE) for t in (q, k, v)]


#: name: (B, N, Nkv, S1, S2, D, layout, the call's other arguments)
CASES = {
    "decode_bsh_gqa_fp32_frame": (2, 4, 2, 1, 160, 16, "BSH", dict(precision="fp32_frame", softmax_lse_flag=True)),
    "prefill_bsnd_causal_fp32": (1, 2, 1, 40, 56, 16, "BSND", dict(precision="fp32", sparse_mode=3,
                                                                   atten_mask=COMPRESSED)),
    "prefill_bnsd_mask_pasa_fp32": (2, 2, 2, 24, 40, 16, "BNSD", dict(precision="pasa_fp32", safety_net=False,
                                                                      atten_mask="full", block_kv=16)),
    "band_bnsd_bsnd_pasa_rs": (1, 2, 1, 33, 48, 32, "BNSD_BSND", dict(precision="pasa_rs", sparse_mode=4,
                                                                       atten_mask=COMPRESSED, pre_tokens=7,
                                                                       next_tokens=2, softmax_lse_flag=True)),
    "decode_mask_fp32": (3, 2, 1, 1, 70, 16, "BNSD", dict(precision="fp32", atten_mask="decode")),
}


def _kwargs(case: str, seed: int):
    b, n, nkv, s1, s2, d, layout, extra = CASES[case]
    kw = dict(extra, num_heads=n, num_key_value_heads=nkv, input_layout=layout, scale=d ** -0.5, backend="triton")
    g = torch.Generator().manual_seed(100 + seed)
    if kw.get("atten_mask") == "full":
        kw["atten_mask"] = (torch.rand(s1, s2, generator=g) < 0.3).to(DEVICE)
    elif kw.get("atten_mask") == "decode":
        kw["atten_mask"] = (torch.rand(b, s2, generator=g) < 0.3).to(DEVICE)
    elif kw.get("atten_mask") is not None:
        kw["atten_mask"] = kw["atten_mask"].to(DEVICE)
    return _draw(seed, b, n, nkv, s1, s2, d, layout), kw


def _unplanned(q, k, v, kw):
    """The full path's result (a signature seen for the first time is never planned)."""
    saved = dict(interface._PLANS)
    interface._PLANS.clear()
    try:
        return interface.fused_attention(q, k, v, **kw)
    finally:
        interface._PLANS.clear()
        interface._PLANS.update(saved)


def _planned() -> list:
    return [p for p in interface._PLANS.values() if isinstance(p, interface._CallPlan)]


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_planned_call_equals_the_full_path_on_new_inputs(case, monkeypatch):
    (q, k, v), kw = _kwargs(case, 0)
    validations = []
    real = interface.make_problem
    monkeypatch.setattr(interface, "make_problem", lambda *a, **k_: validations.append(1) or real(*a, **k_))
    first = interface.fused_attention(q, k, v, **kw)
    second = interface.fused_attention(q, k, v, **kw)  # plans the call
    assert len(_planned()) == 1 and len(validations) == 2
    for seed in (1, 2):  # other values, same signature: the plan reads the new tensors
        (q2, k2, v2), kw2 = _kwargs(case, seed)
        before = len(validations)
        out, lse = interface.fused_attention(q2, k2, v2, **kw2)
        assert len(validations) == before, "a planned call validated again"
        want, want_lse = _unplanned(q2, k2, v2, kw2)
        assert out.shape == want.shape and out.stride() == want.stride() and out.dtype == want.dtype
        assert torch.equal(out, want) and torch.equal(lse, want_lse)
        assert not torch.equal(out, first[0])
    for got, want in zip(second, first):
        assert torch.equal(got, want)


@pytest.mark.parametrize("layout", ["BSND", "BNSD", "BNSD_BSND"])  # BSH is BSND's memory
def test_split_kv_partials_merge_into_fias_layout(layout):
    """A short prefill whose G·S1 rows fill one tile splits its KV blocks like decode; the last split to finish then
    writes FIA's layout through its strides. Against float64 attention (a misplaced row is off by O(1))."""
    b, n, nkv, s1, s2, d = 2, 4, 2, 3, 300, 16
    kw = dict(num_heads=n, num_key_value_heads=nkv, input_layout=layout, scale=d ** -0.5, precision="pasa_rs",
              block_kv=64, backend="triton")
    for seed in range(3):
        q, k, v = _draw(seed, b, n, nkv, s1, s2, d, "BNSD")
        if layout in ("BSH", "BSND"):
            q, k, v = (t.transpose(1, 2).contiguous() for t in (q, k, v))
            if layout == "BSH":
                q, k, v = (t.flatten(2) for t in (q, k, v))
        out, _ = interface.fused_attention(q, k, v, **kw)
        qd, kd, vd = _draw(seed, b, n, nkv, s1, s2, d, "BNSD")
        kd, vd = (t.double().repeat_interleave(n // nkv, dim=1) for t in (kd, vd))
        want = torch.softmax(qd.double() @ kd.transpose(-1, -2) * d ** -0.5, dim=-1) @ vd  # (B, N, S1, D)
        if layout != "BNSD":
            want = want.transpose(1, 2)
        got = out.double().cpu().reshape(want.shape)
        assert (got - want.cpu()).abs().max() < 2e-3
    (plan,) = _planned()
    assert plan.run._splits > 1


def _float64_attention(q, k, v, scale):
    """Attention and its lse in float64."""
    k, v = (t.double().repeat_interleave(q.shape[1] // k.shape[1], dim=1) for t in (k, v))
    scores = q.double() @ k.transpose(-1, -2) * scale
    return torch.softmax(scores, dim=-1) @ v, torch.logsumexp(scores, dim=-1)


def test_split_kv_merges_in_the_attention_launch_and_leaves_its_counters_at_zero():
    """Split decode: the last split of each tile to finish merges the partials and sets its arrival counter back,
    so the next call (another plan, more tiles, sharing the stream's counters) counts from zero. A counter left
    at its count would make no split the last: the output would be whatever the allocator held."""
    kw = dict(num_heads=4, num_key_value_heads=2, input_layout="BNSD", scale=0.25, precision="fp32_frame",
              softmax_lse_flag=True, backend="triton")
    for b, seed in ((1, 0), (3, 1), (1, 2), (3, 3)):
        q, k, v = _draw(seed, b, 4, 2, 1, 1200, 16, "BNSD")  # on an H100: 5 splits of 2 KV blocks
        for _ in range(2):  # the call that plans the signature, then a planned one
            out, lse = interface.fused_attention(q, k, v, **kw)
            want, want_lse = _float64_attention(q, k, v, 0.25)
            assert (out.double() - want).abs().max() < 2e-3
            assert (lse.double().reshape(want_lse.shape) - want_lse).abs().max() < 1e-4
        assert [p.run._splits > 1 for p in _planned() if p.run._arrivals == b * 2] == [True]
        counters, _ = tb._SPLIT_SCRATCH[(q.device.index, tb._raw_stream(q.device.index)) if q.is_cuda
                                        else ("cpu", None)]
        assert not counters.any()


def test_a_prefill_fp32_frame_plan_computes_its_lse_unasked_into_the_workspace():
    """fp32_frame's prefill computes its lse whether or not the call asks for it (the loop Triton schedules
    faster, docs/benchmarks/gpu_frame/h200.md): returned as None, written to a tensor of its own or, given a
    workspace, to the workspace's first bytes; the output is the one of a call that asks for the lse."""
    q, k, v = _draw(3, 1, 2, 1, 40, 56, 16, "BNSD")
    kw = dict(precision="fp32_frame", beta=None, block_kv=16, scale=0.25, mask=None)
    asks, unasked = (tb.AttentionPlan(q, k, v, **kw, lse=lse) for lse in (True, False))
    assert asks.workspace_bytes == 0 and unasked.workspace_bytes == 4 * 2 * 40 <= unasked.workspace_bound
    want, want_lse = asks(q, k, v, None, None)
    out, lse = unasked(q, k, v, None, None)
    assert lse is None and torch.equal(out, want)
    workspace = torch.zeros(unasked.workspace_bytes, dtype=torch.uint8, device=DEVICE)
    out, _ = unasked(q, k, v, None, None, workspace=workspace)
    assert torch.equal(out, want) and torch.equal(workspace.view(torch.float32), want_lse.flatten())


def test_a_planned_paged_decode_equals_the_full_path():
    rng = np.random.default_rng(0)
    b, n, nkv, d, page, lens = 2, 4, 2, 16, 32, [70, 129]
    kw = dict(num_heads=n, num_key_value_heads=nkv, input_layout="BNSD", scale=0.25, precision="pasa_rs",
              actual_seq_lengths_kv=lens, block_size=page, softmax_lse_flag=True, backend="triton")
    calls = []
    for seed in range(3):
        g = torch.Generator().manual_seed(seed)
        k, v = (torch.randn(b, nkv, max(lens), d, generator=g).half() for _ in range(2))
        kc, vc, table = _paged(k, v, lens, page, rng, four_d=True)
        calls.append([t.to(DEVICE) for t in (torch.randn(b, n, 1, d, generator=g).half(), kc, vc, table)])
    for q, kc, vc, table in calls:
        interface.fused_attention(q, kc, vc, block_table=table, **kw)
    assert len(_planned()) == 1
    q, kc, vc, table = calls[2]
    want = _unplanned(q, kc, vc, dict(kw, block_table=table))
    got = interface.fused_attention(q, kc, vc, block_table=table, **kw)
    assert all(torch.equal(a, b_) for a, b_ in zip(got, want))


def test_a_misaligned_view_on_a_planned_signature_is_computed_right():
    (q, k, v), kw = _kwargs("decode_bsh_gqa_fp32_frame", 0)
    for _ in range(2):
        interface.fused_attention(q, k, v, **kw)
    # The same shapes and strides at an address 2 bytes on: Triton specialises on 16-byte alignment.
    buf = torch.zeros(q.numel() + 1, dtype=q.dtype, device=DEVICE)
    shifted = buf[1:].view(q.shape)
    shifted.copy_(q * 0.5)
    got = interface.fused_attention(shifted, k, v, **kw)
    want = _unplanned(shifted, k, v, kw)
    assert all(torch.equal(a, b_) for a, b_ in zip(got, want))


@pytest.mark.parametrize("change, error, match", [
    (dict(num_heads=4.0), TypeError, "num_heads"),
    (dict(scale=float("nan")), ValueError, "scale"),
    (dict(input_layout="BNSD"), ValueError, "4-D"),
    (dict(precision="pasa_rs", check_inputs=1), TypeError, "check_inputs"),
    (dict(actual_seq_lengths=[{}]), (TypeError, ValueError), "actual_seq_lengths"),  # an unhashable item
    (dict(requires_grad=True), ValueError, "requires grad"),
])
def test_a_planned_signature_still_validates_other_calls(change, error, match):
    (q, k, v), kw = _kwargs("decode_bsh_gqa_fp32_frame", 0)
    kw["precision"] = "fp32"
    for _ in range(3):
        interface.fused_attention(q, k, v, **kw)
    if change.pop("requires_grad", False):
        q = q.clone().requires_grad_()
    with pytest.raises(error, match=match):
        interface.fused_attention(q, k, v, **dict(kw, **change))


def test_a_plan_keeps_none_of_its_inputs():
    (q, k, v), kw = _kwargs("decode_mask_fp32", 0)
    for _ in range(2):
        interface.fused_attention(q, k, v, **kw)
    assert len(_planned()) == 1
    refs = [weakref.ref(t) for t in (q, k, v, kw["atten_mask"])]
    del q, k, v, kw
    gc.collect()
    assert all(r() is None for r in refs)


@pytest.mark.parametrize("change", ["safety_net", "bfloat16", "int8_mask", "check_inputs", "varlen"])
def test_calls_a_plan_cannot_stand_for_are_not_planned(change, monkeypatch):
    (q, k, v), kw = _kwargs("prefill_bnsd_mask_pasa_fp32", 0)
    if change == "safety_net":  # pasa_fp32 can overflow: the safety net reads every result
        kw["safety_net"] = True
    elif change == "bfloat16":  # converted to FP16: the problem's tensors are not the inputs
        q, k, v = (t.bfloat16() for t in (q, k, v))
    elif change == "int8_mask":  # converted to bool
        kw["atten_mask"] = kw["atten_mask"].to(torch.int8)
    elif change == "check_inputs":
        monkeypatch.setenv("PASA_NPU_CHECK_INPUTS", "1")
    else:  # per-batch lengths: several kernel calls and padding
        kw["actual_seq_lengths"] = [24, 13]
    results = [interface.fused_attention(q, k, v, **kw) for _ in range(3)]
    assert not _planned()
    assert all(torch.equal(a, b_) for r in results[1:] for a, b_ in zip(r, results[0]))


def test_a_bound_launch_goes_back_through_triton_when_its_tensors_change(monkeypatch):
    """A plan's launch holds the compiled kernel for the dtypes and alignment it first saw (the launch tests
    in test_triton_launch.py cover the cache underneath)."""
    from support import _Kernel, fast_launch

    from pasa_npu.backends import triton_launch

    fast_launch(monkeypatch)
    kernel = _Kernel()
    launch = triton_launch.Launch(kernel, (2, 3, 1), (32, 0.5, 3), num_warps=4, BLOCK=64, D=16)
    a, b = torch.zeros(64, dtype=torch.float16), torch.zeros(64, dtype=torch.float32)
    launch((a, b))
    launch((a, b))
    launch((a[1:], b))  # misaligned: another specialisation
    launch((a, b.view(torch.int32)))  # another dtype
    launch((a, b))
    assert [entry[0] for entry in kernel.launches] == ["triton", "direct", "triton", "triton", "direct"]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU: synchronisations are CUDA's")
def test_cuda_paged_calls_make_no_host_device_synchronisation():
    """A paged call copies its lengths to the device asynchronously: the first call with a signature, the call
    that plans it, and a planned call."""
    rng = np.random.default_rng(1)
    b, n, nkv, d, page, lens = 2, 4, 2, 16, 32, [70, 129]
    k, v = (torch.randn(b, nkv, max(lens), d).half() for _ in range(2))
    kc, vc, table = (t.cuda() for t in _paged(k, v, lens, page, rng, four_d=False))
    q = torch.randn(b, 1, n * d).half().cuda()
    kw = dict(num_heads=n, num_key_value_heads=nkv, input_layout="BSH", scale=0.25, precision="pasa_rs",
              actual_seq_lengths_kv=lens, block_table=table, block_size=page)
    interface.fused_attention(q, kc, vc, **dict(kw, actual_seq_lengths_kv=[1, 2]))  # compile the kernels
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        for _ in range(3):
            interface.fused_attention(q, kc, vc, **kw)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert len(_planned()) == 1


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU: CUDA graphs")
def test_cuda_graph_capture_of_a_paged_call_needs_its_plan():
    rng = np.random.default_rng(2)
    b, n, nkv, d, page, lens = 2, 4, 2, 16, 32, [70, 129]
    k, v = (torch.randn(b, nkv, max(lens), d).half() for _ in range(2))
    kc, vc, table = (t.cuda() for t in _paged(k, v, lens, page, rng, four_d=True))
    q = torch.randn(b, n, 1, d).half().cuda()
    kw = dict(num_heads=n, num_key_value_heads=nkv, input_layout="BNSD", scale=0.25, precision="fp32",
              actual_seq_lengths_kv=lens, block_table=table, block_size=page, backend="triton")
    with pytest.raises(RuntimeError, match="make the same call twice before capturing"):
        with torch.cuda.graph(torch.cuda.CUDAGraph()):
            interface.fused_attention(q, kc, vc, **kw)
    interface._PLANS.clear()
    for _ in range(2):
        interface.fused_attention(q, kc, vc, **kw)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out, _ = interface.fused_attention(q, kc, vc, **kw)
    for seed in (3, 4):
        q.copy_(torch.randn(q.shape, generator=torch.Generator().manual_seed(seed)).half())
        graph.replay()
        want, _ = _unplanned(q, kc, vc, kw)
        assert torch.equal(out, want)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU: streams and CUDA graphs")
def test_split_kv_calls_on_two_streams_and_a_graph_replay_merge_their_own_splits():
    """Split decode calls issued on two streams at once, beside replays of a captured one on a third: each launch
    counts its splits apart (a stream's own counters; a graph's own), so each merges its own partials. Counters
    shared by concurrent launches would let one launch's last split merge another's unfinished partials."""
    kw = dict(num_heads=32, num_key_value_heads=8, input_layout="BNSD", scale=128 ** -0.5, precision="fp32_frame",
              backend="triton")
    inputs = [_draw(seed, 1, 32, 8, 1, 4096, 128, "BNSD") for seed in range(2)]
    for _ in range(2):  # the call that plans the signature, then a planned one
        wants = [interface.fused_attention(*t, **kw)[0] for t in inputs]
    assert _planned()[0].run._splits > 1
    static = [t.clone() for t in inputs[0]]
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        replayed, _ = interface.fused_attention(*static, **kw)
    streams = [torch.cuda.Stream() for _ in range(3)]
    outs = ([], [])
    torch.cuda.synchronize()
    for _ in range(50):
        for i in range(2):
            with torch.cuda.stream(streams[i]):
                outs[i].append(interface.fused_attention(*inputs[i], **kw)[0])
        with torch.cuda.stream(streams[2]):
            graph.replay()
    torch.cuda.synchronize()
    for got, want in zip(outs, wants):
        assert all(torch.equal(o, want) for o in got)
    assert torch.equal(replayed, wants[0])


def _tnd_step(seed: int, requests, t: int = 8, width: int = 4, pages: int = 16, page: int = 16):
    """A TND serving step on DEVICE: ``requests`` as (query rows, keys), a query of ``t`` rows, (pages, page, Nkv·D)
    caches, a table ``width`` pages wide, the cumulative query lengths and the key lengths as int32 tensors."""
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(t, 4, 16, generator=g).half()
    kc, vc = (torch.randn(pages, page, 2 * 16, generator=g).half() for _ in range(2))
    table = torch.randperm(pages, generator=g)[:len(requests) * width].reshape(len(requests), width).int()
    cum = torch.tensor(np.cumsum([r for r, _ in requests]), dtype=torch.int32)
    kv = torch.tensor([c for _, c in requests], dtype=torch.int32)
    return [x.to(DEVICE) for x in (q, kc, vc, table, cum, kv)]


def _planned_tnd_call():
    """A TND call with a block table and its lengths as tensors, made twice (planned): its inputs and arguments."""
    q, kc, vc, table, cum, kv = _tnd_step(0, [(1, 40), (3, 17), (2, 64)])
    kw = dict(num_heads=4, num_key_value_heads=2, input_layout="TND", scale=0.25, softmax_lse_flag=True,
              block_table=table, block_size=16, sparse_mode=3, atten_mask=COMPRESSED.to(DEVICE), precision="fp32",
              block_kv=16, backend="triton", actual_seq_lengths=cum, actual_seq_lengths_kv=kv)
    for _ in range(2):
        interface.fused_attention(q, kc, vc, **kw)
    assert len(_planned()) == 1 and _planned()[0].device_lens
    return (q, kc, vc), kw


def _each_new_lengths(qkv, kw, call) -> None:
    """Writes new lengths into the call's length tensors (batches with no query row or no key among them) and checks
    what ``call()`` then returns against the full path on those lengths and the reference backend's numbers."""
    cum, kv = kw["actual_seq_lengths"], kw["actual_seq_lengths_kv"]
    for requests in ([(4, 1), (0, 30), (3, 64)], [(2, 0), (2, 50), (1, 9)]):
        new_cum, new_kv = _tnd_step(0, requests)[4:]
        cum.copy_(new_cum)
        kv.copy_(new_kv)
        out, lse = call()
        want, want_lse = _unplanned(*qkv, dict(kw, actual_seq_lengths=new_cum, actual_seq_lengths_kv=new_kv))
        assert torch.equal(out, want) and torch.equal(lse, want_lse)
        ref, _ = interface.fused_attention(*(t.cpu() for t in qkv), **dict(
            kw, backend="reference", block_table=kw["block_table"].cpu(), atten_mask=COMPRESSED,
            actual_seq_lengths=new_cum.tolist(), actual_seq_lengths_kv=new_kv.tolist()))
        assert (out.cpu().float() - ref.float()).abs().max() < 2e-3


def test_a_planned_tnd_call_reads_the_lengths_its_tensors_hold_at_each_call(monkeypatch):
    """TND with a block table and its lengths as device tensors: the plan holds no length, each call (each replay of
    a captured one, below) reads the values the tensors then hold, as a server's graph inputs do between replays.
    (CPU tensors stand in for CUDA ones under the interpreter.)"""
    if DEVICE == "cpu":  # lengths in CPU tensors are read on the host, unless they stand in for CUDA ones
        from pasa_npu import problem

        def on_device(q_lens, kv_lens, input_layout, block_table, check_inputs):
            return input_layout == "TND" and block_table is not None and isinstance(q_lens, torch.Tensor) \
                and isinstance(kv_lens, torch.Tensor)

        monkeypatch.setattr(problem, "keeps_lengths_on_device", on_device)
        monkeypatch.setattr(interface, "keeps_lengths_on_device", on_device)
    qkv, kw = _planned_tnd_call()
    _each_new_lengths(qkv, kw, lambda: interface.fused_attention(*qkv, **kw))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU: CUDA graphs")
def test_cuda_graph_of_a_planned_tnd_call_replays_the_lengths_its_tensors_hold():
    """The planned call above captured in a CUDA graph: each replay reads the lengths written into the captured
    length tensors."""
    qkv, kw = _planned_tnd_call()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out, lse = interface.fused_attention(*qkv, **kw)
    _each_new_lengths(qkv, kw, lambda: graph.replay() or (out, lse))
