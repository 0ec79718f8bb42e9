"""The NumPy golden model: the oracle every backend is checked against.

* :func:`reference` is exact attention in float64.
* :func:`attention` emulates one precision allocation (``fp32_frame``, the default, ``fp32``, ``fp16_fp32``,
  ``fp16``, ``pasa``, ``pasa_fp32``, ``pasa_rs``: :data:`pasa_npu.precision.ALLOCATIONS`) blockwise, rounding exactly where that allocation rounds (see
  :mod:`pasa_npu.blockwise`, which states the rounding rules once for every backend).

Arrays are (B, N, S, D); K and V may have fewer heads than Q (GQA/MQA); S1 and S2 need not be
multiples of the block sizes; masks are bool with True = masked out (FIA's convention). Only NumPy
is imported here.
"""

from __future__ import annotations

import numpy as np

from . import blockwise
from .precision import get_allocation

__all__ = ["reference", "attention", "causal_mask", "NumpyOps"]


class NumpyOps:
    """The array operations :mod:`pasa_npu.blockwise` needs, on float32 NumPy arrays that hold
    values of the emulated type (FP16 values are stored exactly in float32)."""

    @staticmethod
    def cast(x, dtype):
        x = np.asarray(x, dtype=np.float32)
        return x.astype(np.float16).astype(np.float32) if dtype == "float16" else x

    @staticmethod
    def matmul(a, b):
        return np.matmul(a.astype(np.float64), b.astype(np.float64)).astype(np.float32)

    mT = staticmethod(lambda x: np.swapaxes(x, -1, -2))
    exp = staticmethod(np.exp)
    log = staticmethod(np.log)

    @staticmethod
    def exp64(x):
        """FP32 exp evaluated in float64: the correctly rounded FP32 result (but for float64 ties),
        the same in every library."""
        return np.exp(np.asarray(x, dtype=np.float64)).astype(np.float32)

    @staticmethod
    def log64(x):
        """FP32 log evaluated in float64 (see :meth:`exp64`)."""
        return np.log(np.asarray(x, dtype=np.float64)).astype(np.float32)
    maximum = staticmethod(np.maximum)
    isneginf = staticmethod(np.isneginf)
    broadcast_shape = staticmethod(np.broadcast_shapes)

    @staticmethod
    def where(cond, a, b):
        return np.where(cond, np.float32(a) if np.isscalar(a) else a, b).astype(np.float32)

    @staticmethod
    def rowmax(x):
        return x.max(axis=-1, keepdims=True)

    @staticmethod
    def any(x, axes):
        return x.any(axis=axes, keepdims=True)

    @staticmethod
    def neginf_to_zero(x):
        return np.where(np.isneginf(x), np.float32(0), x)

    @staticmethod
    def full(shape, value, dtype, like):
        return np.full(shape, value, dtype=np.float32)

    @staticmethod
    def scalar(value, like):
        return np.float32(value)

    zeros_like = staticmethod(np.zeros_like)

    @staticmethod
    def arange(start, stop, like):
        return np.arange(start, stop)

    @staticmethod
    def pad_last(x, n):
        return np.concatenate([x, np.zeros((*x.shape[:-1], n), np.float32)], axis=-1)

    @staticmethod
    def shift_matrix(n, diag, off, like):
        m = np.full((n, n), off, dtype=np.float32)
        np.fill_diagonal(m, diag)
        return m

    @staticmethod
    def cat(xs, axis):
        return np.concatenate(xs, axis=axis)


def _check_qkv(q, k, v, mask):
    q, k, v = (np.asarray(x) for x in (q, k, v))
    for name, x in (("q", q), ("k", k), ("v", v)):
        if x.ndim != 4:
            raise ValueError(f"{name} must be 4-D (B, N, S, D), got shape {x.shape}")
        if not np.issubdtype(x.dtype, np.floating):
            raise TypeError(f"{name} must be a floating-point array, got {x.dtype}")
    if k.shape[:3] != v.shape[:3]:
        raise ValueError(f"k and v must agree in (B, Nkv, S2), got {k.shape} and {v.shape}")
    if q.shape[0] != k.shape[0] or q.shape[3] != k.shape[3]:
        raise ValueError(f"q and k must agree in batch and head dim, got {q.shape} and {k.shape}")
    if k.shape[1] == 0 or q.shape[1] % k.shape[1]:
        raise ValueError(f"q's heads ({q.shape[1]}) must be a multiple of k's ({k.shape[1]})")
    if mask is not None:
        mask = np.asarray(mask)
        if mask.dtype != np.bool_:
            raise TypeError(f"mask must be a bool array (True = masked out), got {mask.dtype}")
        try:
            np.broadcast_shapes(mask.shape, q.shape[:3] + (k.shape[2],))
        except ValueError:
            raise ValueError(f"mask of shape {mask.shape} does not broadcast to "
                             f"(B, N, S1, S2) = {q.shape[:3] + (k.shape[2],)}") from None
        if mask.shape[-2:] != (q.shape[2], k.shape[2]):
            mask = np.broadcast_to(mask, mask.shape[:-2] + (q.shape[2], k.shape[2]))
    return q, k, v, mask


def causal_mask(s1: int, s2: int) -> np.ndarray:
    """Top-left aligned causal mask (query i sees keys 0..i; FIA sparse_mode 2), True = masked."""
    return np.triu(np.ones((s1, s2), dtype=bool), k=1)


def _band(band, causal):
    """The band (lo, hi) of ``band`` and ``causal`` together (causal is the band (None, 0)), or None."""
    if band is not None:
        lo, hi = band
        if not (lo is None or isinstance(lo, (int, np.integer))) or not isinstance(hi, (int, np.integer)):
            raise TypeError(f"band must be None or (lo, hi) with int hi and int-or-None lo, got {band!r}")
        band = (None if lo is None else int(lo), int(hi))
    if not causal:
        return band
    return (None, 0) if band is None else (band[0], min(band[1], 0))


def reference(q, k, v, *, scale: float, mask=None, causal: bool = False, band=None, sink=None):
    """Exact softmax attention in float64: returns ``(out, lse)``, out (B, N, S1, D) and lse
    (B, N, S1), both float64. Rows with every key masked give out 0 and lse −∞. ``causal`` and
    ``band`` mask keys as in :func:`attention`. ``sink``: None or (N,) sink logits, one more term of
    every row's softmax denominator with no value (FIA v2's ``learnable_sink``): a row with every key
    masked then gives out 0 and lse = its head's sink."""
    q, k, v, mask = _check_qkv(q, k, v, mask)
    band = _band(band, causal)
    if band is not None:
        hidden = blockwise.band_mask(NumpyOps, band, 0, q.shape[2], 0, k.shape[2], None)
        mask = hidden if mask is None else (mask | hidden)
    g = q.shape[1] // k.shape[1]
    k64 = np.repeat(k.astype(np.float64), g, axis=1)
    v64 = np.repeat(v.astype(np.float64), g, axis=1)
    s = np.matmul(q.astype(np.float64), np.swapaxes(k64, -1, -2)) * scale
    if mask is not None:
        s = np.where(mask, -np.inf, s)
    if sink is not None:  # the sink is one more key, of logit s_h and value 0
        sink = np.broadcast_to(np.asarray(sink, np.float64).reshape(1, -1, 1, 1), (*s.shape[:-1], 1))
        s = np.concatenate([s, sink], axis=-1)
        v64 = np.concatenate([v64, np.zeros_like(v64[..., :1, :])], axis=-2)
    m = s.max(axis=-1, keepdims=True)
    empty = np.isneginf(m)
    with np.errstate(invalid="ignore"):
        p = np.exp(s - np.where(empty, 0.0, m))
    l = p.sum(axis=-1, keepdims=True)
    out = np.where(empty, 0.0, np.matmul(p, v64) / np.where(empty, 1.0, l))
    with np.errstate(divide="ignore"):
        lse = np.where(empty, -np.inf, m + np.log(l))[..., 0]
    return out, lse


def attention(q, k, v, *, precision: str, scale: float, beta: float | None = None,
              block_q: int = 128, block_kv: int = 128, mask=None, causal: bool = False, band=None,
              sink=None, stats: dict | None = None, group_tile: bool = False):
    """Blockwise attention emulating the allocation ``precision``.

    q: (B, N, S1, D); k, v: (B, Nkv, S2, D) with N % Nkv == 0. Inputs are rounded to FP16 (an
    out-of-range value becomes Inf, as the hardware's conversion would make it). ``beta`` applies
    to the PASA allocations (default :func:`pasa_npu.beta.default_beta` for this block size and
    scale). ``mask``: bool, broadcastable to (B, N, S1, S2), True = masked out. ``band``: None or
    FIA's band rule (lo, hi), key j kept for query i only where lo <= j − i <= hi (lo None = open);
    ``causal`` is the top-left causal band (None, 0), intersected with ``band``. A band also decides
    which KV blocks each tile of ``block_q`` rows visits (:mod:`pasa_npu.blockwise`), a mask does not.
    ``sink``: None or (N,) sink logits (FIA v2's ``learnable_sink``, see :func:`reference`), taken in
    FP32. Returns ``(out, lse)``: out FP16 (B, N, S1, D), lse FP32 (B, N, S1) in the true scale. Inf/NaN
    produced by an overflow propagate exactly as the emulated hardware's would.

    ``stats``: an optional dict that ``pasa_rs`` and ``fp32_frame`` fill with their counters (added to any
    counts already there, so one dict can gather a whole study): ``row_blocks``, the (query row, KV block)
    passes (``pasa_rs``: block 1's first, learning pass not counted); ``pasa_rs``'s
    ``recomputed_row_blocks``, those that took FP32 S because FP16 S' left its range, and
    ``reshifted_row_blocks``, those shifted a second time; ``fp32_frame``'s ``moved_row_blocks``, those whose
    frame moved (a row's first block with a key counts); ``tile_blocks`` and the ``..._tile_blocks`` of each,
    the same for (tile of ``block_q`` rows of one head, KV block), the unit the kernel recomputes or closes
    a segment in (docs/golden.md). The other allocations leave it unchanged. ``group_tile``: ``fp32_frame``'s tile
    is a KV head's whole group of query heads (``block_q`` rows of each), as the AscendC kernel packs decode, instead
    of ``block_q`` rows of one head.
    """
    alloc = get_allocation(precision)
    if stats is not None and not isinstance(stats, dict):
        raise TypeError(f"stats must be None or a dict, got {type(stats).__name__}")
    q, k, v, mask = _check_qkv(q, k, v, mask)
    for name, val in (("block_q", block_q), ("block_kv", block_kv)):
        if not isinstance(val, (int, np.integer)) or val < 1:
            raise ValueError(f"{name} must be a positive integer, got {val!r}")
    band = _band(band, causal)
    if sink is not None:
        sink = np.asarray(sink, np.float32)
        if sink.shape != (q.shape[1],):
            raise ValueError(f"sink must hold one value per query head, shape ({q.shape[1]},), got {sink.shape}")
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        q16, k16, v16 = (NumpyOps.cast(x, "float16") for x in (q, k, v))
        out, lse = blockwise.grouped_attention(NumpyOps, q16, k16, v16, alloc=alloc, scale=float(scale),
                                               beta=beta, block_q=int(block_q), block_kv=int(block_kv),
                                               mask=mask, band=band, sink=sink, stats=stats,
                                               group_tile=group_tile)
    return out.astype(np.float16), lse.astype(np.float32)
