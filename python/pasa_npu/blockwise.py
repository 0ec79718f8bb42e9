"""The blockwise FlashAttention / PASA loop, written once for every array library.

This module is the single statement of *where each allocation rounds*. It imports no array
library: it runs on an ``ops`` object (NumPy in :mod:`pasa_npu.golden`, PyTorch in
:mod:`pasa_npu.backends.reference`) that supplies casts, the matrix product and a handful of
elementwise functions. Every floating-point operation is followed by a rounding to the type the
allocation assigns to it, so the result is a deterministic function of the allocation:

* matrix products take FP16 operands and accumulate into FP32, rounded on the way out to the
  allocation's ``score`` (Q·Kᵀ) or ``output`` (P·V) type; PASA's K' = M·K comes out in FP16.
  The accumulation is modelled as exact (float64, in which products of FP16 values and their
  sums over a head dimension are exact or nearly so) followed by one rounding to FP32: an FP32
  accumulator without the order-dependent rounding of a particular hardware, which makes the
  emulation the same in every library and on every device;
* each vector operation (add, multiply, exp, ...) computes in FP32 and rounds once to its type:
  for FP16 that is the correctly rounded FP16 result for +, −, ×, ÷ (FP32 holds more than twice
  FP16's precision) and the FP16 rounding of FP32's exp;
* row sums are pairwise (tree) reductions that round every partial sum, the way a vector unit
  folds a row in halves;
* nothing is clamped: an overflow becomes Inf and Inf − Inf becomes NaN as on the hardware.

Shapes: ``q`` (..., G, S1, D), ``k``/``v`` (..., 1, S2, D) with the leading dims broadcasting
(G query heads share one KV head: GQA without copying K/V); ``mask`` None or bool broadcastable to
(..., G, S1, S2) with full S1 and S2 dims, True = masked out; ``band`` None or (lo, hi), FIA's band
rule (key j kept for query i only where lo <= j − i <= hi; lo None = open); ``sink`` None or FP32
values broadcastable to (..., G, 1, 1), one learnable sink logit per query head.

A sink (FIA v2's ``learnable_sink``) is a logit s_h in the true scale that joins the softmax's
denominator of every row of head h and carries no value: out = Σ_j e^{x_j} v_j / (Σ_j e^{x_j} + e^{s_h}),
lse = log(Σ_j e^{x_j} + e^{s_h}); a row with no visible key gives out 0 and lse = s_h exactly. It joins
once, in the final normalisation, as one more term of the row state (:func:`_join_sink`): the row's
true-scale maximum (each allocation's own frame moved back: PASA's I·F, ``pasa_rs``'s ρ·(C_1 + ψ_1)) and
the sink are compared in FP32, and the two rescaling factors, l and O are rounded to the allocation's
state and output types. Without a sink every allocation computes exactly what it computed before.

The loop visits, per tile of ``block_q`` query rows, only the KV blocks that the band leaves some
key of for some row of the tile (:func:`visited_blocks`), as the kernels do. A hidden block adds
nothing to FlashAttention's state, but PASA's pseudo-average F is a mean over the visited blocks,
and ``pasa_rs``'s frame ("block 1") and the lag of its shifts start at the first visited block: with
a band, the tile is part of the allocations' definition. A ``mask`` hides keys, never blocks.
"""

from __future__ import annotations

import math

from .beta import default_beta, shift_entries
from .precision import Allocation

NEG_INF = float("-inf")


def _tree_rowsum(ops, x, dtype: str):
    """Sum the last axis by folding it in halves, rounding every partial sum to ``dtype``."""
    n = x.shape[-1]
    width = 1 << max(0, (n - 1).bit_length())
    if width != n:
        x = ops.pad_last(x, width - n)  # zeros do not change any partial sum
    while width > 1:
        width //= 2
        x = ops.cast(x[..., :width] + x[..., width:], dtype)
    return x


def _shift_matrix(ops, beta: float, n: int, scale: float, like):
    """M = (I − β/n·J)·scale (n×n) with its two entries rounded to FP16, as the kernels build it."""
    diag, off = shift_entries(beta, n, "float16", scale)
    return ops.shift_matrix(n, diag, off, like)


def visited_blocks(band, r0: int, r1: int, s2: int, block_kv: int) -> tuple[int, int]:
    """The KV blocks [first, end) that the tile of query rows [r0, r1) visits: all of them without a
    band, else those holding a key the band keeps for some row of the tile. Row i keeps keys
    [i + lo, i + hi], so the tile keeps [r0 + lo, r1 − 1 + hi] (consecutive rows' ranges overlap or
    touch while hi >= lo), clipped to the keys; first == end where it keeps none."""
    n = -(-s2 // block_kv)
    if band is None:
        return 0, n
    lo, hi = band
    low = 0 if lo is None else max(0, r0 + lo)
    high = min(s2 - 1, r1 - 1 + hi)
    if high < low:
        return 0, 0
    return low // block_kv, high // block_kv + 1


def attention(ops, q, k, v, *, alloc: Allocation, scale: float, beta: float | None = None,
              block_q: int = 128, block_kv: int = 128, mask=None, band=None, sink=None, stats: dict | None = None,
              group_tile: bool = False):
    """Blockwise attention emulating ``alloc``. Inputs must already hold FP16 values.

    Returns ``(out, lse)``: ``out`` FP16 (..., G, S1, D); ``lse`` FP32 (..., G, S1), the natural
    log-sum-exp of the scaled scores (and the sink, where there is one) in the true scale. Rows whose
    keys are all masked give out 0 and lse −∞ (with a sink: the sink's logit). Without a band
    ``block_q`` only bounds memory (rows are independent); with one it decides which KV blocks a row's
    tile visits (see the module docstring). ``stats``: for
    ``pasa_rs``, a dict whose counters of FP32 recomputes and of reshifts are incremented (see
    :func:`_count` and docs/golden.md); ignored by the other allocations.
    """
    s1, s2 = q.shape[-2], k.shape[-2]
    if alloc.shifted and beta is None:
        beta = default_beta(block_kv, scale)
    if alloc.row_shifted:
        kc, u, kbar = _centre_keys(ops, k, block_kv)
    outs, lses = [], []
    for r0 in range(0, s1, block_q):
        r1 = min(r0 + block_q, s1)
        b0, b1 = visited_blocks(band, r0, r1, s2, block_kv)
        c0, c1 = b0 * block_kv, min(b1 * block_kv, s2)
        m_rows = None if mask is None else mask[..., r0:r1, c0:c1]
        if band is not None:
            m_band = band_mask(ops, band, r0, r1, c0, c1, q)
            m_rows = m_band if m_rows is None else (m_rows | m_band)
        qt, vt = q[..., r0:r1, :], v[..., c0:c1, :]
        if c1 <= c0:  # the band keeps no key for any row of the tile
            shape = (*ops.broadcast_shape(qt.shape[:-2], k.shape[:-2]), r1 - r0)
            out = ops.full((*shape, v.shape[-1]), 0.0, "float16", like=q)
            lse = ops.full(shape, NEG_INF, "float32", like=q)
            if sink is not None:
                lse = ops.where(ops.isneginf(lse), sink[..., 0], lse)
        elif alloc.row_shifted:
            keys = kc[..., c0:c1, :], u[..., b0:b1, :], kbar[..., b0:b1, :]
            out, lse = _query_block_rs(ops, qt, keys, vt, scale, block_kv, c1 - c0, m_rows, sink, stats)
        elif alloc.framed:
            out, lse = _query_block_frame(ops, qt, k[..., c0:c1, :], vt, scale, block_kv, c1 - c0, m_rows, sink,
                                          stats, group_tile)
        else:
            out, lse = _query_block(ops, qt, k[..., c0:c1, :], vt, alloc, scale, beta, block_kv, c1 - c0, m_rows,
                                    sink)
        outs.append(out)
        lses.append(lse)
    return ops.cat(outs, -2), ops.cat(lses, -1)


def band_mask(ops, band, r0, r1, c0, c1, like):
    """True where the band hides key j in [c0, c1) from query i in [r0, r1)."""
    lo, hi = band
    rel = ops.arange(c0, c1, like)[None, :] - ops.arange(r0, r1, like)[:, None]
    hidden = rel > hi
    return hidden if lo is None else (hidden | (rel < lo))


def _query_block(ops, q, k, v, alloc, scale, beta, block_kv, s2, mask, sink):
    st, od = alloc.state, alloc.output

    def r(x):  # one vector op's rounding in the state type
        return ops.cast(x, st)

    def p16(p):  # P enters P·V in FP16; an FP16 state already holds FP16 values
        return p if st == "float16" else ops.cast(p, "float16")

    shape = (*ops.broadcast_shape(q.shape[:-2], k.shape[:-2]), q.shape[-2], 1)
    m = ops.full(shape, NEG_INF, st, like=q)
    l = ops.full(shape, 0.0, st, like=q)
    o = ops.full((*shape[:-1], v.shape[-1]), 0.0, od, like=q)
    if alloc.shifted:
        inva = r(ops.scalar(beta / (1.0 - beta), like=q))
        f = None  # running pseudo-average F_j of the shifted scores (Welford mean)

    if alloc.shifted:
        shift = _shift_matrix(ops, beta, block_kv, scale, q)
    for j, c0 in enumerate(range(0, s2, block_kv), start=1):
        c1 = min(c0 + block_kv, s2)
        kj, vj = k[..., c0:c1, :], v[..., c0:c1, :]
        if alloc.shifted:
            # A tail block (n_j < block_kv) is padded to block_kv rows with copies of its last key
            # (the authors' choice): every block is then shifted by the same M and recovered by the
            # same I. A tail shifted by its own M(β/n_j) would need its own coefficient f(β, n_j),
            # and zero rows would leave the key bias in the block. The copies are dropped after the
            # block mean, as if masked.
            n_j = c1 - c0
            if n_j < block_kv:
                kj = kj[..., list(range(n_j)) + [n_j - 1] * (block_kv - n_j), :]
            # Step 1: K'_j = M·K_j on the matrix unit (M symmetric, so Mᵀ = M), FP16 out.
            kj = ops.cast(ops.matmul(shift, kj), "float16")
            # Step 2: S' = Q·K'ᵀ, already scaled and shifted. (The state type is never narrower
            # than the score type, so S' needs no second rounding to enter the softmax.)
            s = ops.cast(ops.matmul(q, ops.mT(kj)), alloc.score)
            # Step 3: the block's pseudo-average over all its columns, before any mask: the sum of
            # S'/n, whose partial sums stay within max|S'| (a sum of S' itself overflows FP16 once
            # |mean| > 65504/n although every S' is finite). 1/n is exact for a power-of-two n.
            mean = _tree_rowsum(ops, r(s * (1.0 / block_kv)), st)
            s = s[..., :n_j]
        else:
            s = r(ops.cast(ops.matmul(q, ops.mT(kj)), alloc.score) * scale)
        if mask is not None:
            s = ops.where(mask[..., c0:c1], NEG_INF, s)
        m_blk = ops.rowmax(s)
        if alloc.shifted:
            # Step 4: F_j = F_{j−1} + (S̄'_j − F_{j−1})/j, Welford's form of ((j−1)F_{j−1} + S̄'_j)/j:
            # the same mean without the product (j−1)·F, which overflows FP16 on long contexts.
            f_new = mean if f is None else r(f + r(r(mean - f) / j))
            # Step 5: corrections that move both maxima to the common reference I·F_j.
            d_prev = ops.zeros_like(mean) if f is None else r(inva * r(f - f_new))
            d_cur = r(inva * r(mean - f_new))
            f = f_new
            # Step 6: local softmax, then merge (Algorithm 1, lines 12 and 16-20).
            m_new = ops.maximum(r(m + d_prev), r(m_blk + d_cur))
            p = r(ops.exp(r(s - ops.neginf_to_zero(m_blk))))
            l_blk = _tree_rowsum(ops, p, st)
            alpha = _guarded_exp(ops, r(r(m - m_new) + d_prev), m_new, st)
            gamma = _guarded_exp(ops, r(r(m_blk - m_new) + d_cur), m_new, st)
            l = r(r(alpha * l) + r(gamma * l_blk))
            pv = ops.cast(ops.matmul(p16(p), vj), od)
            o = ops.cast(ops.cast(ops.cast(alpha, od) * o, od) + ops.cast(ops.cast(gamma, od) * pv, od), od)
        else:
            # FlashAttention-2 (paper eqs. 4-7): P relative to the running maximum.
            m_new = ops.maximum(m, m_blk)
            p = r(ops.exp(r(s - ops.neginf_to_zero(m_new))))
            alpha = _guarded_exp(ops, r(m - m_new), m_new, st)
            l = r(r(alpha * l) + _tree_rowsum(ops, p, st))
            pv = ops.cast(ops.matmul(p16(p), vj), od)
            o = ops.cast(ops.cast(ops.cast(alpha, od) * o, od) + pv, od)
        m = m_new

    if sink is not None:  # scores are relative to I·F (PASA) or in the true scale
        m_true = ops.cast(m, "float32")
        if alloc.shifted:
            m_true = m_true + ops.cast(inva, "float32") * ops.cast(f, "float32")
        m, l, o = _join_sink(ops, m_true, l, o, sink, st, od)
    # Final normalisation O/l; rows with no unmasked key (l = 0) give 0, not 0/0.
    empty = l == 0
    out = ops.cast(ops.where(empty, 0.0, o / ops.where(empty, 1.0, ops.cast(l, od))), od)
    lse = ops.cast(m, "float32") + ops.log(ops.cast(l, "float32"))
    if alloc.shifted and sink is None:
        lse = lse + ops.cast(inva, "float32") * ops.cast(f, "float32")
    lse = ops.where(empty, NEG_INF, lse)
    return ops.cast(out, "float16"), lse[..., 0]


def _join_sink(ops, m_true, l, o, sink, state: str, output: str):
    """The sink joins a row's state (m_true, l, O) once, after the last block: m_true is the row's
    running maximum in the true scale (FP32, −∞ for a row that saw no key), l and O the row sum and
    output relative to it, in the ``state`` and ``output`` types. The sink is one more term of weight
    e^{sink} and value 0, merged as FlashAttention merges a block: the new maximum max(m_true, sink) in
    FP32, the factors e^{m_true − max} (0 for a row with no key) and e^{sink − max} in FP32 rounded to
    ``state``. Returns (the new maximum, l, O): the lse is max + ln l, and a row with no key gets l = 1,
    O = 0, lse = sink exactly."""
    top = ops.maximum(m_true, sink)
    none = ops.isneginf(m_true)
    a = ops.cast(ops.where(none, 0.0, ops.exp64(ops.where(none, 0.0, ops.cast(m_true - top, "float32")))), state)
    c = ops.cast(ops.exp64(ops.cast(sink - top, "float32")), state)
    l = ops.cast(ops.cast(a * l, state) + c, state)
    o = ops.cast(ops.cast(a, output) * o, output)
    return top, l, o


#: pasa_rs reshifts a block whose row max lands further than this from ψ, in units of Q̂·K times
#: 2^⌊log₂ ρ⌋ (between 2 and 4 in units of the scaled scores) ...
RESHIFT_AT = 2.0
#: ... unless the block's maximum lies more than this far (in units of the scaled scores) below the
#: row's running maximum: its weights are then below e⁻⁴ of the largest, and the FP16 rounding of
#: its scores barely shows in the output.
RESHIFT_RELEVANCE = 4.0


def row_shift_constants(scale: float) -> tuple[float, float, float, float]:
    """``pasa_rs``'s constants for a softmax ``scale`` > 0: ``(q_mul, rho, reshift_at, relevance)``.

    Scores are tracked in units of Q̂·K with Q̂ = Q·q_mul, q_mul = 2^e, e = min(⌊log₂ scale⌋, 0): a power
    of two, so Q̂ is exact in FP16 (but where it becomes subnormal), and never larger than Q, so Q̂
    cannot overflow FP16 whatever the scale (FP16 rounds relative to the value: a larger Q̂ would gain
    nothing). The softmax multiplies by ρ = scale/2^e: in [1, 2) for a scale below 2, the scale itself
    above. ``reshift_at`` = RESHIFT_AT/2^⌊log₂ ρ⌋ and ``relevance`` = RESHIFT_RELEVANCE/ρ are the reshift's
    thresholds in units of Q̂·K (in units of the scaled scores: between 2 and 4, and 4).
    """
    e_scale = math.floor(math.log2(scale))
    e = min(e_scale, 0)
    return 2.0**e, scale / 2.0**e, RESHIFT_AT * 2.0 ** (e - e_scale), RESHIFT_RELEVANCE * 2.0**e / scale


def _centre_keys(ops, k, block_kv):
    """The pre-pass of ``pasa_rs``, once per KV head and block (shared by every query tile and
    every query head of a GQA group).

    Returns ``(kc, u, kbar)``: kc (..., 1, S2, D), the keys centred block by block, K'_j = K_j − u_j,
    FP16 values; u and kbar (..., 1, J, D) for the J blocks: the centring offsets and K̄_j, the
    FP16 column means.
    """
    s2 = k.shape[-2]
    kcs, us, kbars = [], [], []
    for c0 in range(0, s2, block_kv):
        kj = k[..., c0:min(c0 + block_kv, s2), :]
        n = kj.shape[-2]
        # K̄_j: the column sum on the matrix unit (a row of ones times K_j: exact, then FP32),
        # divided by n in FP32 and rounded to FP16, the type of a matrix operand. A non-finite
        # mean (an Inf key) is replaced by 0: K̄ only places the shift, and an Inf key's score
        # is ±Inf whatever the shift (a NaN from Inf − Inf would reach every row).
        kbar = ops.cast(ops.matmul(ops.full((1, n), 1.0, "float32", like=k), kj) / n, "float16")
        kbar = ops.where(abs(kbar) < float("inf"), kbar, ops.zeros_like(kbar))
        kt = ops.mT(kj)
        kmax = ops.mT(ops.rowmax(kt))
        kmin = -ops.mT(ops.rowmax(-kt))
        pos, neg = kmin > 0, kmax < 0
        # In a dimension whose keys all have one sign, K − u is exact in FP16 for every key when
        # max|K|/2 ≤ |u| ≤ 2·min|K| (Sterbenz): take |K̄_j| clipped to that interval. u = 0 where
        # the signs mix (or a key is 0), where the interval is empty, and where the clipped value
        # is not an FP16 number (a subnormal max|K|/2, or 2·min|K| beyond 65504). The clip is
        # exact in FP32, and K' = K − u needs no rounding at all.
        a_lo = ops.where(pos, kmin, -kmax)
        a_hi = ops.where(pos, kmax, -kmin)
        lo, hi = a_hi * 0.5, a_lo * 2.0
        mag = ops.maximum(lo, -ops.maximum(-hi, ops.where(pos, -kbar, kbar)))
        ok = (pos | neg) & (lo <= hi) & (ops.cast(mag, "float16") == mag)
        u = ops.where(ok, ops.where(pos, mag, -mag), ops.zeros_like(mag))
        kcs.append(kj - u)
        us.append(u)
        kbars.append(kbar)
    return ops.cat(kcs, -2), ops.cat(us, -2), ops.cat(kbars, -2)


def _count(stats, **flags):
    """Add a block pass's rows, and its tiles (the rows of one query block of one head), to the
    counters: ``<name>_row_blocks`` and ``<name>_tile_blocks`` for each flag (which rows)."""
    if stats is None:
        return
    some = next(iter(flags.values()))
    for key, val in (("row_blocks", math.prod(some.shape)), ("tile_blocks", math.prod(some.shape[:-2]))):
        stats[key] = stats.get(key, 0) + val
    for name, f in flags.items():
        for key, val in ((f"{name}_row_blocks", int(f.sum())), (f"{name}_tile_blocks", int((f.sum(-2) > 0).sum()))):
            stats[key] = stats.get(key, 0) + val


def _query_block_rs(ops, q, keys, v, scale, block_kv, s2, mask, sink, stats):
    """Row-shifted PASA (``pasa_rs``) on one block of query rows; docs/golden.md states the rules.

    Scores are tracked in the unit of Q̂·K, Q̂ = Q·2^e; the softmax multiplies by ρ = scale/2^e
    (:func:`row_shift_constants`). Block j's scores are split as Q̂·K_j = C_j + ψ_j + S'_j with C_j the
    centring's share, ψ_j a per-row shift and S'_j what the matrix unit rounds to FP16. The row
    state m (FP32) lives in block 1's frame C_1 + ψ_1; block j enters it through
    δ_j = (C_j − C_1) + (ψ_j − ψ_1). The stages of a block are :class:`_RowShiftTile`'s (the row shift,
    the scores with their FP32 safety net, the reshift) and :func:`_rs_update` (the state update).
    """
    if not scale > 0:
        raise ValueError(f"scale must be positive for pasa_rs, got {scale!r}")
    tile = _RowShiftTile(ops, q, keys, scale, block_kv, s2, mask)
    shape = (*tile.lv.shape[:-1], 1)
    m = ops.full(shape, NEG_INF, "float32", like=q)
    l = ops.full(shape, 0.0, "float32", like=q)
    o = ops.full((*shape[:-1], v.shape[-1]), 0.0, "float32", like=q)
    e_run, excesses = tile.first_excess, []
    for j in range(1, tile.nblocks + 1):
        # ψ_j = lv_j + the largest excess of blocks ≤ j − 2 (and of block 1's first pass): a lag of
        # two blocks, so that the matrix unit can run block j's product while the vector unit
        # finishes block j − 1.
        if j >= 3:
            e_run = ops.maximum(e_run, excesses[j - 3])
        psi, s, m_blk, redo, far = tile.scores(j, tile.shift_at(j, e_run), m)
        _count(stats, recomputed=redo, reshifted=far)
        excesses.append(tile.excess(m_blk, psi, j))
        c0, c1 = tile.columns(j)
        m, l, o = _rs_update(ops, tile.rho, (m, l, o), s, m_blk, tile.in_frame(m_blk, psi, j), v[..., c0:c1, :])

    top = tile.true_scale(m)
    if sink is not None:
        top, l, o = _join_sink(ops, top, l, o, sink, "float32", "float32")
    empty = l == 0
    out = ops.cast(ops.where(empty, 0.0, o / ops.where(empty, 1.0, l)), "float16")
    # lse = ρ·(m + C_1 + ψ_1) + ln l: the true-scale log-sum-exp, FP32.
    lse = ops.where(empty, NEG_INF, ops.cast(top + ops.log64(l), "float32"))
    return out, lse[..., 0]


class _RowShiftTile:
    """``pasa_rs``'s scores for one tile of query rows: the tile's Q̂, the centring's shares C_j and the
    block means lv_j, block 1's frame ψ_1, and per block j the row shift ψ_j, the scores S'_j with their
    FP32 safety net, and the reshift. ``keys``: (kc, u, kbar) of the visited blocks (:func:`_centre_keys`).
    """

    #: The largest FP16 number: x/64 saturates at ±LIM in the shift instead of becoming Inf.
    LIM = 65504.0

    def __init__(self, ops, q, keys, scale, block_kv, s2, mask):
        self.ops, self.block_kv, self.s2, self.mask = ops, block_kv, s2, mask
        self.kc, u, kbar = keys
        self.nblocks = u.shape[-2]
        q_mul, rho, self.reshift_at, self.relevance = row_shift_constants(scale)
        self.rho = ops.scalar(rho, like=q)  # FP32
        # Q̂ = Q·2^e is exact in FP16 (a power of two) except where it becomes subnormal (|Q̂| < 2⁻¹⁴),
        # where it rounds to a multiple of 2⁻²⁴.
        self.qh = self.h(q * q_mul)
        # One GEMM with FP32 out for all blocks: C_j = Q̂·u_j, and lv_j = Q̂·K̄_j − C_j, block j's mean
        # score over its centred keys.
        self.c = ops.matmul(self.qh, ops.mT(u))
        self.lv = self.r(ops.matmul(self.qh, ops.mT(kbar)) - self.c)
        # Block 1 is computed twice: first with ψ at its mean, to learn how far its maximum lies above
        # the mean (its excess), then in the loop with its own ψ_1 = lv_1 + that excess: block 1's frame.
        psi0 = self.shift(self.lv[..., 0:1])
        _, m_pre, _ = self.product(1, psi0)
        self.first_excess = self.excess(m_pre, psi0, 1)
        self.psi_1 = self.shift_at(1, self.first_excess)

    def r(self, x):  # one vector op's rounding to FP32 (the row state and merge)
        return self.ops.cast(x, "float32")

    def h(self, x):  # rounding to FP16: a matrix operand, S' out of the matrix unit, the output
        return self.ops.cast(x, "float16")

    def columns(self, j):
        """Block j's keys [c0, c1) among the tile's visited ones."""
        return (j - 1) * self.block_kv, min(j * self.block_kv, self.s2)

    def shift(self, x):
        """ψ = 64·FP16(x/64): an FP16 value times 64, so that it fits a matrix operand (the extra column
        of :meth:`product`) over 64× FP16's range."""
        x = x * (1.0 / 64)
        x = self.ops.where(x > self.LIM, self.LIM, self.ops.where(x < -self.LIM, -self.LIM, x))
        return self.h(x) * 64.0

    def shift_at(self, j, e_run):
        """ψ_j for the running excess E (FP32, −∞ for a row with no unmasked key yet: it uses lv_j)."""
        return self.shift(self.r(self.lv[..., j - 1:j] + self.ops.neginf_to_zero(e_run)))

    def excess(self, m_blk, psi, j):
        """Block j's row max above its mean, FP32 (−∞ if all masked)."""
        return self.r(self.r(m_blk + psi) - self.lv[..., j - 1:j])

    def in_frame(self, m_blk, psi, j):
        """Block j's row max moved into block 1's frame by δ_j, FP32."""
        return self.r(m_blk + self.r(self.r(self.c[..., j - 1:j] - self.c[..., 0:1]) + self.r(psi - self.psi_1)))

    def true_scale(self, m):
        """The row maximum m (block 1's frame) in the true scale, ρ·(m + C_1 + ψ_1), FP32."""
        return self.r(self.rho * self.r(self.r(m + self.c[..., 0:1]) + self.psi_1))

    def product(self, j, psi):
        """Block j's scores for the shift ψ, masked: FP16 S' for most rows, FP32 for the rows
        recomputed; returns them, their row max and which rows were recomputed."""
        ops = self.ops
        c0, c1 = self.columns(j)
        kj = self.kc[..., c0:c1, :]
        # Q̂·K'ᵀ − ψ on the matrix unit: Q̂ carries an extra column −ψ/64 and K' an extra column
        # of 64, so ψ is subtracted in the FP32 accumulator, before the one rounding to FP16.
        qa = ops.cat([self.qh, psi * (-1.0 / 64)], -1)
        ka = ops.cat([kj, ops.full((*kj.shape[:-1], 1), 64.0, "float16", like=kj)], -1)
        s32 = ops.matmul(qa, ops.mT(ka))
        s16 = self.h(s32)
        if self.mask is not None:
            s32 = ops.where(self.mask[..., c0:c1], NEG_INF, s32)
            s16 = ops.where(self.mask[..., c0:c1], NEG_INF, s16)
        m16 = ops.rowmax(s16)
        # The safety net: a row whose S' left FP16's range in this block (its max is +Inf, or
        # every unmasked score fell below −65504 and the max is lost) takes this block's S − ψ
        # from the matrix unit in FP32 instead. The kernel recomputes the block with FP32 out;
        # every row keeps its own choice, so no row depends on which rows share its tile.
        redo = (m16 == float("inf")) | (ops.isneginf(m16) & ~ops.isneginf(ops.rowmax(s32)))
        s = ops.where(redo, s32, s16)
        return s, ops.rowmax(s), redo

    def scores(self, j, psi, m):
        """Block j's scores (:meth:`product`) for the shift ψ, reshifted where they need it, against
        the running maximum m: returns (ψ, the scores, their row max, the rows recomputed, the rows
        reshifted)."""
        s, m_blk, redo = self.product(j, psi)
        # The reshift: the keys that carry the weight sit near the row max, and S' is rounded with
        # an error ≈ ulp16(|S'|). A row whose block max lands further than reshift_at from 0, in
        # a block that can matter (its max at most RESHIFT_RELEVANCE below the running maximum,
        # or above it), computes the block's S' again with ψ moved by its max (one more product
        # for that block; rows not reshifted get the same S' again) — unless the moved ψ rounds
        # to the same value (the step of ψ, 2⁻¹⁰ of |ψ|'s power of two, exceeds 2·reshift_at beyond
        # |ψ| ≈ 2¹²·reshift_at: 8192 for a scale below 2).
        moved = self.shift(self.r(psi + m_blk))
        far = ((abs(m_blk) > self.reshift_at) & (moved != psi) & ~redo
               & (self.in_frame(m_blk, psi, j) > self.r(m - self.relevance)))
        if bool(far.any()):
            psi = self.ops.where(far, moved, psi)
            s, m_blk, redo_again = self.product(j, psi)
            redo = redo | redo_again
        return psi, s, m_blk, redo, far


def _rs_update(ops, rho, state, s, m_blk, mb, vj):
    """The row state (m, l, O) after one block of ``pasa_rs``: its scores ``s`` with their row max
    ``m_blk``, that max moved into block 1's frame (``mb``), and its values ``vj``."""
    m, l, o = state

    def r(x):  # one vector op's rounding to FP32
        return ops.cast(x, "float32")

    def gexp(x, m_new):  # FP32 exp, 0 where the running maximum is still −∞ (see _guarded_exp)
        return ops.where(ops.isneginf(m_new), 0.0, ops.exp64(ops.where(ops.isneginf(m_new), 0.0, x)))

    # Local softmax in FP32 from the FP16 (or recomputed FP32) scores: S' − m', times ρ, exp;
    # l' a pairwise FP32 row sum; P enters P·V in FP16.
    p = r(ops.exp64(r(rho * r(s - ops.neginf_to_zero(m_blk)))))
    l_blk = _tree_rowsum(ops, p, "float32")
    p = ops.cast(p, "float16")
    # Merge in FP32, block j's maximum in block 1's frame.
    m_new = ops.maximum(m, mb)
    alpha = gexp(r(rho * r(m - m_new)), m_new)
    gamma = gexp(r(rho * r(mb - m_new)), m_new)
    l = r(r(alpha * l) + r(gamma * l_blk))
    pv = ops.matmul(p, vj)
    o = r(r(alpha * o) + r(gamma * pv))
    return m_new, l, o


#: fp32_frame moves a row's frame up to a block's maximum when that maximum lies more than this above
#: the frame (scaled units: P stays below exp(10) ≈ 22026, inside FP16's range) ...
FRAME_UP = 10.0
#: ... and down to it after FRAME_DOWN_BLOCKS blocks in a row whose maxima all lie more than this below
#: the frame (their weights would sink towards FP16's subnormals, where they lose precision) ...
FRAME_DOWN = 8.0
FRAME_DOWN_BLOCKS = 8
#: ... but never below the row's maximum so far by more than this (scaled units): the closed sums, taken to
#: the moved frame, then grow by at most e^60 whatever the number of moves, inside FP32.
FRAME_DROP_LIMIT = 60.0


def _query_block_frame(ops, q, k, v, scale, block_kv, s2, mask, sink, stats, group_tile):
    """``fp32_frame`` on one tile of query rows; docs/golden.md states the rules.

    S = Q·Kᵀ leaves the matrix unit in FP32. Every row keeps a frame G (FP32, units of Q·K) set by its
    first block with a key: P = FP16(exp(scale·(S − G))) needs no block max, no rescale and no merge
    while the frame holds, and P·[V | 1] sums O and l in FP32 across blocks (the cube's accumulator;
    numerator and denominator from the same FP16 P). A row moves its frame to a block's maximum when
    that maximum rises more than FRAME_UP above it, or after FRAME_DOWN_BLOCKS consecutive blocks
    more than FRAME_DOWN below it; at a move the tile's running sums are closed as a segment, and the
    segments merge in FP32.
    """
    def r(x):
        return ops.cast(x, "float32")

    def h(x):
        return ops.cast(x, "float16")

    up, down = ops.scalar(FRAME_UP, like=q), ops.scalar(-FRAME_DOWN, like=q)
    drop_limit = ops.scalar(FRAME_DROP_LIMIT / scale, like=q)
    tile_axes = (-3, -2) if group_tile else (-2,)
    shape = (*ops.broadcast_shape(q.shape[:-2], k.shape[:-2]), q.shape[-2], 1)
    frame = ops.full(shape, 0.0, "float32", like=q)
    known = frame != 0
    low = frame  # consecutive blocks far below the frame
    peak = ops.full(shape, NEG_INF, "float32", like=q)  # the row's maximum so far (units of Q·K)
    acc_frame, acc_l, seg_l = frame, frame, frame
    acc_o = ops.full((*shape[:-1], v.shape[-1]), 0.0, "float32", like=q)
    seg_o = acc_o

    def close(tiles):
        """Merge the running segment into the accumulated one, for the rows of the closing tiles."""
        nonlocal acc_o, acc_l, acc_frame, seg_o, seg_l
        old = acc_l == 0
        a = ops.where(old, 0.0, ops.exp64(ops.where(old, 0.0, r(scale * r(acc_frame - frame)))))
        acc_o = ops.where(tiles, r(r(a * acc_o) + seg_o), acc_o)
        acc_l = ops.where(tiles, r(r(a * acc_l) + seg_l), acc_l)
        acc_frame = ops.where(tiles, frame, acc_frame)
        seg_o = ops.where(tiles, 0.0, seg_o)
        seg_l = ops.where(tiles, 0.0, seg_l)

    for c0 in range(0, s2, block_kv):
        c1 = min(c0 + block_kv, s2)
        s = ops.matmul(q, ops.mT(k[..., c0:c1, :]))
        if mask is not None:
            s = ops.where(mask[..., c0:c1], NEG_INF, s)
        m = ops.rowmax(s)
        has = ~ops.isneginf(m)
        peak = ops.maximum(peak, m)
        x = r(scale * r(s - frame))
        top = ops.rowmax(x)
        low = ops.where(has & known & (top < down), r(low + 1.0), ops.where(has, 0.0, low))
        target = ops.where(known, ops.maximum(m, r(peak - drop_limit)), m)
        move = has & (~known | (top > up) | ((low >= FRAME_DOWN_BLOCKS) & (target < frame)))
        if bool(move.any()):
            close(ops.any(move, tile_axes))
            frame = ops.where(move, target, frame)
            low = ops.where(move, 0.0, low)
            known = known | move
            x = r(scale * r(s - frame))
        _count(stats, moved=move)
        p = h(ops.exp64(x))
        vj = v[..., c0:c1, :]
        pv = ops.matmul(p, ops.cat([vj, ops.full((*vj.shape[:-1], 1), 1.0, "float16", like=vj)], -1))
        seg_o = r(seg_o + pv[..., :-1])
        seg_l = r(seg_l + pv[..., -1:])
    close(ops.full(shape, 1.0, "float32", like=q) != 0)

    # The frame in the true scale, FP32: the reference of l and O (−∞ for a row that saw no key).
    top = ops.where(acc_l == 0, NEG_INF, r(scale * acc_frame))
    if sink is not None:
        top, acc_l, acc_o = _join_sink(ops, top, acc_l, acc_o, sink, "float32", "float32")
    empty = acc_l == 0
    out = h(ops.where(empty, 0.0, acc_o / ops.where(empty, 1.0, acc_l)))
    lse = ops.where(empty, NEG_INF, r(top + ops.log64(ops.where(empty, 1.0, acc_l))))
    return out, lse[..., 0]


def _guarded_exp(ops, x, m_new, dtype):
    """exp(x) rounded to ``dtype``; 0 where the running maximum is still −∞ (nothing seen yet),
    where x would be −∞ − (−∞) = NaN. The guarded −∞ start replaces the paper's m_0 = 0, which
    underflows every exp when block means are far below zero."""
    return ops.cast(ops.where(ops.isneginf(m_new), 0.0, ops.exp(ops.where(ops.isneginf(m_new), 0.0, x))), dtype)



def grouped_attention(ops, q, k, v, *, alloc: Allocation, scale: float, beta: float | None = None,
                      block_q: int = 128, block_kv: int = 128, mask=None, band=None, sink=None,
                      stats: dict | None = None, group_tile: bool = False):
    """:func:`attention` on (B, N, S1, D) queries and (B, Nkv, S2, D) keys/values, N % Nkv == 0.

    Query heads are grouped as (B, Nkv, N/Nkv, S1, D) against (B, Nkv, 1, S2, D) keys, so a KV head
    (and, for PASA, its shifted K') serves its whole group without being copied. ``mask`` is None or
    broadcastable to (B, N, S1, S2) with full S1 and S2 dims; ``sink`` None or (N,) FP32 sink logits.
    Returns out (B, N, S1, D) FP16 and lse (B, N, S1) FP32. ``band`` and ``stats`` as in :func:`attention`.
    """
    b, n, s1, d = q.shape
    nkv = k.shape[1]
    g = n // nkv
    if mask is not None:
        mask = mask.reshape((1,) * (4 - mask.ndim) + tuple(mask.shape))
        heads = mask.shape[1] == n  # a per-head mask splits into (KV head, group member)
        mask = mask.reshape(mask.shape[0], nkv if heads else 1, g if heads else 1, *mask.shape[-2:])
    if sink is not None:
        sink = sink.reshape(1, nkv, g, 1, 1)
    out, lse = attention(ops, q.reshape(b, nkv, g, s1, d), k[:, :, None], v[:, :, None], alloc=alloc,
                         scale=scale, beta=beta, block_q=block_q, block_kv=block_kv, mask=mask,
                         band=band, sink=sink, stats=stats, group_tile=group_tile)
    return out.reshape(b, n, s1, v.shape[-1]), lse.reshape(b, n, s1)
