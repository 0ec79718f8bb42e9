"""Context parallelism for :func:`pasa_npu.fused_attention` over ``torch.distributed``.

Each rank holds a shard of the sequence of the query, key and value and gets the attention output
of its own query rows (and their log-sum-exp) back:

* :func:`ring_attention`: the key/value shards travel around the ring of the group's ranks
  (``batch_isend_irecv``); every rank attends its queries to each shard in turn and merges the
  partial results through their log-sum-exp (:func:`pasa_npu.merge.merge_partials`, FP32). The
  exchange of the next shard is posted before the current shard is computed, so the transfer runs
  while the rank computes.
* :func:`ulysses_attention`: one ``all_to_all_single`` trades sequence shards for head groups,
  each rank runs :func:`~pasa_npu.fused_attention` on the whole sequence for ``N / world`` heads,
  and a second all-to-all returns the rows. The result is bit-identical to one device's.
* :func:`ring_ulysses_attention`: both on a 2-D mesh (Ulysses inside, ring across), as in
  USP (arXiv:2405.07719).

Shard layouts (``shard_sequence`` / ``unshard_sequence`` produce and invert them):

* without a causal mask, contiguous shards: rank r holds rows [r·S/W, (r+1)·S/W).
* causal (sparse_mode 2 or 3) with a ring of R > 1 ranks, zigzag shards: the sequence is cut into
  2R equal chunks and ring rank r holds chunks r and 2R−1−r, concatenated in that order. Every
  ring step then costs every rank the same half block, where contiguous shards would leave rank 0
  idle for all but one step.
* on a ring × Ulysses mesh, the ring shard above is cut into U equal contiguous pieces and the rank
  (ring_rank, ulysses_rank) holds piece ulysses_rank.

Errors are raised on every rank of the group: the arguments, shapes and dtypes and whether the
values are finite are exchanged once (one small ``all_gather_object``) before the main exchange,
so a mismatch or a refused input on one rank makes all ranks raise the same error instead of
leaving the others waiting. A rank that fails for any other reason (out of memory, an exception in
the caller's code before the call) cannot be detected this way: the others then raise when the
process group's timeout expires (``init_process_group(timeout=...)``; see docs/distributed.md).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

from .interface import FP16_MAX, fused_attention
from .merge import merge_partials

__all__ = ["ring_attention", "ulysses_attention", "ring_ulysses_attention", "shard_sequence",
           "unshard_sequence", "LAYOUTS"]

#: The FIA layouts the context-parallel entry points take (TND has no sequence dim to shard).
LAYOUTS: tuple[str, ...] = ("BSH", "BSND", "BNSD", "BNSD_BSND")
_CAUSAL_MODES = (2, 3)
_COMPRESSED = 2048  # FIA's compressed causal mask is (2048, 2048)
# Arguments whose meaning the context-parallel layer takes over; every other keyword goes to each
# fused_attention call unchanged.
_OWN = ("input_layout", "num_heads", "num_key_value_heads", "sparse_mode", "atten_mask", "softmax_lse_flag",
        "actual_seq_lengths", "actual_seq_lengths_kv", "pre_tokens", "next_tokens")


def ring_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, *,
                   group: dist.ProcessGroup | None = None, **fused_attention_kwargs: Any
                   ) -> tuple[torch.Tensor, torch.Tensor]:
    """Ring attention: :func:`pasa_npu.fused_attention` over a sequence sharded across ``group``.

    Arguments:
        query, key, value: this rank's shard, in ``input_layout`` (BSH, BSND, BNSD or BNSD_BSND;
            TND is refused). Every rank's tensors must have the same shapes, dtype and device type.
            Shards are contiguous, or zigzag for a causal mask (module docstring; build them with
            :func:`shard_sequence`). Query and key shards may differ in length (cross-attention
            over a sharded context) except with a causal mask.
        group: the process group of the ring; None is the default (world) group.
        **fused_attention_kwargs: the keywords of :func:`pasa_npu.fused_attention`. ``num_heads``,
            ``num_key_value_heads``, ``input_layout``, ``scale`` and the pasa-npu options
            (precision, beta, backend, block sizes) mean what they mean there. Masks: sparse_mode 0
            without ``atten_mask`` (full attention) or sparse_mode 2 / 3 with FIA's compressed
            causal mask (causal over the global sequence; the two are the same when query and key
            have one global length). ``pre_tokens`` / ``next_tokens`` have no effect in these modes,
            as in FIA. A full ``atten_mask``, sparse_mode 1 and 4 and ``actual_seq_lengths(_kv)``
            are refused (:func:`ulysses_attention` takes them).

    Returns:
        (out, lse): out, this rank's rows in the query's dtype and FIA's output layout; lse (B, N,
        S1_local, 1) float32 when ``softmax_lse_flag`` is True, else FIA's placeholder (a float32
        zero of shape (1,)).

    Raises:
        TypeError, ValueError: on every rank of the group, for a bad argument or a mismatch between
            ranks (the message names the argument or the ranks).
        RuntimeError: torch.distributed not initialised; a rank that did not take part within the
            process group's timeout, or whose process exited (the message names the call and
            carries torch.distributed's).
    """
    return _context_parallel("ring_attention", query, key, value, _Group.of(group), _Group.single(),
                             fused_attention_kwargs, use_ring=True)


def ulysses_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, *,
                      group: dist.ProcessGroup | None = None, **fused_attention_kwargs: Any
                      ) -> tuple[torch.Tensor, torch.Tensor]:
    """Ulysses (all-to-all) attention: :func:`pasa_npu.fused_attention` over a sequence sharded
    across ``group``, computed head-parallel.

    Arguments:
        query, key, value: this rank's contiguous shard (rank r holds rows [r·S/W, (r+1)·S/W)) in
            ``input_layout`` (BSH, BSND, BNSD or BNSD_BSND). Same shapes, dtype and device type on
            every rank; num_heads and num_key_value_heads must be multiples of the group size.
        group: the process group; None is the default (world) group.
        **fused_attention_kwargs: any keyword of :func:`pasa_npu.fused_attention`; they apply to
            the global sequence: ``atten_mask`` is the full mask (or the compressed causal mask),
            ``actual_seq_lengths(_kv)`` the global valid lengths, the band is global. A mask with a
            head dim of N is split by heads like the tensors.

    Returns:
        (out, lse) as :func:`ring_attention`; bit-identical to the rows of one fused_attention call
        on the unsharded tensors (heads are computed independently, so moving them changes nothing).

    Raises:
        TypeError, ValueError, RuntimeError: as :func:`ring_attention`.
    """
    return _context_parallel("ulysses_attention", query, key, value, _Group.single(), _Group.of(group),
                             fused_attention_kwargs, use_ring=False)


def ring_ulysses_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, *,
                           ring_group: dist.ProcessGroup, ulysses_group: dist.ProcessGroup,
                           **fused_attention_kwargs: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """Ring × Ulysses attention on a 2-D mesh: an all-to-all inside ``ulysses_group`` gathers the
    ring shard for N / U heads, a ring across ``ring_group`` attends it to every other ring shard,
    and a second all-to-all returns the rows.

    The groups are the two dims of a mesh: every rank belongs to one ring group of R ranks and one
    Ulysses group of U ranks, and R·U ranks take part. ``init_device_mesh(device, (R, U),
    mesh_dim_names=("ring", "ulysses"))`` builds them (``mesh.get_group("ring")``, ...), with
    global rank = ring_rank·U + ulysses_rank. The shard layout is the module docstring's (build it
    with :func:`shard_sequence` and the ranks in the two groups); masks and keywords are those of
    :func:`ring_attention`, and N and N_kv must be multiples of U.

    Returns and raises as :func:`ring_attention`.
    """
    if ring_group is None or ulysses_group is None:
        raise TypeError("ring_group and ulysses_group must both be process groups (see init_device_mesh); "
                        "use ring_attention or ulysses_attention for a single group")
    return _context_parallel("ring_ulysses_attention", query, key, value, _Group.of(ring_group),
                             _Group.of(ulysses_group), fused_attention_kwargs, use_ring=True)


# ============================================================================================
# shard layouts
# ============================================================================================

def shard_sequence(x: torch.Tensor, *, seq_dim: int, ring_rank: int = 0, ring_size: int = 1,
                   ulysses_rank: int = 0, ulysses_size: int = 1, zigzag: bool = False) -> torch.Tensor:
    """The shard of the full-sequence tensor ``x`` that rank (ring_rank, ulysses_rank) holds.

    ``seq_dim``: the sequence dim, 1 for BSH and BSND, 2 for BNSD (and for the (B, N, S, 1) lse).
    Ring-only: ulysses_size 1; Ulysses-only: ring_size 1 (the rank is then ``ulysses_rank``).
    ``zigzag``: the causal layout (module docstring); S must then be a multiple of
    2·ring_size·ulysses_size, else of ring_size·ulysses_size. Returns a view of ``x``.
    """
    _check_sizes(ring_size, ulysses_size, zigzag)
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"x must be a torch.Tensor, got {type(x).__name__}")
    seq_dim = _check_seq_dim(x, seq_dim)
    parts = ring_size * ulysses_size * (2 if zigzag else 1)
    if x.shape[seq_dim] % parts:
        raise ValueError(f"the sequence length {x.shape[seq_dim]} (dim {seq_dim}) must be a multiple of "
                         f"{'2 * ' if zigzag else ''}ring_size * ulysses_size = {parts}")
    for name, r, size in (("ring_rank", ring_rank, ring_size), ("ulysses_rank", ulysses_rank, ulysses_size)):
        if isinstance(r, bool) or not isinstance(r, int) or not 0 <= r < size:
            raise ValueError(f"{name} must be an int in [0, {size}), got {r!r}")
    if zigzag:
        c = x.shape[seq_dim] // (2 * ring_size)
        ring_shard = torch.cat([x.narrow(seq_dim, ring_rank * c, c),
                                x.narrow(seq_dim, (2 * ring_size - 1 - ring_rank) * c, c)], dim=seq_dim)
    else:
        c = x.shape[seq_dim] // ring_size
        ring_shard = x.narrow(seq_dim, ring_rank * c, c)
    piece = ring_shard.shape[seq_dim] // ulysses_size
    return ring_shard.narrow(seq_dim, ulysses_rank * piece, piece)


def unshard_sequence(shards: Sequence[torch.Tensor], *, seq_dim: int, ring_size: int = 1, ulysses_size: int = 1,
                     zigzag: bool = False) -> torch.Tensor:
    """The full-sequence tensor from every rank's shard; inverts :func:`shard_sequence`.

    ``shards[ring_rank * ulysses_size + ulysses_rank]`` is that rank's shard (the rank order of
    ``init_device_mesh(..., (ring_size, ulysses_size))``; a group's rank order for one group).
    """
    _check_sizes(ring_size, ulysses_size, zigzag)
    shards = list(shards)
    if not shards or not all(isinstance(s, torch.Tensor) for s in shards):
        raise TypeError("shards must be a non-empty sequence of tensors")
    if len(shards) != ring_size * ulysses_size:
        raise ValueError(f"shards must hold ring_size * ulysses_size = {ring_size * ulysses_size} tensors, "
                         f"got {len(shards)}")
    if len({tuple(s.shape) for s in shards}) != 1:
        raise ValueError(f"shards must all have one shape, got {sorted({tuple(s.shape) for s in shards})}")
    seq_dim = _check_seq_dim(shards[0], seq_dim)
    if zigzag and shards[0].shape[seq_dim] * ulysses_size % 2:
        raise ValueError(f"zigzag ring shards hold two chunks, so ulysses_size * the shard length "
                         f"({ulysses_size} * {shards[0].shape[seq_dim]}) must be even")
    ring_shards = [torch.cat(shards[r * ulysses_size:(r + 1) * ulysses_size], dim=seq_dim) for r in range(ring_size)]
    if not zigzag:
        return torch.cat(ring_shards, dim=seq_dim)
    c = ring_shards[0].shape[seq_dim] // 2
    chunks = [None] * (2 * ring_size)
    for r, s in enumerate(ring_shards):
        chunks[r], chunks[2 * ring_size - 1 - r] = s.split(c, dim=seq_dim)
    return torch.cat(chunks, dim=seq_dim)


def _check_sizes(ring_size, ulysses_size, zigzag):
    for name, size in (("ring_size", ring_size), ("ulysses_size", ulysses_size)):
        if isinstance(size, bool) or not isinstance(size, int) or size < 1:
            raise ValueError(f"{name} must be a positive int, got {size!r}")
    if not isinstance(zigzag, bool):
        raise TypeError(f"zigzag must be a bool, got {type(zigzag).__name__}")


def _check_seq_dim(x, seq_dim) -> int:
    if isinstance(seq_dim, bool) or not isinstance(seq_dim, int) or not -x.ndim <= seq_dim < x.ndim:
        raise ValueError(f"seq_dim must be an int in [{-x.ndim}, {x.ndim}) for a {x.ndim}-D tensor, got {seq_dim!r}")
    return seq_dim % x.ndim


# ============================================================================================
# groups and the agreement between ranks
# ============================================================================================

@dataclass(frozen=True)
class _Group:
    """A process group with its size and this rank's place in it; ``pg`` None for a group of one."""

    pg: dist.ProcessGroup | None
    size: int
    rank: int

    @staticmethod
    def of(group):
        if not dist.is_available() or not dist.is_initialized():
            raise RuntimeError("torch.distributed is not initialised: call torch.distributed.init_process_group "
                               "(with a timeout, see docs/distributed.md) on every rank first")
        pg = dist.group.WORLD if group is None else group
        return _Group(pg, dist.get_world_size(pg), dist.get_rank(pg))

    @staticmethod
    def single():
        return _Group(None, 1, 0)

    def global_rank(self, group_rank: int) -> int:
        return dist.get_global_rank(self.pg, group_rank)


@dataclass
class _Plan:
    """The call after the checks: BNSD views of the local tensors and what each step needs."""

    q: torch.Tensor
    k: torch.Tensor
    v: torch.Tensor
    layout: str
    causal: bool
    lse_flag: bool
    passthrough: dict  # keywords for the Ulysses-only call (masks, lengths, band)
    options: dict  # keywords for every fused_attention call (scale, precision, ...)


def _context_parallel(caller, query, key, value, ring: _Group, uly: _Group, kwargs, *, use_ring: bool):
    plan, error, finite = None, None, True
    try:
        plan = _plan(caller, query, key, value, ring, uly, dict(kwargs), use_ring)
        # fused_attention refuses NaN/Inf (and bf16/fp32 values beyond FP16's range); checked here so
        # that one rank's bad values stop every rank before the exchange, not one rank mid-ring.
        finite = _in_fp16_range(plan.q, plan.k, plan.v)
    except (TypeError, ValueError) as e:
        error = e
    desc = _descriptor(query, key, value, kwargs, error, finite)
    try:
        everyone = _all_descriptors(desc, (ring, uly))
    except RuntimeError as e:  # torch.distributed's timeout or a peer's closed connection
        raise RuntimeError(f"{caller}: not every rank of the group took part in the call within the process "
                           f"group's timeout (a rank failed before the call, or exited): {e}") from e
    if error is not None:
        raise error
    _check_agreement(caller, everyone, desc)
    out, lse = _run(plan, ring, uly, use_ring)
    return _to_layout(out, plan.layout), (lse[..., None] if plan.lse_flag else
                                          torch.zeros(1, dtype=torch.float32, device=out.device))


def _plan(caller, query, key, value, ring, uly, kw, use_ring) -> _Plan:
    for name, t in (("query", query), ("key", key), ("value", value)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{caller}: {name} must be a torch.Tensor, got {type(t).__name__}")
    layout = kw.pop("input_layout", "BSH")
    if layout not in LAYOUTS:
        raise ValueError(f"{caller}: input_layout must be one of {LAYOUTS}, got {layout!r}"
                         + (" (TND packs batches of different lengths into one dim, which has no sequence "
                            "shard; pad to BSND and pass actual_seq_lengths to ulysses_attention)"
                            if layout == "TND" else ""))
    heads = kw.pop("num_heads", 1)
    kv_heads = kw.pop("num_key_value_heads", 0)
    for name, val, lo in (("num_heads", heads, 1), ("num_key_value_heads", kv_heads, 0)):
        if isinstance(val, bool) or not isinstance(val, int):
            raise TypeError(f"{caller}: {name} must be an int, got {type(val).__name__}")
        if val < lo:
            raise ValueError(f"{caller}: {name} must be >= {lo}, got {val}")
    kv_heads = kv_heads or heads
    sparse_mode = kw.pop("sparse_mode", 0)
    mask = kw.pop("atten_mask", None)
    lse_flag = kw.pop("softmax_lse_flag", False)
    if not isinstance(lse_flag, bool):
        raise TypeError(f"{caller}: softmax_lse_flag must be a bool, got {type(lse_flag).__name__}")
    band_and_lengths = {k: kw.pop(k) for k in ("actual_seq_lengths", "actual_seq_lengths_kv", "pre_tokens",
                                               "next_tokens") if k in kw}
    for name, t in (("query", query), ("key", key), ("value", value)):
        if t.ndim != (3 if layout == "BSH" else 4):
            raise ValueError(f"{caller}: {name} must be {3 if layout == 'BSH' else 4}-D for input_layout="
                             f"{layout!r}, got shape {tuple(t.shape)}")
    if key.shape != value.shape:
        raise ValueError(f"{caller}: value must have key's shape {tuple(key.shape)}, got {tuple(value.shape)}")
    q, k, v = _to_bnsd(caller, query, key, value, layout, heads, kv_heads)
    for name, n in (("num_heads", heads), ("num_key_value_heads", kv_heads)):
        if n % uly.size:
            raise ValueError(f"{caller}: {name} ({n}) must be a multiple of the Ulysses group size "
                             f"{uly.size}: each rank computes {name} / {uly.size} heads")
    if not use_ring:
        # Ulysses alone: each rank runs one fused_attention call on the whole sequence, which takes
        # every mask and length of FIA's as they are; only a per-head mask needs splitting. (A ring
        # keeps its restrictions even on one rank, so that a program tried on one rank scales.)
        passthrough = dict(band_and_lengths, sparse_mode=sparse_mode, atten_mask=_heads_of_mask(mask, heads, uly))
        causal = False
    else:
        causal = _ring_mask(caller, sparse_mode, mask, band_and_lengths)
        passthrough = {}
        if causal and q.shape[2] != k.shape[2]:
            raise ValueError(f"{caller}: a causal mask needs query and key shards of one length (self-attention), "
                             f"got S1 = {q.shape[2]} and S2 = {k.shape[2]}")
        if causal and (q.shape[2] * uly.size) % 2:
            raise ValueError(f"{caller}: causal ring attention holds two zigzag chunks per ring rank, so the ring "
                             f"shard length ({q.shape[2] * uly.size}) must be even; pad the sequence to a multiple "
                             f"of 2 * ring size * Ulysses size = {2 * ring.size * uly.size}")
    return _Plan(q, k, v, layout, causal, lse_flag, passthrough, kw)


def _ring_mask(caller, sparse_mode, mask, band_and_lengths) -> bool:
    """Whether the ring runs causal; refuses the masks a ring cannot split."""
    for name in ("actual_seq_lengths", "actual_seq_lengths_kv"):
        if band_and_lengths.get(name) is not None:
            raise ValueError(f"{caller}: {name} is not supported with a ring (valid lengths of the global sequence "
                             "do not split into shards); use ulysses_attention, or leave padding rows out")
    if sparse_mode == 0 and mask is None:
        return False
    if sparse_mode in _CAUSAL_MODES:
        _check_compressed_mask(caller, mask, sparse_mode)
        return True
    raise ValueError(f"{caller}: with a ring, sparse_mode must be 0 without atten_mask (full attention) or 2 / 3 "
                     f"with FIA's compressed causal mask, got sparse_mode={sparse_mode!r}"
                     + (" with an atten_mask" if mask is not None and sparse_mode == 0 else "")
                     + "; ulysses_attention takes every mask")


def _check_compressed_mask(caller, mask, sparse_mode):
    if not isinstance(mask, torch.Tensor):
        raise ValueError(f"{caller}: sparse_mode={sparse_mode} needs atten_mask = FIA's compressed causal mask "
                         "torch.triu(torch.ones(2048, 2048, dtype=torch.bool), diagonal=1)")
    ok = (tuple(mask.shape) in ((_COMPRESSED,) * 2, (1,) + (_COMPRESSED,) * 2, (1, 1) + (_COMPRESSED,) * 2)
          and mask.dtype in (torch.bool, torch.int8, torch.uint8))
    if ok:
        want = torch.ones(_COMPRESSED, _COMPRESSED, dtype=torch.bool, device=mask.device).triu_(1)
        ok = torch.equal(mask.reshape(_COMPRESSED, _COMPRESSED) != 0, want)
    if not ok:
        raise ValueError(f"{caller}: atten_mask for sparse_mode={sparse_mode} must be FIA's compressed causal mask "
                         "torch.triu(torch.ones(2048, 2048, dtype=torch.bool), diagonal=1) (bool/int8/uint8, "
                         "shape (2048, 2048), (1, 2048, 2048) or (1, 1, 2048, 2048))")


def _heads_of_mask(mask, heads, uly):
    if isinstance(mask, torch.Tensor) and mask.ndim == 4 and mask.shape[1] == heads and heads > 1 and uly.size > 1:
        n = heads // uly.size
        return mask[:, uly.rank * n:(uly.rank + 1) * n]
    return mask


def _to_bnsd(caller, query, key, value, layout, heads, kv_heads):
    if layout == "BSH":
        for name, t, n in (("query", query, heads), ("key", key, kv_heads)):
            if t.shape[2] % n:
                raise ValueError(f"{caller}: {name}'s H ({t.shape[2]}) must be a multiple of "
                                 f"{'num_heads' if name == 'query' else 'num_key_value_heads'} ({n})")
        q = query.view(query.shape[0], query.shape[1], heads, -1).transpose(1, 2)
        k, v = (t.view(t.shape[0], t.shape[1], kv_heads, -1).transpose(1, 2) for t in (key, value))
    elif layout == "BSND":
        q, k, v = (t.transpose(1, 2) for t in (query, key, value))
    else:
        q, k, v = query, key, value
    if q.shape[1] != heads or k.shape[1] != kv_heads:
        raise ValueError(f"{caller}: num_heads ({heads}) and num_key_value_heads ({kv_heads}) must equal the "
                         f"query's and key's N dims ({q.shape[1]}, {k.shape[1]}) for input_layout={layout!r}")
    if heads % kv_heads:
        raise ValueError(f"{caller}: num_heads ({heads}) must be a multiple of num_key_value_heads ({kv_heads})")
    if k.shape[0] != q.shape[0] or k.shape[3] != q.shape[3]:
        raise ValueError(f"{caller}: key's batch and head dim {k.shape[0], k.shape[3]} must equal query's "
                         f"{q.shape[0], q.shape[3]}")
    return q, k, v


def _to_layout(out, layout):
    if layout == "BNSD":
        return out
    bsnd = out.transpose(1, 2).contiguous()
    return bsnd.reshape(bsnd.shape[0], bsnd.shape[1], -1) if layout == "BSH" else bsnd


def _in_fp16_range(*tensors) -> bool:
    # aminmax propagates NaN, and NaN fails both comparisons; Inf fails one.
    flags = [torch.stack([lo >= -FP16_MAX, hi <= FP16_MAX]).all()
             for lo, hi in (torch.aminmax(t) for t in tensors if t.numel())]
    return bool(torch.stack(flags).all()) if flags else True


def _descriptor(query, key, value, kwargs, error, finite) -> dict:
    def tensor(t):
        return (tuple(t.shape), str(t.dtype), t.device.type) if isinstance(t, torch.Tensor) else type(t).__name__

    return {
        "tensors": [tensor(t) for t in (query, key, value)],
        "kwargs": sorted((k, tensor(v) if isinstance(v, torch.Tensor) else repr(v)) for k, v in kwargs.items()),
        "finite": finite,
        "error": None if error is None else f"{type(error).__name__}: {error}",
        "rank": dist.get_rank() if dist.is_initialized() else 0,
    }


def _all_descriptors(desc, groups) -> list[dict]:
    """Every rank's descriptor on every rank: gathered over each group of the mesh in turn (after the
    ring round each rank holds its ring group's, after the Ulysses round the whole mesh's)."""
    gathered = [desc]
    for g in groups:
        if g.size == 1:
            continue
        lists = [None] * g.size
        dist.all_gather_object(lists, gathered, group=g.pg)
        gathered = [d for part in lists for d in part]
    return gathered


def _check_agreement(caller, everyone, mine):
    for d in everyone:
        if d["error"] is not None:
            kind = ValueError if d["error"].startswith("ValueError") else TypeError
            raise kind(f"{caller}: rank {d['rank']} refused its arguments ({d['error']}); every rank stops")
    for d in everyone:
        if not d["finite"]:
            raise ValueError(f"{caller}: rank {d['rank']}'s query, key or value holds NaN or Inf (or a value beyond "
                             f"FP16's range ±{FP16_MAX:g}), which fused_attention refuses; every rank stops")
    for d in everyone:
        for part in ("tensors", "kwargs"):
            if d[part] != mine[part]:
                what = ("the shape, dtype or device type of query/key/value" if part == "tensors"
                        else "the keyword arguments")
                raise ValueError(f"{caller}: {what} must agree on every rank: rank {mine['rank']} has "
                                 f"{mine[part]}, rank {d['rank']} has {d[part]}")


# ============================================================================================
# the exchanges
# ============================================================================================

def _run(plan: _Plan, ring: _Group, uly: _Group, use_ring: bool):
    q, k, v = plan.q, plan.k, plan.v
    if uly.size > 1:
        q, k, v = _seq_to_heads((q, k, v), uly)
    if use_ring:
        out, lse = _ring(q, k, v, plan, ring)
    else:
        out, lse = _call(q, k, v, plan, causal=False, passthrough=plan.passthrough)
    if uly.size > 1:
        out, lse = _heads_to_seq(out, uly), _heads_to_seq(lse[..., None], uly)[..., 0]
    return out, lse


def _call(q, k, v, plan: _Plan, *, causal: bool, passthrough: dict | None = None):
    """One fused_attention call on BNSD tensors; returns out (B, n, s1, D) and lse (B, n, s1)."""
    extra = dict(passthrough or {})
    if causal:
        extra.update(sparse_mode=2, atten_mask=_compressed_mask(q.device))
    out, lse = fused_attention(q, k, v, input_layout="BNSD", num_heads=q.shape[1], num_key_value_heads=k.shape[1],
                               softmax_lse_flag=True, **extra, **plan.options)
    return out, lse[..., 0]


_MASKS: dict[torch.device, torch.Tensor] = {}


def _compressed_mask(device):
    if device not in _MASKS:
        _MASKS[device] = torch.ones(_COMPRESSED, _COMPRESSED, dtype=torch.bool, device=device).triu_(1)
    return _MASKS[device]


def _ring(q, k, v, plan: _Plan, ring: _Group):
    """Every rank's queries against every ring shard of K/V; partials merged in source order."""
    w, me = ring.size, ring.rank
    kv = torch.stack((k, v))  # one message per step
    outs, lses = [None] * w, [None] * w
    for step in range(w):
        src = (me - step) % w
        reqs, incoming = [], None
        if step + 1 < w:
            # Posted before this step's compute so that the transfer overlaps it.
            incoming = torch.empty_like(kv)
            send_to, recv_from = ring.global_rank((me + 1) % w), ring.global_rank((me - 1) % w)
            reqs = dist.batch_isend_irecv([dist.P2POp(dist.isend, kv, send_to, ring.pg),
                                           dist.P2POp(dist.irecv, incoming, recv_from, ring.pg)])
        try:
            outs[src], lses[src] = _ring_step(q, kv[0], kv[1], plan, src, me)
        finally:
            # Also on an error: every rank posted this exchange before computing, so it completes,
            # and the group is left without a half-finished operation.
            for r in reqs:
                r.wait()
        if incoming is not None:
            kv = incoming
    # One merge in source-rank order: the result does not depend on where a rank sits in the ring,
    # and equals the merge of the same per-shard calls on one process bit for bit.
    return merge_partials(outs, lses, out_dtype=q.dtype)


def _ring_step(q, k, v, plan: _Plan, src: int, me: int):
    if not plan.causal:
        return _call(q, k, v, plan, causal=False)
    if src == me:
        # The two chunks are in increasing global order, so local causality is global causality.
        return _call(q, k, v, plan, causal=True)
    c = k.shape[2] // 2
    if src < me:
        # Chunk src precedes both of ours, chunk 2W−1−src follows both: every query sees the first.
        return _call(q, k[:, :, :c], v[:, :, :c], plan, causal=False)
    # src > me: both of src's chunks precede our second chunk and follow our first.
    o, l = _call(q[:, :, c:], k, v, plan, causal=False)
    out = torch.cat([torch.zeros_like(o[:, :, :c]), o], dim=2)
    lse = torch.cat([torch.full_like(l[:, :, :c], -math.inf), l], dim=2)
    return out, lse


def _seq_to_heads(tensors, uly: _Group):
    """(B, H, s, D) shards of the sequence -> (B, H/U, U·s, D): all of it for this rank's heads."""
    sends, recvs, works = [], [], []  # the send buffers stay referenced until the exchanges complete
    for x in tensors:
        b, h, s, d = x.shape
        sends.append(x.reshape(b, uly.size, h // uly.size, s, d).transpose(0, 1).contiguous())
        recvs.append(torch.empty_like(sends[-1]))
        works.append(dist.all_to_all_single(recvs[-1], sends[-1], group=uly.pg, async_op=True))
    for w in works:
        w.wait()
    # recv[j] is rank j's piece of the sequence for this rank's heads.
    return tuple(r.permute(1, 2, 0, 3, 4).reshape(r.shape[1], r.shape[2], -1, r.shape[4]) for r in recvs)


def _heads_to_seq(x, uly: _Group):
    """(B, H/U, U·s, D) -> (B, H, s, D): the inverse of _seq_to_heads."""
    b, hl, total, d = x.shape
    s = total // uly.size
    send = x.reshape(b, hl, uly.size, s, d).permute(2, 0, 1, 3, 4).contiguous()
    recv = torch.empty_like(send)
    dist.all_to_all_single(recv, send, group=uly.pg)
    # recv[j] is head group j of this rank's rows.
    return recv.transpose(0, 1).reshape(b, uly.size * hl, s, d)
