"""Triton kernels of the ``triton`` backend: PASA, row-shifted PASA, FP32-state FlashAttention-2 and framed
FlashAttention from one loop over KV blocks, each allocation family a pair of stages called in it (its scores,
its frame), with the masks, the V tile and P·V shared; a prologue (the program's batch, rows and KV blocks) before
the loop and an epilogue (normalisation, stores, the merge of split-KV partials) after it.

One program computes a tile of BLOCK_M query rows of one KV head against a range of KV blocks of
BLOCK_N keys. The rows of a tile are the flattened (group member, query position) pairs of the KV
head's G query heads, so GQA reads K/V once per group without copying it, and a decode step
(S1 = 1) fills the matrix unit's M dimension with the group's heads instead of one row.

Allocation families (the constexpr FAMILY): "fa" (``fp32``), "pasa" (PASA: K' = M·K, S' in FP16, Welford
running mean F, corrections I·ΔF; with STATE16 the row state m, l, F, O rounded to FP16 after every operation,
the ``pasa`` allocation, otherwise FP32, ``pasa_fp32``), "pasa_rs" and "frame" (below). State tensors are FP32
tensors holding FP16 values where STATE16 is set: each vector op computes in FP32 and rounds once, which is the
correctly rounded FP16 op (the golden model's rule, see :mod:`pasa_npu.blockwise`).

"pasa_rs" (``pasa_rs``, docs/golden.md and :func:`pasa_npu.blockwise._query_block_rs`): K centred per
KV block, K' = K − u exact in FP16, by a pre-pass (``centre_keys_kernel``, once per KV head) or fused
into the loop; Q̂ = Q·2^e exact and ρ = scale/2^e applied in the exp; per row and block the frame
terms C = Q̂·u and lv = Q̂·K̄ − C in FP32, from 16-column products (with the pre-pass one per 8 blocks,
into a per-tile table before the loop, so that the loop reads two FP32 row vectors per block besides
K' and V; fused, one per block); the shift ψ = 64·FP16(x/64) at lv plus the lag-2 running excess,
block 1 computed twice; S' = FP16(Q̂·K'ᵀ − ψ) from the FP32 product; the per-row safety net (FP32
S − ψ for a row whose S' leaves FP16's range) and the reshift (ψ moved by the row max of a block
that lands far from it) of the golden model; the row state m, l, O in FP32 in block 1's frame, block
j entering through δ_j = (C_j − C_1) + (ψ_j − ψ_1); the true-scale lse = ρ·(m + C_1 + ψ_1) + ln l.

Differences from the golden loop (same mathematics, other roundings; the tests bound them):
* P is taken relative to the merged maximum (FlashAttention-2's form, one P·V accumulated into O)
  rather than to the block's own maximum followed by a rescale of P·V (Algorithm 1, lines 12-20);
  with FP32 state it is exp2((S − (m_new − Δ))·c·log2 e), where c is the softmax's factor on the
  scores held (1 for PASA's S', the scale for ``fp32``'s unscaled Q·Kᵀ, ρ for pasa_rs's S');
* Q·Kᵀ and P·V accumulate in the tensor cores' order (the golden model accumulates exactly), row
  sums in FP32 in the order of the hardware's reduction tree, and K' = M·K is a·K + b·colsum(K) in
  FP32 (M = a·I + b·J), rounded once to FP16;
* with FP16 state, exp is ``ex2.approx.f16x2`` of the FP16 product x·log2(e) (FP32 ``exp2`` rounded
  to FP16 under ``TRITON_INTERPRET=1``, where inline assembly does not run);
* a band's skipped KV blocks (those it hides from every row of a tile, as in the golden model) are
  decided per program tile of BLOCK_M flattened (group member, query position) rows, the golden
  model's per block_q query positions of one head: the same blocks where BLOCK_M = block_q and a
  tile holds positions of one head (g = 1, or S1 a multiple of BLOCK_M); a tile that spans two heads
  visits the blocks of every position, so F and pasa_rs's frame may start at an earlier block;
* decode (one tile per KV head) splits the KV blocks over several programs, each with its own F,
  and merges the normalised partial outputs through their true-scale lse.

And for ``pasa_rs``:

* P = FP16(exp(ρ·(S' − (m_new − δ_j)))), FP32 exp relative to the merged maximum moved into block
  j's frame, l summing the FP32 P; the golden model takes P relative to the block's maximum and
  rescales P·V and l' by exp(ρ·(m_blk + δ_j − m_new));
* Q̂·K'ᵀ − ψ and the frame terms C, lv accumulate in the tensor cores' FP32 (the golden model's are
  exact, then rounded once): where centring leaves Q̂·K' large (u = 0 in a block whose signs mix)
  that costs what it costs FP32 FlashAttention's Q·Kᵀ. K̄'s column sum is FP32 in the reduction's
  order, so K̄ may differ by an FP16 ulp: ψ and u move within the ranges that keep them exact;
* "block 1" (computed twice, the frame of the row state, the start of the lag-2 excess) is the
  first block a program visits, as in the golden model: the first block of its tile's band (up to
  the tile difference above), and each split's first block in decode (split partials merge through
  their true-scale lse; the golden model does not split). All rows of a tile visit the same blocks,
  so each row's ψ, excess and frame come from one sequence of blocks; a row with no key in the first
  visited block starts with no excess (ψ = lv), as in the golden model;
* ψ (the reshifted ψ where a row reshifts) is subtracted from the FP32 product rather than put in
  the accumulator before it (the golden model's product is exact, then rounded once).

"frame" (``fp32_frame``, docs/golden.md and :func:`pasa_npu.blockwise._query_block_frame`): FlashAttention-2's
FP32 scores, then a frame stage instead of the merge: every row keeps a frame G (units of Q·K) set by its first
block with a key, P = FP16(exp(scale·(S − G))) against it, and l and O are summed from that FP16 P across blocks
with no running maximum and no rescale; a row's frame moves up when a block's scaled maximum exceeds it by
FRAME_UP, down after FRAME_DOWN_BLOCKS blocks FRAME_DOWN below it (by at most FRAME_DROP_LIMIT), and a row
that moves rescales its l and O into its moved frame (the golden model closes the whole tile, the rows that did
not move with a = 1, exactly: the same values). The decisions (block maxima, the counts of low blocks, which
rows move and to where) are the golden model's, bit for bit given the same S: the scaled block maximum is taken as
FP32(scale·FP32(max S − G)), which is the golden model's max of FP32(scale·FP32(S − G)) (rounding is
monotonic, scale > 0). A program's tile is the golden model's tile (block_q = BLOCK_M rows of one head; a
decode tile holds its KV head's whole group, ``group_tile``), up to the tile difference above. Differences:

* the golden model keeps the running sums of the current segment apart from the accumulated ones and merges
  them at each close (acc ← a·acc + seg); the kernel has one accumulator (the tensor cores' O), which a move
  rescales in place: the same sums, associated otherwise (FP32 roundings);
* l is P·1 and O is P·V, both from the FP16 P on the tensor cores, accumulated in their order (the golden
  model's products are exact, then rounded once to FP32);
* P = 2^((S − G)·(scale·log₂e)): the scale folded into the exp's one multiply (the golden model rounds
  scale·(S − G) to FP32, then takes its exp correctly rounded to FP32), FP32 roundings of P before its FP16
  rounding;
* decode splits the KV blocks over several programs, each with its own frames (each split's first block with
  a key sets them), merged through their true-scale lse.
"""

from __future__ import annotations

import os

import triton
import triton.language as tl

from .. import blockwise

LOG2E = tl.constexpr(1.4426950408889634)
#: ``fp32_frame``'s frame rules (scaled units; the golden model's constants, docs/golden.md).
FRAME_UP = tl.constexpr(blockwise.FRAME_UP)
FRAME_DOWN = tl.constexpr(blockwise.FRAME_DOWN)
FRAME_DOWN_BLOCKS = tl.constexpr(blockwise.FRAME_DOWN_BLOCKS)
#: Columns of a paged call's per-batch KVInfo row: query length, key length, band lo, band hi, and the
#: batch's first query row in a TND query (LAYOUT "TND").
KV_INFO = tl.constexpr(5)
#: The FP16 exp is ``ex2.approx.f16x2`` on the GPU; Triton's interpreter runs no inline assembly, and takes an FP32
#: exp2 rounded to FP16 instead.
FP16_EXP = tl.constexpr(os.environ.get("TRITON_INTERPRET") != "1")


@triton.jit
def _round(x, STATE16: tl.constexpr):
    """One vector op's rounding in the state type (FP16 values kept in FP32 registers)."""
    if STATE16:
        return x.to(tl.float16).to(tl.float32)
    else:
        return x


@triton.jit
def _exp(x, scale, STATE16: tl.constexpr):
    """exp(x·scale/log2(e)) = 2^(x·scale) rounded to the state type; x holds state-type values. With FP16
    state ``scale`` is log2(e) (the FP16 product x·log2(e) enters ``ex2.approx.f16x2``)."""
    if STATE16:
        y = (x * scale).to(tl.float16)
        if FP16_EXP:
            e = tl.inline_asm_elementwise("ex2.approx.f16x2 $0, $1;", "=r,r", [y],
                                          dtype=tl.float16, is_pure=True, pack=2)
        else:
            e = tl.exp2(y.to(tl.float32)).to(tl.float16)
        return e.to(tl.float32)
    else:
        return tl.exp2(x * scale)


@triton.jit
def _shifted_keys(k, shift_a, shift_b, BLOCK_N: tl.constexpr):
    """K' = M·K for one block, M = (I − β/n·J)·scale with FP16 entries diag = a + b, off = b:
    M·K = a·K + b·colsum(K), in FP32, rounded to FP16 (the matrix unit's output type)."""
    kf = k.to(tl.float32)
    return (shift_a * kf + shift_b * tl.sum(kf, axis=0)[None, :]).to(tl.float16)


@triton.jit
def _kv_rows(Table, b, stt, rows, row_ok, sb, ss, PAGED: tl.constexpr, PAGE: tl.constexpr):
    """Offsets of key/value rows ``rows`` of batch ``b`` (rows where ``row_ok`` are read). Dense: ``sb`` is
    the batch stride, ``ss`` the row stride. PAGED (PageAttention): row r lives in row r % PAGE of cache
    block Table[b, r // PAGE], ``sb`` the cache's block stride; int64, since a cache may hold more than
    2³¹ elements. The table is read only for valid rows (entries past a batch's pages may be garbage)."""
    if PAGED:
        page_id = tl.load(Table + b * stt + rows // PAGE, mask=row_ok, other=0)
        return page_id.to(tl.int64) * sb + (rows % PAGE) * ss
    else:
        return b * sb + rows * ss


@triton.jit
def _last_key_rows(Table, b, stt, rows, S2, sb, ss, PAGED: tl.constexpr, PAGE: tl.constexpr):
    """:func:`_kv_rows` with rows past the S2 keys clamped to the last key, so that a tail block repeats
    it; and which rows to read (none where there is no key: a batch with no key has no row to copy,
    and its blocks are never read)."""
    src = tl.minimum(rows, S2 - 1)
    return _kv_rows(Table, b, stt, src, src >= 0, sb, ss, PAGED, PAGE), src >= 0


@triton.jit
def _key_block(KVInfo, S2, BLOCK_N: tl.constexpr, PAGED: tl.constexpr):
    """The KV block of a key pre-pass program (grid: blocks, B, NKV): its block, batch and KV head, the
    batch's key length (PAGED: its own, from KVInfo; dense: S2 for all) and the block's key rows."""
    blk = tl.program_id(0)
    b = tl.program_id(1)
    h = tl.program_id(2)
    if PAGED:
        S2 = tl.load(KVInfo + KV_INFO * b + 1)
    return blk, b, h, S2, blk * BLOCK_N + tl.arange(0, BLOCK_N)


@triton.jit
def _key_tables(n_blocks, NKV, D: tl.constexpr, BLOCK_N: tl.constexpr):
    """Batch and head strides of the pre-passes' contiguous tables, whose row stride is D: K'
    (B, NKV, n_blocks·BLOCK_N, D) and UK (B, NKV, n_blocks, 2, D)."""
    kp_h = n_blocks * BLOCK_N * D
    uk_h = n_blocks * 2 * D
    return NKV * kp_h, kp_h, NKV * uk_h, uk_h


@triton.jit
def shift_keys_kernel(K, KP, Table, KVInfo, stt, S2, skb, skh, sks, shift_a, shift_b,
                      D: tl.constexpr, D_PAD: tl.constexpr, BLOCK_N: tl.constexpr, PAGED: tl.constexpr,
                      PAGE: tl.constexpr):
    """Pre-pass K'_j = M·K_j for every KV block j, once per KV head (not once per query tile).
    A tail block is padded with copies of the last key (clamped row index), as in the golden model.
    PAGED: K is a page cache read through Table (see :func:`attention_kernel`) and S2 the batch's own
    key length; KP stays dense, (B, NKV, blocks·BLOCK_N, D), whatever the pages."""
    blk, b, h, S2, rows = _key_block(KVInfo, S2, BLOCK_N, PAGED)
    d = tl.arange(0, D_PAD)
    k_rows, read = _last_key_rows(Table, b, stt, rows, S2, skb, sks, PAGED, PAGE)
    k = tl.load(K + h * skh + k_rows[:, None] + d[None, :], mask=read[:, None] & (d[None, :] < D), other=0.0)
    kp = _shifted_keys(k, shift_a, shift_b, BLOCK_N)
    spb, sph, _, _ = _key_tables(tl.num_programs(0), tl.num_programs(2), D, BLOCK_N)
    tl.store(KP + b * spb + h * sph + rows[:, None] * D + d[None, :], kp, mask=d[None, :] < D)


@triton.jit
def _centre_block(k, row_ok, n):
    """The ``pasa_rs`` pre-pass on one KV block of n keys (rows where ``row_ok``): K̄, the column
    mean rounded to FP16 (0 if not finite); the centring offset u; and K' = K − u in FP16, with no
    rounding at all.

    In a dimension whose keys all have one sign, K − u is exact for every key when
    max|K|/2 ≤ |u| ≤ 2·min|K| (Sterbenz): u is |K̄| clipped to that interval, and 0 where the signs
    mix, where the interval is empty or where the clipped value is not an FP16 number. Rows past the
    block's n keys (``row_ok`` false) repeat its last key (:func:`_last_key_rows`): they change
    neither max nor min, the sum leaves them out, and their K' rows are masked out of the scores."""
    # Max, min and K − u are exact in FP16, so only the sum needs FP32 (the block stays in FP16
    # registers). Only the sum is masked: max, min and K' need no select (see above), which would cost
    # every decode step. Three built-in reductions, not one tl.reduce over a tuple: Triton's interpreter
    # runs a user-defined combine element by element in Python.
    ksum = tl.sum(tl.where(row_ok[:, None], k.to(tl.float32), 0.0), 0)
    kmax = tl.max(k, 0)
    kmin = tl.min(k, 0)
    kbar = (ksum / n).to(tl.float16).to(tl.float32)
    kbar = tl.where(tl.abs(kbar) < float("inf"), kbar, 0.0)  # an Inf key: its score is ±Inf whatever the shift
    kmax = kmax.to(tl.float32)
    kmin = kmin.to(tl.float32)
    pos = kmin > 0.0
    neg = kmax < 0.0
    lo = tl.where(pos, kmax, -kmin) * 0.5
    hi = tl.where(pos, kmin, -kmax) * 2.0
    mag = tl.maximum(lo, tl.minimum(hi, tl.where(pos, kbar, -kbar)))
    ok = (pos | neg) & (lo <= hi) & (mag.to(tl.float16).to(tl.float32) == mag)
    u = tl.where(ok, tl.where(pos, mag, -mag), 0.0)
    return k - u.to(tl.float16)[None, :], u, kbar


@triton.jit
def centre_keys_kernel(K, KC, UK, Table, KVInfo, stt, S2, skb, skh, sks, uk_off,
                       D: tl.constexpr, D_PAD: tl.constexpr, BLOCK_N: tl.constexpr, PAGED: tl.constexpr,
                       PAGE: tl.constexpr):
    """Pre-pass of ``pasa_rs`` for every KV block, once per KV head (not once per query tile):
    K' (B, NKV, blocks·BLOCK_N, D) and UK (B, NKV, blocks, 2, D) = (u, K̄) per block, FP16, UK at element
    ``uk_off`` of its pointer (K' and UK may share one workspace). PAGED: K is
    a page cache read through Table (see :func:`attention_kernel`) and S2 the batch's own key length;
    K' and UK stay dense, indexed by key position."""
    blk, b, h, S2, rows = _key_block(KVInfo, S2, BLOCK_N, PAGED)
    d = tl.arange(0, D_PAD)
    d_ok = d < D
    k_rows, read = _last_key_rows(Table, b, stt, rows, S2, skb, sks, PAGED, PAGE)
    k = tl.load(K + h * skh + k_rows[:, None] + d[None, :], mask=read[:, None] & d_ok[None, :], other=0.0)
    kc, u, kbar = _centre_block(k, rows < S2, tl.minimum(S2 - blk * BLOCK_N, BLOCK_N))
    scb, sch, sub, suh = _key_tables(tl.num_programs(0), tl.num_programs(2), D, BLOCK_N)
    tl.store(KC + b * scb + h * sch + rows[:, None] * D + d[None, :], kc, mask=d_ok[None, :])
    uk = UK + uk_off + b * sub + h * suh + blk * 2 * D + d
    tl.store(uk, u.to(tl.float16), mask=d_ok)
    tl.store(uk + D, kbar.to(tl.float16), mask=d_ok)


@triton.jit
def _rows(Ptr, head_off, Table, b, stt, cols, S2, sb, ss, D: tl.constexpr, D_PAD: tl.constexpr,
          PAGED: tl.constexpr, PAGE: tl.constexpr, EVEN_KV: tl.constexpr):
    """Rows ``cols`` of one KV head of K or V (offset ``head_off``, rows through :func:`_kv_rows`), zeros past
    the S2 keys and the D columns (EVEN_KV: there are none, and the load takes no mask)."""
    d = tl.arange(0, D_PAD)
    ok = cols < S2
    offs = _kv_rows(Table, b, stt, cols, ok, sb, ss, PAGED, PAGE)
    if EVEN_KV:
        return tl.load(Ptr + head_off + offs[:, None] + d[None, :])
    return tl.load(Ptr + head_off + offs[:, None] + d[None, :], mask=ok[:, None] & (d[None, :] < D), other=0.0)


@triton.jit
def _row_shift(x):
    """ψ = 64·FP16(x/64), x/64 saturated at ±65504: an FP16 value times 64, so that it would fit a
    matrix operand (the cube's extra column) over 64× FP16's range."""
    y = tl.minimum(tl.maximum(x * (1.0 / 64), -65504.0), 65504.0)
    return y.to(tl.float16).to(tl.float32) * 64.0


@triton.jit
def _fp16_max(m32):
    """The row max of S' in FP16 (the FP16 rounding of the FP32 max: rounding is monotonic), and the
    safety net: rows whose S' leaves FP16's range in this block (their max is +Inf, or every
    unmasked score is below −65504) keep the FP32 S − ψ and its max. Returns (max, FP32 rows)."""
    m16 = m32.to(tl.float16).to(tl.float32)
    redo = ((m16 == float("inf")) | (m16 == float("-inf"))) & (m32 != float("-inf"))
    return tl.where(redo, m32, m16), redo


@triton.jit
def _masked(s, blk, sel, BLOCK_N: tl.constexpr, HAS_MASK: tl.constexpr, HAS_BAND: tl.constexpr,
            EVEN_KV: tl.constexpr):
    """Scores of block ``blk`` with masked keys at −∞. Element masks only where a block is not wholly
    kept: the S2 tail, the band's edges, a user mask (read in place, broadcast through its strides).
    ``sel``: the tile's rows (query position, head, which exist), its first and last query position, the band
    (lo, hi), the key length S2, and the user mask with its batch's offset and its head, row and key strides.
    EVEN_KV: no block has a tail, so without a band or mask every block is kept whole."""
    if EVEN_KV and not HAS_BAND and not HAS_MASK:
        return s
    pos, head, row_ok, i_lo, i_hi, band_lo, band_hi, S2, Mask, m_base, smh, sms, smk = sel
    cols = blk * BLOCK_N + tl.arange(0, BLOCK_N)
    col_ok = cols < S2
    c0 = blk * BLOCK_N
    partial = c0 + BLOCK_N > S2
    if HAS_BAND:
        partial = partial | (c0 - i_hi < band_lo) | (c0 + BLOCK_N - 1 - i_lo > band_hi)
    if HAS_MASK:
        mk = tl.load(Mask + m_base + head[:, None] * smh + pos[:, None] * sms + cols[None, :] * smk,
                     mask=row_ok[:, None] & col_ok[None, :], other=1)
        s = tl.where(mk == 0, s, float("-inf"))
    if partial:
        keep = col_ok[None, :]
        if HAS_BAND:
            rel = cols[None, :] - pos[:, None]
            keep = keep & (rel >= band_lo) & (rel <= band_hi)
        s = tl.where(keep, s, float("-inf"))
    return s


# --------------------------------------------------------------------------------------------------
# The stages of one KV block, per allocation: its scores (the keys' side and the product), then its
# frame (the block's row max and where it sits relative to the row state). FlashAttention-2 (``fp32``)
# needs no frame stage; the masks between the two stages and the merge after them are shared.
# --------------------------------------------------------------------------------------------------

@triton.jit
def _fa_scores(q, blk, keys, D: tl.constexpr, D_PAD: tl.constexpr, BLOCK_N: tl.constexpr, PAGED: tl.constexpr,
               PAGE: tl.constexpr, EVEN_KV: tl.constexpr):
    """FlashAttention-2's scores of block ``blk``: Q·Kᵀ in FP32, unscaled (the softmax's exp applies the
    scale). ``keys``: K, the KV head's offset, the pre-pass's K' and this head's offset in it, the batch, the
    block table and its batch stride, K's block (or batch) and row strides, and the batch's key length S2."""
    K, k_head, KP, kp_base, b, Table, stt, skb, sks, S2 = keys
    k = _rows(K, k_head, Table, b, stt, blk * BLOCK_N + tl.arange(0, BLOCK_N), S2, skb, sks, D, D_PAD, PAGED, PAGE,
              EVEN_KV)
    return tl.dot(q, tl.trans(k))


@triton.jit
def _pasa_scores(q, blk, keys, shift_a, shift_b, D: tl.constexpr, D_PAD: tl.constexpr, BLOCK_N: tl.constexpr,
                 STATE16: tl.constexpr, FUSED_SHIFT: tl.constexpr, PAGED: tl.constexpr, PAGE: tl.constexpr):
    """PASA's scores of block ``blk``: S' = Q·K'ᵀ, FP16 out of the matrix unit, already scaled and shifted
    (K' = M·K from the pre-pass, or computed here when FUSED_SHIFT); and the block's pseudo-average, the
    row mean of S' over all BLOCK_N columns (tail copies included), taken before any mask. ``keys``: as for
    :func:`_fa_scores`."""
    K, k_head, KP, kp_base, b, Table, stt, skb, sks, S2 = keys
    cols = blk * BLOCK_N + tl.arange(0, BLOCK_N)
    d = tl.arange(0, D_PAD)
    d_ok = d[None, :] < D
    if FUSED_SHIFT:
        k_rows, _ = _last_key_rows(Table, b, stt, cols, S2, skb, sks, PAGED, PAGE)
        k = tl.load(K + k_head + k_rows[:, None] + d[None, :], mask=d_ok, other=0.0)
        kp = _shifted_keys(k, shift_a, shift_b, BLOCK_N)
    else:
        kp = tl.load(KP + kp_base + cols[:, None] * D + d[None, :], mask=d_ok, other=0.0)
    s = _round(tl.dot(q, tl.trans(kp)).to(tl.float16).to(tl.float32), STATE16)
    return s, _round(tl.sum(s, axis=1) * (1.0 / BLOCK_N), STATE16)


@triton.jit
def _pasa_frame(s, mean, f, j, inva, STATE16: tl.constexpr):
    """PASA's frame of the j-th block a program visits: its row max, the Welford mean F_j = F + (S̄' − F)/j
    and the corrections Δ'_prev = I·(F − F_j) of the row state and Δ'_cur = I·(S̄' − F_j) of the block to
    the common reference I·F_j. Returns (max, Δ'_prev, Δ'_cur, F_j)."""
    f_new = _round(f + _round(_round(mean - f, STATE16) / j, STATE16), STATE16)
    d_prev = tl.where(j == 1.0, 0.0, _round(inva * _round(f - f_new, STATE16), STATE16))
    d_cur = _round(inva * _round(mean - f_new, STATE16), STATE16)
    return tl.max(s, axis=1), d_prev, d_cur, f_new


@triton.jit
def _rs_frame_table(fr, q, UK, uk_base, blk_lo, blk_hi, D: tl.constexpr, D_PAD: tl.constexpr,
                    BLOCK_M: tl.constexpr):
    """``pasa_rs``'s frame terms of every block a program visits, ahead of its loop, from the pre-pass's
    (u, K̄) rows: one 16-column product per 8 blocks into the program's table ``fr`` (2·blocks rows of
    BLOCK_M FP32: C = Q̂·u and Q̂·K̄ of each row), read back one block at a time by :func:`_rs_scores`."""
    d = tl.arange(0, D_PAD)
    r16 = tl.arange(0, 16)
    for g in range(blk_lo, blk_hi, 8):
        rk = 2 * g + r16
        uk = tl.load(UK + uk_base + rk[:, None] * D + d[None, :], mask=(rk < 2 * blk_hi)[:, None] & (d[None, :] < D),
                     other=0.0)
        tl.store(fr[:, None] + rk[None, :] * BLOCK_M, tl.dot(q, tl.trans(uk)), mask=(rk < 2 * blk_hi)[None, :])
    tl.debug_barrier()


@triton.jit
def _rs_scores(q, blk, fr, keys, D: tl.constexpr, D_PAD: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
               FUSED_SHIFT: tl.constexpr, PAGED: tl.constexpr, PAGE: tl.constexpr):
    """``pasa_rs``'s scores of block ``blk``: Q̂·K'ᵀ in FP32 (the shift is subtracted by the frame stage)
    with K' = K − u the block's centred keys, and each row's frame terms, FP32: C = Q̂·u, the centring's
    share of the scores, and lv = Q̂·K̄ − C, the block's mean score over its centred keys. From the
    pre-pass (K') and the program's frame table ``fr``; or FUSED_SHIFT, centred here from K, with the frame
    terms from one product with a 16-row operand (u, K̄, zeros). ``keys``: as for :func:`_fa_scores`. Returns
    (Q̂·K'ᵀ, C, lv)."""
    K, k_head, KP, kp_base, b, Table, stt, skb, sks, S2 = keys
    cols = blk * BLOCK_N + tl.arange(0, BLOCK_N)
    d = tl.arange(0, D_PAD)
    d_ok = d[None, :] < D
    if FUSED_SHIFT:
        k_rows, read = _last_key_rows(Table, b, stt, cols, S2, skb, sks, PAGED, PAGE)
        k = tl.load(K + k_head + k_rows[:, None] + d[None, :], mask=read[:, None] & d_ok, other=0.0)
        kc, u, kbar = _centre_block(k, cols < S2, tl.minimum(S2 - blk * BLOCK_N, BLOCK_N))
        r = tl.arange(0, 16)[:, None]
        cl = tl.dot(q, tl.trans(tl.where(r == 0, u[None, :], tl.where(r == 1, kbar[None, :], 0.0)).to(tl.float16)))
        r = tl.arange(0, 16)[None, :]
        c = tl.sum(tl.where(r == 0, cl, 0.0), axis=1)
        cbar = tl.sum(tl.where(r == 1, cl, 0.0), axis=1)
    else:
        kc = tl.load(KP + kp_base + cols[:, None] * D + d[None, :], mask=d_ok, other=0.0)
        c = tl.load(fr + (2 * blk) * BLOCK_M)
        cbar = tl.load(fr + (2 * blk + 1) * BLOCK_M)
    return tl.dot(q, tl.trans(kc)), c, cbar - c


@triton.jit
def _rs_excess(acc, lv):
    """Block 1's row max above its mean: its masked Q̂·K'ᵀ ``acc`` with ψ at its mean lv, which starts the
    running excess of :func:`_rs_frame`."""
    psi0 = _row_shift(lv)
    m_pre, _ = _fp16_max(tl.max(acc, axis=1) - psi0)
    return (m_pre + psi0) - lv


@triton.jit
def _rs_frame(acc, c, lv, first, m, e_run, e_lag, c1, psi1, reshift_at, relevance):
    """``pasa_rs``'s frame of a block from its masked FP32 Q̂·K'ᵀ ``acc`` and frame terms C, lv: the shift ψ
    at lv plus the lag-2 running excess, S' = FP16(Q̂·K'ᵀ − ψ) (FP32 for the safety net's rows), the reshift
    of rows whose block max lands far from ψ, and δ = (C − C_1) + (ψ − ψ_1), which moves the block into
    the row state's frame (block 1's). ``first``: this is block 1, the first block the program visits,
    whose C and ψ are C_1 and ψ_1. ``e_run`` is the running excess this block's ψ takes, ``e_lag`` the
    previous block's excess, which enters it for the block after this one. Returns (S', its row max, δ,
    and the next e_run, e_lag, C_1, ψ_1).

    Every row max is taken once, of the product: FP32 rounding is monotonic, so the max of Q̂·K'ᵀ − ψ is
    the product's max minus ψ, rounded, for any ψ; ψ is subtracted from the scores once, when it is
    final."""
    m_acc = tl.max(acc, axis=1)
    # ψ_j = lv_j + the largest excess (block max above block mean) of blocks ≤ j − 2: the lag the
    # cube/vector pipeline of the NPU needs, kept so that both round alike. A row with no unmasked key
    # yet has no excess and uses ψ_j = lv_j. (The lag is carried as e_run and one block's excess: a
    # second lag variable copied from the first stops Triton 3.6 from pipelining the loop's loads.)
    psi = _row_shift(lv + tl.where(e_run == float("-inf"), 0.0, e_run))
    m_blk, redo = _fp16_max(m_acc - psi)
    c1 = tl.where(first, c, c1)
    psi1 = tl.where(first, psi, psi1)
    # The reshift: S' is rounded with an error ≈ ulp16(|S'|), and the keys that carry the weight sit
    # near the row max. A row whose block max lands further than ``reshift_at`` from 0, in a block that
    # can matter (its max at most ``relevance`` below the running maximum, or above it), moves ψ by that
    # max, and its S' is the product minus the new ψ (on the cube, the product computed again).
    far = (tl.abs(m_blk) > reshift_at) & (redo == 0) & (m_blk + ((c - c1) + (psi - psi1)) > m - relevance)
    psi = tl.where(far, _row_shift(psi + m_blk), psi)
    m_blk, redo = _fp16_max(m_acc - psi)
    # Q̂·K'ᵀ − ψ: the FP32 accumulator's product, then ψ subtracted in FP32 (on the cube, an extra
    # column puts ψ in the accumulator); the one rounding that follows is to FP16, but for the safety
    # net's rows.
    s = acc - psi[:, None]
    s = tl.where(redo[:, None], s, s.to(tl.float16).to(tl.float32))
    return s, m_blk, (c - c1) + (psi - psi1), tl.maximum(e_run, e_lag), (m_blk + psi) - lv, c1, psi1


@triton.jit
def _frame(s, frame, low, known, peak, l, o, row_ok, sm_scale, exp_scale, frame_drop):
    """``fp32_frame``'s frame stage of a block from its masked FP32 scores S = Q·Kᵀ (unscaled): which rows move
    their frame G and to where, the close of the running sums of the rows that move, and P against the frames.
    ``low`` counts each row's consecutive blocks with a key whose scaled maximum lies more than FRAME_DOWN below G,
    ``known`` marks the rows that have a frame (a key seen), ``peak`` holds each row's maximum so far (units of
    Q·K), ``frame_drop`` is FRAME_DROP_LIMIT in units of Q·K: a move down stops that far below the peak;
    l is the (BLOCK_M, ONES) accumulator of P·1 whose columns all hold the row sum. Padding rows (not ``row_ok``)
    never move. Returns (P in FP16, G, low, known, peak, l, O)."""
    m_blk = tl.max(s, axis=1)
    has = m_blk != float("-inf")
    peak = tl.maximum(peak, m_blk)
    top = (m_blk - frame) * sm_scale  # the block's max of scale·(S − G), as rounded there
    low = tl.where(has & known & (top < -FRAME_DOWN), low + 1, tl.where(has, 0, low))
    # A row already at its floor below the peak stays, and keeps counting its low blocks.
    target = tl.where(known, tl.maximum(m_blk, peak - frame_drop), m_blk)
    move = row_ok & has & (~known | (top > FRAME_UP) | ((low >= FRAME_DOWN_BLOCKS) & (target < frame)))
    # The close, row by row: a moving row's running sums move into its new frame, a = exp(scale·(G − G_new)) (0 for
    # a row that had none, whose sums are empty); the other rows take a = 1, which leaves their sums exact, so this
    # is the golden model's tile-wide close without a reduction over the tile's rows (a barrier every block).
    moved = tl.where(move, target, frame)
    a = tl.where(move, tl.where(known, tl.exp((frame - moved) * sm_scale), 0.0), 1.0)
    l = l * a[:, None]
    o = o * a[:, None]
    frame = moved
    low = tl.where(move, 0, low)
    known = known | move
    p = tl.exp2((s - frame[:, None]) * exp_scale)
    return p.to(tl.float16), frame, low, known, peak, l, o


@triton.jit
def _merge(m, l, o, s, m_blk, d_prev, d_cur, v, exp_scale, STATE16: tl.constexpr):
    """Merge a block into the row state: the running max m moved by ``d_prev`` and the block's max
    by ``d_cur`` into one frame; P = 2^(``exp_scale``·(S + d_cur − m_new)) relative to the merged maximum
    (FlashAttention-2's form, one P·V accumulated into O), l and O rescaled by α = exp(m + d_prev − m_new).
    Returns (m_new, l, O)."""
    m_new = tl.maximum(_round(m + d_prev, STATE16), _round(m_blk + d_cur, STATE16))
    seen = m_new != float("-inf")
    m_safe = tl.where(seen, m_new, 0.0)
    # Guarded −∞ start: no key seen yet gives alpha = 0 instead of exp(−∞ + ∞).
    alpha = tl.where(seen, _exp(_round(_round(m - m_safe, STATE16) + d_prev, STATE16), exp_scale, STATE16), 0.0)
    # The subtraction before the multiply: the maximum's own score gets exactly 2^0 at any scale (one FMA,
    # S·c − m·c, would round m·c and miss it by up to half its ulp: 2^k at large scales and scores).
    p = _exp(_round(s - _round(m_safe - d_cur, STATE16)[:, None], STATE16), exp_scale, STATE16)
    l = _round(_round(alpha * l, STATE16) + _round(tl.sum(p, axis=1), STATE16), STATE16)
    if STATE16:
        pv = tl.dot(p.to(tl.float16), v).to(tl.float16).to(tl.float32)
        o = _round(_round(alpha[:, None] * o, STATE16) + pv, STATE16)
    else:
        o = tl.dot(p.to(tl.float16), v, o * alpha[:, None])
    return m_new, l, o


@triton.jit
def _join_sink(top, l, o, sink, STATE16: tl.constexpr):
    """A learnable sink joins the row state once, after the last block (:func:`pasa_npu.blockwise._join_sink`):
    ``top`` the rows' true-scale maximum (−∞ for a row with no key), l and O relative to it. Returns the new
    maximum, l and O."""
    new_top = tl.maximum(top, sink)
    none = top == float("-inf")
    a = _round(tl.where(none, 0.0, tl.exp(tl.where(none, 0.0, top - new_top))), STATE16)
    l = _round(_round(a * l, STATE16) + _round(tl.exp(sink - new_top), STATE16), STATE16)
    return new_top, l, _round(o * a[:, None], STATE16)


# --------------------------------------------------------------------------------------------------
# The kernel's prologue (a program's batch, rows and KV blocks) and epilogue (the normalisation, the
# stores, and a split's partials merged by the last split of a tile).
# --------------------------------------------------------------------------------------------------

@triton.jit
def _batch_rows(KVInfo, b, dims, band, per_split, sqb, sqs, D: tl.constexpr, BLOCK_N: tl.constexpr,
                PAGED: tl.constexpr, LAYOUT: tl.constexpr):
    """Batch ``b``'s rows and where its results go. Dense: the call's S1, S2 and band for every batch. PAGED:
    KVInfo (B, KV_INFO) holds each batch's query length, key length and band (lo, hi), which replace them (a
    bottom-right band moves with the lengths), so that a batch's rows are the G·S1 rows of its own length,
    tiled as a dense call on that batch alone would tile them, and its splits divide its own KV blocks.
    LAYOUT "TND" (with PAGED): the query is (T, N, D), batch b's rows starting at row KVInfo[b, 4] (its
    cumulative offset; ``sqb`` unused), and the output (T, N, D) and lse (T, N) are written there; a split's
    partials keep their (B, N, S1) rows, S1 the call's (the longest batch's rows). Returns the batch's
    (rows, S1, S2, band lo, band hi, KV blocks per split), the offsets of its first query, output and lse
    rows, the output's head and row strides and the lse's, and the partials' rows, first row and head stride."""
    NKV, S1, S2, G = dims
    band_lo, band_hi = band
    n_rows = G * S1
    n_heads = NKV * G
    slb, slh = n_heads * S1, S1
    sob, soh, sos = n_heads * S1 * D, S1 * D, D
    if LAYOUT != "BNSD":
        sob, soh, sos = S1 * n_heads * D, D, n_heads * D
    part_rows = (tl.num_programs(1) // NKV) * n_heads * S1
    part_row0 = b * n_heads * S1
    part_sh = S1
    q_row0 = b * sqb
    o_row0 = b * sob
    l_row0 = b * slb
    slq = 1  # the lse's stride between query positions
    if PAGED:
        q_len = tl.load(KVInfo + KV_INFO * b)
        S2 = tl.load(KVInfo + KV_INFO * b + 1)
        band_lo = tl.load(KVInfo + KV_INFO * b + 2)
        band_hi = tl.load(KVInfo + KV_INFO * b + 3)
        per_split = tl.cdiv(tl.cdiv(S2, BLOCK_N), tl.num_programs(2))
        n_rows = G * q_len
        S1 = tl.maximum(q_len, 1)  # divides row indices; a batch with no query has no row
        if LAYOUT == "TND":
            q_start = tl.load(KVInfo + KV_INFO * b + 4)
            q_row0 = q_start * sqs
            o_row0 = q_start * sos
            l_row0 = q_start * n_heads
            slh = 1
            slq = n_heads
    return (n_rows, S1, S2, band_lo, band_hi, per_split, q_row0, o_row0, soh, sos, l_row0, slh, slq, part_rows,
            part_row0, part_sh)


@triton.jit
def _tile_blocks(pid_m, split, n_rows, S1, S2, band_lo, band_hi, per_split, BLOCK_M: tl.constexpr,
                 BLOCK_N: tl.constexpr, HAS_BAND: tl.constexpr, PAGED: tl.constexpr, SPLITS: tl.constexpr):
    """The KV blocks [lo, hi) the tile of rows ``pid_m`` visits (its split's share of them), and the first and
    last query position it holds (a tile that spans two heads holds every position). Returns (lo, hi, i_lo,
    i_hi)."""
    blk_lo = 0
    blk_hi = tl.cdiv(S2, BLOCK_N)
    r0 = pid_m * BLOCK_M
    r1 = tl.minimum(r0 + BLOCK_M, n_rows) - 1
    spans = (r0 // S1) != (r1 // S1)
    i_lo = tl.where(spans, 0, r0 % S1)
    i_hi = tl.where(spans, S1 - 1, r1 % S1)
    if HAS_BAND:
        j_lo = tl.maximum(i_lo + band_lo, 0)
        j_hi = tl.minimum(i_hi + band_hi, S2 - 1)
        blk_lo = j_lo // BLOCK_N
        blk_hi = tl.where(j_hi >= j_lo, j_hi // BLOCK_N + 1, blk_lo)
    if PAGED:
        # The grid is sized for the longest batch: a tile past this batch's rows visits no block.
        blk_hi = tl.where(r0 < n_rows, blk_hi, blk_lo)
    if SPLITS > 1:
        blk_lo = blk_lo + split * per_split
        blk_hi = tl.minimum(blk_hi, blk_lo + per_split)
    return blk_lo, blk_hi, i_lo, i_hi


@triton.jit
def _rs_start(q, q_mul, tile, blk_lo, blk_hi, keys, sel, Scratch, uk_base, fr_off, n_blocks, D: tl.constexpr,
              D_PAD: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, FUSED_SHIFT: tl.constexpr,
              PAGED: tl.constexpr, PAGE: tl.constexpr, HAS_MASK: tl.constexpr, HAS_BAND: tl.constexpr,
              EVEN_KV: tl.constexpr):
    """``pasa_rs``'s start: Q̂ = Q·q_mul (exact in FP16, a power of two, but where it becomes subnormal); the
    program's frame table, FP32 (B·NKV, the launch's query tiles, 2·blocks, BLOCK_M) at element ``fr_off`` of
    the scratch, the frame terms C, Q̂·K̄ of each row and block, written and read by the tile's own program
    (filled here from the pre-pass's (u, K̄) rows at ``uk_base``, unless FUSED_SHIFT); and block 1, the first
    block the program visits, a first time with ψ at its mean: how far its maximum lies above the mean starts
    the running excess. (A program that visits no block reads a valid one and uses nothing of it.) Returns
    (Q̂, the table's row pointers, the running excess, the lagged one, C_1, ψ_1)."""
    S2 = keys[9]
    q = (q.to(tl.float32) * q_mul).to(tl.float16)
    fr = (Scratch + fr_off).to(tl.pointer_type(tl.float32), bitcast=True)
    fr = fr + tl.program_id(1).to(tl.int64) * (tl.num_programs(0) * 2 * n_blocks * BLOCK_M) \
        + tile * (2 * n_blocks * BLOCK_M) + tl.arange(0, BLOCK_M)
    if not FUSED_SHIFT:
        _rs_frame_table(fr, q, Scratch, uk_base, blk_lo, blk_hi, D, D_PAD, BLOCK_M)
    first = tl.maximum(tl.minimum(blk_lo, tl.cdiv(S2, BLOCK_N) - 1), 0)
    acc, _, lv = _rs_scores(q, first, fr, keys, D, D_PAD, BLOCK_M, BLOCK_N, FUSED_SHIFT, PAGED, PAGE)
    e_run = _rs_excess(_masked(acc, first, sel, BLOCK_N, HAS_MASK, HAS_BAND, EVEN_KV), lv)
    e_lag = tl.full([BLOCK_M], float("-inf"), tl.float32)
    c1 = tl.zeros([BLOCK_M], tl.float32)
    return q, fr, e_run, e_lag, c1, c1


@triton.jit
def _finish(m, l, o, f, frame, c1, psi1, sm_scale, inva, Sink, head, row_ok, FAMILY: tl.constexpr,
            STATE16: tl.constexpr, HAS_SINK: tl.constexpr, SPLITS: tl.constexpr):
    """The epilogue: the normalised output and the true-scale lse of every row, from the row state in the
    allocation's frame (``f``: PASA's Welford mean; ``frame``: fp32_frame's G; ``c1``, ``psi1``: pasa_rs's
    block-1 frame). HAS_SINK (and one split): the rows' sink logits join the denominator once, here, in the
    true scale (with splits, in the merge of the splits). Returns (output, lse, no key), FP32."""
    if HAS_SINK and SPLITS == 1:
        # The sink joins once, in the true scale: the rows' maximum moved out of the allocation's frame.
        if FAMILY == "pasa_rs":
            top = sm_scale * ((m + c1) + psi1)
        elif FAMILY == "pasa":
            top = m + inva * f
        elif FAMILY == "frame":
            top = tl.where(l == 0.0, float("-inf"), sm_scale * frame)
        else:
            top = sm_scale * m
        sink = tl.load(Sink + head, mask=row_ok, other=0.0).to(tl.float32)
        top, l, o = _join_sink(top, l, o, sink, STATE16)
    empty = l == 0.0
    if STATE16:
        out = (o / tl.where(empty, 1.0, l)[:, None]).to(tl.float16).to(tl.float32)
    else:
        out = o / tl.where(empty, 1.0, l)[:, None]
    out = tl.where(empty[:, None], 0.0, out)
    lse = tl.log(tl.where(empty, 1.0, l))
    if HAS_SINK and SPLITS == 1:
        lse = top + lse
    elif FAMILY == "pasa_rs":
        # The true-scale log-sum-exp ρ·(m + C_1 + ψ_1) + ln l.
        lse = sm_scale * ((m + c1) + psi1) + lse
    elif FAMILY == "pasa":
        lse = (m + lse) + inva * f
    elif FAMILY == "frame":
        lse = sm_scale * frame + lse
    else:
        lse = sm_scale * m + lse
    return out, lse, empty


@triton.jit
def _store_rows(Out, Lse, o_at, l_at, head, pos, row_ok, out, lse, D: tl.constexpr, D_PAD: tl.constexpr,
                STORE_LSE: tl.constexpr):
    """The FP16 output and (STORE_LSE) the lse of rows (``head``, ``pos``) where ``row_ok``: the output at
    ``o_at`` = (first element, head stride, row stride), the lse at ``l_at`` likewise."""
    d = tl.arange(0, D_PAD)
    tl.store(Out + o_at[0] + head[:, None] * o_at[1] + pos[:, None] * o_at[2] + d[None, :], out.to(tl.float16),
             mask=row_ok[:, None] & (d[None, :] < D))
    if STORE_LSE:
        tl.store(Lse + l_at[0] + head * l_at[1] + pos * l_at[2], lse, mask=row_ok)


@triton.jit
def _store_split(Part, Arrived, Out, Lse, Sink, part_at, o_at, l_at, out, lse, empty, row_ok, head, pos, hkv, G,
                 S1, n_rows, pid_m, split, lse_none, D: tl.constexpr, D_PAD: tl.constexpr, BLOCK_M: tl.constexpr,
                 SPLITS: tl.constexpr, MERGE_ROWS: tl.constexpr, HAS_SINK: tl.constexpr, STORE_LSE: tl.constexpr):
    """A split of a split-KV call (decode): its partial normalised FP32 output (splits, B, N, S1, D) and true-scale
    lse (splits, B, N, S1) into Part (``part_at``: the partials' rows, the batch's first row, the head stride and
    the lse's first element), then an arrival at the tile's counter in Arrived (int32, one per (query tile,
    B·NKV), zero before the launch). The last of the tile's splits to arrive merges the partials into Out and Lse
    (:func:`_merge_splits`), MERGE_ROWS rows at a time (the rows a decode tile holds, rounded up to a power of
    two), and sets the counter back to zero: the merge needs no launch of its own, the counters no zeroing
    before the next call."""
    part_rows, part_row0, part_sh, lse_off = part_at
    d = tl.arange(0, D_PAD)
    part = part_row0 + head * part_sh + pos
    tl.store(Part + (split * part_rows + part)[:, None] * D + d[None, :], out, mask=row_ok[:, None] & (d[None, :] < D))
    tl.store(Part + lse_off + split * part_rows + part, tl.where(empty, float("-inf"), lse), mask=row_ok)
    # Every thread's partials are written before the program arrives (the barrier); the arrival releases them
    # to the program that arrives last, whose acquire orders its reads of them after every split's writes.
    tl.debug_barrier()
    arrived = Arrived + pid_m * tl.num_programs(1) + tl.program_id(1)
    if tl.atomic_add(arrived, 1, sem="acq_rel") == SPLITS - 1:
        tl.store(arrived, 0)
        # The tile's rows that exist (a decode tile's G·S1 rows, often a few of its BLOCK_M), MERGE_ROWS at a time.
        for r0 in range(pid_m * BLOCK_M, tl.minimum(pid_m * BLOCK_M + BLOCK_M, n_rows), MERGE_ROWS):
            mr = r0 + tl.arange(0, MERGE_ROWS)
            mr_ok = mr < n_rows
            m_head = hkv * G + mr // S1
            m_pos = mr % S1
            if HAS_SINK:
                sink = tl.load(Sink + m_head, mask=mr_ok, other=0.0).to(tl.float32)
            else:
                sink = 0.0
            m_out, m_lse = _merge_splits(Part, Part, lse_off, part_row0 + m_head * part_sh + m_pos, mr_ok,
                                         part_rows, sink, lse_none, SPLITS, D, D_PAD, HAS_SINK)
            _store_rows(Out, Lse, o_at, l_at, m_head, m_pos, mr_ok, m_out, m_lse, D, D_PAD, STORE_LSE)


@triton.jit
def attention_kernel(
    Q, K, V, Scratch, Mask, Out, Lse, Part, Arrived, Table, KVInfo, Sink,
    q_str, k_str, v_str, mask_str, stt, dims, band, scratch_at, tiles, terms,
    D: tl.constexpr, D_PAD: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, ONES: tl.constexpr,
    FAMILY: tl.constexpr, STATE16: tl.constexpr, FUSED_SHIFT: tl.constexpr, HAS_MASK: tl.constexpr,
    HAS_BAND: tl.constexpr, EVEN_KV: tl.constexpr, PAGE: tl.constexpr, LAYOUT: tl.constexpr,
    HAS_SINK: tl.constexpr, STORE_LSE: tl.constexpr, SPLITS: tl.constexpr, MERGE_ROWS: tl.constexpr,
):
    """Grid (query tiles from ``tiles[0]`` on, B·NKV, splits); ``tiles`` = (first query tile, KV blocks per
    split). Out: the final FP16 output, contiguous (B, N, S1, D) for LAYOUT "BNSD", (B, S1, N, D) for "BSND"
    (FIA's BSH and BSND), (T, N, D) for "TND" (:func:`_batch_rows`); Lse the FP32 lse (if STORE_LSE). FAMILY:
    "fa" (``fp32``), "frame" (``fp32_frame``), "pasa" (``pasa``, ``pasa_fp32``; STATE16: ``pasa``'s FP16 row
    state) or "pasa_rs". ``q_str``, ``k_str``, ``v_str``: the (batch, head, row) strides of Q, K and V;
    ``mask_str`` the user mask's (B, N, S1, S2) broadcast strides; ``dims`` = (NKV, S1, S2, G); ``band`` = (lo,
    hi). Scratch: PASA's K' or ``pasa_rs``'s centred K' from a pre-pass (:func:`_key_tables`), its (u, K̄) at
    element ``scratch_at[0]`` and frame table at ``scratch_at[1]`` (:func:`_rs_start`); Part: split partials,
    their lse at ``scratch_at[2]`` (:func:`_store_split`). ``terms``: ``sm_scale``, the softmax's factor on the
    scores the loop holds (the scale for FlashAttention's unscaled Q·Kᵀ, ρ = scale/q_mul for ``pasa_rs``, unused
    by PASA, whose M carries it); PASA's (I, a, b); ``pasa_rs``'s q_mul and reshift thresholds in units of Q̂·K
    (:func:`pasa_npu.blockwise.row_shift_constants`); fp32_frame's FRAME_DROP_LIMIT in units of Q·K; the lse
    of a row with no key. PAGE > 0: K and V are caches of blocks of PAGE rows read through Table (B,
    max_blocks) int32 (batch stride ``stt``; ``k_str``/``v_str`` the caches' block, head and row strides, so
    either cache layout is a choice of strides), each batch's lengths from KVInfo; the user mask is indexed by
    query and key position. HAS_SINK: Sink (N,) the heads' sink logits (:func:`_finish`). EVEN_KV (dense, S2 a
    multiple of BLOCK_N, D = D_PAD): K and V are read without a mask, and without a band or mask the scores
    take none."""
    SHIFTED: tl.constexpr = FAMILY == "pasa"
    ROW_SHIFT: tl.constexpr = FAMILY == "pasa_rs"
    FRAMED: tl.constexpr = FAMILY == "frame"
    PAGED: tl.constexpr = PAGE > 0
    sqb, sqh, sqs = q_str
    svb, svh, svs = v_str
    sm_scale, inva, shift_a, shift_b, q_mul, reshift_at, relevance, frame_drop, lse_none = terms
    NKV, G = dims[0], dims[3]
    # Longest rows first: under a causal band the last tiles see the most KV blocks.
    tile = tl.num_programs(0) - 1 - tl.program_id(0)
    pid_m = tiles[0] + tile
    b = tl.program_id(1) // NKV
    hkv = tl.program_id(1) % NKV
    n_rows, S1, S2, band_lo, band_hi, per_split, q_row0, o_row0, soh, sos, l_row0, slh, slq, part_rows, part_row0, \
        part_sh = _batch_rows(KVInfo, b, dims, band, tiles[1], sqb, sqs, D, BLOCK_N, PAGED, LAYOUT)
    # Rows of this tile: flattened (group member g, query position i) of KV head hkv.
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    row_ok = rows < n_rows
    pos = rows % S1
    head = hkv * G + rows // S1
    d = tl.arange(0, D_PAD)
    q = tl.load(Q + q_row0 + head[:, None] * sqh + pos[:, None] * sqs + d[None, :],
                mask=row_ok[:, None] & (d[None, :] < D), other=0.0)
    blk_lo, blk_hi, i_lo, i_hi = _tile_blocks(pid_m, tl.program_id(2), n_rows, S1, S2, band_lo, band_hi, per_split,
                                              BLOCK_M, BLOCK_N, HAS_BAND, PAGED, SPLITS)
    # What the stages read: the keys (:func:`_fa_scores`) and the masks (:func:`_masked`).
    n_blocks = tl.cdiv(dims[2], BLOCK_N)  # the pre-pass tables' blocks: the call's (the longest batch's)
    spb, sph, sub, suh = _key_tables(n_blocks, NKV, D, BLOCK_N)
    keys = (K, hkv * k_str[1], Scratch, b * spb + hkv * sph, b, Table, stt, k_str[0], k_str[2], S2)
    sel = (pos, head, row_ok, i_lo, i_hi, band_lo, band_hi, S2, Mask, b * mask_str[0], mask_str[1], mask_str[2],
           mask_str[3])

    # The row state, and each allocation's own (the frames of reference it does not use stay zeros).
    m = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l = tl.zeros([BLOCK_M], tl.float32)
    o = tl.zeros([BLOCK_M, D_PAD], tl.float32)
    zero = tl.zeros([BLOCK_M], tl.float32)
    f, frame, c1, psi1 = zero, zero, zero, zero
    exp_scale = sm_scale * LOG2E
    if ROW_SHIFT:
        q, fr, e_run, e_lag, c1, psi1 = _rs_start(q, q_mul, tile, blk_lo, blk_hi, keys, sel, Scratch,
                                                 scratch_at[0] + b * sub + hkv * suh, scratch_at[1], n_blocks, D,
                                                 D_PAD, BLOCK_M, BLOCK_N, FUSED_SHIFT, PAGED, PAGE, HAS_MASK,
                                                 HAS_BAND, EVEN_KV)
    elif SHIFTED:
        exp_scale = LOG2E
    elif FRAMED:
        low = tl.zeros([BLOCK_M], tl.int32)
        known = frame != 0.0
        peak = tl.full([BLOCK_M], float("-inf"), tl.float32)
        # l on the matrix unit: P·1 beside P·V, Σ P from the same FP16 P as O in each of ONES columns.
        l_acc = tl.zeros([BLOCK_M, ONES], tl.float32)
        ones = tl.full([BLOCK_N, ONES], 1.0, tl.float16)

    for blk in range(blk_lo, blk_hi):
        if ROW_SHIFT:
            s, c, lv = _rs_scores(q, blk, fr, keys, D, D_PAD, BLOCK_M, BLOCK_N, FUSED_SHIFT, PAGED, PAGE)
        elif SHIFTED:
            s, mean = _pasa_scores(q, blk, keys, shift_a, shift_b, D, D_PAD, BLOCK_N, STATE16, FUSED_SHIFT, PAGED, PAGE)
        else:
            s = _fa_scores(q, blk, keys, D, D_PAD, BLOCK_N, PAGED, PAGE, EVEN_KV)
        s = _masked(s, blk, sel, BLOCK_N, HAS_MASK, HAS_BAND, EVEN_KV)
        if ROW_SHIFT:
            s, m_blk, d_cur, e_run, e_lag, c1, psi1 = _rs_frame(s, c, lv, blk == blk_lo, m, e_run, e_lag, c1, psi1,
                                                                reshift_at, relevance)
            d_prev = 0.0
        elif SHIFTED:
            m_blk, d_prev, d_cur, f = _pasa_frame(s, mean, f, (blk - blk_lo + 1).to(tl.float32), inva, STATE16)
        elif FRAMED:
            p, frame, low, known, peak, l_acc, o = _frame(s, frame, low, known, peak, l_acc, o, row_ok, sm_scale,
                                                          exp_scale, frame_drop)
        else:
            m_blk = tl.max(s, axis=1)
            d_prev, d_cur = 0.0, 0.0
        v = _rows(V, hkv * svh, Table, b, stt, blk * BLOCK_N + tl.arange(0, BLOCK_N), S2, svb, svs, D, D_PAD,
                  PAGED, PAGE, EVEN_KV)
        if FRAMED:
            # l and O from the same FP16 P, summed across blocks in the frames.
            l_acc = tl.dot(p, ones, l_acc)
            o = tl.dot(p, v, o)
        else:
            m, l, o = _merge(m, l, o, s, m_blk, d_prev, d_cur, v, exp_scale, STATE16)

    if FRAMED:
        l = tl.sum(tl.where(tl.arange(0, ONES)[None, :] == 0, l_acc, 0.0), axis=1)
    out, lse, empty = _finish(m, l, o, f, frame, c1, psi1, sm_scale, inva, Sink, head, row_ok, FAMILY, STATE16,
                              HAS_SINK, SPLITS)
    o_at, l_at = (o_row0, soh, sos), (l_row0, slh, slq)
    if SPLITS > 1:
        _store_split(Part, Arrived, Out, Lse, Sink, (part_rows, part_row0, part_sh, scratch_at[2]), o_at, l_at, out,
                     lse, empty, row_ok, head, pos, hkv, G, S1, n_rows, pid_m, tl.program_id(2), lse_none, D, D_PAD,
                     BLOCK_M, SPLITS, MERGE_ROWS, HAS_SINK, STORE_LSE)
    else:
        _store_rows(Out, Lse, o_at, l_at, head, pos, row_ok, out, tl.where(empty, lse_none, lse), D, D_PAD, STORE_LSE)


@triton.jit
def _merge_splits(PartO, PartLse, lse_off, rows, row_ok, n_rows, sink, lse_none, SPLITS: tl.constexpr,
                  D: tl.constexpr, D_PAD: tl.constexpr, HAS_SINK: tl.constexpr):
    """Rows ``rows`` of ``SPLITS`` split-KV partials merged: lse = log Σ exp(lse_s), out = Σ exp(lse_s − lse)·out_s
    (:func:`pasa_npu.merge.merge_partials`). Partials are (SPLITS, n_rows, D) normalised FP32 outputs and
    (SPLITS, n_rows) true-scale lse (−∞: no key), the lse from element ``lse_off`` of PartLse, read past the L1
    cache (other programs wrote them). HAS_SINK: the rows' sink logits ``sink`` join as one more partial of output 0.
    A row that is padding (lse +∞, FIA's padded query row) in any partial stays padding (output 0, lse +∞); a row
    with no key gets output 0 and lse ``lse_none``. One pass over the splits, online (each split rescales the sums
    to the running maximum), UNROLL splits unrolled so that their loads, which no arithmetic waits on, are in flight
    together: as many as 64 FP32 registers of each of 4 warps' threads hold. Returns (out, lse), FP32."""
    UNROLL: tl.constexpr = max(1, min(SPLITS, 8192 // (rows.shape[0] * D_PAD)))
    d = tl.arange(0, D_PAD)
    m = tl.full(rows.shape, float("-inf"), tl.float32)
    tot = tl.zeros(rows.shape, tl.float32)
    acc = tl.zeros([rows.shape[0], D_PAD], tl.float32)
    padded = rows < 0
    for s0 in range(0, SPLITS, UNROLL):
        for i in tl.static_range(UNROLL):
            ok = row_ok & (s0 + i < SPLITS)
            lse_s = tl.load(PartLse + lse_off + (s0 + i) * n_rows + rows, mask=ok, other=float("-inf"),
                            cache_modifier=".cg")
            po = tl.load(PartO + ((s0 + i) * n_rows + rows[:, None]) * D + d[None, :],
                         mask=ok[:, None] & (d[None, :] < D), other=0.0, cache_modifier=".cg")
            padded = padded | (lse_s == float("inf"))
            m, tot, acc = _merge_one(m, tot, acc, tl.where(lse_s == float("inf"), float("-inf"), lse_s), po)
    if HAS_SINK:
        m, tot, acc = _merge_one(m, tot, acc, sink, 0.0)
    any_key = m != float("-inf")
    out = tl.where(any_key[:, None] & ~padded[:, None], acc / tl.where(any_key, tot, 1.0)[:, None], 0.0)
    lse = tl.where(any_key, m + tl.log(tl.where(any_key, tot, 1.0)), lse_none)
    return out, tl.where(padded, float("inf"), lse)


@triton.jit
def _merge_one(m, tot, acc, lse_s, po):
    """One partial (lse ``lse_s``, normalised output ``po``) into a merge's running maximum m, Σ exp(lse − m) and
    Σ exp(lse − m)·out; a −∞ partial adds nothing. Returns (m, tot, acc)."""
    m_new = tl.maximum(m, lse_s)
    top = tl.where(m_new == float("-inf"), 0.0, m_new)
    a = tl.exp(m - top)
    w = tl.exp(lse_s - top)
    return m_new, tot * a + w, acc * a[:, None] + w[:, None] * po


@triton.jit
def combine_kernel(PartO, PartLse, Out, Lse, n_rows, lse_none,
                   SPLITS: tl.constexpr, D: tl.constexpr, D_PAD: tl.constexpr, BLOCK_R: tl.constexpr):
    """Split-KV partials merged (:func:`_merge_splits`), ``BLOCK_R`` rows per program: (SPLITS, rows, D) FP32
    outputs and (SPLITS, rows) lse in, (rows, D) FP16 outputs and (rows,) lse out (the merge of partials computed
    apart, :func:`pasa_npu.merge.merge_partials`; the attention kernel merges its own splits)."""
    rows = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
    row_ok = rows < n_rows
    d = tl.arange(0, D_PAD)
    out, lse = _merge_splits(PartO, PartLse, 0, rows, row_ok, n_rows, 0.0, lse_none, SPLITS, D, D_PAD, False)
    tl.store(Out + rows[:, None] * D + d[None, :], out.to(tl.float16), mask=row_ok[:, None] & (d[None, :] < D))
    tl.store(Lse + rows, lse, mask=row_ok)
