"""fused_attention as a PyTorch operator: torch.library registration, torch.compile, no host-device
synchronisation on the fast path, CUDA graph capture (the CUDA cases run on a GPU machine)."""

from __future__ import annotations

import pytest
import torch

import pasa_npu
from pasa_npu.precision import ALLOCATIONS

COMPRESSED = torch.triu(torch.ones(2048, 2048, dtype=torch.bool), diagonal=1)
HAS_CUDA = torch.cuda.is_available()


def _inputs(device="cpu", b=2, n=4, nkv=2, s1=40, s2=150, d=32, layout="BSH", seed=0):
    g = torch.Generator().manual_seed(seed)
    if layout == "BSH":
        shapes = (b, s1, n * d), (b, s2, nkv * d)
    else:
        shapes = (b, n, s1, d), (b, nkv, s2, d)
    q = (torch.randn(shapes[0], generator=g) + 1).half().to(device)
    k = (torch.randn(shapes[1], generator=g) + 1).half().to(device)
    v = torch.randn(shapes[1], generator=g).half().to(device)
    return q, k, v


CONFIGS = {
    "bsh_gqa_mask": dict(layout="BSH", kw=dict(num_heads=4, num_key_value_heads=2, input_layout="BSH",
                                               atten_mask="random", softmax_lse_flag=True)),
    "bnsd_causal_varlen": dict(layout="BNSD", kw=dict(num_heads=4, num_key_value_heads=2, input_layout="BNSD",
                                                      sparse_mode=3, atten_mask=COMPRESSED,
                                                      actual_seq_lengths=[40, 17],
                                                      actual_seq_lengths_kv=[150, 60], softmax_lse_flag=True)),
    "bnsd_bsnd_no_lse": dict(layout="BNSD", kw=dict(num_heads=4, num_key_value_heads=2, input_layout="BNSD_BSND")),
}


def _config(name, device="cpu"):
    cfg = CONFIGS[name]
    q, k, v = _inputs(device, layout=cfg["layout"])
    kw = dict(cfg["kw"], scale=32 ** -0.5)
    if isinstance(kw.get("atten_mask"), str):
        kw["atten_mask"] = (torch.rand(2, 1, 40, 150, generator=torch.Generator().manual_seed(1)) < 0.2).to(device)
    elif "atten_mask" in kw:
        kw["atten_mask"] = kw["atten_mask"].to(device)
    return q, k, v, kw


def test_the_operator_is_registered_with_a_fake_implementation():
    assert pasa_npu.fused_attention  # the first use of the entry point registers the operator
    op = torch.ops.pasa_npu.fused_attention.default
    q, k, v, kw = _config("bsh_gqa_mask")
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode() as mode:
        fq, fk, fv = (mode.from_tensor(t) for t in (q, k, v))
        fmask = mode.from_tensor(kw.pop("atten_mask"))
        out, lse = op(fq, fk, fv, fmask, None, None, actual_seq_lengths=None, actual_seq_lengths_kv=None,
                      num_heads=4, scale=kw["scale"], pre_tokens=2147483647, next_tokens=2147483647,
                      input_layout="BSH", num_key_value_heads=2, sparse_mode=0, inner_precise=0, block_size=0,
                      softmax_lse_flag=True, precision="pasa_fp32", beta=None, block_q=None, block_kv=None,
                      backend=None, check_inputs=None, safety_net=True)
    assert tuple(out.shape) == tuple(q.shape) and out.dtype == torch.float16
    assert tuple(lse.shape) == (2, 4, 40, 1) and lse.dtype == torch.float32


def test_the_fake_implementation_validates_like_the_real_one():
    q, k, v, kw = _config("bsh_gqa_mask")
    kw["num_heads"] = 3
    compiled = torch.compile(pasa_npu.fused_attention, fullgraph=True, backend="eager")
    with pytest.raises(Exception, match=r"num_heads \(3\) must be a multiple of num_key_value_heads \(2\)"):
        compiled(q, k, v, **kw)


@pytest.mark.parametrize("name", list(CONFIGS))
def test_compile_fullgraph_equals_eager(name):
    q, k, v, kw = _config(name)
    eager = pasa_npu.fused_attention(q, k, v, **kw)
    torch._dynamo.reset()
    compiled = torch.compile(lambda q, k, v: pasa_npu.fused_attention(q, k, v, **kw), fullgraph=True)
    got = compiled(q, k, v)
    assert torch.equal(got[0], eager[0]) and torch.equal(got[1], eager[1])


def test_inputs_that_require_grad_are_refused_as_inference_only():
    q, k, v, kw = _config("bsh_gqa_mask")
    with pytest.raises(ValueError, match="query requires grad: fused_attention is inference-only"):
        pasa_npu.fused_attention(q.float().requires_grad_(), k.float(), v.float(), **kw)
    with torch.no_grad():  # the same tensors are fine where no graph is recorded
        out, _ = pasa_npu.fused_attention(q.float().requires_grad_(), k.float(), v.float(), **kw)
    assert out.dtype == torch.float32 and not out.requires_grad


# ------------------------------------------------------------------------------------------------
# CUDA: no synchronisation, graph capture
# ------------------------------------------------------------------------------------------------

needs_cuda = pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA GPU (runs on the GPU machine)")
FAST = [name for name, a in ALLOCATIONS.items() if a.overflow_free]


@needs_cuda
@pytest.mark.parametrize("precision", FAST)
@pytest.mark.parametrize("name", list(CONFIGS))
def test_cuda_call_makes_no_host_device_synchronisation(name, precision):
    q, k, v, kw = _config(name, "cuda")
    kw["actual_seq_lengths"] = kw.get("actual_seq_lengths")  # lists, read on the host
    pasa_npu.fused_attention(q, k, v, precision=precision, **kw)  # compile the kernels first
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        for _ in range(2):  # the call that plans the signature, then a planned call (docs/fia.md)
            pasa_npu.fused_attention(q, k, v, precision=precision, **kw)
    finally:
        torch.cuda.set_sync_debug_mode("default")


@needs_cuda
@pytest.mark.parametrize("precision", FAST)
def test_cuda_graph_capture_replays_correctly(precision):
    q, k, v, kw = _config("bnsd_causal_varlen", "cuda")
    static = [t.clone() for t in (q, k, v)]
    pasa_npu.fused_attention(*static, precision=precision, **kw)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out, lse = pasa_npu.fused_attention(*static, precision=precision, **kw)
    for seed in (5, 6):
        fresh = _inputs("cuda", layout="BNSD", seed=seed)
        for dst, src in zip(static, fresh):
            dst.copy_(src)
        graph.replay()
        want, want_lse = pasa_npu.fused_attention(*fresh, precision=precision, **kw)
        assert torch.equal(out, want) and torch.equal(lse, want_lse)


@needs_cuda
def test_cuda_graph_capture_of_a_safety_net_that_needs_a_sync_is_a_clear_error():
    netted = [name for name, a in ALLOCATIONS.items() if not a.overflow_free and a.shifted]
    q, k, v, kw = _config("bsh_gqa_mask", "cuda")
    pasa_npu.fused_attention(q, k, v, precision=netted[0], **kw)
    graph = torch.cuda.CUDAGraph()
    with pytest.raises(RuntimeError, match="safety_net=False"):
        with torch.cuda.graph(graph):
            pasa_npu.fused_attention(q, k, v, precision=netted[0], **kw)


@needs_cuda
def test_cuda_compile_fullgraph_equals_eager():
    q, k, v, kw = _config("bsh_gqa_mask", "cuda")
    eager = pasa_npu.fused_attention(q, k, v, **kw)
    torch._dynamo.reset()
    got = torch.compile(lambda q, k, v: pasa_npu.fused_attention(q, k, v, **kw), fullgraph=True)(q, k, v)
    assert torch.equal(got[0], eager[0]) and torch.equal(got[1], eager[1])
