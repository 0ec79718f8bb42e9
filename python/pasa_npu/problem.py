"""FIA's arguments, validated once, as a frozen problem description every backend consumes.

:func:`make_problem` is the only place that validates the arguments of
``torch_npu.npu_fused_infer_attention_score`` (FIA) as :func:`pasa_npu.fused_attention` takes them: each
scalar by the check :mod:`pasa_npu.options` declares for it, then the tensors and what depends on them.
Its semantics (layouts, GQA, masks and sparse modes, per-batch valid lengths, softmax_lse) are taken
from FIA's documentation and, where that is silent, from the public CANN operator source;
``docs/fia.md`` states what is implemented and every deliberate difference.

A :class:`Problem` holds FP16 views of the inputs in their own layout and in (B, N, S, D), the
per-batch lengths, the user's mask and the sparse mode's band rule, the precision allocation, β and
the tile sizes, the KV block settled for the kernel that computes it (no backend changes it). Backends that run the kernel on dense per-batch jobs (``reference``, ``triton``)
iterate :meth:`Problem.jobs`; the ``npu`` backend passes the problem to the kernel natively.

Checks that need the tensors' *values* (NaN/Inf, the FP16 range of bfloat16/float32 inputs, the
contents of int8/uint8 and compressed masks) synchronise the host with the device, so they run only
when asked for (``check_inputs=True`` or the environment variable ``PASA_NPU_CHECK_INPUTS=1``); every
other check reads shapes, dtypes and Python scalars alone, so a call is free of host-device
synchronisation and can be captured in a CUDA graph or traced by ``torch.compile``.
"""

from __future__ import annotations

import math
import numbers
import os
from collections.abc import Iterator, Sequence
from typing import NamedTuple

import torch
from torch._subclasses.fake_tensor import is_fake

from .beta import check_scale as check_shift_scale
from .options import INNER_PRECISE, LAYOUTS, NO_BAND, SPARSE_MODES, check_options
from .precision import DEFAULT_PRECISION, Allocation, get_allocation

__all__ = ["Problem", "Job", "make_problem", "LAYOUTS", "SPARSE_MODES", "INNER_PRECISE", "FP16_MAX",
           "LSE_NO_KEY", "LSE_PADDED_ROW", "DEFAULT_PRECISION", "DEFAULT_BLOCK", "default_block_kv", "NO_BAND",
           "CHECK_INPUTS_ENV"]

#: The query and KV tile length when none is named (the KV block: see :func:`default_block_kv`).
DEFAULT_BLOCK = 128
CHECK_INPUTS_ENV = "PASA_NPU_CHECK_INPUTS"

FP16_MAX = 65504.0
#: softmax_lse of a valid query row that attends to no key (every key masked, or no valid key):
#: the most negative float32, the value FIA's kernels write for such rows (-3.40E+38 in its
#: decode kernel, and the row-invalid correction's max of -FLT_MAX with a FLT_MAX sum).
LSE_NO_KEY = float(torch.finfo(torch.float32).min)
#: softmax_lse of a padded query row (beyond actual_seq_lengths): FIA's prefill kernel initialises
#: the lse of rows it does not compute to 3e+99, i.e. +inf in float32.
LSE_PADDED_ROW = math.inf

_MASK_DTYPES = (torch.bool, torch.int8, torch.uint8)
_INPUT_DTYPES = (torch.float16, torch.bfloat16, torch.float32)
_COMPRESSED = 2048  # side of the compressed causal mask FIA takes for sparse_mode 2, 3, 4
_COMPRESSED_CACHE: dict[torch.device, torch.Tensor] = {}
#: FIA's PageAttention page lengths for FP16 caches.
PAGE_SIZES = tuple(range(16, 513, 16))
_SHAPE_TXT = {"BSH": "(B, S, H)", "BSND": "(B, S, N, D)", "BNSD": "(B, N, S, D)", "BNSD_BSND": "(B, N, S, D)",
              "TND": "(T, N, D)"}

Band = tuple[int | None, int]


def default_block_kv(alloc: Allocation, head_dim: int, backend: str) -> int:
    """The KV block of a call that names none (``block_kv=None``) computed by ``backend``: DEFAULT_BLOCK, but
    64 for ``fp32_frame`` on the ``triton`` backend above D = 128. The block is part of the blocked allocations'
    results (``fp32_frame`` decides its frame moves per block), so each backend's default is one rule, here."""
    if backend == "triton" and alloc.framed and head_dim > 128:
        # fp32_frame's KV block is the Triton kernel's K and V tile: above D = 128, two pipeline stages of
        # K and V fit Hopper's shared memory only at 64 keys (128 keys leave one stage, no overlap of loads).
        return 64
    return DEFAULT_BLOCK


class Job(NamedTuple):
    """One dense attention a backend computes: (b, N, s1, D) / (b, Nkv, s2, D) FP16 tensors with
    s1 >= 1 and s2 >= 1, a bool mask broadcastable to (b, N, s1, s2) (True = masked out) or None,
    and the band rule (lo, hi) of the sparse mode (keep key j for query i only where
    lo <= j − i <= hi; lo None = open) or None. ``rows`` says where its results go (see
    :meth:`Problem.jobs`)."""

    q: torch.Tensor
    k: torch.Tensor
    v: torch.Tensor
    mask: torch.Tensor | None
    band: Band | None
    rows: tuple


class Problem(NamedTuple):
    """A validated FIA call (immutable: a NamedTuple, which costs a call far less than a frozen
    dataclass). Tensors are FP16; ``query``/``key``/``value`` keep the input layout,
    ``q``/``k``/``v`` are (B, N, S, D) views of them (None for TND, whose batches are row ranges)."""

    query: torch.Tensor
    key: torch.Tensor
    value: torch.Tensor
    q: torch.Tensor | None
    k: torch.Tensor | None
    v: torch.Tensor | None
    input_layout: str
    batch: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    s1: int
    s2: int
    scale: float
    alloc: Allocation
    beta: float | None
    block_q: int
    block_kv: int
    sparse_mode: int
    pre_tokens: int
    next_tokens: int
    #: The user's mask of sparse_mode 0/1 as bool (1|B, 1|N, S1, S2), True = masked out; None for
    #: no mask and for modes 2-4 (whose rule is the band).
    user_mask: torch.Tensor | None
    #: Per-batch valid query / key lengths (None = all S1 / S2). TND: the cumulative query lengths, and
    #: the cumulative key lengths, or with a block table each batch's own key length (as in FIA). None
    #: for both where ``device_lens`` holds them.
    q_lens: tuple[int, ...] | None
    kv_lens: tuple[int, ...] | None
    softmax_lse_flag: bool
    out_dtype: torch.dtype
    device: torch.device
    #: PageAttention: the (B, max_blocks) table of the pages of each batch's keys in the caches
    #: ``key``/``value`` ((num_blocks, page, Nkv·D) or (num_blocks, Nkv, page, D)), or None for
    #: dense key/value; ``page`` is FIA's block_size (0 without a table).
    block_table: torch.Tensor | None = None
    page: int = 0
    #: FIA v2's learnable sink: (N,) logits in the true scale, float32/bfloat16/float16 as given, or None.
    sink: torch.Tensor | None = None
    #: TND with a block table and lengths given as CUDA tensors: (cumulative query lengths, key lengths),
    #: int32/int64 (B,) tensors left on the device for a kernel to read (a CUDA graph replays them with
    #: whatever they then hold); ``q_lens``/``kv_lens`` are then None. :meth:`on_host` reads them.
    device_lens: tuple[torch.Tensor, torch.Tensor] | None = None

    @property
    def paged(self) -> bool:
        return self.block_table is not None

    def on_host(self) -> "Problem":
        """This problem with its lengths on the host: itself, or for ``device_lens`` the values read (a
        host-device synchronisation) and checked as host lengths are."""
        if self.device_lens is None:
            return self
        q_lens = _cumulative_lengths("actual_seq_lengths", self.device_lens[0], self.query.shape[0])
        kv_lens = _tnd_lengths(len(q_lens), self.device_lens[1], self.key.shape[0], True,
                               self.block_table.shape[1] * self.page)
        return self._replace(q_lens=q_lens, kv_lens=kv_lens, device_lens=None)

    @property
    def decode(self) -> bool:
        """FIA's Q_S == 1 branch, where actual_seq_lengths, sparse_mode and the tokens have no effect."""
        return self.s1 == 1 and self.input_layout != "TND"

    @property
    def tnd(self) -> bool:
        return self.input_layout == "TND"

    def out_shape(self) -> tuple[int, ...]:
        """attention_out's shape: the query's, except BNSD_BSND, whose output is BSND."""
        if self.input_layout == "BNSD_BSND":
            return (self.batch, self.s1, self.num_heads, self.head_dim)
        return tuple(self.query.shape)

    def with_allocation(self, precision: str) -> "Problem":
        """The same call computed in another allocation (the safety net's wider path)."""
        return self._replace(alloc=get_allocation(precision))

    def lse_shape(self) -> tuple[int, ...]:
        if not self.softmax_lse_flag:
            return (1,)
        if self.tnd:
            return (self.query.shape[0], self.num_heads, 1)
        return (self.batch, self.num_heads, self.s1, 1)

    def band(self, s1: int, s2: int) -> Band | None:
        """The sparse mode's rule for a batch of s1 valid queries and s2 valid keys as (lo, hi):
        key j is kept for query i only where lo <= j − i <= hi (top-left origin; lo None = open);
        None where the mode adds nothing."""
        mode = self.sparse_mode
        if self.decode or mode == 1 or (mode == 0 and self.user_mask is None):
            return None
        return band_rule(mode, self.pre_tokens, self.next_tokens, s1, s2)

    def jobs(self) -> Iterator[Job]:
        """The dense attentions that make up this problem, each on exactly its valid rows and keys
        (so the last KV block of a short sequence is a real tail, not a masked pad), with the band
        apart from the mask: a backend's query tiles visit only the KV blocks the band shows them.

        ``Job.rows`` is (batch slice, row slice) into (B, N, S1) results, or for TND the row slice
        into (T, N) results. Batches with no valid query row yield no job (their rows stay padded);
        a job with no key is not yielded either, its rows get out 0 and lse −∞."""
        if self.tnd:
            q0 = k0 = 0
            for i, (q1, k1) in enumerate(zip(self.q_lens, self.kv_lens)):
                if self.paged:  # the batch's own key length, its keys in its pages
                    k0, k1 = 0, k1
                r, c = q1 - q0, k1 - k0
                if r > 0 and c > 0:
                    q = self.query[q0:q1].transpose(0, 1)[None]
                    if self.paged:
                        k, v = self.gather_pages(i, c)
                    else:
                        k, v = (t[k0:k1].transpose(0, 1)[None] for t in (self.key, self.value))
                    yield Job(q, k, v, None, self.band(r, c), (slice(q0, q1),))
                q0, k0 = q1, k1
            return
        if self.query.numel() == 0:
            return
        if self.q_lens is None and self.kv_lens is None:
            if self.s2 > 0:
                yield Job(self.q, self.k, self.v, self.user_mask, self.band(self.s1, self.s2),
                          (slice(None), slice(None)))
            return
        for i in range(self.batch):
            r = self.s1 if self.q_lens is None else self.q_lens[i]
            c = self.s2 if self.kv_lens is None else self.kv_lens[i]
            if r == 0 or c == 0:
                continue
            um = None
            if self.user_mask is not None:
                um = self.user_mask[i:i + 1] if self.user_mask.shape[0] > 1 else self.user_mask
                um = um[:, :, :r, :c]
            if self.paged:
                k, v = self.gather_pages(i, c)
            else:
                k, v = self.k[i:i + 1, :, :c], self.v[i:i + 1, :, :c]
            yield Job(self.q[i:i + 1, :, :r], k, v, um, self.band(r, c), (slice(i, i + 1), slice(0, r)))

    def gather_pages(self, batch: int, length: int) -> tuple[torch.Tensor, torch.Tensor]:
        """PageAttention: the first ``length`` keys and values of ``batch`` gathered from the caches
        through its row of the block table, as (1, Nkv, length, D)."""
        pages = self.block_table[batch, :-(-length // self.page)].long()
        out = []
        for cache in (self.key, self.value):
            try:
                blocks = cache.index_select(0, pages)
            except IndexError as e:  # CPU tensors: a block id past the cache (device tensors assert)
                raise ValueError(f"block_table[{batch}] holds a block id outside the cache's "
                                 f"{cache.shape[0]} blocks ({e}); pass check_inputs=True to check tables "
                                 "before any work") from None
            if cache.ndim == 3:  # (pages, page, Nkv·D)
                kv = blocks.reshape(-1, self.num_kv_heads, self.head_dim)[:length].transpose(0, 1)
            else:  # (pages, Nkv, page, D)
                kv = blocks.transpose(0, 1).reshape(self.num_kv_heads, -1, self.head_dim)[:, :length]
            out.append(kv[None])
        return out[0], out[1]

    def padded_rows(self) -> torch.Tensor | None:
        """True for the query rows past a batch's valid length (FIA's padding), as (B, 1, S1) (TND:
        (T, 1): the rows after the last batch's), broadcasting over the heads; None for none."""
        if self.device_lens is not None:
            return self.on_host().padded_rows()
        if self.q_lens is None or self.decode:
            return None
        if self.tnd:
            return torch.arange(self.query.shape[0], device=self.device)[:, None] >= self.q_lens[-1]
        # One fill per padded batch: the lengths are host ints, and a tensor of them on the device would
        # be a host-to-device copy (a synchronisation, and a read of host memory a CUDA graph cannot replay).
        padded = torch.zeros(self.batch, 1, self.s1, dtype=torch.bool, device=self.device)
        for i, length in enumerate(self.q_lens):
            if length < self.s1:
                padded[i, :, length:] = True
        return padded

    def padded_results(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Results before any job ran: output 0 everywhere; lse +inf (a padded row) for rows past a
        batch's valid length and for valid rows −∞ (no key), or with a sink the head's sink logit (out 0,
        lse s_h: a row that sees no key attends to its sink alone), which the jobs then overwrite."""
        rows = (self.query.shape[0], self.num_heads) if self.tnd else (self.batch, self.num_heads, self.s1)
        out = torch.zeros(*rows, self.head_dim, dtype=torch.float16, device=self.device)
        lse = torch.full(rows, -math.inf, dtype=torch.float32, device=self.device)
        if self.sink is not None:
            lse[:] = (self.sink.float()[:, None] if not self.tnd else self.sink.float())
        padded = self.padded_rows()
        return out, lse if padded is None else lse.masked_fill(padded, LSE_PADDED_ROW)


def band_rule(sparse_mode: int, pre_tokens: int, next_tokens: int, s1, s2) -> Band:
    """The band (lo, hi) of sparse_mode 0 (with a mask: top-left origin), 2, 3 or 4 for a batch of s1 valid
    queries and s2 valid keys (ints, or integer tensors of per-batch lengths): key j is kept for query i
    only where lo <= j − i <= hi (lo None = open). pre_tokens and next_tokens beyond FIA's int32 "no
    limit" keep the same keys as it (sequences are shorter), so they are saturated there first, and with
    int lengths lo and hi at ±(s1 + s2) (j − i lies in [1 − s1, s2 − 1]): no consumer's integer
    arithmetic overflows."""
    if sparse_mode == 2:
        return None, 0
    if sparse_mode == 3:
        return None, s2 - s1
    pre, nxt = (max(-NO_BAND, min(x, NO_BAND)) for x in (pre_tokens, next_tokens))
    lo, hi = (-pre, nxt) if sparse_mode == 0 else (-pre + (s2 - s1), nxt + (s2 - s1))  # 4: bottom-right origin
    if isinstance(s1, int) and isinstance(s2, int):
        edge = s1 + s2
        lo, hi = max(-edge, min(lo, edge)), max(-edge, min(hi, edge))
    return lo, hi


def band_mask(band: Band, s1: int, s2: int, device) -> torch.Tensor:
    """The (s1, s2) bool mask (True = masked out) of a band (lo, hi)."""
    lo, hi = band
    rel = torch.arange(s2, device=device)[None, :] - torch.arange(s1, device=device)[:, None]
    masked = rel > hi
    if lo is not None:
        masked |= rel < lo
    return masked


# ============================================================================================
# make_problem
# ============================================================================================

def make_problem(query, key, value, **options) -> Problem:
    """Validate a call of :func:`pasa_npu.fused_attention` (its docstring states the arguments; ``options`` are
    :data:`pasa_npu.options.OPTIONS` by name, those left out at their defaults) and describe it, the KV block
    included (:func:`default_block_kv` of the backend ``backend`` names, or for None of the device's kernel).
    Raises TypeError/ValueError naming the argument and what it accepts, before any work is done."""
    o = check_options(options)
    layout, num_heads, atten_mask, block_table = o["input_layout"], o["num_heads"], o["atten_mask"], o["block_table"]
    _check_inputs(query, key, value, atten_mask)
    alloc = _resolve_precision(o["precision"], o["inner_precise"])
    paged = _check_page_attention(block_table, o["block_size"])
    check_inputs = checks_values(o["check_inputs"])
    device = query.device
    sink = None if o["learnable_sink"] is None else _check_sink(o["learnable_sink"], num_heads, device, check_inputs)
    _refuse_grad(query, key, value, atten_mask, sink)
    nkv = o["num_key_value_heads"] or num_heads
    if num_heads % nkv != 0:
        raise ValueError(f"num_heads ({num_heads}) must be a multiple of num_key_value_heads ({nkv})")
    kv_name = "num_key_value_heads" if o["num_key_value_heads"] else "num_heads (num_key_value_heads=0)"
    if check_inputs or query.dtype != torch.float16:
        q16, k16, v16 = (_to_fp16(name, t, check_inputs) for name, t in
                         (("query", query), ("key", key), ("value", value)))
    else:  # nothing to check or convert: the common case, without the calls
        q16, k16, v16 = query, key, value
    if layout == "TND":
        _check_tnd_shapes(query, key, value, num_heads, nkv, kv_name, paged)
        q4 = k4 = v4 = None
        d = query.shape[2]
        b, s2, user_mask, q_lens, kv_lens, device_lens = _tnd_parts(o, query, key, value, nkv, d, kv_name, paged,
                                                                     check_inputs)
        s1 = 0
    else:
        if paged:
            q4, k4, v4 = _query_bnsd(q16, layout, num_heads), None, None
            s2 = _check_pages(block_table, o["block_size"], key, value, q4.shape[0], nkv, q4.shape[3], kv_name)
        else:
            q4, k4, v4 = _to_bnsd(q16, k16, v16, layout, num_heads, nkv, kv_name)
            s2 = k4.shape[2]
        b, _, s1, d = q4.shape
        user_mask, q_lens, kv_lens = _dense_parts(o, b, s1, s2, paged, check_inputs)
        device_lens = None
    if d == 0:
        raise ValueError("the head dim D of query/key/value must be >= 1, got 0")
    if paged:
        block_table = block_table[:b] if block_table.shape[0] != b else block_table
        if check_inputs:
            _check_used_pages(block_table, o["block_size"], kv_lens, key.shape[0])
    block_kv = o["block_kv"] or default_block_kv(alloc, d, _kernel_of(o["backend"], device))
    if alloc.shifted:  # M = (I − β/n·J)·scale must hold its entries in FP16
        check_shift_scale(o["scale"], block_kv)
    return Problem(query=q16, key=k16, value=v16, q=q4, k=k4, v=v4, input_layout=layout, batch=b,
                   num_heads=num_heads, num_kv_heads=nkv, head_dim=d, s1=s1, s2=s2, scale=o["scale"], alloc=alloc,
                   beta=o["beta"], block_q=o["block_q"] or DEFAULT_BLOCK, block_kv=block_kv,
                   sparse_mode=o["sparse_mode"], pre_tokens=o["pre_tokens"], next_tokens=o["next_tokens"],
                   user_mask=user_mask, q_lens=q_lens, kv_lens=kv_lens, softmax_lse_flag=o["softmax_lse_flag"],
                   out_dtype=query.dtype, device=device, block_table=block_table if paged else None,
                   page=o["block_size"] if paged else 0, sink=sink, device_lens=device_lens)


def _kernel_of(backend: str | None, device: torch.device) -> str:
    """Whose KV block a call takes when it names none: the backend named, or for None the kernel of the
    device (Triton on CUDA tensors, also where the reference backend stands in for it, so that a result does
    not depend on what is installed; the AscendC kernel on NPU tensors; the reference backend elsewhere)."""
    if backend is not None:
        return backend
    return {"cuda": "triton", "npu": "npu", "privateuseone": "npu"}.get(device.type, "reference")


def _check_inputs(query, key, value, atten_mask) -> None:
    """query, key, value and atten_mask: types, dtypes and one device."""
    if not (isinstance(query, torch.Tensor) and isinstance(key, torch.Tensor) and isinstance(value, torch.Tensor)):
        for name, t in (("query", query), ("key", key), ("value", value)):
            _check_tensor(name, t)
    dtype, device = query.dtype, query.device
    if dtype not in _INPUT_DTYPES:
        raise ValueError(f"query must be float16, bfloat16 or float32, got {dtype}")
    for name, t in (("key", key), ("value", value)):
        if t.dtype != dtype:
            raise ValueError(f"{name} must have query's dtype {dtype}, got {t.dtype}")
        if t.device != device:
            raise ValueError(f"{name} is on {t.device} but query is on {device}; all tensors must be on one device")
    if atten_mask is not None:
        _check_tensor("atten_mask", atten_mask)
        if atten_mask.device != device:
            raise ValueError(f"atten_mask is on {atten_mask.device} but query is on {device}; "
                             "all tensors must be on one device")
        if atten_mask.dtype not in _MASK_DTYPES:
            raise ValueError(f"atten_mask must be a bool, int8 or uint8 tensor (True/1 = masked out), "
                             f"got {atten_mask.dtype}")


def _refuse_grad(query, key, value, atten_mask, sink) -> None:
    named = (("query", query), ("key", key), ("value", value), ("atten_mask", atten_mask), ("learnable_sink", sink))
    if any(t is not None and t.requires_grad for _, t in named) and torch.is_grad_enabled():
        name = next(name for name, t in named if t is not None and t.requires_grad)
        raise ValueError(f"{name} requires grad: fused_attention is inference-only (it has no backward); "
                         "call it under torch.no_grad() or torch.inference_mode(), or pass detached tensors")


def _tnd_parts(o: dict, query, key, value, nkv, d, kv_name, paged, check_inputs):
    """TND's batch count, key capacity (a table row's keys with a block_table), no user mask, and the lengths:
    host tuples, or device tensors (:func:`keeps_lengths_on_device`)."""
    sparse_mode, atten_mask = o["sparse_mode"], o["atten_mask"]
    q_arg, kv_arg = o["actual_seq_lengths"], o["actual_seq_lengths_kv"]
    if sparse_mode == 1 or (sparse_mode == 0 and atten_mask is not None):
        raise ValueError("input_layout='TND' supports sparse_mode 0 without atten_mask and sparse_mode 2, 3, 4 "
                         f"with the compressed mask; a full atten_mask (sparse_mode={sparse_mode}) is not supported")
    _check_mask_args(atten_mask, sparse_mode, o["pre_tokens"], o["next_tokens"], decode=False,
                     check_values=check_inputs)
    device_lens = q_lens = kv_lens = None
    if keeps_lengths_on_device(q_arg, kv_arg, "TND", o["block_table"], check_inputs):
        device_lens = _device_lengths(q_arg, kv_arg, query.device)
        b = device_lens[0].shape[0]
    else:
        q_lens = _cumulative_lengths("actual_seq_lengths", q_arg, query.shape[0])
        b = len(q_lens)
    s2 = 0
    if paged:
        s2 = _check_pages(o["block_table"], o["block_size"], key, value, b, nkv, d, kv_name)
    if device_lens is None:
        kv_lens = _tnd_lengths(b, kv_arg, key.shape[0], paged, s2)
    return b, s2, None, q_lens, kv_lens, device_lens


def _dense_parts(o: dict, b: int, s1: int, s2: int, paged: bool, check_inputs: bool):
    """The user mask and the per-batch lengths of a call in BSH, BSND, BNSD or BNSD_BSND."""
    q_arg, kv_arg, atten_mask = o["actual_seq_lengths"], o["actual_seq_lengths_kv"], o["atten_mask"]
    decode = s1 == 1
    user_mask = None
    if _check_mask_args(atten_mask, o["sparse_mode"], o["pre_tokens"], o["next_tokens"], decode, check_inputs):
        user_mask = _user_mask(atten_mask, b, o["num_heads"], s1, s2, check_inputs)
    if decode:
        # FIA's decode branch (Q_S == 1) ignores actual_seq_lengths; its entries are still checked.
        for i, x in enumerate(int_list("actual_seq_lengths", q_arg) if q_arg is not None else ()):
            if x < 0:
                raise ValueError(f"actual_seq_lengths[{i}] = {x} must be non-negative")
        q_lens = None
    else:
        q_lens = _per_batch_lengths("actual_seq_lengths", q_arg, b, s1)
    if paged and kv_arg is None:
        raise ValueError("actual_seq_lengths_kv is required with block_table (PageAttention): the live length "
                         "of each batch's keys in its pages")
    kv_dim = (f"the keys a block_table row of {o['block_table'].shape[1]} pages of block_size {o['block_size']} "
              "addresses" if paged else None)
    kv_lens = _per_batch_lengths("actual_seq_lengths_kv", kv_arg, b, s2, kv_dim)
    # (Only int lengths: comparing a traced call's SymInts would make the compiled call guard on each.)
    if q_lens is not None and all(type(x) is int and x == s1 for x in q_lens):
        q_lens = None
    if not paged and kv_lens is not None and all(type(x) is int and x == s2 for x in kv_lens):
        kv_lens = None
    return user_mask, q_lens, kv_lens


def checks_values(check_inputs: bool | None) -> bool:
    """Whether a call checks its inputs' values: ``check_inputs``, or for None the environment variable."""
    if check_inputs is None:
        return os.environ.get(CHECK_INPUTS_ENV, "") not in ("", "0")
    return check_inputs


def call_signature(query, key, value, options: dict) -> tuple | None:
    """A hashable key of everything :func:`make_problem` and a backend's plan read from a call except the
    tensors' contents and addresses: each tensor's type, shape, strides, dtype, device and grad flag, every
    other argument's name, type and value (``options``: the keyword arguments by name, tensors among them;
    length tensors that reach this point are read on the device, see :func:`keeps_lengths_on_device`), and
    whether grad mode is on. Two calls with one signature get the same Problem up to its tensors, whose
    views of the inputs are the same views. None where a call has no such key and is always validated in
    full: a tensor subclass or a non-strided tensor, an argument of an unexpected type. A sequence holding
    an unhashable item gives a key that is not hashable (looking it up raises TypeError). Value checks
    (``check_inputs``) are the caller's to exclude."""
    names, options = tuple(options), tuple(options.values())
    types = tuple(map(type, options))
    if not _SIGNATURE_TYPES.issuperset(types):
        return None
    try:
        # Tensors by their description, sequences as tuples with their items' types.
        if not _CONTAINERS.isdisjoint(types):
            options = tuple(_tensor_signature(x) if t is torch.Tensor else tuple(x) if t in (list, tuple) else x
                            for x, t in zip(options, types))
            types += tuple(tuple(map(type, x)) for x, t in zip(options, types) if t in (list, tuple))
        if not (type(query) is type(key) is type(value) is torch.Tensor
                and query.layout is key.layout is value.layout is torch.strided):
            return None
        return (query.shape, query.stride(), query.dtype, query.device, query.requires_grad,
                key.shape, key.stride(), key.dtype, key.device, key.requires_grad,
                value.shape, value.stride(), value.dtype, value.device, value.requires_grad,
                torch.is_grad_enabled(), names, options, types)
    except (RuntimeError, _NoSignature):
        return None


class _NoSignature(Exception):
    pass


#: The argument types a signature holds (anything else, a tensor subclass or a NumPy scalar, is validated
#: in full on every call).
_SIGNATURE_TYPES = frozenset((type(None), bool, int, float, str, torch.Tensor, list, tuple))
_CONTAINERS = frozenset((torch.Tensor, list, tuple))


def _tensor_signature(t) -> tuple:
    if type(t) is not torch.Tensor or t.layout != torch.strided:
        raise _NoSignature
    return t.shape, t.stride(), t.dtype, t.device, t.requires_grad


# ============================================================================================
# scalar arguments
# ============================================================================================

def _check_tensor(name: str, x) -> None:
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")


def _check_page_attention(block_table, block_size) -> bool:
    """FIA's PageAttention arguments (the table's shape and contents are checked with the caches); True when
    paged. Without a table FIA ignores block_size, and so does this."""
    if block_table is None:
        return False
    _check_tensor("block_table", block_table)
    if block_table.dtype != torch.int32 or block_table.ndim != 2:
        raise ValueError(f"block_table must be a 2-D int32 tensor (B, max_blocks), FIA's dtype, got a "
                         f"{block_table.dtype} tensor of shape {tuple(block_table.shape)}")
    if block_size not in PAGE_SIZES:
        raise ValueError(f"block_size must be a multiple of 16 from 16 to 512 with a block_table (FIA's page lengths "
                         f"for FP16 caches), got {block_size}")
    return True


def _check_pages(block_table, page, key, value, b, nkv, d, kv_name) -> int:
    """The paged caches and the table's shape; returns the longest key length a table row can address."""
    if block_table.device != key.device:
        raise ValueError(f"block_table is on {block_table.device} but key is on {key.device}")
    if block_table.shape[0] < b:
        raise ValueError(f"block_table must have a row for each batch (at least B = {b} rows; the first B are "
                         f"used), got {block_table.shape[0]} rows")
    _check_value_shape(key, value)
    want = f"(num_blocks, {page}, {nkv * d}) or (num_blocks, {nkv}, {page}, {d})"
    if key.ndim == 3:
        ok = key.shape[1] == page and key.shape[2] == nkv * d
    elif key.ndim == 4:
        ok = key.shape[1] == nkv and key.shape[2] == page and key.shape[3] == d
    else:
        ok = False
    if not ok:
        raise ValueError(f"key/value caches with block_table (PageAttention) must be {want} for block_size {page}, "
                         f"{kv_name} {nkv} and head dim {d}; got {tuple(key.shape)}")
    return block_table.shape[1] * page


def _check_used_pages(block_table, page: int, kv_lens, num_blocks: int) -> None:
    """``check_inputs``: the ids of each batch's used pages (its first ceil(length / page) entries) lie in the
    caches; ids past them are never read (-1 padding, say), as in FIA."""
    pages = torch.tensor([-(-c // page) for c in kv_lens], device=block_table.device)
    used = block_table[torch.arange(block_table.shape[1], device=block_table.device)[None, :] < pages[:, None]]
    if used.numel():
        lo, hi = int(used.min()), int(used.max())
        if lo < 0 or hi >= num_blocks:
            raise ValueError(f"block_table holds block ids in [{lo}, {hi}]; they must lie in [0, {num_blocks - 1}] "
                             "(the caches' blocks; only the pages actual_seq_lengths_kv uses are read)")


def _check_value_shape(key, value) -> None:
    if key.shape == value.shape:
        return
    if key.ndim == value.ndim and key.shape[:-1] == value.shape[:-1]:
        raise ValueError(f"value's last dim {value.shape[-1]} differs from key's {key.shape[-1]}: MLA's unequal "
                         "head dims (value head dim != query/key head dim) are not implemented")
    raise ValueError(f"value must have key's shape {tuple(key.shape)}, got {tuple(value.shape)}")


def _query_bnsd(query, layout, num_heads):
    """(B, N, S, D) view of the query alone (PageAttention: key/value are caches)."""
    ndim = 3 if layout == "BSH" else 4
    if query.ndim != ndim:
        raise ValueError(f"query must be {ndim}-D {_SHAPE_TXT[layout]} for input_layout={layout!r}, "
                         f"got shape {tuple(query.shape)}")
    if layout == "BSH":
        b, s1, h = query.shape
        if h % num_heads:
            raise ValueError(f"num_heads ({num_heads}) must divide query's hidden size H = {h} (input_layout='BSH')")
        return query.reshape(b, s1, num_heads, h // num_heads).transpose(1, 2)
    q4 = query.transpose(1, 2) if layout == "BSND" else query
    if q4.shape[1] != num_heads:
        raise ValueError(f"num_heads ({num_heads}) must equal query's N dim {q4.shape[1]} (input_layout={layout!r})")
    return q4


#: The dtypes learnable_sink is taken in (FIA v2's is bfloat16; the value is used as float32).
SINK_DTYPES = (torch.float32, torch.bfloat16, torch.float16)


def _check_sink(sink, num_heads: int, device: torch.device, check_values: bool) -> torch.Tensor:
    """FIA v2's learnable_sink: one logit per query head, (num_heads,), on query's device."""
    if not isinstance(sink, torch.Tensor):
        raise TypeError(f"learnable_sink must be None or a torch.Tensor, got {type(sink).__name__}")
    if sink.dtype not in SINK_DTYPES or tuple(sink.shape) != (num_heads,):
        raise ValueError(f"learnable_sink must be a float32, bfloat16 or float16 tensor of shape (num_heads,) = "
                         f"({num_heads},), one sink logit per query head; got a {sink.dtype} tensor of shape "
                         f"{tuple(sink.shape)}")
    if sink.device != device:
        raise ValueError(f"learnable_sink is on {sink.device} but query is on {device}; all tensors must be on one "
                         "device")
    if check_values and not bool(torch.isfinite(sink).all()):
        raise ValueError("learnable_sink contains NaN or Inf; fused_attention refuses non-finite inputs")
    return sink


def _resolve_precision(precision: str | None, inner_precise: int) -> Allocation:
    if precision is None:
        # FIA's bit 0: 0 = high precision (FP32 softmax), 1 = high performance.
        return get_allocation("fp32" if inner_precise & 1 == 0 else "fp16_fp32")
    return get_allocation(precision)


# ============================================================================================
# tensors: values, layouts
# ============================================================================================

def _to_fp16(name: str, x: torch.Tensor, check_values: bool) -> torch.Tensor:
    """``x`` as FP16. With ``check_values``: refuses NaN/Inf and, for bfloat16/float32, values past
    FP16's range (which the conversion would turn into Inf)."""
    if check_values and x.numel():
        if not bool(torch.isfinite(x).all()):
            raise ValueError(f"{name} contains NaN or Inf; fused_attention refuses non-finite inputs")
        if x.dtype != torch.float16:
            amax = float(x.abs().max())
            if amax > FP16_MAX:
                raise ValueError(f"{name} has a value of magnitude {amax:g}, which exceeds FP16's range "
                                 f"(|x| <= {FP16_MAX:g}); {name} is converted to float16 for the computation")
    return x if x.dtype == torch.float16 else x.to(torch.float16)


def _to_bnsd(query, key, value, layout, num_heads, nkv, kv_name):
    """(B, N, S, D) views of query, key, value; checks ndim, heads, batch and head-dim agreement."""
    ndim = 3 if layout == "BSH" else 4
    for name, t in (("query", query), ("key", key), ("value", value)):
        if t.ndim != ndim:
            raise ValueError(f"{name} must be {ndim}-D {_SHAPE_TXT[layout]} for input_layout={layout!r}, "
                             f"got shape {tuple(t.shape)}")
    _check_value_shape(key, value)
    if layout == "BSH":
        b, s1, h = query.shape
        if h % num_heads != 0:
            raise ValueError(f"num_heads ({num_heads}) must divide query's hidden size H = {h} "
                             "(input_layout='BSH', D = H / num_heads)")
        d = h // num_heads
        if key.shape[2] != nkv * d:
            raise ValueError(f"key's hidden size {key.shape[2]} must be {kv_name} * D = {nkv} * {d} = {nkv * d} "
                             "(input_layout='BSH')")
        if key.shape[0] != b:
            raise ValueError(f"key's batch {key.shape[0]} must equal query's batch {b}")
        return (query.reshape(b, s1, num_heads, d).transpose(1, 2),
                key.reshape(b, key.shape[1], nkv, d).transpose(1, 2),
                value.reshape(b, value.shape[1], nkv, d).transpose(1, 2))
    if layout == "BSND":
        q4, k4, v4 = (t.transpose(1, 2) for t in (query, key, value))
    else:  # BNSD, BNSD_BSND
        q4, k4, v4 = query, key, value
    if q4.shape[1] != num_heads:
        raise ValueError(f"num_heads ({num_heads}) must equal query's N dim {q4.shape[1]} "
                         f"(input_layout={layout!r})")
    if k4.shape[1] != nkv:
        raise ValueError(f"{kv_name} ({nkv}) must equal key's N dim {k4.shape[1]} (input_layout={layout!r})")
    if k4.shape[0] != q4.shape[0]:
        raise ValueError(f"key's batch {k4.shape[0]} must equal query's batch {q4.shape[0]}")
    if k4.shape[3] != q4.shape[3]:
        raise ValueError(f"key's head dim {k4.shape[3]} must equal query's head dim {q4.shape[3]}")
    return q4, k4, v4


def from_bnsd(out: torch.Tensor, layout: str) -> torch.Tensor:
    """A (B, N, S, D) result in ``layout``'s output form (BNSD_BSND gives BSND)."""
    b, n, s, d = out.shape
    if layout == "BNSD":
        return out
    bsnd = out.transpose(1, 2).contiguous()
    if layout == "BSH":
        return bsnd.reshape(b, s, n * d)
    return bsnd  # BSND, BNSD_BSND


def _check_tnd_shapes(query, key, value, num_heads, nkv, kv_name, paged):
    """TND's query (and, without a block table, key and value: with one they are caches, checked with it)."""
    for name, t in (("query", query),) if paged else (("query", query), ("key", key), ("value", value)):
        if t.ndim != 3:
            raise ValueError(f"{name} must be 3-D (T, N, D) for input_layout='TND', got shape {tuple(t.shape)}")
    if paged:
        if query.shape[1] != num_heads:
            raise ValueError(f"num_heads ({num_heads}) must equal query's N dim {query.shape[1]} (input_layout='TND')")
        return
    _check_value_shape(key, value)
    if query.shape[1] != num_heads:
        raise ValueError(f"num_heads ({num_heads}) must equal query's N dim {query.shape[1]} (input_layout='TND')")
    if key.shape[1] != nkv:
        raise ValueError(f"{kv_name} ({nkv}) must equal key's N dim {key.shape[1]} (input_layout='TND')")
    if key.shape[2] != query.shape[2]:
        raise ValueError(f"key's head dim {key.shape[2]} must equal query's head dim {query.shape[2]}")


# ============================================================================================
# valid lengths
# ============================================================================================

def int_list(name: str, x) -> list[int]:
    """A length argument as a list of ints (a tensor is read on the host). While ``torch.compile`` traces a call,
    a list may hold SymInts (kept as they are: their checks become the compiled call's guards), and a tensor is
    fake, holding no values: zeros stand in for them (one per entry, valid wherever a length is), and the call
    checks the real ones when it runs (see :func:`_traced`)."""
    if isinstance(x, torch.Tensor):
        _check_length_tensor(name, x)
        if _traced(x):
            return [0] * x.shape[0]
        return [int(v) for v in x.tolist()]
    if isinstance(x, (str, bytes)) or not isinstance(x, Sequence):
        raise TypeError(f"{name} must be None, a sequence of ints or a 1-D integer tensor, got {type(x).__name__}")
    out = []
    for v in x:
        if type(v) is torch.SymInt:
            out.append(v)
            continue
        if isinstance(v, bool) or not isinstance(v, numbers.Integral):
            raise TypeError(f"{name} must hold ints, got an element of type {type(v).__name__}")
        out.append(int(v))
    return out


def _check_length_tensor(name: str, x: torch.Tensor) -> None:
    if x.ndim != 1 or x.dtype.is_floating_point or x.dtype.is_complex or x.dtype == torch.bool:
        raise TypeError(f"{name} must be a sequence of ints or a 1-D integer tensor, got a "
                        f"{x.dtype} tensor of shape {tuple(x.shape)}")


def _per_batch_lengths(name: str, x, b: int, s: int, dim: str | None = None) -> tuple[int, ...] | None:
    """FIA's rule: one value for every batch, or at least B values of which the first B are used, each in
    [0, s]; ``dim`` says what s is (default: query's S1 or key/value's S2, by ``name``). A tensor whose values
    are unknown, torch.compile tracing the call (:func:`_traced`), has its count checked alone (it and B may be
    symbolic) and gives None: the traced problem's shapes do not depend on the values, which the call checks."""
    if x is None:
        return None
    if isinstance(x, torch.Tensor) and _traced(x):
        _check_length_tensor(name, x)
        _check_count(name, x.shape[0], b)
        return None
    vals = int_list(name, x)
    _check_count(name, len(vals), b)
    if len(vals) == 1:
        vals = vals * b
    vals = vals[:b]
    for i, v in enumerate(vals):
        if v < 0 or v > s:
            dim = dim or ("query's S1" if name == "actual_seq_lengths" else "key/value's S2")
            raise ValueError(f"{name}[{i}] = {v} must be in [0, {s}] ({dim})")
    return tuple(vals)


def _check_count(name: str, count: int, b: int) -> None:
    if count != 1 and count < b:
        raise ValueError(f"{name} must have 1 or at least B = {b} entries (FIA uses the first B), got {count}")


def _cumulative_lengths(name: str, x, total: int) -> tuple[int, ...]:
    """TND: the cumulative lengths, required, non-negative, non-decreasing, last <= total."""
    if x is None:
        raise ValueError(f"{name} is required with input_layout='TND' (cumulative lengths, one per batch)")
    vals = int_list(name, x)
    if not vals:
        raise ValueError(f"{name} must have at least one entry with input_layout='TND'")
    prev = 0
    for i, v in enumerate(vals):
        if v < 0:
            raise ValueError(f"{name}[{i}] = {v} must be non-negative")
        if v < prev:
            raise ValueError(f"{name} must be cumulative (non-decreasing) with input_layout='TND', "
                             f"got {name}[{i}] = {v} < {prev}")
        prev = v
    if vals[-1] > total:
        raise ValueError(f"{name}[-1] = {vals[-1]} exceeds the {total} rows of the tensor (input_layout='TND')")
    return tuple(vals)


def keeps_lengths_on_device(actual_seq_lengths, actual_seq_lengths_kv, input_layout, block_table, check_inputs) -> bool:
    """Whether a call leaves its lengths on the device for the kernels to read: TND with a block table, both
    lengths given as CUDA tensors, and no value checks (which read them). Such a call is sized by its shapes
    (at most T query rows per batch, at most a table row's keys) and can be captured in a CUDA graph that
    replays whatever lengths the tensors then hold. Every other call reads tensor lengths on the host. While
    torch.compile traces a call (:func:`_traced`), its length tensors, on any device, hold no values to read: they
    are left as they are too, so that B, their entries, stays symbolic."""
    if not (input_layout == "TND" and block_table is not None and not checks_values(check_inputs)
            and isinstance(actual_seq_lengths, torch.Tensor) and isinstance(actual_seq_lengths_kv, torch.Tensor)):
        return False
    return (actual_seq_lengths.is_cuda and actual_seq_lengths_kv.is_cuda) or \
        (_traced(actual_seq_lengths) and _traced(actual_seq_lengths_kv))


def _traced(t: torch.Tensor) -> bool:
    """Whether ``t`` holds no values here: torch.compile's Dynamo is tracing the code, or ``t`` is a fake tensor (an
    operator's fake implementation, and the compiler's passes, run on those)."""
    # (A tensor of the plain type holds its values: the type test spares eager calls is_fake's longer checks.)
    return torch.compiler.is_compiling() or (type(t) is not torch.Tensor and is_fake(t))


def _device_lengths(q, kv, device) -> tuple[torch.Tensor, torch.Tensor]:
    """Lengths left on the device (:func:`keeps_lengths_on_device`): their shapes, dtypes and device only (a
    traced call's on any device: the call reads host tensors on the host)."""
    for name, t in (("actual_seq_lengths", q), ("actual_seq_lengths_kv", kv)):
        if t.ndim != 1 or t.dtype not in (torch.int32, torch.int64) or t.numel() == 0:
            raise TypeError(f"{name} must be a sequence of ints or a non-empty 1-D int32/int64 tensor, got a "
                            f"{t.dtype} tensor of shape {tuple(t.shape)}")
        if t.device != device and not _traced(t):
            raise ValueError(f"{name} is on {t.device} but query is on {device}; pass lengths on query's device "
                             "(read by the kernels) or on the host")
    if kv.shape[0] < q.shape[0]:
        raise ValueError(f"actual_seq_lengths_kv must have at least one entry per batch (B = {q.shape[0]}, the "
                         f"entries of actual_seq_lengths; the first B are used) with input_layout='TND', got "
                         f"{kv.shape[0]}")
    return q, kv[:q.shape[0]]


def _tnd_lengths(b: int, kv, t_kv: int, paged: bool, capacity: int) -> tuple[int, ...]:
    """TND's key lengths for its ``b`` batches: at least b values, of which the first b are used (FIA's rule for
    the lengths; its TND tiling takes more), cumulative against the T_kv rows of key/value, or with a block
    table each batch's own length (FIA's PageAttention form), at most the ``capacity`` keys a table row
    addresses."""
    if kv is None:
        what = ("the live length of each batch's keys in its pages (one per batch, not cumulative)" if paged else
                "cumulative lengths, one per batch")
        raise ValueError(f"actual_seq_lengths_kv is required with input_layout='TND'{' and block_table' * paged}: "
                         f"{what}")
    vals = int_list("actual_seq_lengths_kv", kv)
    if len(vals) < b:
        raise ValueError(f"actual_seq_lengths_kv must have at least one entry per batch (B = {b}, the entries of "
                         f"actual_seq_lengths; the first B are used) with input_layout='TND', got {len(vals)}")
    if not paged:
        return _cumulative_lengths("actual_seq_lengths_kv", vals[:b], t_kv)
    for i, c in enumerate(vals[:b]):
        if c < 0 or c > capacity:
            raise ValueError(f"actual_seq_lengths_kv[{i}] = {c} must be in [0, {capacity}]: a block_table row "
                             f"addresses at most {capacity} keys (with block_table and input_layout='TND' each "
                             "entry is its batch's own key length)")
    return tuple(vals[:b])


# ============================================================================================
# masks
# ============================================================================================

def _as_bool_mask(m: torch.Tensor, check_values: bool) -> torch.Tensor:
    if m.dtype == torch.bool:
        return m
    if check_values and m.numel() and not bool(((m == 0) | (m == 1)).all()):
        raise ValueError("atten_mask of dtype int8/uint8 must hold only 0 (kept) and 1 (masked out)")
    return m != 0


def _check_compressed_mask(m: torch.Tensor, sparse_mode: int, check_values: bool) -> None:
    ok_shapes = ((_COMPRESSED, _COMPRESSED), (1, _COMPRESSED, _COMPRESSED), (1, 1, _COMPRESSED, _COMPRESSED))
    if tuple(m.shape) not in ok_shapes:
        raise ValueError(f"atten_mask must be FIA's compressed causal mask of shape (2048, 2048), (1, 2048, 2048) "
                         f"or (1, 1, 2048, 2048) for sparse_mode={sparse_mode}, got {tuple(m.shape)}")
    if not check_values:
        return
    m = _as_bool_mask(m, True).reshape(_COMPRESSED, _COMPRESSED)
    expected = _COMPRESSED_CACHE.get(m.device)
    if expected is None:
        expected = torch.ones(_COMPRESSED, _COMPRESSED, dtype=torch.bool, device=m.device).triu_(1)
        _COMPRESSED_CACHE[m.device] = expected
    if not torch.equal(m, expected):
        raise ValueError(f"atten_mask for sparse_mode={sparse_mode} must be the compressed causal mask "
                         "torch.triu(torch.ones(2048, 2048), diagonal=1) (1 = masked out, above the diagonal)")


def _check_mask_args(atten_mask, sparse_mode, pre, nxt, decode, check_values) -> bool:
    """Checks the mask arguments; True when ``atten_mask`` is a full user mask (modes 0 and 1).
    ``decode``: FIA's Q_S == 1 branch, where the band (pre/next tokens) has no effect."""
    if sparse_mode in (2, 3, 4):
        if atten_mask is None:
            raise ValueError(f"atten_mask is required for sparse_mode={sparse_mode}: pass FIA's compressed "
                             "causal mask torch.triu(torch.ones(2048, 2048, dtype=torch.bool), diagonal=1)")
        _check_compressed_mask(atten_mask, sparse_mode, check_values)
        if sparse_mode == 4 and pre + nxt < 0 and not decode:
            raise ValueError(f"pre_tokens ({pre}) + next_tokens ({nxt}) must be >= 0 for sparse_mode=4 "
                             "(the band would be empty)")
        return False
    if sparse_mode == 1 and atten_mask is None:
        raise ValueError("atten_mask is required for sparse_mode=1 (allMask): pass the full (S1, S2) mask")
    if atten_mask is None:
        return False
    if sparse_mode == 0 and pre + nxt < 0 and not decode:
        raise ValueError(f"pre_tokens ({pre}) + next_tokens ({nxt}) must be >= 0 for sparse_mode=0 with an "
                         "atten_mask (the band would be empty)")
    return True


def _user_mask(m: torch.Tensor, b: int, n: int, s1: int, s2: int, check_values: bool) -> torch.Tensor:
    """The full mask of sparse_mode 0/1 as a (1|B, 1|N, S1, S2) bool tensor (top-left corner)."""
    shape = tuple(m.shape)
    accepted = ("(S1, S2), (1 or B, S1, S2) or (1 or B, 1 or N, S1, S2) with S1, S2 at least the "
                "query's and key's sequence lengths" + (", or (1 or B, S2) when S1 == 1" if s1 == 1 else ""))
    if m.ndim == 2 and s1 == 1:
        m = m[:, None, None, :]  # (B, KV_S): FIA's decode mask
    elif m.ndim == 2:
        m = m[None, None]
    elif m.ndim == 3:
        m = m[:, None]
    elif m.ndim != 4:
        raise ValueError(f"atten_mask must be 2-, 3- or 4-D: {accepted}; got shape {shape}")
    mb, mn, ms1, ms2 = m.shape
    if mb not in (1, b) or mn not in (1, n) or ms1 < s1 or ms2 < s2:
        raise ValueError(f"atten_mask shape {shape} does not fit (B, N, S1, S2) = ({b}, {n}, {s1}, {s2}); "
                         f"accepted: {accepted}")
    return _as_bool_mask(m[:, :, :s1, :s2], check_values)
