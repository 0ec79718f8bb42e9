"""The ``reference`` backend: the blockwise loop of :mod:`pasa_npu.blockwise` in PyTorch ops.

It rounds exactly where the golden model rounds (both run the same loop), so on the same
allocation and blocks it agrees with :func:`pasa_npu.golden.attention` up to the order in which the
FP32 matrix products accumulate. It uses torch ops only, so it runs on CPU, CUDA and NPU tensors.
"""

from __future__ import annotations

import torch

from .. import blockwise
from ..precision import get_allocation
from ..problem import Job, Problem
from . import run_jobs

_FLOAT64_DEVICES = ("cpu", "cuda")


class TorchOps:
    """The array operations :mod:`pasa_npu.blockwise` needs, on float32 tensors that hold values
    of the emulated type (FP16 values are stored exactly in float32)."""

    @staticmethod
    def cast(x, dtype):
        x = x.to(torch.float32)
        return x.to(torch.float16).to(torch.float32) if dtype == "float16" else x

    @staticmethod
    def matmul(a, b):
        # The emulated matrix unit (see blockwise): exact products, one rounding to FP32. Where
        # the device has no float64 (NPU), an FP32 matmul stands in; TF32 is disabled by the
        # caller so that CUDA does not round the FP16 operands further.
        if a.device.type in _FLOAT64_DEVICES:
            return torch.matmul(a.double(), b.double()).float()
        return torch.matmul(a, b)

    mT = staticmethod(lambda x: x.transpose(-1, -2))
    exp = staticmethod(torch.exp)
    log = staticmethod(torch.log)

    @staticmethod
    def exp64(x):
        # FP32 exp evaluated in float64 (NumpyOps.exp64): the same FP32 result as NumPy's.
        # Where the device has no float64 (NPU), its float32 exp stands in.
        if x.device.type in _FLOAT64_DEVICES:
            return torch.exp(x.double()).float()
        return torch.exp(x)

    @staticmethod
    def log64(x):
        if x.device.type in _FLOAT64_DEVICES:
            return torch.log(x.double()).float()
        return torch.log(x)
    maximum = staticmethod(torch.maximum)
    isneginf = staticmethod(torch.isneginf)
    zeros_like = staticmethod(torch.zeros_like)

    @staticmethod
    def broadcast_shape(a, b):
        return tuple(torch.broadcast_shapes(a, b))

    @staticmethod
    def where(cond, a, b):
        return torch.where(cond, a, b)

    @staticmethod
    def rowmax(x):
        return x.amax(dim=-1, keepdim=True)

    @staticmethod
    def any(x, axes):
        return x.to(torch.uint8).amax(dim=axes, keepdim=True).bool()

    @staticmethod
    def neginf_to_zero(x):
        return torch.where(torch.isneginf(x), 0.0, x)

    @staticmethod
    def full(shape, value, dtype, like):
        return torch.full(shape, value, dtype=torch.float32, device=like.device)

    @staticmethod
    def scalar(value, like):
        return torch.tensor(value, dtype=torch.float32, device=like.device)

    @staticmethod
    def arange(start, stop, like):
        return torch.arange(start, stop, device=like.device)

    @staticmethod
    def pad_last(x, n):
        return torch.nn.functional.pad(x, (0, n))

    @staticmethod
    def shift_matrix(n, diag, off, like):
        m = torch.full((n, n), off, dtype=torch.float32, device=like.device)
        m.fill_diagonal_(diag)
        return m

    @staticmethod
    def cat(xs, axis):
        return torch.cat(xs, dim=axis)


def attention(q, k, v, *, precision: str, beta: float | None, block_q: int, block_kv: int,
              scale: float, mask: torch.Tensor | None, band: tuple[int | None, int] | None = None,
              sink: torch.Tensor | None = None):
    """Blockwise attention emulating ``precision`` on PyTorch tensors.

    q: (B, N, S1, D) float16; k, v: (B, Nkv, S2, D) float16, N % Nkv == 0 (GQA without copying
    K/V); mask None or bool broadcastable to (B, N, S1, S2) with full S1 and S2 dims, True = masked
    out; band None or (lo, hi) (see :func:`pasa_npu.golden.attention`); sink None or (N,) sink logits
    (:mod:`pasa_npu.blockwise`). Returns out (B, N, S1, D) float16 and lse (B, N, S1) float32 in the true
    scale; rows with every key masked give out 0 and lse −∞ (with a sink: out 0, lse the sink).
    Arguments are assumed valid (the caller, :func:`pasa_npu.fused_attention`, checks them).
    """
    alloc = get_allocation(precision)
    cuda_tf32 = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        with torch.no_grad():
            q32, k32, v32 = (x.to(torch.float32) for x in (q, k, v))
            sink32 = None if sink is None else sink.to(device=q.device, dtype=torch.float32)
            out, lse = blockwise.grouped_attention(TorchOps, q32, k32, v32, alloc=alloc, scale=float(scale),
                                                   beta=beta, block_q=block_q, block_kv=block_kv, mask=mask,
                                                   band=band, sink=sink32)
    finally:
        torch.backends.cuda.matmul.allow_tf32 = cuda_tf32
    return out.to(torch.float16), lse


class ReferenceBackend:
    """Every allocation, every device PyTorch runs on; masks are dense, the band apart (it decides
    which KV blocks a query tile visits)."""

    name = "reference"

    def unavailable_reason(self, device: torch.device) -> str | None:
        return None

    def supports(self, problem: Problem) -> str | None:
        return None

    def run(self, problem: Problem):
        return run_jobs(problem.on_host(), _attend)


def _attend(job: Job, problem: Problem):
    return attention(job.q, job.k, job.v, precision=problem.alloc.name, beta=problem.beta, block_q=problem.block_q,
                     block_kv=problem.block_kv, scale=problem.scale, mask=job.mask, band=job.band, sink=problem.sink)


BACKEND = ReferenceBackend()
