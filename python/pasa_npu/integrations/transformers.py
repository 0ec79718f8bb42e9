"""pasa-npu as a Hugging Face transformers attention implementation.

    from pasa_npu.integrations.transformers import register
    register()                                   # "pasa", precision pasa_npu.DEFAULT_PRECISION
    model = AutoModel.from_pretrained(path, attn_implementation="pasa")
    register("pasa_fp16", precision="fp16")      # another name, another allocation
    model.set_attn_implementation("pasa_fp16")

It supports transformers 5.23 and 5.24 (:data:`pasa_npu.integrations.TRANSFORMERS_VERSIONS`); importing it with
any other release raises ImportError saying so.

``register`` adds the name to transformers' ``AttentionInterface`` (the attention function every
model's attention layer calls) and to its ``AttentionMaskInterface``: transformers builds each
model's mask with the function registered under the model's attention implementation, and for a
name it does not know it builds none at all, so without the mask function padding and causal
masks would be silently dropped. The mask function is SDPA's boolean mask (True = attend), always
materialised for causal models (SDPA may skip it and rely on ``is_causal``); the attention function
turns it into FIA's mask (True = masked out) and calls :func:`pasa_npu.fused_attention`.

Continuous batching (``model.generate_batch``, ``init_continuous_batching``)::

    from pasa_npu.integrations.transformers import use_in_continuous_batching
    use_in_continuous_batching(model)            # registers "pasa_flash" and sets it on the model
    outputs = model.generate_batch(prompts, generation_config=generation_config)

transformers' continuous batching (5.20 and later) takes only "sdpa", "paged|eager" and names that contain
"flash", and treats the latter as FlashAttention-style functions: no mask, every request's queries and keys
packed into one sequence with ``cu_seq_lens_q/k``, and (its decode fast path, which it enables only for
FlashAttention 2/3 on CUDA and XPU) the paged KV cache with ``block_table``, ``k_cache`` and ``v_cache``,
into which the function writes the new keys and values. The attention function handles both forms: the
packed one as FIA's TND layout with cumulative lengths and sparse mode 3 (causal from the bottom-right
corner: each request's queries are the last of its keys), the paged one as FIA's PageAttention decode over
transformers' cache, read in place through the block table.
"""

from __future__ import annotations

import torch
import transformers

from . import check_transformers_version

check_transformers_version(transformers.__version__)

from transformers import AttentionInterface  # noqa: E402  (after the version check: older releases lack these)
from transformers.generation.continuous_batching.cache import PagedAttentionCache  # noqa: E402
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask  # noqa: E402

from ..precision import DEFAULT_PRECISION  # noqa: E402
from ..interface import fused_attention  # noqa: E402
from . import PasaSettings, attend, check_finite, compressed_causal_mask, fia_mask  # noqa: E402

__all__ = ["register", "use_in_continuous_batching", "make_attention_function", "pasa_mask"]

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
    -> (attn_output (B, S1, N, D), None). With continuous batching's keyword arguments (B = 1, no mask)
    it takes the packed form (``cu_seq_lens_q``/``cu_seq_lens_k``) or the paged decode form
    (``block_table``, ``k_cache``, ``v_cache``): see the module's docstring."""

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
        is_causal = is_causal if is_causal is not None else getattr(module, "is_causal", False)
        cache = kwargs.pop("cache", None)
        if isinstance(cache, PagedAttentionCache):
            # transformers < 5.24 hands continuous batching's cache to the attention function, which updates it
            # (later releases update it in the attention module): the keys and values become the requests' whole
            # keys and values, or the kwargs get the paged decode form's block table and caches.
            key, value = cache.update(key, value, module.layer_idx, kwargs)
        if scaling is None:
            scaling = query.shape[-1] ** -0.5
        if attention_mask is None and kwargs.get("cu_seq_lens_k") is not None:
            if kwargs.get("sliding_window") is not None:
                raise ValueError(f"{where}: sliding-window attention with packed sequences is not supported by "
                                 "pasa-npu's transformers integration")
            check_finite(where, settings, query=query, key=key, value=value)
            if kwargs.get("block_table") is not None:
                return _paged_decode(query, key, value, float(scaling), kwargs, settings), None
            return _packed(query, key, value, float(scaling), is_causal, kwargs, settings), None
        mask = fia_mask(attention_mask)
        s1, s2 = query.shape[2], key.shape[2]
        if mask is None and is_causal and s1 > 1:
            # What SDPA does with is_causal and no mask: causal from the top-left corner.
            mask = torch.ones(s1, s2, dtype=torch.bool, device=query.device).triu_(1)
        out = attend(query, key, value, mask, scaling, settings, where=where)
        return out, None

    return pasa_attention_forward


def _packed(query, key, value, scale: float, is_causal: bool, kwargs: dict, settings: PasaSettings) -> torch.Tensor:
    """Continuous batching's packed form: (1, N, T, D) queries and (1, Nkv, Tk, D) keys/values of every request
    in a row, request r's rows from cu_seq_lens_q[r] (keys: cu_seq_lens_k[r]); rows past the last request
    are padding. FIA's TND layout with those cumulative lengths; causal: sparse mode 3 (each request's
    queries are the last of its keys). Returns (1, T, N, D)."""
    if query.shape[0] != 1:
        raise ValueError(f"packed sequences (cu_seq_lens_q/k) need a batch of 1, got query of shape "
                         f"{tuple(query.shape)}")
    q, k, v = (t[0].transpose(0, 1) for t in (query, key, value))  # (T, N, D)
    causal = dict(sparse_mode=3, atten_mask=compressed_causal_mask(q.device)) if is_causal else {}
    out, _ = fused_attention(q, k, v, input_layout="TND", actual_seq_lengths=kwargs["cu_seq_lens_q"][1:],
                             actual_seq_lengths_kv=kwargs["cu_seq_lens_k"][1:], num_heads=q.shape[1],
                             num_key_value_heads=k.shape[1], scale=scale, **causal, **settings.options())
    return out[None]


def _paged_decode(query, key, value, scale: float, kwargs: dict, settings: PasaSettings) -> torch.Tensor:
    """Continuous batching's decode fast path: one new (1, N, B, D) query and (1, Nkv, B, D) key/value per
    request, the request's keys so far in the paged caches ``k_cache``/``v_cache`` (num_pages, page, Nkv, D),
    its pages in row r of ``block_table`` and its length, new token included, cu_seq_lens_k[r + 1] −
    cu_seq_lens_k[r] (0 for padding). Like flash_attn_with_kvcache it first writes the new key and value
    into their slot of the cache, then attends over the cache in place: FIA's PageAttention decode (BSND,
    one query row per request, the caches as (num_pages, page, Nkv·D)). Returns (1, B, N, D)."""
    k_cache, v_cache, table = kwargs["k_cache"], kwargs["v_cache"], kwargs["block_table"]
    batch, page = query.shape[2], k_cache.shape[1]
    cu = kwargs["cu_seq_lens_k"]
    lengths = (cu[1:batch + 1] - cu[:batch]).long()
    live = lengths > 0
    pos = (lengths - 1)[live]
    pages = table[live][torch.arange(pos.shape[0], device=pos.device), pos // page].long()
    for cache, new in ((k_cache, key), (v_cache, value)):
        cache[pages, pos % page] = new[0].transpose(0, 1)[live].to(cache.dtype)
    out, _ = fused_attention(query[0].transpose(0, 1)[:, None], k_cache.flatten(2), v_cache.flatten(2),
                             input_layout="BSND", block_table=table, block_size=page, actual_seq_lengths_kv=lengths,
                             num_heads=query.shape[1], num_key_value_heads=key.shape[1], scale=scale,
                             **settings.options())
    return out.transpose(0, 1)


def register(name: str = "pasa", *, precision: str = DEFAULT_PRECISION, beta: float | None = None,
             block_kv: int | None = None, backend: str | None = None, safety_net: bool = True) -> str:
    """Register ``name`` as a transformers attention implementation that runs
    :func:`pasa_npu.fused_attention` with the given allocation; returns ``name``.

    Registering a name again replaces its settings for every model that uses it (transformers looks
    the function up at each forward). ``precision``, ``beta``, ``block_kv``, ``backend`` and
    ``safety_net`` mean what they mean for :func:`pasa_npu.fused_attention`.
    """
    _check_name(name)
    AttentionInterface.register(name, make_attention_function(PasaSettings(
        precision=precision, beta=beta, block_kv=block_kv, backend=backend, safety_net=safety_net)))
    AttentionMaskInterface.register(name, pasa_mask)
    return name


def use_in_continuous_batching(model, name: str = "pasa_flash", *, precision: str = DEFAULT_PRECISION,
                               beta: float | None = None, block_kv: int | None = None, backend: str | None = None,
                               safety_net: bool = True) -> str:
    """Make ``name`` ``model``'s attention implementation for continuous batching (``model.generate_batch``,
    ``model.init_continuous_batching``), running :func:`pasa_npu.fused_attention` with the given settings (as
    for :func:`register`); returns ``name``.

    transformers' continuous batching takes only names that contain "flash" (besides its own "sdpa" and
    "paged|eager") and, for them, passes FlashAttention's packed and paged arguments, which the attention
    function takes. ``model.set_attn_implementation`` would load a FlashAttention package for such a name
    (pasa-npu's function needs none, and it fails where none is installed), so the name is set on the
    model's config directly. A name that mentions FlashAttention version 2 or 3 is refused: transformers
    would look for that version's ``flash_attn_with_kvcache``. The name gets no mask function: transformers
    then builds no mask for it (requests are told apart by ``cu_seq_lens_q/k``), so it is for continuous
    batching only; a model's ordinary forward takes the name of :func:`register`.
    """
    from transformers.utils.generic import is_flash_attention_requested

    _check_name(name)
    if not is_flash_attention_requested(requested_attention_implementation=name) \
            or is_flash_attention_requested(requested_attention_implementation=name, version=[2, 3]):
        raise ValueError(f"name must contain 'flash' (transformers' continuous batching takes no other custom "
                         f"attention name) and name no FlashAttention version after it, got {name!r}")
    AttentionInterface.register(name, make_attention_function(PasaSettings(
        precision=precision, beta=beta, block_kv=block_kv, backend=backend, safety_net=safety_net)))
    model.config._attn_implementation = name
    return name


def _check_name(name) -> None:
    if not isinstance(name, str) or not name or "|" in name or "/" in name:
        raise ValueError(f"name must be a non-empty str without '|' or '/' (transformers gives those a meaning), "
                         f"got {name!r}")
