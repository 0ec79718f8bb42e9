"""The main job: the paper's random benchmark (§3.3.1, Appendices D and E) on the golden model.

Q, K and V are drawn from the uniform distribution of eq. 17, U(x0 − Am, x0 + Am), or the hybrid
of eq. 18, N(x0, 1) + N(0, Am²)·Bernoulli(0.001), at the paper's shape (1, 16, 1280, 128), and every
precision allocation is compared with float64 attention: relative RMSE (eq. 19), NaN percentage,
overflow. The sweeps are those of Figs 9 and 10; Table 4's NaN percentages of ``fp16_fp32`` are
checked over several seeds, because rows of one head share the same keys and the seed-to-seed
spread is far wider than binomial noise over rows. A sweep of our own ("biased": Q, K ~ N(x0, 1)
with a centred V) shows the accuracy of the attention weights, which the paper's distributions hide.
The "hard" sweep (:data:`HARD_CASES`, several draws each) holds the inputs on which PASA as
published loses accuracy or overflows, and the shapes, masks and head dims an allocation must
handle; :func:`summary` gives each allocation's RMSE as a ratio to the fp32 allocation's on the
same draw (median, worst), its failures (NaN, Inf, zero rows) and its lse errors.
"""

from __future__ import annotations

import csv
import json
import math
import multiprocessing
import os
import platform
import subprocess
import sys
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

from . import __version__, golden, metrics
from .beta import scale_range
from .precision import PRECISIONS, get_allocation

PAPER_SHAPE = (1, 16, 1280, 128)
#: "biased" is ours, not the paper's: Q, K ~ N(x0, Am²) and a centred V ~ N(0, Am²). With the
#: paper's distributions V has the same mean x0 as Q and K, so every output is ≈ x0 whatever the
#: attention weights are and eq. 19 divides by ‖O‖ ≈ x0·√size: errors in the weights barely show.
#: A centred V makes the RMSE measure the weights.
DISTRIBUTIONS = ("uniform", "hybrid", "biased")
BERNOULLI_P = 0.001


@dataclass(frozen=True)
class Case:
    dist: str
    x0: float
    am: float


def sweeps(full: bool) -> dict[str, list[Case]]:
    """Figs 9-10: for each distribution a mean sweep at fixed amplitude and an amplitude sweep at
    fixed mean x0 = 20. The quick grid keeps the ends, the middle and Table 4's cases."""
    if full:
        u_mean, u_am = [0, 5, 10, 15, 20, 25, 30], [0.5, 1, 2, 5, 10, 15, 20]
        h_mean, h_am = [0, 5, 10, 15, 20, 25, 30], [10, 20, 30, 50, 75, 100]
        b_mean = [0, 1, 3, 5, 10, 20, 30]
    else:
        u_mean, u_am = [0, 10, 20, 30], [0.5, 5, 15, 20]
        h_mean, h_am = [0, 10, 20, 30], [10, 50, 100]
        b_mean = [0, 3, 10, 30]
    return {
        "uniform_mean": [Case("uniform", x, 0.5) for x in u_mean],
        "uniform_amplitude": [Case("uniform", 20, a) for a in u_am],
        "hybrid_mean": [Case("hybrid", x, 10) for x in h_mean],
        "hybrid_amplitude": [Case("hybrid", 20, a) for a in h_am],
        "biased_mean": [Case("biased", x, 1) for x in b_mean],
    }


#: Table 4 of the paper: NaN percentage of fp16_fp32's output.
TABLE4 = {Case("uniform", 30, 0.5): 100.0, Case("uniform", 20, 15): 0.12, Case("uniform", 20, 20): 8.14,
          Case("hybrid", 30, 10): 100.0, Case("hybrid", 20, 50): 0.04, Case("hybrid", 20, 100): 1.11}


def draw(case: Case, shape, rng: np.random.Generator) -> np.ndarray:
    """One tensor of the case's distribution (float32; the golden model rounds it to FP16)."""
    if case.dist == "uniform":
        x = rng.uniform(case.x0 - case.am, case.x0 + case.am, shape)
    elif case.dist == "hybrid":
        x = rng.normal(case.x0, 1.0, shape) + rng.normal(0.0, case.am, shape) * rng.binomial(1, BERNOULLI_P, shape)
    elif case.dist == "biased":
        x = rng.normal(case.x0, case.am, shape)
    else:
        raise ValueError(f"distribution must be one of {DISTRIBUTIONS}, got {case.dist!r}")
    return x.astype(np.float32)


#: The "hard" sweep: inputs on which PASA as published loses accuracy or overflows (see
#: docs/accuracy_hard/README.md). Each case fixes its own shape, mask and V; x0 and am are its two
#: parameters, named per case in :func:`draw_hard`.
HARD_CASES = (
    Case("resonance", 0, 34), Case("resonance", 180, 34), Case("drift", 10, 1), Case("steps", 20, 1),
    Case("sink", 3, 1), Case("shift_overflow", -39000, 40000), Case("spike", -60000, 60000), Case("spread", 0, 60000),
    Case("long", 0, 1), Case("tail", 10, 1), Case("d64", 10, 1), Case("d80", 10, 1), Case("d96", 10, 1),
    Case("d256", 10, 1), Case("gqa", 10, 1), Case("causal", 10, 1), Case("band", 10, 1), Case("decode", 10, 1),
    Case("padding", 10, 1), Case("learnable_sink", 3, 1), Case("learnable_sink", 10, 1),
    Case("scale", 20000, 1), Case("scale_ties", 20000, 1), Case("scale_ties", 1e6, 1),
    Case("long_fall", 12, 1), Case("long_spread", 0, 60000),
)
HARD_DISTRIBUTIONS = tuple(dict.fromkeys(c.dist for c in HARD_CASES))
#: Keys of the "long" cases: more than 128k, so that FP16 sums of similar weights overflow.
LONG_KEYS = 131_072
#: Keys of the "long_spread" case: enough blocks for a row's maxima to fall far below its first ones
#: many times over (fp32_frame's moves down).
SPREAD_KEYS = 8192


def draw_hard(case: Case, rng: np.random.Generator, *, s1: int | None = None, s2: int | None = None,
              d: int | None = None):
    """One draw of a hard case: ``(q, k, v, call)``, float32 arrays (B, N, S, D) and the keywords of the
    call to :func:`pasa_npu.golden.attention` and :func:`pasa_npu.golden.reference`: ``scale``; ``band``,
    None or FIA's band rule (lo, hi) (key j kept for query i only where lo <= j − i <= hi), which decides
    the KV blocks a query tile visits as in the kernels; ``mask``, None or bool (B, 1, 1, S2), True =
    masked out; ``sink``, None or (N,) learnable sink logits. ``s1``, ``s2``, ``d``: query rows, keys and
    head dim in place of the case's own.

    Default shape (1, 2, 128, 128) queries against 1000 keys (7 full blocks of 128 and a tail),
    V ~ N(0, 1) centred so that the error measures the attention weights. Per case (x0, am):

    * resonance: Q = a·c + N(0, 1), K = 40 + a'·cos(θ + x0°) + N(0, 1) along D, c = cos θ,
      θ = 2π·3·d/D, a, a' ~ U(am − 2, am + 2) per row: Q·Kᵀ ≈ ±75 000 (x0 = 0 or 180°);
    * drift: Q ~ N(x0, am), K ~ N(x0·(0.5 → 1.5 along the sequence), am);
    * steps: Q ~ N(x0, am), K ~ N(level_j, am), a random level in [0, x0] per KV block;
    * sink: Q, K ~ N(x0, am), key 0 raised by 0.4 in every dimension (about 14 above the others);
    * shift_overflow: Q = 2 + N(0, 0.01); keys N(0, 1) plus a level giving scaled scores ≈ x0 and one
      key per block ≈ am (scores in FP16 range whose block-mean shift is not);
    * spike: as shift_overflow, but only block 1 holds keys at x0 and one at am; the later keys
      score am + 1000 ± 1. Block 1's maximum lies ≈ 120 000 above its mean, and the shift learned
      from it puts every later score ≈ 120 000 below: pasa_rs's safety net (FP32 S) must act;
    * spread: Q = ±1 at random, K ~ U(−1, 1)·√3·am/4.5: scaled scores ≈ N(0, (am/4.5)²), the
      extremes of each head near ±am;
    * long: 4 query rows against LONG_KEYS near-equal keys (Q, K ~ N(0, 0.05)), V ~ N(3, 1) biased;
    * long_fall: 4 query rows against LONG_KEYS keys whose scaled scores fall linearly from 0 to −x0
      along the sequence, plus N(0, am²) noise: the first blocks hold the maximum, the many later ones
      a third of the weight (e^−x0·LONG_KEYS ≫ 1 at x0 = 12);
    * long_spread: spread, 8 query rows against SPREAD_KEYS keys;
    * padding: batch 2, Q, K ~ N(x0, am), keys padded (masked) at the end of batch 0 (613 kept) and
      at the start of batch 1 (the first 387 masked: its rows' first blocks have no key);
    * learnable_sink: Q, K ~ N(0, am), one sink logit per head x0 + U(−2, 2) (the row maxima of the
      scaled scores are ≈ 3·am);
    * scale, scale_ties: :func:`draw_large_scale`'s "normal" and "ties" inputs, (1, 2, 64, 64) queries
      against 384 keys at the softmax scale x0;
    * tail, d64 … d256: Q, K ~ N(x0, am) with 1000 keys / head dims 64, 80, 96, 256;
    * gqa: 8 query heads sharing 2 KV heads; causal: 256 queries, the causal band aligned to the
      last key (FIA's sparse_mode 3); band: the same with a window of 256 keys (sparse_mode 4);
      decode: one query row, 8 heads.
    """
    dist = case.dist
    if dist not in HARD_DISTRIBUTIONS:
        raise ValueError(f"hard case must be one of {HARD_DISTRIBUTIONS}, got {dist!r}")
    if dist in _LARGE_SCALE_CASES:  # its own shape and V, and the case's x0 as the scale
        q, k, v = draw_large_scale(_LARGE_SCALE_CASES[dist], rng, **{
            name: val for name, val in (("s1", s1), ("s2", s2), ("d", d)) if val})
        return (*(x.astype(np.float32) for x in (q, k, v)), _call(case.x0))
    shape = {"b": 1, "n": 2, "s1": 128, "s2": 1000, "d": 128, "nkv": None, **_HARD_SHAPES.get(dist, {})}
    s1, s2, d = s1 or shape["s1"], s2 or shape["s2"], d or shape["d"]
    b, n = shape["b"], shape["n"]
    qs, ks = (b, n, s1, d), (b, shape["nkv"] or n, s2, d)
    # V ~ N(0, 1) is every case's first draw, its own draws follow (a case with its own V draws it after
    # Q and K): the order fixes the arrays of a seed.
    v = rng.normal(0.0, 1.0, ks)
    drawn = {"v": v, "band": None, "mask": None, "sink": None, **_HARD_DRAWS[dist](rng, case.x0, case.am, qs, ks)}
    q, k, v = (drawn[name].astype(np.float32) for name in ("q", "k", "v"))
    return q, k, v, _call(1.0 / np.sqrt(d), drawn["band"], drawn["mask"], drawn["sink"])


def _call(scale: float, band=None, mask=None, sink=None) -> dict:
    """The keywords of a golden call of :func:`draw_hard`."""
    return {"scale": scale, "band": band, "mask": mask, "sink": sink}


# The draws of the hard cases (:data:`_HARD_DRAWS`), one function per family of inputs:
# ``(rng, x0, am, qs, ks)`` -> the arrays the case draws after V ~ N(0, 1) ("q" and "k", and "v" where it
# replaces V) and its "band", "mask" or "sink" where it has one; qs and ks are the (B, N, S, D) shapes of
# Q and of K and V.


def _draw_normal(rng, x0, am, qs, ks):
    """Q, K ~ N(x0, am): the cases about shapes, masks and bands, where the values are not the point."""
    return {"q": rng.normal(x0, am, qs), "k": rng.normal(x0, am, ks)}


def _draw_resonance(rng, x0, am, qs, ks):
    d = qs[-1]
    c = np.cos(2 * np.pi * 3 * np.arange(d) / d)
    ck = np.cos(2 * np.pi * 3 * np.arange(d) / d + np.deg2rad(x0))
    # Q and K share a cosine of 3 periods along D: Q·K ≈ a·a'·cos(x0°)·D/2, while K's level 40 meets
    # Q's cosine, which sums to 0 over D.
    q = rng.uniform(am - 2, am + 2, qs[:-1] + (1,)) * c + rng.normal(0, 1, qs)
    k = 40 + rng.uniform(am - 2, am + 2, ks[:-1] + (1,)) * ck + rng.normal(0, 1, ks)
    return {"q": q, "k": k}


def _draw_levels(level):
    """The draw of keys whose mean moves along the sequence: Q ~ N(x0, am) and K ~ N(0, am) plus
    ``level(rng, x0, s2)``, one level per key (drawn between Q and K)."""
    def draw(rng, x0, am, qs, ks):
        q = rng.normal(x0, am, qs)
        shift = level(rng, x0, ks[-2])
        return {"q": q, "k": rng.normal(0, am, ks) + shift[:, None]}
    return draw


def _draw_sink(rng, x0, am, qs, ks):
    drawn = _draw_normal(rng, x0, am, qs, ks)
    drawn["k"][..., 0, :] += 0.4
    return drawn


def _unit_queries(rng, qs):
    """Q ≈ 2 in every dimension, and ``unit``: the scaled score of a key of level 1 in every dimension
    (2·D·scale), so that a key of level L/unit scores ≈ L."""
    d = qs[-1]
    return 2 + rng.normal(0, 0.01, qs), 2 * d / np.sqrt(d)


def _draw_shift_overflow(rng, x0, am, qs, ks):
    q, unit = _unit_queries(rng, qs)
    k = rng.normal(0, 1, ks) + x0 / unit
    k[..., ::128, :] += (am - x0) / unit  # the first key of every block
    return {"q": q, "k": k}


def _draw_spike(rng, x0, am, qs, ks):
    q, unit = _unit_queries(rng, qs)
    k = rng.normal(0, 1, ks) / 16
    k[..., :128, :] += x0 / unit
    k[..., 5, :] += (am - x0) / unit  # block 1's maximum
    k[..., 128:, :] += (am + 1000) / unit
    return {"q": q, "k": k}


def _draw_spread(rng, x0, am, qs, ks):
    # U(−1, 1)·√3 has variance 1: each key entry, and each scaled score (D terms ±K over √D), has the
    # standard deviation am/4.5.
    return {"q": rng.choice([-1.0, 1.0], qs), "k": rng.uniform(-1, 1, ks) * np.sqrt(3) * am / 4.5}


def _draw_long(rng, x0, am, qs, ks):
    drawn = _draw_normal(rng, 0, 0.05, qs, ks)
    # A biased V, so that the output's sums grow with the keys as the weights' do (a centred V's cancel).
    return {**drawn, "v": rng.normal(3.0, 1.0, ks)}


def _draw_long_fall(rng, x0, am, qs, ks):
    # Q is a unit vector along dimension 0, so a key's scaled score is its dimension 0 over √d.
    d, s2 = qs[-1], ks[-2]
    q, k = np.zeros(qs), rng.normal(0, 0.01, ks)
    q[..., 0] = 1.0
    k[..., 0] = (np.linspace(0, -x0, s2) + rng.normal(0, am, ks[:-1])) * np.sqrt(d)
    return {"q": q, "k": k}


def _draw_learnable_sink(rng, x0, am, qs, ks):
    drawn = _draw_normal(rng, 0, am, qs, ks)
    return {**drawn, "sink": x0 + rng.uniform(-2, 2, qs[1])}


def _draw_causal(rng, x0, am, qs, ks):
    # The band aligned to the last key: the last query row sees every key.
    return {**_draw_normal(rng, x0, am, qs, ks), "band": (None, ks[-2] - qs[-2])}


def _draw_band(rng, x0, am, qs, ks):
    s1, s2 = qs[-2], ks[-2]
    return {**_draw_normal(rng, x0, am, qs, ks), "band": (s2 - s1 - 255, s2 - s1)}


def _draw_padding(rng, x0, am, qs, ks):
    b, s2 = qs[0], ks[-2]
    mask = np.zeros((b, 1, 1, s2), bool)
    mask[0, ..., round(0.613 * s2):] = True
    mask[1, ..., : round(0.387 * s2)] = True
    return {**_draw_normal(rng, x0, am, qs, ks), "mask": mask}


_HARD_DRAWS = {
    "resonance": _draw_resonance,
    "drift": _draw_levels(lambda rng, x0, s2: x0 * np.linspace(0.5, 1.5, s2)),
    # One level per KV block of 128 keys.
    "steps": _draw_levels(lambda rng, x0, s2: rng.uniform(0, x0, -(-s2 // 128)).repeat(128)[:s2]),
    "sink": _draw_sink, "shift_overflow": _draw_shift_overflow, "spike": _draw_spike,
    "spread": _draw_spread, "long_spread": _draw_spread, "long": _draw_long, "long_fall": _draw_long_fall,
    "learnable_sink": _draw_learnable_sink, "causal": _draw_causal, "band": _draw_band,
    "padding": _draw_padding,
    **dict.fromkeys(("tail", "d64", "d80", "d96", "d256", "gqa", "decode"), _draw_normal),
}
#: The hard cases' departures from the default shape (B, N, S1, S2, D) = (1, 2, 128, 1000, 128) with as
#: many KV heads (nkv) as query heads.
_HARD_SHAPES = {
    "d64": {"d": 64}, "d80": {"d": 80}, "d96": {"d": 96}, "d256": {"d": 256},
    "gqa": {"n": 8, "nkv": 2}, "decode": {"n": 8, "s1": 1}, "causal": {"s1": 256}, "band": {"s1": 256},
    "long": {"n": 1, "s1": 4, "s2": LONG_KEYS}, "long_fall": {"n": 1, "s1": 4, "s2": LONG_KEYS},
    "long_spread": {"s1": 8, "s2": SPREAD_KEYS}, "padding": {"b": 2},
}
#: The cases of :func:`draw_large_scale`, by its kind.
_LARGE_SCALE_CASES = {"scale": "normal", "scale_ties": "ties"}


#: The inputs of :func:`draw_large_scale`.
LARGE_SCALE_KINDS = ("normal", "ties")


def draw_large_scale(kind: str, rng: np.random.Generator, *, s1: int = 64, s2: int = 384, d: int = 64):
    """Inputs for a large softmax scale (2·10⁴ and more): ``(q, k, v)`` FP16 (1, 2, S, D). "normal": Q, K,
    V ~ N(0, 1); "ties": the keys in groups of 8 near-equal ones (N(0, 10⁻⁶) apart), so that the weight of
    some rows is shared by keys whose scores differ in the last FP32 bits rather than all on one key (where
    every allocation returns that key's value exactly)."""
    if kind not in LARGE_SCALE_KINDS:
        raise ValueError(f"kind must be one of {LARGE_SCALE_KINDS}, got {kind!r}")
    q, k, v = rng.standard_normal((1, 2, s1, d)), rng.standard_normal((1, 2, s2, d)), rng.standard_normal((1, 2, s2, d))
    if kind == "ties":
        k = np.repeat(k[:, :, ::8], 8, axis=2)[:, :, :s2] + rng.standard_normal(k.shape) * 1e-3
    return tuple(x.astype(np.float16) for x in (q, k, v))


def case_seed(base: int, case: Case, rep: int) -> np.random.SeedSequence:
    """A seed that depends only on (base, case, repetition): results do not depend on order or jobs."""
    kinds = DISTRIBUTIONS + HARD_DISTRIBUTIONS
    return np.random.SeedSequence([base, kinds.index(case.dist), round(case.x0 * 1000) % 2**32,
                                   round(case.am * 1000) % 2**32, rep])


def _draw_case(case: Case, rep: int, base_seed: int, shape, s1=None, s2=None, d=None):
    """(q, k, v, call) of one draw (:func:`draw_hard`): the paper's distributions at ``shape``, or a hard
    case (``s1``, ``s2``, ``d`` as in :func:`draw_hard`)."""
    rng = np.random.default_rng(case_seed(base_seed, case, rep))
    if case.dist in HARD_DISTRIBUTIONS:
        return draw_hard(case, rng, s1=s1, s2=s2, d=d)
    q, k = (draw(case, shape, rng) for _ in range(2))
    v = draw(Case(case.dist, 0.0, case.am) if case.dist == "biased" else case, shape, rng)
    return q, k, v, _call(1.0 / np.sqrt(shape[-1]))


#: The counters of golden.attention's ``stats`` that the study reports: pasa_rs's FP32 recomputes and
#: second shifts, fp32_frame's frame moves.
COUNTERS = ("recomputed", "reshifted", "moved")


def run_case(case: Case, rep: int, base_seed: int, shape, precisions, *, s1: int | None = None,
             s2: int | None = None, d: int | None = None, block_kv: int = 128, block_q: int = 128) -> list[dict]:
    """Every allocation on one draw of (Q, K, V): a row per allocation. ``s1``, ``s2``, ``d``: a hard case's
    query rows, keys and head dim in place of its own (:func:`draw_hard`); ``block_kv``: every allocation's
    KV block (fp32's too, so that each ratio compares the same loop); ``block_q``: every allocation's query tile,
    which decides the KV blocks a tile visits under a band (the AscendC kernel's tile depends on D).

    Columns: the case (dist, x0, am), seed (the draw), precision; rmse (eq. 19, NaN if any output
    is NaN or Inf), nan_pct, overflow (any NaN or Inf), max_abs_err; lse_err, the largest |lse −
    lse64| over rows with a finite float64 lse (NaN if one of those is not finite); zero_rows, the
    rows that came out all zero where float64 attention is not; the allocation's counters
    (:data:`COUNTERS`) as fractions of its (row, KV block) passes, None where it keeps none. An allocation
    that refuses the draw's scale (PASA's shifting matrix holds it in FP16 only within
    :func:`pasa_npu.beta.scale_range`, and ``fused_attention`` refuses it there) has no row."""
    q, k, v, call = _draw_case(case, rep, base_seed, shape, s1, s2, d)
    ref, ref_lse = golden.reference(q.astype(np.float16), k.astype(np.float16), v.astype(np.float16), **call)
    live = np.isfinite(ref_lse)
    nonzero = (ref != 0).any(-1)
    rows = []
    lo, hi = scale_range(block_kv)
    for p in precisions:
        if get_allocation(p).shifted and not lo <= call["scale"] <= hi:
            continue
        stats = {}
        out, lse = golden.attention(q, k, v, precision=p, stats=stats, block_kv=block_kv, block_q=block_q, **call)
        lse_err = np.abs(lse.astype(np.float64) - ref_lse)[live]
        rs = {key: stats[f"{key}_row_blocks"] / stats["row_blocks"] if f"{key}_row_blocks" in stats else None
              for key in COUNTERS}
        rows.append({"dist": case.dist, "x0": case.x0, "am": case.am, "seed": rep, "precision": p,
                     "rmse": metrics.rmse(out, ref), "nan_pct": 100.0 * metrics.nan_fraction(out),
                     "overflow": bool(metrics.nonfinite_fraction(out) > 0),
                     "max_abs_err": metrics.max_abs_error(out, ref),
                     "lse_err": float(np.max(lse_err, initial=0.0)),
                     "zero_rows": int(((out == 0).all(-1) & nonzero).sum()), **rs})
    return rows


def _run_task(task):
    *args, d, block_kv, block_q = task
    return run_case(*args, d=d, block_kv=block_kv, block_q=block_q)


def run_study(*, full: bool = False, shape=PAPER_SHAPE, seed: int = 0, precisions=PRECISIONS,
              table4_seeds: int | None = None, hard_seeds: int | None = None, jobs: int | None = None,
              progress: bool = True, paper: bool = True, head_dim: int | None = None,
              block_kv: int = 128, block_q: int = 128) -> list[dict]:
    """Run the sweeps (one draw per case), Table 4's cases (``table4_seeds`` draws each, the first
    shared with the sweeps) and the hard cases (``hard_seeds`` draws each, 0 to skip them; their
    shapes are their own, not ``shape``, with ``head_dim`` in place of their head dims where given).
    ``paper=False`` skips the sweeps and Table 4 (the hard cases alone). ``block_kv``, ``block_q``: every
    allocation's KV block and query tile. Returns one row per (case, draw, allocation). ``jobs`` > 1 runs cases
    in that many spawned processes (the caller's main module must be import-safe)."""
    table4_seeds = (10 if full else 3) if table4_seeds is None else table4_seeds
    hard_seeds = (5 if full else 3) if hard_seeds is None else hard_seeds
    for name, val in (("table4_seeds", table4_seeds), ("hard_seeds", hard_seeds)):
        if not isinstance(val, int) or val < 0:
            raise ValueError(f"{name} must be a non-negative integer, got {val!r}")
    for name, val in (("head_dim", head_dim), ("block_kv", block_kv), ("block_q", block_q)):
        if val is not None and (not isinstance(val, int) or val < 1):
            raise ValueError(f"{name} must be a positive integer, got {val!r}")
    cases = list(dict.fromkeys(c for cs in sweeps(full).values() for c in cs)) if paper else []
    # The hard cases first, the long one leading: with several workers the longest tasks should
    # not start last.
    tasks = [(c, r, seed, tuple(shape), tuple(precisions), head_dim, block_kv, block_q) for r in range(hard_seeds)
             for c in sorted(HARD_CASES, key=lambda c: c.dist != "long")]
    tasks += [(c, 0, seed, tuple(shape), tuple(precisions), None, block_kv, block_q) for c in cases]
    t4_prec = tuple(p for p in ("fp16_fp32", "pasa") if p in precisions)
    tasks += [(c, r, seed, tuple(shape), t4_prec, None, block_kv, block_q) for c in TABLE4 if paper
              for r in range(1, table4_seeds)]
    jobs = jobs or 1
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=len(tasks), desc="cases", unit="case", file=sys.stderr)
    rows = []
    executor, saved_env = None, dict(os.environ)
    if jobs == 1:
        results = map(_run_task, tasks)
    else:
        # Fresh (spawned) workers with single-threaded BLAS: forked copies of a process whose BLAS
        # threads already run oversubscribe the cores.
        os.environ.update({v: "1" for v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")})
        executor = ProcessPoolExecutor(max_workers=jobs, mp_context=multiprocessing.get_context("spawn"))
        results = executor.map(_run_task, tasks)
    try:
        for r in results:
            rows.extend(r)
            if bar is not None:
                bar.update()
    finally:
        if executor is not None:
            executor.shutdown()
            os.environ.clear()
            os.environ.update(saved_env)
        if bar is not None:
            bar.close()
    return rows


def table4(rows: list[dict]) -> list[dict]:
    """fp16_fp32's NaN percentage on Table 4's cases over all draws, against the paper's value.
    'within_noise': the paper's value lies inside [mean − 3·std, mean + 3·std] of the draws (for a
    value of 100 %, every draw must be 100 %)."""
    out = []
    for case, paper in TABLE4.items():
        sel = lambda p: [r["nan_pct"] for r in rows if r["precision"] == p and Case(r["dist"], r["x0"], r["am"]) == case]
        nan = np.array(sel("fp16_fp32"))
        if nan.size == 0:
            continue
        mean, std = float(nan.mean()), float(nan.std(ddof=1)) if nan.size > 1 else 0.0
        within = bool(np.all(nan == 100.0)) if paper == 100.0 else abs(paper - mean) <= 3 * std
        pasa = sel("pasa")
        out.append({"dist": case.dist, "x0": case.x0, "am": case.am, "paper_nan_pct": paper, "draws": int(nan.size),
                    "fp16_fp32_nan_pct_mean": mean, "fp16_fp32_nan_pct_std": std,
                    "fp16_fp32_nan_pct_min": float(nan.min()), "fp16_fp32_nan_pct_max": float(nan.max()),
                    "within_noise": within, "pasa_nan_pct_max": max(pasa) if pasa else float("nan")})
    return out


def claim(rows: list[dict]) -> dict[str, tuple[int, int]]:
    """The paper's RMSE claim, for cases without overflow: 'PASA has a smaller RMSE than Partially low-precision
    FA(FA16-FP32) for all cases with non-zero mean values'. For each PASA allocation: (cases where it holds, cases
    compared)."""
    first = [r for r in rows if r["seed"] == 0 and r["dist"] in ("uniform", "hybrid")]  # the paper's cases
    fa = {(r["dist"], r["x0"], r["am"]): r["rmse"] for r in first if r["precision"] == "fp16_fp32"}
    result = {}
    for p in ("pasa", "pasa_fp32"):
        pairs = [(r["rmse"], fa[key]) for r in first if r["precision"] == p
                 for key in [(r["dist"], r["x0"], r["am"])] if key in fa and r["x0"] != 0 and np.isfinite(fa[key])]
        if pairs:
            result[p] = (sum(a < b for a, b in pairs), len(pairs))
    return result


def _ratio(err: float, err32: float) -> float:
    """An RMSE as a ratio to fp32's on the same draw: 1 where both are 0 (every row's weight on one key,
    whose value both return exactly), Inf where only fp32's is."""
    return err / err32 if err32 > 0 else 1.0 if err == 0 else math.inf


def _failed(r: dict) -> bool:
    """A failure: NaN or Inf in the output, or a row of zeros where float64 attention has none."""
    return bool(r["overflow"] or r["zero_rows"])


#: The groups of :func:`summary` besides the hard sweep's distributions (one group each).
GROUPS = ("all", "paper", "biased", "hard")


def summary(rows: list[dict], precisions) -> dict[str, dict]:
    """Per allocation and group (:data:`GROUPS`, and each hard distribution, e.g. 'resonance'): the ratio
    of its relative RMSE to the fp32 allocation's on the same draw (median and worst over the draws
    without failure; 1 where both are 0, Inf where only fp32's is),
    the failures (:func:`_failed`), and the lse check: lse_err ≤ max(10 × fp32's lse_err, 1e-3)
    on how many draws, and the worst lse_err / that bound; the range of each of the allocation's
    counters (:data:`COUNTERS`). Draws without an fp32 row (Table 4's repetitions) do not
    count; a group with no draws is left out."""
    fp32 = {(r["dist"], r["x0"], r["am"], r["seed"]): r for r in rows if r["precision"] == "fp32"}
    group = lambda d: "hard" if d in HARD_DISTRIBUTIONS else "biased" if d == "biased" else "paper"
    out = {}
    for p in precisions:
        for g in GROUPS + HARD_DISTRIBUTIONS:
            pairs = [(r, fp32[key]) for r in rows if r["precision"] == p
                     for key in [(r["dist"], r["x0"], r["am"], r["seed"])]
                     if key in fp32 and g in ("all", group(r["dist"]), r["dist"])]
            if not pairs:
                continue
            ok = [(r, f) for r, f in pairs if not _failed(r) and not _failed(f)]
            ratios = np.array([_ratio(r["rmse"], f["rmse"]) for r, f in ok])
            lse_ratio = np.array([r["lse_err"] / max(10 * f["lse_err"], 1e-3) for r, f in ok])
            entry = {"draws": len(pairs), "failures": sum(_failed(r) for r, _ in pairs),
                     "median_ratio": float(np.median(ratios)) if ratios.size else float("nan"),
                     "worst_ratio": float(ratios.max()) if ratios.size else float("nan"),
                     "worst_case": None, "lse_within": int((lse_ratio <= 1).sum()),
                     "worst_lse_over_bound": float(lse_ratio.max()) if lse_ratio.size else float("nan")}
            if ratios.size:
                w = ok[int(ratios.argmax())][0]
                entry["worst_case"] = f"{w['dist']} x0={w['x0']:g} am={w['am']:g} seed={w['seed']}"
            for key in COUNTERS:
                vals = [r[key] for r, _ in pairs if r[key] is not None]
                if vals:
                    entry[f"{key}_min"], entry[f"{key}_max"] = float(min(vals)), float(max(vals))
            out.setdefault(p, {})[g] = entry
    return out


def format_summary(summ: dict[str, dict]) -> str:
    """The summary as a table: one line per allocation and group of :data:`GROUPS`."""
    lines = [f"{'allocation':<10} {'group':<7} {'draws':>5} {'median':>8} {'worst':>8} {'failures':>8} "
             f"{'lse ok':>7} {'lse/bound':>9}  " + " ".join(f"{key:>13}" for key in COUNTERS) + "  worst case"]
    for p, groups in summ.items():
        for g, e in ((g, e) for g, e in groups.items() if g in GROUPS):
            rng_ = lambda key: (f"{e[key + '_min']:.3f}–{e[key + '_max']:.3f}" if key + "_min" in e else "")
            lines.append(f"{p:<10} {g:<7} {e['draws']:>5} {e['median_ratio']:>8.3g} {e['worst_ratio']:>8.3g} "
                         f"{e['failures']:>8} {e['lse_within']:>3}/{e['draws'] - e['failures']:<3} "
                         f"{e['worst_lse_over_bound']:>9.3g}  " + " ".join(f"{rng_(key):>13}" for key in COUNTERS) + "  "
                         f"{e['worst_case'] or ''}")
    return "\n".join(lines)


def format_classes(summ: dict[str, dict]) -> str:
    """The hard sweep by distribution, a markdown table: per allocation (fp32 apart) the RMSE ratio to
    fp32's, median / worst, the failures, and the draws whose lse is within its bound."""
    precisions = [p for p in summ if p != "fp32"]
    dists = [d for d in HARD_DISTRIBUTIONS if any(d in summ[p] for p in precisions)]
    lines = ["| case | draws | " + " | ".join(f"`{p}` median / worst, failures, lse ok" for p in precisions) + " |",
             "|---|---|" + "---|" * len(precisions)]
    for d in dists:
        cells = []
        for p in precisions:
            e = summ[p].get(d)
            cells.append("" if e is None else f"{e['median_ratio']:.3f} / {e['worst_ratio']:.3f}, {e['failures']}, "
                         f"{e['lse_within']}/{e['draws'] - e['failures']}")
        draws = next(summ[p][d]["draws"] for p in precisions if d in summ[p])
        lines.append(f"| {d} | {draws} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def format_results(rows: list[dict], precisions) -> str:
    """The sweep table: one line per case, RMSE per allocation ('NaN x%' where it overflowed, 'refused' where
    the allocation refuses the case's scale: :func:`run_case`)."""
    first = [r for r in rows if r["seed"] == 0]
    cases = list(dict.fromkeys((r["dist"], r["x0"], r["am"]) for r in first))
    cell = {(r["dist"], r["x0"], r["am"], r["precision"]): r for r in first}
    lines = [f"{'distribution':<14} {'x0':>6} {'Am':>6} " + " ".join(f"{p:>12}" for p in precisions)]
    for d, x0, am in cases:
        vals = []
        for p in precisions:
            r = cell.get((d, x0, am, p))
            if r is None:
                vals.append(f"{'refused':>12}")
            elif r["overflow"]:
                vals.append(f"{'NaN ' + format(r['nan_pct'], '.2f') + '%':>12}")
            elif r["zero_rows"]:
                vals.append(f"{str(r['zero_rows']) + ' 0-rows':>12}")
            else:
                vals.append(f"{r['rmse']:>12.3e}")
        lines.append(f"{d:<14} {x0:>6g} {am:>6g} " + " ".join(vals))
    return "\n".join(lines)


def format_table4(t4: list[dict]) -> str:
    lines = [f"{'distribution':<12} {'x0':>4} {'Am':>5} {'paper NaN%':>10} {'ours: mean ± std (min–max), n':>36} "
             f"{'within noise':>12} {'pasa NaN%':>9}"]
    for r in t4:
        ours = (f"{r['fp16_fp32_nan_pct_mean']:.3f} ± {r['fp16_fp32_nan_pct_std']:.3f} "
                f"({r['fp16_fp32_nan_pct_min']:.2f}–{r['fp16_fp32_nan_pct_max']:.2f}), {r['draws']}")
        lines.append(f"{r['dist']:<12} {r['x0']:>4g} {r['am']:>5g} {r['paper_nan_pct']:>10g} {ours:>36} "
                     f"{'yes' if r['within_noise'] else 'NO':>12} {r['pasa_nan_pct_max']:>9g}")
    return "\n".join(lines)


def json_safe(x):
    """NaN becomes null and ±Inf the strings "inf"/"-inf": strict JSON has neither."""
    if isinstance(x, dict):
        return {k: json_safe(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [json_safe(v) for v in x]
    if isinstance(x, float) and not math.isfinite(x):
        return None if math.isnan(x) else ("inf" if x > 0 else "-inf")
    return x


def plot(rows: list[dict], full: bool, path: Path, precisions, *, title: str = "") -> None:
    """Figs 9-10 (RMSE against the mean and against the amplitude) and, where the hard sweep ran,
    its RMSE ratios to fp32. An allocation whose output holds NaN or Inf is marked by an x above
    the curves, one height per allocation, labelled with its NaN percentage."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    first = [r for r in rows if r["seed"] == 0]
    panels = sweeps(full) if any(r["dist"] in DISTRIBUTIONS for r in rows) else {}
    hard = [r for r in rows if r["dist"] in HARD_DISTRIBUTIONS]
    n_panels = len(panels) + bool(hard)
    cols = 2 if n_panels > 1 else 1
    rows_ = (n_panels + cols - 1) // cols
    fig, axes = plt.subplots(rows_, cols, figsize=(6.5 * cols + 3 * (cols == 1), 4.6 * rows_), squeeze=False)
    for ax in axes.flat[n_panels:]:
        ax.set_visible(False)
    colors = {p: f"C{i}" for i, p in enumerate(precisions)}
    for ax, (name, cases) in zip(axes.flat, panels.items()):
        along = "x0" if name.endswith("mean") else "am"
        cell = {(r["dist"], r["x0"], r["am"], r["precision"]): r for r in first}
        finite = [cell[c.dist, c.x0, c.am, p]["rmse"] for c in cases for p in precisions
                  if not cell[c.dist, c.x0, c.am, p]["overflow"]]
        top = max(finite) if finite else 1.0
        for i, p in enumerate(precisions):
            pts = [cell[c.dist, c.x0, c.am, p] for c in cases]
            xs = [getattr(c, along) for c in cases]
            ok = [(x, r["rmse"]) for x, r in zip(xs, pts) if not r["overflow"]]
            ax.plot(*zip(*ok), marker="o", label=p, color=colors[p]) if ok else ax.plot([], [], label=p, color=colors[p])
            y = top * 4.0 ** (i + 1)  # its own height per allocation: markers never overlap
            for x, r in zip(xs, pts):
                if r["overflow"]:
                    ax.plot([x], [y], marker="x", ls="none", ms=9, color=colors[p])
                    ax.annotate(f"NaN {r['nan_pct']:.3g}%", (x, y), textcoords="offset points", xytext=(5, -3),
                                fontsize=7, color=colors[p])
        fixed = f"Am = {cases[0].am:g}" if along == "x0" else f"x0 = {cases[0].x0:g}"
        fixed += ", V centred" if cases[0].dist == "biased" else ""
        ax.set(yscale="log", xlabel="mean x0" if along == "x0" else "amplitude Am", ylabel="relative RMSE (eq. 19)",
               title=f"{cases[0].dist}, {fixed} (x above the curves: NaN/Inf output)")
        ax.grid(True, which="both", alpha=0.3)
    if hard:
        ax = axes.flat[len(panels)]
        names = list(dict.fromkeys(f"{r['dist']} {r['x0']:g}" for r in hard))
        fp32 = {(r["dist"], r["x0"], r["seed"]): r["rmse"] for r in hard if r["precision"] == "fp32"}
        for i, p in enumerate(precisions):
            xs, ys, bad = [], [], []
            for r in hard:
                if r["precision"] != p or (r["dist"], r["x0"], r["seed"]) not in fp32:
                    continue
                x = names.index(f"{r['dist']} {r['x0']:g}") + (i - len(precisions) / 2) * 0.1
                ratio = _ratio(r["rmse"], fp32[r["dist"], r["x0"], r["seed"]])
                if _failed(r) or not math.isfinite(ratio):
                    bad.append(x)
                else:
                    xs.append(x)
                    ys.append(ratio)
            ax.plot(xs, ys, marker="o", ls="none", ms=4, color=colors[p], label=p)
            if bad:
                ax.plot(bad, [3e3 * 2.0**i] * len(bad), marker="x", ls="none", ms=7, color=colors[p])
        ax.axhline(2, color="k", lw=0.8, ls="--")
        ax.axhline(10, color="k", lw=0.8, ls=":")
        ax.set_xticks(range(len(names)), names, rotation=60, ha="right", fontsize=7)
        ax.set(yscale="log", ylabel="RMSE / fp32's RMSE, same draw",
               title="hard cases, every draw (x: NaN, Inf or zero rows, or an error where fp32's is 0; lines at 2 "
               "and 10)")
        ax.grid(True, which="both", alpha=0.3)
    axes.flat[0].legend(fontsize=8)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def source_commit() -> str | None:
    """The git commit this package's source was run from, with "-dirty" when tracked files differ from it; None
    when the package is not a repository's python/pasa_npu (an installed copy) or git is missing."""
    here = Path(__file__).resolve().parent

    def git(*args: str) -> str | None:
        try:
            res = subprocess.run(["git", "-C", str(here), *args], capture_output=True, text=True, timeout=30)
        except (OSError, subprocess.SubprocessError):
            return None
        return res.stdout.strip() if res.returncode == 0 else None

    top = git("rev-parse", "--show-toplevel")
    if top is None or Path(top).resolve() / "python" / "pasa_npu" != here:
        return None
    head = git("rev-parse", "HEAD")
    dirty = git("status", "--porcelain", "--untracked-files=no")
    return None if head is None else head + ("-dirty" if dirty else "")


def write_outputs(rows: list[dict], out_dir: Path, *, full: bool, shape, seed: int, precisions,
                  plots: bool = True, head_dim: int | None = None, block_kv: int = 128, block_q: int = 128,
                  command: str = "") -> dict:
    """results.csv, results.json (metadata, rows, Table 4, the claim and the summary, in strict
    JSON), table4.csv and accuracy.png under ``out_dir``; ``head_dim``, ``block_kv`` and ``block_q`` as given to
    :func:`run_study`; ``command``, the call that reproduces the run, recorded in the metadata. Returns the JSON's
    content (with NaN)."""
    commit = source_commit()  # before this writes into the tree, where out_dir may lie
    out_dir.mkdir(parents=True, exist_ok=True)
    with open(out_dir / "results.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    t4 = table4(rows)
    if t4:
        with open(out_dir / "table4.csv", "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(t4[0]))
            w.writeheader()
            w.writerows(t4)
    hard_seeds = len({r["seed"] for r in rows if r["dist"] in HARD_DISTRIBUTIONS})
    meta = {"date": datetime.now(timezone.utc).isoformat(timespec="seconds"), "command": command,
            "pasa_npu": __version__, "commit": commit, "grid": "full" if full else "quick", "shape": list(shape),
            "seed": seed, "hard_seeds": hard_seeds,
            "hard_head_dim": head_dim, "block_kv": block_kv, "block_q": block_q,
            "precisions": list(precisions), "numpy": np.__version__, "python": platform.python_version(),
            "machine": platform.platform(), "processor": platform.processor() or platform.machine(),
            "cpus": os.cpu_count()}
    result = {"metadata": meta, "results": rows, "table4": t4,
              "claim": {p: {"holds": h, "cases": n} for p, (h, n) in claim(rows).items()},
              "summary": summary(rows, precisions)}
    (out_dir / "results.json").write_text(json.dumps(json_safe(result), indent=1, allow_nan=False))
    if plots:
        paper = any(r["dist"] in DISTRIBUTIONS for r in rows)
        title = (f"pasa-npu accuracy ({meta['grid']} grid): sweeps at shape (B, N, S, D) = {tuple(shape)}, "
                 if paper else "pasa-npu accuracy, the hard sweep: ") + \
            f"base seed {seed}; hard cases {hard_seeds} draws each" + \
            (f" at D = {head_dim}" if head_dim else "") + f"; KV block {block_kv}"
        plot(rows, full, out_dir / "accuracy.png", precisions, title=title)
    return result
