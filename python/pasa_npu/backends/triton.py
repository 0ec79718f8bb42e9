"""The ``triton`` backend: framed FlashAttention, PASA, row-shifted PASA and FP32-state FlashAttention-2 as one
Triton kernel, for CUDA tensors.

Allocations: every one but :data:`NOT_COMPUTED`: ``fp32_frame`` (the default: FP32 scores, FP16 P against a
per-row frame, O and l summed in FP32 from the same P), ``pasa_rs`` (row-shifted PASA: exactly centred keys,
a per-row shift subtracted in the FP32 accumulator before the one FP16 rounding of S', FP32 state, the overflow
recompute in registers), ``pasa`` (FP16 S', FP16 row state and output), ``pasa_fp32`` (FP16 S' and P, FP32 row
state and output) and ``fp32`` (FlashAttention-2 with FP32 scores and state: the same kernel with no
shift, the baseline PASA's overhead is measured against). The kernels and how they round:
:mod:`pasa_npu.backends.triton_kernels`.

PASA's K' = M·K runs as a pre-pass over K (once per KV head and block, then read by every query tile
and every head of a GQA group) or fused into the attention loop (recomputed by every tile). By
default (``shift=None``) prefill uses the pre-pass and decode (one query tile per KV head, so K' would
be written and read back for a single use) the fused form: each measured faster there
(docs/benchmarks/gpu.md).

Masks: ``mask`` is a dense bool tensor (True = masked out) broadcastable to (B, N, S1, S2), read by
the kernel with broadcast strides; ``band = (lo, hi)`` keeps key j for query i only where
lo <= j − i <= hi (None for an open side). Causal and banded sparse modes come as a band and are
never materialised: the kernel skips KV blocks outside the band.

With ``TRITON_INTERPRET=1`` set before Triton is imported, the same kernels run on CPU tensors
(NumPy emulation, slow; the FP16 exp then uses an FP32 exp2 rounded to FP16): CI tests them so.
"""

from __future__ import annotations

import functools
import math
import os

import torch

from ..beta import default_beta, shift_entries
from ..blockwise import FRAME_DROP_LIMIT, row_shift_constants
from ..precision import Allocation, get_allocation
from ..problem import LSE_NO_KEY, LSE_PADDED_ROW, Job, Problem, band_rule
from . import run_jobs

#: KV block lengths the kernel accepts for the shifted allocations (M is block_kv × block_kv).
BLOCK_KV: tuple[int, ...] = (16, 32, 64, 128, 256)
SHIFT_MODES: tuple[str, ...] = ("prepass", "fused")
#: The most FP32 values pasa_rs's frame table holds for one launch (512 MiB): past it, the kernel is launched
#: over ranges of query tiles in turn, each with the table to itself.
_FRAME_LIMIT = 1 << 27

_INTERPRET = os.environ.get("TRITON_INTERPRET") == "1"
_SMEM_BYTES = 232448  # shared memory a block may use on the H100 (227 KB)
#: The most KV splits of a decode call: one program merges them all, and past 64 its reads cost more than the
#: splits gain (one KV head over 32k keys on an H100: 128 splits slower than 32 or 64; gpu_notes.md, item 20).
_MAX_SPLITS = 64
try:
    import triton

    from . import triton_kernels as _k
except ImportError:  # triton is optional: is_available() reports it
    triton = None
try:
    from . import gluon_kernels as _gk
except ImportError:  # no triton, or one without Gluon's Hopper API: the classic kernel everywhere
    _gk = None
from .triton_launch import Launch, _raw_stream, launch


# Triton's cdiv and next_power_of_2 are constexpr functions: callable on the host, at a few µs a call.
def _cdiv(x: int, y: int) -> int:
    return -(-x // y)


def _pow2(n: int) -> int:
    """The smallest power of two >= n (1 for n <= 1)."""
    return 1 << max(n - 1, 0).bit_length()


#: The allocations the kernel does not compute: the unshifted FP16-score emulations, which the reference backend
#: runs. Every other allocation is computed, by the kernel's FAMILY :func:`_family` names (the kernel computes FP32
#: scores, FlashAttention-2 and framed FlashAttention, or PASA's shifted FP16 scores).
NOT_COMPUTED: frozenset[str] = frozenset({"fp16", "fp16_fp32"})


def computes(alloc: Allocation) -> bool:
    """The kernel computes ``alloc`` (it is not one of :data:`NOT_COMPUTED`)."""
    return alloc.name not in NOT_COMPUTED


def _blocked(alloc: Allocation) -> bool:
    """The KV block is part of the allocation's definition: PASA's M, pasa_rs's centring, fp32_frame's
    decisions per block."""
    return alloc.shifted or alloc.row_shifted or alloc.framed


def is_available(device: torch.device | None = None) -> bool:
    """Triton is installed and can run on ``device`` (any device when None): CUDA tensors with a
    GPU present, or CPU tensors under Triton's interpreter."""
    if triton is None:
        return False
    if device is not None and device.type == "cuda":
        return True  # a CUDA tensor exists, so does a GPU (asking the runtime costs every call µs)
    return (device is None and torch.cuda.is_available()) or (_INTERPRET and (device is None or device.type == "cpu"))


def _config(d_pad: int, blocked: bool, block_kv: int, rows: int, has_mask: bool = False,
            row_shifted: bool = False, framed: bool = False) -> tuple[int, int, int, int, int]:
    """(BLOCK_M, BLOCK_N, num_warps, num_stages, ONES). Rows are independent, so BLOCK_M changes no
    rounding; BLOCK_N is the allocation's KV block where it has one (PASA's M, pasa_rs's centring and
    fp32_frame's moves depend on it) and free for fp32; ONES, the columns of fp32_frame's P·1 (each holds
    Σ P), change no rounding either. ``has_mask``: a user mask tile is pipelined with K and V;
    ``row_shifted``: the allocation is pasa_rs; ``framed``: fp32_frame."""
    block_n = block_kv if blocked else (128 if d_pad <= 128 else 64)
    # The best configurations measured at S = 4096 (docs/benchmarks/gpu_notes.md).
    if rows <= 16:
        block_m, warps, stages = 16, 4, 2
    elif rows <= 64 or d_pad <= 64:
        block_m, warps, stages = 64, 4, 3
    elif d_pad <= 128:
        block_m, warps, stages = 128, 8, 3
    else:
        # pasa_rs at D = 256 (one stage of 128-key tiles): 128 rows (docs/benchmarks/gpu_notes.md, item 11).
        block_m, warps, stages = (128, 8, 2) if block_n <= 64 or row_shifted else (64, 8, 2)
    # Each pipeline stage holds a K and a V tile, and the mask's BLOCK_M × BLOCK_N bytes with a mask
    # (fp32 with a mask at D = 128 needed 245 760 bytes in 3 stages on the H100); with the Q tile they
    # must fit in shared memory, and fp32_frame's BLOCK_N × ONES FP16 ones (P·1's operand) with them.
    stage_bytes = 4 * block_n * d_pad + (block_m * block_n if has_mask else 0)

    def smem(stages: int, ones: int) -> int:
        return stages * stage_bytes + 2 * block_m * d_pad + (2 * ones * block_n if framed else 0)

    while stages > 1 and smem(stages, 8) > _SMEM_BYTES:
        stages -= 1
    # P·1 on 16 columns is a wgmma that reads P from the registers P·V reads it from; on 8 (Hopper's narrowest
    # product) an mma.sync that wants P in a layout of its own, taken only where 16 columns would cost a
    # pipeline stage (D = 128; docs/benchmarks/gpu_notes.md, items 15 and 18).
    ones = 16 if smem(stages, 16) <= _SMEM_BYTES else 8
    if _INTERPRET:  # small tiles, the GPU's P·1
        return 16, block_n, 4, 1, ones
    return block_m, block_n, warps, stages, ones


#: The Gluon Hopper kernel (:mod:`pasa_npu.backends.gluon_kernels`): its allocations, head dims and query tile.
GLUON_PRECISIONS: tuple[str, ...] = ("fp32", "fp32_frame")
GLUON_HEAD_DIMS: tuple[int, ...] = (64, 128, 256)
GLUON_ROWS = 128
#: The least work (B·N·S1·S2·D, QKᵀ's multiply-adds before any band) that the rule sends to the Gluon kernel
#: unasked: its launch takes more host time a call than the classic kernel's, which a smaller call's GPU time does
#: not cover (docs/benchmarks/gpu_gluon, "Where the Gluon kernel starts to pay").
GLUON_MIN_WORK = 2**33


def gluon_block(alloc: Allocation, d: int, block_kv: int, s1: int, capability: tuple[int, int] | None,
                plain: bool, work: int | None) -> int | None:
    """The one rule that sends a call to the Gluon Hopper kernel instead of the classic one. It takes a call on an
    sm_90 device (``capability`` (9, 0); None: no CUDA device) whose tensors are ``plain`` (:func:`_plain`: dense
    Q, K, V in (B, N, S, D) or (B, S, N, D) memory order, 16-byte aligned; no user mask, sink or page table; TND's
    packed sequences read through their (1, N, T, D) views and a tile table) with at least one full query tile of
    S1 rows (TND: in its longest sequence), for ``fp32`` or ``fp32_frame`` at D 64, 128 or 256, and ``work``
    (B·N·S1·S2·D; TND: summed over the sequences, :func:`varlen_terms`) of at least :data:`GLUON_MIN_WORK`; None
    where the caller pins the Gluon kernel (``kernel="gluon"``), which then takes a call of any size it covers.
    Returns the kernel's KV block (``fp32_frame``'s own block_kv, which must be 64 or 128, and 64 at D = 256, where
    two K/V stages of 128 keys do not fit shared memory; for ``fp32`` 128 keys, 64 at D = 256), or None: the
    classic kernel."""
    if capability != (9, 0) or not plain or s1 < GLUON_ROWS or alloc.name not in GLUON_PRECISIONS \
            or d not in GLUON_HEAD_DIMS or (work is not None and work < GLUON_MIN_WORK):
        return None
    block_n = block_kv if alloc.framed else (128 if d <= 128 else 64)
    return block_n if block_n in (64, 128) and (d <= 128 or block_n == 64) else None


def memory_order(t: torch.Tensor) -> str | None:
    """"BNSD" or "BSND": the memory order of a (B, N, S, D) tensor (the Gluon kernel reads it as a 2-D view of
    D-wide rows, its row stride D or N·D); None for any other strides."""
    b, n, s, d = t.shape
    if t.stride() == (n * s * d, s * d, d, 1):
        return "BNSD"
    if t.stride() == (s * n * d, d, n * d, 1):
        return "BSND"
    return None


def _plain(q, k, v, other: bool) -> bool:
    """Whether a call's tensors are what the Gluon kernel reads (see :func:`gluon_block`); ``other``: the call
    has a page table, a user mask or sinks (or is otherwise not one the kernel reads)."""
    return not other and all(t.data_ptr() % 16 == 0 and memory_order(t) is not None for t in (q, k, v)) \
        and memory_order(k) == memory_order(v)


@functools.lru_cache(maxsize=None)
def _capability(device: int) -> tuple[int, int]:
    return torch.cuda.get_device_capability(device)


def _num_splits(tiles: int, heads: int, n_blocks: int) -> int:
    """Split-KV for decode-like calls (one query tile per KV head, ``heads`` = B·Nkv programs): the
    power of two of splits that first gives every SM a program, with at least two KV blocks per split
    and at most _MAX_SPLITS: more splits, and one-block splits, cost more in partials and their merge
    (one program reads every split's partials) than they gain (docs/benchmarks/gpu_notes.md, "v4: decode
    splits" and item 20)."""
    if tiles > 1:
        return 1
    if _INTERPRET:  # two splits exercise the merge on tiny shapes
        return min(n_blocks, 2)
    sms = _multiprocessors(torch.cuda.current_device())
    return max(1, min(n_blocks // 2, _MAX_SPLITS, _pow2(-(-sms // heads))))


@functools.lru_cache(maxsize=None)
def _multiprocessors(device: int) -> int:
    return torch.cuda.get_device_properties(device).multi_processor_count


@functools.lru_cache(maxsize=None)
def _shift_terms(beta: float | None, block_kv: int, scale: float, state16: bool) -> tuple[float, float, float]:
    """(I, a, b) of PASA's shift for the kernel: M = a·I + b·J with FP16 entries, I = β/(1−β) (in FP16
    for FP16 state)."""
    beta = default_beta(block_kv, scale) if beta is None else beta
    diag, off = shift_entries(beta, block_kv, "float16", scale)
    inva = beta / (1.0 - beta)
    if state16:
        inva = float(torch.tensor(inva, dtype=torch.float16))
    return inva, diag - off, off


def attention(q, k, v, *, precision: str, beta: float | None, block_q: int, block_kv: int,
              scale: float, mask: torch.Tensor | None, band: tuple[int | None, int | None] | None = None,
              shift: str | None = None, config: tuple[int, int, int, int | None] | None = None,
              block_table: torch.Tensor | None = None, page: int = 0, kv_info: torch.Tensor | None = None,
              sink: torch.Tensor | None = None, kernel: str | None = None):
    """q (B, N, S1, D) float16; k, v (B, Nkv, S2, D) float16 with N % Nkv == 0; mask None or bool
    broadcastable to (B, N, S1, S2), True = masked out; band None or (lo, hi); sink None or (N,) learnable
    sink logits. Returns out (B, N, S1, D) float16 and lse (B, N, S1) float32 true-scale (−∞ and out 0
    for a row with no key; with a sink, its logit and out 0).
    ``block_q`` is ignored (the kernel picks its row tile; rows are independent). ``config``
    (BLOCK_M, num_warps, num_stages, KV splits or None) overrides the heuristics (the benchmark's
    sweep).

    PageAttention: with ``block_table`` (B, max_blocks) int32, k and v are caches of pages of ``page``
    keys, (num_blocks, page, Nkv·D) or (num_blocks, Nkv, page, D), read in place through the table by
    the pre-passes and the attention kernel (no gathered copy), and ``kv_info`` (B, 5) int32 on q's
    device holds each batch's query length (rows past it are left unwritten), key length, band
    (lo, hi) (ignored unless ``band`` is not None, which then only says that there is a band) and first
    query row (TND only, see :class:`AttentionPlan`); a ``mask`` broadcasts to (B, N, S1,
    max_blocks·page), by key position.

    ``kernel``: None (the rule of :func:`gluon_block` picks), "classic" or "gluon" (a ValueError where the Gluon
    kernel does not cover the call)."""
    if q.stride(-1) != 1 or k.stride(-1) != 1 or v.stride(-1) != 1:
        q, k, v = (t if t.stride(-1) == 1 else t.contiguous() for t in (q, k, v))
    plan = AttentionPlan(q, k, v, precision=precision, beta=beta, block_kv=block_kv, scale=scale, mask=mask, band=band,
                         shift=shift, config=config, block_table=block_table, page=page, kv_info=kv_info,
                         sink=sink is not None, kernel=kernel)
    return plan(q, k, v, mask, block_table, sink)


class AttentionPlan:
    """What :func:`attention` decides from its arguments' shapes, strides, dtypes and options (its checks,
    tiles, pre-pass, KV splits and each kernel's scalars), made once; calling it allocates the results and
    launches the kernels. It holds no input tensor (only paged calls' ``kv_info``), so a caller may keep it
    for later calls whose tensors have the same description.

    ``out_bsnd``: the output is written in (B, S1, N, D) memory order, FIA's BSH/BSND layouts, so that
    laying it out costs no copy. ``out_shape``: the shape of the output returned, a contiguous tensor in
    that memory order (FIA's output shape; None: the (B, N, S1, D) view). ``lse``: whether to compute the
    lse (None is returned in its place otherwise), ``lse_none`` the lse of a row with no key. ``sink``:
    calls pass (N,) learnable sink logits.

    ``varlen_rows`` (TND with a block table): q is the (1, N, T, D) view of the (T, N, D) query, the
    table's B batches hold at most ``varlen_rows`` query rows each, batch b's starting at row kv_info[b, 4],
    and the output (T, N, D) and lse (T, N) are written in place of those rows; rows past the last
    batch's (``varlen_last``, the last cumulative query length) are written as padding (output 0, lse
    +inf). ``kv_info`` None: each call passes its ``lengths`` as device tensors (the cumulative query
    lengths and each batch's key length), from which it builds kv_info on the device with
    ``varlen_band``, the band as a function of (query length, key length) (None: no band).

    :attr:`workspace_bytes` is the scratch a call needs: given a ``workspace`` of at least that many bytes,
    a call allocates nothing on the device but for lengths given as device tensors (a few tensors of B or
    T elements). Without one, a split-KV call takes its partials from the scratch its stream keeps
    (:func:`_split_scratch`, where its arrival counters always are)."""

    def __init__(self, q, k, v, *, precision: str, beta: float | None, block_kv: int, scale: float,
                 mask: torch.Tensor | None, band: tuple[int | None, int | None] | None = None,
                 shift: str | None = None, config: tuple[int, int, int, int | None] | None = None,
                 block_table: torch.Tensor | None = None, page: int = 0, kv_info: torch.Tensor | None = None,
                 out_bsnd: bool = False, out_shape: tuple[int, ...] | None = None, lse: bool = True,
                 lse_none: float = -math.inf, sink: bool = False, varlen_rows: int | None = None,
                 varlen_last: int | None = None, varlen_band=None, kernel: str | None = None):
        paged = block_table is not None
        varlen = varlen_rows is not None
        alloc = _check_call(q, k, v, precision, shift, scale, block_kv, paged)
        if varlen:  # TND: q is (1, N, T, D); the batches are the table's rows
            b, n, s1, d = block_table.shape[0], q.shape[1], varlen_rows, q.shape[3]
        else:
            b, n, s1, d = q.shape
        if paged:
            _check_paged(q, b, k, v, block_table, page, kv_info, varlen)
            # Strides of (block, head, row): the kernel addresses either cache layout through them.
            nkv = k.shape[1] if k.ndim == 4 else k.shape[2] // d
            k_str, v_str = ((t.stride(0), t.stride(1), t.stride(2)) if t.ndim == 4 else (t.stride(0), d, t.stride(1))
                            for t in (k, v))
            s2 = block_table.shape[1] * page  # the longest any batch can be: sizes the pre-passes and splits
            table_stride = block_table.stride(0)
        else:
            nkv, s2 = k.shape[1], k.shape[2]
            k_str, v_str = k.stride()[:3], v.stride()[:3]
            table_stride = 0
        self.kv_info = kv_info
        g = n // nkv
        d_pad = max(16, _pow2(d))
        block_m, block_n, warps, stages, ones = _config(d_pad, _blocked(alloc), block_kv, g * s1, mask is not None,
                                                        alloc.row_shifted, alloc.framed)
        forced_splits = None
        if config is not None:
            block_m, warps, stages, forced_splits = config
        n_blocks = _cdiv(s2, block_n)
        tiles = _cdiv(g * s1, block_m)
        if shift is None:
            shift = "fused" if tiles == 1 else "prepass"
        if alloc.shifted:
            inva, shift_a, shift_b = _shift_terms(beta, block_kv, scale, alloc.state == "float16")
        else:
            inva = shift_a = shift_b = 0.0
        prepass = shift == "prepass" and (alloc.shifted or alloc.row_shifted)
        uk_off, fr_off, chunk, self._scratch = _scratch_layout(alloc, prepass, b, nkv, n_blocks, block_n, block_m, d,
                                                               tiles)
        self._prepass, self._centred = None, alloc.row_shifted
        if prepass:
            pre = _k.centre_keys_kernel if alloc.row_shifted else _k.shift_keys_kernel
            scalars = (table_stride, s2, *k_str) + ((uk_off,) if alloc.row_shifted else (shift_a, shift_b))
            self._prepass = Launch(pre, (n_blocks, b, nkv), scalars, num_warps=4, D=d, D_PAD=d_pad,
                                    BLOCK_N=block_n, PAGED=paged, PAGE=page if paged else 1)
        self._has_mask = mask is not None
        self._lse = lse
        t = q.shape[2]  # TND: the query's rows
        self._lse_shape = (t, n) if varlen else (b, n, s1)
        if varlen:  # the (T, N, D) output, FIA's TND layout
            self._out_alloc = (t, n, d)
        else:
            self._out_alloc = out_shape if out_shape is not None else (b, s1, n, d) if out_bsnd else (b, n, s1, d)
            if math.prod(self._out_alloc) != b * n * s1 * d:
                raise ValueError(f"out_shape {out_shape} does not hold the output (B, N, S1, D) = {(b, n, s1, d)}")
        self._bnsd_view = out_shape is None and out_bsnd and not varlen
        splits, per_split, lse_off, self._partials, self._arrivals = _split_layout(tiles, b, n, nkv, s1, d, n_blocks,
                                                                                  forced_splits)
        self._splits = splits
        # fp32_frame's prefill computes its lse whether or not the call asks for it (then into FP32 scratch after
        # the partials): without the lse's store, Triton 3.6 compiles the D = 128 loop to one that ran 5% slower
        # on an H200 (docs/benchmarks/gpu_frame/h200.md).
        self._store_lse = lse or (alloc.framed and tiles > 1)
        self._lse_off, self._lse_scratch = _align(self._partials), 0 if lse or not self._store_lse else b * n * s1
        fp32_end = self._lse_off + self._lse_scratch if self._lse_scratch else self._partials
        # The Gluon kernel stores the lse where the classic one does, so that the plan's scratch and workspace are the
        # same whichever kernel runs (with and without it, its fp32_frame prefill ran within the spread between runs,
        # docs/benchmarks/gpu_gluon/README.md).
        self._gluon = _gluon_plan(alloc, q, k, v, (b, n, nkv, s1, s2, d), block_kv, band, scale, self._store_lse,
                                  lse_none, out_bsnd, paged or varlen or mask is not None or sink, config, kernel)
        # A device-lengths call builds its kv_info (B, 5) int32 in the scratch, after those.
        self._info_off = _align(fp32_end) if varlen and kv_info is None else None
        self._varlen = (varlen_band, s1, t, block_table.shape[1] * page, varlen_last) if varlen else None
        self.workspace_bytes = 2 * self._scratch + 4 * (fp32_end if self._info_off is None else self._info_off + 5 * b)
        self.workspace_bound = _workspace_bound(alloc, b, n, nkv, s1, d, n_blocks, block_n, tiles,
                                                self._info_off is not None)
        # Whole KV blocks read without masks (FlashAttention's scores: fp32, fp32_frame): fewer instructions per
        # block (13% at D = 64), faster up to D = 128; at D = 256 the unmasked loads made the kernel spill and
        # run 10% slower, and pasa_rs's key centring fused into the loop asked for more shared memory than the
        # H100 has (docs/benchmarks/gpu_notes.md, item 19).
        even_kv = not (paged or alloc.shifted or alloc.row_shifted) and s2 % block_n == 0 and d == d_pad <= 128
        args = _attention_args(q, k_str, v_str, mask, band, table_stride, (b, n, s1, s2), nkv)
        terms = _softmax_terms(alloc, scale, (inva, shift_a, shift_b), lse_none)
        layout = "TND" if varlen else "BSND" if out_bsnd else "BNSD"
        constexprs = dict(
            D=d, D_PAD=d_pad, BLOCK_M=block_m, BLOCK_N=block_n, ONES=ones, FAMILY=_family(alloc),
            STATE16=alloc.state == "float16", FUSED_SHIFT=shift == "fused", HAS_MASK=self._has_mask,
            HAS_BAND=band is not None, EVEN_KV=even_kv, PAGE=page if paged else 0, LAYOUT=layout, HAS_SINK=sink,
            STORE_LSE=self._store_lse, SPLITS=splits, MERGE_ROWS=min(block_m, _pow2(g * s1)) if splits > 1 else 1)
        # The ranges of query tiles, the last (under a causal band, the longest rows) first.
        self._attend = [Launch(_k.attention_kernel, (min(chunk, tiles - tile_lo), b * nkv, splits),
                               (*args, (uk_off, fr_off, lse_off), (tile_lo, per_split), terms), num_warps=warps,
                               num_stages=stages, **constexprs)
                        for tile_lo in reversed(range(0, tiles, chunk))]

    def __call__(self, q, k, v, mask, block_table, sink=None, lengths=None, out=None, lse=None,
                 workspace=None) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Out (``out_shape``, or the (B, N, S1, D) view) FP16 and lse (B, N, S1) FP32 (None unless ``lse``)
        of tensors described as those the plan was made for: those, or tensors with their data pointers,
        dtypes and (in their own shapes) the same memory layout, such as the bases they are views of.
        ``mask`` is ignored by a plan made without one, ``sink`` by one made without sinks, ``lengths`` by
        one made with its kv_info. ``out`` and ``lse``: contiguous tensors of the results' shapes (an lse
        may have a trailing dim of 1) to write instead of new ones; ``workspace``: a uint8 tensor of at
        least :attr:`workspace_bytes` on q's device to hold the scratch instead of new tensors."""
        if workspace is not None and workspace.numel() < self.workspace_bytes:
            raise ValueError(f"workspace holds {workspace.numel()} bytes, this call needs {self.workspace_bytes}: "
                             "size it with pasa_npu.fused_attention_workspace for the largest call it serves")
        if self._gluon is not None:
            out, lse, lse_store = self._results(q, out, lse, workspace)
            self._gluon(q, k, v, out, lse_store)
            return (out.transpose(1, 2) if self._bnsd_view else out), lse
        scratch = parts = arrivals = q  # pointers not read where the plan has no such part
        # One part at most (the pre-pass tables or decode's partials) and no workspace: no bytes to carve (each tensor
        # op is host time of a call).
        carve = workspace is not None or self._info_off is not None or bool(self._scratch and self._partials)
        if self._arrivals:  # split-KV: the stream's counters, and its partials where no workspace holds them
            arrivals, held = _split_scratch(q.device, self._arrivals, 0 if carve else self._partials)
            parts = parts if carve else held
        if carve:
            if workspace is None:
                workspace = q.new_empty(self.workspace_bytes, dtype=torch.uint8)
            if self._scratch:
                scratch = _carve(workspace, 0, 2 * self._scratch, torch.float16)
            if self._partials:
                parts = _carve(workspace, 2 * self._scratch, 4 * self._partials, torch.float32)
        elif self._scratch:
            scratch = q.new_empty(self._scratch, dtype=torch.float16)
        kv_info = self.kv_info
        if block_table is None:
            table = kv_info = q  # pointers not read
        else:
            table = block_table
            if kv_info is None:
                kv_info = _device_info(*lengths, *self._varlen[:4],
                                       _carve(workspace, 2 * self._scratch + 4 * self._info_off, 20 * table.shape[0],
                                              torch.int32).view(-1, 5))
        mask = mask.view(torch.uint8) if self._has_mask else q
        sink = q if sink is None else sink
        out, lse, lse_store = self._results(q, out, lse, workspace)
        if self._prepass is not None:
            self._prepass((k, scratch, scratch, table, kv_info) if self._centred else (k, scratch, table, kv_info),
                          same_dtypes=True)
        for attend in self._attend:
            attend((q, k, v, scratch, mask, out, q if lse_store is None else lse_store, parts, arrivals, table, kv_info,
                    sink),
                   same_dtypes=True)
        if self._varlen is not None:
            _pad_rows(out, lse, self._varlen[4], lengths)
        return (out.transpose(1, 2) if self._bnsd_view else out), lse

    def _results(self, q, out, lse, workspace) -> tuple:
        """The output and lse tensors of a call (the caller's, or new ones; None for an lse not asked for), and where
        the kernel stores its lse: the lse, or FP32 scratch (new, or in the workspace) where the plan computes one
        the call does not ask for."""
        if out is None:
            out = q.new_empty(self._out_alloc)
        if self._lse:
            lse = q.new_empty(self._lse_shape, dtype=torch.float32) if lse is None else lse.view(self._lse_shape)
        else:
            lse = None
        lse_store = lse
        if self._lse_scratch:  # computed, not returned
            lse_store = q.new_empty(self._lse_scratch, dtype=torch.float32) if workspace is None else \
                _carve(workspace, 2 * self._scratch + 4 * self._lse_off, 4 * self._lse_scratch, torch.float32)
        return out, lse, lse_store


def _gluon_plan(alloc: Allocation, q, k, v, shape: tuple, block_kv: int, band, scale: float, store_lse: bool,
                lse_none: float, out_bsnd: bool, other: bool, config, kernel: str | None, varlen: tuple | None = None):
    """The Gluon kernel's launch of a call (:class:`pasa_npu.backends.gluon_kernels.Attention`) where the rule
    (:func:`gluon_block`, on an sm_90 device with Gluon) or ``kernel="gluon"`` sends it there, else None (the
    classic kernel; ``kernel="classic"``, or a ``config``, keeps it there). ``other``: the call has a page table,
    a user mask or sinks (or is otherwise not one the kernel reads). ``varlen``: a dense TND call's
    (longest query rows, work, query tiles) (:func:`varlen_terms`), ``shape`` then (1, N, Nkv, T, T_kv, D)."""
    if kernel not in (None, "classic", "gluon"):
        raise ValueError(f"kernel must be None, 'classic' or 'gluon', got {kernel!r}")
    b, n, nkv, s1, s2, d = shape
    rows, work, tiles = (s1, b * n * s1 * s2 * d, None) if varlen is None else varlen
    capability = _capability(q.device.index) if _gk is not None and not _INTERPRET and q.is_cuda else None
    block_n = gluon_block(alloc, d, block_kv, rows, capability, _plain(q, k, v, other),
                          None if kernel == "gluon" else work)
    covered = block_n is not None
    if kernel == "gluon" and not covered:
        raise ValueError(f"kernel='gluon' does not cover this call (precision {alloc.name!r}, D = {d}, S1 = {rows}, "
                         f"device capability {capability}; the rule: pasa_npu.backends.triton.gluon_block)")
    if not covered or kernel == "classic" or (config is not None and kernel is None):
        return None
    lo_hi = None
    if band is not None:
        lo, hi = band
        lo_hi = (-s1 if lo is None else max(int(lo), -s1), s2 if hi is None else min(int(hi), s2))
    frame_drop = float(torch.tensor(FRAME_DROP_LIMIT / scale, dtype=torch.float32)) if alloc.framed else 0.0
    return _gk.Attention(shape, block_n, lo_hi, (float(scale), frame_drop, float(lse_none)), framed=alloc.framed,
                         store_lse=store_lse, out_bsnd=out_bsnd, stages=None if config is None else config[2],
                         tiles=tiles)


def _check_call(q, k, v, precision: str, shift: str | None, scale: float, block_kv: int, paged: bool) -> Allocation:
    """The checks of :class:`AttentionPlan` before any planning (a ValueError naming the argument that is wrong;
    the paged arguments: :func:`_check_paged`). Returns the allocation."""
    if not is_available(q.device):
        raise RuntimeError(f"backend='triton' needs the triton package and CUDA tensors (or TRITON_INTERPRET=1 "
                           f"for CPU tensors), got a tensor on {q.device}")
    alloc = get_allocation(precision)
    if not computes(alloc):
        raise ValueError(f"precision {precision!r} is not computed by backend='triton' (it computes "
                         f"{_computed()}); the other allocations run on backend='reference'")
    if shift is not None and shift not in SHIFT_MODES:
        raise ValueError(f"shift must be one of {SHIFT_MODES}, got {shift!r}")
    for name, t in (("q", q), ("k", k), ("v", v)):
        if t.dtype != torch.float16 or t.ndim not in ((3, 4) if paged and name != "q" else (4,)) \
                or t.device != q.device:
            raise ValueError(f"{name} must be a 4-D float16 tensor on q's device for backend='triton' (or a 3-D "
                             f"page cache with block_table), got {t.dtype} of shape {tuple(t.shape)} on {t.device}")
        if t.stride(-1) != 1:
            raise ValueError(f"{name} must have a unit stride in its last dim (D) for backend='triton', got "
                             f"strides {t.stride()}")
    if (alloc.row_shifted or alloc.framed) and not scale > 0:
        raise ValueError(f"scale must be positive for precision={precision!r}, got {scale!r}")
    if _blocked(alloc) and block_kv not in BLOCK_KV:
        raise ValueError(f"block_kv must be one of {BLOCK_KV} for precision={precision!r} with "
                         f"backend='triton', got {block_kv}")
    return alloc


def _scratch_layout(alloc: Allocation, prepass: bool, b: int, nkv: int, n_blocks: int, block_n: int, block_m: int,
                    d: int, tiles: int) -> tuple[int, int, int, int]:
    """Where the pre-pass results lie in one FP16 scratch allocation per call: K' (B, Nkv, blocks·BLOCK_N, D);
    pasa_rs's u and K̄ per block (B, Nkv, blocks, 2, D) and each tile's FP32 frame terms for every block,
    written and read back by its own program (B·Nkv, tiles, 2·blocks, BLOCK_M), each at a 16-byte aligned
    offset. The frame table grows as S1·S2: where it would pass _FRAME_LIMIT, the kernel runs over ranges of
    ``chunk`` query tiles (a multiple of 16, so that the ranges' first tiles are alike to Triton's
    specialisation) one launch after the other, reusing it. Returns (UK's offset, the frame table's, chunk, the
    scratch's FP16 elements)."""
    kp_shape = (b, nkv, n_blocks * block_n, d) if prepass else None
    uk_shape = (b, nkv, n_blocks, 2, d) if prepass and alloc.row_shifted else None
    frame_tile = b * nkv * 2 * n_blocks * block_m if uk_shape else 0  # frame terms per query tile
    chunk = tiles
    if frame_tile * tiles > _FRAME_LIMIT:
        chunk = min(tiles, max(16, _FRAME_LIMIT // frame_tile // 16 * 16))
    uk_off = _align(math.prod(kp_shape)) if prepass else 0
    fr_off = _align(uk_off + math.prod(uk_shape)) if uk_shape else 0
    return uk_off, fr_off, chunk, (fr_off + 2 * frame_tile * chunk if uk_shape else uk_off) if prepass else 0


def _split_layout(tiles: int, b: int, n: int, nkv: int, s1: int, d: int, n_blocks: int,
                  forced: int | None) -> tuple[int, int, int, int, int]:
    """Decode's split-KV (``forced`` splits, or :func:`_num_splits`'s), merged by the last split of each tile to
    finish: one FP32 scratch allocation holds the partial outputs (splits, B, N, S1, D), then their lse. Returns
    (splits, KV blocks per split, the lse's offset, the partials' FP32 elements, the arrival counters)."""
    splits = _num_splits(tiles, b * nkv, n_blocks) if forced is None else forced
    per_split = _cdiv(n_blocks, splits)
    splits = _cdiv(n_blocks, per_split)
    if splits == 1:
        return splits, per_split, 0, 0, 0
    rows = b * n * s1
    lse_off = _align(splits * rows * d)
    return splits, per_split, lse_off, lse_off + splits * rows, tiles * b * nkv


def _attention_args(q, k_str, v_str, mask, band, table_stride: int, shape: tuple[int, int, int, int],
                    nkv: int) -> tuple:
    """The attention kernel's strides and sizes: Q's, K's and V's (batch or block, head, row) strides, the user
    mask's broadcast strides (the kernel reads it in place, as uint8; stride 0 on broadcast dims), the block
    table's batch stride, (Nkv, S1, S2, G) and the band (lo, hi), clamped so that j − i in [−S1, S2] keeps the
    kernel's int32 sums from overflowing."""
    b, n, s1, s2 = shape
    if mask is not None:
        msk = torch.broadcast_to(mask.reshape((1,) * (4 - mask.ndim) + tuple(mask.shape)), (b, n, s1, s2)).stride()
    else:
        msk = (0, 0, 0, 0)
    lo, hi = (None, None) if band is None else band
    lo = -s1 if lo is None else max(int(lo), -s1)
    hi = s2 if hi is None else min(int(hi), s2)
    return (tuple(q.stride()[:3]), tuple(k_str), tuple(v_str), tuple(msk), table_stride, (nkv, s1, s2, n // nkv),
            (lo, hi))


def _softmax_terms(alloc: Allocation, scale: float, pasa: tuple[float, float, float], lse_none: float) -> tuple:
    """The attention kernel's float terms: ρ, the softmax's factor on the scores the kernel holds (the scale
    itself but for pasa_rs, whose Q̂ = Q·2^e in the kernel, exact, carries 2^e); PASA's (I, a, b); pasa_rs's
    q_mul = 2^e and reshift thresholds in units of Q̂·K (blockwise.row_shift_constants); fp32_frame's largest
    move down in units of Q·K (FP32, as the golden model takes it); and the lse of a row with no key."""
    q_mul, rho, reshift_at, relevance = row_shift_constants(scale) if alloc.row_shifted else (1.0, scale, 0.0, 0.0)
    frame_drop = float(torch.tensor(FRAME_DROP_LIMIT / scale, dtype=torch.float32)) if alloc.framed else 0.0
    return (float(rho), *map(float, pasa), q_mul, reshift_at, relevance, frame_drop, float(lse_none))


def _family(alloc: Allocation) -> str:
    """The attention kernel's FAMILY of an allocation."""
    return "pasa_rs" if alloc.row_shifted else "pasa" if alloc.shifted else "frame" if alloc.framed else "fa"


def _align(elements: int) -> int:
    """``elements`` rounded up to a multiple of 8 (16 bytes of FP16, 32 of FP32): scratch offsets."""
    return -(-elements // 8) * 8


def _workspace_bound(alloc: Allocation, b: int, n: int, nkv: int, s1: int, d: int, n_blocks: int, block_n: int,
                     tiles: int, device_info: bool) -> int:
    """Bytes that hold the scratch of a plan of this shape and of every smaller one (no more batches, query
    rows, KV blocks or heads; the same allocation): each part bounded by a function that grows with every
    dimension. The pre-pass tables (a call of several query tiles; the tile count grows with the rows): K'
    and pasa_rs's (u, K̄), and its frame table, the query tiles' rows padded by at most a tile (128 rows),
    and past _FRAME_LIMIT values a range of query tiles: 16 tiles (of at most 128 rows) or the most that
    fit. The split partials (a call of one query tile, at
    most 128 rows, so S1 <= 128 / G): B·splits < 2·(⌈SMs / Nkv⌉ + B) (splits, a power of two, are below
    twice ⌈SMs / (B·Nkv)⌉) and <= B·n_blocks. fp32_frame's prefill lse (B·N·S1) where a call does not ask
    for it. And a device-lengths call's kv_info."""
    g = n // nkv
    fp16 = 0
    if tiles > 1 and (alloc.shifted or alloc.row_shifted):
        fp16 = _align(b * nkv * n_blocks * block_n * d)
        if alloc.row_shifted:
            fp16 = _align(fp16 + b * nkv * n_blocks * 2 * d)
            per_tile = b * nkv * 2 * n_blocks  # frame terms per row of a query tile
            fp16 += 2 * min(per_tile * (g * s1 + 128), max(_FRAME_LIMIT, per_tile * 128 * 16))
    fp32 = 0
    split_rows = n * min(s1, 128 // g)
    if split_rows and n_blocks > 1:
        heads = 2 * b if _INTERPRET else 2 * (_cdiv(_multiprocessors(torch.cuda.current_device()), nkv) + b)
        fp32 = _align(min(heads, b * n_blocks) * split_rows * (d + 1)) + 8  # + the lse's alignment
    if alloc.framed and tiles > 1:  # fp32_frame's prefill lse where the call does not ask for it
        fp32 += b * n * s1 + 8
    return 2 * _align(fp16) + 4 * (fp32 + (5 * b if device_info else 0))


def _carve(workspace: torch.Tensor, offset: int, nbytes: int, dtype: torch.dtype) -> torch.Tensor:
    """Bytes [offset, offset + nbytes) of a uint8 workspace as a 1-D ``dtype`` tensor (offsets are 16-byte
    aligned: :func:`_align` of FP16/FP32 element counts)."""
    return workspace[offset:offset + nbytes].view(dtype)


def _device_info(q_cum: torch.Tensor, kv_lens: torch.Tensor, band, s1: int, t: int, capacity: int,
                 into: torch.Tensor) -> torch.Tensor:
    """A TND call's kv_info (B, 5) int32 built on the device, into ``into``, from its lengths left there:
    the cumulative query lengths and each batch's key length. ``band`` is the call's band rule of
    (query length, key length) (:func:`pasa_npu.problem.band_rule`; None: no band). The lengths are
    clamped to what the query rows (T) and a table row (``capacity`` keys) hold, so that nothing is read
    out of bounds whatever the tensors hold (their values are checked only with ``check_inputs``)."""
    end = q_cum.clamp(0, t)
    start = torch.nn.functional.pad(end[:-1], (1, 0))
    q_len = (end - start).clamp_min(0)
    kv = kv_lens.clamp(0, capacity)
    lo, hi = (None, kv) if band is None else band(q_len, kv)
    lo = torch.full_like(kv, -s1) if lo is None else torch.as_tensor(lo, device=kv.device).clamp_min(-s1)
    hi = torch.minimum(torch.as_tensor(hi, device=kv.device), kv)
    return into.copy_(torch.stack(torch.broadcast_tensors(q_len, kv, lo, hi, start), 1))


def _pad_rows(out: torch.Tensor, lse: torch.Tensor | None, last: int | None, lengths) -> None:
    """A TND call's rows past its last batch's (FIA's padding): output 0, lse +inf. ``last`` is the last
    cumulative query length, or None where it is on the device (``lengths``)."""
    if last is not None:
        if last < out.shape[0]:
            out[last:] = 0
            if lse is not None:
                lse[last:] = LSE_PADDED_ROW
        return
    padded = torch.arange(out.shape[0], device=out.device) >= lengths[0][-1:].clamp_min(0)
    out.masked_fill_(padded[:, None, None], 0)
    if lse is not None:
        lse.masked_fill_(padded[:, None], LSE_PADDED_ROW)


def _check_paged(q, b, k, v, block_table, page, kv_info, varlen):
    """The PageAttention arguments of :func:`attention` (a ValueError naming the one that is wrong)."""
    d = q.shape[3]
    if block_table.dtype != torch.int32 or block_table.ndim != 2 or block_table.shape[0] != b \
            or block_table.device != q.device:
        raise ValueError(f"block_table must be a (B = {b}, max_blocks) int32 tensor on q's device, got "
                         f"{block_table.dtype} of shape {tuple(block_table.shape)} on {block_table.device}")
    if not isinstance(page, int) or page < 1:
        raise ValueError(f"page must be a positive int with block_table, got {page!r}")
    if kv_info is None and varlen:
        pass  # built by each call from its lengths
    elif kv_info is None or kv_info.dtype != torch.int32 or tuple(kv_info.shape) != (b, 5) \
            or not kv_info.is_contiguous() or kv_info.device != q.device:
        got = None if kv_info is None else f"{kv_info.dtype} of shape {tuple(kv_info.shape)} on {kv_info.device}"
        raise ValueError(f"kv_info must be a contiguous ({b}, 5) int32 tensor (query length, key length, band lo, "
                         f"band hi, first query row per batch) on q's device with block_table, got {got}")
    for name, t in (("k", k), ("v", v)):
        want = (page, t.shape[2]) if t.ndim == 3 else (t.shape[1], page, d)
        if tuple(t.shape[1:]) != want or (t.ndim == 3 and t.shape[2] % d) or t.shape != k.shape:
            raise ValueError(f"{name} must be a page cache (num_blocks, {page}, Nkv·{d}) or (num_blocks, Nkv, {page}, "
                             f"{d}) shaped like k, got {tuple(t.shape)}")


def combine(outs: torch.Tensor, lses: torch.Tensor, out_dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`pasa_npu.merge.merge_partials` in one kernel: outs (P, ..., D) and lses (P, ...), FP32. Two rows per
    program."""
    splits, d = outs.shape[0], outs.shape[-1]
    rows = lses.numel() // splits
    if outs.dtype != torch.float32 or not outs.is_contiguous():
        outs = outs.float().contiguous()
    if lses.dtype != torch.float32 or not lses.is_contiguous():
        lses = lses.float().contiguous()
    out = torch.empty(outs.shape[1:], dtype=out_dtype, device=outs.device)
    lse = torch.empty(lses.shape[1:], dtype=torch.float32, device=outs.device)
    launch(_k.combine_kernel, (_cdiv(rows, 2), 1, 1), (outs, lses, out, lse), (rows, -math.inf), num_warps=4,
           SPLITS=splits, D=d, D_PAD=max(16, _pow2(d)), BLOCK_R=2)
    return out, lse


#: Per (device, stream): the split-KV scratch that calls on that stream take in turn (stream order keeps them apart):
#: arrival counters (int32, zero between launches: the last split of a tile sets its counter back) and the partials
#: (FP32). A stream's own, so that launches on two streams never share them.
_SPLIT_SCRATCH: dict[tuple, tuple[torch.Tensor, torch.Tensor]] = {}


def _split_scratch(device: torch.device, counters: int, partials: int) -> tuple[torch.Tensor, torch.Tensor]:
    """At least ``counters`` zero arrival counters and ``partials`` FP32 values of split-KV scratch for a launch on
    the current stream of ``device``: the stream's, grown to fit. Under CUDA graph capture, new tensors that the graph
    owns, its counters zeroed on each replay (a replay may run on any stream, beside other launches)."""
    if device.type == "cuda":
        if torch.cuda.is_current_stream_capturing():
            return (torch.zeros(counters, dtype=torch.int32, device=device),
                    torch.empty(partials, dtype=torch.float32, device=device))
        key = (device.index, _raw_stream(device.index))
    else:
        key = (device.type, None)
    held = _SPLIT_SCRATCH.get(key)
    if held is None or held[0].numel() < counters or held[1].numel() < partials:
        size = (counters, partials) if held is None else (max(counters, held[0].numel()), max(partials, held[1].numel()))
        held = _SPLIT_SCRATCH[key] = (torch.zeros(max(size[0], 1024), dtype=torch.int32, device=device),
                                      torch.empty(size[1], dtype=torch.float32, device=device))
    return held


def _computed() -> tuple[str, ...]:
    from ..precision import ALLOCATIONS

    return tuple(name for name, a in ALLOCATIONS.items() if computes(a))


class TritonBackend:
    """Dense jobs, and PageAttention in one call over all batches (any query length, per-batch lengths, a
    user mask); causal and band sparse modes reach the kernel as a band (never materialised)."""

    name = "triton"

    def unavailable_reason(self, device: torch.device) -> str | None:
        if triton is None:
            return "needs the triton package (pip install triton)"
        if not is_available(device):
            return (f"needs CUDA tensors (or TRITON_INTERPRET=1 set before import for CPU tensors), got tensors "
                    f"on {device}; backend='reference' (or None) runs on any device")
        return None

    def supports(self, problem: Problem) -> str | None:
        if not computes(problem.alloc):
            return f"precision {problem.alloc.name!r} is not one it computes ({', '.join(_computed())})"
        if _blocked(problem.alloc) and problem.block_kv not in BLOCK_KV:
            return f"block_kv must be one of {BLOCK_KV} for precision {problem.alloc.name!r}, got {problem.block_kv}"
        return None

    def plan(self, problem: Problem):
        """The call as one :class:`AttentionPlan` over the problem's own tensors, where it is exactly the
        kernels: a dense call with no per-batch length, a paged call with no padded query row, or a TND call
        with a block table, whose (B, N, S, D) views (TND: (T, N, D)) share their inputs' data pointers and
        have a unit stride in D. Called with ``(query, key, value, user_mask, block_table, sink, lengths)``
        (or tensors with their data pointers and layouts; ``lengths`` the problem's ``device_lens``) it
        returns the output in FIA's layout (``problem.out_shape()``) and the lse as FIA lays it out but
        for its trailing dim (LSE_NO_KEY for a row with no key), or None when the call does not ask for
        it; ``out``, ``lse`` and ``workspace`` keywords take the caller's buffers
        (:meth:`AttentionPlan.__call__`). None for other calls."""
        return _plan(problem, final=True)

    def workspace_bytes(self, problem: Problem) -> int:
        """The workspace a :meth:`plan` of ``problem``, or of any call no larger than it, needs (bytes; 0
        where there is no plan: such a call allocates its own scratch)."""
        plan = _plan(problem, final=True)
        return 0 if plan is None else plan.workspace_bound

    def run(self, problem: Problem):
        plan = _plan(problem, final=False)
        if plan is not None:
            return plan(*plan_inputs(problem))
        problem = problem.on_host()
        if problem.paged and not problem.tnd:
            return _run_paged(problem)
        if problem.tnd and not problem.paged:
            return _run_varlen(problem)
        return run_jobs(problem, _attend)


def plan_inputs(problem: Problem) -> tuple:
    """The tensors a plan of ``problem`` is called with (see :meth:`TritonBackend.plan`)."""
    return (problem.query, problem.key, problem.value, problem.user_mask, problem.block_table, problem.sink,
            problem.device_lens)


def _plan(problem: Problem, final: bool) -> AttentionPlan | None:
    """:meth:`TritonBackend.plan`; not ``final``: its output as the backend protocol's (B, N, S1, D) view,
    and the lse always, −∞ for a row with no key."""
    if problem.query.numel() == 0 or (final and problem.out_dtype != torch.float16):
        return None
    lse_none = LSE_NO_KEY if final else -math.inf
    if problem.tnd:
        return _varlen_plan(problem, final, lse_none) if problem.paged else None
    if problem.q_lens is not None:  # padded rows
        return None
    if problem.paged:
        if max(problem.kv_lens, default=0) == 0:
            return None
        kv = (problem.key, problem.value)
        kv_info, band = _paged_lengths(problem, problem.s1)
    else:
        if problem.kv_lens is not None or problem.s2 == 0:
            return None
        kv = (problem.k, problem.v)
        kv_info, band = None, problem.band(problem.s1, problem.s2)
    if any(t.stride(-1) != 1 for t in (problem.q, *kv)) or problem.q.data_ptr() != problem.query.data_ptr() \
            or (not problem.paged and (kv[0].data_ptr(), kv[1].data_ptr()) != (problem.key.data_ptr(),
                                                                               problem.value.data_ptr())):
        return None
    return AttentionPlan(problem.q, *kv, precision=problem.alloc.name, beta=problem.beta,
                         block_kv=problem.block_kv, scale=problem.scale, mask=problem.user_mask, band=band,
                         block_table=problem.block_table, page=problem.page, kv_info=kv_info,
                         out_bsnd=problem.input_layout in ("BSH", "BSND", "BNSD_BSND"),
                         out_shape=problem.out_shape() if final else None,
                         lse=problem.softmax_lse_flag or not final, lse_none=lse_none, sink=problem.sink is not None)


def _varlen_plan(problem: Problem, final: bool, lse_none: float) -> AttentionPlan | None:
    """A TND call with a block table as one plan: the kernels read each batch's query rows at its cumulative
    offset and its keys through the table, and write the (T, N, D) output in place (:class:`AttentionPlan`)."""
    q4 = problem.query.transpose(0, 1)[None]  # (1, N, T, D)
    if any(t.stride(-1) != 1 for t in (q4, problem.key, problem.value)):
        return None
    rule = None
    if problem.band(1, 1) is not None:
        rule = functools.partial(band_rule, problem.sparse_mode, problem.pre_tokens, problem.next_tokens)
    if problem.device_lens is None:
        q_lens = problem.q_lens
        rows = max(1, max(b - a for a, b in zip((0,) + q_lens[:-1], q_lens)))
        kv_info, band = _paged_lengths(problem, rows)
        last = q_lens[-1]
    else:  # sized by the shapes: a batch holds at most all T query rows
        rows, kv_info, band, last = problem.query.shape[0], None, (0, 0) if rule else None, None
    return AttentionPlan(q4, problem.key, problem.value, precision=problem.alloc.name, beta=problem.beta,
                         block_kv=problem.block_kv, scale=problem.scale, mask=None, band=band,
                         block_table=problem.block_table, page=problem.page, kv_info=kv_info,
                         lse=problem.softmax_lse_flag or not final, lse_none=lse_none, sink=problem.sink is not None,
                         varlen_rows=rows, varlen_last=last, varlen_band=rule)


def _paged_lengths(problem: Problem, s1: int) -> tuple[torch.Tensor, tuple[int, int] | None]:
    """A paged call's (B, 5) int32 ``kv_info`` on the device (each batch's query length, key length, band
    (lo, hi): a bottom-right band depends on both; and for TND its first query row) and the band argument
    of :func:`attention`, ``s1`` being the longest batch's query rows. The lengths are host integers
    (``problem.q_lens``, ``problem.kv_lens``): a host-to-device copy of 20·B bytes, asynchronous on CUDA."""
    info, any_band = [], False
    for r, c, band, start, _ in _sequences(problem):
        any_band |= band is not None
        lo, hi = (None, None) if band is None else band
        # As attention() clamps a dense band: j − i in [−S1, S2] keeps the kernel's int32 sums in range.
        info.append((r, c, -s1 if lo is None else max(lo, -s1), c if hi is None else min(hi, c), start))
    info = torch.tensor(info, dtype=torch.int32)
    if problem.device.type == "cuda":
        if torch.cuda.is_current_stream_capturing():  # a graph would replay a copy from a reused host buffer
            raise RuntimeError("a paged call copies its per-batch lengths to the device, which a CUDA graph cannot "
                               "replay: make the same call twice before capturing it (a planned call holds them on "
                               "the device, see 'Repeated calls' in docs/fia.md), or with input_layout='TND' pass "
                               "the lengths as CUDA tensors, which the kernels read in place")
        # From pinned memory without a synchronisation (PyTorch's host cache keeps the pinned block until the
        # copy has run).
        return info.pin_memory().to(problem.device, non_blocking=True), (0, 0) if any_band else None
    return info.to(problem.device), (0, 0) if any_band else None


def _sequences(problem: Problem) -> list[tuple]:
    """Each batch of a paged or TND call (host lengths) as (query rows, keys, band (:meth:`Problem.band`) or None,
    first query row, first key row): TND's rows and dense keys lie at their cumulative offsets, paged keys at 0 of
    their batch's pages."""
    b = problem.batch
    if problem.tnd:
        q_starts = (0,) + problem.q_lens[:-1]
        q_lens = [end - start for start, end in zip(q_starts, problem.q_lens)]
    else:
        q_starts, q_lens = (0,) * b, problem.q_lens or (problem.s1,) * b
    if problem.paged:
        kv_starts, kv_lens = (0,) * b, problem.kv_lens
    else:
        kv_starts = (0,) + problem.kv_lens[:-1]
        kv_lens = [end - start for start, end in zip(kv_starts, problem.kv_lens)]
    return [(r, c, problem.band(r, c), q0, k0) for r, c, q0, k0 in zip(q_lens, kv_lens, q_starts, kv_starts)]


def varlen_terms(problem: Problem) -> tuple:
    """A dense TND call (no block table, host lengths) as the Gluon rule (:func:`gluon_block`) sees it: the
    (1, N, T, D) and (1, Nkv, T_kv, D) views of its query, key and value (in (B, S, N, D) memory order where the
    tensors are contiguous), whether it is one the kernel does not read however its tensors lie (:func:`_plain`'s
    ``other``: sinks, no keys, a CUDA graph's capture), its sequences (:func:`_sequences`) and the rule's terms:
    the longest sequence's query rows (the kernel's S1), the work Σ N·S1·S2·D over the sequences (each sequence's
    B·N·S1·S2·D, QKᵀ's multiply-adds before any band: the work of the one launch, against the same
    :data:`GLUON_MIN_WORK` as a dense call's; the classic kernel's path launches once per sequence, more host time
    than the dense call the threshold was measured on), and the query tiles of GLUON_ROWS rows (the launch's
    programs per head)."""
    views = tuple(t[None].transpose(1, 2) for t in (problem.query, problem.key, problem.value))
    # A tile table copied from the host is one a CUDA graph would replay stale; with no keys at all, no key view.
    other = problem.sink is not None or problem.key.shape[0] == 0 or (problem.device.type == "cuda"
                                                                      and torch.cuda.is_current_stream_capturing())
    seqs = _sequences(problem)
    rows = max((r for r, *_ in seqs), default=0)
    work = sum(problem.num_heads * r * c * problem.head_dim for r, c, *_ in seqs)
    tiles = sum(_cdiv(r, GLUON_ROWS) for r, *_ in seqs)
    return views, other, seqs, (rows, work, tiles)


def tile_table(sequences, block_n: int) -> list[tuple[int, ...]]:
    """A varlen launch's tile table: the rows the Gluon kernel reads with VARLEN
    (:func:`pasa_npu.backends.gluon_kernels.attention_kernel`), one per query tile of GLUON_ROWS rows of each
    sequence of :func:`_sequences`, each (the sequence's first query row, its query rows, its first key row, its
    keys, its band (lo, hi) clamped to [−rows, keys] (no band: (−rows, keys)), the tile's first query position, 0).
    The tiles that visit the most KV blocks of ``block_n`` keys come first, as the dense launch's longest rows do."""
    rows = []
    for r, c, band, q0, k0 in sequences:
        lo, hi = (None, None) if band is None else band
        lo, hi = -r if lo is None else max(lo, -r), c if hi is None else min(hi, c)
        for pos0 in range(0, r, GLUON_ROWS):
            j_lo, j_hi = max(pos0 + lo, 0), min(min(pos0 + GLUON_ROWS, r) - 1 + hi, c - 1)
            blocks = j_hi // block_n - j_lo // block_n + 1 if j_hi >= j_lo else 0
            rows.append((-blocks, (q0, r, k0, c, lo, hi, pos0, 0)))
    rows.sort(key=lambda row: row[0])  # stable: equal tiles in the sequences' order
    return [row for _, row in rows]


def _run_varlen(problem: Problem, kernel: str | None = None):
    """:meth:`TritonBackend.run` of a dense TND call (no block table, host lengths): one launch of the Gluon kernel
    over the call's tile table (:func:`tile_table`) where the rule (:func:`gluon_block`, with :func:`varlen_terms`)
    or ``kernel="gluon"`` sends it there; else (or ``kernel="classic"``) the classic kernel on each sequence
    (:func:`pasa_npu.backends.run_jobs`)."""
    views, other, seqs, terms = varlen_terms(problem)
    n, nkv, d = problem.num_heads, problem.num_kv_heads, problem.head_dim
    t, t_kv = problem.query.shape[0], problem.key.shape[0]
    any_band = any(band is not None for _, _, band, _, _ in seqs)
    gluon = _gluon_plan(problem.alloc, *views, (1, n, nkv, t, t_kv, d), problem.block_kv, (0, 0) if any_band else None,
                        problem.scale, True, -math.inf, True, other, None, kernel, varlen=terms)
    if gluon is None:
        return run_jobs(problem, _attend)
    table = torch.tensor(tile_table(seqs, gluon.block_n), dtype=torch.int32)
    table = table.pin_memory().to(problem.device, non_blocking=True)  # as _paged_lengths copies its lengths
    out = problem.query.new_empty((t, n, d))
    lse = torch.empty((t, n), dtype=torch.float32, device=problem.device)
    gluon(*views, out, lse, table)
    _pad_rows(out, lse, problem.q_lens[-1], None)
    return out, lse


def _run_paged(problem: Problem):
    """A paged call that is not one plan: the kernel over every batch (it leaves the query rows past a
    batch's length unwritten; they get FIA's padding here), or no kernel where nothing is valid."""
    q_lens = problem.q_lens or (problem.s1,) * problem.batch
    if problem.query.numel() == 0 or max(problem.kv_lens, default=0) == 0 or max(q_lens, default=0) == 0:
        return problem.padded_results()
    kv_info, band = _paged_lengths(problem, problem.s1)
    out, lse = attention(problem.q, problem.key, problem.value, precision=problem.alloc.name, beta=problem.beta,
                         block_q=problem.block_q, block_kv=problem.block_kv, scale=problem.scale,
                         mask=problem.user_mask, band=band, block_table=problem.block_table,
                         page=problem.page, kv_info=kv_info, sink=problem.sink)
    padded = problem.padded_rows()
    if padded is not None:
        out = out.masked_fill(padded[..., None], 0.0)
        lse = lse.masked_fill(padded, LSE_PADDED_ROW)
    return out, lse


def _attend(job: Job, problem: Problem):
    return attention(job.q, job.k, job.v, precision=problem.alloc.name, beta=problem.beta, block_q=problem.block_q,
                     block_kv=problem.block_kv, scale=problem.scale, mask=job.mask, band=job.band, sink=problem.sink)


BACKEND = TritonBackend()
