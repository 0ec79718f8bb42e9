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

__all__ = ["merge_partials"]


def merge_partials(outs: Sequence[torch.Tensor] | torch.Tensor, lses: Sequence[torch.Tensor] | torch.Tensor,
                   *, out_dtype: torch.dtype | None = None,
                   sink: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Merge P partial attention results over disjoint key sets of the same queries.

    Arguments:
        outs: P normalised partial outputs of shape (..., D), or one tensor (P, ..., D).
        lses: their log-sum-exps, shape (...) (the outputs' shape without D) or (..., 1) (as
            fused_attention returns it), or one tensor (P, ...) or (P, ..., 1); float32 in the true scale. −∞ (or FIA's LSE_NO_KEY, the most negative
            float32) marks a row that saw no key in that part: it gets no weight. A row whose lse is
            +∞ in any part (FIA's padded row) stays padded: output 0, lse +∞.
        out_dtype: the merged output's dtype; None keeps the first partial's.
        sink: None, or learnable sink logits (FIA v2's ``learnable_sink``) broadcastable to the lse's
            shape, e.g. (N, 1) for lses (..., N, S): each joins its rows' denominator once, as one
            more partial of output 0 and lse the sink. The partials must then have been computed
            without it (a sink in every part would be counted P times).

    Returns:
        (out, lse): out (..., D) of ``out_dtype``, lse float32 of the partials' lse shape, (...) or
        (..., 1). A row with no key in any part gets out 0 and lse −∞ (or LSE_NO_KEY where every part
        reported that).

    Raises:
        ValueError: no partials, a count or shape mismatch between ``outs`` and ``lses``.
    """
    outs_t = _stack("outs", outs)
    lses_t = _stack("lses", lses)
    if outs_t.shape[0] != lses_t.shape[0]:
        raise ValueError(f"outs and lses must hold as many partials, got {outs_t.shape[0]} and {lses_t.shape[0]}")
    trailing_one = tuple(lses_t.shape) == (*outs_t.shape[:-1], 1)
    if trailing_one:
        lses_t = lses_t[..., 0]
    if tuple(outs_t.shape[:-1]) != tuple(lses_t.shape):
        raise ValueError(f"each lse must have its output's shape without the last dim, or with a last dim of 1: "
                         f"outs {tuple(outs_t.shape)}, lses {tuple(lses_t.shape)}")
    out_dtype = outs_t.dtype if out_dtype is None else out_dtype
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
    return out, lse[..., None] if trailing_one else lse


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
        return x
    parts = list(x)
    if not parts:
        raise ValueError(f"{name} must hold at least one partial, got none")
    shapes = {tuple(p.shape) for p in parts}
    if len(shapes) != 1:
        raise ValueError(f"{name} must all have one shape, got {sorted(shapes)}")
    return torch.stack(parts)
