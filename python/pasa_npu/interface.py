"""The entry points, with the interfaces of ``torch_npu.npu_fused_infer_attention_score`` (FIA) and of
``torch_npu.npu_fused_infer_attention_score_v2`` (FIA v2), and their ``.out`` forms.

Every form is one call path: the public function names its options, by name, in one dict of
:data:`OPTIONS` (declared once, with their defaults, checks and docs, in :mod:`pasa_npu.options`; FIA v2's
names mapped onto FIA's, :data:`V2_NAMES`), which :func:`_fused_attention`
validates once into a :class:`pasa_npu.problem.Problem`, hands to a backend (:mod:`pasa_npu.backends`),
guards by the safety net and lays out as FIA returns it (or writes into the caller's buffers). The
functional and ``.out`` forms are also the PyTorch operators ``torch.ops.pasa_npu.fused_attention`` and
``torch.ops.pasa_npu.fused_attention_out`` (``torch.library`` custom ops with fake implementations and the
schemas :func:`pasa_npu.options.op_schema` writes), which
``torch.compile`` traces as one opaque node each: a form calls its operator while compiling, and in eager
mode runs the operator's implementation, :func:`_fused_attention`, directly (the operator dispatch would
only add latency), with the same options by name.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import torch

from . import backends
from .options import (DECLARED, DEFAULTS, LENGTH_TENSORS, OPTIONS, TENSOR_OPTIONS, V1_OPTIONS, V2_NAMES, documented,
                      op_schema, refuse_not_implemented)
from .problem import (DEFAULT_PRECISION, FP16_MAX, LAYOUTS, LSE_NO_KEY, LSE_PADDED_ROW, NO_BAND, Problem,
                      call_signature, checks_values, from_bnsd, int_list, keeps_lengths_on_device, make_problem)

__all__ = ["fused_attention", "fused_attention_v2", "fused_attention_out", "fused_attention_v2_out",
           "fused_attention_workspace", "fused_attention_v2_workspace", "OPTIONS", "V2_NAMES", "LAYOUTS", "BACKENDS",
           "LSE_NO_KEY", "LSE_PADDED_ROW", "FP16_MAX"]

BACKENDS = backends.BACKENDS


@documented(*V1_OPTIONS)
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
    **fia_only,
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
        {options}
        **fia_only: FIA's other arguments (``pse_shift``, the quantisation scales and modes such as
            ``antiquant_scale`` and ``antiquant_mode``, MLA's ``query_rope``/``key_rope``, shared prefixes, left
            padding: :data:`pasa_npu.options.NOT_IMPLEMENTED`): accepted at their defaults (None or 0), refused
            otherwise (ValueError naming them). Any other name is a TypeError.

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
    if fia_only:
        refuse_not_implemented(fia_only, "fused_attention", "v1")
    return _call(query, key, value, dict(
        atten_mask=atten_mask, actual_seq_lengths=actual_seq_lengths, actual_seq_lengths_kv=actual_seq_lengths_kv,
        num_heads=num_heads, scale=scale, pre_tokens=pre_tokens, next_tokens=next_tokens, input_layout=input_layout,
        num_key_value_heads=num_key_value_heads, sparse_mode=sparse_mode, inner_precise=inner_precise,
        block_table=block_table, block_size=block_size, softmax_lse_flag=softmax_lse_flag, learnable_sink=None,
        precision=precision, beta=beta, block_q=block_q, block_kv=block_kv, backend=backend,
        check_inputs=check_inputs, safety_net=safety_net))


@documented("learnable_sink")
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
        {options}
        **fia_v2_only: FIA v2's other arguments (MLA's ``query_rope``/``key_rope``, ``pse_shift``, the
            quantisation scales and modes, the dtype overrides): accepted at their defaults (None or
            0), refused otherwise (ValueError naming the argument). Any other name is a TypeError.

    Returns:
        (attention_out, softmax_lse), as :func:`fused_attention` returns them.
    """
    if fia_v2_only:
        refuse_not_implemented(fia_v2_only, "fused_attention_v2", "v2")
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

_LENGTHS = ("actual_seq_lengths", "actual_seq_lengths_kv")


def _v1_names(options: dict) -> dict:
    """FIA v2's names of a call's options as FIA's (:data:`V2_NAMES`), in :data:`OPTIONS`' order."""
    renamed = {V2_NAMES.get(name, name): given for name, given in options.items()}
    return {name: renamed[name] for name in OPTIONS}


def _options(kwargs: dict, defaults: dict, form: str) -> dict:
    """A keyword form's options: its defaults updated by ``kwargs`` (FIA v2's names mapped to FIA's)."""
    extra = {name: x for name, x in kwargs.items() if name not in defaults}
    if extra:
        refuse_not_implemented(extra, form, "v2" if defaults is _V2_DEFAULTS else "v1")
        kwargs = {name: x for name, x in kwargs.items() if name in defaults}
    if defaults is _V2_DEFAULTS:
        return _v1_names({**defaults, **kwargs})
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
    renamed.__dict__.update(vars(error))  # NotImplementedArgument's names
    return renamed.with_traceback(error.__traceback__)


def _fused_attention(query, key, value, options: dict, out=None, workspace=None) -> tuple[torch.Tensor, torch.Tensor]:
    """The work of every form: ``options`` by name (:data:`OPTIONS`), ``out`` the ``.out`` form's buffers."""
    options = _host_lengths(options)
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
    problem = make_problem(query, key, value, **options)
    safety_net = options["safety_net"]
    if problem.device.type == "meta":
        raise ValueError("query, key and value are meta tensors (shapes without data): fused_attention computes on "
                         "CPU, CUDA or NPU tensors; torch.ops.pasa_npu.fused_attention gives its results' shapes on "
                         "meta tensors")
    runner = backends.select(problem, options["backend"])
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


def _host_lengths(options: dict) -> dict:
    """``options`` with lengths given as tensors read on the host (a list each; the caller's dict is not changed),
    but those the kernels read on the device (:func:`pasa_npu.problem.keeps_lengths_on_device`): the host values
    are then part of the signature."""
    q_lens, kv_lens = options["actual_seq_lengths"], options["actual_seq_lengths_kv"]
    # (None first: an isinstance check against torch.Tensor costs µs.)
    if (q_lens is None or not isinstance(q_lens, torch.Tensor)) and \
            (kv_lens is None or not isinstance(kv_lens, torch.Tensor)):
        return options
    if keeps_lengths_on_device(q_lens, kv_lens, options["input_layout"], options["block_table"],
                               options["check_inputs"]):
        return options
    return {**options, **{name: int_list(name, options[name]) for name in _LENGTHS
                          if isinstance(options[name], torch.Tensor)}}


def check_call(query, key, value, kwargs: dict, form: str = "fused_attention") -> None:
    """The validation of a call of ``form`` (``"fused_attention"`` or ``"fused_attention_v2"``, their ``.out`` and
    workspace forms alike) with keyword arguments ``kwargs``, without the call: raises the error the call raises
    (:class:`pasa_npu.options.NotImplementedArgument` for FIA arguments it does not implement). For callers that
    route a call by whether pasa-npu takes it (:mod:`pasa_npu.integrations.torch_npu`), at every step of a
    server: a call whose signature a call of pasa-npu's has validated already (:data:`_PLANS` holds only those)
    costs its signature, as a planned call does, not a second validation."""
    defaults = _V2_DEFAULTS if form.startswith("fused_attention_v2") else _DEFAULTS
    options = _host_lengths(_options(kwargs, defaults, form))
    if not _validated_before(query, key, value, options):
        make_problem(query, key, value, **options)


def _validated_before(query, key, value, options: dict) -> bool:
    """Whether a call with this call's signature has passed :func:`make_problem` (it is in :data:`_PLANS`); never
    while torch.compile traces the call (a lookup in that table would become a guard of the compiled call)."""
    if torch.compiler.is_compiling() or checks_values(options["check_inputs"]):
        return False
    signature = call_signature(query, key, value, options)
    try:
        return signature is not None and signature in _PLANS
    except TypeError:  # a sequence argument holding something unhashable
        return False


def _workspace(query, key, value, options: dict) -> torch.Tensor:
    problem = make_problem(query, key, value, **_host_lengths(options))
    runner = backends.select(problem, options["backend"])
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
    tensor argument for it, :data:`pasa_npu.options.LENGTH_TENSORS`, so that tracing reads none of its values),
    atten_mask, block_table and learnable_sink positional."""
    options = dict(options)
    for name, tensor_name in LENGTH_TENSORS.items():
        if isinstance(options[name], torch.Tensor):
            options[tensor_name], options[name] = options[name], None
    tensors = [options.pop(name) for name in TENSOR_OPTIONS]
    if out is None:
        return _fused_attention_op(query, key, value, *tensors, **options)
    out = _out_pair(out)
    _fused_attention_out_op(query, key, value, *tensors, out[0], out[1], workspace, **options)
    return out


@torch.library.custom_op("pasa_npu::fused_attention", mutates_args=(), schema=op_schema(out=False))
def _fused_attention_op(query, key, value, atten_mask, block_table, learnable_sink, actual_seq_lengths_tensor=None,
                        actual_seq_lengths_kv_tensor=None, **options):
    # The schema (pasa_npu.options.op_schema) names every option; the tensors come positionally.
    return _fused_attention(query, key, value, _in_order(options, atten_mask, block_table, learnable_sink,
                                                         actual_seq_lengths_tensor, actual_seq_lengths_kv_tensor))


@_fused_attention_op.register_fake
def _(query, key, value, atten_mask, block_table, learnable_sink, actual_seq_lengths_tensor=None,
      actual_seq_lengths_kv_tensor=None, **options):
    # The same validation as the real call (shapes, dtypes and scalars only; lengths symbolic while traced:
    # pasa_npu.problem.int_list), then empty results.
    options = {**_in_order(options, atten_mask, block_table, learnable_sink, actual_seq_lengths_tensor,
                           actual_seq_lengths_kv_tensor), "check_inputs": False}
    problem = make_problem(query, key, value, **options)
    out = query.new_empty(problem.out_shape(), dtype=problem.out_dtype)
    return out, query.new_empty(problem.lse_shape(), dtype=torch.float32)


@torch.library.custom_op("pasa_npu::fused_attention_out", mutates_args=("attention_out", "softmax_lse", "workspace"),
                         schema=op_schema(out=True))
def _fused_attention_out_op(query, key, value, atten_mask, block_table, learnable_sink, attention_out, softmax_lse,
                            workspace, actual_seq_lengths_tensor=None, actual_seq_lengths_kv_tensor=None,
                            **options) -> None:
    _fused_attention(query, key, value, _in_order(options, atten_mask, block_table, learnable_sink,
                                                  actual_seq_lengths_tensor, actual_seq_lengths_kv_tensor),
                     (attention_out, softmax_lse), workspace)


@_fused_attention_out_op.register_fake
def _(query, key, value, atten_mask, block_table, learnable_sink, attention_out, softmax_lse, workspace,
      actual_seq_lengths_tensor=None, actual_seq_lengths_kv_tensor=None, **options):
    options = {**_in_order(options, atten_mask, block_table, learnable_sink, actual_seq_lengths_tensor,
                           actual_seq_lengths_kv_tensor), "check_inputs": False}
    _check_out((attention_out, softmax_lse), *_out_spec(make_problem(query, key, value, **options)))


def _in_order(scalars: dict, atten_mask, block_table, learnable_sink, *length_tensors) -> dict:
    """An operator's arguments as a form's options: by name, in :data:`OPTIONS`' order; a length from its list or
    its tensor argument (:data:`pasa_npu.options.LENGTH_TENSORS`)."""
    given = {**scalars, "atten_mask": atten_mask, "block_table": block_table, "learnable_sink": learnable_sink}
    options = {name: given[name] for name in OPTIONS}
    for (name, tensor_name), tensor in zip(LENGTH_TENSORS.items(), length_tensors):
        if tensor is not None:
            if options[name] is not None:
                raise ValueError(f"pass {name} as a list ({name}) or as a tensor ({tensor_name}), not both")
            options[name] = tensor
    return options


#: The keyword forms' defaults: fused_attention's (in OPTIONS' order) and fused_attention_v2's, by name.
_DEFAULTS = dict(DEFAULTS)
_V2_DEFAULTS = {option.v2 or option.name: option.default for option in DECLARED}
