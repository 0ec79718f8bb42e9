"""Merging partial attention results through their log-sum-exp.

Attention over a key set split into parts (split-KV decode, a ring of devices each holding a
shard of the keys) is recovered exactly from each part's normalised output ``o_p`` and true-scale
log-sum-exp ``lse_p``::

    lse = log Σ_p exp(lse_p),      out = Σ_p exp(lse_p − lse) · o_p

(the blocked-reduction combiner; it needs each ``lse_p`` in the true scale, which is why every
backend returns it so). The merge runs in FP32 whatever the partials' dtype: on CUDA tensors in one
Triton kernel (the one the Triton backend's split-KV decode uses), elsewhere in PyTorch ops.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from .problem import LAYOUTS

__all__ = ["merge_partials"]


def merge_partials(outs: Sequence[torch.Tensor] | torch.Tensor, lses: Sequence[torch.Tensor] | torch.Tensor,
                   *, input_layout: str | None = None, out_dtype: torch.dtype | None = None,
                   sink: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Merge P partial attention results over disjoint key sets of the same queries.

    Arguments:
        outs: P normalised partial outputs, or one tensor holding them along a new first dim.
        lses: their log-sum-exps, float32 in the true scale, or one tensor holding them along a new first dim.
            −∞ (or FIA's LSE_NO_KEY, the most negative float32) marks a row that saw no key in that part: it
            gets no weight. A row whose lse is +∞ in any part (FIA's padded row) stays padded: output 0, lse +∞.
        input_layout: None, or the ``input_layout`` of the :func:`pasa_npu.fused_attention` calls that returned
            the partials (with ``softmax_lse_flag=True``), one of "BSH", "BSND", "BNSD", "BNSD_BSND", "TND": their
            outputs (B, S, H), (B, S, N, D), (B, N, S, D), (B, S, N, D), (T, N, D) and lses (B, N, S, 1), TND
            (T, N, 1), as that call returns them. None: each output is (..., D) and its lse (...) or (..., 1), the
            output's shape without D (as in the BNSD and TND layouts).
        out_dtype: the merged output's dtype, a floating-point ``torch.dtype``; None keeps the partials'.
        sink: None, or learnable sink logits (FIA v2's ``learnable_sink``) broadcastable to the lse's
            shape, e.g. (N, 1) for lses (..., N, S): each joins its rows' denominator once, as one
            more partial of output 0 and lse the sink. The partials must then have been computed
            without it (a sink in every part would be counted P times).

    Returns:
        (out, lse): out of one partial output's shape and ``out_dtype``; lse float32 of one partial lse's shape.
        A row with no key in any part gets out 0 and lse −∞ (or LSE_NO_KEY where every part reported that).

    Raises:
        TypeError: partials that are not floating-point tensors, an ``out_dtype`` that is not a torch.dtype.
        ValueError: no partials, a count or shape mismatch between ``outs`` and ``lses`` (lses from a call with
            ``softmax_lse_flag`` off included), an unknown ``input_layout``, an integer ``out_dtype``.
    """
    outs_t = _stack("outs", outs)
    lses_t = _stack("lses", lses)
    if outs_t.shape[0] != lses_t.shape[0]:
        raise ValueError(f"outs and lses must hold as many partials, got {outs_t.shape[0]} and {lses_t.shape[0]}")
    out_dtype = _out_dtype(outs_t.dtype if out_dtype is None else out_dtype)
    if lses_t.shape[1:] == (1,) and outs_t.shape[1:-1] != (1,):
        raise ValueError("lses hold one value per partial, fused_attention's placeholder when softmax_lse_flag is off: "
                         "call it with softmax_lse_flag=True (fused_attention_v2: return_softmax_lse=True) to merge "
                         "its results")
    to_rows, from_rows = _layout(input_layout, outs_t, lses_t)
    outs_t = to_rows(outs_t)
    trailing_one = tuple(lses_t.shape) == (*outs_t.shape[:-1], 1)
    if trailing_one:
        lses_t = lses_t[..., 0]
    if tuple(outs_t.shape[:-1]) != tuple(lses_t.shape):
        raise ValueError(f"each lse must have its output's shape without the last dim, or with a last dim of 1 "
                         f"(for fused_attention's BSH, BSND and BNSD_BSND outputs pass input_layout): outs "
                         f"{tuple(outs_t.shape)}, lses {tuple(lses_t.shape)}")
    if sink is not None:
        if not isinstance(sink, torch.Tensor) or not sink.is_floating_point():
            raise TypeError(f"sink must be None or a floating-point tensor, got {type(sink).__name__}")
        try:
            sink_lse = torch.broadcast_to(sink.to(lses_t.device, torch.float32), lses_t.shape[1:])
        except RuntimeError:
            raise ValueError(f"sink of shape {tuple(sink.shape)} does not broadcast to the lse's shape "
                             f"{tuple(lses_t.shape[1:])}") from None
        outs_t = torch.cat([outs_t, outs_t.new_zeros(1, *outs_t.shape[1:])])
        lses_t = torch.cat([lses_t.to(torch.float32), sink_lse[None]])
    out, lse = _merge(outs_t, lses_t, out_dtype)
    return from_rows(out), lse[..., None] if trailing_one else lse


#: The layouts whose output holds a row's values at (B, S, N): moved to the lse's (B, N, S) to merge.
_SEQUENCE_FIRST = ("BSH", "BSND", "BNSD_BSND")


def _layout(input_layout: str | None, outs_t: torch.Tensor, lses_t: torch.Tensor):
    """(to_rows, from_rows): the partial outputs (P, ...) of ``input_layout`` as (P, ..., D) in the order of their
    lse's rows, and the merged output back in the layout's own shape."""
    if input_layout is not None and input_layout not in LAYOUTS:
        raise ValueError(f"input_layout must be None or one of {LAYOUTS} (the fused_attention call's), got "
                         f"{input_layout!r}")
    if input_layout not in _SEQUENCE_FIRST:
        return (lambda t: t), (lambda t: t)
    if lses_t.ndim not in (4, 5) or outs_t.ndim != (3 if input_layout == "BSH" else 4) + 1:
        shape = "(B, S, H)" if input_layout == "BSH" else "(B, S, N, D)"
        raise ValueError(f"{input_layout} partials must be outputs {shape} and lses (B, N, S, 1), as fused_attention "
                         f"returns them, got outs {tuple(outs_t.shape[1:])} and lses {tuple(lses_t.shape[1:])} "
                         f"(each partial's shape)")
    if input_layout != "BSH":
        return (lambda t: t.transpose(2, 3)), (lambda t: t.transpose(1, 2).contiguous())
    heads, hidden = lses_t.shape[2], outs_t.shape[-1]
    if hidden % heads:
        raise ValueError(f"BSH partials' H = {hidden} is not a multiple of the lses' N = {heads}")
    return (lambda t: t.unflatten(-1, (heads, hidden // heads)).transpose(2, 3)), \
        (lambda t: t.transpose(1, 2).flatten(-2).contiguous())


def _out_dtype(dtype) -> torch.dtype:
    if not isinstance(dtype, torch.dtype):
        raise TypeError(f"out_dtype must be None or a floating-point torch.dtype (torch.float16, torch.bfloat16, "
                        f"torch.float32), got {dtype!r}")
    if not dtype.is_floating_point:
        raise ValueError(f"out_dtype must be a floating-point torch.dtype (torch.float16, torch.bfloat16, "
                         f"torch.float32), got {dtype} (and the partials must be floating point too)")
    return dtype


def _merge(outs_t: torch.Tensor, lses_t: torch.Tensor, out_dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    if outs_t.is_cuda:
        from .backends import triton as triton_backend

        if triton_backend.is_available(outs_t.device):
            return triton_backend.combine(outs_t, lses_t, out_dtype)
    lse = lses_t.to(torch.float32)
    padded = torch.isposinf(lse).any(0)
    top = lse.amax(0)
    ref = torch.where(torch.isfinite(top), top, torch.zeros_like(top))
    weight = torch.exp(torch.where(torch.isposinf(lse), float("-inf"), lse) - ref)
    total = weight.sum(0)
    none = total == 0
    out = (weight[..., None] * outs_t.to(torch.float32)).sum(0) / torch.where(none, 1.0, total)[..., None]
    out = torch.where((none | padded)[..., None], 0.0, out)
    merged = torch.where(none, float("-inf"), ref + torch.log(torch.where(none, 1.0, total)))
    merged = torch.where(padded, float("inf"), merged)
    return out.to(out_dtype), merged


def _stack(name: str, x) -> torch.Tensor:
    if isinstance(x, torch.Tensor):
        if x.ndim < 1 or x.shape[0] == 0:
            raise ValueError(f"{name} must hold at least one partial, got a tensor of shape {tuple(x.shape)}")
        parts = [x]
    else:
        parts = list(x)
        if not parts:
            raise ValueError(f"{name} must hold at least one partial, got none")
    for p in parts:
        if not isinstance(p, torch.Tensor) or not p.is_floating_point():
            got = p.dtype if isinstance(p, torch.Tensor) else type(p).__name__
            raise TypeError(f"{name} must be floating-point tensors (fused_attention's outputs and float32 lses), "
                            f"got {got}")
    if isinstance(x, torch.Tensor):
        return x
    shapes = {tuple(p.shape) for p in parts}
    if len(shapes) != 1:
        raise ValueError(f"{name} must all have one shape, got {sorted(shapes)}")
    return torch.stack(parts)
