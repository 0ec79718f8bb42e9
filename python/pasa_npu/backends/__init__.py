"""Backends of :func:`pasa_npu.fused_attention`: the protocol and the registry.

A backend is an object with

* ``name``: what ``fused_attention(backend=...)`` calls it;
* ``unavailable_reason(device)``: None when it can run on tensors of ``device`` here, else why not and
  what to do;
* ``supports(problem)``: None when it computes this :class:`pasa_npu.problem.Problem` (its allocation,
  as a predicate over :class:`pasa_npu.precision.Allocation`, its tile sizes, its layout), else why not;
  a :class:`Refused` reason where the call must not fall back to the reference emulator on that device
  (a serving feature the device's kernel does not implement yet: an error is better than minutes);
* ``run(problem)``: ``(out, lse)`` — out FP16 (B, N, S1, D) (TND: (T, N, D)), lse FP32 (B, N, S1)
  (TND: (T, N)) in the true scale, −∞ for a row with no key, +∞ for a padded row.
* optionally ``plan(problem)``: None, or a callable that gives ``run``'s result for this problem and for
  every later call with the same signature (:func:`pasa_npu.problem.call_signature`) from that call's
  ``(query, key, value, atten_mask, block_table, learnable_sink, device lengths)``, without validating
  anything again (what the backend decided from shapes, strides and options made once), and with ``out``,
  ``lse`` and ``workspace`` keywords writes into the caller's buffers (the ``.out`` forms); it must hold
  none of the problem's tensors. ``fused_attention`` keeps it for repeated calls;
* optionally ``workspace_bytes(problem)``: the bytes of scratch its plans of this problem's shape, or of
  any smaller one, keep in a ``workspace`` (:func:`pasa_npu.fused_attention_workspace`).

Registered backends, in the order :func:`select` tries them for a device:

* ``npu``: the AscendC kernel. On NPU tensors through the torch_npu extension built and deployed by
  scripts/build_and_deploy.sh (never run on an NPU here: none is reachable); on CPU tensors the same
  kernel sources on our host functional model of the AscendC API (a slow emulator, for verification:
  CI runs FIA's test matrix through it). Default for NPU tensors.
* ``triton``: the Triton kernel for CUDA tensors (CPU tensors under ``TRITON_INTERPRET=1``). Default on
  CUDA when triton is installed and it computes the allocation.
* ``reference``: the golden model's blockwise loop in PyTorch ops, every allocation, any device. An
  emulator that rounds like the hardware would, not a fast path (docs/benchmarks/golden_speed.md times the
  golden model's loop). Default on the CPU.
"""

from __future__ import annotations

import warnings
from typing import Protocol

import torch

from ..options import BACKEND_NAMES
from ..problem import Problem

__all__ = ["Backend", "BACKENDS", "Refused", "get", "select", "run_jobs"]


class Refused(str):
    """A backend's reason not to compute a problem that also refuses the reference emulator as a stand-in on
    the backend's device (:func:`select` raises it as a ValueError there)."""


class Backend(Protocol):
    name: str

    def unavailable_reason(self, device: torch.device) -> str | None: ...

    def supports(self, problem: Problem) -> str | None: ...

    def run(self, problem: Problem) -> tuple[torch.Tensor, torch.Tensor]: ...


#: Names, in the order the docs list them.
BACKENDS: tuple[str, ...] = BACKEND_NAMES
#: Which backends :func:`select` tries, in order, for tensors of a device type.
_ORDER = {"npu": ("npu", "reference"), "privateuseone": ("npu", "reference"), "cuda": ("triton", "reference")}
_DEFAULT_ORDER = ("reference",)


def get(name: str) -> Backend:
    """The backend called ``name`` (imported on first use: triton and the NPU extension are optional)."""
    backend = _LOADED.get(name)
    if backend is None:
        backend = _LOADED[name] = _load(name)
    return backend


_LOADED: dict[str, Backend] = {}


def _load(name) -> Backend:
    if name == "reference":
        from .reference import BACKEND
    elif name == "triton":
        from .triton import BACKEND
    elif name == "npu":
        from .npu import BACKEND
    else:
        if not isinstance(name, str):
            raise TypeError(f"backend must be None or one of {BACKENDS}, got {type(name).__name__}")
        raise ValueError(f"backend must be None or one of {BACKENDS}, got {name!r}")
    return BACKEND


def select(problem: Problem, name: str | None = None) -> Backend:
    """The backend that runs ``problem``: ``name``'s (RuntimeError when it cannot run here, ValueError
    when it does not compute this problem, each saying why), or for None the first of the device's
    order that is available and supports it."""
    if name is not None:
        backend = get(name)
        why = backend.unavailable_reason(problem.device)
        if why is not None:
            raise RuntimeError(f"backend={name!r}: {why}")
        why = backend.supports(problem)
        if why is not None:
            raise ValueError(f"backend={name!r}: {why}")
        return backend
    order = _ORDER.get(problem.device.type, _DEFAULT_ORDER)
    for candidate in order:
        backend = get(candidate)
        if backend.unavailable_reason(problem.device) is None:
            why = backend.supports(problem)
            if why is None:
                break
            if isinstance(why, Refused):
                raise ValueError(f"backend {candidate!r} on {problem.device} tensors: {why} (the reference "
                                 "emulator, correct but far too slow for serving, is not run in its place; pass "
                                 "backend='reference' to run it, or CPU tensors)")
    if backend.name == "reference":
        _warn_if_long(problem)
    if backend.name == "reference" and order[0] != "reference":
        # The device's kernel cannot take this call: say once why it runs on the emulator instead.
        first = get(order[0])
        why = first.unavailable_reason(problem.device) or first.supports(problem)
        key = (order[0], why)
        if key not in _WARNED:
            _WARNED.add(key)
            warnings.warn(f"pasa_npu: backend {order[0]!r} cannot run this call ({why}); running the 'reference' "
                          "backend, an emulator that is correct but slow", RuntimeWarning, stacklevel=3)
    return backend


_WARNED: set = set()

#: B·N·S1·S2·D (the multiply-adds of Q·Kᵀ) from which a CPU call on the 'reference' backend is announced as
#: long (1×2×2048²×128): the emulation rounds after every operation, at a small fraction of a GEMM's speed.
LONG_EMULATION = 2**30


def _warn_if_long(problem: Problem) -> None:
    """Say before it starts that a CPU call of the emulator will take long (it shows no progress)."""
    work = problem.batch * problem.num_heads * problem.s1 * problem.s2 * problem.head_dim
    if problem.device.type == "cpu" and work >= LONG_EMULATION:
        warnings.warn(f"pasa_npu: this call runs on the 'reference' backend, which emulates every rounding of "
                      f"precision {problem.alloc.name!r} in PyTorch ops: with B·N·S1·S2·D = {work:,} on the CPU it "
                      "takes tens of seconds or more (a CUDA or NPU device runs a kernel)", RuntimeWarning,
                      stacklevel=3)


def run_jobs(problem: Problem, attend) -> tuple[torch.Tensor, torch.Tensor]:
    """``run`` for a backend that computes dense attentions: ``attend(job, problem)`` on each of
    :meth:`Problem.jobs` returns out (b, N, s1, D) FP16 and lse (b, N, s1) FP32, and the results are
    placed into the problem's (padded) output."""
    jobs = problem.jobs()
    if not problem.tnd and problem.q_lens is None and problem.kv_lens is None and problem.s2 > 0 \
            and problem.query.numel() > 0:
        return attend(next(jobs), problem)  # one job covering everything: no padded copy
    out, lse = problem.padded_results()
    for job in jobs:
        o, l = attend(job, problem)
        if problem.tnd:
            out[job.rows[0]] = o[0].transpose(0, 1)
            lse[job.rows[0]] = l[0].transpose(0, 1)
        else:
            out[job.rows[0], :, job.rows[1]] = o
            lse[job.rows[0], :, job.rows[1]] = l
    return out, lse
