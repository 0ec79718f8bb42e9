"""pasa-npu as a diffusers attention processor.

    from pasa_npu.integrations.diffusers import PasaAttnProcessor
    unet.set_attn_processor(PasaAttnProcessor())              # every Attention module of the model
    unet.set_attn_processor(PasaAttnProcessor(precision="pasa"))
    install(dit, precision="pasa")   # models without set_attn_processor (e.g. DiTTransformer2DModel)

:class:`PasaAttnProcessor` serves diffusers' ``Attention`` class (``diffusers.models.attention_processor``):
self- and cross-attention of UNets and of the transformer models built on it (DiT, PixArt, ...), and
the temporal attention of Stable Video Diffusion's ``UNetSpatioTemporalConditionModel``. It does what
``AttnProcessor2_0`` does around the attention product (spatial and group norm, Q/K norms, output
projection, residual, rescaling) and replaces ``F.scaled_dot_product_attention`` with
:func:`pasa_npu.fused_attention` (BNSD in, BSND out, the module's ``scale``).
"""

from __future__ import annotations

import torch

from ..precision import DEFAULT_PRECISION
from . import PasaSettings, attend, fia_mask

__all__ = ["PasaAttnProcessor", "install"]


class PasaAttnProcessor:
    """An attention processor for ``diffusers.models.attention_processor.Attention`` that runs
    :func:`pasa_npu.fused_attention`. The arguments mean what they mean there (precision default
    pasa_npu.DEFAULT_PRECISION). Masks: diffusers' additive masks (0 kept, −10000 or −inf masked out) and boolean
    masks (True = attend); any other additive bias raises ValueError."""

    def __init__(self, precision: str = DEFAULT_PRECISION, beta: float | None = None, block_kv: int | None = None,
                 backend: str | None = None, safety_net: bool = True):
        self.settings = PasaSettings(precision=precision, beta=beta, block_kv=block_kv, backend=backend,
                                     safety_net=safety_net)

    def __repr__(self) -> str:
        return f"PasaAttnProcessor({self.settings})"

    def __call__(self, attn, hidden_states: torch.Tensor, encoder_hidden_states: torch.Tensor | None = None,
                 attention_mask: torch.Tensor | None = None, temb: torch.Tensor | None = None, *args, **kwargs
                 ) -> torch.Tensor:
        residual = hidden_states
        if attn.spatial_norm is not None:
            hidden_states = attn.spatial_norm(hidden_states, temb)
        image_shape = None
        if hidden_states.ndim == 4:  # (B, C, H, W) feature maps attend over their H·W positions
            image_shape = hidden_states.shape
            hidden_states = hidden_states.flatten(2).transpose(1, 2)
        context = hidden_states if encoder_hidden_states is None else encoder_hidden_states
        batch, s2 = context.shape[0], context.shape[1]
        s1 = hidden_states.shape[1]

        if attn.group_norm is not None:
            hidden_states = attn.group_norm(hidden_states.transpose(1, 2)).transpose(1, 2)
        query = attn.to_q(hidden_states)
        if encoder_hidden_states is not None and attn.norm_cross:
            context = attn.norm_encoder_hidden_states(context)
        key, value = attn.to_k(context), attn.to_v(context)

        head_dim = key.shape[-1] // attn.heads
        query, key, value = (x.view(batch, -1, attn.heads, head_dim).transpose(1, 2) for x in (query, key, value))
        if attn.norm_q is not None:
            query = attn.norm_q(query)
        if attn.norm_k is not None:
            key = attn.norm_k(key)

        mask = None
        if attention_mask is not None:
            # diffusers' (B·heads, 1 or S1, S2) mask; FIA wants (B, N, S1, S2) with the full S1.
            mask = attn.prepare_attention_mask(attention_mask, s2, batch)
            mask = fia_mask(mask.view(batch, attn.heads, -1, mask.shape[-1])[..., :s2])
            mask = mask.expand(batch, attn.heads, s1, s2)

        out = attend(query, key, value, mask, attn.scale, self.settings, where=f"{type(attn).__name__}")
        hidden_states = attn.to_out[0](out.reshape(batch, s1, attn.heads * head_dim).to(query.dtype))
        hidden_states = attn.to_out[1](hidden_states)
        if image_shape is not None:
            hidden_states = hidden_states.transpose(1, 2).reshape(image_shape[0], -1, *image_shape[2:])
        if attn.residual_connection:
            hidden_states = hidden_states + residual
        return hidden_states / attn.rescale_output_factor


def install(model: torch.nn.Module, **settings) -> int:
    """Set one PasaAttnProcessor(**settings) on every ``Attention`` module of ``model`` (also of
    models that have no ``set_attn_processor``); returns how many modules it was set on."""
    from diffusers.models.attention_processor import Attention

    processor = PasaAttnProcessor(**settings)
    modules = [m for m in model.modules() if isinstance(m, Attention)]
    for m in modules:
        m.set_processor(processor)
    return len(modules)
