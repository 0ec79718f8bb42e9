"""pasa-npu behind torch_npu's fused infer attention: one line for code that already calls FIA.

    import pasa_npu
    pasa_npu.patch_torch_npu()                   # in the process that calls FIA

or, for vLLM (vllm-ascend) and SGLang, whose worker processes load their general plugins::

    export PASA_NPU_PATCH_TORCH_NPU=1

After it, ``torch_npu.npu_fused_infer_attention_score``, ``torch_npu.npu_fused_infer_attention_score_v2``, their
``.out`` forms and their workspace queries ``_npu_fused_infer_attention_score(_v2)_get_max_workspace`` (in
``torch_npu`` and in ``torch.ops.npu``, the two names callers use) run each call that pasa-npu takes on pasa-npu
(``pasa_npu.fused_attention``, ``fused_attention_v2``, ``fused_attention_out``, ``fused_attention_v2_out``,
``fused_attention_workspace``, ``fused_attention_v2_workspace``) and hand every other call to torch_npu's own
function with its arguments untouched. Whether pasa-npu takes a call is one predicate, :func:`declines`: none
of the FIA features pasa-npu never takes is set (quantisation, MLA rope inputs, ``pse_shift``, shared prefixes,
left padding, dtype overrides), every argument is one pasa-npu knows, pasa-npu has the function for the call,
and pasa-npu's one validation of that function's arguments, :func:`pasa_npu.interface.check_call`, accepts them
(FIA's arguments pasa-npu does not implement it accepts at their defaults only). The first call of
each entry point that runs on pasa-npu, and the first one handed back for each reason, are logged (logger
``pasa_npu``, level WARNING); :func:`routes` counts them all.

A workspace is only ever handed to the implementation that sized it: the workspace query of a call pasa-npu
takes returns pasa-npu's workspace, and a ``.out`` call that reaches one implementation with a workspace the
other made gets ``workspace=None`` instead (the implementation sizes its own).
"""

from __future__ import annotations

import logging
import os
import weakref
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
import torch

from ..interface import check_call
from ..options import NOT_IMPLEMENTED, V2_NAMES, NotImplementedArgument
from ..precision import DEFAULT_PRECISION
from ..problem import NO_BAND, int_list
from . import MASKED_BIAS, PasaSettings, compressed_causal_mask
from .trace import Recorder

__all__ = ["patch_torch_npu", "unpatch_torch_npu", "routes", "declines", "entry_call", "fia_equivalent",
           "patch_from_environment", "ENTRIES", "ENV"]

#: The environment variable that makes the vLLM / SGLang plugin (:func:`patch_from_environment`) patch.
ENV = "PASA_NPU_PATCH_TORCH_NPU"

log = logging.getLogger("pasa_npu")

#: What the arguments of the other entry points (:data:`ENTRIES`) that pasa-npu never takes are (FIA's own:
#: :data:`pasa_npu.options.NOT_IMPLEMENTED`).
_QUANT = "quantisation, which pasa-npu never takes"
_PSE = "a position bias (pse_shift), which pasa-npu never takes"
_PREFIX = "shared prefixes, which pasa-npu never takes"
_PADDING = "left padding, which pasa-npu never takes"
_RESERVED = "an argument torch_npu reserves"


@dataclass(frozen=True)
class _Form:
    """One FIA entry point as torch_npu names it, and pasa-npu's functions for it."""

    op: str  #: torch_npu's name of the call (its ``.out`` is the out form)
    workspace_op: str  #: torch_npu's name of the call's workspace query
    functions: dict  #: "call", "out", "workspace" -> the pasa_npu function of that form
    #: The FIA arguments pasa-npu takes (its functions take them by these names) -> make_problem's name for each.
    taken: dict
    #: The FIA arguments pasa-npu never takes -> (their default, what they are), as declared in
    #: :data:`pasa_npu.options.NOT_IMPLEMENTED`: pasa-npu's functions refuse them set to anything but their defaults
    #: (such a call goes to torch_npu).
    never: dict


_V1_TAKEN = ("atten_mask", "actual_seq_lengths", "actual_seq_lengths_kv", "num_heads", "scale", "pre_tokens",
             "next_tokens", "input_layout", "num_key_value_heads", "sparse_mode", "inner_precise", "block_table",
             "block_size", "softmax_lse_flag")

V1 = _Form(
    op="npu_fused_infer_attention_score",
    workspace_op="_npu_fused_infer_attention_score_get_max_workspace",
    functions={"call": "fused_attention", "out": "fused_attention_out", "workspace": "fused_attention_workspace"},
    taken={name: name for name in _V1_TAKEN},
    never=NOT_IMPLEMENTED["v1"],
)

V2 = _Form(
    op="npu_fused_infer_attention_score_v2",
    workspace_op="_npu_fused_infer_attention_score_v2_get_max_workspace",
    functions={"call": "fused_attention_v2", "out": "fused_attention_v2_out",
               "workspace": "fused_attention_v2_workspace"},
    taken={**{name: name for name in _V1_TAKEN if name not in V2_NAMES.values()}, **V2_NAMES,
           "learnable_sink": "learnable_sink"},
    never=NOT_IMPLEMENTED["v2"],
)

FORMS = (V1, V2)
_QKV = ("query", "key", "value")
#: The ``.out`` form's own arguments: the workspace and the output tensors (``out=(attention_out, softmax_lse)``
#: or each by its schema name).
_OUT_ARGS = ("workspace", "out", "attention_out", "softmax_lse")


# ============================================================================================
# the predicate
# ============================================================================================

def declines(form: _Form, kind: str, args: tuple, kwargs: dict, settings: PasaSettings) -> tuple[str, str] | None:
    """Why pasa-npu does not take this call of ``form`` (``kind``: "call", "out" or "workspace"), as
    (category, detail), or None when it takes it. ``args``/``kwargs`` are the call's arguments as the caller
    passed them."""
    if len(args) > 3:
        return "arguments", f"{len(args)} positional arguments (FIA takes query, key, value and keywords)"
    given = dict(zip(_QKV, args))
    given.update(kwargs)
    if not all(name in given for name in _QKV):
        return "arguments", "query, key and value are not all given"
    if kind == "out" and "out" not in given and not ("attention_out" in given and "softmax_lse" in given):
        return "arguments", "no output tensors (out=(attention_out, softmax_lse))"
    own = _OUT_ARGS if kind == "out" else ()
    fia = {name: x for name, x in given.items() if name not in _QKV and name not in own}
    unknown = [name for name in fia if name not in form.taken and name not in form.never]
    if unknown:
        return "arguments", f"{', '.join(unknown)}: not an argument of torch_npu.{form.op} that pasa-npu knows"
    function = form.functions[kind]
    if _pasa_function(function) is None:
        return "pasa-npu", f"pasa_npu.{function} is not in this pasa-npu"
    try:
        check_call(given["query"], given["key"], given["value"],
                   {**{name: _pasa_value(x) for name, x in fia.items()}, **settings.options()}, function)
    except NotImplementedArgument as e:
        return ", ".join(e.names), str(e)
    except (TypeError, ValueError) as e:
        # (str(e): a constant while torch.compile's Dynamo traces the call, where a formatted exception is not.)
        return "validation", f"pasa-npu's validation: {str(e)}"
    return None


def _problem_args(form: _Form, given: dict) -> dict:
    """The FIA arguments of a call that pasa-npu takes, by make_problem's names, as make_problem takes them."""
    return {form.taken[name]: _pasa_value(x) for name, x in _taken(form, given).items() if x is not None}


def _taken(form: _Form, given: dict) -> dict:
    """The arguments of a call that pasa-npu's functions take, by the entry point's names: FIA's (those pasa-npu
    never takes only at their defaults, which :func:`declines` saw)."""
    return {name: x for name, x in given.items() if name in form.taken or name in form.never}


def _is_default(x, default) -> bool:
    if default is None:
        return x is None
    return not isinstance(x, torch.Tensor) and x == default


def _pasa_value(x):
    """An argument as pasa-npu takes it: FIA's int lists may come as NumPy arrays (SGLang passes them)."""
    return x.tolist() if isinstance(x, np.ndarray) else x


def _pasa_function(name: str):
    import pasa_npu

    return getattr(pasa_npu, name, None)


# ============================================================================================
# routing
# ============================================================================================

#: The settings of the patch (pasa-npu's own arguments of every call it takes).
_settings = PasaSettings()
#: (entry point, "pasa-npu" or "torch_npu", reason category) -> calls.
_routes: Counter = Counter()
#: The workspaces pasa-npu made, by id (a tensor is matched by identity, never by value).
_our_workspaces: "weakref.WeakValueDictionary[int, torch.Tensor]" = weakref.WeakValueDictionary()


def _route(form: _Form, kind: str, original, args: tuple, kwargs: dict):
    entry = f"torch_npu.{form.workspace_op if kind == 'workspace' else form.op}{'.out' if kind == 'out' else ''}"
    reason = declines(form, kind, args, kwargs, _settings)
    _trace(form.workspace_op if kind == "workspace" else form.op, "out" if kind == "out" else "call", entry,
           reason, args, kwargs)
    workspace = kwargs.get("workspace")
    if reason is not None:
        _record(entry, "torch_npu", *reason)
        if kind == "out" and _is_ours(workspace):
            kwargs = {**kwargs, "workspace": None}
        return original(*args, **kwargs)
    _record(entry, "pasa-npu", "", f"pasa_npu.{form.functions[kind]}")
    given = dict(zip(_QKV, args))
    given.update(kwargs)
    taken = {name: _pasa_value(x) for name, x in _taken(form, given).items()}
    function = _pasa_function(form.functions[kind])
    q, k, v = (given[name] for name in _QKV)
    if kind == "workspace":
        made = function(q, k, v, **taken, **_settings.options())
        _our_workspaces[id(made)] = made
        return made
    if kind == "out":
        out = given["out"] if "out" in given else (given["attention_out"], given["softmax_lse"])
        return function(q, k, v, workspace=workspace if _is_ours(workspace) else None, out=tuple(out), **taken,
                        **_settings.options())
    return function(q, k, v, **taken, **_settings.options())


def _is_ours(workspace) -> bool:
    return isinstance(workspace, torch.Tensor) and _our_workspaces.get(id(workspace)) is workspace


# A call that torch.compile traces is routed once, while Dynamo traces it (the compiled code then runs the route
# chosen): counted and reported then, by Python outside the traced code (Dynamo cannot trace logging).
@torch.compiler.assume_constant_result
def _record(entry: str, ran: str, category: str, detail: str) -> None:
    key = (entry, ran, category)
    _routes[key] += 1
    if _routes[key] > 1:
        return
    if ran == "pasa-npu":
        log.warning("pasa_npu: %s now runs the calls pasa-npu takes on %s; each other kind of call goes to "
                    "torch_npu's own and is reported once", entry, detail)
    else:
        log.warning("pasa_npu: a %s call went to torch_npu's own implementation (%s); later calls handed back for "
                    "this reason are counted in pasa_npu.torch_npu_routes() and not reported", entry, detail)


def routes() -> dict[tuple[str, str, str], int]:
    """How many calls went where since the patch: {(entry point, "pasa-npu" or "torch_npu", reason category):
    calls}; the category is "" for pasa-npu, and for torch_npu the arguments that pasa-npu never takes,
    "validation" (pasa-npu's validator refused the call), "arguments" or "pasa-npu" (a function this pasa-npu
    lacks)."""
    return dict(_routes)


class _Router:
    """Stands in for one of torch_npu's FIA entry points (an ``OpOverloadPacket`` of ``torch.ops.npu``): calling it,
    or its ``.default``, routes the call; ``.out`` routes the out form; any other attribute is the original's."""

    def __init__(self, form: _Form, kind: str, original):
        self._form, self._kind, self._original = form, kind, original

    def __call__(self, *args, **kwargs):
        return _route(self._form, self._kind, self._original, args, kwargs)

    def default(self, *args, **kwargs):
        return _route(self._form, self._kind, self._original.default, args, kwargs)

    def out(self, *args, **kwargs):
        if self._kind != "call":
            raise AttributeError(f"torch_npu.{self._form.workspace_op} has no out form")
        return _route(self._form, "out", self._original.out, args, kwargs)

    def __getattr__(self, name):
        return getattr(self._original, name)

    def __repr__(self):
        return f"<pasa-npu router of {self._original!r}>"


# ============================================================================================
# the other attention entry points: each call translated into the FIA call of the same semantics
# ============================================================================================

class _Fia(NamedTuple):
    """An entry point's call as the FIA call that computes it: query, key, value and FIA's keyword arguments;
    ``into`` the caller's output tensor the result is written to (ATB ops), or None; ``finish(out, lse)`` what
    the entry point returns, given FIA's (attention_out, softmax_lse)."""

    query: torch.Tensor
    key: torch.Tensor
    value: torch.Tensor
    options: dict
    finish: Callable
    into: torch.Tensor | None = None


@dataclass(frozen=True)
class _Entry:
    """One of torch_npu's other attention entry points and its translation into FIA."""

    op: str  #: torch_npu's name of it
    ops: str  #: the torch.ops namespace that holds it too ("npu", or "atb" for the ATB ops)
    params: tuple  #: its required parameters in order (which callers may pass by position)
    optional: tuple  #: its other parameters (keywords)
    #: given (the call's arguments by name) -> the FIA call of the same semantics, or (category, detail) why none
    translate: Callable


def _not_default(given: dict, never: dict) -> tuple[str, str] | None:
    """(category, detail) naming the arguments of ``never`` (name -> (default, what it is)) that the call sets."""
    used = [name for name, (default, _) in never.items() if name in given and not _is_default(given[name], default)]
    if not used:
        return None
    return ", ".join(used), f"{', '.join(used)} set: {'; '.join(sorted({never[n][1] for n in used}))}"


def _renamed_fia(given: dict, names: dict, defaults: dict, never: dict) -> _Fia | tuple[str, str]:
    """A call of an entry point whose arguments are FIA's under other names (``names``: its name -> FIA's)
    and defaults (``defaults``: FIA's name -> the entry point's default, passed where the call omits it)."""
    refused = _not_default(given, never)
    if refused is not None:
        return refused
    options = {**defaults, **{names.get(n, n): x for n, x in given.items() if n not in never and n not in _QKV}}
    options = {n: _pasa_value(x) for n, x in options.items() if x is not None}
    return _Fia(given["query"], given["key"], given["value"], options, lambda out, lse: out)


_PFA_NEVER = {**{n: (None, _QUANT) for n in ("deq_scale1", "quant_scale1", "deq_scale2", "quant_scale2",
                                              "quant_offset2")},
              "pse_shift": (None, _PSE), "padding_mask": (None, _RESERVED)}


def _prompt_flash_attention(given: dict) -> _Fia | tuple[str, str]:
    """npu_prompt_flash_attention is FIA's prefill half: FIA's arguments, ``scale_value`` for ``scale``, and
    its own default next_tokens 0 (with a mask of sparse mode 0, causal from the top-left corner)."""
    return _renamed_fia(given, {"scale_value": "scale"}, {"next_tokens": 0}, _PFA_NEVER)


_IFA_NEVER = {**{n: (None, _QUANT) for n in ("dequant_scale1", "quant_scale1", "dequant_scale2", "quant_scale2",
                                              "quant_offset2", "antiquant_scale", "antiquant_offset")},
              "pse_shift": (None, _PSE), "kv_padding_size": (None, _PADDING),
              "padding_mask": (None, _RESERVED)}
#: The S axis of the query in each layout npu_incre_flash_attention takes.
_S_AXIS = {"BSH": 1, "BSND": 1, "BNSD": 2}


def _incre_flash_attention(given: dict) -> _Fia | tuple[str, str]:
    """npu_incre_flash_attention is FIA's decode half: one query row per batch, its ``actual_seq_lengths``
    the key lengths (FIA's ``actual_seq_lengths_kv``), ``scale_value`` for ``scale``, inner_precise 1 by
    default; no sparse mode (a mask is FIA's sparse mode 0)."""
    layout, query = given.get("input_layout", "BSH"), given["query"]
    axis = _S_AXIS.get(layout)
    if axis is None:
        return "arguments", f"input_layout {layout!r} (npu_incre_flash_attention takes BSH, BSND and BNSD)"
    if isinstance(query, torch.Tensor) and query.ndim > axis and query.shape[axis] != 1:
        return "query rows", (f"a query of {query.shape[axis]} rows per batch (npu_incre_flash_attention "
                              "computes one)")
    return _renamed_fia(given, {"scale_value": "scale", "actual_seq_lengths": "actual_seq_lengths_kv"},
                        {"inner_precise": 1}, _IFA_NEVER)


_FA_NEVER = {"pse": (None, _PSE), "padding_mask": (None, _RESERVED),
             "prefix": (None, _PREFIX), "dropout_mask": (None, "dropout"), "keep_prob": (1.0, "dropout"),
             "sink": (None, "a sink, whose softmax statistics torch_npu does not document")}
#: npu_fusion_attention's layouts -> FIA's (SBH is BSH with its first two axes swapped).
_FA_LAYOUTS = {"BSH": "BSH", "SBH": "BSH", "BSND": "BSND", "BNSD": "BNSD", "TND": "TND"}


def _fusion_attention(given: dict) -> _Fia | tuple[str, str]:
    """The inference forward of npu_fusion_attention: FIA's call for the output, and its softmax statistics
    (:func:`_fusion_results`). A call that needs a gradient, drops out, or sets pse, prefix or a sink goes to
    torch_npu; so do sparse modes 5-8 (prefix and the varlen split modes)."""
    q, k, v = (given[n] for n in _QKV)
    if torch.is_grad_enabled() and any(isinstance(t, torch.Tensor) and t.requires_grad for t in (q, k, v)):
        return "gradient", "query, key or value requires grad (torch_npu's op has the backward)"
    refused = _not_default(given, _FA_NEVER)
    if refused is not None:
        return refused
    layout, mode = given.get("input_layout"), given.get("sparse_mode", 0)
    if layout not in _FA_LAYOUTS:
        return "arguments", f"input_layout {layout!r} (npu_fusion_attention takes {', '.join(_FA_LAYOUTS)})"
    if mode not in (0, 1, 2, 3, 4):
        return "sparse_mode", f"sparse_mode {mode!r} (pasa-npu takes 0-4)"
    softmax_layout = given.get("softmax_layout", "")
    lens = [given.get("actual_seq_qlen"), given.get("actual_seq_kvlen")]
    if layout != "TND" and (softmax_layout != "" or any(x is not None for x in lens)):
        return "arguments", "actual_seq_qlen, actual_seq_kvlen or softmax_layout outside TND"
    if layout == "SBH":
        q, k, v = (t.transpose(0, 1) for t in (q, k, v))
    heads = given["head_num"]
    options = dict(num_heads=heads, scale=given.get("scale", 1.0), input_layout=_FA_LAYOUTS[layout],
                   softmax_lse_flag=True, num_key_value_heads=_kv_heads(layout, q, k, heads))
    if given.get("atten_mask") is not None:  # without a mask torch_npu computes every key: no mode, no band
        options.update(atten_mask=given["atten_mask"], sparse_mode=mode,
                       pre_tokens=given.get("pre_tockens", NO_BAND), next_tokens=given.get("next_tockens", NO_BAND))
    if layout == "TND":
        if any(x is None for x in lens):
            return "arguments", "TND without actual_seq_qlen and actual_seq_kvlen"
        options.update(zip(("actual_seq_lengths", "actual_seq_lengths_kv"), _without_idle_batches(*lens)))
    return _Fia(q, k, v, options, lambda out, lse: _fusion_results(given, layout, softmax_layout, out, lse))


def _kv_heads(layout: str, q: torch.Tensor, k: torch.Tensor, heads: int) -> int:
    """npu_fusion_attention's key heads, which it reads from the shapes (FIA takes them as an argument)."""
    if layout in ("BSH", "SBH"):
        d = q.shape[-1] // heads if heads else 0
        return k.shape[-1] // d if d else 0
    return k.shape[2 if layout == "BSND" else 1]


def _without_idle_batches(q_lens, kv_lens) -> tuple[list[int], list[int]]:
    """npu_fusion_attention's cumulative TND lengths without the trailing zeros that mark batches it skips
    (vllm-ascend pads its encoder's lengths so): the rows past the last batch are then FIA's padding."""
    q, kv = int_list("actual_seq_qlen", q_lens), int_list("actual_seq_kvlen", kv_lens)
    while len(q) > 1 and len(kv) > 1 and q[-1] == 0 and kv[-1] == 0 and max(q) > 0:
        q, kv = q[:-1], kv[:-1]
    return q, kv


def _fusion_results(given: dict, layout: str, softmax_layout: str, out: torch.Tensor, lse: torch.Tensor) -> tuple:
    """npu_fusion_attention's 7 results from FIA's: attention_out (SBH: its axes back), softmax_max and
    softmax_sum float32 with the last axis of 8 that torch_npu gives them, (B, N, S1, 8) or TND (T, N, 8)
    (laid out N-major unless softmax_layout is "TND", as torch_npu lays them out), softmax_out empty of the
    query's dtype, and the dropout's seed, offset and element count (seed and offset 0: no dropout ran).
    softmax_max holds each row's log-sum-exp and softmax_sum 1: the pair's max + log(sum) is the row's lse,
    which is what its readers (the backward, ring attention's merges) compute from the two."""
    q, k = given["query"], given["key"]
    if layout == "SBH":
        out = out.transpose(0, 1).contiguous()
    if layout == "TND" and softmax_layout != "TND":
        stat = lse.permute(1, 0, 2).expand(lse.shape[1], lse.shape[0], 8).contiguous().view(*lse.shape[:2], 8)
    else:
        stat = lse.expand(*lse.shape[:-1], 8).contiguous()
    if layout == "TND":  # torch_npu's count, trailing zeros included
        q_lens, kv_lens = int_list("actual_seq_qlen", given["actual_seq_qlen"]), int_list(
            "actual_seq_kvlen", given["actual_seq_kvlen"])
        spans = [(b - a) * (d - c) for a, b, c, d in zip([0, *q_lens], q_lens, [0, *kv_lens], kv_lens)]
        numels = q.shape[1] * sum(spans)
    else:
        b, s1, s2 = {"BSH": (0, 1, 1), "SBH": (1, 0, 0), "BSND": (0, 1, 1), "BNSD": (0, 2, 2)}[layout]
        numels = q.shape[b] * given["head_num"] * q.shape[s1] * k.shape[s2]
    return out, stat, torch.ones_like(stat), q.new_empty(0), 0, 0, numels


def _paged_cache(name: str, cache, heads: int, d: int) -> torch.Tensor | tuple[str, str]:
    """An ATB cache (num_blocks, block_size, num_kv_heads, head_size) as FIA's (num_blocks, block_size, H)."""
    if not (isinstance(cache, torch.Tensor) and cache.ndim == 4 and tuple(cache.shape[2:]) == (heads, d)):
        shape = tuple(cache.shape) if isinstance(cache, torch.Tensor) else type(cache).__name__
        return "arguments", f"{name} {shape} is not (num_blocks, block_size, {heads}, {d})"
    try:
        return cache.view(*cache.shape[:2], heads * d)
    except RuntimeError:
        return "arguments", f"{name}'s last two axes are not contiguous"


def _atb_paged(given: dict, mode_args: dict, extra) -> _Fia | tuple[str, str]:
    """An ATB paged attention call as FIA's PageAttention: query (tokens, num_heads, head_size) or
    (tokens, num_heads·head_size) (SGLang's prefill) written into ``out`` of its shape, caches (num_blocks,
    block_size, num_kv_heads, head_size), ``block_table``, ``context_lens`` each sequence's keys;
    ``mode_args`` FIA's layout, query lengths and sparse mode."""
    q, heads, nkv, out = given["query"], given["num_heads"], given["num_kv_heads"], given["out"]
    if not (isinstance(out, torch.Tensor) and isinstance(q, torch.Tensor) and out.shape == q.shape):
        return "arguments", "out is not a tensor of the query's shape"
    if q.ndim == 2 and isinstance(heads, int) and heads > 0 and q.shape[1] % heads == 0:
        q, out = (t.view(t.shape[0], heads, -1) for t in (q, out))
    d = q.shape[-1]
    caches = [_paged_cache(n, given[n], nkv, d) for n in ("key_cache", "value_cache")]
    for c in caches:
        if isinstance(c, tuple):
            return c
    if extra is not None:
        return extra
    options = dict(num_heads=heads, num_key_value_heads=nkv, scale=given["scale_value"],
                   block_table=given["block_table"], block_size=caches[0].shape[1],
                   actual_seq_lengths_kv=given["context_lens"], **mode_args)
    return _Fia(q, caches[0], caches[1], options, lambda written, lse: None, out)


def _paged_attention(given: dict) -> _Fia | tuple[str, str]:
    """ATB's decode: one query token per sequence, every key of the sequence (FIA's BSND with S1 = 1). The
    ATB workspace (``workspace``) is not pasa-npu's: pasa-npu sizes its own."""
    fia = _atb_paged(given, dict(input_layout="BSND"), None)
    if not isinstance(fia, _Fia):
        return fia
    return fia._replace(query=fia.query.unsqueeze(1), into=fia.into.unsqueeze(1))


def _causal_mask_reason(mask, positions: torch.Tensor, keys: torch.Tensor, flags: bool) -> str | None:
    """Why ``mask`` is not the causal mask of these query rows (None when it is): its row t must hide exactly
    the keys j > positions[t] among the first keys[t] and keep the others (0). ``flags``: any nonzero entry
    hides (a compressed mask, whose entries only mark the triangle: 1, True or -inf alike); else a float entry
    hides at MASKED_BIAS or below (an additive mask) and an integer or bool one where nonzero. Reads the mask's
    rows on the host, once per mask and lengths."""
    if not isinstance(mask, torch.Tensor) or mask.ndim not in (2, 3) or (mask.ndim == 3 and mask.shape[0] != 1):
        return f"mask of shape {tuple(getattr(mask, 'shape', ()))} (takes (rows, keys) or (1, rows, keys))"
    width = int(keys.max()) if keys.numel() else 0
    m = mask.reshape(mask.shape[-2:])
    if m.shape[0] < positions.numel() or m.shape[1] < width:
        return f"mask of shape {tuple(mask.shape)} has fewer rows or keys than the call reads"
    seen = (m.data_ptr(), m._version, tuple(m.shape), m.dtype, m.device, flags, positions.numpy().tobytes(),
            keys.numpy().tobytes())
    if _causal_masks_seen.get("last") == seen:
        return None
    m = m[:positions.numel(), :width].cpu()
    hidden = m <= MASKED_BIAS if m.is_floating_point() and not flags else m != 0
    j = torch.arange(width)[None, :]
    rule = torch.where(j > positions[:, None], hidden, m == 0)
    if not bool(rule[j < keys[:, None]].all()):
        return "mask is not the causal mask of the query tokens' positions"
    _causal_masks_seen["last"] = seen  # a step's layers share one mask: it is read once per step
    return None


#: The last mask :func:`_causal_mask_reason` found causal, with the lengths it was read for.
_causal_masks_seen: dict = {}


def _tnd_causal(given: dict, per_token: bool) -> _Fia | tuple[str, str]:
    """ATB's chunked prefill (``seq_len`` query tokens per sequence, the last of its ``context_lens`` keys,
    each token seeing the keys up to its own position) as FIA's TND with a block table and sparse mode 3.
    ``mask`` must be that causal mask: per_token, one additive row per query token (splitfuse: the rows of a
    causal mask at the tokens' positions); else a causal square, which the op reads compressed (qlens: any
    size, 128 × 128 in op-plugin's tests and SGLang, the longest sequence's in vllm-ascend). A call with
    another mask goes to torch_npu."""
    try:
        q_lens, kv_lens = int_list("seq_len", given["seq_len"]), int_list("context_lens", given["context_lens"])
    except (TypeError, ValueError) as e:
        return "arguments", str(e)
    if len(q_lens) != len(kv_lens) or any(r > c for r, c in zip(q_lens, kv_lens)):
        return "arguments", "seq_len and context_lens are not per-sequence lengths with seq_len <= context_lens"
    if per_token:
        positions = torch.tensor([c - r + i for r, c in zip(q_lens, kv_lens) for i in range(r)], dtype=torch.long)
        keys = torch.tensor([c for r, c in zip(q_lens, kv_lens) for _ in range(r)], dtype=torch.long)
    else:
        mask = given["mask"]
        side = min(mask.shape[-1], max(kv_lens, default=0)) if isinstance(mask, torch.Tensor) else 0
        positions, keys = torch.arange(side), torch.full((side,), side)
    bad = _causal_mask_reason(given["mask"], positions, keys, flags=not per_token)
    mode = dict(input_layout="TND", actual_seq_lengths=np.cumsum(q_lens).tolist(), sparse_mode=3,
                atten_mask=compressed_causal_mask(given["query"].device))
    return _atb_paged(given, mode, None if bad is None else ("mask", bad))


_PAGED = ("query", "key_cache", "value_cache")
#: The entry points routed besides FIA's, with their parameters as torch_npu declares them.
ENTRIES = (
    _Entry("npu_prompt_flash_attention", "npu", _QKV, (
        "pse_shift", "padding_mask", "atten_mask", "actual_seq_lengths", *_PFA_NEVER, "num_heads", "scale_value",
        "pre_tokens", "next_tokens", "input_layout", "num_key_value_heads", "actual_seq_lengths_kv", "sparse_mode"),
        _prompt_flash_attention),
    _Entry("npu_incre_flash_attention", "npu", _QKV, (
        "atten_mask", "actual_seq_lengths", "block_table", *_IFA_NEVER, "num_heads", "scale_value", "input_layout",
        "num_key_value_heads", "block_size", "inner_precise"), _incre_flash_attention),
    _Entry("npu_fusion_attention", "npu", (*_QKV, "head_num", "input_layout"), (
        *_FA_NEVER, "atten_mask", "scale", "pre_tockens", "next_tockens", "inner_precise", "actual_seq_qlen",
        "actual_seq_kvlen", "sparse_mode", "gen_mask_parallel", "sync", "softmax_layout", "seed", "offset"),
        _fusion_attention),
    _Entry("_npu_paged_attention", "atb", (*_PAGED, "num_kv_heads", "num_heads", "scale_value", "block_table",
                                           "context_lens", "out"), ("workspace",), _paged_attention),
    _Entry("_npu_flash_attention_qlens", "atb", (*_PAGED, "block_table", "mask", "seq_len", "context_lens",
                                                 "num_kv_heads", "num_heads", "scale_value", "out"), (),
           lambda given: _tnd_causal(given, per_token=False)),
    _Entry("_npu_paged_attention_splitfuse", "atb", (*_PAGED, "block_table", "context_lens", "mask", "seq_len",
                                                     "num_kv_heads", "num_heads", "scale_value", "out"), (),
           lambda given: _tnd_causal(given, per_token=True)),
)


def entry_call(entry: _Entry, args: tuple, kwargs: dict) -> _Fia | tuple[str, str]:
    """The FIA call of a call of ``entry`` (validated as every pasa-npu call is), or (category, detail): why
    pasa-npu does not take it."""
    if len(args) > len(entry.params):
        return "arguments", f"{len(args)} positional arguments (torch_npu.{entry.op} takes {len(entry.params)})"
    given = dict(zip(entry.params, args))
    if any(name in given for name in kwargs):
        return "arguments", "an argument given twice"
    given.update(kwargs)
    missing = [name for name in entry.params if name not in given]
    unknown = [name for name in given if name not in entry.params and name not in entry.optional]
    if missing or unknown:
        return "arguments", "; ".join([*([f"{', '.join(missing)} not given"] if missing else []),
                                       *([f"{', '.join(unknown)}: not an argument of torch_npu.{entry.op} that "
                                          "pasa-npu knows"] if unknown else [])])
    try:
        fia = entry.translate(given)
    except (TypeError, ValueError, AttributeError, IndexError) as e:
        return "arguments", f"{type(e).__name__}: {e}"
    if not isinstance(fia, _Fia):
        return fia
    try:
        check_call(fia.query, fia.key, fia.value, {**fia.options, **_settings.options()})
    except (TypeError, ValueError) as e:
        return "validation", f"pasa-npu's validation: {str(e)}"
    return fia


def fia_equivalent(op: str, args: tuple, kwargs: dict) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, dict]:
    """(query, key, value, options): the FIA call, by :func:`pasa_npu.fused_attention`'s names, that a call of
    torch_npu's ``op`` (an entry point the patch routes, FIA's ``.out`` forms included) computes. Raises
    ValueError where pasa-npu has none (the reason in the message)."""
    entry = next((e for e in ENTRIES if e.op == op), None)
    if entry is not None:
        fia = entry_call(entry, args, kwargs)
        if not isinstance(fia, _Fia):
            raise ValueError(f"torch_npu.{op}: {fia[1]}")
        return fia.query, fia.key, fia.value, fia.options
    form = next((f for f in FORMS if f.op == op), None)
    if form is None:
        raise ValueError(f"torch_npu.{op} is not an attention entry point the patch routes")
    given = dict(zip(_QKV, args), **kwargs)
    fia = {n: x for n, x in given.items() if n not in _QKV and n not in _OUT_ARGS and n not in form.never}
    return given["query"], given["key"], given["value"], _problem_args(form, fia)


def _route_entry(entry: _Entry, original, args: tuple, kwargs: dict):
    name = f"torch_npu.{entry.op}"
    fia = entry_call(entry, args, kwargs)
    _trace(entry.op, "call", name, None if isinstance(fia, _Fia) else fia, args, kwargs)
    if not isinstance(fia, _Fia):
        _record(name, "torch_npu", *fia)
        return original(*args, **kwargs)
    _record(name, "pasa-npu", "", "pasa_npu.fused_attention")
    import pasa_npu

    if fia.into is not None:
        pasa_npu.fused_attention_out(fia.query, fia.key, fia.value, out=(fia.into, fia.into.new_empty(1)),
                                     **fia.options, **_settings.options())
        return fia.finish(fia.into, None)
    return fia.finish(*pasa_npu.fused_attention(fia.query, fia.key, fia.value, **fia.options, **_settings.options()))


class _EntryRouter(_Router):
    """Stands in for one of :data:`ENTRIES` (a function of torch_npu, or an ``OpOverloadPacket`` of
    ``torch.ops``): calling it, or its ``.default``, routes the call; any other attribute is the original's."""

    def __init__(self, entry: _Entry, original):
        self._entry, self._original = entry, original

    def __call__(self, *args, **kwargs):
        return _route_entry(self._entry, self._original, args, kwargs)

    def default(self, *args, **kwargs):
        return _route_entry(self._entry, self._original.default, args, kwargs)

    def out(self, *args, **kwargs):
        return self._original.out(*args, **kwargs)


#: The trace being recorded (``patch_torch_npu(record=PATH)``), or None.
_recorder: Recorder | None = None


def _trace(op: str, form: str, entry: str, reason, args: tuple, kwargs: dict) -> None:
    if _recorder is not None:
        ran, category = ("torch_npu", reason[0]) if reason is not None else ("pasa-npu", "")
        _recorder(op, form, entry, ran, category, args, kwargs)


# ============================================================================================
# the patch
# ============================================================================================

#: (namespace, attribute, original) for each attribute the patch replaced, in order.
_patched: list[tuple[object, str, object]] = []


def patch_torch_npu(*, precision: str = DEFAULT_PRECISION, beta: float | None = None, block_kv: int | None = None,
                    backend: str | None = None, safety_net: bool = True, record: str | os.PathLike | None = None
                    ) -> None:
    """Route torch_npu's fused infer attention (v1 and v2, their ``.out`` forms and workspace queries) and its
    other attention entry points (:data:`ENTRIES`) through pasa-npu for the calls it takes; every other call
    goes to torch_npu's own function unchanged (see the module's docstring). ``precision``, ``beta``,
    ``block_kv``, ``backend`` and ``safety_net`` are pasa-npu's own arguments of :func:`pasa_npu.fused_attention`
    for every call it takes. ``record``: a file to write every routed call to, as a call trace
    (:mod:`pasa_npu.integrations.trace`; ``scripts/bench_serving.py --replay`` replays it), or None. Calling it
    again changes them.

    Raises ModuleNotFoundError without torch_npu, RuntimeError when torch_npu has none of the entry points.
    """
    global _settings, _recorder
    try:
        import torch_npu
    except ModuleNotFoundError as e:
        raise ModuleNotFoundError("patch_torch_npu needs torch_npu (the Ascend adapter of PyTorch), which is not "
                                  "installed; call pasa_npu.fused_attention directly instead") from e
    _settings = PasaSettings(precision=precision, beta=beta, block_kv=block_kv, backend=backend,
                             safety_net=safety_net)
    _recorder = None if record is None else Recorder(record)
    namespaces = (torch_npu, torch.ops.npu)
    for form in FORMS:
        for attr, kind in ((form.op, "call"), (form.workspace_op, "workspace")):
            for namespace in namespaces:
                current = getattr(namespace, attr, None)
                if current is None or isinstance(current, _Router):
                    continue
                _patched.append((namespace, attr, current))
                setattr(namespace, attr, _Router(form, kind, current))
    for entry in ENTRIES:
        # torch_npu's ATB functions load the ATB library on first use and then set torch_npu's attributes to
        # torch.ops.atb's ops: the routers stand in both places, and hand a declined call to torch.ops' op.
        ops = getattr(torch.ops, entry.ops)
        real = getattr(ops, entry.op, None)
        real = real._original if isinstance(real, _Router) else real
        for namespace in (ops, torch_npu):
            current = getattr(namespace, entry.op, None)
            if current is None or isinstance(current, _Router):
                continue
            _patched.append((namespace, entry.op, current))
            setattr(namespace, entry.op, _EntryRouter(entry, current if real is None else real))
    if not _patched:
        raise RuntimeError(f"torch_npu has neither {V1.op} nor {V2.op}: nothing to route through pasa-npu")


def unpatch_torch_npu() -> None:
    """Put back every function :func:`patch_torch_npu` replaced, and forget the counts of :func:`routes`."""
    global _recorder
    while _patched:
        namespace, attr, original = _patched.pop()
        setattr(namespace, attr, original)
    _routes.clear()
    _recorder = None


def patch_from_environment() -> None:
    """The vLLM (``vllm.general_plugins``) and SGLang (``sglang.srt.plugins``) plugin: both load it in every
    process they start, where it patches if the environment variable ``PASA_NPU_PATCH_TORCH_NPU`` is 1, and
    does nothing otherwise (installing pasa-npu changes no serving engine by itself)."""
    value = os.environ.get(ENV, "")
    if value in ("", "0"):
        return
    if value != "1":
        raise ValueError(f"{ENV} must be 0 or 1, got {value!r}")
    patch_torch_npu()
