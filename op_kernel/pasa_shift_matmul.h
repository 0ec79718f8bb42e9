// PASA step 1 on the cube: K'_j = M K_j for every (batch, KV head, KV block j), M = (I - beta/n J)*scale
// with its two entries rounded to FP16 (python/pasa_npu/beta.shift_entries). M is symmetric, so
// M^T K = M K. A tail block (n_j < n keys) is padded to n rows with copies of its last key before the
// product (python/pasa_npu/blockwise.py), so every block is shifted by the same M and recovered by the
// same I = beta/(1 - beta). K' goes to the GM workspace in FP16 (Fixpipe F322F16) and is read by every
// query block and every query head of the GQA group: computed once, never per query block.
//
// M itself is written once per AI core by its two AIVs (ShiftMatrixWriter, rows split between them)
// into the core's workspace slot, then handed to the AIC with FLAG_M_READY. After its share of K'
// blocks every AIC meets the others at an AIC-only barrier (CrossCoreSetFlag mode 0), so no task reads
// a K' block before it is written.
#ifndef PASA_SHIFT_MATMUL_H
#define PASA_SHIFT_MATMUL_H

#include "pasa_cube_ops.h"
#include "pasa_kv_rows.h"

namespace pasa_kernel {

// AIC side: this core's share of the K' blocks, then the AIC-only barrier.
__aicore__ inline void ShiftPrepass(const PasaTilingData& t, CubeOps& cube, GM_ADDR key, GM_ADDR blockTable,
                                    GM_ADDR workspace, GlobalTensor<int64_t>& lenKv, uint32_t core) {
    const uint32_t d = t.headDim;
    const CoreSlots slots = SlotsOf(t, core);
    KvRows kRows;
    kRows.Init(&t, key, blockTable);
    GlobalTensor<half> mGm, kShiftGm;
    mGm.SetGlobalBuffer((__gm__ half*)(workspace + slots.shift));
    kShiftGm.SetGlobalBuffer((__gm__ half*)(workspace + t.wsKShiftOffset));

    CrossCoreWaitFlag(FLAG_M_READY);
    const uint32_t first = core * t.prepassPerCore;
    const uint32_t last = MinU(first + t.prepassPerCore, t.prepassItems);
    if (first < last) {
        LocalTensor<half> m = cube.LoadRows(cube.pL1_, mGm, BLOCK_KV, BLOCK_KV, BLOCK_KV, BLOCK_KV);
        for (uint32_t item = first; item < last; ++item) {
            const uint32_t j = item % t.numKvBlocks;
            const uint32_t bh = item / t.numKvBlocks;
            const uint32_t h = bh % t.numKvHeads, b = bh / t.numKvHeads;
            const SeqSpan keys = KeySpan(t, lenKv, b);
            if (j * BLOCK_KV >= keys.len) continue;  // beyond this batch's keys: never read
            const uint32_t rows = MinU(BLOCK_KV, keys.len - j * BLOCK_KV);
            LocalTensor<half> kTile = kRows.Load(cube, cube.kL1_, b, h, keys.start + j * BLOCK_KV, rows);
            for (uint32_t n0 = 0; n0 < d; n0 += BLOCK_KV) {  // L0C holds 128 x 128 FP32 per buffer
                const uint32_t nLen = MinU(BLOCK_KV, d - n0);
                LocalTensor<float> c = cube.Gemm(m, BLOCK_KV, BLOCK_KV, kTile, BLayout::ROWS, BLOCK_KV, nLen, n0, BLOCK_KV);
                cube.ToGm(kShiftGm[KShiftIndex(t, b, h, j) + n0], c, BLOCK_KV, BLOCK_KV, nLen, d);
            }
            cube.kL1_.FreeTensor(kTile);
        }
        cube.pL1_.FreeTensor(m);
    }
    CrossCoreSetFlag<0x0, PIPE_FIX>(FLAG_PREPASS_DONE);
    CrossCoreWaitFlag(FLAG_PREPASS_DONE);
}

// Lane mask of one repeat that covers 8 rows, one 16-lane block of each (block stride: a row): the lanes on
// the diagonal of rows whose first has column offset `offset` (0 or 8) in its block, or with `prefix` all the
// lanes up to it.
__aicore__ inline void DiagonalBlockMask(uint32_t offset, bool prefix, uint64_t mask[2]) {
    mask[0] = mask[1] = 0;
    for (uint32_t b = 0; b < 8; ++b) {
        const uint32_t lane = offset + b;  // the diagonal's lane in block b
        const uint64_t lanes = prefix ? ((2ull << lane) - 1) : (1ull << lane);
        mask[b / 4] |= lanes << (16 * (b % 4));
    }
}

// AIV side: this AIV's half of the rows of an n x n FP16 matrix into GM, through a UB tile of `tileRows`
// rows: every entry `fill`, except `value` on the columns [prefix ? 0 : r, r] of row r. M = diag on the
// diagonal and off elsewhere; pasa_rs's L = ones on and below the diagonal (pasa_centre_keys.h).
// Row r's diagonal lies in block r / 16 at lane r % 16, so for 8 rows starting on a multiple of 8 one masked
// Duplicate with a block stride of one row writes them all; the 8-row groups 16 rows apart share the mask and
// lie one row block and one column block apart (repeat stride 16 * 8 + 1 blocks). The blocks left of the
// diagonal's (prefix) take one continuous-mask Duplicate per group.
template <class Q>
__aicore__ inline void WriteRowPatternMatrix(const GlobalTensor<half>& dst, Q& outQue, uint32_t sub, uint32_t tileRows,
                                             half fill, half value, bool prefix) {
    constexpr uint32_t GROUP = 8, ROW_BLOCKS = BLOCK_KV / 16;
    const uint32_t half0 = sub * (BLOCK_KV / 2);
    for (uint32_t r0 = half0; r0 < half0 + BLOCK_KV / 2; r0 += tileRows) {
        const uint32_t rows = MinU(tileRows, half0 + BLOCK_KV / 2 - r0);  // r0 and rows: multiples of 8
        LocalTensor<half> tile = outQue.template AllocTensor<half>();
        Duplicate(tile, fill, (int32_t)(rows * BLOCK_KV));
        PipeBarrier<PIPE_V>();
        for (uint32_t g0 = 0; g0 < 2 && g0 * GROUP < rows; ++g0) {
            const uint32_t row = g0 * GROUP, r = r0 + row;
            uint64_t mask[2];
            DiagonalBlockMask(r % 16, prefix, mask);
            const uint8_t groups = (uint8_t)((rows - row + 2 * GROUP - 1) / (2 * GROUP));
            Duplicate(tile[row * BLOCK_KV + r / 16 * 16], value, mask, groups, ROW_BLOCKS,
                      (uint8_t)(2 * GROUP * ROW_BLOCKS + 1));
        }
        if (prefix) {
            for (uint32_t row = 0; row < rows; row += GROUP) {
                const uint32_t left = (r0 + row) / 16 * 16;  // columns before the diagonal's block
                if (left > 0)
                    Duplicate(tile[row * BLOCK_KV], value, (uint64_t)left, (uint8_t)GROUP, 1, (uint8_t)ROW_BLOCKS);
            }
        }
        outQue.EnQue(tile);
        tile = outQue.template DeQue<half>();
        DataCopy(dst[(uint64_t)r0 * BLOCK_KV], tile, rows * BLOCK_KV);
        outQue.FreeTensor(tile);
    }
}

// AIV side: this AIV's half of M into the core's slot, then FLAG_M_READY for the AIC.
template <class Q>
__aicore__ inline void WriteShiftMatrix(const PasaTilingData& t, Q& outQue, GM_ADDR workspace, uint32_t core,
                                        uint32_t sub, uint32_t tileRows) {
    GlobalTensor<half> mGm;
    mGm.SetGlobalBuffer((__gm__ half*)(workspace + SlotsOf(t, core).shift));
    // exact: the tiling rounded M's entries to FP16
    WriteRowPatternMatrix(mGm, outQue, sub, tileRows, (half)t.shiftOff, (half)t.shiftDiag, false);
    CrossCoreSetFlag<0x2, PIPE_MTE3>(FLAG_M_READY);
}

}  // namespace pasa_kernel

#endif  // PASA_SHIFT_MATMUL_H
