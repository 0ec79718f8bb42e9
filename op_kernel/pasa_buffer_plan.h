// The block geometry and the on-chip buffers of the kernel, shared by the kernel (which allocates them) and the
// host tiling (which chooses the largest query block whose buffers fit, op_host/pasa_tiling.cpp): one statement
// of both, so that the plan is the sum of the kernel's InitBuffer calls by construction. Plain C++.
#ifndef PASA_BUFFER_PLAN_H
#define PASA_BUFFER_PLAN_H

#include <cstdint>

#include "pasa_tiling_data.h"

namespace pasa_kernel {

constexpr uint32_t BLOCK_KV = 128;              // keys per KV block (n of M); the tiling fixes it
constexpr uint32_t ROW_VEC = 128;               // padded length of a per-row vector (rows per AIV <= 64)
constexpr uint32_t FRACTAL = 16;                // 16 x 16 FP16 fractals (512 bytes), the NZ strip width
constexpr uint32_t L0_HALF_BYTES = 32 * 1024;   // one of the two L0A/L0B ping-pong buffers
constexpr uint32_t L0C_HALF_BYTES = 64 * 1024;  // one of the two L0C ping-pong buffers

// Row vectors every allocation's AIVs keep (pasa_vector_stage.h AivRows): of the state type m, m_new, l, the
// block's max and row sum and two temporaries; FP32, four for the lse and the decisions' sums.
constexpr uint32_t SHARED_STATE_ROW_VECTORS = 7;
constexpr uint32_t SHARED_FP32_ROW_VECTORS = 4;

// One AIV's UB: the bytes of one buffer of each queue, and the VECCALC buffer carved, in this order, into the
// pieces below.
struct AivUbPlan {
    uint32_t scoreBytes;     // S' in, FP16 (2 buffers)
    uint32_t probBytes;      // P out, FP16 (2 buffers)
    uint32_t pvBytes;        // P V in, the state type (2 buffers)
    uint32_t maskBytes;      // a mask tile, uint8
    uint32_t outBytes;       // the output rows in FP16, or one row of FP32 partials
    uint32_t lseBytes;       // lse values (and the status and request words)
    uint32_t fp32TileBytes;  // S' and P in FP32, one tile each (FP32 state only, else 0)
    uint32_t tileBytes;      // the work tile, the state type
    uint32_t bitsBytes;      // compare results of a tile
    uint32_t oBytes;         // O, the state type
    uint32_t stateVectors;   // row vectors of the state type: the shared ones, the epilogue's, then alpha and gamma
                             // of every block slot of the handshake's ring
    uint32_t brcbBytes;      // one 32-byte block per row (Brcb)
    uint32_t fp32Vectors;    // FP32 row vectors: the shared ones, then the epilogue's
    uint32_t calcBytes;      // VECCALC in all
    PASA_HOST_AICORE inline uint64_t Total() const {
        return 2ull * scoreBytes + 2ull * probBytes + 2ull * pvBytes + maskBytes + outBytes + lseBytes + calcBytes;
    }
};

// rowsPerAiv rows of D columns, a state of stateBytes, `ring` block slots (PasaSlotRing), and the epilogue's row
// vectors (the policy's STATE_ROW_VECTORS and FP32_ROW_VECTORS).
PASA_HOST_AICORE inline AivUbPlan PlanAivUb(uint32_t rowsPerAiv, uint32_t headDim, uint32_t stateBytes, uint32_t ring,
                                            uint32_t epilogueStateVectors, uint32_t epilogueFp32Vectors) {
    AivUbPlan p;
    const uint32_t rows = rowsPerAiv, st = stateBytes;
    p.scoreBytes = rows * BLOCK_KV * 2;
    p.probBytes = rows * BLOCK_KV * 2;
    p.pvBytes = rows * headDim * st;
    p.maskBytes = rows * BLOCK_KV;
    p.outBytes = rows * headDim * 2 > headDim * 4 ? rows * headDim * 2 : headDim * 4;
    p.lseBytes = 2 * ROW_VEC * 4;
    p.tileBytes = rows * BLOCK_KV * st;
    p.fp32TileBytes = st == 4 ? p.tileBytes : 0;
    p.bitsBytes = (rows * BLOCK_KV / 8 + 31) / 32 * 32;
    p.oBytes = rows * headDim * st;
    p.stateVectors = SHARED_STATE_ROW_VECTORS + epilogueStateVectors + 2 * ring;
    p.brcbBytes = rows * 32;
    p.fp32Vectors = SHARED_FP32_ROW_VECTORS + epilogueFp32Vectors;
    p.calcBytes = 2 * p.fp32TileBytes + p.tileBytes + p.bitsBytes + p.oBytes + p.stateVectors * ROW_VEC * st +
                  p.brcbBytes + p.fp32Vectors * ROW_VEC * 4;
    return p;
}

// One AIC's L1 (pasa_cube_ops.h CubeOps): the query tile, then double-buffered K (or K'), V and P (or M, L)
// tiles. Q and K carry keyCols columns (D, and pasa_rs's augmented strip); V tiles are as wide.
struct AicL1Plan {
    uint32_t qBytes, kBytes, vBytes, pBytes;
    PASA_HOST_AICORE inline uint64_t Total() const { return qBytes + 2ull * kBytes + 2ull * vBytes + 2ull * pBytes; }
};
PASA_HOST_AICORE inline AicL1Plan PlanAicL1(uint32_t blockQ, uint32_t keyCols) {
    return AicL1Plan{blockQ * keyCols * 2, BLOCK_KV * keyCols * 2, BLOCK_KV * keyCols * 2, BLOCK_KV * BLOCK_KV * 2};
}

}  // namespace pasa_kernel

#endif  // PASA_BUFFER_PLAN_H
