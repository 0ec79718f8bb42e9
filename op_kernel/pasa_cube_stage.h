// The AIC program of one task: the allocation's score component (the policy's Scores) computes S' and holds the
// AIC's side of the handshake, and asks this stage, shared by every allocation that hands P V to the AIVs, for
// PV_j = P_j V_j of each block once the AIVs sent P (FP32 accumulation in L0C, out through the Fixpipe in the
// state type to the block's slot). The products stay one per block, so every block's values are those of a
// block-by-block schedule. A Scores component has Init(tiling, cube, query, key, value, blockTable, workspace,
// core), Run(task, stage), which calls stage.Pv(task, rows, stack) for each stack once its P is in, or, where
// the sums stay on the cube (fp32_frame: FramedScores, pasa_framed_cube.h), runs its own products, and Finish()
// after the tasks (ScoresBase, pasa_components.h: a no-op where it has nothing to finish).
//
// StackedScores (FlashAttention and PASA, HANDSHAKE STACKED): S'_j = Q K'_j^T (PASA: K' from the pre-pass) or
// S_j = Q K_j^T (FlashAttention: K straight from GM, unscaled), FP16 through Fixpipe, handed to and from the two
// AIVs through per-core GM slots and mode-2 cross-core flags, a stack of kvStack blocks per handshake: one S_READY
// after the stack's S', one P_READY wait before its P V products, one PV_READY after them. The AIC computes S' of
// stack i before it waits for P of stack i - preLaunch, so the AIVs find the next stacks' S' ready while the AIC
// runs P V, and the matrix unit works while the vector units run the softmax. The slots rotate over
// preLaunch + 1 stacks (SlotTensors). Their reuse is safe: S' of stack i is written after P of stack
// i - preLaunch - 1 arrived (the AIVs read S' of a stack before they send its P); P and PV of stack i, after the
// AIVs updated O with PV of stack i - preLaunch - 1, which they do before the softmax of stack i
// (pasa_vector_stage.h Run).
// RowShiftScores (pasa_rs, HANDSHAKE PER_BLOCK_ROUNDS, pasa_row_shift_cube.h) runs block j + 1's first pass before
// the AIVs' verdict on block j, and asks for PV_j once block j is closed: its stacks are single blocks and it
// computes one block ahead (the tiling's kvStack 1, preLaunch 1), because the AIC must hear each block's verdict,
// which may ask for more passes, before that block's P V.
#ifndef PASA_CUBE_STAGE_H
#define PASA_CUBE_STAGE_H

#include "pasa_components.h"
#include "pasa_cube_ops.h"
#include "pasa_kv_rows.h"

namespace pasa_kernel {

template <class Policy>
class CubeStage {
public:
    using PvT = ElementAccumulator<Policy>;
    using Scores = typename Policy::template Scores<Policy>;

    __aicore__ inline void Init(const PasaTilingData* t, CubeOps* cube, GM_ADDR query, GM_ADDR key, GM_ADDR value,
                                GM_ADDR blockTable, GM_ADDR workspace, uint32_t core) {
        t_ = t;
        cube_ = cube;
        vRows_.Init(t, value, blockTable);
        scores_.Init(t, cube, query, key, value, blockTable, workspace, core);
        slots_.Init(*t, workspace, core);
        // K chunk of P V: one L0B buffer holds kc x D FP16
        kcPv_ = MinU(BLOCK_KV, (L0_HALF_BYTES / 2 / t->headDim) / FRACTAL * FRACTAL);
    }

    __aicore__ inline void Run(const Task& k) {
        if (k.nBlocks == 0) return;
        scores_.Run(k, *this);
    }

    // After the tasks.
    __aicore__ inline void Finish() { scores_.Finish(); }

    // P V of the stack's blocks, once the AIVs sent its P, each block's product to its own slot.
    __aicore__ inline void Pv(const Task& k, uint32_t mp, const KvStack& st) {
        const uint32_t d = t_->headDim;
        CrossCoreWaitFlag(FLAG_P_READY);
        for (uint32_t j = st.first; j < st.end; ++j) {
            const uint32_t jb = k.kvBlock0 + j;
            const uint32_t keys = MinU(BLOCK_KV, k.seqKv - jb * BLOCK_KV);
            LocalTensor<half> p = cube_->LoadRows(cube_->pL1_, slots_.Prob(j), k.tileRows, mp, BLOCK_KV, BLOCK_KV);
            // padded V rows repeat the last key's value; their P columns are exactly 0
            LocalTensor<half> v = vRows_.Load(*cube_, cube_->vL1_, k.b, k.kvHead, k.kvStart + jb * BLOCK_KV, keys);
            LocalTensor<float> c = cube_->Gemm(p, mp, BLOCK_KV, v, BLayout::ROWS, BLOCK_KV, d, 0, kcPv_);
            cube_->pL1_.FreeTensor(p);
            cube_->vL1_.FreeTensor(v);
            cube_->template ToGm<PvT>(slots_.Pv(j), c, mp, mp, d, d);
        }
        CrossCoreSetFlag<0x2, PIPE_FIX>(FLAG_PV_READY);
    }

private:
    const PasaTilingData* t_;
    CubeOps* cube_;
    Scores scores_;
    KvRows vRows_;
    SlotTensors<PvT> slots_;
    uint32_t kcPv_;
};

// S' (S) of FlashAttention and PASA, a stack of blocks per handshake (above).
template <class Policy>
class StackedScores : public ScoresBase {
public:
    __aicore__ inline void Init(const PasaTilingData* t, CubeOps* cube, GM_ADDR query, GM_ADDR key, GM_ADDR,
                                GM_ADDR blockTable, GM_ADDR workspace, uint32_t core) {
        t_ = t;
        cube_ = cube;
        qGm_.SetGlobalBuffer((__gm__ half*)query);
        if constexpr (Policy::PREPASS == Prepass::SHIFT_MATRIX)
            kGm_.SetGlobalBuffer((__gm__ half*)(workspace + t->wsKShiftOffset));
        else kRows_.Init(t, key, blockTable);
        slots_.Init(*t, workspace, core);
    }

    template <class Stage>
    __aicore__ inline void Run(const Task& k, Stage& stage) {
        const uint32_t mp = Align16(k.tileRows);
        LocalTensor<half> q = cube_->LoadRows(cube_->qL1_, qGm_[TileQOffset(*t_, k)], k.rowsValid, mp,
                                              t_->headDim, k.qRowStride);
        const uint32_t stacks = StacksOf(*t_, k);
        for (uint32_t i = 0; i < stacks + t_->preLaunch; ++i) {
            if (i < stacks) {
                const KvStack st = StackOf(*t_, k, i);
                for (uint32_t j = st.first; j < st.end; ++j) Score(k, q, mp, j);
                CrossCoreSetFlag<0x2, PIPE_FIX>(FLAG_S_READY);
            }
            if (i >= t_->preLaunch) stage.Pv(k, mp, StackOf(*t_, k, i - t_->preLaunch));
        }
        cube_->qL1_.FreeTensor(q);
    }

private:
    __aicore__ inline void Score(const Task& k, const LocalTensor<half>& q, uint32_t mp, uint32_t j) {
        const uint32_t d = t_->headDim;
        const uint32_t jb = k.kvBlock0 + j;
        LocalTensor<half> kt;
        if constexpr (Policy::PREPASS == Prepass::SHIFT_MATRIX) {
            // K' blocks are already padded to BLOCK_KV rows by the pre-pass
            kt = cube_->LoadRows(cube_->kL1_, kGm_[KShiftIndex(*t_, k.b, k.kvHead, jb)], BLOCK_KV, BLOCK_KV, d, d);
        } else {
            // a tail block's padded K rows repeat its last key; the AIVs mask their S columns
            const uint32_t keys = MinU(BLOCK_KV, k.seqKv - jb * BLOCK_KV);
            kt = kRows_.Load(*cube_, cube_->kL1_, k.b, k.kvHead, k.kvStart + jb * BLOCK_KV, keys);
        }
        LocalTensor<float> c = cube_->Gemm(q, mp, d, kt, BLayout::TRANSPOSED, BLOCK_KV, BLOCK_KV, 0, t_->baseK);
        cube_->kL1_.FreeTensor(kt);
        cube_->template ToGm<half>(slots_.Score(j), c, mp, mp, BLOCK_KV, BLOCK_KV);
    }

    const PasaTilingData* t_;
    CubeOps* cube_;
    GlobalTensor<half> qGm_;
    GlobalTensor<half> kGm_;  // K' in the workspace (PASA)
    KvRows kRows_;            // the key input (FlashAttention)
    SlotTensors<ElementAccumulator<Policy>> slots_;
};

}  // namespace pasa_kernel

#endif  // PASA_CUBE_STAGE_H
