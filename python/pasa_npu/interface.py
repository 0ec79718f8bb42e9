"""``fused_attention``: the entry point, with the interface of ``torch_npu.npu_fused_infer_attention_score``.

The call is validated once into a :class:`pasa_npu.problem.Problem`, handed to a backend
(:mod:`pasa_npu.backends`), guarded by the safety net, and laid out as FIA returns it. It is also the
PyTorch operator ``torch.ops.pasa_npu.fused_attention`` (a ``torch.library`` custom op with a fake
implementation), which ``torch.compile`` traces as one opaque node: ``fused_attention`` calls it while
compiling and runs the same implementation directly in eager mode, where the operator dispatch would
only add latency.
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence

import torch

from . import backends
from .problem import (DEFAULT_PRECISION, FP16_MAX, LAYOUTS, LSE_NO_KEY, LSE_PADDED_ROW, NO_BAND, Problem,
                      call_signature, checks_values, from_bnsd, int_list, make_problem)

__all__ = ["fused_attention", "LAYOUTS", "BACKENDS", "LSE_NO_KEY", "LSE_PADDED_ROW", "FP16_MAX"]

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
            is the batch count.
        actual_seq_lengths_kv: None, or the valid key/value length of each batch, with the
            same rules against S2 (cumulative against T_kv, and required, with TND). Keys past a
            batch's length are not attended to.
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
            says how many keys of its pages each batch uses, and the query takes any layout but
            TND. Block ids are checked with ``check_inputs`` (on CPU tensors an id outside the
            cache is always a ValueError; on a device without the check it faults there).
        block_size: FIA's PageAttention page length: 0 without a block_table, else a multiple
            of 16 from 16 to 512.
        softmax_lse_flag: whether to return the log-sum-exp of each row's scaled scores.
        precision: the precision allocation, one of ``pasa_npu.PRECISIONS`` (the table in the
            README); None follows inner_precise: "fp32" for 0 and 2, "fp16_fp32" for 1 and 3.
        beta: PASA's shift coefficient in [0, 1); None takes the optimal default for block_kv
            and scale. Only used by the shifted allocations.
        block_q: the query tile of the loop (None = 128). Rows are independent, so it changes no
            result; the Triton and AscendC kernels pick their own.
        block_kv: the KV block length of the loop (None = 128): PASA's shift matrix is
            block_kv × block_kv, so it changes the shifted allocations' results. The Triton
            kernel takes 16, 32, 64, 128 or 256 for them, the AscendC kernel 128.
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
    # The operator takes int lists. (None first: an isinstance check against torch.Tensor costs µs.)
    if actual_seq_lengths is not None and isinstance(actual_seq_lengths, torch.Tensor):
        actual_seq_lengths = int_list("actual_seq_lengths", actual_seq_lengths)
    if actual_seq_lengths_kv is not None and isinstance(actual_seq_lengths_kv, torch.Tensor):
        actual_seq_lengths_kv = int_list("actual_seq_lengths_kv", actual_seq_lengths_kv)
    options = (atten_mask, actual_seq_lengths, actual_seq_lengths_kv, num_heads, scale, pre_tokens, next_tokens,
               input_layout, num_key_value_heads, sparse_mode, inner_precise, block_table, block_size,
               softmax_lse_flag, precision, beta, block_q, block_kv, backend, check_inputs, safety_net)
    if torch.compiler.is_compiling():
        kwargs = dict(zip(_OPTION_NAMES, options))
        return _fused_attention_op(query, key, value, kwargs.pop("atten_mask"), kwargs.pop("block_table"), **kwargs)
    return _fused_attention(query, key, value, options)


def _fused_attention(query, key, value, options: tuple) -> tuple[torch.Tensor, torch.Tensor]:
    """fused_attention's work; ``options`` are its keyword arguments' values in its signature's order."""
    signature = None if checks_values(options[_CHECK_INPUTS]) else call_signature(query, key, value, options)
    try:
        plan = _PLANS.get(signature, _UNSEEN) if signature is not None else _UNPLANNABLE
    except TypeError:  # a sequence argument holding something unhashable: validated in full
        signature, plan = None, _UNPLANNABLE
    if plan.__class__ is _CallPlan:
        return plan(query, key, value, options[_ATTEN_MASK], options[_BLOCK_TABLE])
    fia = dict(zip(_OPTION_NAMES, options))
    backend, safety_net = fia.pop("backend"), fia.pop("safety_net")
    problem = make_problem(query, key, value, **fia)
    if not isinstance(safety_net, bool):
        raise TypeError(f"safety_net must be a bool, got {type(safety_net).__name__}")
    if problem.device.type == "meta":
        raise ValueError("query, key and value are meta tensors (shapes without data): fused_attention computes on "
                         "CPU, CUDA or NPU tensors; torch.ops.pasa_npu.fused_attention gives its results' shapes on "
                         "meta tensors")
    runner = backends.select(problem, backend)
    if plan is _SEEN_ONCE:  # a repeated call: plan it, once
        plan = _CallPlan.make(problem, runner, safety_net, query, key, value, fia["atten_mask"], fia["block_table"])
        _remember(signature, plan or _UNPLANNABLE)
        if plan is not None:
            return plan(query, key, value, fia["atten_mask"], fia["block_table"])
    elif plan is _UNSEEN:
        _remember(signature, _SEEN_ONCE)
    out, lse = runner.run(problem)
    if safety_net and not problem.alloc.overflow_free:
        out, lse = _safety_net(problem, out, lse)
    return finish(problem, out, lse)


class _CallPlan:
    """A call's work for every later call with its signature (:func:`pasa_npu.problem.call_signature`):
    the backend's plan of the problem, which returns FIA's output layout. Validating the arguments and
    choosing the backend gave the same result for every call with that signature, so a planned call skips
    them and costs its allocations, its kernel launches and little more. A call is planned the second time
    its signature is seen (a one-off signature, such as a growing KV length, costs only its signature),
    where the backend plans it and its problem's tensors are its inputs or views sharing their data
    pointers; not when the safety net may recompute rows (it reads the results), nor while a CUDA graph is
    being captured (a plan may hold device tensors, which must not live in the graph's memory pool)."""

    __slots__ = ("run", "placeholder")

    def __init__(self, run, placeholder: torch.Tensor | None):
        self.run, self.placeholder = run, placeholder

    @classmethod
    def make(cls, problem: Problem, runner, safety_net: bool, query, key, value, atten_mask, block_table):
        plan_of = getattr(runner, "plan", None)
        if plan_of is None or (safety_net and not problem.alloc.overflow_free) or _capturing(problem.device):
            return None
        if problem.query is not query or problem.key is not key or problem.value is not value \
                or problem.block_table is not block_table or not _same_data(problem.user_mask, atten_mask):
            return None
        run = plan_of(problem)
        if run is None:
            return None
        return cls(run, None if problem.softmax_lse_flag else _placeholder(problem.device))

    def __call__(self, query, key, value, atten_mask, block_table):
        out, lse = self.run(query, key, value, atten_mask, block_table)
        return out, (self.placeholder if lse is None else _fia_lse(lse))


def _same_data(view: torch.Tensor | None, base: torch.Tensor | None) -> bool:
    """``view`` is None, or reads from ``base``'s data pointer with its dtype (a view of it from its start)."""
    return view is None or (base is not None and view.dtype == base.dtype and view.data_ptr() == base.data_ptr())


def _capturing(device: torch.device) -> bool:
    return device.type == "cuda" and torch.cuda.is_current_stream_capturing()


#: fused_attention's keyword arguments, in its signature's order (the order of its ``options`` tuple).
_OPTION_NAMES = tuple(inspect.signature(fused_attention).parameters)[3:]
_ATTEN_MASK, _BLOCK_TABLE, _CHECK_INPUTS = map(_OPTION_NAMES.index, ("atten_mask", "block_table", "check_inputs"))

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
# the PyTorch operator
# ============================================================================================

@torch.library.custom_op("pasa_npu::fused_attention", mutates_args=())
def _fused_attention_op(
    query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, atten_mask: torch.Tensor | None,
    block_table: torch.Tensor | None, *, actual_seq_lengths: list[int] | None, actual_seq_lengths_kv: list[int] | None, num_heads: int, scale: float,
    pre_tokens: int, next_tokens: int, input_layout: str, num_key_value_heads: int, sparse_mode: int,
    inner_precise: int, block_size: int, softmax_lse_flag: bool,
    precision: str | None, beta: float | None, block_q: int | None, block_kv: int | None, backend: str | None,
    check_inputs: bool | None, safety_net: bool,
) -> tuple[torch.Tensor, torch.Tensor]:
    given = locals()  # the arguments, by name
    return _fused_attention(query, key, value, tuple(given[name] for name in _OPTION_NAMES))


@_fused_attention_op.register_fake
def _(query, key, value, atten_mask, block_table, *, backend, safety_net, check_inputs, **fia):
    # The same validation as the real call (shapes, dtypes and scalars only), then empty results.
    problem = make_problem(query, key, value, atten_mask=atten_mask, block_table=block_table, check_inputs=False,
                           **fia)
    out = query.new_empty(problem.out_shape(), dtype=problem.out_dtype)
    return out, query.new_empty(problem.lse_shape(), dtype=torch.float32)
