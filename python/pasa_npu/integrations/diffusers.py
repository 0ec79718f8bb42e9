"""pasa-npu in diffusers: an attention processor for the classic ``Attention`` class, and a "pasa"
backend of diffusers' attention dispatcher (with context parallelism).

    from pasa_npu.integrations.diffusers import PasaAttnProcessor, install, register_backend
    unet.set_attn_processor(PasaAttnProcessor())              # every Attention module of the model
    unet.set_attn_processor(PasaAttnProcessor(precision="pasa"))
    install(dit, precision="pasa")   # models without set_attn_processor (e.g. DiTTransformer2DModel)

    register_backend()                        # models whose processors call dispatch_attention_fn
    transformer.set_attention_backend("pasa")  # Flux, Wan, QwenImage, LTX, ...
    transformer.enable_parallelism(config=ContextParallelConfig(ring_degree=2))  # optional

:class:`PasaAttnProcessor` serves diffusers' ``Attention`` class (``diffusers.models.attention_processor``):
self- and cross-attention of UNets and of the transformer models built on it (DiT, PixArt, ...), and
the temporal attention of Stable Video Diffusion's ``UNetSpatioTemporalConditionModel``. It does what
``AttnProcessor2_0`` does around the attention product (spatial and group norm, Q/K norms, output
projection, residual, rescaling) and replaces ``F.scaled_dot_product_attention`` with
:func:`pasa_npu.fused_attention` (BNSD in, BSND out, the module's ``scale``).

:func:`register_backend` adds "pasa" to diffusers' attention dispatcher
(``diffusers.models.attention_dispatch``, written against diffusers 0.42.1), the path of the newer
models whose processors call ``dispatch_attention_fn``. The backend declares context-parallel
support and hands the ring, Ulysses and ring × Ulysses schedules to diffusers' own templated
implementation (``_templated_context_parallel_attention``), giving it a forward op that returns
FIA's log-sum-exp; diffusers merges the ring's partial results itself.
"""

from __future__ import annotations

import math

import torch

from ..interface import fused_attention
from ..precision import DEFAULT_PRECISION
from . import PasaSettings, attend, compressed_causal_mask, fia_mask

__all__ = ["PasaAttnProcessor", "install", "register_backend", "BACKEND_NAME"]

#: The backend's name in diffusers' dispatcher (``set_attention_backend``, ``attention_backend``).
BACKEND_NAME = "pasa"


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


# ============================================================================================
# the "pasa" backend of diffusers' attention dispatcher
# ============================================================================================

# fused_attention's keywords for every call of the backend; register_backend sets them.
_BACKEND_OPTIONS: dict = {}


def register_backend(**fused_attention_options) -> str:
    """Register pasa-npu as the "pasa" backend of diffusers' attention dispatcher; returns the name.

    ``fused_attention_options``: pasa-npu's own keywords of :func:`pasa_npu.fused_attention`
    (``precision``, ``beta``, ``backend``, block sizes), used by every call of the backend; the
    default is fused_attention's (precision pasa_npu.DEFAULT_PRECISION). Calling it again replaces them.

    Then ``model.set_attention_backend("pasa")`` (or ``with attention_backend("pasa"):``) routes
    every processor that calls ``dispatch_attention_fn`` through fused_attention, and
    ``model.enable_parallelism(config=ContextParallelConfig(ring_degree=..., ulysses_degree=...))``
    runs it under diffusers' ring / Ulysses / unified schedules. What the backend takes: diffusers'
    (B, S, H, D) tensors in float16, bfloat16 or float32 (rounded to FP16 inside, values beyond
    FP16's range refused); GQA; ``is_causal`` (without context parallelism: diffusers' templated
    schedules refuse it); masks that are boolean (True = attend) or additive with entries 0 and
    <= -1e4 (not with a ring, whose schedule would apply one rank's mask to every key shard);
    no dropout; inference only (no backward).

    diffusers 0.42.1 keys its registry by the ``AttentionBackendName`` enum and offers no call for
    a new name, so the member is added to the enum's lookup tables, the route other third-party
    backends take; the function itself goes through ``_AttentionBackendRegistry.register``.

    Raises:
        ValueError: an unknown ``precision``.
        RuntimeError: a diffusers without the dispatcher this was written against.
    """
    from ..precision import get_allocation

    if "precision" in fused_attention_options and fused_attention_options["precision"] is not None:
        get_allocation(fused_attention_options["precision"])
    try:
        from diffusers.models.attention_dispatch import (AttentionBackendName, _AttentionBackendRegistry,
                                                         _check_device, _check_shape,
                                                         _templated_context_parallel_attention)  # noqa: F401
    except ImportError as e:
        import diffusers

        raise RuntimeError(f"register_backend needs diffusers' attention dispatcher as in diffusers 0.42 "
                           f"(diffusers.models.attention_dispatch); diffusers {diffusers.__version__} lacks "
                           f"{e.name or e}") from e
    _BACKEND_OPTIONS.clear()
    _BACKEND_OPTIONS.update(fused_attention_options)
    member = AttentionBackendName._value2member_map_.get(BACKEND_NAME)
    if member is None:
        member = str.__new__(AttentionBackendName, BACKEND_NAME)
        member._name_, member._value_ = "PASA", BACKEND_NAME
        AttentionBackendName._member_map_["PASA"] = member
        AttentionBackendName._value2member_map_[BACKEND_NAME] = member
        AttentionBackendName._member_names_.append("PASA")
    if member not in _AttentionBackendRegistry._backends:
        _AttentionBackendRegistry.register(member, constraints=[_check_device, _check_shape],
                                           supports_context_parallel=True)(_pasa_dispatch_attention)
    return BACKEND_NAME


def _pasa_dispatch_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                             attn_mask: torch.Tensor | None = None, dropout_p: float = 0.0, is_causal: bool = False,
                             scale: float | None = None, enable_gqa: bool = False, return_lse: bool = False,
                             _parallel_config=None):
    """The registered backend: (B, S, H, D) in and out, lse (B, S, H) with ``return_lse``."""
    if _parallel_config is None:
        return _pasa_forward_op(None, query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa,
                                return_lse)
    from diffusers.models.attention_dispatch import _templated_context_parallel_attention

    return _templated_context_parallel_attention(
        query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa, return_lse,
        forward_op=_pasa_forward_op, backward_op=_pasa_backward_op, _parallel_config=_parallel_config)


def _pasa_forward_op(ctx, query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
                     enable_gqa=False, return_lse=False, _save_ctx=True, _parallel_config=None):
    """diffusers' forward-op protocol (the templated schedules call it once per ring step or once
    after the Ulysses all-to-all); ``ctx`` and ``_save_ctx`` serve a backward, which pasa-npu has not."""
    if dropout_p:
        raise ValueError(f"dropout_p must be 0 for the pasa backend (an inference operator), got {dropout_p}")
    if (attn_mask is not None and _parallel_config is not None
            and _parallel_config.context_parallel_config.ring_degree > 1):
        raise ValueError("the pasa backend takes no attn_mask with ring_degree > 1: diffusers' ring schedule "
                         "applies one rank's mask to every key shard; use ulysses_degree instead")
    b, s1, heads, d = query.shape
    s2, kv_heads = key.shape[1], key.shape[2]
    kwargs = dict(_BACKEND_OPTIONS)
    if is_causal:
        if attn_mask is not None:
            raise ValueError("is_causal cannot be combined with attn_mask")
        kwargs.update(sparse_mode=2, atten_mask=compressed_causal_mask(query.device))  # SDPA's is_causal: top-left
    else:
        kwargs.update(atten_mask=_dispatch_mask(attn_mask, b, s1, s2))
    out, lse = fused_attention(query, key, value, input_layout="BSND", num_heads=heads, num_key_value_heads=kv_heads,
                               scale=1.0 / math.sqrt(d) if scale is None else float(scale),
                               softmax_lse_flag=return_lse, **kwargs)
    return (out, lse[..., 0].transpose(1, 2)) if return_lse else out


def _pasa_backward_op(ctx, grad_out, *args, **kwargs):
    raise NotImplementedError("the pasa backend is inference only: pasa-npu's fused_attention has no backward")


def _dispatch_mask(mask, b, s1, s2):
    """FIA's boolean mask (True = masked out) from a dispatcher mask: bool (True = attend) or additive, of shape
    (B, S2), (S1, S2), (B, S1, S2) or 4-D broadcastable. fused_attention takes (S1, S2) as it is and checks the
    shape; a (B, S2) mask here is diffusers' per-sample key padding, and FIA's 4-D mask spans every query row."""
    mask = fia_mask(mask)
    if mask is None:
        return None
    if mask.ndim == 2 and tuple(mask.shape) == (b, s2):
        mask = mask[:, None, None, :]
    elif mask.ndim == 3:
        mask = mask[:, None]
    return mask.expand(mask.shape[0], mask.shape[1], s1, s2) if mask.ndim == 4 else mask
