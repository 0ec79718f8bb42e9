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



def _tnd(n, nkv, d, q_lens, kv_lens, *, pad=0, seed=0, device="cpu", **options):
    """A TND call's Problem: sequences of ``q_lens`` query rows and ``kv_lens`` keys packed one after the other,
    ``pad`` query rows past the last, drawn as tests/support.draw draws (C-contiguous (T, N, D) tensors; on the meta
    device, shapes only)."""
    from support import draw

    from pasa_npu.problem import make_problem

    cum = [sum(q_lens[:i + 1]) for i in range(len(q_lens))]
    cum_kv = [sum(kv_lens[:i + 1]) for i in range(len(kv_lens))]
    if device == "meta":  # shapes only
        q, k, v = (torch.empty(t, h, d, dtype=torch.float16, device=device)
                   for t, h in ((cum[-1] + pad, n), (cum_kv[-1], nkv), (cum_kv[-1], nkv)))
    else:
        q, k, v = (t[0].transpose(0, 1).contiguous() for t in draw(1, n, nkv, cum[-1] + pad, cum_kv[-1], d, seed=seed,
                                                                     device=device))
    return make_problem(q, k, v, num_heads=n, num_key_value_heads=nkv, input_layout="TND", actual_seq_lengths=cum,
                        actual_seq_lengths_kv=cum_kv, scale=d ** -0.5, **options)


def _gluon_tnd(problem, capability=HOPPER):
    """The rule on a TND call as the backend asks it (:func:`pasa_npu.backends.triton.varlen_terms`)."""
    views, other, _, (rows, work, _) = tb.varlen_terms(problem)
    return tb.gluon_block(problem.alloc, problem.head_dim, problem.block_kv, rows, capability,
                          tb._plain(*views, other), work)


def test_rule_takes_a_tnd_call_and_sums_its_sequences_work():
    """A TND call is the rule's like a dense one: its S1 the longest sequence's rows, its work Σ N·S1·S2·D over the
    sequences (2^33 here from the two long ones together, neither alone), its views (B, S, N, D) memory."""
    n, d = 32, 128
    problem = _tnd(n, 8, d, [1024, 1024, 5], [1024, 1024, 5], precision="fp32_frame", device="meta")
    views, other, seqs, (rows, work, tiles) = tb.varlen_terms(problem)
    assert [tb.memory_order(t) for t in views] == ["BSND"] * 3 and not other
    assert [seq[:2] + seq[3:] for seq in seqs] == [(1024, 1024, 0, 0), (1024, 1024, 1024, 1024), (5, 5, 2048, 2048)]
    assert (rows, work, tiles) == (1024, n * d * (2 * 1024 * 1024 + 25), 17) and work > tb.GLUON_MIN_WORK
    assert 2 * n * d * 1024 * 1024 == tb.GLUON_MIN_WORK  # each long sequence alone is half the least work
    assert _gluon_tnd(problem) == 128
    assert _gluon_tnd(problem, (8, 0)) is None


@pytest.mark.parametrize("why", ["small", "short", "sink", "strided", "no_keys"])
def test_rule_leaves_these_tnd_calls_on_the_classic_kernel(why):
    """Less than the least work in all; no sequence of a full query tile; sinks; a query that is not a contiguous
    (T, N, D) tensor (a view of a packed QKV tensor); no keys at all."""
    n, d = 32, 128
    q_lens, kv_lens, options = [1024, 1024], [1024, 1024], dict(precision="fp32")
    if why == "small":
        kv_lens = [1024, 1023]
    elif why == "short":
        q_lens, kv_lens = [127] * 64, [2048] * 64
    elif why == "sink":
        options["learnable_sink"] = torch.zeros(n, device="meta")
    elif why == "no_keys":
        kv_lens = [0, 0]
    problem = _tnd(n, 8, d, q_lens, kv_lens, device="meta", **options)
    if why == "strided":
        qkv = torch.empty(problem.query.shape[0], 3, n, d, dtype=torch.float16, device="meta")
        problem = problem._replace(query=qkv[:, 0])
    assert _gluon_tnd(problem) is None


def test_tile_table_covers_every_sequences_rows_once_most_blocks_first():
    """A row per 128-row query tile of each sequence with rows (none for a sequence of no rows; one for a sequence
    shorter than a tile), its band clamped to [−rows, keys], the tiles that visit the most KV blocks first."""
    seqs = [(300, 520, None, 0, 0), (0, 40, None, 300, 520), (77, 77, (None, 0), 300, 560), (256, 0, None, 377, 637)]
    table = tb.tile_table(seqs, 64)
    assert sorted(table) == sorted([(0, 300, 0, 520, -300, 520, pos0, 0) for pos0 in (0, 128, 256)]
                                   + [(300, 77, 560, 77, -77, 0, 0, 0)]
                                   + [(377, 256, 637, 0, -256, 0, pos0, 0) for pos0 in (0, 128)])
    assert table[:3] == [(0, 300, 0, 520, -300, 520, pos0, 0) for pos0 in (0, 128, 256)]  # 9 blocks each
    assert table[3] == (300, 77, 560, 77, -77, 0, 0, 0)  # 2 blocks
    assert {row[3] for row in table[4:]} == {0}  # no key: no block


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


#: TND calls (N, Nkv, D, query rows, keys of each sequence, rows past the last, FIA's sparse mode options,
#: block_kv): unequal lengths, tails of the query and KV tiles, sequences shorter than a tile, of no rows and of no
#: keys, GQA, no band, causal (top-left and bottom-right) and a band, D 64/128/256.
TND = {
    "gqa_d128": (8, 2, 128, [300, 77, 513, 60], [520, 77, 1000, 0], 0, {}, 128),
    "bottom_right_d64": (4, 4, 64, [700, 100, 0, 260], [700, 130, 50, 200], 3, dict(sparse_mode=3), 64),
    "causal_d256": (4, 2, 256, [129, 400, 37], [129, 400, 37], 0, dict(sparse_mode=2), 64),
    "band_d128": (4, 1, 128, [640, 200, 90], [900, 200, 300], 5,
                  dict(sparse_mode=4, pre_tokens=200, next_tokens=30), 128),
}


@hopper
@pytest.mark.parametrize("precision", ["fp32", "fp32_frame"])
@pytest.mark.parametrize("case", list(TND))
def test_gluon_tnd_equals_the_classic_kernel_bit_for_bit(case, precision):
    """A TND call as one Gluon launch over its tile table against the classic kernel on each sequence (the backend's
    path where the rule keeps it): outputs and lse equal bit for bit, the rows past the last sequence's and the rows
    of a sequence with no key alike. A tile's rows past its sequence's end are not stored over the next sequence's,
    and keys past it are masked (the last sequences' keys are followed by no other's: the first are)."""
    from support import COMPRESSED

    n, nkv, d, q_lens, kv_lens, pad, options, block_kv = TND[case]
    if options.get("sparse_mode"):
        options = dict(options, atten_mask=COMPRESSED.cuda())
    problem = _tnd(n, nkv, d, q_lens, kv_lens, pad=pad, seed=sum(q_lens) + d, device="cuda", precision=precision,
                   block_kv=block_kv, backend="triton", **options)
    g_out, g_lse = tb._run_varlen(problem, kernel="gluon")  # pinned: a ValueError where the kernel does not cover it
    c_out, c_lse = tb._run_varlen(problem, kernel="classic")
    assert torch.equal(g_out, c_out) and torch.equal(g_lse, c_lse)


@hopper
@pytest.mark.parametrize("precision", ["fp32", "fp32_frame"])
def test_gluon_tnd_where_the_classic_kernel_splits_a_sequence_over_its_keys(precision):
    """A sequence of one classic query tile per KV head and many KV blocks runs on the classic kernel as split-KV
    (partials over ranges of its keys, merged), on the Gluon kernel in one pass: its rows are not the classic
    kernel's bit for bit but within 1.5× its error to float64; the other sequence's rows are equal bit for bit."""
    from support import ref64, rel_rmse

    n, d = 4, 128
    problem = _tnd(n, n, d, [16, 300], [4096, 300], seed=7, device="cuda", precision=precision, backend="triton")
    assert tb._num_splits(1, n, 4096 // 128) > 1  # the classic kernel's one query tile per KV head, split
    g_out, g_lse = tb._run_varlen(problem, kernel="gluon")
    c_out, c_lse = tb._run_varlen(problem, kernel="classic")
    assert torch.equal(g_out[16:], c_out[16:]) and torch.equal(g_lse[16:], c_lse[16:])
    q, k, v = (t[:rows].transpose(0, 1)[None] for t, rows in ((problem.query, 16), (problem.key, 4096),
                                                              (problem.value, 4096)))
    r_out, r_lse = ref64(q, k, v, d ** -0.5, None)
    r_out = r_out[0].transpose(0, 1)
    err_g, err_c = rel_rmse(g_out[:16], r_out), rel_rmse(c_out[:16], r_out)
    assert err_g <= 1.5 * err_c + 1e-7, (err_g, err_c)
    assert torch.allclose(g_lse[:16], r_lse[0].transpose(0, 1).float(), rtol=1e-5, atol=1e-5)
