"""Run the AscendC PASA kernel on the CPU through the host functional model.

The host model (``host_model/``) is our own C++ implementation of the AscendC API subset the kernel
uses: the unchanged kernel sources (``op_kernel/``) and host tiling (``op_host/pasa_tiling.cpp``)
are compiled with g++ against it into the extension ``pasa_npu._npu_host_model``, which runs the
cube (AIC) and vector (AIV) programs as threads on the CPU with the A2 memory capacities, FP16
rounding and cross-core flags modelled. It is **not** an NPU and it does not measure speed: it is
how CI checks that the kernel computes what the golden model says, with no NPU and no CANN.

:func:`run` is ``fused_attention(..., backend="npu", safety_net=False)`` on CPU tensors (or NumPy
arrays): the same validation (:func:`pasa_npu.problem.make_problem`), the same translation of the
call into the op's arguments (:func:`pasa_npu.backends.npu.kernel_call`) that an NPU receives, and
the kernel's raw result, with overflows left as the kernel leaves them.
"""

from __future__ import annotations

import numpy as np
import torch

from . import backends
from .backends import npu as _npu
from .interface import finish
from .precision import ALLOCATIONS
from .options import check_scale
from .problem import make_problem

__all__ = ["run", "run_with_status", "count", "tiling", "default_beta", "LAYOUTS", "PRECISIONS"]

#: The layouts the kernel reads and writes (BNSD_BSND is passed as BNSD).
LAYOUTS: tuple[str, ...] = _npu.LAYOUTS
#: The allocations the kernel implements: those with a tiling key.
PRECISIONS: tuple[str, ...] = tuple(name for name, a in ALLOCATIONS.items() if a.kernel_key is not None)


def run(query, key, value, **fia_kwargs):
    """The AscendC kernel on the host model, with FIA's semantics.

    Arguments are those of :func:`pasa_npu.fused_attention` (without ``backend`` and
    ``safety_net``), restricted to what the kernel implements (layouts BNSD, BSH, BSND, BNSD_BSND, TND;
    the allocations whose ``kernel_key`` is set; block_kv 128; PageAttention's ``block_table`` and
    ``block_size`` with its caches as ``key``/``value``). ``query``, ``key``, ``value`` (and
    ``atten_mask``) are all NumPy arrays or all CPU torch tensors. The default precision is
    fused_attention's.

    Returns:
        (attention_out, softmax_lse) of the inputs' kind, as fused_attention returns them. Where S'
        overflows FP16 (PASA removes the scores' bias, not their amplitude) outputs are Inf/NaN
        exactly where the golden model's are: see :func:`run_with_status`.

    Raises:
        TypeError / ValueError: an argument the kernel does not accept (the message names it);
        the tiling's own refusals (``pasa::ComputeTiling``'s std::invalid_argument) are ValueError.
        RuntimeError: the host model detected a fault while running the kernel (a capacity or
        alignment violation, a wait that can never be satisfied, ...): a kernel or model bug.
    """
    return run_with_status(query, key, value, **fia_kwargs)[:2]


def run_with_status(query, key, value, **fia_kwargs):
    """:func:`run` (the same arguments) that also returns the kernel's overflow report:
    ``(attention_out, softmax_lse, overflow)``, overflow True when the status words the AIVs write
    to the workspace say that a valid row saw an Inf in S'."""
    numpy_kind, tensors = _as_tensors(query, key, value, fia_kwargs)
    problem = _problem(tensors, fia_kwargs)
    out, lse, overflow = _npu.BACKEND.run_with_status(problem)
    out, lse = finish(problem, out, lse)
    return (out.numpy(), lse.numpy(), overflow) if numpy_kind else (out, lse, overflow)


def count(query, key, value, *, cost: dict, ai_cores: int = 0, handshake: tuple[int, int] = (0, 0), **fia_kwargs):
    """:func:`run` (the same arguments) on the cost model's counting host model: returns
    ``(attention_out, softmax_lse, counters)``, counters one dict per core (AICs first, then AIVs) with
    what the core issued per pipe, its modelled clocks and the handshake it ran (``kv_stack``, ``pre_launch``).
    ``cost`` holds the per-unit costs in cycles (keys as in ``pasa_npu.cost_model.A2_COSTS``); ``ai_cores`` > 0
    tiles for that many AI cores instead of the A2's 24; ``handshake`` = (kvStack, preLaunch) with kvStack > 0
    pins the stacked handshake in place of the tiling's choice where it fits (the cost model's handshake search).
    A model, not a measurement: see docs/cost_model.md."""
    numpy_kind, tensors = _as_tensors(query, key, value, fia_kwargs)
    problem = _problem(tensors, fia_kwargs)
    if _npu.launches_nothing(problem):
        raise ValueError("count: empty query or key/value launch no kernel")
    call = _npu.kernel_call(problem)
    arrays, attrs = _npu.host_model_arguments(call)
    out, lse, _, counters = _npu.host_model().count(*arrays, **attrs, cost=dict(cost), ai_cores=ai_cores,
                                                 handshake=tuple(handshake))
    out = _npu.to_bnsd(torch.from_numpy(out), attrs["input_layout"], problem)
    out, lse = finish(problem, out, torch.from_numpy(lse).reshape(_npu.lse_shape(problem)))
    return (out.numpy(), lse.numpy(), counters) if numpy_kind else (out, lse, counters)


def tiling(query, key, value, **fia_kwargs) -> dict:
    """The tiling ``pasa::ComputeTiling`` chooses for these inputs (the arguments of :func:`run`):
    a dict with ``tiling_key``, ``block_dim``, ``workspace_bytes`` and the fields of the tiling data
    the kernel reads (block sizes, β, the split of the work over the cores, ...)."""
    _, tensors = _as_tensors(query, key, value, fia_kwargs)
    problem = _problem(tensors, fia_kwargs)
    if _npu.launches_nothing(problem):
        raise ValueError("the tiling takes B, S1, S2 >= 1: empty query or key/value tensors have no tiling")
    return _npu.tiling(_npu.kernel_call(problem))


def core_task_ids(block_dim: int, total_tasks: int, tasks_per_core: int) -> list[list[int]]:
    """The task ids each AI core runs, in order, for a tiling with these fields (the kernel's own
    dealing, ``PasaCoreTaskId``); a task id is ((b·N + n)·numQBlocks + query block)·kvSplits + split, with
    b·Nkv + kv head in place of b·N + n for decode with GQA (a group's heads packed into a task's rows,
    op_kernel/pasa_tiling_data.h)."""
    return _npu.host_model().core_task_ids(block_dim, total_tasks, tasks_per_core)


def default_beta(block_kv: int, scale: float) -> float:
    """β the kernel uses when none is given: the C++ port of :func:`pasa_npu.beta.default_beta`."""
    if isinstance(block_kv, bool) or not isinstance(block_kv, int) or block_kv < 1:
        raise ValueError(f"block_kv must be a positive int, got {block_kv!r}")
    return _npu.host_model().default_beta(block_kv, check_scale(scale))


def _problem(tensors, fia_kwargs):
    """The validated call, which the npu backend must run (on the host model: CPU tensors)."""
    problem = make_problem(*tensors, **{**fia_kwargs, "backend": "npu"})
    backends.select(problem, "npu")
    return problem


def _as_tensors(query, key, value, fia_kwargs):
    """(whether the inputs are NumPy, (query, key, value) as CPU tensors); converts a NumPy atten_mask
    in ``fia_kwargs`` in place."""
    if not isinstance(query, (np.ndarray, torch.Tensor)):
        raise TypeError(f"query must be a NumPy array or a CPU torch.Tensor, got {type(query).__name__}")
    numpy_kind = isinstance(query, np.ndarray)
    out = []
    for name, x in (("query", query), ("key", key), ("value", value), ("atten_mask", fia_kwargs.get("atten_mask"))):
        if x is None and name == "atten_mask":
            continue
        if numpy_kind != isinstance(x, np.ndarray) or not isinstance(x, (np.ndarray, torch.Tensor)):
            raise TypeError(f"{name} must be a {'NumPy array' if numpy_kind else 'torch.Tensor'} like query, got "
                            f"{type(x).__name__} (pass all of query, key, value, atten_mask as NumPy arrays or all "
                            "as torch tensors)")
        t = torch.from_numpy(np.ascontiguousarray(x)) if numpy_kind else x
        if t.device.type != "cpu":
            raise ValueError(f"{name} is on {t.device}; the host model runs on the CPU: pass CPU tensors "
                             "(use pasa_npu.fused_attention(backend='npu') for NPU tensors)")
        if name == "atten_mask":
            fia_kwargs["atten_mask"] = t
        else:
            out.append(t)
    return numpy_kind, tuple(out)
