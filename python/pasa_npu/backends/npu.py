"""The ``npu`` backend: the AscendC PASA kernel, deployed as the CANN custom op ``PasaFusedAttention``.

It needs an Ascend NPU, torch_npu, the op package installed by ``scripts/build_and_deploy.sh`` and the
extension ``pasa_npu._npu_ext`` that script builds (python/csrc/npu_ext/). None of these exists in this
repository's CI: there, :func:`is_available` is False and :func:`unavailable_reason` says which piece is
missing. The same kernel sources run on the CPU through the host functional model
(:mod:`pasa_npu.npu_host_model`); nothing of this module has been run on an NPU.

The backend protocol is that of :mod:`pasa_npu.backends.reference` (see :mod:`pasa_npu.interface`):
(B, N, S1, D) / (B, Nkv, S2, D) FP16 tensors, a dense bool mask (True = masked out) or None, and
(out (B, N, S1, D) FP16, lse (B, N, S1) FP32, −∞ for a row with no key) back.
"""

from __future__ import annotations

import functools

import torch

#: The allocations the kernel implements (its tiling key).
PRECISIONS: tuple[str, ...] = ("pasa", "pasa_fp32")
#: The kernel's KV block length n (M = (I − β/n·J)·scale and the default β are built for it).
BLOCK_KV = 128
# FIA's int32 "no limit" for pre_tokens / next_tokens: with sparse_mode 0 the band is then a no-op.
_NO_BAND = 2147483647
# softmax_lse the kernel writes for a row with no kept key (FIA's value, pasa_npu.interface.LSE_NO_KEY).
_LSE_NO_KEY = float(torch.finfo(torch.float32).min)


def _ext():
    """The compiled extension (ImportError when it was not built)."""
    from .. import _npu_ext  # type: ignore[attr-defined]

    return _npu_ext


@functools.lru_cache(maxsize=None)
def unavailable_reason() -> str | None:
    """Why the backend cannot run here (None when it can): the first missing piece, with what to do."""
    try:
        import torch_npu  # noqa: F401  (registers the npu device with torch)
    except ImportError as e:
        return f"torch_npu is not importable ({e}); install torch_npu matching torch and CANN"
    npu = getattr(torch, "npu", None)
    if npu is None or not npu.is_available() or npu.device_count() == 0:
        return "no Ascend NPU is visible to torch_npu (torch.npu.is_available() is False; check npu-smi info)"
    try:
        ext = _ext()
    except ImportError as e:
        return (f"the extension pasa_npu._npu_ext is not built ({e}); build and deploy with "
                "scripts/build_and_deploy.sh")
    if not ext.op_library():
        return ("the PasaFusedAttention op package is not deployed (no libcust_opapi.so with "
                "aclnnPasaFusedAttention under ASCEND_CUSTOM_OPP_PATH or ASCEND_OPP_PATH/vendors); run "
                "scripts/build_and_deploy.sh and source <install-path>/vendors/pasa/bin/set_env.bash")
    return None


def is_available() -> bool:
    """True when torch_npu imports, an NPU is present, the extension is built and the op is deployed."""
    return unavailable_reason() is None


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, precision: str, beta: float | None,
              block_q: int, block_kv: int, scale: float, mask: torch.Tensor | None):
    """PASA attention by the AscendC kernel.

    q: (B, N, S1, D) float16; k, v: (B, Nkv, S2, D) float16 with N % Nkv == 0, on an NPU; mask None or
    bool broadcastable to (B, N, S1, S2) with full S1 and S2 dims, True = masked out. ``precision`` is
    one of :data:`PRECISIONS`; ``block_kv`` must be :data:`BLOCK_KV` (the kernel's M and default β are
    built for it); ``block_q`` does not change the result (rows are independent), the tiling picks the
    kernel's. ``beta`` None takes the kernel's default for the block length and ``scale``.

    Returns out (B, N, S1, D) float16 and lse (B, N, S1) float32 in the true scale; rows with every key
    masked give out 0 and lse −∞.
    """
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {PRECISIONS} for backend 'npu' (the allocations the "
                         f"AscendC kernel implements), got {precision!r}")
    if block_kv != BLOCK_KV:
        raise ValueError(f"block_size: the AscendC kernel's KV block is {BLOCK_KV} (its shift matrix and default "
                         f"beta are built for it), got block_kv={block_kv}")
    b, n, s1, _ = q.shape
    nkv, s2 = k.shape[1], k.shape[2]
    atten_mask = None
    if mask is not None:
        atten_mask = _mask_4d(mask, b, n, s1, s2)
    out, lse = _ext().fused_attention(
        q.contiguous(), k.contiguous(), v.contiguous(), atten_mask, None, None, num_heads=n, scale=float(scale),
        pre_tokens=_NO_BAND, next_tokens=_NO_BAND, input_layout="BNSD", num_key_value_heads=nkv,
        sparse_mode=0, inner_precise=0, beta=-1.0 if beta is None else float(beta), precision=precision)
    lse = lse.reshape(b, n, s1)
    lse = torch.where(lse == _LSE_NO_KEY, float("-inf"), lse)
    return _recompute_overflowed_rows(out, lse, q, k, v, scale=scale, mask=mask)


def _recompute_overflowed_rows(out, lse, q, k, v, *, scale, mask):
    """The paper's adaptive mechanism, on the host side: PASA removes the bias of the scores, not their
    amplitude, so a row whose centred scores exceed 65504 still overflows in S' and its output is not
    finite (the kernel lets Inf/NaN propagate as the golden model does, and the inputs are finite, so
    a non-finite output row means exactly that). Those rows are recomputed on the wider ``fp32`` path
    of the reference backend (torch ops on the same device); the others keep the kernel's values."""
    bad = ~torch.isfinite(out).all(dim=-1) | torch.isnan(lse) | torch.isposinf(lse)
    if not bool(bad.any()):
        return out, lse
    from .reference import attention as reference_attention

    wide_out, wide_lse = reference_attention(q, k, v, precision="fp32", beta=None, block_q=BLOCK_KV,
                                             block_kv=BLOCK_KV, scale=scale, mask=mask)
    return torch.where(bad[..., None], wide_out, out), torch.where(bad, wide_lse, lse)


def _mask_4d(mask: torch.Tensor, b: int, n: int, s1: int, s2: int) -> torch.Tensor:
    """The mask as the op reads it: contiguous bool (1|B, 1|N, S1, S2) (broadcast dims stay 1, never copied)."""
    if mask.dtype != torch.bool:
        raise TypeError(f"mask must be a bool tensor, got {mask.dtype}")
    if mask.dim() > 4 or tuple(mask.shape[-2:]) != (s1, s2):
        raise ValueError(f"mask must have trailing dims (S1, S2) = ({s1}, {s2}) and at most 4 dims, "
                         f"got {tuple(mask.shape)}")
    m = mask.reshape((1,) * (4 - mask.dim()) + tuple(mask.shape))
    if m.shape[0] not in (1, b) or m.shape[1] not in (1, n):
        raise ValueError(f"mask must be broadcastable to (B, N, S1, S2) = ({b}, {n}, {s1}, {s2}), "
                         f"got {tuple(mask.shape)}")
    return m.contiguous()
