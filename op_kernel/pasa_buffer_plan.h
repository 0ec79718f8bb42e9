// The block geometry and the on-chip buffers of the kernel, shared by the kernel (which allocates them) and the
// host tiling (which chooses the largest query block whose buffers fit, op_host/pasa_tiling.cpp): one statement
// of both, so that the plan is the sum of the kernel's InitBuffer calls by construction. Plain C++.
#ifndef PASA_BUFFER_PLAN_H
#define PASA_BUFFER_PLAN_H

#include <cstdint>

#include "pasa_allocation.h"
#include "pasa_tiling_data.h"

namespace pasa_kernel {

constexpr uint32_t BLOCK_KV = 128;              // keys per KV block (n of M); the tiling fixes it
constexpr uint32_t ROW_VEC = 128;               // padded length of a per-row vector (rows per AIV <= 128)
constexpr uint32_t AIV_TILE_ROWS = 64;          // rows of an AIV's score, P and mask tiles at most: more rows per
                                                // AIV (a query block of 256) are taken in tiles (AivTileRows)
constexpr uint32_t FRACTAL = 16;                // 16 x 16 FP16 fractals (512 bytes), the NZ strip width
constexpr uint32_t L0_HALF_BYTES = 32 * 1024;   // one of the two L0A/L0B ping-pong buffers
constexpr uint32_t L0C_HALF_BYTES = 64 * 1024;  // one of the two L0C ping-pong buffers
constexpr uint32_t MIN_SCORE_ROWS = 32;         // rows of an S chunk beside fp32_frame's [O | l] worth taking
                                                // a query block beyond 64 rows for (op_host/pasa_tiling.cpp)
constexpr uint32_t MIN_SCORE_KEYS = 32;         // keys of fp32_frame's ping-pong S tiles over chunks of keys at
                                                // least (fewer: one buffer of more keys)
constexpr uint32_t MAX_SLOT_RING = 16;          // block slots of the handshake's rings (PasaSlotRing) at most:
                                                // fp32_frame's AIVs keep a frame version per slot in a fixed table

// Row vectors every allocation's AIVs keep (pasa_vector_stage.h AivRows): of the state type m, m_new, l, the
// block's max and row sum and two temporaries; FP32, four for the lse and the decisions' sums.
constexpr uint32_t SHARED_STATE_ROW_VECTORS = 7;
constexpr uint32_t SHARED_FP32_ROW_VECTORS = 4;

// Rows of an AIV's tiles for its rowsPerAiv rows: all of them up to AIV_TILE_ROWS, else the fewest tiles of at most
// AIV_TILE_ROWS, as even as 16 rows allow (128 rows: two of 64; 96: two of 48, the same vector instructions per block
// as 64 + 32 in less UB).
PASA_HOST_AICORE inline uint32_t AivTileRows(uint32_t rowsPerAiv) {
    if (rowsPerAiv <= AIV_TILE_ROWS) return rowsPerAiv;
    const uint32_t tiles = (rowsPerAiv + AIV_TILE_ROWS - 1) / AIV_TILE_ROWS;
    return ((rowsPerAiv + tiles - 1) / tiles + FRACTAL - 1) / FRACTAL * FRACTAL;
}

// One AIV's UB: the bytes of one buffer of each queue, and the VECCALC buffer carved, in this order, into the
// pieces below.
struct AivUbPlan {
    uint32_t scoreBytes;     // S' in, the score type (2 buffers)
    uint32_t probBytes;      // P out, FP16 (probBuffers buffers)
    uint32_t probBuffers;
    uint32_t pvBytes;        // P V in, the state type (2 buffers); where the sums stay on the cube, a row of the
                             // split-KV combine
    uint32_t maskBytes;      // a mask tile, uint8
    uint32_t outBytes;       // a tile's output rows in FP16, a 32-byte block per row (the strided lse), or one row
                             // of FP32 partials
    uint32_t lseBytes;       // lse values (and the status and request words)
    uint32_t fp32TileBytes;  // S' and P in FP32, one tile each (FP16 scores into an FP32 state only, else 0)
    uint32_t tileBytes;      // the work tile, the state type
    uint32_t bitsBytes;      // compare results of a tile
    uint32_t oBytes;         // O, the state type
    uint32_t stateVectors;   // row vectors of the state type: the shared ones, the epilogue's, then alpha and gamma
                             // of every block slot of the handshake's ring (where the policy merges per block)
    uint32_t brcbBytes;      // one 32-byte block per row (Brcb)
    uint32_t fp32Vectors;    // FP32 row vectors: the shared ones, then the epilogue's
    uint32_t calcBytes;      // VECCALC in all
    PASA_HOST_AICORE inline uint64_t Total() const {
        return 2ull * scoreBytes + (uint64_t)probBuffers * probBytes + 2ull * pvBytes + maskBytes + outBytes +
               lseBytes + calcBytes;
    }
};

// rowsPerAiv rows of D columns, `ring` block slots (PasaSlotRing), and the policy's traits (pasa_allocation.h).
// The tiles of a block (scores, P, mask, work, compare bits) and of the output hold AivTileRows rows; O and the row
// vectors all of the AIV's rows.
PASA_HOST_AICORE inline AivUbPlan PlanAivUb(uint32_t rowsPerAiv, uint32_t headDim, uint32_t ring,
                                            const PolicyTraits& a) {
    AivUbPlan p;
    const uint32_t rows = rowsPerAiv, st = a.stateBytes;
    const uint32_t tile = AivTileRows(rows);
    p.scoreBytes = tile * BLOCK_KV * a.scoreBytes;
    p.probBytes = tile * BLOCK_KV * 2;
    p.probBuffers = a.probBuffers;
    p.pvBytes = a.sumsOnCube ? (headDim > 64 ? headDim : 64) * 4 : rows * headDim * st;
    p.maskBytes = tile * BLOCK_KV;
    p.outBytes = tile * headDim * 2 > rows * 32 ? tile * headDim * 2 : rows * 32;
    if (p.outBytes < headDim * 4) p.outBytes = headDim * 4;
    p.lseBytes = 2 * ROW_VEC * 4;
    p.tileBytes = tile * a.workCols * st;
    p.fp32TileBytes = st == 4 && a.scoreBytes == 2 ? tile * BLOCK_KV * 4 : 0;
    p.bitsBytes = (tile * BLOCK_KV / 8 + 31) / 32 * 32;
    p.oBytes = rows * headDim * st;
    p.stateVectors = SHARED_STATE_ROW_VECTORS + a.stateRowVectors + (a.mergeWeights ? 2 * ring : 0);
    p.brcbBytes = rows * 32;
    p.fp32Vectors = SHARED_FP32_ROW_VECTORS + a.fp32RowVectors + a.fp32RowVectorsPerSlot * ring;
    p.calcBytes = 2 * p.fp32TileBytes + p.tileBytes + p.bitsBytes + p.oBytes + p.stateVectors * ROW_VEC * st +
                  p.brcbBytes + p.fp32Vectors * ROW_VEC * 4;
    return p;
}

// One AIC's L1 (pasa_cube_ops.h CubeOps): the query tile, then double-buffered K (or K'), V and P (or M, L)
// tiles, and the VALUE_EXTRA_COLS columns the V tiles share (fp32_frame's column of ones: 128 x 16, loaded once).
// Q, K and V carry D + KEY_EXTRA_COLS columns (V: K's pre-pass borrows its buffers); a P tile has the query
// block's rows, M and L tiles 128.
struct AicL1Plan {
    uint32_t qBytes, kBytes, vBytes, pBytes, valueExtraBytes;
    PASA_HOST_AICORE inline uint64_t Total() const {
        return qBytes + 2ull * kBytes + 2ull * vBytes + 2ull * pBytes + valueExtraBytes;
    }
};
PASA_HOST_AICORE inline AicL1Plan PlanAicL1(uint32_t blockQ, uint32_t headDim, const PolicyTraits& a) {
    const uint32_t keyCols = headDim + a.keyExtraCols;
    const uint32_t pRows = blockQ > BLOCK_KV ? blockQ : BLOCK_KV;
    return AicL1Plan{blockQ * keyCols * 2, BLOCK_KV * keyCols * 2, BLOCK_KV * keyCols * 2, pRows * BLOCK_KV * 2,
                     BLOCK_KV * a.valueExtraCols * 2};
}

// One AIC's L0A. fp32_frame keeps a task's Q (its rows x D FP16) in a buffer of its own for the task, so that every
// S tile reads its rows of Q in place (pasa_framed_cube.h); P takes the rest of L0A in pieces of probRows rows x 128
// keys FP16, as many rows as fit (at most the block's), in two buffers where two pieces fit, else one; probRows 0: Q
// leaves no room beside it for a piece of 16 rows. The other allocations: two ping-pong halves (probRows unused).
struct AicL0aPlan {
    uint32_t queryBytes, operandBuffers, operandBytes, probRows;
    PASA_HOST_AICORE inline uint64_t Total() const { return queryBytes + (uint64_t)operandBuffers * operandBytes; }
};
PASA_HOST_AICORE inline AicL0aPlan PlanAicL0a(uint32_t blockQ, uint32_t headDim, const PolicyTraits& a) {
    if (!a.sumsOnCube) return AicL0aPlan{0, 2, L0_HALF_BYTES, 0};
    constexpr uint32_t L0A_BYTES = 2 * L0_HALF_BYTES, PROB_ROW_BYTES = BLOCK_KV * 2;
    const uint32_t whole = (blockQ + FRACTAL - 1) / FRACTAL * FRACTAL, query = whole * headDim * 2;
    if (query + FRACTAL * PROB_ROW_BYTES > L0A_BYTES) return AicL0aPlan{query, 0, 0, 0};
    const uint32_t rest = L0A_BYTES - query;
    uint32_t rows = rest / PROB_ROW_BYTES / FRACTAL * FRACTAL;
    if (rows > whole) rows = whole;
    const uint32_t buffers = 2 * rows * PROB_ROW_BYTES <= rest ? 2 : 1;
    return AicL0aPlan{query, buffers, rows * PROB_ROW_BYTES, rows};
}

// Keys of K (D columns FP16) an L0B half holds, at most a block's, in whole fractals.
PASA_HOST_AICORE inline uint32_t KeysPerL0bHalf(uint32_t headDim) {
    const uint32_t keys = L0_HALF_BYTES / (headDim * 2) / FRACTAL * FRACTAL;
    return keys < BLOCK_KV ? keys : BLOCK_KV;
}

// One AIC's L0C: S' (and P V, and the pre-passes' products) in scoreBuffers tiles of scoreRows x scoreKeys FP32, and,
// where the sums stay on the cube, the accumulator [O | l] of blockQ x (D + VALUE_EXTRA_COLS) FP32 beside them, S'
// then computed in tiles of what fits beside it: a tile's keys fit an L0B half of K (so each K chunk is loaded once
// for all the tile's rows) and its rows read the task's Q where it stays in L0A (PlanAicL0a; no tiles where it
// cannot). In order: the whole block's tile in two buffers (its Fixpipe drains while the cube sums the block's P V,
// pasa_framed_cube.h), else in one; where K is wider than an L0B half (D > 128), tiles of all the rows over even
// chunks of the keys, as few as L0C and L0B allow, in two buffers where tiles of MIN_SCORE_KEYS fit them (ping-pong:
// a tile's Fixpipe drains while the cube computes the next; in one buffer the next tile's Mmad would wait for it),
// else in one; else row chunks of all the keys, the largest multiple of 16 rows whose two buffers fit (ping-pong: a
// chunk's Fixpipe drains while the cube computes the next; the tiling takes a block of more than 64 rows only where
// they are at least MIN_SCORE_ROWS). scoreRows 0: nothing fits.
struct AicL0cPlan {
    uint32_t accBytes, scoreRows, scoreKeys, scoreBuffers, scoreBufferBytes;
    PASA_HOST_AICORE inline uint64_t Total() const { return accBytes + (uint64_t)scoreBuffers * scoreBufferBytes; }
    // Takes S' tiles of rows x keys in `buffers` buffers where they fit beside the accumulator and the keys fit an
    // L0B half of K; whether it did.
    PASA_HOST_AICORE inline bool Take(uint32_t rows, uint32_t keys, uint32_t buffers, uint32_t headDim) {
        constexpr uint32_t L0C_BYTES = 2 * L0C_HALF_BYTES;
        if (keys > KeysPerL0bHalf(headDim) || accBytes + buffers * rows * keys * 4 > L0C_BYTES) return false;
        scoreRows = rows;
        scoreKeys = keys;
        scoreBuffers = buffers;
        scoreBufferBytes = rows * keys * 4;
        return true;
    }
};
PASA_HOST_AICORE inline AicL0cPlan PlanAicL0c(uint32_t blockQ, uint32_t headDim, const PolicyTraits& a) {
    if (!a.sumsOnCube) return AicL0cPlan{0, blockQ, BLOCK_KV, 2, L0C_HALF_BYTES};
    AicL0cPlan p{blockQ * (headDim + a.valueExtraCols) * 4, 0, 0, 0, 0};
    if (PlanAicL0a(blockQ, headDim, a).probRows == 0) return p;
    const uint32_t whole = (blockQ + FRACTAL - 1) / FRACTAL * FRACTAL;
    if (p.Take(whole, BLOCK_KV, 2, headDim) || p.Take(whole, BLOCK_KV, 1, headDim)) return p;
    const uint32_t l0cKeys = p.accBytes < 2 * L0C_HALF_BYTES ? (2 * L0C_HALF_BYTES - p.accBytes) / (whole * 4) : 0;
    for (uint32_t buffers = 2; KeysPerL0bHalf(headDim) < BLOCK_KV && buffers >= 1; --buffers) {
        const uint32_t fit = l0cKeys / buffers / FRACTAL * FRACTAL;
        const uint32_t maxKeys = fit < KeysPerL0bHalf(headDim) ? fit : KeysPerL0bHalf(headDim);
        if (maxKeys < (buffers == 2 ? MIN_SCORE_KEYS : FRACTAL)) continue;
        const uint32_t chunks = (BLOCK_KV + maxKeys - 1) / maxKeys;  // as even as 16 keys allow
        if (p.Take(whole, (BLOCK_KV / FRACTAL + chunks - 1) / chunks * FRACTAL, buffers, headDim)) return p;
    }
    for (uint32_t rows = whole - FRACTAL; rows >= FRACTAL; rows -= FRACTAL)
        if (p.Take(rows, BLOCK_KV, 2, headDim)) return p;
    return p;
}

}  // namespace pasa_kernel

#endif  // PASA_BUFFER_PLAN_H
