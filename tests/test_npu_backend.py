"""The ``npu`` backend (python/pasa_npu/backends/npu.py).

What runs here (no NPU, no CANN, no torch_npu): availability reporting, argument checks, and the
translation from the backend protocol to the op's FIA-level arguments. For the last, the extension
``pasa_npu._npu_ext`` is replaced by a stand-in that forwards the very arguments the backend passes to
the same kernel on the host model (``pasa_npu.npu_host_model.run``), so a wrong layout, mask
orientation, head count, β or lse convention shows up as a mismatch with the reference backend.
On an NPU the real extension is exercised by scripts/build_and_deploy.sh's on-device check instead.
"""

from __future__ import annotations

import importlib.util
import math

import numpy as np
import pytest
import torch

import pasa_npu
from pasa_npu import metrics
from pasa_npu.backends import npu
from pasa_npu.interface import LSE_NO_KEY

HAS_TORCH_NPU = importlib.util.find_spec("torch_npu") is not None


def _host_model_built() -> bool:
    try:
        from pasa_npu import _npu_host_model  # noqa: F401
    except ImportError:
        return False
    return True


@pytest.mark.skipif(HAS_TORCH_NPU, reason="torch_npu is installed here; this checks the machine without it")
def test_unavailable_without_torch_npu_says_why():
    assert npu.is_available() is False
    reason = npu.unavailable_reason()
    assert reason is not None and "torch_npu" in reason


@pytest.mark.skipif(HAS_TORCH_NPU, reason="torch_npu is installed here; this checks the machine without it")
def test_fused_attention_backend_npu_names_the_build_script():
    q = torch.randn(1, 2, 8, 16, dtype=torch.float16)
    with pytest.raises(RuntimeError, match=r"scripts/build_and_deploy\.sh"):
        pasa_npu.fused_attention(q, q, q, num_heads=2, input_layout="BNSD", backend="npu")


@pytest.mark.parametrize("precision", ["fp16", "fp32", "fp16_fp32", "PASA"])
def test_precisions_the_kernel_lacks_are_refused_with_the_accepted_ones(precision):
    q = torch.zeros(1, 1, 4, 16, dtype=torch.float16)
    with pytest.raises(ValueError, match=r"precision must be one of \('pasa', 'pasa_fp32'\)"):
        npu.attention(q, q, q, precision=precision, beta=None, block_q=128, block_kv=128, scale=0.25, mask=None)


def test_other_kv_block_lengths_are_refused():
    q = torch.zeros(1, 1, 4, 16, dtype=torch.float16)
    with pytest.raises(ValueError, match=r"block_size.*128.*block_kv=64"):
        npu.attention(q, q, q, precision="pasa", beta=None, block_q=128, block_kv=64, scale=0.25, mask=None)


@pytest.mark.parametrize("shape, want", [((5, 7), (1, 1, 5, 7)), ((3, 5, 7), (1, 3, 5, 7)),
                                         ((2, 1, 5, 7), (2, 1, 5, 7)), ((2, 3, 5, 7), (2, 3, 5, 7))])
def test_mask_becomes_4d_without_copying_broadcast_dims(shape, want):
    mask = torch.rand(shape) > 0.5
    m = npu._mask_4d(mask, 2, 3, 5, 7)
    assert tuple(m.shape) == want and m.is_contiguous()
    assert torch.equal(m.expand(2, 3, 5, 7), mask.expand(2, 3, 5, 7))


@pytest.mark.parametrize("shape", [(5, 8), (4, 7), (3, 3, 5, 7), (1, 2, 3, 5, 7)])
def test_mask_of_the_wrong_shape_is_refused(shape):
    with pytest.raises(ValueError, match="mask"):
        npu._mask_4d(torch.zeros(shape, dtype=torch.bool), 2, 3, 5, 7)


class _HostModelExt:
    """Stands in for pasa_npu._npu_ext: forwards the op's arguments to the kernel on the host model."""

    def __init__(self):
        self.calls = []

    @staticmethod
    def op_library():
        return "host-model stand-in"

    def fused_attention(self, query, key, value, atten_mask, actual_seq_lengths, actual_seq_lengths_kv, *,
                        num_heads, scale, pre_tokens, next_tokens, input_layout, num_key_value_heads, sparse_mode,
                        inner_precise, beta, precision):
        from pasa_npu import npu_host_model

        self.calls.append(dict(input_layout=input_layout, num_heads=num_heads, mask=atten_mask))
        assert inner_precise in (0, 1, 2, 3) and actual_seq_lengths is None and actual_seq_lengths_kv is None
        return npu_host_model.run(
            query, key, value, atten_mask=atten_mask, num_heads=num_heads, scale=scale, pre_tokens=pre_tokens,
            next_tokens=next_tokens, input_layout=input_layout, num_key_value_heads=num_key_value_heads,
            sparse_mode=sparse_mode, softmax_lse_flag=True, precision=precision,
            beta=None if beta < 0 else beta)


@pytest.mark.skipif(not _host_model_built(), reason="pasa_npu._npu_host_model is not built (pip install -e .)")
@pytest.mark.parametrize("precision", ["pasa", "pasa_fp32"])
def test_backend_through_the_kernel_on_the_host_model_matches_the_reference(monkeypatch, precision):
    fake = _HostModelExt()
    monkeypatch.setattr(npu, "_ext", lambda: fake)
    monkeypatch.setattr(npu, "unavailable_reason", lambda: None)
    g = torch.Generator().manual_seed(3)
    b, n, nkv, s1, s2, d = 2, 4, 2, 70, 200, 64   # GQA, a query tail and a KV tail (200 = 128 + 72)
    q = (torch.randn(b, s1, n * d, generator=g) + 2).half()   # BSH in, BNSD to the backend
    k = (torch.randn(b, s2, nkv * d, generator=g) + 2).half()
    v = torch.randn(b, s2, nkv * d, generator=g).half()
    mask = torch.rand(b, 1, s1, s2, generator=g) < 0.3
    mask[1, 0, 5, :] = True                                   # a row with no key: out 0, lse -inf
    kw = dict(atten_mask=mask, num_heads=n, num_key_value_heads=nkv, input_layout="BSH", scale=d ** -0.5,
              sparse_mode=0, softmax_lse_flag=True, precision=precision)
    out, lse = pasa_npu.fused_attention(q, k, v, backend="npu", **kw)
    ref, ref_lse = pasa_npu.fused_attention(q, k, v, backend="reference", **kw)

    assert fake.calls and fake.calls[0]["input_layout"] == "BNSD" and fake.calls[0]["num_heads"] == n
    assert out.shape == ref.shape and out.dtype == torch.float16 and lse.shape == ref_lse.shape
    assert torch.equal(out.view(b, s1, n, d)[1, 5], torch.zeros(n, d, dtype=torch.float16))
    assert lse[1, 0, 5, 0] == ref_lse[1, 0, 5, 0] == LSE_NO_KEY   # the front end's FIA value for it
    # The translation to BNSD and back is exact: the same kernel called directly on the BSH inputs.
    from pasa_npu import golden, npu_host_model

    direct, _ = npu_host_model.run(q, k, v, **kw)
    assert torch.equal(out, direct)
    assert torch.allclose(lse, ref_lse, rtol=1e-3, atol=1e-2)
    # And it means what the reference means: as accurate against float64 (within 10% of its relative RMSE).
    q4, k4, v4 = (x.view(b, -1, h, d).transpose(1, 2).contiguous() for x, h in ((q, n), (k, nkv), (v, nkv)))
    f64, _ = golden.reference(q4.numpy(), k4.numpy(), v4.numpy(), scale=d ** -0.5, mask=mask.numpy())
    f64 = torch.from_numpy(f64).transpose(1, 2).reshape(b, s1, n * d).numpy()
    assert metrics.rmse(out.numpy(), f64) <= 1.1 * metrics.rmse(ref.numpy(), f64)

    # The backend protocol itself (what fused_attention receives): -inf for the row with no key.
    _, lse4 = npu.attention(q4, k4, v4, precision=precision, beta=None, block_q=128, block_kv=128,
                            scale=d ** -0.5, mask=mask)
    assert lse4.shape == (b, n, s1) and lse4[1, 0, 5] == -math.inf and torch.isfinite(lse4[0]).all()


@pytest.mark.skipif(not _host_model_built(), reason="pasa_npu._npu_host_model is not built (pip install -e .)")
def test_rows_whose_shifted_scores_overflow_are_recomputed_on_the_wide_path(monkeypatch):
    """Zero-mean keys of amplitude 100 (nothing for PASA's shift to remove): |S'| = 100*100*64/8 = 80000 >
    65504, so S' overflows in FP16 and the kernel's rows are not finite; the backend must return the
    float64-accurate answer instead."""
    from pasa_npu import golden, npu_host_model

    fake = _HostModelExt()
    monkeypatch.setattr(npu, "_ext", lambda: fake)
    g = torch.Generator().manual_seed(5)
    b, n, s1, s2, d = 1, 2, 16, 256, 64
    q = torch.full((b, n, s1, d), 100.0, dtype=torch.float16)
    q[:, 1] = torch.randn(s1, d, generator=g).half()           # head 1: ordinary scores, kept from the kernel
    sign = torch.tensor([1.0, -1.0]).repeat(s2 // 2)[:, None]
    k = (100 * sign * torch.ones(s2, d)).half().expand(b, n, s2, d).contiguous()
    v = torch.randn(b, n, s2, d, generator=g).half()
    raw, _ = npu_host_model.run(q, k, v, num_heads=n, input_layout="BNSD", scale=d ** -0.5,
                                softmax_lse_flag=True, precision="pasa")
    assert not torch.isfinite(raw[:, 0]).all() and torch.isfinite(raw[:, 1]).all()  # the kernel did overflow

    out, lse = npu.attention(q, k, v, precision="pasa", beta=None, block_q=128, block_kv=128, scale=d ** -0.5,
                             mask=None)
    ref, ref_lse = golden.reference(q.numpy(), k.numpy(), v.numpy(), scale=d ** -0.5)
    assert torch.isfinite(out).all() and torch.isfinite(lse).all()
    assert metrics.rmse(out[:, 0].float().numpy(), ref[:, 0]) < 1e-3
    assert torch.equal(out[:, 1], raw[:, 1])                      # rows that did not overflow: the kernel's
    assert np.allclose(lse[:, 0].numpy(), ref_lse[:, 0], rtol=1e-6)
