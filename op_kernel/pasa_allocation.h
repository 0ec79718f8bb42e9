// The precision allocations the kernel computes, one tiling key each, as policy types: which type
// each stage produces, and how K is shifted. The AIC and AIV programs are templates over the policy,
// and each stage picks its path from it at compile time, so a key's binary carries only its own
// allocation (python/pasa_npu/precision.py names the same allocations and their keys).
//
//   ElementS            S (or S') out of the cube's Fixpipe (F322F16 of the FP32 accumulation in L0C)
//   ElementP            P into P V: the cube's operand type
//   ElementAccumulator  the softmax arithmetic, the row state m, l (and F), P V out of the Fixpipe, O
//   SHIFT               ShiftKind::NONE: FlashAttention-2 (eqs. 4-7): S = Q K^T, scaled on the vector side, P
//                         relative to the running maximum.
//                       ShiftKind::PASA_M: PASA (Algorithm 1): K' = M K pre-pass with the scale folded into M,
//                         the local softmax of each block merged through the pseudo-average F and
//                         I = beta/(1-beta).
//                       ShiftKind::ROW_SHIFTED: row-shifted PASA (docs/golden.md): K centred exactly per block
//                         in a pre-pass (pasa_centre_keys.h), a per-row shift psi near the running maximum
//                         subtracted in L0C before the FP16 rounding of S', reshifts and FP32 recomputes the
//                         AIVs request from the AIC (pasa_row_shift_cube.h), the merge through
//                         delta_j = (C_j - C_1) + (psi_j - psi_1).
#ifndef PASA_ALLOCATION_H
#define PASA_ALLOCATION_H

#include "kernel_operator.h"
#include "pasa_tiling_data.h"

namespace pasa_kernel {

enum class ShiftKind { NONE, PASA_M, ROW_SHIFTED };

template <typename ElementAccumulator_, ShiftKind SHIFT_>
struct AllocationPolicy {
    using ElementS = half;
    using ElementP = half;
    using ElementAccumulator = ElementAccumulator_;
    static constexpr ShiftKind SHIFT = SHIFT_;
};

// "pasa": shifted S' and every vector op in FP16.
using PasaFp16State = AllocationPolicy<half, ShiftKind::PASA_M>;
// "pasa_fp32": shifted S' and P in FP16, the softmax, the row state and O in FP32.
using PasaFp32State = AllocationPolicy<float, ShiftKind::PASA_M>;
// "fp16_fp32": FlashAttention with S in FP16 out of the cube, the softmax and O in FP32; the baseline
// PASA is compared with (FIA's FP16 path with an FP32 softmax).
using FlashFp16ScoreFp32State = AllocationPolicy<float, ShiftKind::NONE>;
// "pasa_rs": centred K, S' shifted per row in FP16 (FP32 where it leaves FP16's range), P in FP16, the
// softmax, the merge, the row state and O in FP32.
using RowShiftedFp32State = AllocationPolicy<float, ShiftKind::ROW_SHIFTED>;

}  // namespace pasa_kernel

#endif  // PASA_ALLOCATION_H
