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
from dataclasses import dataclass

import numpy as np
import torch

from ..interface import check_call
from ..options import NOT_IMPLEMENTED, V2_NAMES, NotImplementedArgument
from ..precision import DEFAULT_PRECISION
from . import PasaSettings

__all__ = ["patch_torch_npu", "unpatch_torch_npu", "routes", "declines", "patch_from_environment", "ENV"]

#: The environment variable that makes the vLLM / SGLang plugin (:func:`patch_from_environment`) patch.
ENV = "PASA_NPU_PATCH_TORCH_NPU"

log = logging.getLogger("pasa_npu")

@dataclass(frozen=True)
class _Form:
    """One FIA entry point as torch_npu names it, and pasa-npu's functions for it."""

    op: str  #: torch_npu's name of the call (its ``.out`` is the out form)
    workspace_op: str  #: torch_npu's name of the call's workspace query
    functions: dict  #: "call", "out", "workspace" -> the pasa_npu function of that form
    #: The FIA arguments pasa-npu takes (its functions take them by these names) -> make_problem's name for each.
    taken: dict
    #: The FIA arguments pasa-npu never takes -> (their default, what they are) (:data:`pasa_npu.options.NOT_IMPLEMENTED`):
    #: pasa-npu's functions refuse them set to anything but their defaults, and such a call goes to torch_npu.
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
        return "validation", f"pasa-npu's validation: {e}"
    return None


def _taken(form: _Form, given: dict) -> dict:
    """The arguments of a call that pasa-npu's functions take, by the entry point's names: FIA's (those pasa-npu
    never takes only at their defaults, which :func:`declines` saw)."""
    return {name: x for name, x in given.items() if name in form.taken or name in form.never}


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
# the patch
# ============================================================================================

#: (namespace, attribute, original) for each attribute the patch replaced, in order.
_patched: list[tuple[object, str, object]] = []


def patch_torch_npu(*, precision: str = DEFAULT_PRECISION, beta: float | None = None, block_kv: int | None = None,
                    backend: str | None = None, safety_net: bool = True) -> None:
    """Route torch_npu's fused infer attention (v1 and v2, their ``.out`` forms and workspace queries) through
    pasa-npu for the calls it takes; every other call goes to torch_npu's own function unchanged (see the
    module's docstring). ``precision``, ``beta``, ``block_kv``, ``backend`` and ``safety_net`` are pasa-npu's own
    arguments of :func:`pasa_npu.fused_attention` for every call it takes. Calling it again changes them.

    Raises ModuleNotFoundError without torch_npu, RuntimeError when torch_npu has none of the entry points.
    """
    global _settings
    try:
        import torch_npu
    except ModuleNotFoundError as e:
        raise ModuleNotFoundError("patch_torch_npu needs torch_npu (the Ascend adapter of PyTorch), which is not "
                                  "installed; call pasa_npu.fused_attention directly instead") from e
    _settings = PasaSettings(precision=precision, beta=beta, block_kv=block_kv, backend=backend,
                             safety_net=safety_net)
    namespaces = (torch_npu, torch.ops.npu)
    for form in FORMS:
        for attr, kind in ((form.op, "call"), (form.workspace_op, "workspace")):
            for namespace in namespaces:
                current = getattr(namespace, attr, None)
                if current is None or isinstance(current, _Router):
                    continue
                _patched.append((namespace, attr, current))
                setattr(namespace, attr, _Router(form, kind, current))
    if not _patched:
        raise RuntimeError(f"torch_npu has neither {V1.op} nor {V2.op}: nothing to route through pasa-npu")


def unpatch_torch_npu() -> None:
    """Put back every function :func:`patch_torch_npu` replaced, and forget the counts of :func:`routes`."""
    while _patched:
        namespace, attr, original = _patched.pop()
        setattr(namespace, attr, original)
    _routes.clear()


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
