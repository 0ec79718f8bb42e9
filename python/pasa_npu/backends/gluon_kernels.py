"""A warp-specialised Hopper (sm_90) kernel of ``fp32`` and ``fp32_frame`` in Gluon, for dense prefill.

The classic kernel (:mod:`.triton_kernels`) leaves the schedule to Triton, which on Hopper gives every warp
the same program: each loads its share of K and V, waits for it, multiplies and runs the softmax. This kernel
splits the work between warps as FlashAttention-3 does:

* a producer warp (:func:`_load`) brings the tile's two query halves and every KV block into shared memory
  with the bulk tensor copy engine (TMA), into rings of STAGES K and V buffers, each completing on an
  mbarrier of its own (``k_ready``, ``v_ready``), and refills a stage's K once both consumers released it
  (``k_free``, two arrivals, as soon as their Q·Kᵀ of it is done) and its V likewise (``v_free``, after
  P·V): K of block j + STAGES loads while block j's P·V still reads its V;
* two consumer warpgroups (:func:`_consume`, the default partition and a worker of 4 warps) each own 64 of
  the tile's BLOCK_M = 128 query rows: Q·Kᵀ, P·V and ``fp32_frame``'s P·1 on the tensor cores (wgmma, B
  from shared memory, P from registers), the softmax or the frame stage in between. With PINGPONG they take
  turns issuing their products (FlashAttention-3's ping-pong, ordered by two mbarriers, ``turn``, since
  Gluon has no named barrier): one warpgroup's softmax runs while the other's products occupy the tensor
  cores.

The arithmetic of each block is the classic kernel's, stage for stage: FP32 Q·Kᵀ unscaled, masks at −∞,
FlashAttention-2's merge (``fp32``) or the frame stage (``fp32_frame``: :func:`_frame`, the same decisions
bit for bit given the same S), P rounded to FP16 for P·V (and P·1), the same epilogue. A tile holds 128 rows
of one query head (the classic kernel flattens a KV head's group into its rows; rows are independent, so
the tiling changes no result but a band's skipped blocks, which are fully masked for every row either way).

What it covers (:func:`pasa_npu.backends.triton.gluon_block` is the rule): dense Q, K, V in (B, N, S, D)
or (B, S, N, D) memory order, or TND's packed sequences (VARLEN: one launch over a table of every sequence's
query tiles, :func:`pasa_npu.backends.triton.tile_table`), D 64, 128 or 256, no user mask, sink or paging, a full
query tile or more, any band (causal included), GQA. The rest stays on the classic kernel.
"""

from __future__ import annotations

from typing import NamedTuple

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (fence_async_shared, mbarrier, tma, warpgroup_mma,
                                                             warpgroup_mma_wait)
from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

from .. import blockwise
from .triton_launch import _FAST, _current_device, _hooked, _launcher, _raw_stream

#: The query rows of one consumer warpgroup (wgmma's M per warpgroup) and of a tile (two consumers).
WG_ROWS = gl.constexpr(64)
BLOCK_M = gl.constexpr(128)
#: Columns of ``fp32_frame``'s P·1 (every column holds Σ P): wgmma's narrowest N, half the tensor-core time
#: of 16 columns. The ones are a K-major operand (the transpose of an (ONES, BLOCK_N) tile, as K is): Triton
#: 3.6 gives wrong sums for an N-major one of 8 columns.
ONES = gl.constexpr(8)
_LOG2E = gl.constexpr(1.4426950408889634)
_FRAME_UP = gl.constexpr(blockwise.FRAME_UP)
_FRAME_DOWN = gl.constexpr(blockwise.FRAME_DOWN)
_FRAME_DOWN_BLOCKS = gl.constexpr(blockwise.FRAME_DOWN_BLOCKS)
#: The int32 fields of a row of a varlen call's tile table (:func:`pasa_npu.backends.triton.tile_table`; seven used,
#: the eighth pads a row to 32 bytes).
TILE_FIELDS = gl.constexpr(8)


@gluon.jit
def _load(q_desc, k_desc, v_desc, q_smem, k_smem, v_smem, q_bar, k_ready, v_ready, k_free, v_free, q_at, kv_at,
          blk_lo, blk_hi, BLOCK_N: gl.constexpr, STAGES: gl.constexpr):
    """The producer warp: the tile's two query halves on ``q_bar``, then K and V of blocks [blk_lo, blk_hi)
    into stage (j % STAGES) of their rings, each on its own barrier, K once both consumers released the stage's
    previous K (their Q·Kᵀ done), V once they released its previous V (their P·V done). ``q_at``, ``kv_at``: the
    (row, column) of the tile's first query row and of the head's first key in the 2-D views the descriptors
    describe."""
    mbarrier.expect(q_bar, 2 * q_desc.block_type.nbytes)
    tma.async_copy_global_to_shared(q_desc, [q_at[0], q_at[1]], q_bar, q_smem.index(0))
    tma.async_copy_global_to_shared(q_desc, [q_at[0] + WG_ROWS, q_at[1]], q_bar, q_smem.index(1))
    for blk in range(blk_lo, blk_hi):
        j = blk - blk_lo
        s = j % STAGES
        # The stage's previous block released by both consumers (parity 1 before the first: passes).
        free = ((j // STAGES) & 1) ^ 1
        row = kv_at[0] + blk * BLOCK_N
        mbarrier.wait(k_free.index(s), free)
        mbarrier.expect(k_ready.index(s), k_desc.block_type.nbytes)
        tma.async_copy_global_to_shared(k_desc, [row, kv_at[1]], k_ready.index(s), k_smem.index(s))
        mbarrier.wait(v_free.index(s), free)
        mbarrier.expect(v_ready.index(s), v_desc.block_type.nbytes)
        tma.async_copy_global_to_shared(v_desc, [row, kv_at[1]], v_ready.index(s), v_smem.index(s))


@gluon.jit
def _masked(s, blk, i_lo, band_lo, band_hi, S2, s_layout: gl.constexpr, BLOCK_N: gl.constexpr,
            HAS_BAND: gl.constexpr, EVEN_KV: gl.constexpr):
    """Scores of block ``blk`` of the rows from query position ``i_lo`` on with masked keys at −∞: the S2
    tail and the band (lo, hi) on j − i, only in a block that is not wholly kept (the classic kernel's rule)."""
    if EVEN_KV and not HAS_BAND:
        return s
    c0 = blk * BLOCK_N
    partial = c0 + BLOCK_N > S2
    if HAS_BAND:
        i_hi = i_lo + WG_ROWS - 1
        partial = partial | (c0 - i_hi < band_lo) | (c0 + BLOCK_N - 1 - i_lo > band_hi)
    if partial:
        cols = c0 + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, s_layout))
        keep = (cols < S2)[None, :]
        if HAS_BAND:
            pos = i_lo + gl.arange(0, WG_ROWS, layout=gl.SliceLayout(1, s_layout))
            rel = cols[None, :] - pos[:, None]
            keep = keep & (rel >= band_lo) & (rel <= band_hi)
        s = gl.where(keep, s, float("-inf"))
    return s


@gluon.jit
def _frame(s, frame, low, known, peak, sm_scale, exp_scale, frame_drop):
    """``fp32_frame``'s frame stage of a block (the classic kernel's ``_frame``, for rows that exist): which rows
    move their frame G and to where, and P against the frames. Returns (P in FP32, the factor a of each row's
    running sums, l and O, for the close of a moving row: exp(scale·(G − G_new)), 0 for a row that had no frame,
    1 for a row that stays; G, low, known, peak)."""
    m_blk = gl.max(s, axis=1)
    has = m_blk != float("-inf")
    peak = gl.maximum(peak, m_blk)
    top = (m_blk - frame) * sm_scale
    low = gl.where(has & known & (top < -_FRAME_DOWN), low + 1, gl.where(has, 0, low))
    target = gl.where(known, gl.maximum(m_blk, peak - frame_drop), m_blk)
    move = has & (~known | (top > _FRAME_UP) | ((low >= _FRAME_DOWN_BLOCKS) & (target < frame)))
    moved = gl.where(move, target, frame)
    a = gl.where(move, gl.where(known, gl.exp((frame - moved) * sm_scale), 0.0), 1.0)
    low = gl.where(move, 0, low)
    known = known | move
    p = gl.exp2((s - moved[:, None]) * exp_scale)
    return p, a, moved, low, known, peak


@gluon.jit
def _softmax(s, m, l, frame, low, known, peak, sm_scale, exp_scale, frame_drop, p_layout: gl.constexpr,
             FRAMED: gl.constexpr):
    """A block's masked FP32 scores into P (FP16, P·V's register operand) and the factor each row's running O
    (and fp32_frame's P·1) takes before P·V adds to it: FlashAttention-2's merge (the running max m and sum l; the
    classic kernel's ``_merge``) or the frame stage (:func:`_frame`). Returns (P, factor, m, l, G, low, known,
    peak)."""
    if FRAMED:
        p, a, frame, low, known, peak = _frame(s, frame, low, known, peak, sm_scale, exp_scale, frame_drop)
    else:
        m_new = gl.maximum(m, gl.max(s, axis=1))
        seen = m_new != float("-inf")
        m_safe = gl.where(seen, m_new, 0.0)
        # Guarded −∞ start: no key seen yet gives a = 0 instead of exp(−∞ + ∞).
        a = gl.where(seen, gl.exp2((m - m_safe) * exp_scale), 0.0)
        p = gl.exp2((s - m_safe[:, None]) * exp_scale)
        l = a * l + gl.sum(p, axis=1)
        m = m_new
    return gl.convert_layout(p.to(gl.float16), p_layout), a, m, l, frame, low, known, peak


@gluon.jit
def _scores(q, k_smem, k_ready, st, ph, zeros):
    """Q·Kᵀ of the block in stage ``st`` (its K awaited at parity ``ph``), issued to the tensor cores, not
    awaited."""
    mbarrier.wait(k_ready.index(st), ph)
    return warpgroup_mma(q, k_smem.index(st).permute((1, 0)), zeros, use_acc=False, is_async=True)


@gluon.jit
def _products(p, o, l1, v_smem, ones_smem, v_ready, st, ph, p1_layout: gl.constexpr, FRAMED: gl.constexpr):
    """P·V into O and (FRAMED) P·1 into l1, of the block in stage ``st`` (its V awaited at parity ``ph``), issued,
    not awaited."""
    mbarrier.wait(v_ready.index(st), ph)
    if FRAMED:
        l1 = warpgroup_mma(gl.convert_layout(p, p1_layout), ones_smem.permute((1, 0)), l1, is_async=True)
    o = warpgroup_mma(p, v_smem.index(st), o, is_async=True)
    return o, l1


@gluon.jit
def _consume(wg: gl.constexpr, q_smem, k_smem, v_smem, ones_smem, q_bar, k_ready, v_ready, k_free, v_free, turn, Out,
             Lse, o_at, l_at, pos0, blk_lo, blk_hi, S2, band_lo, band_hi, sm_scale, frame_drop,
             D: gl.constexpr, BLOCK_N: gl.constexpr, STAGES: gl.constexpr, FRAMED: gl.constexpr,
             HAS_BAND: gl.constexpr, EVEN_KV: gl.constexpr, STORE_LSE: gl.constexpr, PINGPONG: gl.constexpr):
    """One consumer warpgroup: rows [64·wg, 64·wg + 64) of the tile (query positions from ``pos0``) against
    every block the producer loads, then the normalised FP16 output at ``Out`` + ``o_at`` (the rows' first
    element, their stride, the rows that exist) and (STORE_LSE) the true-scale lse at ``Lse`` + ``l_at`` (the
    rows' first element, their stride, the lse of a row with no key).

    The schedule (FlashAttention-3's within a warpgroup): block j's Q·Kᵀ is issued before block j − 1's P·V, so
    the tensor cores run it while the warpgroup waits for it and then runs block j's softmax; P·V of block j − 1
    completes after, its O then takes block j's factor, and its V goes back to the producer (its K went back once
    its Q·Kᵀ was done). PINGPONG
    (FlashAttention-3's between warpgroups): a warpgroup issues block j's products on its turn (``turn[wg]``'s
    j-th phase) and passes the turn to the other (``turn[1 − wg]``), so the two alternate on the tensor cores;
    each takes one turn per block of the tile, with or without products."""
    s_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                       instr_shape=[16, BLOCK_N, 16])
    o_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, D, 16])
    l_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                       instr_shape=[16, ONES, 16])
    p_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=o_layout, k_width=2)
    p1_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=l_layout, k_width=2)
    row_layout: gl.constexpr = gl.SliceLayout(1, s_layout)
    o_rows: gl.constexpr = gl.SliceLayout(1, o_layout)
    l_rows: gl.constexpr = gl.SliceLayout(1, l_layout)
    exp_scale = sm_scale * _LOG2E
    i_lo = pos0 + wg * WG_ROWS

    m = gl.full([WG_ROWS], float("-inf"), gl.float32, row_layout)
    l = gl.zeros([WG_ROWS], gl.float32, row_layout)
    o = gl.zeros([WG_ROWS, D], gl.float32, o_layout)
    frame = gl.zeros([WG_ROWS], gl.float32, row_layout)
    low = gl.zeros([WG_ROWS], gl.int32, row_layout)
    known = frame != 0.0
    peak = gl.full([WG_ROWS], float("-inf"), gl.float32, row_layout)
    l1 = gl.zeros([WG_ROWS, ONES], gl.float32, l_layout)  # fp32_frame's P·1: every column holds Σ P
    zeros = gl.zeros([WG_ROWS, BLOCK_N], gl.float32, s_layout)
    q = q_smem.index(wg)
    n_turns = blk_hi - blk_lo
    if PINGPONG and wg == 1:
        mbarrier.arrive(turn.index(0))  # the first turn is the first warpgroup's
    if HAS_BAND:
        # The tile's last blocks may lie past the band of this warpgroup's rows (under a causal band, the first
        # warpgroup's rows end 64 positions earlier): it stops before them. Only trailing blocks are skipped, whose
        # stages the producer never refills, so they need no release.
        blk_hi = gl.minimum(blk_hi, gl.maximum((i_lo + WG_ROWS - 1 + band_hi) // BLOCK_N + 1, blk_lo))
    mbarrier.wait(q_bar, 0)
    if blk_hi > blk_lo:
        if PINGPONG:
            mbarrier.wait(turn.index(wg), 0)
        s = _scores(q, k_smem, k_ready, 0, 0, zeros)
        if PINGPONG:
            mbarrier.arrive(turn.index(1 - wg))
        s = warpgroup_mma_wait(0, deps=(s, ))
        mbarrier.arrive(k_free.index(0))
        s = _masked(s, blk_lo, i_lo, band_lo, band_hi, S2, s_layout, BLOCK_N, HAS_BAND, EVEN_KV)
        p, a, m, l, frame, low, known, peak = _softmax(s, m, l, frame, low, known, peak, sm_scale, exp_scale,
                                                       frame_drop, p_layout, FRAMED)
        for blk in range(blk_lo + 1, blk_hi):
            j = blk - blk_lo
            st = j % STAGES
            prev = (j - 1) % STAGES
            if PINGPONG:
                mbarrier.wait(turn.index(wg), j & 1)
            s = _scores(q, k_smem, k_ready, st, (j // STAGES) & 1, zeros)
            o, l1 = _products(p, o, l1, v_smem, ones_smem, v_ready, prev, ((j - 1) // STAGES) & 1, p1_layout, FRAMED)
            if PINGPONG:
                mbarrier.arrive(turn.index(1 - wg))
            if FRAMED:
                s = warpgroup_mma_wait(2, deps=(s, ))
            else:
                s = warpgroup_mma_wait(1, deps=(s, ))
            mbarrier.arrive(k_free.index(st))
            s = _masked(s, blk, i_lo, band_lo, band_hi, S2, s_layout, BLOCK_N, HAS_BAND, EVEN_KV)
            p, a, m, l, frame, low, known, peak = _softmax(s, m, l, frame, low, known, peak, sm_scale, exp_scale,
                                                           frame_drop, p_layout, FRAMED)
            o, l1 = warpgroup_mma_wait(0, deps=(o, l1))
            mbarrier.arrive(v_free.index(prev))
            o = o * gl.convert_layout(a, o_rows)[:, None]
            if FRAMED:
                l1 = l1 * gl.convert_layout(a, l_rows)[:, None]
        last = (blk_hi - blk_lo - 1)
        o, l1 = _products(p, o, l1, v_smem, ones_smem, v_ready, last % STAGES, (last // STAGES) & 1, p1_layout,
                          FRAMED)
        o, l1 = warpgroup_mma_wait(0, deps=(o, l1))
        mbarrier.arrive(v_free.index(last % STAGES))
    if PINGPONG:
        # The turns of the blocks past this warpgroup's band, passed on: the other's waits need every arrival.
        for j in range(gl.maximum(blk_hi - blk_lo, 0), n_turns):
            mbarrier.wait(turn.index(wg), j & 1)
            mbarrier.arrive(turn.index(1 - wg))

    if FRAMED:
        ones_col = gl.arange(0, ONES, layout=gl.SliceLayout(0, l_layout))[None, :] == 0
        l = gl.convert_layout(gl.sum(gl.where(ones_col, l1, 0.0), axis=1), row_layout)
        lse = sm_scale * frame
    else:
        lse = sm_scale * m
    empty = l == 0.0
    lse = lse + gl.log(gl.where(empty, 1.0, l))
    inv = gl.convert_layout(gl.where(empty, 0.0, 1.0 / gl.where(empty, 1.0, l)), o_rows)
    out = o * inv[:, None]
    r = i_lo + gl.arange(0, WG_ROWS, layout=o_rows)
    d = gl.arange(0, D, layout=gl.SliceLayout(0, o_layout))
    gl.store(Out + o_at[0] + r[:, None] * o_at[1] + d[None, :], out.to(gl.float16), mask=(r < o_at[2])[:, None])
    if STORE_LSE:
        rl = i_lo + gl.arange(0, WG_ROWS, layout=row_layout)
        gl.store(Lse + l_at[0] + rl * l_at[1], gl.where(empty, l_at[2], lse), mask=rl < o_at[2])


@gluon.jit
def attention_kernel(q_desc, k_desc, v_desc, Out, Lse, Tiles, q_map, kv_map, o_str, l_str, dims, band, sm_scale,
                     frame_drop, lse_none, D: gl.constexpr, BLOCK_N: gl.constexpr, STAGES: gl.constexpr,
                     FRAMED: gl.constexpr, HAS_BAND: gl.constexpr, EVEN_KV: gl.constexpr, STORE_LSE: gl.constexpr,
                     PINGPONG: gl.constexpr, VARLEN: gl.constexpr):
    """Grid (query tiles, B·N). ``q_desc``: Q as a 2-D tensor of D-wide rows (64-row boxes); ``k_desc``,
    ``v_desc``: K and V likewise (BLOCK_N-row boxes). ``q_map``, ``kv_map`` = (batch, head, column) row
    multipliers: query (b, h, i) is row b·q_map[0] + h·q_map[1] + i, column h·q_map[2], of its view (kv_map
    with the KV head): (B·N·S1, D) for (B, N, S, D) memory, (B·S1, N·D) for (B, S, N, D). Out: FP16,
    ``o_str`` = (batch, head, row) strides; Lse: FP32 (B, N, S1) with ``l_str`` its (batch, head, row) strides.
    ``dims`` = (N, S1, S2, G), ``band`` = (lo, hi) on j − i (HAS_BAND). ``frame_drop``: fp32_frame's
    FRAME_DROP_LIMIT in units of Q·K; ``lse_none`` the lse of a row with no key.

    VARLEN (TND's packed sequences): B = 1, the views' rows are every sequence's rows one after the other, and
    program (t, h) computes query tile t of the table ``Tiles`` for head h: int32 rows of TILE_FIELDS, each
    (the sequence's first query row, its query rows, its first key row, its keys, its band (lo, hi), the tile's
    first query position in the sequence), which take the place of ``dims``' S1 and S2, of ``band`` and of the
    batch's offsets. A tile's last KV block and its last query rows may run into the next sequence's rows: keys
    past the sequence's are masked as an S2 tail is, and query rows past it are not stored."""
    N, S1, S2, G = dims
    band_lo, band_hi = band
    b = gl.program_id(1) // N
    h = gl.program_id(1) % N
    hkv = h // G
    if VARLEN:
        at = Tiles + gl.program_id(0) * TILE_FIELDS
        q_row = gl.load(at)
        S1 = gl.load(at + 1)
        k_row = gl.load(at + 2)
        S2 = gl.load(at + 3)
        band_lo = gl.load(at + 4)
        band_hi = gl.load(at + 5)
        pos0 = gl.load(at + 6)
        # 64-bit: T·N·D may pass 2^31.
        o_base = q_row.to(gl.int64) * o_str[2]
        l_base = q_row.to(gl.int64) * l_str[2]
    else:
        # Longest rows first: under a causal band the last tiles see the most KV blocks.
        pos0 = (gl.num_programs(0) - 1 - gl.program_id(0)) * BLOCK_M
        q_row = 0
        k_row = 0
        o_base = b.to(gl.int64) * o_str[0]
        l_base = b.to(gl.int64) * l_str[0]
    blk_lo = 0
    blk_hi = gl.cdiv(S2, BLOCK_N)
    if HAS_BAND:
        j_lo = gl.maximum(pos0 + band_lo, 0)
        j_hi = gl.minimum(gl.minimum(pos0 + BLOCK_M, S1) - 1 + band_hi, S2 - 1)
        blk_lo = j_lo // BLOCK_N
        blk_hi = gl.where(j_hi >= j_lo, j_hi // BLOCK_N + 1, blk_lo)
    q_at = (b * q_map[0] + h * q_map[1] + q_row + pos0, h * q_map[2])
    kv_at = (b * kv_map[0] + hkv * kv_map[1] + k_row, hkv * kv_map[2])
    o_at = (o_base + h * o_str[1], o_str[2], S1)
    l_at = (l_base + h * l_str[1], l_str[2], lse_none)

    q_smem = gl.allocate_shared_memory(gl.float16, [2, WG_ROWS, D], q_desc.layout)
    k_smem = gl.allocate_shared_memory(gl.float16, [STAGES, BLOCK_N, D], k_desc.layout)
    v_smem = gl.allocate_shared_memory(gl.float16, [STAGES, BLOCK_N, D], v_desc.layout)
    # The ones as the transpose of an (ONES, BLOCK_N) tile, as K is read: a K-major B operand.
    ones_layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([ONES, BLOCK_N], gl.float16)
    ones_fill: gl.constexpr = gl.BlockedLayout([1, 8], [1, 32], [gl.num_warps(), 1], [1, 0])
    ones_smem = gl.allocate_shared_memory(gl.float16, [ONES, BLOCK_N], ones_layout,
                                          gl.full([ONES, BLOCK_N], 1.0, gl.float16, ones_fill))
    fence_async_shared()  # the ones, stored by the threads, are read by the tensor cores (the async proxy)
    q_bar = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    k_ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    v_ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    k_free = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    v_free = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    turn = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
    mbarrier.init(q_bar, count=1)
    mbarrier.init(turn.index(0), count=1)
    mbarrier.init(turn.index(1), count=1)
    for i in gl.static_range(STAGES):
        mbarrier.init(k_ready.index(i), count=1)
        mbarrier.init(v_ready.index(i), count=1)
        mbarrier.init(k_free.index(i), count=2)
        mbarrier.init(v_free.index(i), count=2)

    gl.warp_specialize([
        (_consume, (0, q_smem, k_smem, v_smem, ones_smem, q_bar, k_ready, v_ready, k_free, v_free, turn, Out, Lse, o_at,
                    l_at, pos0, blk_lo, blk_hi, S2, band_lo, band_hi, sm_scale, frame_drop, D, BLOCK_N, STAGES, FRAMED,
                    HAS_BAND, EVEN_KV, STORE_LSE, PINGPONG)),
        (_consume, (1, q_smem, k_smem, v_smem, ones_smem, q_bar, k_ready, v_ready, k_free, v_free, turn, Out, Lse, o_at,
                    l_at, pos0, blk_lo, blk_hi, S2, band_lo, band_hi, sm_scale, frame_drop, D, BLOCK_N, STAGES, FRAMED,
                    HAS_BAND, EVEN_KV, STORE_LSE, PINGPONG)),
        (_load, (q_desc, k_desc, v_desc, q_smem, k_smem, v_smem, q_bar, k_ready, v_ready, k_free, v_free, q_at, kv_at,
                 blk_lo, blk_hi, BLOCK_N, STAGES)),
    ], [4, 1], [232, 24])

    mbarrier.invalidate(q_bar)
    mbarrier.invalidate(turn.index(0))
    mbarrier.invalidate(turn.index(1))
    for i in gl.static_range(STAGES):
        mbarrier.invalidate(k_ready.index(i))
        mbarrier.invalidate(v_ready.index(i))
        mbarrier.invalidate(k_free.index(i))
        mbarrier.invalidate(v_free.index(i))


#: The shared memory a block may use, less what the kernel takes beside its tiles (its mbarriers and the compiler's
#: scratch for layout conversions, under 1 KiB).
_SMEM = 227 * 1024 - 1024


def _smem(d: int, block_n: int, stages: int) -> int:
    """Bytes of the kernel's FP16 tiles in shared memory: the query tile, ``stages`` K and V blocks, the ones."""
    return 2 * (BLOCK_M.value * d + 2 * stages * block_n * d + block_n * ONES.value)


def _view(t) -> tuple:
    """The 2-D view of D-wide rows the kernel reads a (B, N, S, D) tensor as: its shape, its strides, and its row map
    (row b·map[0] + h·map[1] + i, column h·map[2] holds (b, h, i)): (B·N·S, D) in (B, N, S, D) memory order,
    (B·S, N·D) in (B, S, N, D)."""
    b, n, s, d = t.shape
    if t.stride()[2] == d:
        return (b * n * s, d), (d, 1), (n * s, s, 0)
    return (b * s, n * d), (n * d, 1), (s, 0, d)


def _descriptor(t, rows: int):
    """A TMA descriptor of ``rows``-row boxes over :func:`_view`'s view of ``t``, and the view's row map."""
    shape, strides, at = _view(t)
    layout = gl.NVMMASharedLayout.get_default_for([rows, t.shape[3]], gl.float16)
    return TensorDescriptor(t, list(shape), list(strides), [rows, t.shape[3]], layout), at


class Attention:
    """The launch of :func:`attention_kernel` for one plan: everything fixed but the tensors, whose TMA descriptors
    each call makes. ``shape`` = (B, N, Nkv, S1, S2, D); ``band`` (lo, hi) or None; ``terms`` = (scale,
    fp32_frame's FRAME_DROP_LIMIT in units of Q·K, the lse of a row with no key); ``out_bsnd``: the output is
    (B, S1, N, D) in memory, else (B, N, S1, D); the lse (B, N, S1) FP32 when ``store_lse``. ``tiles``: a varlen
    (TND) launch of that many rows of a tile table (:func:`pasa_npu.backends.triton.tile_table`), ``shape`` then
    (1, N, Nkv, T, T_kv, D) (the views of the (T, N, D) query and (T_kv, Nkv, D) key and value), ``band`` (0, 0)
    where the sequences have bands (the table holds them), the output (T, N, D) and the lse (T, N).

    A call launches through Triton (which compiles the kernel or finds it in its cache) the first time the process
    meets its scalars, constexprs, device and output and lse pointers' residues modulo 16 (what Triton specialises
    on here, but for the descriptors' boxes, which the constexprs fix); later such calls, of this launch or another
    one alike, call the compiled kernel's launcher directly (:data:`_BOUND`), as
    :class:`pasa_npu.backends.triton_launch.Launch` does: Triton's launch binds every argument in Python, tens of µs
    of host time a call, longer than a 512-row prefill runs.
    """

    def __init__(self, shape, block_n: int, band, terms, *, framed: bool, store_lse: bool, out_bsnd: bool,
                 stages: int | None = None, tiles: int | None = None):
        b, n, nkv, s1, s2, d = shape
        self.block_n = block_n
        varlen = tiles is not None
        self.grid = (tiles if varlen else -(-s1 // BLOCK_M.value), b * n, 1)
        if varlen:
            # The table's rows hold the lengths, bands and offsets: the scalars, which key the launcher, hold none.
            scalars = ((0, d, n * d), (0, 1, n), (n, 0, 0, n // nkv), (0, 0))
        else:
            o_str = (s1 * n * d, d, n * d) if out_bsnd else (n * s1 * d, s1 * d, d)
            scalars = (o_str, (n * s1, s1, 1), (n, s1, s2, n // nkv), (0, 0) if band is None else band)
        self.scalars = (*scalars, *terms)
        # Three stages of K and V where they fit in shared memory beside the query tile and the ones, else two (at
        # D = 256). The ping-pong where it paid on the H200 (docs/benchmarks/gpu_gluon): D 128 and 256, not 64.
        self.constexprs = dict(D=d, BLOCK_N=block_n, STAGES=stages or (3 if _smem(d, block_n, 3) <= _SMEM else 2),
                               FRAMED=framed, HAS_BAND=band is not None, EVEN_KV=not varlen and s2 % block_n == 0,
                               STORE_LSE=store_lse, PINGPONG=d >= 128, VARLEN=varlen)
        # The launcher takes the constexprs too, after the other arguments, in the kernel's order.
        self._tail = tuple(self.constexprs[name] for name in attention_kernel.arg_names if name in self.constexprs)
        self._key = (tuple(self.constexprs.items()), self.scalars)

    def __call__(self, q, k, v, out, lse, tiles=None) -> None:
        """``tiles``: a varlen launch's tile table on the device, int32
        (:func:`pasa_npu.backends.triton.tile_table`)."""
        lse = q if lse is None else lse  # a pointer not read without STORE_LSE
        tiles = q if tiles is None else tiles  # nor the table without VARLEN
        ptrs = (out.data_ptr(), lse.data_ptr(), tiles.data_ptr())
        device = _current_device()
        key = (self._key, device, *(p % 16 for p in ptrs))
        bound = _BOUND.get(key)
        if bound is not None and not _hooked():
            # The launcher reads a descriptor's base pointer, shape, strides and padding only (the box and layout are
            # the compiled kernel's): those, without TensorDescriptor's checks.
            (q_shape, q_str, q_map), (k_shape, k_str, kv_map), (v_shape, v_str, _) = map(_view, (q, k, v))
            bound[0](*self.grid, _raw_stream(device), *bound[1], _Box(q, q_shape, q_str), _Box(k, k_shape, k_str),
                     _Box(v, v_shape, v_str), *ptrs, q_map, kv_map, *self.scalars, *self._tail)
            return
        q_desc, q_map = _descriptor(q, WG_ROWS.value)
        k_desc, kv_map = _descriptor(k, self.block_n)
        v_desc, _ = _descriptor(v, self.block_n)
        compiled = attention_kernel[self.grid](q_desc, k_desc, v_desc, out, lse, tiles, q_map, kv_map, *self.scalars,
                                               num_warps=4, **self.constexprs)
        if _FAST and hasattr(compiled, "packed_metadata"):
            try:
                launcher = _launcher(compiled)
            except AttributeError:  # a compiled kernel of another form than the releases checked: Triton's launch
                return
            if len(_BOUND) >= 4096:  # bounded: emptied when full
                _BOUND.clear()
            _BOUND[key] = launcher


class _Box(NamedTuple):
    """What the compiled kernel's launcher reads of a TMA descriptor (it encodes the tensor map from these)."""

    base: object
    shape: tuple
    strides: tuple
    padding: str = "zero"


#: (constexprs, scalars, device, output, lse and tile table pointers' residues modulo 16) -> (the compiled kernel's
#: launcher, its leading arguments), for :class:`Attention`.
_BOUND: dict[tuple, tuple] = {}
