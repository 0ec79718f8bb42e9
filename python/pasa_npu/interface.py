"""The entry points, with the interfaces of ``torch_npu.npu_fused_infer_attention_score`` (FIA) and of
``torch_npu.npu_fused_infer_attention_score_v2`` (FIA v2), and their ``.out`` forms.

Every form is one call path: the public function names its options, by name, in one dict of
:data:`OPTIONS` (FIA v2's names mapped onto FIA's, :data:`V2_NAMES`), which :func:`_fused_attention`
validates once into a :class:`pasa_npu.problem.Problem`, hands to a backend (:mod:`pasa_npu.backends`),
guards by the safety net and lays out as FIA returns it (or writes into the caller's buffers). The
functional and ``.out`` forms are also the PyTorch operators ``torch.ops.pasa_npu.fused_attention`` and
``torch.ops.pasa_npu.fused_attention_out`` (``torch.library`` custom ops with fake implementations), which
``torch.compile`` traces as one opaque node each: a form calls its operator while compiling, and in eager
mode runs the operator's implementation, :func:`_fused_attention`, directly (the operator dispatch would
only add latency), with the same options by name.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Sequence

import torch

from . import backends
from .problem import (DEFAULT_PRECISION, FP16_MAX, LAYOUTS, LSE_NO_KEY, LSE_PADDED_ROW, NO_BAND, Problem,
                      call_signature, checks_values, default_block_kv, from_bnsd, int_list, keeps_lengths_on_device,
                      make_problem)

__all__ = ["fused_attention", "fused_attention_v2", "fused_attention_out", "fused_attention_v2_out",
           "fused_attention_workspace", "fused_attention_v2_workspace", "OPTIONS", "V2_NAMES", "LAYOUTS", "BACKENDS",
           "LSE_NO_KEY", "LSE_PADDED_ROW", "FP16_MAX"]

BACKENDS = backends.BACKENDS


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
    pre_tokens: int = NO_BAND,
    next_tokens: int = NO_BAND,
    input_layout: str = "BSH",
    num_key_value_heads: int = 0,
    sparse_mode: int = 0,
    inner_precise: int = 0,
    block_table: torch.Tensor | None = None,
    block_size: int = 0,
    softmax_lse_flag: bool = False,
    precision: str | None = DEFAULT_PRECISION,
    beta: float | None = None,
    block_q: int | None = None,
    block_kv: int | None = None,
    backend: str | None = None,
    check_inputs: bool | None = None,
    safety_net: bool = True,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Overflow-safe attention ``softmax(scale * Q Kᵀ + mask) V`` with FIA's interface.

    The arguments from ``query`` to ``softmax_lse_flag`` mean what they mean for
    ``torch_npu.npu_fused_infer_attention_score`` (see docs/fia.md for the subset and the
    differences); the rest are pasa-npu's own. Inference only: inputs that require grad are refused.

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
            (1, 1, 2048, 2048); the mode's rule builds the mask (its contents are checked with
            ``check_inputs``).
        actual_seq_lengths: None, or the valid query length of each batch (a sequence of ints
            or a 1-D integer tensor, read on the host: a device tensor costs a synchronisation):
            one value for all batches, or at least B values (the first B are used), each in
            [0, S1]. Query rows past a batch's length are padding: their output is 0 and their
            lse +inf. Ignored when S1 == 1 (as in FIA). With TND it is required and cumulative
            (entry b = total query rows of batches 0..b, non-decreasing, last <= T); its length
            is the batch count. TND with a block_table: CUDA tensors for both lengths are not
            read on the host but by the kernels (no synchronisation; their values are checked
            only with ``check_inputs``), so that a captured CUDA graph replays whatever lengths
            they then hold.
        actual_seq_lengths_kv: None, or the valid key/value length of each batch, with the
            same rules against S2 (cumulative against T_kv, and required, with TND; with TND and
            a block_table, each batch's own key length, as in FIA). Keys past a batch's length
            are not attended to.
        num_heads: N, the number of query heads (>= 1). Must equal the query's N dim (BSND,
            BNSD, TND) or divide H (BSH).
        scale: the factor of Q Kᵀ, a positive number up to 2**64 (typically 1/sqrt(D)).
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
        block_table: None, or FIA's PageAttention block table: an int32 (B, max_blocks) tensor
            whose row b lists the cache blocks holding batch b's keys and values in order. Then
            ``key``/``value`` are the caches shared by all batches, (num_blocks, block_size,
            Nkv·D) or (num_blocks, Nkv, block_size, D), ``actual_seq_lengths_kv`` (required)
            says how many keys of its pages each batch uses, and the query takes any layout (TND:
            batch b's query rows are its cumulative range, any number of them, mixing decode,
            speculative and prefill requests in one call). Block ids are checked with
            ``check_inputs`` (on CPU tensors an id outside the cache is always a ValueError; on a
            device without the check it faults there).
        block_size: FIA's PageAttention page length: 0 without a block_table, else a multiple
            of 16 from 16 to 512.
        softmax_lse_flag: whether to return the log-sum-exp of each row's scaled scores.
        precision: the precision allocation, one of ``pasa_npu.PRECISIONS`` (the table in the
            README, docs/golden.md); None follows inner_precise: "fp32" for 0 and 2, "fp16_fp32" for 1 and 3.
        beta: PASA's shift coefficient in [0, 1); None takes the optimal default for block_kv
            and scale. Only used by the shifted allocations.
        block_q: the query tile of the loop (None = 128). Rows are independent, so it changes no
            result; the Triton and AscendC kernels pick their own.
        block_kv: the KV block length of the loop. It is part of the blocked allocations' results:
            PASA's shift matrix is block_kv × block_kv, ``pasa_rs`` centres each block's keys and
            ``fp32_frame`` decides its frame moves per block. None takes the backend's block
            (:func:`pasa_npu.problem.default_block_kv`): 128, but 64 for ``fp32_frame`` on the
            Triton kernel above D = 128 (two pipeline stages of K and V fit the GPU's shared memory
            only at 64 keys there). The Triton kernel takes 16, 32, 64, 128 or 256 for the blocked
            allocations, the AscendC kernel 128.
        backend: "reference" (the golden model's loop in PyTorch ops, every allocation, any
            device: an emulator, slow), "triton" (the Triton kernel, CUDA tensors), "npu" (the
            AscendC kernel: NPU tensors once built with scripts/build_and_deploy.sh, or CPU
            tensors on the host model, an emulator for verification), or None: "npu" for NPU
            tensors, "triton" for CUDA tensors when it computes the allocation, else "reference".
        check_inputs: check the inputs' values before computing: refuse NaN/Inf, bfloat16/float32
            values beyond FP16's range, int8/uint8 masks holding other than 0/1, and a compressed
            mask that is not FIA's. These checks read device memory (a host-device
            synchronisation each), so they are off by default; None follows the environment
            variable PASA_NPU_CHECK_INPUTS (1 = on). Without them a NaN/Inf input, or a value
            beyond FP16's range (which becomes Inf in FP16), gives NaN in the output rows it
            reaches, as any attention would.
        safety_net: recompute on the FP32 path (``fp32``) every valid row whose output came back
            non-finite, whose lse is NaN, or whose state overflowed (lse +inf): PASA removes the
            scores' bias but not their amplitude, and FP16 running state can overflow on long
            contexts. It costs one host-device synchronisation, except for allocations that
            cannot overflow on finite FP16 inputs at any accepted scale (``Allocation.overflow_free``),
            where it does nothing. False returns the allocation's own result (for studies of the emulated
            hardware).

    Returns:
        (attention_out, softmax_lse). attention_out: query's dtype; BSH (B, S1, H), BSND and
        BNSD_BSND (B, S1, N, D), BNSD (B, N, S1, D), TND (T, N, D). softmax_lse: float32,
        (B, N, S1, 1) (TND: (T, N, 1)), the natural log of sum_j exp(scale * q·k_j) over the
        kept keys; LSE_NO_KEY (the most negative float32) for a row with no kept key, +inf for a
        padded row. With softmax_lse_flag False: FIA's placeholder, a float32 tensor of shape (1,)
        holding 0, one per device shared by all calls (read it, never write to it).

    Raises:
        TypeError: an argument of the wrong type (the message names it).
        ValueError: an invalid value, shape, dtype or device (and, with ``check_inputs``, a
            NaN/Inf input or a bfloat16/float32 value outside FP16's range), an input that
            requires grad, or a backend that does not compute this call.
        RuntimeError: a backend that cannot run here (the message says what is missing).
    """
    return _call(query, key, value, dict(
        atten_mask=atten_mask, actual_seq_lengths=actual_seq_lengths, actual_seq_lengths_kv=actual_seq_lengths_kv,
        num_heads=num_heads, scale=scale, pre_tokens=pre_tokens, next_tokens=next_tokens, input_layout=input_layout,
        num_key_value_heads=num_key_value_heads, sparse_mode=sparse_mode, inner_precise=inner_precise,
        block_table=block_table, block_size=block_size, softmax_lse_flag=softmax_lse_flag, learnable_sink=None,
        precision=precision, beta=beta, block_q=block_q, block_kv=block_kv, backend=backend,
        check_inputs=check_inputs, safety_net=safety_net))


def fused_attention_v2(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    *,
    atten_mask: torch.Tensor | None = None,
    actual_seq_qlen: Sequence[int] | torch.Tensor | None = None,
    actual_seq_kvlen: Sequence[int] | torch.Tensor | None = None,
    block_table: torch.Tensor | None = None,
    num_query_heads: int = 1,
    num_key_value_heads: int = 0,
    softmax_scale: float = 1.0,
    pre_tokens: int = NO_BAND,
    next_tokens: int = NO_BAND,
    input_layout: str = "BSH",
    sparse_mode: int = 0,
    block_size: int = 0,
    inner_precise: int = 0,
    learnable_sink: torch.Tensor | None = None,
    return_softmax_lse: bool = False,
    precision: str | None = DEFAULT_PRECISION,
    beta: float | None = None,
    block_q: int | None = None,
    block_kv: int | None = None,
    backend: str | None = None,
    check_inputs: bool | None = None,
    safety_net: bool = True,
    **fia_v2_only,
) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`fused_attention` with the names and defaults of ``torch_npu.npu_fused_infer_attention_score_v2``
    (FIA v2), and its ``learnable_sink``.

    FIA v2 renames five of FIA's arguments (:data:`V2_NAMES`): ``actual_seq_qlen`` and
    ``actual_seq_kvlen`` are ``actual_seq_lengths`` and ``actual_seq_lengths_kv``, ``num_query_heads``
    is ``num_heads``, ``softmax_scale`` is ``scale`` and ``return_softmax_lse`` is ``softmax_lse_flag``;
    the others keep their names, meanings and defaults, and the rest (``precision`` ... ``safety_net``)
    are pasa-npu's own, as documented at :func:`fused_attention`. The call is that function's call.

    Arguments:
        learnable_sink: None, or one sink logit per query head, shape (num_query_heads,), float32,
            bfloat16 (FIA v2's dtype) or float16, used as float32: a logit s_h in the true scale
            (the scale of ``softmax_scale``·q·k) that joins the softmax's denominator of every row of
            head h with no value, out = Σ_j e^{x_j} v_j / (Σ_j e^{x_j} + e^{s_h}); the lse becomes
            log(Σ_j e^{x_j} + e^{s_h}); a row with no visible key gives out 0 and lse s_h.
        **fia_v2_only: FIA v2's other arguments (MLA's ``query_rope``/``key_rope``, ``pse_shift``, the
            quantisation scales and modes, the dtype overrides): accepted at their defaults (None or
            0), refused otherwise (ValueError naming the argument). Any other name is a TypeError.

    Returns:
        (attention_out, softmax_lse), as :func:`fused_attention` returns them.
    """
    _refuse_fia_v2_only(fia_v2_only, "fused_attention_v2")
    return _call(query, key, value, _v1_names(dict(
        atten_mask=atten_mask, actual_seq_qlen=actual_seq_qlen, actual_seq_kvlen=actual_seq_kvlen,
        block_table=block_table, num_query_heads=num_query_heads, num_key_value_heads=num_key_value_heads,
        softmax_scale=softmax_scale, pre_tokens=pre_tokens, next_tokens=next_tokens, input_layout=input_layout,
        sparse_mode=sparse_mode, block_size=block_size, inner_precise=inner_precise, learnable_sink=learnable_sink,
        return_softmax_lse=return_softmax_lse, precision=precision, beta=beta, block_q=block_q, block_kv=block_kv,
        backend=backend, check_inputs=check_inputs, safety_net=safety_net)), v2=True)


def fused_attention_out(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, *,
                        out: Sequence[torch.Tensor], workspace: torch.Tensor | None = None,
                        **kwargs) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`fused_attention` written into the caller's tensors, FIA's ``.out`` form (for graph capture).

    Arguments:
        out: (attention_out, softmax_lse), a pair (tuple or list) of tensors on query's device:
            attention_out of the output's shape and query's dtype; softmax_lse, with
            ``softmax_lse_flag``, float32 of the lse's shape ((B, N, S1, 1), TND (T, N, 1)), else
            any tensor (FIA's placeholder, not written). Contiguous tensors are written by the
            kernels directly; others receive a copy of the result.
        workspace: None, or a uint8 tensor from :func:`fused_attention_workspace`, which holds the
            call's scratch: a call of the ``triton`` backend's planned form (a dense call without
            per-batch lengths, a paged call, a TND call with a block table; overflow-free precision
            or no safety net) with contiguous ``out`` then allocates nothing on the device (but a few
            small tensors for TND lengths given as CUDA tensors). Other calls allocate their scratch.
        **kwargs: :func:`fused_attention`'s keyword arguments.

    Returns:
        ``out``'s two tensors, written.

    Raises:
        As :func:`fused_attention`; and TypeError/ValueError naming ``out`` or ``workspace`` for a wrong
        type, shape, dtype or device, or a workspace too small for the call.
    """
    return _call(query, key, value, _options(kwargs, _DEFAULTS, "fused_attention_out"), out, workspace)


def fused_attention_v2_out(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, *,
                           out: Sequence[torch.Tensor], workspace: torch.Tensor | None = None,
                           **kwargs) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`fused_attention_v2` written into the caller's tensors, FIA v2's ``.out`` form: ``out`` and
    ``workspace`` as for :func:`fused_attention_out`, ``kwargs`` :func:`fused_attention_v2`'s."""
    return _call(query, key, value, _options(kwargs, _V2_DEFAULTS, "fused_attention_v2_out"), out, workspace, v2=True)


def fused_attention_workspace(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                              **kwargs) -> torch.Tensor:
    """The workspace of :func:`fused_attention_out` for this call's shape: a uint8 tensor on query's device
    (FIA's ``_npu_fused_infer_attention_score_get_max_workspace``), validated as the call is.

    It holds the scratch of this call and of every call no larger than it with the same options: no more
    batches (B, or the table's rows), query rows (S1; TND: the longest batch's query rows, or T where the
    lengths are CUDA tensors), keys (S2; the table's width) or heads. So for a run (a server's CUDA graphs,
    say), ask for it once with the run's largest shape and pass the same workspace to every call. Empty
    where the call's backend keeps no scratch in it (every backend but ``triton``)."""
    return _workspace(query, key, value, _options(kwargs, _DEFAULTS, "fused_attention_workspace"))


def fused_attention_v2_workspace(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                                 **kwargs) -> torch.Tensor:
    """:func:`fused_attention_workspace` with :func:`fused_attention_v2`'s arguments (FIA v2's
    ``_npu_fused_infer_attention_score_v2_get_max_workspace``)."""
    options = _options(kwargs, _V2_DEFAULTS, "fused_attention_v2_workspace")  # its errors name the caller's words
    try:
        return _workspace(query, key, value, options)
    except (TypeError, ValueError) as e:
        raise _in_v2_names(e) from None


# ============================================================================================
# the one call path
# ============================================================================================

#: The options of a call, by name: FIA's keyword arguments, FIA v2's learnable_sink and pasa-npu's own.
#: Every form names them in one dict; :func:`make_problem` validates them (all but backend and safety_net).
OPTIONS: tuple[str, ...] = (
    "atten_mask", "actual_seq_lengths", "actual_seq_lengths_kv", "num_heads", "scale", "pre_tokens", "next_tokens",
    "input_layout", "num_key_value_heads", "sparse_mode", "inner_precise", "block_table", "block_size",
    "softmax_lse_flag", "learnable_sink", "precision", "beta", "block_q", "block_kv", "backend", "check_inputs",
    "safety_net")
#: FIA v2's names of FIA's arguments.
V2_NAMES = {"actual_seq_qlen": "actual_seq_lengths", "actual_seq_kvlen": "actual_seq_lengths_kv",
            "num_query_heads": "num_heads", "softmax_scale": "scale", "return_softmax_lse": "softmax_lse_flag"}
#: FIA v2's arguments that pasa-npu does not implement, each accepted only at its default (None or 0).
FIA_V2_ONLY = ("query_rope", "key_rope", "pse_shift", "dequant_scale_query", "dequant_scale_key", "dequant_offset_key",
               "dequant_scale_value", "dequant_offset_value", "dequant_scale_key_rope", "quant_scale_out",
               "quant_offset_out", "quant_scale_p", "query_quant_mode", "key_quant_mode", "value_quant_mode", "query_dtype", "key_dtype",
               "value_dtype", "query_rope_dtype", "key_rope_dtype", "key_shared_prefix_dtype",
               "value_shared_prefix_dtype", "dequant_scale_query_dtype", "dequant_scale_key_dtype",
               "dequant_scale_value_dtype", "dequant_scale_key_rope_dtype", "out_dtype")
_LENGTHS = ("actual_seq_lengths", "actual_seq_lengths_kv")
_TENSOR_OPTIONS = ("atten_mask", "block_table", "learnable_sink")
#: The operators' tensor argument of each length (its list argument is then None).
_LENGTH_TENSORS = {name: name + "_tensor" for name in _LENGTHS}


def _v1_names(options: dict) -> dict:
    """FIA v2's names of a call's options as FIA's (:data:`V2_NAMES`), in :data:`OPTIONS`' order."""
    renamed = {V2_NAMES.get(name, name): given for name, given in options.items()}
    return {name: renamed[name] for name in OPTIONS}


def _refuse_fia_v2_only(given: dict, form: str) -> None:
    for name, x in given.items():
        if name not in FIA_V2_ONLY:
            raise TypeError(f"{form}() got an unexpected keyword argument {name!r}")
        if x is not None and not (type(x) is int and x == 0):
            raise ValueError(f"{form} does not implement FIA v2's {name} (MLA rope inputs, pse_shift, quantisation and "
                             f"dtype overrides are not supported); pass None (or 0) or leave it out, got "
                             f"{'a tensor' if isinstance(x, torch.Tensor) else repr(x)}")


def _options(kwargs: dict, defaults: dict, form: str) -> dict:
    """A keyword form's options: its defaults updated by ``kwargs`` (FIA v2's names mapped to FIA's)."""
    extra = {name: x for name, x in kwargs.items() if name not in defaults}
    if defaults is _V2_DEFAULTS:
        _refuse_fia_v2_only(extra, form)
        return _v1_names({**defaults, **{n: x for n, x in kwargs.items() if n in defaults}})
    if extra:
        raise TypeError(f"{form}() got an unexpected keyword argument {next(iter(extra))!r}")
    return {**defaults, **kwargs}


def _call(query, key, value, options: dict, out=None, workspace=None, v2: bool = False):
    """Every form's call: the operator while compiling, its implementation otherwise. ``v2``: a FIA v2 form,
    whose errors name its arguments by FIA v2's names."""
    if torch.compiler.is_compiling():
        return _compiled(query, key, value, options, out, workspace)
    if not v2:
        return _fused_attention(query, key, value, options, out, workspace)
    try:
        return _fused_attention(query, key, value, options, out, workspace)
    except (TypeError, ValueError) as e:
        raise _in_v2_names(e) from None


_V2_WORDS = re.compile(r"\b(" + "|".join(sorted(map(re.escape, V2_NAMES.values()), key=len, reverse=True)) + r")\b")


def _in_v2_names(error: Exception) -> Exception:
    """``error`` (a TypeError or ValueError of the validation) with FIA's argument names in FIA v2's."""
    inverse = {v1: v2 for v2, v1 in V2_NAMES.items()}
    renamed = type(error)(_V2_WORDS.sub(lambda m: inverse[m.group(1)], str(error)))
    return renamed.with_traceback(error.__traceback__)


def _fused_attention(query, key, value, options: dict, out=None, workspace=None) -> tuple[torch.Tensor, torch.Tensor]:
    """The work of every form: ``options`` by name (:data:`OPTIONS`), ``out`` the ``.out`` form's buffers."""
    _host_lengths(options)
    if out is not None:
        out = _out_pair(out)
        if workspace is not None:
            _check_workspace(workspace, query)
    signature = None if checks_values(options["check_inputs"]) else call_signature(query, key, value, options)
    try:
        plan = _PLANS.get(signature, _UNSEEN) if signature is not None else _UNPLANNABLE
    except TypeError:  # a sequence argument holding something unhashable: validated in full
        signature, plan = None, _UNPLANNABLE
    if plan.__class__ is _CallPlan:
        return plan(query, key, value, options, out, workspace)
    fia = dict(options)
    backend, safety_net = fia.pop("backend"), fia.pop("safety_net")
    problem = make_problem(query, key, value, **fia)
    if not isinstance(safety_net, bool):
        raise TypeError(f"safety_net must be a bool, got {type(safety_net).__name__}")
    if problem.device.type == "meta":
        raise ValueError("query, key and value are meta tensors (shapes without data): fused_attention computes on "
                         "CPU, CUDA or NPU tensors; torch.ops.pasa_npu.fused_attention gives its results' shapes on "
                         "meta tensors")
    runner = backends.select(problem, backend)
    problem = _backend_block(problem, runner, fia["block_kv"])
    if out is not None:
        _check_out(out, *_out_spec(problem))
    if plan is _SEEN_ONCE:  # a repeated call: plan it, once
        plan = _CallPlan.make(problem, runner, safety_net, query, key, value, options)
        _remember(signature, plan or _UNPLANNABLE)
        if plan is not None:
            return plan(query, key, value, options, out, workspace)
    elif plan is _UNSEEN:
        _remember(signature, _SEEN_ONCE)
    if out is not None and _direct(out):  # the .out form: the backend's plan writes into the buffers
        direct = _CallPlan.make(problem, runner, safety_net, query, key, value, options, capturing=True)
        if direct is not None:
            return direct(query, key, value, options, out, workspace)
    result = runner.run(problem)
    if safety_net and not problem.alloc.overflow_free:
        result = _safety_net(problem, *result)
    result = finish(problem, *result)
    if out is None:
        return result
    out[0].copy_(result[0])
    if problem.softmax_lse_flag:
        out[1].copy_(result[1])
    return out


def _backend_block(problem: Problem, runner, block_kv: int | None) -> Problem:
    """``problem`` with the KV block of the backend that computes it where the call names none
    (:func:`pasa_npu.problem.default_block_kv`): every form, planned or not, takes its block here."""
    if block_kv is not None:
        return problem
    block = default_block_kv(problem.alloc, problem.head_dim, runner.name)
    return problem if block == problem.block_kv else problem._replace(block_kv=block)


def _host_lengths(options: dict) -> None:
    """Lengths given as tensors read on the host (a list each), but those the kernels read on the device
    (:func:`pasa_npu.problem.keeps_lengths_on_device`): the host values are then part of the signature."""
    q_lens, kv_lens = options["actual_seq_lengths"], options["actual_seq_lengths_kv"]
    # (None first: an isinstance check against torch.Tensor costs µs.)
    if (q_lens is None or not isinstance(q_lens, torch.Tensor)) and \
            (kv_lens is None or not isinstance(kv_lens, torch.Tensor)):
        return
    if keeps_lengths_on_device(q_lens, kv_lens, options["input_layout"], options["block_table"],
                               options["check_inputs"]):
        return
    for name in _LENGTHS:
        if isinstance(options[name], torch.Tensor):
            options[name] = int_list(name, options[name])


def _workspace(query, key, value, options: dict) -> torch.Tensor:
    _host_lengths(options)
    fia = dict(options)
    backend = fia.pop("backend")
    fia.pop("safety_net")
    problem = make_problem(query, key, value, **fia)
    runner = backends.select(problem, backend)
    problem = _backend_block(problem, runner, fia["block_kv"])
    nbytes = getattr(runner, "workspace_bytes", lambda _: 0)(problem)
    return torch.empty(nbytes, dtype=torch.uint8, device=problem.device)


def _out_pair(out) -> tuple[torch.Tensor, torch.Tensor]:
    if not (isinstance(out, (tuple, list)) and len(out) == 2 and all(isinstance(t, torch.Tensor) for t in out)):
        raise TypeError(f"out must be a pair (attention_out, softmax_lse) of tensors, got {type(out).__name__}"
                        + (f" of {len(out)}" if isinstance(out, (tuple, list)) else ""))
    if torch.is_grad_enabled():
        for name, t in zip(("out[0] (attention_out)", "out[1] (softmax_lse)"), out):
            if t.requires_grad:
                raise ValueError(f"{name} requires grad: the .out form writes its results into out in place "
                                 f"(inference only); pass tensors that do not require grad, or call it under "
                                 f"torch.inference_mode() or torch.no_grad()")
    return tuple(out)


def _out_spec(problem: Problem) -> tuple:
    """What ``out`` must be for ``problem``: attention_out's shape and dtype, softmax_lse's shape (None where
    it is FIA's placeholder, not written), the device."""
    lse = problem.lse_shape() if problem.softmax_lse_flag else None
    return problem.out_shape(), problem.out_dtype, lse, problem.device


def _check_out(out, out_shape, out_dtype, lse_shape, device) -> None:
    attention_out, softmax_lse = out
    for name, t in (("out[0] (attention_out)", attention_out), ("out[1] (softmax_lse)", softmax_lse)):
        if t.device != device:
            raise ValueError(f"{name} is on {t.device} but query is on {device}")
    if tuple(attention_out.shape) != tuple(out_shape) or attention_out.dtype != out_dtype:
        raise ValueError(f"out[0] (attention_out) must be a {out_dtype} tensor of shape {tuple(out_shape)}, got "
                         f"{attention_out.dtype} of shape {tuple(attention_out.shape)}")
    if lse_shape is not None and (tuple(softmax_lse.shape) != tuple(lse_shape) or softmax_lse.dtype != torch.float32):
        raise ValueError(f"out[1] (softmax_lse) must be a torch.float32 tensor of shape {tuple(lse_shape)} "
                         f"(softmax_lse_flag is on), got {softmax_lse.dtype} of shape {tuple(softmax_lse.shape)}")


def _check_workspace(workspace, query) -> None:
    if not isinstance(workspace, torch.Tensor):
        raise TypeError(f"workspace must be None or a torch.Tensor, got {type(workspace).__name__}")
    if workspace.dtype != torch.uint8 or workspace.ndim != 1 or not workspace.is_contiguous() \
            or workspace.device != query.device:
        raise ValueError(f"workspace must be a contiguous 1-D uint8 tensor on query's device {query.device} (from "
                         f"pasa_npu.fused_attention_workspace), got {workspace.dtype} of shape "
                         f"{tuple(workspace.shape)} on {workspace.device}")


def _direct(out) -> bool:
    """Whether a plan can write ``out`` directly: contiguous tensors (the kernels' layout)."""
    return out[0].is_contiguous() and out[1].is_contiguous()


class _CallPlan:
    """A call's work for every later call with its signature (:func:`pasa_npu.problem.call_signature`):
    the backend's plan of the problem, which returns FIA's output layout. Validating the arguments and
    choosing the backend gave the same result for every call with that signature, so a planned call skips
    them and costs its allocations, its kernel launches and little more. A call is planned the second time
    its signature is seen (a one-off signature, such as a growing KV length, costs only its signature),
    where the backend plans it and its problem's tensors are its inputs or views sharing their data
    pointers; not when the safety net may recompute rows (it reads the results), nor while a CUDA graph is
    being captured (a plan may hold device tensors, which must not live in the graph's memory pool). A
    ``.out`` call's buffers are not part of its signature: each call checks them against the plan's
    problem (:func:`_check_out`), and non-contiguous ones take the unplanned path."""

    __slots__ = ("run", "placeholder", "device_lens", "out_spec")

    def __init__(self, run, placeholder: torch.Tensor | None, device_lens: bool, out_spec: tuple):
        self.run, self.placeholder, self.device_lens, self.out_spec = run, placeholder, device_lens, out_spec

    @classmethod
    def make(cls, problem: Problem, runner, safety_net: bool, query, key, value, options: dict,
             capturing: bool = False):
        """The plan, or None. ``capturing``: a plan for this call alone, which may be made while a CUDA graph
        is being captured (the ``.out`` form's direct write)."""
        plan_of = getattr(runner, "plan", None)
        if plan_of is None or (safety_net and not problem.alloc.overflow_free) \
                or (not capturing and _capturing(problem.device)):
            return None
        if problem.query is not query or problem.key is not key or problem.value is not value \
                or problem.block_table is not options["block_table"] or problem.sink is not options["learnable_sink"] \
                or not _same_data(problem.user_mask, options["atten_mask"]):
            return None
        run = plan_of(problem)
        if run is None:
            return None
        return cls(run, None if problem.softmax_lse_flag else _placeholder(problem.device),
                   problem.device_lens is not None, _out_spec(problem))

    def __call__(self, query, key, value, options: dict, out, workspace):
        lengths = (options["actual_seq_lengths"], options["actual_seq_lengths_kv"]) if self.device_lens else None
        if out is None:
            o, lse = self.run(query, key, value, options["atten_mask"], options["block_table"],
                              options["learnable_sink"], lengths, workspace=workspace)
            return o, (self.placeholder if lse is None else lse[..., None])
        _check_out(out, *self.out_spec)
        if not _direct(out):
            o, lse = self(query, key, value, options, None, workspace)
            out[0].copy_(o)
            if self.placeholder is None:
                out[1].copy_(lse)
            return out
        self.run(query, key, value, options["atten_mask"], options["block_table"], options["learnable_sink"],
                 lengths, out=out[0], lse=None if self.placeholder is not None else out[1], workspace=workspace)
        return out


def _same_data(view: torch.Tensor | None, base: torch.Tensor | None) -> bool:
    """``view`` is None, or reads from ``base``'s data pointer with its dtype (a view of it from its start)."""
    return view is None or (base is not None and view.dtype == base.dtype and view.data_ptr() == base.data_ptr())


def _capturing(device: torch.device) -> bool:
    return device.type == "cuda" and torch.cuda.is_current_stream_capturing()


#: call signature -> _SEEN_ONCE, a _CallPlan, or _UNPLANNABLE. Bounded: emptied when full.
_PLANS: dict[tuple, object] = {}
_PLANS_LIMIT = 1024
_UNSEEN, _SEEN_ONCE, _UNPLANNABLE = object(), object(), object()


def _remember(signature: tuple, entry) -> None:
    if len(_PLANS) >= _PLANS_LIMIT:
        _PLANS.clear()
    _PLANS[signature] = entry


def _safety_net(problem: Problem, out: torch.Tensor, lse: torch.Tensor):
    """Recompute on the ``fp32`` path the valid rows whose result overflowed (see fused_attention)."""
    overflowed = torch.isposinf(lse)
    padded = problem.padded_rows()
    if padded is not None:
        overflowed &= ~padded
    bad = ~torch.isfinite(out).all(dim=-1) | torch.isnan(lse) | overflowed
    if problem.device.type == "cuda" and torch.cuda.is_current_stream_capturing():
        raise RuntimeError(f"precision {problem.alloc.name!r} needs the safety net's host-device synchronisation, "
                           "which a CUDA graph cannot capture: use an overflow-free precision (e.g. 'fp32'), or "
                           "pass safety_net=False")
    if not bool(bad.any()):
        return out, lse
    wide = problem.with_allocation("fp32")
    wide_out, wide_lse = backends.select(wide).run(wide)
    return torch.where(bad[..., None], wide_out, out), torch.where(bad, wide_lse, lse)


def finish(problem: Problem, out: torch.Tensor, lse: torch.Tensor):
    """A backend's result as fused_attention returns it: FIA's output layout and dtype; lse with FIA's
    no-key value, or FIA's placeholder."""
    if not problem.tnd:
        out = from_bnsd(out, problem.input_layout)
    if out.dtype != problem.out_dtype:
        out = out.to(problem.out_dtype)
    if not problem.softmax_lse_flag:
        return out, _placeholder(problem.device)
    return out, _fia_lse(lse)


def _fia_lse(lse: torch.Tensor) -> torch.Tensor:
    """A backend's lse (−∞ for a row with no key) as FIA returns it: LSE_NO_KEY there, a trailing dim of 1."""
    return torch.where(torch.isneginf(lse), LSE_NO_KEY, lse)[..., None]


_PLACEHOLDERS: dict[torch.device, torch.Tensor] = {}


def _placeholder(device: torch.device) -> torch.Tensor:
    """FIA's lse placeholder on ``device``: one zero tensor per device, shared by every call (a fresh one
    would cost every call an allocation and a fill kernel). Made outside inference mode, so that it is an ordinary tensor wherever it is returned; under CUDA graph capture, where its
    fill would only be recorded, a call gets its own."""
    zero = _PLACEHOLDERS.get(device)
    if zero is None:
        if device.type == "cuda" and torch.cuda.is_current_stream_capturing():
            return torch.zeros(1, dtype=torch.float32, device=device)
        with torch.inference_mode(False):
            zero = _PLACEHOLDERS[device] = torch.zeros(1, dtype=torch.float32, device=device)
    return zero


# ============================================================================================
# the PyTorch operators
# ============================================================================================

def _compiled(query, key, value, options: dict, out, workspace):
    """A form's call while compiling: its operator, options by name (a length given as a tensor in the operator's
    tensor argument for it, :data:`_LENGTH_TENSORS`, so that tracing reads none of its values), atten_mask,
    block_table and learnable_sink positional."""
    options = dict(options)
    for name, tensor_name in _LENGTH_TENSORS.items():
        if isinstance(options[name], torch.Tensor):
            options[tensor_name], options[name] = options[name], None
    tensors = [options.pop(name) for name in _TENSOR_OPTIONS]
    if out is None:
        return _fused_attention_op(query, key, value, *tensors, **options)
    out = _out_pair(out)
    _fused_attention_out_op(query, key, value, *tensors, out[0], out[1], workspace, **options)
    return out


def _op_options(given: dict) -> dict:
    """An operator's options by name (:data:`OPTIONS`) from its arguments ``given``, a length from its list or
    its tensor argument."""
    options = {name: given[name] for name in OPTIONS}
    for name, tensor_name in _LENGTH_TENSORS.items():
        if given.get(tensor_name) is not None:
            if options[name] is not None:
                raise ValueError(f"pass {name} as a list ({name}) or as a tensor ({tensor_name}), not both")
            options[name] = given[tensor_name]
    return options


def _traced_problem(query, key, value, given: dict) -> Problem:
    """The problem of a call being traced (a fake implementation's, ``given`` its arguments by name), validated as
    the call is, but for the values of its tensors and of its lengths while they are symbolic (see
    :func:`pasa_npu.problem.int_list`)."""
    fia = _op_options(given)
    del fia["backend"], fia["safety_net"]
    return make_problem(query, key, value, **dict(fia, check_inputs=False))


@torch.library.custom_op("pasa_npu::fused_attention", mutates_args=())
def _fused_attention_op(
    query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, atten_mask: torch.Tensor | None,
    block_table: torch.Tensor | None, learnable_sink: torch.Tensor | None,
    actual_seq_lengths_tensor: torch.Tensor | None = None, actual_seq_lengths_kv_tensor: torch.Tensor | None = None, *,
    actual_seq_lengths: list[int] | None, actual_seq_lengths_kv: list[int] | None, num_heads: int, scale: float,
    pre_tokens: int, next_tokens: int, input_layout: str, num_key_value_heads: int, sparse_mode: int,
    inner_precise: int, block_size: int, softmax_lse_flag: bool, precision: str | None, beta: float | None,
    block_q: int | None, block_kv: int | None, backend: str | None, check_inputs: bool | None, safety_net: bool,
) -> tuple[torch.Tensor, torch.Tensor]:
    return _fused_attention(query, key, value, _op_options(locals()))


@_fused_attention_op.register_fake
def _(query, key, value, atten_mask, block_table, learnable_sink, actual_seq_lengths_tensor=None,
      actual_seq_lengths_kv_tensor=None, **given):
    # The same validation as the real call (shapes, dtypes and scalars only), then empty results.
    problem = _traced_problem(query, key, value, {**locals(), **given})
    out = query.new_empty(problem.out_shape(), dtype=problem.out_dtype)
    return out, query.new_empty(problem.lse_shape(), dtype=torch.float32)


@torch.library.custom_op("pasa_npu::fused_attention_out", mutates_args=("attention_out", "softmax_lse", "workspace"))
def _fused_attention_out_op(
    query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, atten_mask: torch.Tensor | None,
    block_table: torch.Tensor | None, learnable_sink: torch.Tensor | None, attention_out: torch.Tensor,
    softmax_lse: torch.Tensor, workspace: torch.Tensor | None,
    actual_seq_lengths_tensor: torch.Tensor | None = None, actual_seq_lengths_kv_tensor: torch.Tensor | None = None, *,
    actual_seq_lengths: list[int] | None, actual_seq_lengths_kv: list[int] | None, num_heads: int, scale: float,
    pre_tokens: int, next_tokens: int, input_layout: str, num_key_value_heads: int, sparse_mode: int,
    inner_precise: int, block_size: int, softmax_lse_flag: bool, precision: str | None, beta: float | None,
    block_q: int | None, block_kv: int | None, backend: str | None, check_inputs: bool | None, safety_net: bool,
) -> None:
    _fused_attention(query, key, value, _op_options(locals()), (attention_out, softmax_lse), workspace)


@_fused_attention_out_op.register_fake
def _(query, key, value, atten_mask, block_table, learnable_sink, attention_out, softmax_lse, workspace,
      actual_seq_lengths_tensor=None, actual_seq_lengths_kv_tensor=None, **given):
    problem = _traced_problem(query, key, value, {**locals(), **given})
    _check_out((attention_out, softmax_lse), *_out_spec(problem))


#: The keyword forms' defaults: fused_attention's (in OPTIONS' order) and fused_attention_v2's, by name.
_DEFAULTS = {name: p.default for name, p in inspect.signature(fused_attention).parameters.items()
             if p.kind is p.KEYWORD_ONLY}
_DEFAULTS = {name: _DEFAULTS.get(name) for name in OPTIONS}  # learnable_sink: None
_V2_DEFAULTS = {name: p.default for name, p in inspect.signature(fused_attention_v2).parameters.items()
                if p.kind is p.KEYWORD_ONLY}
