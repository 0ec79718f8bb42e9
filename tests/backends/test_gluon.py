"""The Gluon Hopper kernel of ``fp32`` and ``fp32_frame``: the rule that picks it (CPU, in CI) and, on an sm_90 GPU
only, its results against the classic Triton kernel, the golden model and float64.

CI has no GPU (and no triton): the GPU cases are skipped there. On an H100 or H200:
    PYTHONPATH=python python3 -m pytest -q tests/backends/test_gluon.py
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from pasa_npu.backends import triton as tb
from pasa_npu.precision import get_allocation

FP32, FRAME = get_allocation("fp32"), get_allocation("fp32_frame")
HOPPER = (9, 0)


@pytest.mark.parametrize(("alloc", "d", "block_kv", "s1", "capability", "plain", "block"), [
    (FP32, 128, 128, 4096, HOPPER, True, 128),
    (FP32, 64, 64, 128, HOPPER, True, 128),  # fp32's KV block is the kernel's own
    (FP32, 256, 128, 4096, HOPPER, True, 64),
    (FRAME, 128, 128, 5676, HOPPER, True, 128),
    (FRAME, 64, 64, 4096, HOPPER, True, 64),  # fp32_frame's block is its allocation's
    (FRAME, 256, 64, 4096, HOPPER, True, 64),
    (FRAME, 256, 128, 4096, HOPPER, True, None),  # two stages of 128 keys at D = 256 do not fit shared memory
    (FRAME, 128, 32, 4096, HOPPER, True, None),
    (FRAME, 128, 128, 127, HOPPER, True, None),  # less than one query tile (decode, short prefill)
    (FRAME, 96, 128, 4096, HOPPER, True, None),
    (FRAME, 128, 128, 4096, (9, 1), True, None),
    (FRAME, 128, 128, 4096, (8, 0), True, None),
    (FRAME, 128, 128, 4096, (10, 0), True, None),
    (FRAME, 128, 128, 4096, None, True, None),
    (FRAME, 128, 128, 4096, HOPPER, False, None),  # a mask, sink, page table, varlen rows or other strides
    (get_allocation("pasa_rs"), 128, 128, 4096, HOPPER, True, None),
    (get_allocation("pasa"), 128, 128, 4096, HOPPER, True, None),
])
def test_rule_picks_gluon_for_the_shapes_it_covers(alloc, d, block_kv, s1, capability, plain, block):
    work = 4 * 16 * s1 * 32768 * d  # B = 4, N = 16, 32768 keys: past the least work
    assert tb.gluon_block(alloc, d, block_kv, s1, capability, plain, work) == block
    assert tb.gluon_block(alloc, d, block_kv, s1, capability, plain, None) == block  # the kernel pinned


@pytest.mark.parametrize(("shape", "block"), [
    ((1, 32, 8, 512, 512, 128), None),  # a short prefill: the classic kernel's launch costs less host time
    ((1, 32, 8, 1536, 1536, 128), 128),  # from 2^33 of work the Gluon kernel's shorter GPU time pays for its launch
    ((1, 32, 8, 4096, 4096, 128), 128),
    ((4, 16, 16, 4096, 4096, 128), 128),
    ((1, 1, 1, 65536, 131072, 128), 128),
])
def test_rule_leaves_small_calls_on_the_classic_kernel_unless_gluon_is_pinned(shape, block):
    b, n, _, s1, s2, d = shape
    work = b * n * s1 * s2 * d
    assert (work >= tb.GLUON_MIN_WORK) == (block is not None)
    assert tb.gluon_block(FRAME, d, 128, s1, HOPPER, True, work) == block
    assert tb.gluon_block(FRAME, d, 128, s1, HOPPER, True, None) == 128





def test_plain_layouts_are_bnsd_and_bsnd_with_k_and_v_alike():
    b, n, s, d = 2, 4, 256, 64
    bnsd = torch.zeros(b, n, s, d, dtype=torch.float16)
    bsnd = torch.zeros(b, s, n, d, dtype=torch.float16).transpose(1, 2)
    assert tb.memory_order(bnsd) == "BNSD" and tb.memory_order(bsnd) == "BSND"
    assert tb.memory_order(bnsd[:, :, :, :32]) is None and tb.memory_order(bnsd.transpose(2, 3)) is None
    assert tb._plain(bsnd, bnsd, bnsd, False) and tb._plain(bnsd, bsnd, bsnd, False)
    assert not tb._plain(bnsd, bnsd, bsnd, False)  # K and V in one memory order
    assert not tb._plain(bnsd, bnsd, bnsd, True)
    off = torch.zeros(b * n * s * d + 1, dtype=torch.float16)[1:].view(b, n, s, d)  # 2 bytes off 16-byte alignment
    assert tb.memory_order(off) == "BNSD" and not tb._plain(off, bnsd, bnsd, False)


def test_without_triton_the_backend_imports_no_gluon():
    """Without triton (CI) the backend imports, with neither kernel module and nothing of triton's imported."""
    code = ("import sys; sys.modules['triton'] = None\n"  # `import triton` raises ImportError
            "from pasa_npu.backends import triton as tb\n"
            "assert tb.triton is None and tb._gk is None\n"
            "assert not [m for m, mod in sys.modules.items() if mod is not None and m.startswith('triton')]\n"
            "assert not any(m.endswith(('gluon_kernels', 'triton_kernels')) for m in sys.modules)")
    package = str(Path(tb.__file__).resolve().parents[2])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, (package, os.environ.get("PYTHONPATH"))))}
    subprocess.run([sys.executable, "-c", code], check=True, env=env)


# ----------------------------------------------------------------------------------------------------------------
# On an sm_90 GPU
# ----------------------------------------------------------------------------------------------------------------

hopper = pytest.mark.skipif(tb.triton is None or not torch.cuda.is_available()
                            or torch.cuda.get_device_capability() != HOPPER,
                            reason="the Gluon kernel runs on an sm_90 GPU (H100, H200) only; CI has none")

#: (b, n, nkv, s1, s2, d, band, layout, block_kv): tails, GQA, causal, a bottom-right band, D 64/128/256, both layouts.
CASES = {
    "tails_d64": (1, 4, 4, 300, 520, 64, None, "BNSD", 128),
    "gqa_d128_bsnd": (2, 8, 2, 257, 1000, 128, None, "BSND", 128),
    "causal_d128": (1, 4, 2, 700, 700, 128, (None, 0), "BNSD", 128),
    "band_d64_bsnd": (1, 2, 2, 300, 900, 64, (600 - 64, 600 + 32), "BSND", 64),
    "d256_causal": (1, 4, 2, 300, 700, 256, (None, 0), "BNSD", 64),
}


def _draw(case):
    from support import draw

    b, n, nkv, s1, s2, d, band, layout, block_kv = CASES[case]
    q, k, v = draw(b, n, nkv, s1, s2, d, seed=list(CASES).index(case), device="cuda")
    if layout == "BSND":
        q, k, v = (t.transpose(1, 2).contiguous().transpose(1, 2) for t in (q, k, v))
    return q, k, v, band, block_kv


@hopper
@pytest.mark.parametrize("precision", ["fp32", "fp32_frame"])
@pytest.mark.parametrize("case", list(CASES))
def test_gluon_within_float64_bounds_of_the_classic_kernel(case, precision):
    """The Gluon kernel (the rule's pick here) against the golden model and float64 (check_against_golden's
    criteria), and against the classic kernel: its error to float64 within 1.02× the classic kernel's, its lse
    within a few FP32 ulps."""
    from support import check_against_golden, ref64, rel_rmse

    q, k, v, band, block_kv = _draw(case)
    scale = q.shape[-1] ** -0.5
    call = dict(precision=precision, beta=None, block_q=128, block_kv=block_kv, scale=scale, mask=None, band=band)
    g_out, g_lse = tb.attention(q, k, v, kernel="gluon", **call)
    c_out, c_lse = tb.attention(q, k, v, kernel="classic", **call)
    err_g, _ = check_against_golden(q, k, v, precision=precision, block_kv=block_kv, band=band)
    from support import dense

    r_out, _ = ref64(q, k, v, scale, dense(None, band, q.shape[2], k.shape[2], q.device))
    err_c = rel_rmse(c_out, r_out)
    assert rel_rmse(g_out, r_out) == err_g  # the rule picked the Gluon kernel
    assert err_g <= 1.02 * err_c + 1e-7, (err_g, err_c)
    assert torch.allclose(g_lse, c_lse, rtol=1e-6, atol=1e-5)


#: (b, n, nkv, s1, s2, d, band, block_kv), each drawn with seed s1 + d, in both memory orders.
SAME = [(1, 4, 4, 256, 512, 128, None, 128), (1, 4, 2, 300, 520, 64, None, 128), (2, 8, 2, 257, 1000, 128, None, 128),
        (1, 4, 2, 700, 700, 128, (None, 0), 128), (1, 2, 2, 300, 900, 64, (536, 632), 64),
        (1, 4, 2, 300, 700, 256, (None, 0), 64), (1, 4, 4, 512, 1024, 256, None, 64)]


@hopper
@pytest.mark.parametrize("precision", ["fp32", "fp32_frame"])
@pytest.mark.parametrize("layout", ["BNSD", "BSND"])
@pytest.mark.parametrize("case", SAME)
def test_gluon_equals_the_classic_kernel_bit_for_bit(case, layout, precision):
    """The two kernels do the same FP32 and FP16 operations in the same order (Q·Kᵀ and P·V over the same K
    steps, the same exp2 arguments, the same row reductions), so their outputs and lse are equal bit for bit."""
    from support import draw

    b, n, nkv, s1, s2, d, band, block_kv = case
    q, k, v = draw(b, n, nkv, s1, s2, d, seed=s1 + d, device="cuda")
    if layout == "BSND":
        q, k, v = (t.transpose(1, 2).contiguous().transpose(1, 2) for t in (q, k, v))
    call = dict(precision=precision, beta=None, block_q=128, block_kv=block_kv, scale=d ** -0.5, mask=None, band=band)
    g_out, g_lse = tb.attention(q, k, v, kernel="gluon", **call)
    c_out, c_lse = tb.attention(q, k, v, kernel="classic", **call)
    assert torch.equal(g_out, c_out) and torch.equal(g_lse, c_lse)


@hopper
def test_gluon_fp32_frame_hard_inputs_within_fp32_error():
    """Scaled scores far from one another (Q, K ~ N(30, 1)): fp32_frame on the Gluon kernel within 1.5× the error of
    fp32 on it."""
    from support import draw, ref64, rel_rmse

    q, k, v = draw(1, 4, 1, 256, 1024, 128, bias=30.0, seed=3, device="cuda")
    scale = 128 ** -0.5
    call = dict(beta=None, block_q=128, block_kv=128, scale=scale, mask=None, kernel="gluon")
    r_out, _ = ref64(q, k, v, scale, None)
    err_frame = rel_rmse(tb.attention(q, k, v, precision="fp32_frame", **call)[0], r_out)
    err_fp32 = rel_rmse(tb.attention(q, k, v, precision="fp32", **call)[0], r_out)
    assert err_frame <= 1.5 * err_fp32 + 1e-6, (err_frame, err_fp32)


@hopper
@pytest.mark.parametrize("precision", ["fp32", "fp32_frame"])
def test_gluon_plan_called_again_equals_the_classic_kernel_bit_for_bit(precision):
    """A plan's second call goes through the compiled kernel's launcher directly (not Triton's launch): on new
    values in the same tensors, its output and lse equal the classic kernel's bit for bit (as the first call's do)."""
    from support import draw

    q, k, v, band, block_kv = _draw("causal_d128")
    call = dict(precision=precision, beta=None, block_kv=block_kv, scale=q.shape[-1] ** -0.5, mask=None, band=band)
    plan = tb.AttentionPlan(q, k, v, kernel="gluon", **call)
    for seed in (1, 2):
        for t, new in zip((q, k, v), draw(*q.shape[:2], k.shape[1], q.shape[2], k.shape[2], q.shape[3], seed=seed,
                                          device="cuda")):
            t.copy_(new)
        out, lse = plan(q, k, v, None, None)
        c_out, c_lse = tb.attention(q, k, v, block_q=128, kernel="classic", **call)
        assert torch.equal(out, c_out) and torch.equal(lse, c_lse)
