// The precision allocations the kernel computes, as policy types (python/pasa_npu/precision.py names the same
// allocations and their tiling keys; tests/npu/test_npu_backend.py checks that the two tables agree). Plain C++ with
// no AscendC header: the host tiling (op_host/pasa_tiling.cpp) reads the same policies, so what an allocation
// asks of the kernel (its pre-pass, its handshake, its memory) is stated once, here.
//
// An allocation is a family (how K is shifted, and the components that go with it) and the type of its state:
//   STATE_BYTES  the softmax arithmetic, the row state m, l (and F), O and P V out of the Fixpipe: 2 (FP16) or
//                4 (FP32) (ElementAccumulator in pasa_common.h). S' and P are FP16 in every allocation.
//   PREPASS      what runs before the task loop: nothing, K' = M K (pasa_shift_matmul.h), or the key centring
//                of pasa_rs (pasa_centre_keys.h)
//   SCALE        where the softmax scale is applied: on the scores by the AIVs, folded into M, or split into a
//                power of two on Q and rho on the AIVs (pasa_rs)
//   HANDSHAKE    STACKED: S', P and P V in stacks of KV blocks, S' computed ahead (pasa_cube_stage.h);
//                PER_BLOCK_ROUNDS: the AIVs' verdict on every block before its P V (pasa_row_shift_cube.h)
//   Scores       the AIC's component: its S' products and its side of the handshake (CubeStage runs P V per
//                block for those that hand P V to the AIVs)
//   Softmax      the AIVs' epilogue: the online softmax and merge of each block; VectorStage
//                (pasa_vector_stage.h) runs what every allocation shares (scores in, masks, the O update, O/l,
//                the lse, the status words) and asks the epilogue for the rest
// and the memory the family asks for beyond the shared stages (the host plans UB, L1, L0C and the workspace
// from it; FamilyDefaults holds the shared stages' own choice for each):
//   SCORE_BYTES           S' out of the cube: 2 (FP16) or 4 (FP32)
//   KEY_EXTRA_COLS        columns of a K' row beyond D (pasa_rs's augmented column, one NZ strip)
//   VALUE_EXTRA_COLS      columns of a V tile beyond D (fp32_frame's column of ones, one NZ strip)
//   MERGE_WEIGHTS         the AIVs keep alpha and gamma of every block slot (a P V product per block merged into O)
//   SUMS_ON_CUBE          O and l accumulate in L0C across blocks, closed as segments (fp32_frame): no P V per
//                         block through the vector cores, an accumulator in L0C beside S
//   PROB_BUFFERS          buffers of the AIVs' P queue
//   MAX_BLOCK_Q           the largest query block the family's components take (128: an AIV's rows fit its score
//                         tiles; fp32_frame: 256, its AIVs take their rows in row tiles (AivTileRows) and its AIC
//                         its P V in row halves); the host takes the largest that fits
//   WORK_COLS             columns of the AIVs' work tile (the row max's first fold, the mask's cast)
//   STATE_ROW_VECTORS     row vectors of the state type the epilogue keeps (PASA: F, its block mean, the two
//                         corrections)
//   FP32_ROW_VECTORS      FP32 row vectors the epilogue keeps (pasa_rs: C_j, lv_j, psi_j, ...; its key pre-pass
//                         borrows them), and FP32_ROW_VECTORS_PER_SLOT more per block slot of the handshake's ring
//
// Adding an allocation: a row in precision.py's table, a policy here with a row in PASA_KERNEL_ALLOCATIONS, and,
// for a new family, its components (docs/npu.md, "Adding an allocation").
#ifndef PASA_ALLOCATION_H
#define PASA_ALLOCATION_H

#include <cstdint>

#include "pasa_tiling_data.h"

namespace pasa_kernel {

enum class Prepass : uint32_t { NONE, SHIFT_MATRIX, CENTRED_KEYS };
enum class ScaleRule : uint32_t { ON_SCORES, IN_SHIFT_MATRIX, POW2_AND_RHO };
enum class Handshake : uint32_t { STACKED, PER_BLOCK_ROUNDS };

// The components, defined in the files named above.
template <class Policy> class StackedScores;
template <class Policy> class RowShiftScores;
template <class Policy> class FramedScores;
template <class Policy> class FlashSoftmax;
template <class Policy> class PasaSoftmax;
template <class Policy> class RowShiftedSoftmax;
template <class Policy> class FramedSoftmax;

// What a family takes of the shared stages' memory unless it says otherwise (the list above).
struct FamilyDefaults {
    static constexpr uint32_t SCORE_BYTES = 2;
    static constexpr uint32_t KEY_EXTRA_COLS = 0;
    static constexpr uint32_t VALUE_EXTRA_COLS = 0;
    static constexpr bool MERGE_WEIGHTS = true;
    static constexpr bool SUMS_ON_CUBE = false;
    static constexpr uint32_t PROB_BUFFERS = 2;
    static constexpr uint32_t MAX_BLOCK_Q = 128;
    static constexpr uint32_t WORK_COLS = 128;
    static constexpr uint32_t STATE_ROW_VECTORS = 0;
    static constexpr uint32_t FP32_ROW_VECTORS = 0;
    static constexpr uint32_t FP32_ROW_VECTORS_PER_SLOT = 0;
};

// FlashAttention-2 (eqs. 4-7): S = Q K^T with K read from GM, unscaled out of the cube, multiplied by the scale
// on the AIVs; P relative to the running maximum.
struct FlashFamily : FamilyDefaults {
    static constexpr Prepass PREPASS = Prepass::NONE;
    static constexpr ScaleRule SCALE = ScaleRule::ON_SCORES;
    static constexpr Handshake HANDSHAKE = Handshake::STACKED;
    template <class P> using Scores = StackedScores<P>;
    template <class P> using Softmax = FlashSoftmax<P>;
};

// PASA (Algorithm 1): the K' = M K pre-pass with the scale folded into M; the local softmax of each block merged
// through the pseudo-average F and I = beta/(1 - beta).
struct PasaFamily : FamilyDefaults {
    static constexpr Prepass PREPASS = Prepass::SHIFT_MATRIX;
    static constexpr ScaleRule SCALE = ScaleRule::IN_SHIFT_MATRIX;
    static constexpr Handshake HANDSHAKE = Handshake::STACKED;
    static constexpr uint32_t STATE_ROW_VECTORS = 4;
    template <class P> using Scores = StackedScores<P>;
    template <class P> using Softmax = PasaSoftmax<P>;
};

// Row-shifted PASA (docs/golden.md): K centred exactly per block in a pre-pass, a per-row shift psi near the
// running maximum subtracted in L0C before the FP16 rounding of S', reshifts and FP32 recomputes the AIVs request
// from the AIC, the merge through delta_j = (C_j - C_1) + (psi_j - psi_1).
struct RowShiftedFamily : FamilyDefaults {
    static constexpr Prepass PREPASS = Prepass::CENTRED_KEYS;
    static constexpr ScaleRule SCALE = ScaleRule::POW2_AND_RHO;
    static constexpr Handshake HANDSHAKE = Handshake::PER_BLOCK_ROUNDS;
    static constexpr uint32_t KEY_EXTRA_COLS = 16;
    static constexpr uint32_t FP32_ROW_VECTORS = 13;
    // blockwise.RESHIFT_AT: a row whose block max lies further than this from 0 (units of Q^ K times
    // 2^floor(log2 rho); the host tiling writes it as rsReshiftAt) is reshifted ...
    static constexpr double RESHIFT_AT = 2.0;
    // ... and blockwise.RESHIFT_RELEVANCE: unless the block's max lies this far below the running one (scaled
    // scores; the host tiling's rsRelevance)
    static constexpr double RESHIFT_RELEVANCE = 4.0;
    template <class P> using Scores = RowShiftScores<P>;
    template <class P> using Softmax = RowShiftedSoftmax<P>;
};

// Framed FlashAttention (docs/golden.md "fp32_frame"): S = Q K^T in FP32 out of the cube; per row a frame G that
// moves only where a block's scores leave the range an FP16 P represents well; P = FP16(exp(scale (S - G))) with no
// block max, rescale or merge per block; P [V | 1] sums O and l in L0C across blocks, and a move in a row of the
// tile closes the sums as a segment, which the AIVs merge in FP32 (pasa_framed_cube.h, pasa_softmax_framed.h).
struct FramedFamily : FamilyDefaults {
    static constexpr Prepass PREPASS = Prepass::NONE;
    static constexpr ScaleRule SCALE = ScaleRule::ON_SCORES;
    static constexpr Handshake HANDSHAKE = Handshake::STACKED;
    static constexpr uint32_t SCORE_BYTES = 4;
    static constexpr uint32_t VALUE_EXTRA_COLS = 16;
    static constexpr bool MERGE_WEIGHTS = false;
    static constexpr bool SUMS_ON_CUBE = true;
    static constexpr uint32_t PROB_BUFFERS = 1;
    static constexpr uint32_t MAX_BLOCK_Q = 256;  // where [O | l] and a chunk of S fit L0C (pasa_buffer_plan.h)
    static constexpr uint32_t WORK_COLS = 64;
    // ones, fresh, known, low, peak, move, the segments' frame, the segment's l, and the frame versions: one per
    // block slot and one more (pasa_softmax_framed.h Init)
    static constexpr uint32_t FP32_ROW_VECTORS = 9;
    static constexpr uint32_t FP32_ROW_VECTORS_PER_SLOT = 1;
    // blockwise.FRAME_UP, FRAME_DOWN, FRAME_DOWN_BLOCKS, FRAME_DROP_LIMIT (docs/golden.md "fp32_frame")
    static constexpr float FRAME_UP = 10.0f;
    static constexpr float FRAME_DOWN = 8.0f;
    static constexpr uint32_t FRAME_DOWN_BLOCKS = 8;
    static constexpr double FRAME_DROP_LIMIT = 60.0;
    template <class P> using Scores = FramedScores<P>;
    template <class P> using Softmax = FramedSoftmax<P>;
};

// "pasa": shifted S' and every vector op in FP16.
struct PasaFp16State : PasaFamily {
    static constexpr const char* NAME = "pasa";
    static constexpr uint32_t STATE_BYTES = 2;
};
// "pasa_fp32": shifted S' and P in FP16, the softmax, the row state and O in FP32.
struct PasaFp32State : PasaFamily {
    static constexpr const char* NAME = "pasa_fp32";
    static constexpr uint32_t STATE_BYTES = 4;
};
// "fp16_fp32": FlashAttention with S in FP16 out of the cube, the softmax and O in FP32; the baseline PASA is
// compared with (FIA's FP16 path with an FP32 softmax).
struct FlashFp16ScoreFp32State : FlashFamily {
    static constexpr const char* NAME = "fp16_fp32";
    static constexpr uint32_t STATE_BYTES = 4;
};
// "pasa_rs": centred K, S' shifted per row in FP16 (FP32 where it leaves FP16's range), P in FP16, the softmax,
// the merge, the row state and O in FP32.
struct RowShiftedFp32State : RowShiftedFamily {
    static constexpr const char* NAME = "pasa_rs";
    static constexpr uint32_t STATE_BYTES = 4;
};
// "fp32_frame": FP32 S, FP16 P against the frame, O and l in FP32 on the cube, the merge of segments in FP32.
struct FramedFp32State : FramedFamily {
    static constexpr const char* NAME = "fp32_frame";
    static constexpr uint32_t STATE_BYTES = 4;
};

// The allocations the kernel runs, one row each: its tiling key and its policy. The key is a literal: CANN
// compiles one kernel binary per key its TILING_KEY_IS tests name (pasa_fused_attention.cpp expands this list;
// op_host/pasa_tiling.cpp builds its table of allocations from it).
#define PASA_KERNEL_ALLOCATIONS(X)        \
    X(0, PasaFp16State)                   \
    X(1, PasaFp32State)                   \
    X(2, FlashFp16ScoreFp32State)         \
    X(3, RowShiftedFp32State)             \
    X(4, FramedFp32State)

// A policy's memory traits as plain values, for the buffer plans the kernel and the host share
// (pasa_buffer_plan.h).
struct PolicyTraits {
    uint32_t stateBytes, scoreBytes;
    Prepass prepass;
    ScaleRule scale;
    Handshake handshake;
    uint32_t keyExtraCols, valueExtraCols;
    bool mergeWeights, sumsOnCube;
    uint32_t probBuffers, maxBlockQ, workCols;
    uint32_t stateRowVectors, fp32RowVectors, fp32RowVectorsPerSlot;
};

template <class Policy>
PASA_HOST_AICORE inline PolicyTraits TraitsOf() {
    PolicyTraits t;
    t.stateBytes = Policy::STATE_BYTES;
    t.scoreBytes = Policy::SCORE_BYTES;
    t.prepass = Policy::PREPASS;
    t.scale = Policy::SCALE;
    t.handshake = Policy::HANDSHAKE;
    t.keyExtraCols = Policy::KEY_EXTRA_COLS;
    t.valueExtraCols = Policy::VALUE_EXTRA_COLS;
    t.mergeWeights = Policy::MERGE_WEIGHTS;
    t.sumsOnCube = Policy::SUMS_ON_CUBE;
    t.probBuffers = Policy::PROB_BUFFERS;
    t.maxBlockQ = Policy::MAX_BLOCK_Q;
    t.workCols = Policy::WORK_COLS;
    t.stateRowVectors = Policy::STATE_ROW_VECTORS;
    t.fp32RowVectors = Policy::FP32_ROW_VECTORS;
    t.fp32RowVectorsPerSlot = Policy::FP32_ROW_VECTORS_PER_SLOT;
    return t;
}

}  // namespace pasa_kernel

#endif  // PASA_ALLOCATION_H
