"""Context parallelism (pasa_npu.distributed) on gloo, CPU, forked processes, tiny shapes.

What is asserted, per input kind (random, biased Q/K ~ N(30, 1), resonant) and allocation:
(a) ring == the merge (merge_partials, source order) of the same per-shard fused_attention calls
    made on one process: bit for bit;
(b) ring, Ulysses and ring × Ulysses against float64 attention (golden.reference on the
    FP16-rounded inputs) within the allocation's own accuracy. Output:
        |err| <= 2·e1 + 2^-10·max|V| + (exp(2·δ) − 1)·max|V|
    with e1 one device's error (each partial is as accurate as that), 2^-10·max|V| the partials'
    extra FP16 rounding, and δ the largest lse error of a partial plus 4 FP32 ulps of |lse| (the
    merge's own rounding): lse errors δ_p move the merge weights exp(lse_p − lse) by factors within
    exp(±2δ). lse: |err| <= δ + 1e-6. The δ term is
    what makes a ring of the PASA allocations less accurate than one device on biased inputs:
    their lse carries the FP16 rounding of the shifted scores times β/(1 − β) (about 1 here);
    'fp32' has δ ~ 1e-4 and the ring matches one device.
(c) Ulysses == one device's fused_attention, bit for bit (it only moves heads);
and bad configurations raise on every rank (or time out with a clear error) instead of hanging.

Every rank and the reference computations run with one intra-op thread, so that the CPU's matrix
products add in one order everywhere and (a) and (c) can be exact.
"""

from __future__ import annotations

import math
import time
from contextlib import contextmanager
from datetime import timedelta

import numpy as np
import pytest
import torch
import torch.distributed as dist

import pasa_npu
from pasa_npu import fused_attention, golden
from pasa_npu.distributed import (ring_attention, ring_ulysses_attention, shard_sequence, ulysses_attention,
                                  unshard_sequence)
from pasa_npu.merge import merge_partials
from support import launch

PRECISIONS = [p for p in ("fp32", "pasa_fp32", "pasa_rs", "fp32_frame") if p in pasa_npu.PRECISIONS]
KINDS = ("random", "biased", "resonant")
B, N, NKV, S, D = 2, 4, 2, 32, 16
SCALE = D ** -0.5
CAUSAL = torch.ones(2048, 2048, dtype=torch.bool).triu(1)
SEQ_DIM = {"BSH": 1, "BSND": 1, "BNSD": 2, "BNSD_BSND": 2}
OUT_SEQ_DIM = {"BSH": 1, "BSND": 1, "BNSD": 2, "BNSD_BSND": 1}


# ============================================================================================
# processes
# ============================================================================================


@contextmanager
def one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


# ============================================================================================
# inputs and references
# ============================================================================================

def inputs(kind, seed=0, n=N, nkv=NKV, s=S, d=D):
    """q (B, S, n, D), k, v (B, S, nkv, D) float32 (BSND, the full sequence)."""
    g = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(B, s, h, d, generator=g) for h in (n, nkv, nkv))
    if kind == "biased":
        q, k = q + 30, k + 30
    elif kind == "resonant":
        # A K bias in phase with a Q amplitude along the head dim: scores near 100·50·D/2·scale
        # (16 000 here), which overflow FP16 attention (see tests/tools/test_scan.py).
        u = torch.cos(2 * math.pi * 3 * torch.arange(d) / d)
        q, k = q + 100 * u, k + 50 * u
    return q, k, v


def to_layout(x, layout):
    """A BSND tensor in ``layout`` (BNSD_BSND takes BNSD input)."""
    if layout == "BSH":
        return x.reshape(x.shape[0], x.shape[1], -1)
    return x.transpose(1, 2).contiguous() if layout in ("BNSD", "BNSD_BSND") else x


def out_to_bnsd(out, layout, n=N):
    if layout == "BSH":
        return out.view(out.shape[0], out.shape[1], n, -1).transpose(1, 2)
    return out if layout == "BNSD" else out.transpose(1, 2)


def fa_kwargs(layout, precision, causal, n=N, nkv=NKV):
    kw = dict(input_layout=layout, num_heads=n, num_key_value_heads=nkv, scale=SCALE, softmax_lse_flag=True,
              precision=precision)
    if causal:
        kw.update(sparse_mode=2, atten_mask=CAUSAL)
    return kw


def exact(q, k, v, causal):
    """float64 attention of BSND tensors rounded to FP16 (as every allocation rounds them first, so
    that the comparison measures the allocation): out (B, N, S, D), lse (B, N, S)."""
    o, l = golden.reference(*(x.half().transpose(1, 2).numpy() for x in (q, k, v)), scale=SCALE, causal=causal)
    return torch.from_numpy(o), torch.from_numpy(l)


def ring_reference(q, k, v, precision, causal, world):
    """(a): each rank's queries against each rank's keys, one fused_attention call per (rank, source)
    as the ring makes it, merged in source order. Returns BNSD out (B, N, S, D), lse (B, N, S) and
    the largest lse error of a partial against float64 (on the FP16-rounded inputs)."""
    lse_errors = []

    def call(qq, kk, vv, is_causal=False):
        o, l = fused_attention(qq, kk, vv, **fa_kwargs("BNSD", precision, is_causal))
        _, want = golden.reference(*(x.half().numpy() for x in (qq, kk, vv)), scale=SCALE, causal=is_causal)
        lse_errors.append(np.abs(l[..., 0].double().numpy() - want).max())
        return o, l[..., 0]

    shard = lambda x, r: shard_sequence(x.transpose(1, 2), seq_dim=2, ring_rank=r, ring_size=world, zigzag=causal)
    outs, lses = [], []
    for r in range(world):
        qr = shard(q, r)
        parts = []
        for src in range(world):
            ks, vs = shard(k, src), shard(v, src)
            c = ks.shape[2] // 2
            if not causal:
                parts.append(call(qr, ks, vs))
            elif src == r:
                parts.append(call(qr, ks, vs, True))
            elif src < r:
                parts.append(call(qr, ks[:, :, :c], vs[:, :, :c]))
            else:
                o, l = call(qr[:, :, c:], ks, vs)
                parts.append((torch.cat([torch.zeros_like(o), o], 2), torch.cat([torch.full_like(l, -math.inf), l], 2)))
        o, l = merge_partials([p[0] for p in parts], [p[1] for p in parts], out_dtype=q.dtype)
        outs.append(o)
        lses.append(l)
    return (unshard_sequence(outs, seq_dim=2, ring_size=world, zigzag=causal),
            unshard_sequence(lses, seq_dim=2, ring_size=world, zigzag=causal), max(lse_errors))


# ============================================================================================
# the scenarios each rank runs
# ============================================================================================

#: (name, entry point, layout, causal); ring × Ulysses cases run on 4 ranks.
CASES_2 = [("ring", "ring", "BSND", False), ("ring_causal", "ring", "BSH", True),
           ("ulysses", "ulysses", "BNSD", False), ("ulysses_causal", "ulysses", "BNSD_BSND", True)]
CASES_4 = [("ring_ulysses", "ring_ulysses", "BSND", False), ("ring_ulysses_causal", "ring_ulysses", "BSH", True)]


def _mesh_groups(rank, world, ring_size):
    """Ring and Ulysses groups of a (ring_size, world / ring_size) mesh, rank = ring·U + ulysses."""
    u_size = world // ring_size
    ring_groups = [dist.new_group([r * u_size + u for r in range(ring_size)]) for u in range(u_size)]
    uly_groups = [dist.new_group([r * u_size + u for u in range(u_size)]) for r in range(ring_size)]
    return ring_groups[rank % u_size], uly_groups[rank // u_size], rank // u_size, rank % u_size, u_size


def numeric_worker(rank, world, cases):
    results = {}
    if world == 4:
        ring_g, uly_g, rr, ur, u_size = _mesh_groups(rank, world, 2)
    for name, entry, layout, causal in cases:
        for kind in KINDS:
            q, k, v = inputs(kind)
            for precision in PRECISIONS:
                kw = fa_kwargs(layout, precision, causal)
                if entry == "ring":
                    sh = dict(ring_rank=rank, ring_size=world, zigzag=causal)
                    fn = lambda *t: ring_attention(*t, **kw)
                elif entry == "ulysses":
                    sh = dict(ulysses_rank=rank, ulysses_size=world)
                    fn = lambda *t: ulysses_attention(*t, **kw)
                else:
                    sh = dict(ring_rank=rr, ring_size=2, ulysses_rank=ur, ulysses_size=u_size, zigzag=causal)
                    fn = lambda *t: ring_ulysses_attention(*t, ring_group=ring_g, ulysses_group=uly_g, **kw)
                local = [shard_sequence(to_layout(x, layout), seq_dim=SEQ_DIM[layout], **sh) for x in (q, k, v)]
                out, lse = fn(*local)
                results[name, kind, precision] = (out, lse, sh)
    if world == 2:
        results.update(extra_cases(rank, world))
    return results


def masked_inputs():
    """A per-head random mask (1, N, S, S) (True = masked out; every row keeps its diagonal) and
    global valid lengths, for Ulysses, which takes FIA's masks on the global sequence."""
    g = torch.Generator().manual_seed(5)
    mask = (torch.rand(1, N, S, S, generator=g) < 0.4) & ~torch.eye(S, dtype=torch.bool)
    return dict(atten_mask=mask, actual_seq_lengths=[S - 5, S], actual_seq_lengths_kv=[S - 3, S])


def extra_cases(rank, world):
    q, k, v = inputs("random")
    kw = fa_kwargs("BSND", "fp32", False)
    uly = dict(ulysses_rank=rank, ulysses_size=world)
    out, lse = ulysses_attention(*(shard_sequence(x, seq_dim=1, **uly) for x in (q, k, v)), **kw, **masked_inputs())
    # Cross-attention over a sharded context: query shards of 8 rows, key/value shards of 16.
    ring = dict(ring_rank=rank, ring_size=world)
    cross = ring_attention(shard_sequence(q[:, :S // 2], seq_dim=1, **ring),
                           *(shard_sequence(x, seq_dim=1, **ring) for x in (k, v)), **kw)
    return {"ulysses_masked": (out, lse), "ring_cross": cross}


def gathered(results, name, kind, precision, layout):
    """The full-sequence out (BNSD) and lse (B, N, S) from every rank's shard."""
    sh = results[0][name, kind, precision][2]
    sizes = dict(ring_size=sh.get("ring_size", 1), ulysses_size=sh.get("ulysses_size", 1),
                 zigzag=sh.get("zigzag", False))
    outs = [r[name, kind, precision][0] for r in results]
    lses = [r[name, kind, precision][1] for r in results]
    out = unshard_sequence(outs, seq_dim=OUT_SEQ_DIM[layout], **sizes)
    return out_to_bnsd(out, layout), unshard_sequence(lses, seq_dim=2, **sizes)[..., 0]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    return {2: launch(numeric_worker, 2, tmp_path_factory.mktemp("n2"), CASES_2),
            4: launch(numeric_worker, 4, tmp_path_factory.mktemp("n4"), CASES_4)}


# ============================================================================================
# exactness
# ============================================================================================

def _single(q, k, v, precision, causal):
    o, l = fused_attention(q, k, v, **fa_kwargs("BSND", precision, causal))
    return o.transpose(1, 2), l[..., 0]


@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("name, entry, layout, causal", CASES_2 + CASES_4, ids=[c[0] for c in CASES_2 + CASES_4])
def test_against_one_process_and_float64(runs, name, entry, layout, causal, kind, precision):
    world = 4 if entry == "ring_ulysses" else 2
    out, lse = gathered(runs[world], name, kind, precision, layout)
    q, k, v = inputs(kind)
    assert out.dtype == q.dtype and lse.dtype == torch.float32 and out.shape == (B, N, S, D)
    with one_thread():
        single_o, single_l = _single(q, k, v, precision, causal)
        if entry == "ulysses":  # (c)
            assert torch.equal(out, single_o) and torch.equal(lse, single_l)
        else:  # (a): heads are independent, so the ring over Ulysses-gathered shards is the same merge
            ref_o, ref_l, delta = ring_reference(q, k, v, precision, causal, 2)
            assert torch.equal(out, ref_o) and torch.equal(lse, ref_l)
    # (b)
    if entry == "ulysses":
        delta = 0.0  # nothing is merged
    ex_o, ex_l = exact(q, k, v, causal)
    err_single = (single_o.double() - ex_o).abs().max().item()
    err_single_lse = (single_l.double() - ex_l).abs().max().item()
    err = (out.double() - ex_o).abs().max().item()
    err_lse = (lse.double() - ex_l).abs().max().item()
    v_max = v.abs().max().item()
    partial_lse_error = delta
    if entry != "ulysses":  # the merge's own FP32 rounding of lse values of this magnitude
        delta += 4 * np.finfo(np.float32).eps * np.abs(ex_l.numpy()).max()
    bound = 2 * err_single + 2 ** -10 * v_max + math.expm1(2 * delta) * v_max
    lse_bound = (delta if entry != "ulysses" else err_single_lse) + 1e-6
    print(f"{name} {kind} {precision}: |out - exact| {err:.3g} (one device {err_single:.3g}, partial lse error "
          f"{partial_lse_error:.3g}, bound {bound:.3g}); |lse - exact| {err_lse:.3g} (one device {err_single_lse:.3g})")
    assert err <= bound
    assert err_lse <= lse_bound


def test_causal_cases_are_causal(runs):
    """The causal results are not the full-attention ones: the mask reached every shard."""
    o_full, _ = gathered(runs[2], "ring", "random", PRECISIONS[0], "BSND")
    o_causal, _ = gathered(runs[2], "ring_causal", "random", PRECISIONS[0], "BSH")
    # Every row but the last sees fewer keys under the mask; its output moves visibly.
    assert (o_full[:, :, :-1] - o_causal[:, :, :-1]).abs().amax(-1).min() > 1e-3


# ============================================================================================
# shard layouts
# ============================================================================================

@pytest.mark.parametrize("ring_size, ulysses_size, zigzag", [(2, 1, False), (2, 1, True), (1, 4, False), (2, 2, True),
                                                               (3, 2, True)])
def test_shard_layouts_round_trip_and_place_rows(ring_size, ulysses_size, zigzag):
    s = 2 * ring_size * ulysses_size * 2
    x = torch.arange(s).view(1, s, 1)
    shards = [shard_sequence(x, seq_dim=1, ring_rank=r, ring_size=ring_size, ulysses_rank=u,
                             ulysses_size=ulysses_size, zigzag=zigzag)
              for r in range(ring_size) for u in range(ulysses_size)]
    assert torch.equal(unshard_sequence(shards, seq_dim=1, ring_size=ring_size, ulysses_size=ulysses_size,
                                        zigzag=zigzag), x)
    c = s // (2 * ring_size)
    for r in range(ring_size):
        ring_shard = torch.cat(shards[r * ulysses_size:(r + 1) * ulysses_size], 1).flatten().tolist()
        if zigzag:  # chunks r and 2R-1-r of 2R
            want = list(range(r * c, (r + 1) * c)) + list(range((2 * ring_size - 1 - r) * c, (2 * ring_size - r) * c))
        else:
            want = list(range(r * 2 * c, (r + 1) * 2 * c))
        assert ring_shard == want


@pytest.mark.parametrize("kwargs, match", [
    (dict(seq_dim=1, ring_size=2, zigzag=True, ring_rank=0), "multiple of 2 \\* ring_size"),
    (dict(seq_dim=3, ring_size=2), "seq_dim must be"),
    (dict(seq_dim=1, ring_size=0), "ring_size must be"),
    (dict(seq_dim=1, ring_size=2, ring_rank=2), "ring_rank must be"),
])
def test_shard_sequence_refuses_bad_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        shard_sequence(torch.zeros(1, 6, 2), **kwargs)


# ============================================================================================
# bad configurations: every rank raises, or times out with a clear error
# ============================================================================================

def bad_config_worker(rank, world):
    q, k, v = (to_layout(x, "BSND") for x in inputs("random"))
    sh = lambda x, **o: shard_sequence(x, seq_dim=1, ulysses_rank=rank, ulysses_size=world, **o)
    good = dict(input_layout="BSND", num_heads=N, num_key_value_heads=NKV, scale=SCALE, softmax_lse_flag=True)
    cases = {
        "heads not divisible": lambda: ulysses_attention(
            *(sh(x[:, :, :3]) for x in (q, q, q)), **dict(good, num_heads=3, num_key_value_heads=3)),
        "unequal shard lengths": lambda: ring_attention(
            *(x[:, :S // 2 + 2 * rank] for x in (q, k, v)), **good),
        "dtype differs": lambda: ring_attention(
            *((sh(x).half() if rank else sh(x)) for x in (q, k, v)), **good),
        "NaN on one rank": lambda: ring_attention(
            *(sh(x) if rank == 0 or i else sh(x).clone().fill_(math.nan) for i, x in enumerate((q, k, v))), **good),
        "bad argument on one rank": lambda: ring_attention(
            *(sh(x) for x in (q, k, v)), **dict(good, input_layout="TND" if rank else "BSND")),
        "keyword differs": lambda: ring_attention(*(sh(x) for x in (q, k, v)), **dict(good, scale=SCALE * (1 + rank))),
        "ring with a full mask": lambda: ring_attention(
            *(sh(x) for x in (q, k, v)), **dict(good, sparse_mode=1, atten_mask=torch.zeros(S, S, dtype=torch.bool))),
        "causal, odd ring shard": lambda: ring_attention(
            *(x[:, :3] for x in (q, k, v)), **dict(good, sparse_mode=2, atten_mask=CAUSAL)),
        "causal, not the compressed mask": lambda: ring_attention(
            *(sh(x) for x in (q, k, v)), **dict(good, sparse_mode=2, atten_mask=CAUSAL.T)),
    }
    results = {}
    for name, call in cases.items():
        try:
            call()
            results[name] = None
        except Exception as e:  # noqa: BLE001 - recorded for the parent's assertions
            results[name] = (type(e).__name__, str(e))
    # The group still works after the refusals: every rank raised at the same point.
    out, _ = ring_attention(*(sh(x) for x in (q, k, v)), **good)
    results["afterwards"] = out.shape
    # A rank that never calls: the other raises once the group's timeout expires.
    short = dist.new_group([0, 1], timeout=timedelta(seconds=1))
    if rank == 0:
        t0 = time.monotonic()
        try:
            ring_attention(*(sh(x) for x in (q, k, v)), group=short, **good)
            results["timeout"] = None
        except Exception as e:  # noqa: BLE001
            results["timeout"] = (type(e).__name__, str(e), time.monotonic() - t0)
    else:
        time.sleep(4)
    return results


EXPECTED = {  # case: (exception type on every rank, a phrase of the message on every rank)
    "heads not divisible": ("ValueError", "multiple of the Ulysses group size"),
    "unequal shard lengths": ("ValueError", "must agree on every rank"),
    "dtype differs": ("ValueError", "must agree on every rank"),
    "NaN on one rank": ("ValueError", "rank 1's query, key or value holds NaN"),
    "bad argument on one rank": ("ValueError", "TND"),
    "keyword differs": ("ValueError", "the keyword arguments must agree"),
    "ring with a full mask": ("ValueError", "sparse_mode must be 0 without atten_mask"),
    "causal, odd ring shard": ("ValueError", "must be even"),
    "causal, not the compressed mask": ("ValueError", "compressed causal mask"),
}


@pytest.fixture(scope="module")
def bad_runs(tmp_path_factory):
    return launch(bad_config_worker, 2, tmp_path_factory.mktemp("bad"))


@pytest.mark.parametrize("case", list(EXPECTED))
def test_bad_configuration_raises_on_every_rank(bad_runs, case):
    kind, phrase = EXPECTED[case]
    for rank, results in enumerate(bad_runs):
        assert results[case] is not None, f"rank {rank} did not raise for {case!r}"
        assert results[case][0] == kind and phrase in results[case][1], (rank, results[case])
    if case == "bad argument on one rank":  # rank 1 raises its own error, rank 0 names rank 1
        assert "rank 1 refused its arguments" in bad_runs[0][case][1]


def test_group_survives_refusals_and_a_missing_rank_times_out(bad_runs):
    assert all(r["afterwards"] == (B, S // 2, N, D) for r in bad_runs)
    kind, message, elapsed = bad_runs[0]["timeout"]
    assert kind == "RuntimeError" and "not every rank of the group took part" in message
    assert elapsed < 3  # the group's 1 s timeout, not the other rank's 4 s sleep


def test_without_an_initialised_group_the_error_says_so():
    q = torch.zeros(1, 4, 16)
    with pytest.raises(RuntimeError, match="not initialised"):
        ring_attention(q, q, q, num_heads=1)


def test_ulysses_takes_fia_masks_and_lengths_on_the_global_sequence(runs):
    outs, lses = zip(*(r["ulysses_masked"] for r in runs[2]))
    out, lse = unshard_sequence(outs, seq_dim=1, ulysses_size=2), unshard_sequence(lses, seq_dim=2, ulysses_size=2)
    q, k, v = inputs("random")
    with one_thread():
        want_o, want_l = fused_attention(q, k, v, **fa_kwargs("BSND", "fp32", False), **masked_inputs())
    assert torch.equal(out, want_o) and torch.equal(lse, want_l)
    assert torch.isposinf(lse[0, :, S - 5:]).all() and (out[0, S - 5:] == 0).all()  # padded rows of batch 0


def test_ring_cross_attention_with_shorter_query_shards(runs):
    outs, lses = zip(*(r["ring_cross"] for r in runs[2]))
    out = out_to_bnsd(unshard_sequence(outs, seq_dim=1, ring_size=2), "BSND")
    q, k, v = inputs("random")
    q = q[:, :S // 2]
    ex_o, _ = exact(q, k, v, False)
    with one_thread():
        single_o, _ = _single(q, k, v, "fp32", False)
    err, err_single = ((x.double() - ex_o).abs().max().item() for x in (out, single_o))
    assert out.shape == (B, N, S // 2, D) and err <= 2 * err_single + 2 ** -10 * v.abs().max().item()
