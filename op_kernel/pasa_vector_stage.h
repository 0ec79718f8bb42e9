// The AIV program of a task, what every allocation shares: this AIV's rows (pasa_vector_rows.h), the task's
// stacks of KV blocks handed to the allocation's softmax epilogue (the policy's Softmax: pasa_softmax_flash.h,
// pasa_softmax_pasa.h, pasa_softmax_row_shifted.h), the O update with each block's P V, the final normalisation
// O/l and the true-scale lse, and the status words; in the order and the roundings of
// python/pasa_npu/blockwise.py, with T = the policy's ElementAccumulator (the type of the softmax, of the row
// state and O, and of P V).
//
// What the stage asks of an epilogue (they share this interface; SoftmaxBase, pasa_components.h, makes Prepare,
// BeginTask, ResetRows, EndStack, the three lse terms and WriteStatusWords no-ops where an epilogue leaves them out):
//   Init(rows, tiling, query, workspace, core)  its row vectors from rows.epilogueState / rows.epilogueFp32
//   Prepare()           before the tasks (fp32_frame: the column of ones for the AIC's V tiles)
//   BeginTask(k)        before the row state is reset (pasa_rs: Q^ to the AIC, through O's buffer)
//   ResetRows()         its own row state, beside m = -inf, l = 0, O = 0
//   Block(k, j)         block j's softmax: S'_j from its slot, P_j to its slot, the row state merged (HANDSHAKE
//                       STACKED: the stage signals the AIC around each stack; PER_BLOCK_ROUNDS: the epilogue holds
//                       its own conversation with the AIC, pasa_row_shift_cube.h)
//   EndStack()          after the stack's blocks, before P_READY (HANDSHAKE STACKED; fp32_frame: its moves)
//   WEIGHTS_PV          O = alpha O + gamma P V (a local softmax per block, merged) or O = alpha O + P V; or, where
//   MergeStack(k, st)   the sums stay on the cube (SUMS_ON_CUBE), the stack's closed segments into O and l
//   LoadLseTerms(), ScaleLseTerms(), AddLseTerms()   its terms of lse = m + ln l (+ ...), in the stage's FP32
//                       vectors fa (m, then lse) and fb (l, then ln l), at three points of the stage's sequence; with
//                       a learnable sink, back to back before the join: fa = the row's true-scale maximum (the
//                       allocation's frame moved back: PASA's I F, pasa_rs's rho (C_1 + psi_1), fp32_frame's scale G)
//   CHECKS_OVERFLOW     whether its state can leave the finite range (fp32_frame's cannot: no check), and then
//   FiniteRows()        bits = the rows whose state stayed finite (the overflow check)
//   WriteStatusWords(s) its words of the status block beyond word 0
//
// Overflow (an Inf in S', the paper's "adaptive mechanism" case): the values follow the golden model (Inf/NaN
// propagate as the hardware's would), and every AIV writes status words at wsStatusOffset + 32 aiv: word 0 bit 0
// set where some valid row's state did not stay finite (the epilogue's FiniteRows says what that means for its
// allocation). The host model's launcher reads them (npu_host_model.run_with_status); the torch_npu binding does
// not (docs/npu.md), and the backend finds such rows by their non-finite outputs instead.
#ifndef PASA_VECTOR_STAGE_H
#define PASA_VECTOR_STAGE_H

#include "pasa_vector_rows.h"

namespace pasa_kernel {

template <class Policy>
class VectorStage {
public:
    using T = ElementAccumulator<Policy>;
    using Softmax = typename Policy::template Softmax<Policy>;

    __aicore__ inline void Init(const PasaTilingData* t, TPipe* pipe, GM_ADDR query, GM_ADDR mask, GM_ADDR sink,
                                GM_ADDR out, GM_ADDR lse, GM_ADDR workspace, uint32_t core, uint32_t sub) {
        t_ = t;
        v_.Init(t, pipe, mask, workspace, core, sub, TraitsOf<Policy>());
        softmax_.Init(&v_, t, query, workspace, core);
        outGm_.SetGlobalBuffer((__gm__ half*)out);
        lseGm_.SetGlobalBuffer((__gm__ float*)lse);
        statusGm_.SetGlobalBuffer((__gm__ uint32_t*)(workspace + t->wsStatusOffset));
        partOGm_.SetGlobalBuffer((__gm__ float*)(workspace + t->wsPartialOffset));
        partLseGm_.SetGlobalBuffer((__gm__ float*)(workspace + t->wsPartialLseOffset));
        if (t->hasSink) sinkGm_.SetGlobalBuffer((__gm__ float*)sink);
    }

    // The rows' buffers, lent to the AIV stages outside the task loop (the pre-passes, the split-KV combine).
    __aicore__ inline AivRows<T>& Rows() { return v_; }

    // Before the tasks: the epilogue's own setup.
    __aicore__ inline void Prepare() { softmax_.Prepare(); }

    __aicore__ inline void Run(const Task& k) {
        v_.SelectRows(k);
        softmax_.BeginTask(k);
        if (v_.rows > 0) {
            Duplicate(v_.m, NegInf<T>(), (int32_t)ROW_VEC);
            Duplicate(v_.l, (T)0, (int32_t)ROW_VEC);
            softmax_.ResetRows();
            Duplicate(v_.oAcc, (T)0, (int32_t)(v_.rows * v_.d));
            PipeBarrier<PIPE_V>();
        }
        // The AIC computes S' preLaunch stacks ahead (pasa_cube_stage.h): the softmax of stack i comes before
        // the O update of stack i - preLaunch, whose PV the AIC computes after S' of stack i.
        const uint32_t stacks = StacksOf(*t_, k);
        for (uint32_t i = 0; i < stacks + t_->preLaunch; ++i) {
            if (i < stacks) SoftmaxStack(k, StackOf(*t_, k, i));
            if (i >= t_->preLaunch) UpdateStack(k, StackOf(*t_, k, i - t_->preLaunch));
        }
        if (v_.rows > 0) Finalize(k);
    }

    // The status words of this AIV, written once, at the end: word 0 bit 0: a valid row whose state did not stay
    // finite; the epilogue's words after it (pasa_rs: its reshift and recompute counts).
    __aicore__ inline void WriteStatus(uint32_t aiv) {
        LocalTensor<uint32_t> s = v_.lseQue.template AllocTensor<uint32_t>();
        Duplicate(s, 0u, 8);
        SyncPipes<HardEvent::V_S>();
        s.SetValue(0, overflow_ ? 1u : 0u);
        softmax_.WriteStatusWords(s);
        SyncPipes<HardEvent::S_MTE3>();
        v_.lseQue.EnQue(s);
        s = v_.lseQue.template DeQue<uint32_t>();
        DataCopy(statusGm_[aiv * 8], s, 8);
        v_.lseQue.FreeTensor(s);
    }

private:
    // The stack's blocks through the epilogue; with the stacked handshake, after the stack's S' from the AIC and
    // before its P to the AIC.
    __aicore__ inline void SoftmaxStack(const Task& k, const KvStack& st) {
        if constexpr (Policy::HANDSHAKE == Handshake::STACKED) {
            CrossCoreWaitFlag(FLAG_S_READY);
            if (v_.rows > 0) {
                for (uint32_t j = st.first; j < st.end; ++j) softmax_.Block(k, j);
            }
            softmax_.EndStack();
            CrossCoreSetFlag<0x2, PIPE_MTE3>(FLAG_P_READY);
        } else {
            for (uint32_t j = st.first; j < st.end; ++j) softmax_.Block(k, j);
        }
    }

    // The stack's PV from the AIC, then O updated block by block; or the stack's segments merged.
    __aicore__ inline void UpdateStack(const Task& k, const KvStack& st) {
        CrossCoreWaitFlag(FLAG_PV_READY);
        if (v_.rows == 0) return;
        if constexpr (Policy::SUMS_ON_CUBE) {
            softmax_.MergeStack(k, st);
        } else {
            for (uint32_t j = st.first; j < st.end; ++j) Update(j);
        }
    }

    // O = alpha O + gamma PV (a local softmax per block) or O = alpha O + PV, each product and the sum rounded to T.
    __aicore__ inline void Update(uint32_t j) {
        const uint32_t slot = v_.Slot(j);
        LocalTensor<T> pv = v_.pvQue.template AllocTensor<T>();
        DataCopy(pv, v_.slots.Pv(j)[v_.r0 * v_.d], v_.rows * v_.d);
        v_.pvQue.EnQue(pv);
        pv = v_.pvQue.template DeQue<T>();
        v_.Broadcast(v_.Alpha(slot));
        v_.RowBroadcast(RowOp::MUL, v_.oAcc, v_.oAcc, v_.bc, v_.rows, v_.d);
        PipeBarrier<PIPE_V>();
        if constexpr (Softmax::WEIGHTS_PV) {
            v_.Broadcast(v_.Gamma(slot));
            v_.RowBroadcast(RowOp::MUL, pv, pv, v_.bc, v_.rows, v_.d);
            PipeBarrier<PIPE_V>();
        }
        Add(v_.oAcc, v_.oAcc, pv, (int32_t)(v_.rows * v_.d));
        v_.pvQue.FreeTensor(pv);
    }

    // O/l (rows without any kept key: l = 0, O = 0, out 0) and lse = m + ln l and the epilogue's terms, in FP32,
    // -inf for l = 0; with a learnable sink (and no split: the combine adds it there), the sink joined first.
    __aicore__ inline void Finalize(const Task& k) {
        const int32_t rv = (int32_t)ROW_VEC;
        const bool join = t_->hasSink && t_->kvSplits == 1;
        CompareScalar(v_.bits, v_.l, (T)0, CMPMODE::NE, ROW_VEC);
        PipeBarrier<PIPE_V>();
        if (join) JoinSink(k);
        Select(v_.tmp1, v_.bits, v_.l, (T)1, SELMODE::VSEL_TENSOR_SCALAR_MODE, ROW_VEC);
        PipeBarrier<PIPE_V>();
        v_.Broadcast(v_.tmp1);
        v_.RowBroadcast(RowOp::DIV, v_.oAcc, v_.oAcc, v_.bc, v_.rows, v_.d);
        if (!join) LoadMax();
        if constexpr (sizeof(T) == 2) Cast(v_.fb, v_.l, RoundMode::CAST_NONE, ROW_VEC);
        else Muls(v_.fb, v_.l.template ReinterpretCast<float>(), 1.0f, rv);
        if (!join) softmax_.LoadLseTerms();
        PipeBarrier<PIPE_V>();
        Ln(v_.fb, v_.fb, rv);
        if (!join) softmax_.ScaleLseTerms();
        PipeBarrier<PIPE_V>();
        Add(v_.fa, v_.fa, v_.fb, rv);
        PipeBarrier<PIPE_V>();
        if (!join) softmax_.AddLseTerms();
        Select(v_.fa, v_.bits, v_.fa, NegInf<float>(), SELMODE::VSEL_TENSOR_SCALAR_MODE, ROW_VEC);
        PipeBarrier<PIPE_V>();
        if constexpr (Softmax::CHECKS_OVERFLOW) CheckOverflow();
        if (t_->kvSplits == 1) WriteFinal(k);
        else WritePartial(k);
    }

    // The sink joins the row state once, after the last block (blockwise._join_sink, the same in every allocation):
    // fa holds the row's true-scale maximum m (FP32) and bits the rows with a key. As one more block of one key of
    // weight e^s and value 0: top = max(m, s) in FP32 (m = -inf for a row with no key: fp32_frame's frame is 0
    // there), a = e^{m - top} (0 for a row with no key) and c = e^{s - top} in FP32, rounded to T; l = T(T(a l) + c),
    // O = T(a O); fa = top. A row with no key gets l = 1, O = 0: out 0, lse = s exactly.
    __aicore__ inline void JoinSink(const Task& k) {
        const int32_t rv = (int32_t)ROW_VEC;
        LoadMax();
        softmax_.LoadLseTerms();
        PipeBarrier<PIPE_V>();
        softmax_.ScaleLseTerms();
        PipeBarrier<PIPE_V>();
        softmax_.AddLseTerms();
        LoadSinks(k);
        Select(v_.fa, v_.bits, v_.fa, NegInf<float>(), SELMODE::VSEL_TENSOR_SCALAR_MODE, ROW_VEC);
        PipeBarrier<PIPE_V>();
        Max(v_.fc, v_.fa, v_.fd, rv);
        PipeBarrier<PIPE_V>();
        Sub(v_.fa, v_.fa, v_.fc, rv);
        Sub(v_.fd, v_.fd, v_.fc, rv);
        PipeBarrier<PIPE_V>();
        Select(v_.fa, v_.bits, v_.fa, 0.0f, SELMODE::VSEL_TENSOR_SCALAR_MODE, ROW_VEC);  // no -inf - (-inf)
        PipeBarrier<PIPE_V>();
        Exp(v_.fa, v_.fa, rv);
        Exp(v_.fd, v_.fd, rv);
        PipeBarrier<PIPE_V>();
        Select(v_.fa, v_.bits, v_.fa, 0.0f, SELMODE::VSEL_TENSOR_SCALAR_MODE, ROW_VEC);
        PipeBarrier<PIPE_V>();
        if constexpr (sizeof(T) == 2) {
            Cast(v_.tmp1.template ReinterpretCast<half>(), v_.fa, RoundMode::CAST_RINT, ROW_VEC);
            Cast(v_.tmp2.template ReinterpretCast<half>(), v_.fd, RoundMode::CAST_RINT, ROW_VEC);
        } else {
            Muls(v_.tmp1.template ReinterpretCast<float>(), v_.fa, 1.0f, rv);
            Muls(v_.tmp2.template ReinterpretCast<float>(), v_.fd, 1.0f, rv);
        }
        PipeBarrier<PIPE_V>();
        Mul(v_.mBlk, v_.tmp1, v_.l, rv);
        PipeBarrier<PIPE_V>();
        Add(v_.l, v_.mBlk, v_.tmp2, rv);
        v_.Broadcast(v_.tmp1);
        v_.RowBroadcast(RowOp::MUL, v_.oAcc, v_.oAcc, v_.bc, v_.rows, v_.d);
        Muls(v_.fa, v_.fc, 1.0f, rv);
        CompareScalar(v_.bits, v_.l, (T)0, CMPMODE::NE, ROW_VEC);  // the golden model's l == 0 after the join
        PipeBarrier<PIPE_V>();
    }

    // fa = the running maximum m in FP32.
    __aicore__ inline void LoadMax() {
        if constexpr (sizeof(T) == 2) Cast(v_.fa, v_.m, RoundMode::CAST_NONE, ROW_VEC);
        else Muls(v_.fa, v_.m.template ReinterpretCast<float>(), 1.0f, (int32_t)ROW_VEC);
    }

    // fd = the sinks of this AIV's rows: their head's, or, where the rows are a GQA group's heads (packed), one each.
    __aicore__ inline void LoadSinks(const Task& k) {
        if (k.positionStep == 1) {
            Duplicate(v_.fd, sinkGm_.GetValue(k.n), (int32_t)ROW_VEC);
        } else {
            LocalTensor<float> s = v_.pvQue.template AllocTensor<float>();
            DataCopyPad(s, sinkGm_[k.n + v_.r0], DataCopyExtParams(1, v_.rows * 4, 0, 0, 0),
                        DataCopyPadExtParams<float>(false, 0, 0, 0.0f));
            v_.pvQue.EnQue(s);
            s = v_.pvQue.template DeQue<float>();
            Muls(v_.fd, s, 1.0f, (int32_t)v_.rows);
            v_.pvQue.FreeTensor(s);
        }
        PipeBarrier<PIPE_V>();
    }

    // A valid row whose state did not stay finite (the epilogue's FiniteRows): flags in fd, their sum over the
    // valid rows, one scalar read.
    __aicore__ inline void CheckOverflow() {
        if (v_.valid == 0) return;
        softmax_.FiniteRows();
        Duplicate(v_.fd, 0.0f, (int32_t)ROW_VEC);
        PipeBarrier<PIPE_V>();
        Select(v_.fd, v_.bits, v_.fd, 1.0f, SELMODE::VSEL_TENSOR_SCALAR_MODE, ROW_VEC);
        PipeBarrier<PIPE_V>();
        if (v_.CountValidRows(v_.fd, v_.fc) > 0) overflow_ = true;
    }

    __aicore__ inline void WriteFinal(const Task& k) {
        const uint32_t rows = v_.rows, valid = v_.valid;
        for (uint32_t c0 = 0; c0 < rows; c0 += v_.tileRows) WriteRows(k, c0, MinU(v_.tileRows, rows - c0));
        if (k.lseStride != 1) {
            WriteStridedLse(k, valid, rows);
            return;
        }
        LocalTensor<float> lt = v_.lseQue.template AllocTensor<float>();
        Muls(lt, v_.fa, 1.0f, (int32_t)ROW_VEC);
        Duplicate(lt[ROW_VEC], PosInf<float>(), (int32_t)ROW_VEC);  // FIA's lse of a padded query row
        v_.lseQue.EnQue(lt);
        lt = v_.lseQue.template DeQue<float>();
        const uint64_t base = k.lseFirst + v_.r0;
        if (valid > 0) DataCopyPad(lseGm_[base], lt, DataCopyExtParams(1, valid * 4, 0, 0, 0));
        if (valid < rows)
            DataCopyPad(lseGm_[base + valid], lt[ROW_VEC], DataCopyExtParams(1, (rows - valid) * 4, 0, 0, 0));
        v_.lseQue.FreeTensor(lt);
    }

    // Rows [c0, c0 + n) of this AIV's O in FP16 (padded query rows 0) through outQue, which holds a row tile of
    // them, to attention_out, the layout's row stride apart.
    __aicore__ inline void WriteRows(const Task& k, uint32_t c0, uint32_t n) {
        const uint32_t d = v_.d, valid = v_.valid > c0 ? MinU(v_.valid - c0, n) : 0;
        LocalTensor<half> o = v_.outQue.template AllocTensor<half>();
        if constexpr (sizeof(T) == 2) Muls(o.template ReinterpretCast<T>(), v_.oAcc[c0 * d], (T)1, (int32_t)(n * d));
        else Cast(o, v_.oAcc[c0 * d], RoundMode::CAST_RINT, n * d);
        PipeBarrier<PIPE_V>();
        if (valid < n) Duplicate(o[valid * d], (half)0, (int32_t)((n - valid) * d));  // padded rows
        v_.outQue.EnQue(o);
        o = v_.outQue.template DeQue<half>();
        DataCopyParams cp((uint16_t)n, (uint16_t)(d * 2 / 32), 0, (uint16_t)((k.qRowStride - d) * 2 / 32));
        DataCopy(outGm_[v_.FirstRowOffset(k) + (uint64_t)c0 * k.qRowStride], o, cp);
        v_.outQue.FreeTensor(o);
    }

    // TND: the tile's rows are N entries apart in softmax_lse (pasa_tiling_data.h). Each value goes to a 32-byte
    // block of its own (Brcb; the output buffer holds rows blocks, pasa_buffer_plan.h), one burst of 4 bytes per
    // block: the valid rows' lse (fa), then the padded rows' +inf.
    __aicore__ inline void WriteStridedLse(const Task& k, uint32_t valid, uint32_t rows) {
        const uint64_t first = k.lseFirst + (uint64_t)v_.r0 * k.lseStride;
        Duplicate(v_.fb, PosInf<float>(), (int32_t)ROW_VEC);  // FIA's lse of a padded query row
        PipeBarrier<PIPE_V>();
        const LocalTensor<float> src[2] = {v_.fa, v_.fb};
        const uint32_t begin[2] = {0, valid}, count[2] = {valid, rows - valid};
        for (uint32_t part = 0; part < 2; ++part) {
            if (count[part] == 0) continue;
            LocalTensor<float> spread = v_.outQue.template AllocTensor<float>();
            Brcb(spread, src[part], (uint8_t)((count[part] + 7) / 8), BrcbRepeatParams(1, 8));
            v_.outQue.EnQue(spread);
            spread = v_.outQue.template DeQue<float>();
            DataCopyPad(lseGm_[first + (uint64_t)begin[part] * k.lseStride], spread,
                        DataCopyExtParams(count[part], 4, 0, (k.lseStride - 1) * 4, 0));
            v_.outQue.FreeTensor(spread);
        }
    }

    // Split-KV: this split's normalised O (FP32) and its lse, per row, for the combine. Splits exist
    // only for decode (S1 = 1, not TND), so the rows are one head's query, or the packed heads of a GQA group.
    __aicore__ inline void WritePartial(const Task& k) {
        const uint32_t rows = v_.rows, d = v_.d;
        for (uint32_t i = 0; i < rows; ++i) {
            LocalTensor<float> o = v_.outQue.template AllocTensor<float>();
            if constexpr (sizeof(T) == 2) Cast(o, v_.oAcc[i * d], RoundMode::CAST_NONE, d);
            else Muls(o, v_.oAcc[i * d].template ReinterpretCast<float>(), 1.0f, (int32_t)d);
            v_.outQue.EnQue(o);
            o = v_.outQue.template DeQue<float>();
            const uint64_t g = k.lseFirst + v_.r0 + i;
            DataCopy(partOGm_[(g * t_->kvSplits + k.split) * d], o, d);
            v_.outQue.FreeTensor(o);
        }
        // The rows' lse entries lie kvSplits floats apart: each value goes to a 32-byte block of its own
        // (Brcb; the output buffer holds rows blocks, pasa_buffer_plan.h), one burst of 4 bytes per block.
        LocalTensor<float> spread = v_.outQue.template AllocTensor<float>();
        Brcb(spread, v_.fa, (uint8_t)((rows + 7) / 8), BrcbRepeatParams(1, 8));
        v_.outQue.EnQue(spread);
        spread = v_.outQue.template DeQue<float>();
        const uint64_t g = k.lseFirst + v_.r0;
        DataCopyPad(partLseGm_[g * t_->kvSplits + k.split], spread,
                    DataCopyExtParams(rows, 4, 0, (t_->kvSplits - 1) * 4, 0));
        v_.outQue.FreeTensor(spread);
    }

    const PasaTilingData* t_;
    AivRows<T> v_;
    Softmax softmax_;
    bool overflow_ = false;
    GlobalTensor<half> outGm_;
    GlobalTensor<float> lseGm_, partOGm_, partLseGm_, sinkGm_;
    GlobalTensor<uint32_t> statusGm_;
};

}  // namespace pasa_kernel

#endif  // PASA_VECTOR_STAGE_H
