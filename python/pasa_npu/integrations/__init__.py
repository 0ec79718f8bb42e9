"""Attention backends for model libraries (:mod:`.transformers`, :mod:`.diffusers`) and the route for
existing callers of torch_npu's fused infer attention (:mod:`.torch_npu`).

The model-library integrations end in :func:`attend`, which calls :func:`pasa_npu.fused_attention` on
the model's (B, N, S, D) query/key/value, and translate the library's mask into FIA's boolean mask
(True = masked out) with :func:`fia_mask`. This module imports none of those libraries; each
integration module imports its own library when it is imported.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, fields

import torch

from ..interface import BACKENDS, fused_attention
from ..precision import DEFAULT_PRECISION, get_allocation

__all__ = ["PasaSettings", "fia_mask", "attend", "check_finite", "compressed_causal_mask", "MASKED_BIAS",
           "TRANSFORMERS_VERSIONS", "check_transformers_version"]

#: The transformers releases :mod:`.transformers` supports, [first, end): those it is tested with (the
#: ``transformers`` extra of pyproject.toml states the same range). Continuous batching's rules for attention
#: functions, and where its paged cache is updated, change between releases (docs/integrations/transformers.md).
TRANSFORMERS_VERSIONS = ((5, 23), (5, 25))


def check_transformers_version(version: str) -> None:
    """Raise ImportError, saying what to install, unless transformers ``version`` is in
    :data:`TRANSFORMERS_VERSIONS`."""
    (lo, hi), found = TRANSFORMERS_VERSIONS, re.match(r"(\d+)\.(\d+)", version)
    if found is None or not lo <= (int(found[1]), int(found[2])) < hi:
        raise ImportError(f"pasa_npu.integrations.transformers supports transformers >={lo[0]}.{lo[1]},"
                          f"<{hi[0]}.{hi[1]} (the releases it is tested with), found {version}: "
                          f"pip install 'pasa-npu[transformers]'")

#: An additive mask entry at or below this value means "masked out". Libraries write −inf,
#: ``torch.finfo(dtype).min`` (transformers' eager masks) or −10000 (diffusers' UNet masks);
#: exp(−10000) is 0 in every float type, so a softmax already gives such a key no weight.
MASKED_BIAS = -1.0e4


@dataclass(frozen=True)
class PasaSettings:
    """pasa-npu's own arguments of :func:`pasa_npu.fused_attention` for a model's attention layers.

    precision: the allocation, one of pasa_npu.PRECISIONS (default pasa_npu.DEFAULT_PRECISION).
    beta: PASA's shift coefficient in [0, 1), None = the backend's optimal default.
    block_kv: the KV block length (None = the backend's, see :func:`pasa_npu.fused_attention`).
    backend: None (by device), "reference", "npu" or "triton".
    safety_net: fused_attention's recompute of overflowed rows on the FP32 path (False only to study
        what an allocation itself does).
    """

    precision: str = DEFAULT_PRECISION
    beta: float | None = None
    block_kv: int | None = None
    backend: str | None = None
    safety_net: bool = True

    def __post_init__(self):
        # Checked here so that a bad setting fails at registration, not in the first forward.
        get_allocation(self.precision)
        if self.beta is not None and not (isinstance(self.beta, (int, float)) and 0.0 <= self.beta < 1.0):
            raise ValueError(f"beta must be None or a number in [0, 1), got {self.beta!r}")
        if self.backend is not None and self.backend not in BACKENDS:
            raise ValueError(f"backend must be None or one of {BACKENDS}, got {self.backend!r}")

    def options(self) -> dict:
        """These settings as :func:`pasa_npu.fused_attention`'s keyword arguments (asked at every routed call:
        a plain dict of the fields, not dataclasses.asdict's deep copy)."""
        return {f.name: getattr(self, f.name) for f in fields(self)}


_COMPRESSED_CAUSAL: dict[torch.device, torch.Tensor] = {}


def compressed_causal_mask(device: torch.device) -> torch.Tensor:
    """FIA's compressed causal mask (2048 × 2048, True above the diagonal) on ``device``, made once per
    device: sparse modes 2-4 require it and take their band from the mode."""
    mask = _COMPRESSED_CAUSAL.get(device)
    if mask is None:
        mask = _COMPRESSED_CAUSAL[device] = torch.ones(2048, 2048, dtype=torch.bool, device=device).triu_(1)
    return mask


def check_finite(where: str, settings: PasaSettings, **tensors: torch.Tensor) -> None:
    """Refuse NaN/Inf in a model's attention inputs. ``where`` names the layer: in a model a non-finite
    input means an earlier layer already overflowed, which is worth saying rather than 'query contains NaN'."""
    for name, t in tensors.items():
        if t.numel() and not bool(torch.isfinite(t).all()):
            raise ValueError(
                f"{where}: the {name} holds NaN or Inf, which pasa-npu refuses. In a model this usually means an "
                f"earlier layer overflowed in FP16 (precision={settings.precision!r}); PASA's allocations "
                "'pasa_fp32' and 'pasa' remove the bias that makes FP16 attention overflow")


def fia_mask(mask: torch.Tensor | None, *, keep_is_true: bool = True) -> torch.Tensor | None:
    """FIA's boolean mask (True = masked out) from a model library's attention mask.

    ``mask`` is None, a boolean mask (True = attend when ``keep_is_true``, the convention of
    transformers' and PyTorch SDPA's boolean masks), or an additive float mask whose entries are
    0 (attend) or at most MASKED_BIAS (masked out: −inf, finfo.min, −10000). Any other additive
    value is a bias that FIA's boolean mask cannot represent: ValueError.
    """
    if mask is None:
        return None
    if mask.dtype == torch.bool:
        return ~mask if keep_is_true else mask
    if not mask.is_floating_point():
        raise TypeError(f"attention_mask must be a bool or an additive float tensor, got {mask.dtype}")
    masked = mask <= MASKED_BIAS
    if not bool((masked | (mask == 0)).all()):
        bad = mask[~(masked | (mask == 0))].flatten()[0].item()
        raise ValueError(
            f"attention_mask holds the additive value {bad!r}: pasa-npu takes masks whose entries are 0 (attend) "
            f"or <= {MASKED_BIAS:g} (masked out: -inf, finfo.min, -10000), because FIA's mask is boolean; "
            "an attention bias (ALiBi, relative position bias, soft masks) cannot be represented")
    return masked


def attend(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, atten_mask: torch.Tensor | None,
           scale: float | None, settings: PasaSettings, *, where: str = "attention") -> torch.Tensor:
    """Attention of (B, N, S1, D) queries on (B, Nkv, S2, D) keys/values (GQA: N a multiple of Nkv,
    K/V heads shared, not repeated) with FIA's bool ``atten_mask`` (True = masked out) broadcastable
    to (B, N, S1, S2). Returns (B, S1, N, D) in the query's dtype.

    ``where`` names the layer in the error raised for non-finite inputs (:func:`check_finite`).
    """
    check_finite(where, settings, query=query, key=key, value=value)
    if scale is None:
        scale = 1.0 / math.sqrt(query.shape[-1])
    out, _ = fused_attention(
        query, key, value, atten_mask=atten_mask, num_heads=query.shape[1], num_key_value_heads=key.shape[1],
        input_layout="BNSD_BSND", scale=float(scale), **settings.options())
    return out
