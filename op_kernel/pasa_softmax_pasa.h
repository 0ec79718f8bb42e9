// The AIVs' softmax epilogue of PASA (Algorithm 1, steps 3-6; PasaFamily in pasa_allocation.h), per block: S' in
// (shifted and scaled by M on the cube), its mean over all n columns (before any mask), the masks, the row max,
// the Welford update of the pseudo-average F, the corrections Delta'prev = I (F_{j-1} - F_j) and
// Delta'cur = I (S̄'_j - F_j), m and l with the guarded -inf start, P' = exp(S' - m') out to the cube; the stage
// then updates O = alpha O + gamma P V. lse = m + ln l + I F. T = half ("pasa": every vector op rounds to FP16)
// or float ("pasa_fp32": S' and P FP16, the rest FP32).
#ifndef PASA_SOFTMAX_PASA_H
#define PASA_SOFTMAX_PASA_H

#include "pasa_components.h"
#include "pasa_vector_rows.h"

namespace pasa_kernel {

template <class Policy>
class PasaSoftmax : public SoftmaxBase {
public:
    using T = ElementAccumulator<Policy>;
    static constexpr bool WEIGHTS_PV = true;
    static constexpr bool CHECKS_OVERFLOW = true;

    // Its STATE_ROW_VECTORS (4): F, the block mean and the two corrections.
    __aicore__ inline void Init(AivRows<T>* rows, const PasaTilingData* t, GM_ADDR, GM_ADDR, uint32_t) {
        v_ = rows;
        inva_ = (T)t->invariance;
        LocalTensor<T>* vecs[4] = {&f_, &mean_, &dPrev_, &dCur_};
        for (uint32_t i = 0; i < 4; ++i) *vecs[i] = rows->epilogueState[i * ROW_VEC];
    }

    __aicore__ inline void ResetRows() { Duplicate(f_, (T)0, (int32_t)ROW_VEC); }

    __aicore__ inline void Block(const Task& k, uint32_t j) {
        AivRows<T>& v = *v_;
        const int32_t cnt = (int32_t)(v.rows * BLOCK_KV), rv = (int32_t)ROW_VEC;
        const uint32_t c0 = (k.kvBlock0 + j) * BLOCK_KV;
        LocalTensor<half> raw;
        const LocalTensor<T> s = v.LoadScores(j, raw);
        // Step 3: the block's pseudo-average over all n columns (padded copies included), before masks.
        Muls(v.work, s, (T)(1.0f / BLOCK_KV), cnt);
        PipeBarrier<PIPE_V>();
        v.TreeRowSum(mean_, v.work);
        v.ApplyMasks(k, s, c0, MinU(BLOCK_KV, k.seqKv - c0));
        v.RowMax(v.mBlk, s);
        ShiftedRowState(j);
        // P' = exp(S' - m') relative to the block's own max (m' -> lowest finite where the row is all -inf)
        Maxs(v.tmp1, v.mBlk, Lowest<T>(), rv);
        v.ExpRows(s);
        v.sQue.FreeTensor(raw);
        // alpha = exp(m_{j-1} - m_j + Delta'prev), gamma = exp(m' - m_j + Delta'cur), guarded;
        // l_j = alpha l_{j-1} + gamma l'
        Sub(v.tmp1, v.m, v.mNew, rv);
        Sub(v.tmp2, v.mBlk, v.mNew, rv);
        PipeBarrier<PIPE_V>();
        Add(v.tmp1, v.tmp1, dPrev_, rv);
        Add(v.tmp2, v.tmp2, dCur_, rv);
        PipeBarrier<PIPE_V>();
        v.MergeRowSums(v.Slot(j));
        v.CommitBlock(j);
    }

    // lse = m + ln l + I F: fc = F (FP32), then I F, then added.
    __aicore__ inline void LoadLseTerms() {
        if constexpr (sizeof(T) == 2) Cast(v_->fc, f_, RoundMode::CAST_NONE, ROW_VEC);
        else Muls(v_->fc, f_.template ReinterpretCast<float>(), 1.0f, (int32_t)ROW_VEC);
    }
    __aicore__ inline void ScaleLseTerms() { Muls(v_->fc, v_->fc, (float)inva_, (int32_t)ROW_VEC); }
    __aicore__ inline void AddLseTerms() {
        Add(v_->fa, v_->fa, v_->fc, (int32_t)ROW_VEC);
        PipeBarrier<PIPE_V>();
    }

    // A row's F stays finite iff every block mean S̄' of the row was finite, and S̄' is finite iff no S' of the
    // row is +-Inf (|S'/n| <= 65504/n, so the sum itself cannot overflow): F - F is 0 exactly on those rows.
    // In "pasa" (FP16 state) a row can also turn non-finite with every S' finite (I (S̄' - F) past 65504); the
    // backend's non-finite-row check catches that.
    __aicore__ inline void FiniteRows() {
        Sub(v_->tmp1, f_, f_, (int32_t)ROW_VEC);
        PipeBarrier<PIPE_V>();
        CompareScalar(v_->bits, v_->tmp1, (T)0, CMPMODE::EQ, ROW_VEC);
    }

private:
    // PASA steps 4-6 of block j (0-based) from its mean S̄'_j (mean_) and row max m' (mBlk): F_j in f_,
    // the corrections Delta'prev, Delta'cur and the new running maximum m_j in mNew.
    __aicore__ inline void ShiftedRowState(uint32_t j) {
        // Step 4: Welford mean F_j = F_{j-1} + (S̄'_j - F_{j-1}) / j; F_1 = S̄'_1.
        // Step 5: Delta'prev = I (F_{j-1} - F_j) (0 for j = 1), Delta'cur = I (S̄'_j - F_j).
        AivRows<T>& v = *v_;
        const int32_t rv = (int32_t)ROW_VEC;
        // S̄'_j - F_j goes to dCur_ itself, so the two corrections share their barriers.
        if (j == 0) {
            Muls(v.tmp2, mean_, (T)1, rv);  // F_1
            Duplicate(dPrev_, (T)0, rv);
            PipeBarrier<PIPE_V>();
            Sub(dCur_, mean_, v.tmp2, rv);
            PipeBarrier<PIPE_V>();
        } else {
            Sub(v.tmp1, mean_, f_, rv);
            PipeBarrier<PIPE_V>();
            DivideByBlockIndex(v.tmp1, j + 1);
            Add(v.tmp2, f_, v.tmp1, rv);  // F_j
            PipeBarrier<PIPE_V>();
            Sub(v.tmp1, f_, v.tmp2, rv);
            Sub(dCur_, mean_, v.tmp2, rv);
            PipeBarrier<PIPE_V>();
            Muls(dPrev_, v.tmp1, inva_, rv);
        }
        Muls(dCur_, dCur_, inva_, rv);
        Muls(f_, v.tmp2, (T)1, rv);
        PipeBarrier<PIPE_V>();
        // Step 6: m_j = max(m_{j-1} + Delta'prev, m' + Delta'cur)
        Add(v.tmp1, v.m, dPrev_, rv);
        Add(v.tmp2, v.mBlk, dCur_, rv);
        PipeBarrier<PIPE_V>();
        Max(v.mNew, v.tmp1, v.tmp2, rv);
        PipeBarrier<PIPE_V>();  // the caller rewrites tmp1
    }

    // x = x / j rounded to T, computed as FP32 division then one rounding (the golden's r(x / j)).
    __aicore__ inline void DivideByBlockIndex(const LocalTensor<T>& x, uint32_t j) {
        AivRows<T>& v = *v_;
        Duplicate(v.fb, (float)j, (int32_t)ROW_VEC);
        if constexpr (sizeof(T) == 2) {
            Cast(v.fa, x, RoundMode::CAST_NONE, ROW_VEC);
            PipeBarrier<PIPE_V>();
            Div(v.fa, v.fa, v.fb, (int32_t)ROW_VEC);
            PipeBarrier<PIPE_V>();
            Cast(x, v.fa, RoundMode::CAST_RINT, ROW_VEC);
        } else {
            PipeBarrier<PIPE_V>();
            Div(x.template ReinterpretCast<float>(), x.template ReinterpretCast<float>(), v.fb, (int32_t)ROW_VEC);
        }
        PipeBarrier<PIPE_V>();
    }

    AivRows<T>* v_;
    T inva_;
    LocalTensor<T> f_, mean_, dPrev_, dCur_;
};

}  // namespace pasa_kernel

#endif  // PASA_SOFTMAX_PASA_H
