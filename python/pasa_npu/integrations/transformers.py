"""pasa-npu as a Hugging Face transformers attention implementation.

    from pasa_npu.integrations.transformers import register
    register()                                   # "pasa", precision pasa_npu.DEFAULT_PRECISION
    model = AutoModel.from_pretrained(path, attn_implementation="pasa")
    register("pasa_fp16", precision="fp16")      # another name, another allocation
    model.set_attn_implementation("pasa_fp16")

``register`` adds the name to transformers' ``AttentionInterface`` (the attention function every
model's attention layer calls) and to its ``AttentionMaskInterface``: transformers builds each
model's mask with the function registered under the model's attention implementation, and for a
name it does not know it builds none at all, so without the mask function padding and causal
masks would be silently dropped. The mask function is SDPA's boolean mask (True = attend), always
materialised for causal models (SDPA may skip it and rely on ``is_causal``); the attention function
turns it into FIA's mask (True = masked out) and calls :func:`pasa_npu.fused_attention`.
"""

from __future__ import annotations

import torch
from transformers import AttentionInterface
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

from ..precision import DEFAULT_PRECISION
from . import PasaSettings, attend, fia_mask

__all__ = ["register", "make_attention_function", "pasa_mask"]

# Keyword arguments that carry an additive score modification FIA cannot represent.
_UNSUPPORTED_KWARGS = ("softcap", "position_bias", "s_aux", "sinks")


def pasa_mask(*args, **kwargs):
    """transformers' mask function for "pasa": SDPA's boolean mask (True = attend), never skipped for
    causal attention, so the attention function always sees the causal and padding pattern. It may be
    None only where SDPA's would be None without ``is_causal``: full attention without padding."""
    kwargs["allow_is_causal_skip"] = False
    return sdpa_mask(*args, **kwargs)


def make_attention_function(settings: PasaSettings):
    """The attention function transformers calls, bound to ``settings``: signature
    (module, query (B, N, S1, D), key/value (B, Nkv, S2, D), attention_mask, dropout, scaling, ...)
    -> (attn_output (B, S1, N, D), None)."""

    def pasa_attention_forward(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor,
                               value: torch.Tensor, attention_mask: torch.Tensor | None, dropout: float = 0.0,
                               scaling: float | None = None, is_causal: bool | None = None, **kwargs):
        where = f"{type(module).__name__} (layer {getattr(module, 'layer_idx', '?')})"
        if dropout and dropout > 0.0:
            raise ValueError(f"{where}: attention dropout {dropout} > 0 is not supported by pasa-npu (inference "
                             "only): call model.eval() or set the config's attention dropout to 0")
        for name in _UNSUPPORTED_KWARGS:
            if kwargs.get(name) is not None:
                raise ValueError(f"{where}: '{name}' modifies the attention scores additively, which "
                                 "pasa-npu (FIA's interface) does not support; use attn_implementation='eager'")
        mask = fia_mask(attention_mask)
        s1, s2 = query.shape[2], key.shape[2]
        is_causal = is_causal if is_causal is not None else getattr(module, "is_causal", False)
        if mask is None and is_causal and s1 > 1:
            # What SDPA does with is_causal and no mask: causal from the top-left corner.
            mask = torch.ones(s1, s2, dtype=torch.bool, device=query.device).triu_(1)
        out = attend(query, key, value, mask, scaling, settings, where=where)
        return out, None

    return pasa_attention_forward


def register(name: str = "pasa", *, precision: str = DEFAULT_PRECISION, beta: float | None = None,
             block_kv: int | None = None, backend: str | None = None, safety_net: bool = True) -> str:
    """Register ``name`` as a transformers attention implementation that runs
    :func:`pasa_npu.fused_attention` with the given allocation; returns ``name``.

    Registering a name again replaces its settings for every model that uses it (transformers looks
    the function up at each forward). ``precision``, ``beta``, ``block_kv``, ``backend`` and
    ``safety_net`` mean what they mean for :func:`pasa_npu.fused_attention`.
    """
    if not isinstance(name, str) or not name or "|" in name or "/" in name:
        raise ValueError(f"name must be a non-empty str without '|' or '/' (transformers gives those a meaning), "
                         f"got {name!r}")
    settings = PasaSettings(precision=precision, beta=beta, block_kv=block_kv, backend=backend,
                            safety_net=safety_net)
    AttentionInterface.register(name, make_attention_function(settings))
    AttentionMaskInterface.register(name, pasa_mask)
    return name
