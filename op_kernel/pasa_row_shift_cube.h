// pasa_rs on the AIC, per task (python/pasa_npu/blockwise.py _query_block_rs):
//   * Q^ = FP16(Q 2^e) from the AIVs (FLAG_QHAT_READY) into an L1 tile one NZ strip wider than D;
//   * the centre products, one GEMM per task with FP32 out: row 2j of [u_j; K^_j; ...] Q^^T is C_j = Q^ u_j,
//     row 2j + 1 is Q^ K^_j (the AIVs take lv_j = Q^ K^_j - C_j), for every block of the task
//     (FLAG_CENTRE_PROD_READY);
//   * passes of S'_j = Q^ K'_j^T - psi, psi subtracted inside the FP32 accumulation through the augmented
//     column (Q^'s last strip: -psi/64 in its first column, from the block's shift-column slot j % 2; K''s:
//     64 in its first column, zeros after, so the other 15 columns of the strip add exact zeros), out as
//     FP16 into block j's S' slot or as FP32 (the recompute of rows whose S' left FP16's range).
//
// The conversation with the AIVs. A round: each AIV writes its request word (and, for an FP16 pass, its
// rows of the shift column) and sets FLAG_REQUEST; the AIC waits for both (it serves both in one product),
// serves the larger request and answers with FLAG_S_READY, the closing (accepting) round too, so that both
// AIVs know the block is closed even when only the other asked for more; after the answer each AIV reads
// both words to know what was served. Words alternate between two parities by round: an AIV may write its
// next word before its neighbour has read the current pair, never two rounds ahead.
//   1. Block 1's learning conversation: its first pass with psi = shift(lv_1), and follow-ups until closed.
//   2. One round for the first passes of blocks 1 and 2 (the AIVs wrote both shift columns).
//   3. Per block j: the first pass of block j + 1 (FLAG_S_READY, no round: its shift column came with the
//      close of block j - 1), then block j's follow-up rounds (reshift, FP32 recompute) until closed, then
//      P_j V_j. psi_{j+1} needs the excesses of blocks <= j - 1 only (the lag of two blocks), so the cube
//      runs block j + 1's product while the AIVs decide on block j.
#ifndef PASA_ROW_SHIFT_CUBE_H
#define PASA_ROW_SHIFT_CUBE_H

#include "pasa_components.h"
#include "pasa_cube_ops.h"

namespace pasa_kernel {

template <class Policy>
class RowShiftScores : public ScoresBase {
public:
    // Centre products of at most this many blocks per GEMM: 2 rows each, 128 rows of L0A / L0C.
    static constexpr uint32_t CENTRE_BLOCKS_PER_GEMM = BLOCK_KV / 2;

    // query, key and value are not read here: Q^ comes from the AIVs, K' from the pre-pass, V through the stage.
    __aicore__ inline void Init(const PasaTilingData* t, CubeOps* cube, GM_ADDR, GM_ADDR, GM_ADDR, GM_ADDR,
                                GM_ADDR workspace, uint32_t core) {
        t_ = t;
        cube_ = cube;
        rsSlots_.Init(*t, workspace, core);
        slots_.Init(*t, workspace, core);
        centreGm_.SetGlobalBuffer((__gm__ half*)(workspace + t->wsCentreOffset));
        kShiftGm_.SetGlobalBuffer((__gm__ half*)(workspace + t->wsKShiftOffset));
    }

    // The task's conversation (steps 1 to 3), P_j V_j of each block through the stage once the block is closed.
    template <class Stage>
    __aicore__ inline void Run(const Task& k, Stage& stage) {
        const uint32_t mp = Align16(k.tileRows);
        LocalTensor<half> q = LoadQuery(k, mp);
        Learn(k, q, mp);
        for (uint32_t j = 0; j < k.nBlocks; ++j) {
            Block(k, q, mp, j);
            stage.Pv(k, mp, KvStack{j, j + 1, j});
        }
        cube_->qL1_.FreeTensor(q);
    }

private:
    // Q^ of the task (rows past the valid ones repeat the last valid row) into a tile of D + 16 columns,
    // then the centre products.
    __aicore__ inline LocalTensor<half> LoadQuery(const Task& k, uint32_t mp) {
        CrossCoreWaitFlag(FLAG_QHAT_READY);
        LocalTensor<half> q = cube_->LoadRows(cube_->qL1_, rsSlots_.qhat, k.rowsValid, mp, t_->headDim, t_->headDim);
        const uint32_t d = t_->headDim;
        for (uint32_t c0 = 0; c0 < k.nBlocks; c0 += CENTRE_BLOCKS_PER_GEMM) {
            const uint32_t rows = 2 * MinU(CENTRE_BLOCKS_PER_GEMM, k.nBlocks - c0);
            const uint32_t rowsPad = Align16(rows);
            LocalTensor<half> uk = cube_->LoadRows(cube_->kL1_, centreGm_[CentreIndex(*t_, k.b, k.kvHead, k.kvBlock0 + c0)],
                                                   rows, rowsPad, d, d);
            LocalTensor<float> c = cube_->Gemm(uk, rowsPad, d, q, BLayout::TRANSPOSED, mp, mp, 0, t_->baseK);
            cube_->kL1_.FreeTensor(uk);
            cube_->template ToGm<float>(rsSlots_.centreProd[(uint64_t)2 * c0 * mp], c, rowsPad, rows, mp, mp);
        }
        CrossCoreSetFlag<0x2, PIPE_FIX>(FLAG_CENTRE_PROD_READY);
        return q;
    }

    // Steps 1 and 2 of the conversation.
    __aicore__ inline void Learn(const Task& k, LocalTensor<half>& q, uint32_t mp) {
        FollowUps(k, q, mp, 0);           // block 1 learns its excess
        CrossCoreWaitFlag(FLAG_REQUEST);  // both AIVs wrote the shift columns of blocks 1 and 2
        ReadRequests();
        Pass(k, q, mp, 0, REQUEST_FP16);
    }

    // Step 3 for block j, up to its close (the caller then runs P_j V_j).
    __aicore__ inline void Block(const Task& k, LocalTensor<half>& q, uint32_t mp, uint32_t j) {
        if (j + 1 < k.nBlocks) Pass(k, q, mp, j + 1, REQUEST_FP16);
        FollowUps(k, q, mp, j);
    }

    // Block j's follow-up rounds, until both AIVs accept.
    __aicore__ inline void FollowUps(const Task& k, LocalTensor<half>& q, uint32_t mp, uint32_t j) {
        for (;;) {
            CrossCoreWaitFlag(FLAG_REQUEST);  // both AIVs have written their word (and shift column)
            const uint32_t request = ReadRequests();
            if (request == REQUEST_ACCEPT) {
                CrossCoreSetFlag<0x2, PIPE_FIX>(FLAG_S_READY);  // the closing answer: nothing computed
                return;
            }
            Pass(k, q, mp, j, request);
        }
    }

    // One pass of block j with the shift column of its slot, FP16 (block j's S' slot) or FP32 out.
    __aicore__ inline void Pass(const Task& k, LocalTensor<half>& q, uint32_t mp, uint32_t j, uint32_t request) {
        const uint32_t d = t_->headDim, cols = t_->kShiftCols;
        const uint32_t jb = k.kvBlock0 + j;
        const uint32_t keys = MinU(BLOCK_KV, k.seqKv - jb * BLOCK_KV);
        // the shift column into Q^'s last strip, after the previous pass's loads from the tile
        SyncPipes<HardEvent::MTE1_MTE2>();
        cube_->CopyRows(q[d * mp], rsSlots_.shiftCol[(uint64_t)(j % 2) * t_->blockQ * FRACTAL], k.rowsValid, mp, FRACTAL,
                        FRACTAL);
        SyncPipes<HardEvent::MTE2_MTE1>();
        // a tail block's padded K' rows repeat its last key; the AIVs mask their S' columns
        LocalTensor<half> kt = cube_->LoadRows(cube_->kL1_, kShiftGm_[KShiftIndex(*t_, k.b, k.kvHead, jb)], keys,
                                               BLOCK_KV, cols, cols);
        LocalTensor<float> c = cube_->Gemm(q, mp, cols, kt, BLayout::TRANSPOSED, BLOCK_KV, BLOCK_KV, 0, t_->baseK);
        cube_->kL1_.FreeTensor(kt);
        if (request == REQUEST_FP32) cube_->template ToGm<float>(rsSlots_.score32, c, mp, mp, BLOCK_KV, BLOCK_KV);
        else cube_->template ToGm<half>(slots_.Score(j), c, mp, mp, BLOCK_KV, BLOCK_KV);
        CrossCoreSetFlag<0x2, PIPE_FIX>(FLAG_S_READY);
    }

    // The larger of the two AIVs' requests of this round. The words were written by the AIVs' DMA after
    // this core's scalar unit may have cached their lines (two rounds ago), so each line is dropped first.
    __aicore__ inline uint32_t ReadRequests() {
        const uint32_t parity = round_++ % 2;
        uint32_t request = REQUEST_ACCEPT;
        for (uint32_t sub = 0; sub < 2; ++sub) {
            GlobalTensor<uint32_t> word = rsSlots_.request[RequestWordIndex(parity, sub)];
            DataCacheCleanAndInvalid<uint32_t, CacheLine::SINGLE_CACHE_LINE, DcciDst::CACHELINE_OUT>(word);
            const uint32_t w = word.GetValue(0);
            if (w > request) request = w;
        }
        return request;
    }

    const PasaTilingData* t_;
    CubeOps* cube_;
    uint32_t round_ = 0;
    GlobalTensor<half> centreGm_, kShiftGm_;
    SlotTensors<float> slots_;  // the S' ring of the stage's slots (pasa_rs's PV is FP32)
    RowShiftSlots rsSlots_;
};

}  // namespace pasa_kernel

#endif  // PASA_ROW_SHIFT_CUBE_H
