"""The precision allocations of FlashAttention and PASA (the paper's Figs 1-3 and our own; the README lists them).

An allocation says in which floating-point type each stage of the blockwise loop produces its
result. Matrix products always take FP16 inputs and accumulate in FP32 (what the Ascend cube and
GPU tensor cores do); the allocation decides the type they are rounded to on the way out, and the
type every vector operation of the softmax rounds to.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Allocation:
    """One precision allocation.

    name: the name used everywhere (API, CLI, docs).
    score: type of S = Q·Kᵀ (or S' = Q·K'ᵀ) out of the matrix unit.
    state: type of the softmax and of the running row state m, l (and PASA's F).
    output: type of P·V out of the matrix unit and of the running output O.
    shifted: whether K is shifted by PASA's matrix M and recovered online (Algorithm 1).
    description: one line on what the allocation is.
    overflow_free: finite results for every finite FP16 input at every scale fused_attention accepts
        (FP32 scores and state, or an overflow recompute inside the loop): its safety net has nothing to check.
    kernel_key: the AscendC kernel's tiling key for this allocation (a row of op_kernel/pasa_allocation.h's
        PASA_KERNEL_ALLOCATIONS), None where the kernel does not implement it.
    row_shifted: row-shifted PASA (``pasa_rs``, docs/golden.md): K centred exactly per block, a
        per-row shift near the running maximum subtracted in the FP32 accumulator before the FP16
        rounding of S', the local softmax and the merge in ``state`` (P enters P·V in FP16); a block
        whose row max lands far from the shift is shifted again, and one whose S' leaves FP16's range
        is recomputed with FP32 S. Exclusive with ``shifted``.
    framed: framed FlashAttention (``fp32_frame``, docs/golden.md): FP32 S, FP16 P against a per-row frame
        moved only where a block's scores leave its range, O and l summed on the matrix unit across blocks.
    """

    name: str
    score: str
    state: str
    output: str
    shifted: bool
    description: str
    overflow_free: bool = False
    kernel_key: int | None = None
    row_shifted: bool = False
    framed: bool = False


ALLOCATIONS: dict[str, Allocation] = {
    a.name: a
    for a in (
        Allocation("fp32", "float32", "float32", "float32", False,
                   "FlashAttention-2, all FP32 after the FP16 inputs (paper Fig. 1; FIA inner_precise=0)",
                   overflow_free=True),
        Allocation("fp16_fp32", "float16", "float32", "float32", False,
                   "S in FP16 out of the matrix unit, softmax and O in FP32 (Fig. 2, 'partially low precision')",
                   kernel_key=2),
        Allocation("fp16", "float16", "float16", "float16", False,
                   "everything FP16 (Fig. 3, FIA's high-performance path)"),
        Allocation("pasa", "float16", "float16", "float16", True,
                   "PASA Algorithm 1: shifted S' in FP16, FP16 softmax, FP16 running state and output",
                   kernel_key=0),
        Allocation("pasa_fp32", "float16", "float32", "float32", True,
                   "PASA with FP16 S' and P, FP32 row state (m, l, F) and FP32 output accumulation",
                   kernel_key=1),
        Allocation("pasa_rs", "float16", "float32", "float32", False,
                   "row-shifted PASA: exactly centred K, FP16 S' shifted per row near its running maximum, "
                   "FP32 softmax, merge and output, a second shift where a block's max lands far from it, FP32 "
                   "recompute of a block whose S' overflows",
                   row_shifted=True, overflow_free=True, kernel_key=3),
        Allocation("fp32_frame", "float32", "float32", "float32", False,
                   "FP32 S, FP16 P against a per-row frame moved only where a block's scores rise far above "
                   "it (no block max, rescale or merge per block), O and l summed from the same FP16 P in FP32 "
                   "on the matrix unit",
                   framed=True, overflow_free=True, kernel_key=4),
    )
}

PRECISIONS: tuple[str, ...] = tuple(ALLOCATIONS)
#: The allocation used wherever none is named: fused_attention, the integrations, the scanner's
#: verification (docs/accuracy_default/README.md says why).
DEFAULT_PRECISION = "fp32_frame"
# The blockwise loop relies on it: scores enter the softmax without a second rounding.
assert all(not (a.score == "float32" and a.state == "float16") for a in ALLOCATIONS.values())
assert all(not (a.shifted and a.row_shifted) for a in ALLOCATIONS.values())
# The scanner's verdicts rely on it: an allocation that can overflow rounds its scores to FP16.
assert all(a.overflow_free or a.score == "float16" for a in ALLOCATIONS.values())


def get_allocation(precision: str) -> Allocation:
    """Look an allocation up by name; a clear ValueError for an unknown one."""
    if not isinstance(precision, str) or precision not in ALLOCATIONS:
        raise ValueError(f"precision must be one of {PRECISIONS}, got {precision!r}")
    return ALLOCATIONS[precision]
