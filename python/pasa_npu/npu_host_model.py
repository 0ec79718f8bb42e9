"""Run the AscendC PASA kernel on the CPU through the host functional model.

The host model (``host_model/``) is our own C++ implementation of the AscendC API subset the kernel
uses: the unchanged kernel sources (``op_kernel/``) and host tiling (``op_host/pasa_tiling.cpp``)
are compiled with g++ against it into the extension ``pasa_npu._npu_host_model``, which runs the
cube (AIC) and vector (AIV) programs as threads on the CPU with the A2 memory capacities, FP16
rounding and cross-core flags modelled. It is **not** an NPU and it does not measure speed: it is
how CI checks that the kernel computes what the golden model says, with no NPU and no CANN.

:func:`run` takes FIA's arguments (``torch_npu.npu_fused_infer_attention_score``, as
:func:`pasa_npu.fused_attention`) for the subset the kernel implements: layouts BNSD, BSH and BSND,
GQA, bool/uint8/int8 masks, sparse_mode 0-4,
actual_seq_lengths(_kv), the ``pasa`` and ``pasa_fp32`` allocations. It checks the arguments with
the same helpers as ``fused_attention``, computes the tiling with ``pasa::ComputeTiling`` (the
code the CANN op's tiling function calls), lays out the GM buffers (query, key, value, mask,
lengths, output, lse, workspace, tiling data) and launches ``pasa_fused_attention`` with the
tiling key and block dim, on ``blockDim`` AIC threads and ``2 * blockDim`` AIV threads.
"""

from __future__ import annotations

import numpy as np
import torch

from . import interface as _fia

__all__ = ["run", "run_with_status", "count", "tiling", "default_beta", "LAYOUTS", "PRECISIONS"]

#: The layouts the kernel reads and writes (FIA's BNSD_BSND and TND are not implemented).
LAYOUTS: tuple[str, ...] = ("BNSD", "BSH", "BSND")
#: The allocations the kernel implements (tiling key): all-FP16 Algorithm 1, and FP32 row state.
PRECISIONS: tuple[str, ...] = ("pasa", "pasa_fp32")


def run(query, key, value, *, atten_mask=None, actual_seq_lengths=None, actual_seq_lengths_kv=None,
        num_heads: int = 1, scale: float = 1.0, pre_tokens: int = 2147483647,
        next_tokens: int = 2147483647, input_layout: str = "BSH", num_key_value_heads: int = 0,
        sparse_mode: int = 0, softmax_lse_flag: bool = False, precision: str = "pasa",
        beta: float | None = None):
    """The AscendC kernel on the host model, with FIA's semantics.

    Arguments are those of :func:`pasa_npu.fused_attention` (see its docstring and docs/fia.md),
    restricted to what the kernel implements: ``input_layout`` one of :data:`LAYOUTS`,
    ``precision`` one of :data:`PRECISIONS`, ``beta`` None (the kernel's default for its block
    length and ``scale``, :func:`default_beta`) or in [0, 1). ``query``, ``key``, ``value`` (and
    ``atten_mask``) are all NumPy arrays or all CPU torch tensors; float16, or bfloat16/float32
    within FP16's range (converted to FP16 as ``fused_attention`` does).

    Returns:
        (attention_out, softmax_lse) of the inputs' kind. attention_out: query's dtype and layout.
        softmax_lse: float32 (B, N, S1, 1) when ``softmax_lse_flag``, else FIA's placeholder, a
        float32 (1,) zero. Rows with no kept key have output 0 and lse ``LSE_NO_KEY``; padded
        query rows (past actual_seq_lengths) output 0 and lse +inf. Where S' overflows FP16 (PASA
        removes the scores' bias, not their amplitude) outputs are Inf/NaN exactly where the golden
        model's are: see :func:`run_with_status`.

    Raises:
        TypeError / ValueError: an argument the kernel does not accept (the message names it);
        the tiling's own refusals (``pasa::ComputeTiling``'s std::invalid_argument) are ValueError.
        RuntimeError: the host model detected a fault while running the kernel (a capacity or
        alignment violation, a wait that can never be satisfied, ...): a kernel or model bug.
    """
    out, lse, _ = _launch(_prepare(query, key, value, atten_mask, actual_seq_lengths, actual_seq_lengths_kv,
                                   num_heads, scale, pre_tokens, next_tokens, input_layout, num_key_value_heads,
                                   sparse_mode, softmax_lse_flag, precision, beta))
    return out, lse


def run_with_status(query, key, value, **fia_kwargs):
    """:func:`run` (the same arguments) that also returns the kernel's overflow report:
    ``(attention_out, softmax_lse, overflow)``, overflow True when the status words the AIVs write
    to the workspace say that a valid row saw an Inf in S' (what a binding reads to recompute those
    rows on a wider path)."""
    return _launch(_prepare(query, key, value, **fia_kwargs))


def count(query, key, value, *, cost: dict, ai_cores: int = 0, **fia_kwargs):
    """:func:`run` (the same arguments) on the cost model's counting host model: returns
    ``(attention_out, softmax_lse, counters)``, counters one dict per core (AICs first, then AIVs) with
    what the core issued per pipe and its modelled clocks. ``cost`` holds the per-unit costs in cycles
    (keys as in ``pasa_npu.cost_model.A2_COSTS``); ``ai_cores`` > 0 tiles for that many AI cores instead of
    the A2's 24. A model, not a measurement: see docs/cost_model.md."""
    job = _prepare(query, key, value, **fia_kwargs)
    if job.arrays[0].size == 0 or job.arrays[1].size == 0:
        raise ValueError("count: empty query or key/value launch no kernel")
    out, lse, _overflow, counters = _ext().count(*job.arrays, **job.attrs, cost=dict(cost), ai_cores=ai_cores)
    return (*job.finish(out, lse), counters)


def tiling(query, key, value, **fia_kwargs) -> dict:
    """The tiling ``pasa::ComputeTiling`` chooses for these inputs (the arguments of :func:`run`):
    a dict with ``tiling_key``, ``block_dim``, ``workspace_bytes`` and the fields of the tiling data
    the kernel reads (block sizes, β, the split of the work over the cores, ...)."""
    job = _prepare(query, key, value, **fia_kwargs)
    return _ext().tiling(*job.arrays, **job.attrs)


def default_beta(block_kv: int, scale: float) -> float:
    """β the kernel uses when none is given: the C++ port of :func:`pasa_npu.beta.default_beta`."""
    return _ext().default_beta(_fia._int("block_kv", block_kv, lo=1), _fia._check_scale(scale))


# ============================================================================================

def _launch(job: "_Job"):
    if job.arrays[0].size == 0 or job.arrays[1].size == 0:
        # The tiling takes B, S1, S2 >= 1 and leaves empty inputs to the caller, as FIA does: an
        # empty query returns at once; an empty key/value gives output 0, every valid row no key.
        out = np.zeros(job.arrays[0].shape, np.float16)
        lse = np.full(job.bns1, -np.inf, np.float32)
        for i, r in enumerate(job.valid_rows or ()):
            lse[i, :, r:] = _fia.LSE_PADDED_ROW
        overflow = False
    else:
        out, lse, overflow = _ext().run(*job.arrays, **job.attrs)
    return (*job.finish(out, lse), overflow)


def _ext():
    try:
        from . import _npu_host_model
    except ImportError as e:
        raise RuntimeError("pasa_npu._npu_host_model (the kernel compiled against the host model) is not "
                           f"built: reinstall the package with `pip install -e .` (needs CMake, g++ and pybind11) ({e})"
                           ) from None
    return _npu_host_model


class _Job:
    """Validated inputs in the kernel's GM form and how to hand the results back."""

    def __init__(self, arrays, attrs, bns1, valid_rows, kind_numpy, out_dtype, lse_flag):
        self.arrays, self.attrs, self.bns1, self.valid_rows = arrays, attrs, bns1, valid_rows
        self._numpy, self._out_dtype, self._lse_flag = kind_numpy, out_dtype, lse_flag

    def finish(self, out: np.ndarray, lse: np.ndarray):
        out_t = torch.from_numpy(out).to(self._out_dtype)
        if self._lse_flag:
            # The kernel writes the true-scale lse, −∞ for a row with no kept key (as every backend
            # of fused_attention returns it); FIA reports such rows as LSE_NO_KEY.
            lse = np.where(np.isneginf(lse), np.float32(_fia.LSE_NO_KEY), lse).astype(np.float32)
            lse_t = torch.from_numpy(lse)[..., None]
        else:
            lse_t = torch.zeros(1, dtype=torch.float32)
        if self._numpy:
            return out_t.numpy(), lse_t.numpy()
        return out_t, lse_t


def _as_cpu_tensor(name: str, x, numpy_kind: bool) -> torch.Tensor:
    if numpy_kind:
        if not isinstance(x, np.ndarray):
            raise TypeError(f"{name} must be a NumPy array like query, got {type(x).__name__} "
                            "(pass all of query, key, value, atten_mask as NumPy arrays or all as torch tensors)")
        return torch.from_numpy(np.ascontiguousarray(x))
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor like query, got {type(x).__name__} "
                        "(pass all of query, key, value, atten_mask as NumPy arrays or all as torch tensors)")
    if x.device.type != "cpu":
        raise ValueError(f"{name} is on {x.device}; the host model runs on the CPU: pass CPU tensors "
                         "(use pasa_npu.fused_attention(backend='npu') for NPU tensors)")
    return x


def _kernel_choice(name: str, value, choices: tuple[str, ...]) -> None:
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a str, one of {choices}, got {type(value).__name__}")
    if value not in choices:
        raise ValueError(f"{name} must be one of {choices} (what the AscendC kernel implements), got {value!r}")


def _prepare(query, key, value, atten_mask=None, actual_seq_lengths=None, actual_seq_lengths_kv=None, num_heads=1,
             scale=1.0, pre_tokens=2147483647, next_tokens=2147483647, input_layout="BSH",
             num_key_value_heads=0, sparse_mode=0, softmax_lse_flag=False, precision="pasa", beta=None) -> _Job:
    if not isinstance(query, (np.ndarray, torch.Tensor)):
        raise TypeError(f"query must be a NumPy array or a CPU torch.Tensor, got {type(query).__name__}")
    numpy_kind = isinstance(query, np.ndarray)
    query, key, value = (_as_cpu_tensor(nm, t, numpy_kind) for nm, t in
                         (("query", query), ("key", key), ("value", value)))
    if atten_mask is not None:
        atten_mask = _as_cpu_tensor("atten_mask", atten_mask, numpy_kind)

    _kernel_choice("input_layout", input_layout, LAYOUTS)
    _kernel_choice("precision", precision, PRECISIONS)
    num_heads = _fia._int("num_heads", num_heads, lo=1)
    num_key_value_heads = _fia._int("num_key_value_heads", num_key_value_heads, lo=0)
    pre_tokens = _fia._int("pre_tokens", pre_tokens)
    next_tokens = _fia._int("next_tokens", next_tokens)
    sparse_mode = _fia._int("sparse_mode", sparse_mode, choices=_fia.SPARSE_MODES)
    if not isinstance(softmax_lse_flag, bool):
        raise TypeError(f"softmax_lse_flag must be a bool, got {type(softmax_lse_flag).__name__}")
    scale = _fia._check_scale(scale)
    beta = _fia._check_beta(beta)

    if query.dtype not in _fia._INPUT_DTYPES:
        raise ValueError(f"query must be float16, bfloat16 or float32, got {query.dtype}")
    for nm, t in (("key", key), ("value", value)):
        if t.dtype != query.dtype:
            raise ValueError(f"{nm} must have query's dtype {query.dtype}, got {t.dtype}")
    nkv = num_key_value_heads or num_heads
    if num_heads % nkv != 0:
        raise ValueError(f"num_heads ({num_heads}) must be a multiple of num_key_value_heads ({nkv})")
    q4, k4, _ = _fia._to_bnsd(query, key, value, input_layout, num_heads, nkv, num_key_value_heads)
    b, n, s1, d = q4.shape
    s2 = k4.shape[2]
    if d == 0:
        raise ValueError("the head dim D of query/key/value must be >= 1, got 0")
    q16, k16, v16 = (_fia._to_fp16(nm, t).contiguous().numpy()
                     for nm, t in (("query", query), ("key", key), ("value", value)))

    decode = s1 == 1
    user_mask = _fia._prepare_mask(atten_mask, sparse_mode, pre_tokens, next_tokens, b, n, s1, s2, decode)
    mask = None
    if user_mask is not None:
        mask = user_mask.to(torch.uint8).contiguous().numpy()
    if decode:
        # FIA's decode branch (Q_S == 1) ignores actual_seq_lengths; its entries are still checked.
        for i, x in enumerate(_fia._int_list("actual_seq_lengths", actual_seq_lengths)
                              if actual_seq_lengths is not None else ()):
            if x < 0:
                raise ValueError(f"actual_seq_lengths[{i}] = {x} must be non-negative")
        lq = None
    else:
        lq = _fia._per_batch_lengths("actual_seq_lengths", actual_seq_lengths, b, s1)
    lk = _fia._per_batch_lengths("actual_seq_lengths_kv", actual_seq_lengths_kv, b, s2)

    attrs = dict(input_layout=input_layout, num_heads=num_heads, num_key_value_heads=num_key_value_heads,
                 scale=scale, beta=-1.0 if beta is None else beta, sparse_mode=sparse_mode,
                 pre_tokens=pre_tokens, next_tokens=next_tokens, precision=precision)
    arrays = (q16, k16, v16, mask,
              None if lq is None else np.asarray(lq, np.int64),
              None if lk is None else np.asarray(lk, np.int64))
    return _Job(arrays, attrs, (b, n, s1), lq, numpy_kind, query.dtype, softmax_lse_flag)
