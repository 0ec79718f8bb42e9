"""``fused_attention``: the front end with the interface of ``torch_npu.npu_fused_infer_attention_score``.

FIA's semantics (layouts, GQA, masks and sparse modes, per-batch valid lengths, softmax_lse) are
taken from its documentation in ``torch_npu/_op_plugin_docs.py`` and, where the documentation is
silent, from the public CANN operator source (hicann/ops-transformer). ``docs/fia.md`` states what
FIA specifies, the subset implemented here, and every deliberate difference.

Everything a backend sees is normalised here: FP16 tensors in the (B, N, S, D) layout, at least one
query row and one key, and a boolean mask (True = masked out) built from ``atten_mask``,
``sparse_mode``, ``pre_tokens`` and ``next_tokens``. Batches with their own valid lengths are run
one at a time on exactly their valid rows and keys, so the last KV block of a short sequence is a
real tail and not a masked-out pad.

The backend protocol: ``attention(q, k, v, *, precision, beta, block_q, block_kv, scale, mask)``
on (B, N, S1, D) / (B, Nkv, S2, D) FP16 tensors returns out (B, N, S1, D) FP16 and lse (B, N, S1)
FP32 (−∞ for a row with no key). A backend module that sets ``ACCEPTS_BAND = True`` (``triton``)
also takes ``band=(lo, hi)``: the causal/band rule of the sparse modes (keep key j for query i only
where lo <= j − i <= hi, None for an open side), then ``mask`` holds the user's mask alone, and the
band is never materialised. Other backends get the band merged into the dense ``mask``.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence

import torch

from .precision import PRECISIONS, get_allocation

__all__ = ["fused_attention", "LAYOUTS", "BACKENDS", "LSE_NO_KEY", "LSE_PADDED_ROW", "FP16_MAX"]

LAYOUTS: tuple[str, ...] = ("BSH", "BSND", "BNSD", "BNSD_BSND", "TND")
BACKENDS: tuple[str, ...] = ("reference", "npu", "triton")
SPARSE_MODES: tuple[int, ...] = (0, 1, 2, 3, 4)
INNER_PRECISE: tuple[int, ...] = (0, 1, 2, 3)

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
_DEFAULT_BLOCK = 128
_NPU_DEVICE_TYPES = ("npu", "privateuseone")


def fused_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    *,
    atten_mask: torch.Tensor | None = None,
    actual_seq_lengths: Sequence[int] | torch.Tensor | None = None,
    actual_seq_lengths_kv: Sequence[int] | torch.Tensor | None = None,
    num_heads: int = 1,
    scale: float = 1.0,
    pre_tokens: int = 2147483647,
    next_tokens: int = 2147483647,
    input_layout: str = "BSH",
    num_key_value_heads: int = 0,
    sparse_mode: int = 0,
    inner_precise: int = 0,
    softmax_lse_flag: bool = False,
    precision: str | None = "pasa_fp32",
    beta: float | None = None,
    block_size: int | tuple[int, int] | None = None,
    backend: str | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Overflow-safe attention ``softmax(scale * Q Kᵀ + mask) V`` with FIA's interface.

    The arguments from ``query`` to ``softmax_lse_flag`` mean what they mean for
    ``torch_npu.npu_fused_infer_attention_score`` (see docs/fia.md for the subset and the
    differences); ``precision``, ``beta``, ``block_size`` and ``backend`` are pasa-npu's own.

    Arguments:
        query: the queries. float16, bfloat16 or float32; shape by ``input_layout``:
            BSH (B, S1, H) with H = num_heads * D; BSND (B, S1, N, D); BNSD and BNSD_BSND
            (B, N, S1, D); TND (T, N, D) with T the total of all batches' query rows.
        key: the keys, same dtype and device as ``query``, the same layout with S2 (or T_kv)
            rows and num_key_value_heads heads of the same head dim D.
        value: the values, the same shape as ``key``.
        atten_mask: None, or a bool / int8 / uint8 tensor (True or 1 = masked out, 0 = kept).
            sparse_mode 0 and 1: the full mask, shape (S1, S2), (1 or B, S1, S2) or
            (1 or B, 1 or N, S1, S2); its last two dims may be larger than (S1, S2) (FIA's
            alignment padding), only the top-left (S1, S2) corner is read. When S1 == 1 it may
            also be (1 or B, S2). sparse_mode 2, 3, 4: FIA's compressed causal mask, exactly
            ``torch.triu(torch.ones(2048, 2048), 1)`` of shape (2048, 2048), (1, 2048, 2048) or
            (1, 1, 2048, 2048); it is checked, and the mask is built from the mode's rule.
        actual_seq_lengths: None, or the valid query length of each batch (a sequence of ints
            or a 1-D integer tensor): one value for all batches, or at least B values (the first
            B are used), each in [0, S1]. Query rows past a batch's length are padding: their
            output is 0 and their lse +inf. Ignored when S1 == 1 (as in FIA). With TND it is
            required and cumulative (entry b = total query rows of batches 0..b, non-decreasing,
            last <= T); its length is the batch count.
        actual_seq_lengths_kv: None, or the valid key/value length of each batch, with the
            same rules against S2 (cumulative against T_kv, and required, with TND). Keys past a
            batch's length are not attended to.
        num_heads: N, the number of query heads (>= 1). Must equal the query's N dim (BSND,
            BNSD, TND) or divide H (BSH).
        scale: the factor of Q Kᵀ, a positive finite number (typically 1/sqrt(D)).
        pre_tokens: with next_tokens, the band of sparse_mode 0 (with a mask) and 4: query i
            attends to key j only if -pre_tokens <= j - i - o <= next_tokens, where o = 0 for
            mode 0 (origin at the top-left corner) and o = S2 - S1 for mode 4 (origin at the
            bottom-right corner; S1, S2 the batch's valid lengths). Ignored by modes 1, 2, 3,
            by mode 0 without a mask, and when S1 == 1. pre_tokens + next_tokens must be >= 0
            where the band applies (otherwise the band is empty).
        next_tokens: see pre_tokens.
        input_layout: "BSH", "BSND", "BNSD", "BNSD_BSND" (BNSD input, BSND output) or "TND".
        num_key_value_heads: the number of key/value heads (GQA / MQA); 0 means num_heads.
            num_heads must be a multiple of it. K/V heads are shared, never copied.
        sparse_mode: 0 no mask, or ``atten_mask`` combined with the pre/next_tokens band;
            1 ``atten_mask`` alone (required); 2 causal from the top-left corner (j <= i);
            3 causal from the bottom-right corner (j <= i + S2 - S1); 4 band from the
            bottom-right corner (see pre_tokens). Modes 2-4 require the compressed mask.
        inner_precise: FIA's 0..3. bit 0 selects FIA's high-precision (0, 2) or
            high-performance (1, 3) path; it picks the allocation only when precision is None.
            bit 1 (FIA's "row invalid" correction) is always on here: a row with every key
            masked gets output 0 (see docs/fia.md).
        softmax_lse_flag: whether to return the log-sum-exp of each row's scaled scores.
        precision: the precision allocation, one of ``pasa_npu.PRECISIONS`` ("fp32",
            "fp16_fp32", "fp16", "pasa", "pasa_fp32"); None follows inner_precise: "fp32" for 0
            and 2, "fp16_fp32" for 1 and 3. The default "pasa_fp32" (PASA's shifted FP16 scores
            with FP32 row state) is the PASA allocation that measured accurate on biased inputs;
            the all-FP16 "pasa" stays finite but its recovery multiplies FP16 rounding by
            β/(1−β) ≈ 64 (README, "Accuracy").
        beta: PASA's shift coefficient in [0, 1); None takes the backend's optimal default for
            the block length and scale. Only used by the shifted allocations.
        block_size: the KV block length of the loop (and the query block), an int or a
            (block_q, block_kv) pair of positive ints; None means 128. Not FIA's block_size
            (PageAttention's, unsupported here).
        backend: "reference" (PyTorch ops, any device), "npu" (the AscendC kernel, once built
            with scripts/build_and_deploy.sh), "triton" (the Triton kernel for CUDA tensors;
            precisions "fp32", "pasa", "pasa_fp32"), or None: "npu" for NPU tensors, "triton" for
            CUDA tensors when Triton is installed and computes the precision (and, for PASA, the
            KV block length: 16, 32, 64, 128 or 256), "reference" otherwise.

    Returns:
        (attention_out, softmax_lse). attention_out: query's dtype; BSH (B, S1, H), BSND and
        BNSD_BSND (B, S1, N, D), BNSD (B, N, S1, D), TND (T, N, D). softmax_lse: float32,
        (B, N, S1, 1) (TND: (T, N, 1)), the natural log of sum_j exp(scale * q·k_j) over the
        kept keys; LSE_NO_KEY (the most negative float32) for a row with no kept key, +inf for a
        padded row. With softmax_lse_flag False: FIA's placeholder, a float32 tensor of shape (1,)
        holding 0.

    Raises:
        TypeError: an argument of the wrong type (the message names it).
        ValueError: an invalid value, shape, dtype or device, including NaN/Inf in query, key or
            value, or a bfloat16/float32 value outside FP16's range (|x| > 65504).
        RuntimeError: backend "npu" (or "triton") whose kernel is not built/available.
    """
    # ---- scalar arguments -------------------------------------------------------------------
    _check_tensor("query", query)
    _check_tensor("key", key)
    _check_tensor("value", value)
    if not isinstance(input_layout, str):
        raise TypeError(f"input_layout must be a str, one of {LAYOUTS}, got {type(input_layout).__name__}")
    if input_layout not in LAYOUTS:
        raise ValueError(f"input_layout must be one of {LAYOUTS}, got {input_layout!r}")
    num_heads = _int("num_heads", num_heads, lo=1)
    num_key_value_heads = _int("num_key_value_heads", num_key_value_heads, lo=0)
    pre_tokens = _int("pre_tokens", pre_tokens)
    next_tokens = _int("next_tokens", next_tokens)
    sparse_mode = _int("sparse_mode", sparse_mode, choices=SPARSE_MODES)
    inner_precise = _int("inner_precise", inner_precise, choices=INNER_PRECISE)
    if not isinstance(softmax_lse_flag, bool):
        raise TypeError(f"softmax_lse_flag must be a bool, got {type(softmax_lse_flag).__name__}")
    scale = _check_scale(scale)
    alloc_name = _resolve_precision(precision, inner_precise)
    beta = _check_beta(beta)
    block_q, block_kv = _check_block_size(block_size)
    backend_name = _resolve_backend(backend, query.device, alloc_name, block_kv)

    # ---- tensors: dtype, device, shapes -----------------------------------------------------
    if query.dtype not in _INPUT_DTYPES:
        raise ValueError(f"query must be float16, bfloat16 or float32, got {query.dtype}")
    for name, t in (("key", key), ("value", value)):
        if t.dtype != query.dtype:
            raise ValueError(f"{name} must have query's dtype {query.dtype}, got {t.dtype}")
        if t.device != query.device:
            raise ValueError(f"{name} is on {t.device} but query is on {query.device}; all tensors "
                             "must be on one device")
    if atten_mask is not None:
        _check_tensor("atten_mask", atten_mask)
        if atten_mask.device != query.device:
            raise ValueError(f"atten_mask is on {atten_mask.device} but query is on {query.device}; "
                             "all tensors must be on one device")

    nkv = num_key_value_heads or num_heads
    if num_heads % nkv != 0:
        raise ValueError(f"num_heads ({num_heads}) must be a multiple of num_key_value_heads ({nkv})")

    if input_layout == "TND":
        q4 = k4 = v4 = None
        _check_tnd_shapes(query, key, value, num_heads, nkv, num_key_value_heads)
        n, d = query.shape[1], query.shape[2]
    else:
        q4, k4, v4 = _to_bnsd(query, key, value, input_layout, num_heads, nkv, num_key_value_heads)
        n, d = q4.shape[1], q4.shape[3]
    if d == 0:
        raise ValueError("the head dim D of query/key/value must be >= 1, got 0")

    # ---- values: NaN/Inf, FP16 range, conversion --------------------------------------------
    q16, k16, v16 = (_to_fp16(name, t) for name, t in (("query", query if q4 is None else q4),
                                                       ("key", key if k4 is None else k4),
                                                       ("value", value if v4 is None else v4)))

    cfg = dict(precision=alloc_name, beta=beta, block_q=block_q, block_kv=block_kv, scale=scale)
    if input_layout == "TND":
        out, lse = _run_tnd(q16, k16, v16, atten_mask, actual_seq_lengths, actual_seq_lengths_kv,
                            sparse_mode, pre_tokens, next_tokens, backend_name, cfg)
        attention_out = out.to(query.dtype)
        lse = lse[..., None]
    else:
        out, lse = _run_padded(q16, k16, v16, atten_mask, actual_seq_lengths, actual_seq_lengths_kv,
                               sparse_mode, pre_tokens, next_tokens, backend_name, cfg)
        attention_out = _from_bnsd(out, input_layout).to(query.dtype)
        lse = lse[..., None]
    if not softmax_lse_flag:
        lse = torch.zeros(1, dtype=torch.float32, device=query.device)
    return attention_out, lse


# ============================================================================================
# argument checks
# ============================================================================================

def _check_tensor(name: str, x) -> None:
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")


def _int(name: str, x, *, lo: int | None = None, choices: tuple[int, ...] | None = None) -> int:
    if isinstance(x, bool) or not isinstance(x, numbers.Integral):
        raise TypeError(f"{name} must be an int, got {type(x).__name__}")
    x = int(x)
    if choices is not None and x not in choices:
        raise ValueError(f"{name} must be one of {choices}, got {x}")
    if lo is not None and x < lo:
        raise ValueError(f"{name} must be >= {lo}, got {x}")
    return x


def _check_scale(scale) -> float:
    if isinstance(scale, bool) or not isinstance(scale, numbers.Real):
        raise TypeError(f"scale must be a real number, got {type(scale).__name__}")
    scale = float(scale)
    if not math.isfinite(scale) or scale <= 0.0:
        raise ValueError(f"scale must be a positive finite number, got {scale}")
    return scale


def _check_beta(beta) -> float | None:
    if beta is None:
        return None
    if isinstance(beta, bool) or not isinstance(beta, numbers.Real):
        raise TypeError(f"beta must be None or a real number in [0, 1), got {type(beta).__name__}")
    beta = float(beta)
    if not (0.0 <= beta < 1.0):  # also rejects NaN
        raise ValueError(f"beta must be None or in [0, 1), got {beta}")
    return beta


def _check_block_size(block_size) -> tuple[int, int]:
    if block_size is None:
        return _DEFAULT_BLOCK, _DEFAULT_BLOCK
    if isinstance(block_size, tuple) and len(block_size) == 2:
        parts = block_size
    elif isinstance(block_size, tuple):
        raise ValueError(f"block_size must be a positive int or a (block_q, block_kv) pair, got a "
                         f"tuple of length {len(block_size)}")
    else:
        parts = (block_size, block_size)
    out = []
    for p in parts:
        if isinstance(p, bool) or not isinstance(p, numbers.Integral):
            raise TypeError(f"block_size must be None, a positive int or a (block_q, block_kv) pair of "
                            f"positive ints, got {block_size!r}")
        if p < 1:
            raise ValueError(f"block_size must be positive (FIA's PageAttention block_size is not "
                             f"supported; pass None for the default 128), got {block_size!r}")
        out.append(int(p))
    return out[0], out[1]


def _resolve_precision(precision, inner_precise: int) -> str:
    if precision is None:
        # FIA's bit 0: 0 = high precision (FP32 softmax), 1 = high performance.
        return "fp32" if inner_precise & 1 == 0 else "fp16_fp32"
    if not isinstance(precision, str):
        raise TypeError(f"precision must be None or one of {PRECISIONS}, got {type(precision).__name__}")
    return get_allocation(precision).name  # ValueError naming precision and PRECISIONS


def _resolve_backend(backend, device: torch.device, precision: str, block_kv: int) -> str:
    if backend is None:
        if device.type in _NPU_DEVICE_TYPES:
            return "npu"
        if device.type == "cuda" and _triton_computes(precision, block_kv):
            return "triton"
        return "reference"
    if not isinstance(backend, str):
        raise TypeError(f"backend must be None or one of {BACKENDS}, got {type(backend).__name__}")
    if backend not in BACKENDS:
        raise ValueError(f"backend must be None or one of {BACKENDS}, got {backend!r}")
    return backend


def _triton_computes(precision: str, block_kv: int) -> bool:
    """Triton is installed, a GPU is there, and the Triton kernel has this allocation and block."""
    try:
        from .backends import triton as mod
    except ImportError:
        return False
    block_ok = not get_allocation(precision).shifted or block_kv in mod.BLOCK_KV
    return mod.is_available(torch.device("cuda")) and precision in mod.PRECISIONS and block_ok


def _backend_fn(name: str, device: torch.device):
    """(the backend's ``attention`` callable, whether it takes ``band``), imported on first use."""
    if name == "reference":
        from .backends.reference import attention

        return attention, False
    if name == "npu":
        try:
            from .backends import npu as mod  # type: ignore[attr-defined]
        except ImportError as e:
            raise RuntimeError(
                "backend='npu' needs the AscendC kernel, which is not built or not installed: build and "
                "deploy it with scripts/build_and_deploy.sh (needs CANN), or pass backend='reference' "
                f"to run the PyTorch reference on any device ({e})") from None
        available = getattr(mod, "is_available", None)
        if available is not None and not available():
            raise RuntimeError(
                "backend='npu': the AscendC kernel is not available on this machine; build and deploy it "
                "with scripts/build_and_deploy.sh, or pass backend='reference'")
        return mod.attention, getattr(mod, "ACCEPTS_BAND", False)
    from .backends import triton as mod

    if not mod.is_available(device):
        raise RuntimeError(f"backend='triton' needs the triton package (pip install triton) and CUDA tensors, got "
                           f"tensors on {device}; pass backend='reference' (or None) to run the PyTorch reference "
                           "on any device")
    return mod.attention, mod.ACCEPTS_BAND


def _to_fp16(name: str, x: torch.Tensor) -> torch.Tensor:
    """FP16 copy of ``x``; refuses NaN/Inf and, for bfloat16/float32, values past FP16's range."""
    if x.numel() == 0:
        return x.to(torch.float16)
    if not bool(torch.isfinite(x).all()):
        raise ValueError(f"{name} contains NaN or Inf; fused_attention refuses non-finite inputs")
    if x.dtype != torch.float16:
        amax = float(x.abs().max())
        if amax > FP16_MAX:
            raise ValueError(f"{name} has a value of magnitude {amax:g}, which exceeds FP16's range "
                             f"(|x| <= {FP16_MAX:g}); {name} is converted to float16 for the computation")
        x = x.to(torch.float16)
    return x


# ============================================================================================
# layouts
# ============================================================================================

def _to_bnsd(query, key, value, layout, num_heads, nkv, num_key_value_heads):
    """(B, N, S, D) views of query, key, value; checks ndim, heads, batch and head-dim agreement."""
    ndim = 3 if layout == "BSH" else 4
    shape_txt = {"BSH": "(B, S, H)", "BSND": "(B, S, N, D)", "BNSD": "(B, N, S, D)",
                 "BNSD_BSND": "(B, N, S, D)"}[layout]
    for name, t in (("query", query), ("key", key), ("value", value)):
        if t.ndim != ndim:
            raise ValueError(f"{name} must be {ndim}-D {shape_txt} for input_layout={layout!r}, "
                             f"got shape {tuple(t.shape)}")
    if key.shape != value.shape:
        raise ValueError(f"value must have key's shape {tuple(key.shape)}, got {tuple(value.shape)}")
    kv_name = "num_key_value_heads" if num_key_value_heads else "num_heads (num_key_value_heads=0)"
    if layout == "BSH":
        b, s1, h = query.shape
        if h % num_heads != 0:
            raise ValueError(f"num_heads ({num_heads}) must divide query's hidden size H = {h} "
                             "(input_layout='BSH', D = H / num_heads)")
        d = h // num_heads
        hkv = key.shape[2]
        if hkv != nkv * d:
            raise ValueError(f"key's hidden size {hkv} must be {kv_name} * D = {nkv} * {d} = {nkv * d} "
                             "(input_layout='BSH')")
        if key.shape[0] != b:
            raise ValueError(f"key's batch {key.shape[0]} must equal query's batch {b}")
        q4 = query.reshape(b, s1, num_heads, d).transpose(1, 2)
        k4 = key.reshape(b, key.shape[1], nkv, d).transpose(1, 2)
        v4 = value.reshape(b, value.shape[1], nkv, d).transpose(1, 2)
        return q4, k4, v4
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


def _from_bnsd(out: torch.Tensor, layout: str) -> torch.Tensor:
    b, n, s, d = out.shape
    if layout == "BNSD":
        return out
    bsnd = out.transpose(1, 2).contiguous()
    if layout == "BSH":
        return bsnd.reshape(b, s, n * d)
    return bsnd  # BSND, BNSD_BSND


def _check_tnd_shapes(query, key, value, num_heads, nkv, num_key_value_heads):
    for name, t in (("query", query), ("key", key), ("value", value)):
        if t.ndim != 3:
            raise ValueError(f"{name} must be 3-D (T, N, D) for input_layout='TND', got shape {tuple(t.shape)}")
    if key.shape != value.shape:
        raise ValueError(f"value must have key's shape {tuple(key.shape)}, got {tuple(value.shape)}")
    if query.shape[1] != num_heads:
        raise ValueError(f"num_heads ({num_heads}) must equal query's N dim {query.shape[1]} (input_layout='TND')")
    if key.shape[1] != nkv:
        kv_name = "num_key_value_heads" if num_key_value_heads else "num_heads (num_key_value_heads=0)"
        raise ValueError(f"{kv_name} ({nkv}) must equal key's N dim {key.shape[1]} (input_layout='TND')")
    if key.shape[2] != query.shape[2]:
        raise ValueError(f"key's head dim {key.shape[2]} must equal query's head dim {query.shape[2]}")


# ============================================================================================
# valid lengths
# ============================================================================================

def _int_list(name: str, x) -> list[int]:
    if isinstance(x, torch.Tensor):
        if x.ndim != 1 or x.dtype.is_floating_point or x.dtype.is_complex or x.dtype == torch.bool:
            raise TypeError(f"{name} must be a sequence of ints or a 1-D integer tensor, got a "
                            f"{x.dtype} tensor of shape {tuple(x.shape)}")
        return [int(v) for v in x.tolist()]
    if isinstance(x, (str, bytes)) or not isinstance(x, Sequence):
        raise TypeError(f"{name} must be None, a sequence of ints or a 1-D integer tensor, got {type(x).__name__}")
    out = []
    for v in x:
        if isinstance(v, bool) or not isinstance(v, numbers.Integral):
            raise TypeError(f"{name} must hold ints, got an element of type {type(v).__name__}")
        out.append(int(v))
    return out


def _per_batch_lengths(name: str, x, b: int, s: int) -> list[int] | None:
    """FIA's rule: one value for every batch, or at least B values of which the first B are used."""
    if x is None:
        return None
    vals = _int_list(name, x)
    if len(vals) == 1:
        vals = vals * b
    elif len(vals) < b:
        raise ValueError(f"{name} must have 1 or at least B = {b} entries (FIA uses the first B), got {len(vals)}")
    vals = vals[:b]
    for i, v in enumerate(vals):
        if v < 0 or v > s:
            dim = "query's S1" if name == "actual_seq_lengths" else "key/value's S2"
            raise ValueError(f"{name}[{i}] = {v} must be in [0, {s}] ({dim})")
    return vals


def _cumulative_lengths(name: str, x, total: int) -> list[int]:
    """TND: the cumulative lengths, required, non-negative, non-decreasing, last <= total."""
    if x is None:
        raise ValueError(f"{name} is required with input_layout='TND' (cumulative lengths, one per batch)")
    vals = _int_list(name, x)
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
    return vals


# ============================================================================================
# masks
# ============================================================================================

def _as_bool_mask(m: torch.Tensor) -> torch.Tensor:
    if m.dtype not in _MASK_DTYPES:
        raise ValueError(f"atten_mask must be a bool, int8 or uint8 tensor (True/1 = masked out), got {m.dtype}")
    if m.dtype != torch.bool:
        if m.numel() and not bool(((m == 0) | (m == 1)).all()):
            raise ValueError("atten_mask of dtype int8/uint8 must hold only 0 (kept) and 1 (masked out)")
        m = m != 0
    return m


def _check_compressed_mask(m: torch.Tensor, sparse_mode: int) -> None:
    ok_shapes = ((_COMPRESSED, _COMPRESSED), (1, _COMPRESSED, _COMPRESSED), (1, 1, _COMPRESSED, _COMPRESSED))
    if tuple(m.shape) not in ok_shapes:
        raise ValueError(f"atten_mask must be FIA's compressed causal mask of shape (2048, 2048), (1, 2048, 2048) "
                         f"or (1, 1, 2048, 2048) for sparse_mode={sparse_mode}, got {tuple(m.shape)}")
    m = _as_bool_mask(m).reshape(_COMPRESSED, _COMPRESSED)
    expected = _COMPRESSED_CACHE.get(m.device)
    if expected is None:
        expected = torch.ones(_COMPRESSED, _COMPRESSED, dtype=torch.bool, device=m.device).triu_(1)
        _COMPRESSED_CACHE[m.device] = expected
    if not torch.equal(m, expected):
        raise ValueError(f"atten_mask for sparse_mode={sparse_mode} must be the compressed causal mask "
                         "torch.triu(torch.ones(2048, 2048), diagonal=1) (1 = masked out, above the diagonal)")


def _user_mask(m: torch.Tensor, b: int, n: int, s1: int, s2: int) -> torch.Tensor:
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
    return _as_bool_mask(m[:, :, :s1, :s2])


def _band(mode: int, s1: int, s2: int, pre: int, nxt: int, has_user_mask: bool):
    """sparse_mode's rule for a batch of s1 valid queries and s2 valid keys as (lo, hi): key j is
    kept for query i only where lo <= j − i <= hi (top-left origin; None = an open side); None
    where the mode adds nothing."""
    if mode == 1 or (mode == 0 and not has_user_mask):
        return None
    if mode == 0:
        return -pre, nxt
    if mode == 2:
        return None, 0
    if mode == 3:
        return None, s2 - s1
    return -pre + (s2 - s1), nxt + (s2 - s1)  # 4: band, bottom-right origin


def _band_mask(band, s1: int, s2: int, device) -> torch.Tensor:
    """The (s1, s2) bool mask (True = masked out) of a band (lo, hi)."""
    lo, hi = band
    i = torch.arange(s1, device=device)[:, None]
    j = torch.arange(s2, device=device)[None, :]
    rel = j - i  # the key's offset from the query's diagonal, top-left origin
    masked = rel > hi
    if lo is not None:
        masked |= rel < lo
    return masked


def _prepare_mask(atten_mask, sparse_mode, pre, nxt, b, n, s1, s2, decode):
    """Checks the mask arguments; returns the full user mask (1|B, 1|N, S1, S2) or None.
    ``decode``: FIA's Q_S == 1 branch, where the band (pre/next tokens) has no effect."""
    if sparse_mode in (2, 3, 4):
        if atten_mask is None:
            raise ValueError(f"atten_mask is required for sparse_mode={sparse_mode}: pass FIA's compressed "
                             "causal mask torch.triu(torch.ones(2048, 2048, dtype=torch.bool), diagonal=1)")
        _check_compressed_mask(atten_mask, sparse_mode)
        if sparse_mode == 4 and pre + nxt < 0 and not decode:
            raise ValueError(f"pre_tokens ({pre}) + next_tokens ({nxt}) must be >= 0 for sparse_mode=4 "
                             "(the band would be empty)")
        return None
    if sparse_mode == 1 and atten_mask is None:
        raise ValueError("atten_mask is required for sparse_mode=1 (allMask): pass the full (S1, S2) mask")
    if atten_mask is None:
        return None
    if sparse_mode == 0 and pre + nxt < 0 and not decode:
        raise ValueError(f"pre_tokens ({pre}) + next_tokens ({nxt}) must be >= 0 for sparse_mode=0 with an "
                         "atten_mask (the band would be empty)")
    return _user_mask(atten_mask, b, n, s1, s2)


def _job_mask(user_mask, batch: int | None, sparse_mode, pre, nxt, s1, s2, decode, device, takes_band):
    """(mask, band) for one batch (or for all when batch is None) of s1 x s2 valid rows/keys: the
    band separately for a backend that ``takes_band``, else merged into the mask (band None)."""
    um = None
    if user_mask is not None:
        um = user_mask[:, :, :s1, :s2]
        if batch is not None:
            um = um[batch:batch + 1] if um.shape[0] > 1 else um
    # Q_S == 1 is FIA's decode branch, where sparse_mode and the tokens have no effect.
    band = None if decode else _band(sparse_mode, s1, s2, pre, nxt, user_mask is not None)
    if band is None or takes_band:
        return um, band
    st = _band_mask(band, s1, s2, device)[None, None]
    return (st if um is None else (um | st)), None


# ============================================================================================
# running
# ============================================================================================

def _attend(fn, q, k, v, mask_band, cfg):
    """Backend call on (b, N, s1, D) / (b, Nkv, s2, D) FP16 with s1 >= 1. Returns out (b, N, s1, D)
    FP16 and lse (b, N, s1) FP32 with LSE_NO_KEY for rows that attend to no key."""
    b, n, s1, d = q.shape
    if k.shape[2] == 0:  # FIA: key/value empty -> output 0
        return (torch.zeros(b, n, s1, d, dtype=torch.float16, device=q.device),
                torch.full((b, n, s1), LSE_NO_KEY, dtype=torch.float32, device=q.device))
    mask, band = mask_band
    out, lse = fn(q, k, v, mask=mask, **cfg) if band is None else fn(q, k, v, mask=mask, band=band, **cfg)
    lse = torch.where(torch.isneginf(lse), torch.full_like(lse, LSE_NO_KEY), lse)
    return out, lse


def _run_padded(q, k, v, atten_mask, asl, aslkv, sparse_mode, pre, nxt, backend_name, cfg):
    b, n, s1, d = q.shape
    s2 = k.shape[2]
    decode = s1 == 1
    user_mask = _prepare_mask(atten_mask, sparse_mode, pre, nxt, b, n, s1, s2, decode)
    if decode:
        # FIA's decode branch (Q_S == 1) ignores actual_seq_lengths; its entries are still checked.
        for i, x in enumerate(_int_list("actual_seq_lengths", asl) if asl is not None else ()):
            if x < 0:
                raise ValueError(f"actual_seq_lengths[{i}] = {x} must be non-negative")
        lq = None
    else:
        lq = _per_batch_lengths("actual_seq_lengths", asl, b, s1)
    lk = _per_batch_lengths("actual_seq_lengths_kv", aslkv, b, s2)
    fn, takes_band = _backend_fn(backend_name, q.device)
    out = torch.zeros(b, n, s1, d, dtype=torch.float16, device=q.device)
    lse = torch.full((b, n, s1), LSE_PADDED_ROW, dtype=torch.float32, device=q.device)
    if q.numel() == 0:  # FIA: an empty query returns at once
        return out, lse
    if (lq is None or all(x == s1 for x in lq)) and (lk is None or all(x == s2 for x in lk)):
        mask_band = _job_mask(user_mask, None, sparse_mode, pre, nxt, s1, s2, decode, q.device, takes_band)
        return _attend(fn, q, k, v, mask_band, cfg)
    for i in range(b):
        r = s1 if lq is None else lq[i]
        c = s2 if lk is None else lk[i]
        if r == 0:
            continue  # every row of this batch is padding
        mask_band = _job_mask(user_mask, i, sparse_mode, pre, nxt, r, c, decode, q.device, takes_band)
        o, l = _attend(fn, q[i:i + 1, :, :r], k[i:i + 1, :, :c], v[i:i + 1, :, :c], mask_band, cfg)
        out[i, :, :r] = o[0]
        lse[i, :, :r] = l[0]
    return out, lse


def _run_tnd(q, k, v, atten_mask, asl, aslkv, sparse_mode, pre, nxt, backend_name, cfg):
    t, n, d = q.shape
    cq = _cumulative_lengths("actual_seq_lengths", asl, t)
    ck = _cumulative_lengths("actual_seq_lengths_kv", aslkv, k.shape[0])
    if len(cq) != len(ck):
        raise ValueError(f"actual_seq_lengths ({len(cq)} entries) and actual_seq_lengths_kv ({len(ck)} entries) "
                         "must have one entry per batch each with input_layout='TND'")
    if sparse_mode == 1 or (sparse_mode == 0 and atten_mask is not None):
        raise ValueError(f"input_layout='TND' supports sparse_mode 0 without atten_mask and sparse_mode 2, 3, 4 "
                         f"with the compressed mask; a full atten_mask (sparse_mode={sparse_mode}) is not supported")
    # Checks the compressed mask and the band; every TND batch follows the Q_S > 1 rules.
    _prepare_mask(atten_mask, sparse_mode, pre, nxt, len(cq), n, 0, 0, decode=False)
    fn, takes_band = _backend_fn(backend_name, q.device)
    out = torch.zeros(t, n, d, dtype=torch.float16, device=q.device)
    lse = torch.full((t, n), LSE_PADDED_ROW, dtype=torch.float32, device=q.device)
    if q.numel() == 0:
        return out, lse
    q0 = k0 = 0
    for q1, k1 in zip(cq, ck):
        r, c = q1 - q0, k1 - k0
        if r > 0:
            mask_band = _job_mask(None, None, sparse_mode, pre, nxt, r, c, False, q.device, takes_band)
            qb = q[q0:q1].transpose(0, 1)[None]  # (1, N, r, D)
            kb = k[k0:k1].transpose(0, 1)[None]
            vb = v[k0:k1].transpose(0, 1)[None]
            o, l = _attend(fn, qb, kb, vb, mask_band, cfg)
            out[q0:q1] = o[0].transpose(0, 1)
            lse[q0:q1] = l[0].transpose(0, 1)
        q0, k0 = q1, k1
    return out, lse
