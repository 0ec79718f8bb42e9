// The AIVs' softmax epilogue of FlashAttention-2 (eqs. 4-7; FlashFamily in pasa_allocation.h), per block: S in
// (unscaled out of the cube), S scale, the masks, the row max, m_j = max(m_{j-1}, m'), P = exp(S - m_j) out to the
// cube, alpha = exp(m_{j-1} - m_j) (guarded), l_j = alpha l_{j-1} + rowsum P; the stage then updates
// O = alpha O + P V (blockwise.py's FlashAttention branch).
#ifndef PASA_SOFTMAX_FLASH_H
#define PASA_SOFTMAX_FLASH_H

#include "pasa_components.h"
#include "pasa_vector_rows.h"

namespace pasa_kernel {

template <class Policy>
class FlashSoftmax : public SoftmaxBase {
public:
    using T = ElementAccumulator<Policy>;
    static constexpr bool WEIGHTS_PV = false;
    static constexpr bool CHECKS_OVERFLOW = true;

    __aicore__ inline void Init(AivRows<T>* rows, const PasaTilingData* t, GM_ADDR, GM_ADDR, uint32_t) {
        v_ = rows;
        scale_ = (T)t->scale;
    }

    __aicore__ inline void Block(const Task& k, uint32_t j) {
        AivRows<T>& v = *v_;
        const int32_t cnt = (int32_t)(v.rows * BLOCK_KV), rv = (int32_t)ROW_VEC;
        const uint32_t c0 = (k.kvBlock0 + j) * BLOCK_KV;
        LocalTensor<half> raw;
        const LocalTensor<T> s = v.LoadScores(j, raw);
        // S = Q K^T left the cube unscaled; the scale is one multiplication rounded to T
        Muls(s, s, scale_, cnt);
        PipeBarrier<PIPE_V>();
        v.ApplyMasks(k, s, c0, MinU(BLOCK_KV, k.seqKv - c0));
        v.RowMax(v.mBlk, s);
        // m_j = max(m_{j-1}, m'); P = exp(S - m_j) (m_j -> lowest finite where the row is all -inf so far)
        Max(v.mNew, v.m, v.mBlk, rv);
        PipeBarrier<PIPE_V>();
        Maxs(v.tmp1, v.mNew, Lowest<T>(), rv);
        v.ExpRows(s);
        v.sQue.FreeTensor(raw);
        // alpha = exp(m_{j-1} - m_j), guarded; l_j = alpha l_{j-1} + rowsum P
        Sub(v.tmp1, v.m, v.mNew, rv);
        PipeBarrier<PIPE_V>();
        const LocalTensor<T> alpha = v.Alpha(v.Slot(j));
        v.GuardedExp(&alpha, &v.tmp1, 1);
        Mul(v.tmp1, alpha, v.l, rv);
        PipeBarrier<PIPE_V>();
        Add(v.l, v.tmp1, v.lBlk, rv);
        v.CommitBlock(j);
    }

    // lse = m + ln l: no terms of its own (SoftmaxBase's no-ops), and no status words beyond word 0.

    // An S past 65504 makes its row's running maximum +inf.
    __aicore__ inline void FiniteRows() { v_->FiniteRunningMax(); }

private:
    AivRows<T>* v_;
    T scale_;
};

}  // namespace pasa_kernel

#endif  // PASA_SOFTMAX_FLASH_H
