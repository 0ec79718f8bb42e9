"""The ``npu`` backend: the AscendC kernel (``op_kernel/``, the CANN custom op ``PasaFusedAttention``).

The problem goes to the kernel natively: its layout (BNSD, BSH, BSND, TND; BNSD_BSND as BNSD), the
per-batch lengths (TND: FIA's cumulative ones), the sparse mode with pre/next tokens, the user's mask, and
PageAttention's caches with their block table (the kernel reads each key block through the table; nothing
is gathered) — the kernel's own paths for each, not a normalised stand-in. Two executors run the same call:

* NPU tensors: the torch_npu extension ``pasa_npu._npu_ext`` (python/csrc/npu_ext/) calls the op
  deployed by ``scripts/build_and_deploy.sh`` through aclnn. It needs an Ascend NPU, CANN and
  torch_npu; none exists where this package is developed, so **this path has never run**.
* CPU tensors: the unmodified kernel sources compiled against our host functional model of the
  AscendC API (``pasa_npu._npu_host_model``, built by ``pip install``), cube and vector cores as
  threads. An emulator for verification, not a fast path: CI runs FIA's test matrix through it.

The kernel writes the true-scale lse, −∞ for a row with no kept key and +∞ for a padded row (the
backend protocol's convention), and lets an overflow in S' propagate as Inf/NaN exactly as the golden
model does: :func:`pasa_npu.fused_attention`'s safety net recomputes such rows.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np
import torch

from ..problem import Problem

__all__ = ["BACKEND", "KV_BLOCK", "KernelCall", "kernel_call", "launch_extension", "launch_host_model", "host_model",
           "host_model_arguments", "launches_nothing", "lse_shape", "to_bnsd", "tiling", "unavailable_reason"]

#: The kernel's KV block length n (M = (I − β/n·J)·scale and the default β are built for it).
KV_BLOCK = 128
#: The layouts the kernel reads and writes.
LAYOUTS: tuple[str, ...] = ("BNSD", "BSH", "BSND", "TND")
_NPU_DEVICE_TYPES = ("npu", "privateuseone")


@dataclass(frozen=True)
class KernelCall:
    """The op's FIA-level arguments for one problem: contiguous FP16 tensors in ``input_layout`` (key
    and value: the paged caches where there is a block table), the user's mask as (1|B, 1|N, S1, S2)
    bool or None, per-batch lengths or None (TND: the cumulative query lengths, and the cumulative key
    lengths or with a table each batch's own), the attributes (``block_size``: the page length, 0 without
    a table), PageAttention's (B, max_blocks_per_seq) int32 table or None, and FIA v2's learnable sink as a
    float32 (N,) tensor or None."""

    query: torch.Tensor
    key: torch.Tensor
    value: torch.Tensor
    atten_mask: torch.Tensor | None
    actual_seq_lengths: tuple[int, ...] | None
    actual_seq_lengths_kv: tuple[int, ...] | None
    attrs: dict
    block_table: torch.Tensor | None = None
    learnable_sink: torch.Tensor | None = None


def kernel_call(problem: Problem) -> KernelCall:
    """The op's arguments for ``problem`` (which :meth:`NpuBackend.supports`)."""
    layout = "BNSD" if problem.input_layout == "BNSD_BSND" else problem.input_layout
    # pre/next tokens saturated at ±(S1 + S2), where they keep the same keys: the tiling adds them in int64.
    edge = problem.s1 + problem.s2 if not problem.tnd else problem.query.shape[0] + _tnd_key_rows(problem)
    pre, nxt = (max(-edge, min(x, edge)) for x in (problem.pre_tokens, problem.next_tokens))
    attrs = dict(num_heads=problem.num_heads, scale=problem.scale, pre_tokens=pre,
                 next_tokens=nxt, input_layout=layout, num_key_value_heads=problem.num_kv_heads,
                 sparse_mode=problem.sparse_mode, beta=-1.0 if problem.beta is None else problem.beta,
                 precision=problem.alloc.name, block_size=problem.page)
    mask = None if problem.user_mask is None else problem.user_mask.contiguous()
    table = None if problem.block_table is None else problem.block_table.contiguous()
    sink = None if problem.sink is None else problem.sink.to(torch.float32).contiguous()
    return KernelCall(problem.query.contiguous(), problem.key.contiguous(), problem.value.contiguous(), mask,
                      problem.q_lens, problem.kv_lens, attrs, table, sink)


class NpuBackend:
    name = "npu"

    def unavailable_reason(self, device: torch.device) -> str | None:
        if device.type in _NPU_DEVICE_TYPES:
            return unavailable_reason()
        if device.type == "cpu":
            return None if _load_host_model() is not None else (
                "the AscendC kernel on the host model (pasa_npu._npu_host_model) is not built: reinstall the "
                "package with `pip install -e .` (needs CMake, g++ and pybind11)")
        return (f"runs on NPU tensors (the AscendC kernel, built and deployed with scripts/build_and_deploy.sh) or "
                f"on CPU tensors (the same kernel on the host model), got tensors on {device}")

    def supports(self, problem: Problem) -> str | None:
        if problem.alloc.kernel_key is None:
            from ..precision import ALLOCATIONS

            names = tuple(n for n, a in ALLOCATIONS.items() if a.kernel_key is not None)
            return f"the AscendC kernel implements precision {names}, not {problem.alloc.name!r}"
        if problem.input_layout not in LAYOUTS + ("BNSD_BSND",):
            return (f"input_layout must be one of {LAYOUTS + ('BNSD_BSND',)} (the layouts the AscendC kernel reads), "
                    f"got {problem.input_layout!r}")
        if problem.block_kv != KV_BLOCK:
            return (f"the AscendC kernel's KV block is {KV_BLOCK} (its shift matrix and default beta are built "
                    f"for it), got block_kv={problem.block_kv}")
        if problem.head_dim % 16 or not 16 <= problem.head_dim <= 256:
            return f"the AscendC kernel takes head dims that are multiples of 16 in [16, 256], got {problem.head_dim}"
        return None

    def run(self, problem: Problem):
        return self.run_with_status(problem)[:2]

    def run_with_status(self, problem: Problem):
        """:meth:`run` and the kernel's overflow report: True when the status words the vector cores
        write say that a valid row saw an Inf in S' (read on the host model; None from the extension,
        which cannot reach the words behind CANN's system workspace)."""
        if launches_nothing(problem):
            # The tiling takes B, S1, S2 >= 1 and leaves these to the caller, as FIA does.
            return (*problem.padded_results(), False)
        call = kernel_call(problem)
        launch = launch_host_model if problem.device.type == "cpu" else launch_extension
        out, lse, overflow = launch(call)
        return to_bnsd(out, call.attrs["input_layout"], problem), lse.reshape(lse_shape(problem)), overflow


def launches_nothing(problem: Problem) -> bool:
    """An empty query, or no key in any batch: the results are the padded ones, no kernel runs."""
    if problem.tnd:
        keys = problem.kv_lens if problem.paged else tuple(b - a for a, b in zip((0,) + problem.kv_lens,
                                                                                  problem.kv_lens))
        return problem.query.numel() == 0 or max(keys) == 0
    return problem.query.numel() == 0 or problem.s2 == 0


def lse_shape(problem: Problem) -> tuple[int, ...]:
    """The kernel's softmax_lse: (T, N) for TND, else (B, N, S1)."""
    if problem.tnd:
        return (problem.query.shape[0], problem.num_heads)
    return (problem.batch, problem.num_heads, problem.s1)


def _tnd_key_rows(problem: Problem) -> int:
    """TND: the key rows a batch can reach, T_kv or a table row's keys."""
    return problem.block_table.shape[1] * problem.page if problem.paged else problem.key.shape[0]


def to_bnsd(out: torch.Tensor, layout: str, problem: Problem) -> torch.Tensor:
    b, n, s1, d = problem.batch, problem.num_heads, problem.s1, problem.head_dim
    if layout in ("BNSD", "TND"):  # TND stays (T, N, D), as the backends return it
        return out
    return out.reshape(b, s1, n, d).transpose(1, 2)


def launch_extension(call: KernelCall) -> tuple[torch.Tensor, torch.Tensor, None]:
    """The deployed op through the torch_npu extension: (out in the call's layout, lse, None)."""
    out, lse = _ext().fused_attention(
        call.query, call.key, call.value, call.atten_mask,
        None if call.actual_seq_lengths is None else list(call.actual_seq_lengths),
        None if call.actual_seq_lengths_kv is None else list(call.actual_seq_lengths_kv), call.block_table,
        call.learnable_sink, inner_precise=0, **call.attrs)
    return out, lse, None


def launch_host_model(call: KernelCall) -> tuple[torch.Tensor, torch.Tensor, bool]:
    """The kernel on the host model: (out in the call's layout, lse (B, N, S1), overflow), overflow True
    when the status words the vector cores write say that a valid row saw an Inf in S'."""
    arrays, attrs = host_model_arguments(call)
    out, lse, overflow = host_model().run(*arrays, **attrs)
    return torch.from_numpy(out), torch.from_numpy(lse), bool(overflow)


def tiling(call: KernelCall) -> dict:
    """The tiling ``pasa::ComputeTiling`` chooses for the call: ``tiling_key``, ``block_dim``,
    ``workspace_bytes`` and the fields of the tiling data the kernel reads."""
    arrays, attrs = host_model_arguments(call)
    return host_model().tiling(*arrays, **attrs)


def host_model_arguments(call: KernelCall):
    lens = [None if x is None else np.asarray(x, np.int64) for x in (call.actual_seq_lengths,
                                                                      call.actual_seq_lengths_kv)]
    mask = None if call.atten_mask is None else call.atten_mask.to(torch.uint8).numpy()
    table = None if call.block_table is None else call.block_table.numpy()
    sink = None if call.learnable_sink is None else call.learnable_sink.numpy()
    return (call.query.numpy(), call.key.numpy(), call.value.numpy(), mask, *lens, table, sink), call.attrs


@functools.lru_cache(maxsize=None)
def _load_host_model():
    try:
        from .. import _npu_host_model  # type: ignore[attr-defined]
    except ImportError:
        return None
    return _npu_host_model


def host_model():
    """The kernel compiled against the host model (pasa_npu._npu_host_model); RuntimeError naming the
    fix when it was not built."""
    mod = _load_host_model()
    if mod is None:
        raise RuntimeError(BACKEND.unavailable_reason(torch.device("cpu")))
    return mod


def _ext():
    """The compiled extension (ImportError when it was not built)."""
    from .. import _npu_ext  # type: ignore[attr-defined]

    return _npu_ext


@functools.lru_cache(maxsize=None)
def unavailable_reason() -> str | None:
    """Why the kernel cannot run on NPU tensors here (None when it can): the first missing piece."""
    try:
        import torch_npu  # noqa: F401  (registers the npu device with torch)
    except ImportError as e:
        return (f"torch_npu is not importable ({e}); install torch_npu matching torch and CANN, then build and "
                "deploy the kernel with scripts/build_and_deploy.sh")
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


BACKEND = NpuBackend()
