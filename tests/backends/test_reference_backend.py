"""The torch ``reference`` backend against the NumPy golden model on the same allocation and blocks.

Both run the loop of pasa_npu.blockwise; they can differ only where NumPy's and PyTorch's float32
elementary functions do. Premise checked here: every exp argument of the FP16-state allocations is
an FP16 value, and over *all* finite FP16 values NumPy's and PyTorch's float32 exp round to the same
FP16 — so ``fp16`` and ``pasa`` must agree bit for bit. In the allocations with FP32 state the float32
exp results differ in the last bit ~40 % of the time; that can flip the FP16 rounding of a weight
fed to P·V and of O/l, so ≤ 1 % of outputs move, each by at most one FP16 ulp of itself plus one of
its row's largest output.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

torch = pytest.importorskip("torch")

from pasa_npu import golden, metrics  # noqa: E402
from pasa_npu.backends import reference  # noqa: E402
from pasa_npu.precision import PRECISIONS  # noqa: E402

FP16_STATE = ("fp16", "pasa")
# The reference backend must also agree with the golden model on a GPU. CI has none: these cases
# are skipped there and run on the GPU machine with
#   PYTHONPATH=python python3 -m pytest tests/backends/test_reference_backend.py -k cuda
DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(
    not torch.cuda.is_available(), reason="needs a CUDA GPU (CI has none); run on the GPU machine"))]


def run_both(q, k, v, precision, *, beta=None, block_q=128, block_kv=128, scale, mask=None, device="cpu"):
    """golden on NumPy and reference on torch (on ``device``), from the same FP16 values."""
    g_out, g_lse = golden.attention(q, k, v, precision=precision, beta=beta, block_q=block_q,
                                    block_kv=block_kv, scale=scale, mask=mask)
    t = [torch.from_numpy(np.asarray(x, dtype=np.float16)).to(device) for x in (q, k, v)]
    tm = None if mask is None else torch.from_numpy(np.asarray(mask)).to(device)
    r_out, r_lse = reference.attention(*t, precision=precision, beta=beta, block_q=block_q,
                                       block_kv=block_kv, scale=scale, mask=tm)
    assert r_out.dtype == torch.float16 and r_lse.dtype == torch.float32
    assert r_out.device.type == device
    assert tuple(r_out.shape) == g_out.shape and tuple(r_lse.shape) == g_lse.shape
    return g_out, g_lse, r_out.cpu().numpy(), r_lse.cpu().numpy()


def ulp16(x):
    ax = np.maximum(np.abs(x), 2.0**-14)
    return 2.0 ** (np.floor(np.log2(ax)) - 10)


def check_agreement(precision, g_out, g_lse, r_out, r_lse):
    if precision in FP16_STATE:
        np.testing.assert_array_equal(r_out.view(np.uint16), g_out.view(np.uint16))
    else:
        a, b = g_out.astype(np.float64), r_out.astype(np.float64)
        np.testing.assert_array_equal(np.isnan(a), np.isnan(b))
        fin = np.isfinite(a)
        # A last-bit difference of an FP32 exp can flip the FP16 rounding of one weight p_j fed to
        # P·V: that moves an output by ≤ 2⁻¹¹·(p_j/l)·|v_j|, which is below one FP16 ulp of the row's
        # largest output but can be several ulps of a small (cancelling) output. So: within one ulp
        # of the element plus one ulp of its row's largest magnitude.
        rowmax = np.where(fin, np.abs(a), 0.0).max(axis=-1, keepdims=True)
        tol = ulp16(a) + np.where(rowmax > 0, ulp16(rowmax), 0.0)
        assert (np.abs(a - b)[fin] <= tol[fin]).all()
        assert (a[fin] == b[fin]).mean() >= 0.99
    np.testing.assert_array_equal(np.isneginf(r_lse), np.isneginf(g_lse))
    np.testing.assert_array_equal(np.isnan(r_lse), np.isnan(g_lse))
    fin = np.isfinite(g_lse)
    # lse = m + log l (+ I·F) in FP32: float32 log differs by ≤ 1 ulp between the libraries (FP32
    # state adds the l differences of FP32 exp): a few FP32 ulps of |lse|
    np.testing.assert_allclose(r_lse[fin], g_lse[fin], rtol=4e-6, atol=1e-6)


@pytest.mark.parametrize("device", DEVICES)
def test_premise_fp16_exp_identical_in_numpy_and_torch(device):
    x = np.arange(0, 2**16, dtype=np.uint32).astype(np.uint16).view(np.float16)
    x = x[np.isfinite(x)].astype(np.float32)
    with np.errstate(over="ignore"):
        a = np.exp(x).astype(np.float16)
        b = torch.exp(torch.from_numpy(x).to(device)).cpu().numpy().astype(np.float16)
    np.testing.assert_array_equal(a.view(np.uint16), b.view(np.uint16))


def _inputs(rng, b, n, nkv, s1, s2, d, mean=0.0, amp=1.0):
    q = (rng.standard_normal((b, n, s1, d)) * amp + mean).astype(np.float16)
    k = (rng.standard_normal((b, nkv, s2, d)) * amp + mean).astype(np.float16)
    v = rng.standard_normal((b, nkv, s2, d)).astype(np.float16)
    return q, k, v


@settings(max_examples=80, deadline=None, database=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(
    precision=st.sampled_from(PRECISIONS),
    b=st.integers(1, 2),
    nkv=st.sampled_from([1, 2]),
    g=st.sampled_from([1, 2, 3]),
    s1=st.integers(1, 40),
    s2=st.integers(1, 300),
    d=st.sampled_from([16, 32, 64, 128]),
    block_kv=st.sampled_from([16, 37, 64, 128]),
    block_q=st.sampled_from([8, 128]),
    mask_kind=st.sampled_from([None, "random", "causal", "broadcast"]),
    seed=st.integers(0, 2**31 - 1),
)
def test_reference_matches_golden(precision, b, nkv, g, s1, s2, d, block_kv, block_q, mask_kind, seed):
    rng = np.random.default_rng(seed)
    n = nkv * g
    q, k, v = _inputs(rng, b, n, nkv, s1, s2, d)
    if mask_kind == "random":
        mask = rng.random((b, n, s1, s2)) < 0.3
    elif mask_kind == "causal":
        mask = golden.causal_mask(s1, s2)
    elif mask_kind == "broadcast":
        mask = rng.random((b, 1, s1, s2)) < 0.3
    else:
        mask = None
    res = run_both(q, k, v, precision, block_q=block_q, block_kv=block_kv, scale=1 / math.sqrt(d), mask=mask)
    check_agreement(precision, *res)
    # both are attention: check the golden side is sane too (finite where not fully masked)
    g_out = res[0]
    empty = np.zeros((b, n, s1), bool) if mask is None else np.broadcast_to(mask, (b, n, s1, s2)).all(-1)
    assert np.isfinite(g_out[~empty]).all()
    assert (g_out[empty] == 0).all()


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("precision", PRECISIONS)
def test_reference_matches_golden_fixed_cases(precision, device):
    rng = np.random.default_rng(31)
    cases = [
        (1, 4, 2, 37, 200, 64, 128),  # tails, GQA
        (2, 4, 1, 1, 257, 128, 128),  # decode, MQA, tail of 1
        (1, 2, 2, 130, 130, 32, 64),  # S1 > block_q
    ]
    for b, n, nkv, s1, s2, d, bkv in cases:
        q, k, v = _inputs(rng, b, n, nkv, s1, s2, d)
        mask = rng.random((b, n, s1, s2)) < 0.2
        mask[0, 0, 0] = True  # one fully masked row
        res = run_both(q, k, v, precision, block_kv=bkv, scale=1 / math.sqrt(d), mask=mask, device=device)
        check_agreement(precision, *res)
        assert (res[2][0, 0, 0] == 0).all() and np.isneginf(res[3][0, 0, 0])
        ref_o, _ = golden.reference(q, k, v, scale=1 / math.sqrt(d), mask=mask)
        assert metrics.rmse(res[2], ref_o) < 2e-2


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("precision", PRECISIONS)
def test_reference_matches_golden_on_overflowing_inputs(precision, device):
    """Uniform U(29.5, 30.5), D = 128: both must produce the same NaNs (fp16, fp16_fp32) or the same
    finite outputs (fp32, pasa, pasa_fp32): overflow handling is part of the emulation."""
    rng = np.random.default_rng(32)
    q, k, v = (rng.uniform(29.5, 30.5, (1, 2, s, 128)).astype(np.float16) for s in (16, 256, 256))
    g_out, g_lse, r_out, r_lse = run_both(q, k, v, precision, scale=128**-0.5, device=device)
    if precision in ("fp16", "fp16_fp32"):
        assert np.isnan(g_out).any(-1).all() and np.isnan(r_out).any(-1).all()
        np.testing.assert_array_equal(np.isnan(r_out), np.isnan(g_out))
    else:
        assert np.isfinite(g_out).all()
        check_agreement(precision, g_out, g_lse, r_out, r_lse)


@pytest.mark.parametrize("beta", [0.0, 0.9375, 0.99])
def test_reference_matches_golden_with_explicit_beta(beta):
    rng = np.random.default_rng(33)
    q, k, v = _inputs(rng, 1, 2, 1, 20, 190, 64, mean=0.5)
    for p in ("pasa", "pasa_fp32"):
        check_agreement(p, *run_both(q, k, v, p, beta=beta, block_kv=64, scale=0.125))


def test_reference_block_q_invariance():
    rng = np.random.default_rng(34)
    q, k, v = (torch.from_numpy(x) for x in _inputs(rng, 1, 2, 2, 33, 100, 32))
    for p in PRECISIONS:
        base = reference.attention(q, k, v, precision=p, beta=None, block_q=128, block_kv=32, scale=0.2, mask=None)
        for bq in (1, 5, 33):
            o, l = reference.attention(q, k, v, precision=p, beta=None, block_q=bq, block_kv=32, scale=0.2, mask=None)
            assert torch.equal(o, base[0]) and torch.equal(l, base[1])


def test_reference_does_not_leave_tf32_enabled_or_track_grad():
    rng = np.random.default_rng(35)
    q, k, v = (torch.from_numpy(x).requires_grad_(False) for x in _inputs(rng, 1, 1, 1, 4, 20, 16))
    before = torch.backends.cuda.matmul.allow_tf32
    o, l = reference.attention(q, k, v, precision="pasa", beta=None, block_q=128, block_kv=128, scale=0.25, mask=None)
    assert torch.backends.cuda.matmul.allow_tf32 == before
    assert not o.requires_grad


def test_a_long_cpu_emulation_is_announced_before_it_starts(monkeypatch):
    """The emulator shows no progress: from backends.LONG_EMULATION multiply-adds of Q·Kᵀ on the CPU a call
    says, before any work, that it will take long (the threshold lowered here to a small call's work)."""
    import warnings

    from pasa_npu import backends
    from pasa_npu.problem import make_problem

    q = torch.zeros(1, 2, 8, 16, dtype=torch.float16)
    problem = make_problem(q, q, q, num_heads=2, input_layout="BNSD")
    monkeypatch.setattr(backends, "LONG_EMULATION", 2 * 8 * 8 * 16)
    with pytest.warns(RuntimeWarning, match=r"'reference' backend.*B·N·S1·S2·D = 2,048 on the CPU"):
        backends.select(problem)
    monkeypatch.setattr(backends, "LONG_EMULATION", 2 * 8 * 8 * 16 + 1)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        backends.select(problem)
