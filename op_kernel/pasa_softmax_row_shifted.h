// The AIVs' softmax epilogue of row-shifted PASA ("pasa_rs", RowShiftedFamily in pasa_allocation.h;
// blockwise._query_block_rs), T = float. Per task: Q^ = FP16(Q 2^e) to the cube, C_j and lv_j of every block from
// it. Per block: psi_j = shift(lv_j + E_j) with E_j the largest excess of the blocks <= j - 2 (and of block 1's
// first pass, which uses psi = shift(lv_1)), the passes the AIVs request from the AIC (pasa_row_shift_cube.h): a
// row whose FP16 S' max is +inf, or lost below FP16's range, takes the FP32 recompute; a row whose max lies more
// than RESHIFT_AT (the tiling's rsReshiftAt) from 0 in a block that matters (RESHIFT_RELEVANCE) takes a second
// FP16 pass with psi moved by its max; then the local softmax P = exp(rho (S' - m')), l' and the merge through delta_j = (C_j - C_1) +
// (psi_j - psi_1), all FP32; the stage updates O = alpha O + gamma P V. lse = rho (m + C_1 + psi_1) + ln l. No
// overflow: rows whose S' leaves FP16's range are recomputed in FP32.
//
// The conversation with the AIC is described in pasa_row_shift_cube.h. Per block parity s = j % 2 this AIV keeps
// C_j, lv_j and psi_j (cj_[s], lv_[s], psi_[s]): block j + 1's are set while block j is open.
#ifndef PASA_SOFTMAX_ROW_SHIFTED_H
#define PASA_SOFTMAX_ROW_SHIFTED_H

#include "pasa_components.h"
#include "pasa_vector_rows.h"

namespace pasa_kernel {

template <class Policy>
class RowShiftedSoftmax : public SoftmaxBase {
public:
    static constexpr bool WEIGHTS_PV = true;
    static constexpr bool CHECKS_OVERFLOW = true;

    // Its FP32_ROW_VECTORS (13): C_j, lv_j, psi_j for two blocks, C_1, psi_1, E, the redo and reshift flags, the
    // block max in block 1's frame, the moved psi.
    __aicore__ inline void Init(AivRows<float>* rows, const PasaTilingData* t, GM_ADDR query, GM_ADDR workspace,
                                uint32_t core) {
        v_ = rows;
        t_ = t;
        LocalTensor<float>* vecs[Policy::FP32_ROW_VECTORS] = {&cj_[0], &cj_[1], &lv_[0], &lv_[1], &psi_[0], &psi_[1],
                                                             &c1_,    &psi1_,  &eRun_,  &redo_,  &far_,    &frame_,
                                                             &moved_};
        for (uint32_t i = 0; i < Policy::FP32_ROW_VECTORS; ++i) *vecs[i] = rows->epilogueFp32[i * ROW_VEC];
        qGm_.SetGlobalBuffer((__gm__ half*)query);
        rsSlots_.Init(*t, workspace, core);
    }

    // Q^ of the task's tile to the AIC (through O's buffer, which the stage zeroes next).
    __aicore__ inline void BeginTask(const Task& k) {
        if (k.nBlocks > 0) WriteQhat(k);
    }

    // Block j of the task: its rounds (which close it), then P_j to the AIC once the AIC has closed them:
    // P_j's slot holds both AIVs' rows, and a pass the other AIV still asked for must not find P_j V_j run.
    __aicore__ inline void Block(const Task& k, uint32_t j) {
        if (j == 0) RowShiftLearn(k);
        Rounds(k, j, REQUEST_FP16, true, j + 1 < k.nBlocks, true);
        CrossCoreSetFlag<0x2, PIPE_MTE3>(FLAG_P_READY);
    }

    // lse = rho (m + C_1 + psi_1) + ln l: m is in block 1's frame, in units of Q^ K.
    __aicore__ inline void ScaleLseTerms() {
        AivRows<float>& v = *v_;
        const int32_t rv = (int32_t)ROW_VEC;
        Add(v.fa, v.fa, c1_, rv);
        PipeBarrier<PIPE_V>();
        Add(v.fa, v.fa, psi1_, rv);
        PipeBarrier<PIPE_V>();
        Muls(v.fa, v.fa, t_->rsRho, rv);
    }

    __aicore__ inline void FiniteRows() { v_->FiniteRunningMax(); }

    // Word 1: the (valid row, KV block) pairs reshifted, word 2: those recomputed in FP32 (block 1's learning
    // pass not counted: the golden model's reshifted_row_blocks and recomputed_row_blocks).
    __aicore__ inline void WriteStatusWords(LocalTensor<uint32_t>& s) {
        s.SetValue(1, reshiftedRows_);
        s.SetValue(2, recomputedRows_);
    }

private:
    // Q^ = FP16(Q 2^e) of this AIV's rows into the core's slot (Q 2^e is exact in FP32; one rounding to FP16,
    // which only a subnormal Q^ feels), through O's FP32 buffer, which the task zeroes afterwards.
    __aicore__ inline void WriteQhat(const Task& k) {
        AivRows<float>& v = *v_;
        if (v.rows > 0) {
            const int32_t cnt = (int32_t)(v.rows * v.d);
            LocalTensor<half> q = v.pvQue.template AllocTensor<half>();
            DataCopy(q, qGm_[v.FirstRowOffset(k)],
                     DataCopyParams((uint16_t)v.rows, (uint16_t)(v.d * 2 / 32), (uint16_t)((k.qRowStride - v.d) * 2 / 32), 0));
            v.pvQue.EnQue(q);
            q = v.pvQue.template DeQue<half>();
            Cast(v.oAcc, q, RoundMode::CAST_NONE, cnt);
            PipeBarrier<PIPE_V>();
            v.pvQue.FreeTensor(q);
            Muls(v.oAcc, v.oAcc, t_->rsScalePow2, cnt);
            PipeBarrier<PIPE_V>();
            LocalTensor<half> qh = v.outQue.template AllocTensor<half>();
            Cast(qh, v.oAcc, RoundMode::CAST_RINT, cnt);
            PipeBarrier<PIPE_V>();  // before the task zeroes O's buffer
            v.outQue.EnQue(qh);
            qh = v.outQue.template DeQue<half>();
            DataCopy(rsSlots_.qhat[v.r0 * v.d], qh, cnt);
            v.outQue.FreeTensor(qh);
        }
        CrossCoreSetFlag<0x2, PIPE_MTE3>(FLAG_QHAT_READY);
    }

    // C_j and lv_j = Q^ K^_j - C_j of this AIV's rows (rows 2j and 2j + 1 of the centre products) into
    // cj_[j % 2], lv_[j % 2].
    __aicore__ inline void LoadCentreProducts(const Task& k, uint32_t j) {
        AivRows<float>& v = *v_;
        const uint32_t mp = Align16(k.tileRows), s = j % 2;
        const uint32_t second = (v.rows + 7) / 8 * 8;  // DataCopyPad starts each row on a 32-byte block
        LocalTensor<float> c = v.maskQue.template AllocTensor<float>();
        DataCopyPad(c, rsSlots_.centreProd[(uint64_t)2 * j * mp + v.r0],
                    DataCopyExtParams(2, v.rows * 4, (mp - v.rows) * 4, 0, 0), DataCopyPadExtParams<float>(false, 0, 0, 0.0f));
        v.maskQue.EnQue(c);
        c = v.maskQue.template DeQue<float>();
        Muls(cj_[s], c, 1.0f, (int32_t)second);
        Sub(lv_[s], c[second], c, (int32_t)second);
        PipeBarrier<PIPE_V>();
        v.maskQue.FreeTensor(c);
    }

    // dst = psi(x) = 64 FP16(x / 64), x / 64 saturated at +-65504 (an FP16 number times 64, exact in FP32).
    __aicore__ inline void ShiftOf(const LocalTensor<float>& dst, const LocalTensor<float>& x) {
        AivRows<float>& v = *v_;
        const int32_t rv = (int32_t)ROW_VEC;
        LocalTensor<half> h = v.fb.template ReinterpretCast<half>();
        Muls(v.fa, x, 1.0f / 64, rv);
        PipeBarrier<PIPE_V>();
        Mins(v.fa, v.fa, 65504.0f, rv);
        PipeBarrier<PIPE_V>();
        Maxs(v.fa, v.fa, -65504.0f, rv);
        PipeBarrier<PIPE_V>();
        Cast(h, v.fa, RoundMode::CAST_RINT, ROW_VEC);
        PipeBarrier<PIPE_V>();
        Cast(dst, h, RoundMode::CAST_NONE, ROW_VEC);
        PipeBarrier<PIPE_V>();
        Muls(dst, dst, 64.0f, rv);
        PipeBarrier<PIPE_V>();
    }

    // psi_j = shift(lv_j + E), E = eRun_ taken as 0 on a row with no kept key yet (E = -inf).
    __aicore__ inline void BlockShift(uint32_t j) {
        AivRows<float>& v = *v_;
        const uint32_t s = j % 2;
        CompareScalar(v.bits, eRun_, NegInf<float>(), CMPMODE::NE, ROW_VEC);
        PipeBarrier<PIPE_V>();
        Select(v.tmp1, v.bits, eRun_, 0.0f, SELMODE::VSEL_TENSOR_SCALAR_MODE, ROW_VEC);
        PipeBarrier<PIPE_V>();
        Add(v.tmp1, lv_[s], v.tmp1, (int32_t)ROW_VEC);
        PipeBarrier<PIPE_V>();
        ShiftOf(psi_[s], v.tmp1);
    }

    // This AIV's rows of block j's shift column, -psi_j / 64 (exact in FP16), into slot j % 2.
    __aicore__ inline void WriteShiftColumn(uint32_t j) {
        AivRows<float>& v = *v_;
        if (v.rows == 0) return;
        LocalTensor<half> h = v.fb.template ReinterpretCast<half>();
        Muls(v.fa, psi_[j % 2], -1.0f / 64, (int32_t)ROW_VEC);
        PipeBarrier<PIPE_V>();
        Cast(h, v.fa, RoundMode::CAST_RINT, ROW_VEC);
        PipeBarrier<PIPE_V>();
        LocalTensor<half> col = v.pQue.template AllocTensor<half>();
        Brcb(col, h, (uint8_t)((v.rows + 7) / 8), BrcbRepeatParams(1, 8));  // one 16-lane block per row
        v.pQue.EnQue(col);
        col = v.pQue.template DeQue<half>();
        DataCopy(rsSlots_.shiftCol[((j % 2) * t_->blockQ + v.r0) * FRACTAL], col, v.rows * FRACTAL);
        v.pQue.FreeTensor(col);
    }

    // This AIV's request word for the current round (its shift column written before, where it changed).
    __aicore__ inline void SendRequest(uint32_t request) {
        AivRows<float>& v = *v_;
        LocalTensor<uint32_t> w = v.lseQue.template AllocTensor<uint32_t>();
        Duplicate(w, request, 8);
        v.lseQue.EnQue(w);
        w = v.lseQue.template DeQue<uint32_t>();
        DataCopy(rsSlots_.request[RequestWordIndex(round_ % 2, v.sub)], w, 8);
        v.lseQue.FreeTensor(w);
        CrossCoreSetFlag<0x2, PIPE_MTE3>(FLAG_REQUEST);
    }

    // After the answer to a round: what the AIC served, the larger of the two AIVs' requests (both words
    // are in GM: the AIC answered only after both were written).
    __aicore__ inline uint32_t ServedRequest() {
        AivRows<float>& v = *v_;
        LocalTensor<uint32_t> w = v.maskQue.template AllocTensor<uint32_t>();
        DataCopy(w, rsSlots_.request[RequestWordIndex(round_ % 2, 0)], RequestWordIndex(0, 1) + 8);
        v.maskQue.EnQue(w);
        w = v.maskQue.template DeQue<uint32_t>();
        SyncPipes<HardEvent::MTE2_S>();
        const uint32_t a = w.GetValue(0), b = w.GetValue(RequestWordIndex(0, 1));
        v.maskQue.FreeTensor(w);
        ++round_;
        return a > b ? a : b;
    }

    // S' of an FP16 pass of block j into sT (FP32), masked, its row max mBlk and the rows that must be
    // recomputed (redo_): max +inf (a score more than 65504 above psi), or every kept score below FP16's range.
    // To tell the latter from a row with no kept key, -inf scores become the lowest finite value before the
    // masks: the row max is then that value, not -inf (such a score still weighs exp(-huge) = 0).
    __aicore__ inline void LoadScores16(const Task& k, uint32_t j, uint32_t c0, uint32_t keys) {
        AivRows<float>& v = *v_;
        const int32_t cnt = (int32_t)(v.rows * BLOCK_KV), rv = (int32_t)ROW_VEC;
        LocalTensor<half> raw;
        v.LoadScores(j, raw);  // into sT
        v.sQue.FreeTensor(raw);
        Maxs(v.sT, v.sT, Lowest<float>(), cnt);
        PipeBarrier<PIPE_V>();
        v.ApplyMasks(k, v.sT, c0, keys);
        v.RowMax(v.mBlk, v.sT);
        Duplicate(redo_, 0.0f, rv);
        CompareScalar(v.bits, v.mBlk, PosInf<float>(), CMPMODE::NE, ROW_VEC);
        PipeBarrier<PIPE_V>();
        Select(redo_, v.bits, redo_, 1.0f, SELMODE::VSEL_TENSOR_SCALAR_MODE, ROW_VEC);
        PipeBarrier<PIPE_V>();
        CompareScalar(v.bits, v.mBlk, Lowest<float>(), CMPMODE::NE, ROW_VEC);
        PipeBarrier<PIPE_V>();
        Select(redo_, v.bits, redo_, 1.0f, SELMODE::VSEL_TENSOR_SCALAR_MODE, ROW_VEC);
        Select(v.mBlk, v.bits, v.mBlk, NegInf<float>(), SELMODE::VSEL_TENSOR_SCALAR_MODE, ROW_VEC);
        PipeBarrier<PIPE_V>();
    }

    // The FP32 pass: the rows in redo_ take their S' from it (the others keep the FP16 pass's), masked.
    __aicore__ inline void MergeRecomputed(const Task& k, uint32_t c0, uint32_t keys) {
        AivRows<float>& v = *v_;
        SyncPipes<HardEvent::V_S>();
        for (uint32_t i = 0; i < v.rows; ++i) {
            if (redo_.GetValue(i) == 0.0f) continue;
            LocalTensor<float> row = v.sQue.template AllocTensor<float>();
            DataCopy(row, rsSlots_.score32[(uint64_t)(v.r0 + i) * BLOCK_KV], BLOCK_KV);
            v.sQue.EnQue(row);
            row = v.sQue.template DeQue<float>();
            Muls(v.sT[i * BLOCK_KV], row, 1.0f, (int32_t)BLOCK_KV);
            PipeBarrier<PIPE_V>();
            v.sQue.FreeTensor(row);
        }
        v.ApplyMasks(k, v.sT, c0, keys);
        v.RowMax(v.mBlk, v.sT);
    }

    // frame_ = mBlk + ((C_j - C_1) + (psi_j - psi_1)): block j's max in block 1's frame.
    __aicore__ inline void BlockMaxInFrame(uint32_t j) {
        AivRows<float>& v = *v_;
        const int32_t rv = (int32_t)ROW_VEC;
        Sub(v.tmp1, cj_[j % 2], c1_, rv);
        Sub(v.tmp2, psi_[j % 2], psi1_, rv);
        PipeBarrier<PIPE_V>();
        Add(v.tmp1, v.tmp1, v.tmp2, rv);
        PipeBarrier<PIPE_V>();
        Add(frame_, v.mBlk, v.tmp1, rv);
        PipeBarrier<PIPE_V>();
    }

    // The reshift after block j's first FP16 pass: far_ = rows whose block max lies more than rsReshiftAt
    // from 0, that were not recomputed, whose moved psi differs from psi (beyond |psi| ~ 2^12 rsReshiftAt a
    // step of psi exceeds 2 rsReshiftAt), in a block that can matter (its max above the running max less the
    // relevance).
    // Those rows take the moved psi; returns whether a valid row did.
    __aicore__ inline bool Reshift(uint32_t j) {
        AivRows<float>& v = *v_;
        const int32_t rv = (int32_t)ROW_VEC;
        const LocalTensor<float>& psi = psi_[j % 2];
        BlockMaxInFrame(j);
        Adds(v.tmp1, v.m, -t_->rsRelevance, rv);
        Duplicate(far_, 1.0f, rv);
        PipeBarrier<PIPE_V>();
        Compare(v.bits, frame_, v.tmp1, CMPMODE::GT, ROW_VEC);
        PipeBarrier<PIPE_V>();
        Select(far_, v.bits, far_, 0.0f, SELMODE::VSEL_TENSOR_SCALAR_MODE, ROW_VEC);
        Abs(v.tmp2, v.mBlk, rv);
        PipeBarrier<PIPE_V>();
        CompareScalar(v.bits, v.tmp2, t_->rsReshiftAt, CMPMODE::GT, ROW_VEC);
        PipeBarrier<PIPE_V>();
        Select(far_, v.bits, far_, 0.0f, SELMODE::VSEL_TENSOR_SCALAR_MODE, ROW_VEC);
        PipeBarrier<PIPE_V>();
        CompareScalar(v.bits, redo_, 0.0f, CMPMODE::EQ, ROW_VEC);
        PipeBarrier<PIPE_V>();
        Select(far_, v.bits, far_, 0.0f, SELMODE::VSEL_TENSOR_SCALAR_MODE, ROW_VEC);
        Add(v.tmp2, psi, v.mBlk, rv);
        PipeBarrier<PIPE_V>();
        ShiftOf(moved_, v.tmp2);
        Compare(v.bits, moved_, psi, CMPMODE::NE, ROW_VEC);
        PipeBarrier<PIPE_V>();
        Select(far_, v.bits, far_, 0.0f, SELMODE::VSEL_TENSOR_SCALAR_MODE, ROW_VEC);
        PipeBarrier<PIPE_V>();
        if (v.CountValidRows(far_, v.fa) == 0) return false;
        CompareScalar(v.bits, far_, 0.0f, CMPMODE::NE, ROW_VEC);
        PipeBarrier<PIPE_V>();
        Select(psi, v.bits, moved_, psi, SELMODE::VSEL_TENSOR_TENSOR_MODE, ROW_VEC);
        PipeBarrier<PIPE_V>();
        return true;
    }

    // Block j's rounds from a served pass on, until the AIC closes them. After the first FP16 pass (if
    // mayReshift) this AIV asks for a reshift where Reshift() moved a row, else for the FP32 pass where a row
    // needs it, else accepts: its rows' S' are then final (sT: FP16 values, FP32 for recomputed rows; mBlk
    // their row max; psi_[j % 2] the shift), whatever the other AIV still asks for (rows are independent: this
    // AIV does not read those passes, whose rows of it may already use block j + 2's shift column), so
    // `close` (the block's own work, Close()) runs before the accepting word goes out, off the AIC's path. The
    // learning conversation closes nothing: it leaves S' and mBlk for its caller. nextFirstPass: the AIC runs block j + 1's first pass before it
    // serves this block's first round; its FLAG_S_READY comes first.
    __aicore__ inline void Rounds(const Task& k, uint32_t j, uint32_t served, bool mayReshift, bool nextFirstPass,
                                  bool close) {
        AivRows<float>& v = *v_;
        const uint32_t c0 = (k.kvBlock0 + j) * BLOCK_KV;
        const uint32_t keys = MinU(BLOCK_KV, k.seqKv - c0);
        bool reshiftDecided = !mayReshift, reshifted = false, closed = v.rows == 0;
        while (served != REQUEST_ACCEPT) {
            uint32_t request = REQUEST_ACCEPT;
            if (closed) {
                // final rows: a pass the other AIV asked for is not read
            } else if (served == REQUEST_FP16) {
                LoadScores16(k, j, c0, keys);
                if (!reshiftDecided) {
                    reshiftDecided = true;
                    reshifted = Reshift(j);
                    if (reshifted) {
                        request = REQUEST_FP16;
                        WriteShiftColumn(j);
                    }
                }
                if (request == REQUEST_ACCEPT && v.CountValidRows(redo_, v.fa) > 0) request = REQUEST_FP32;
            } else {
                MergeRecomputed(k, c0, keys);
            }
            if (request == REQUEST_ACCEPT && !closed && close) {
                Close(k, j, reshifted);
                closed = true;
            }
            SendRequest(request);
            if (nextFirstPass) {
                CrossCoreWaitFlag(FLAG_S_READY);  // block j + 1's first pass is in its score slot
                nextFirstPass = false;
            }
            CrossCoreWaitFlag(FLAG_S_READY);
            served = ServedRequest();
        }
    }

    // dst = excess of block j: (m' + psi_j) - lv_j, its row max above its mean (-inf where every key is masked).
    __aicore__ inline void Excess(const LocalTensor<float>& dst, uint32_t j) {
        AivRows<float>& v = *v_;
        Add(dst, v.mBlk, psi_[j % 2], (int32_t)ROW_VEC);
        PipeBarrier<PIPE_V>();
        Sub(dst, dst, lv_[j % 2], (int32_t)ROW_VEC);
        PipeBarrier<PIPE_V>();
    }

    // Before block 1: its learning conversation (psi = shift(lv_1), without a reshift) gives E's start, the
    // excess of block 1 over its mean; then one round for the first passes of blocks 1 and 2.
    __aicore__ inline void RowShiftLearn(const Task& k) {
        AivRows<float>& v = *v_;
        const int32_t rv = (int32_t)ROW_VEC;
        CrossCoreWaitFlag(FLAG_CENTRE_PROD_READY);  // C_j and Q^ K^_j of the task's blocks
        if (v.rows > 0) {
            LoadCentreProducts(k, 0);
            Muls(c1_, cj_[0], 1.0f, rv);
            ShiftOf(psi_[0], lv_[0]);
            WriteShiftColumn(0);
        }
        SendRequest(v.rows > 0 ? REQUEST_FP16 : REQUEST_ACCEPT);
        CrossCoreWaitFlag(FLAG_S_READY);
        Rounds(k, 0, ServedRequest(), false, false, false);
        if (v.rows > 0) {
            Excess(eRun_, 0);
            BlockShift(0);
            Muls(psi1_, psi_[0], 1.0f, rv);  // block 1's frame: its psi before any reshift
            WriteShiftColumn(0);
            if (k.nBlocks > 1) {
                LoadCentreProducts(k, 1);
                BlockShift(1);
                WriteShiftColumn(1);
            }
        }
        SendRequest(v.rows > 0 ? REQUEST_FP16 : REQUEST_ACCEPT);
        CrossCoreWaitFlag(FLAG_S_READY);  // block 1's first pass: a round answered without reading the words
        ++round_;
    }

    // Block j's own work once its S' is final: its counters, excess, E for block j + 2 and that block's
    // shift column, the local softmax and the merge (blockwise._query_block_rs), P_j into its slot.
    __aicore__ inline void Close(const Task& k, uint32_t j, bool reshifted) {
        AivRows<float>& v = *v_;
        const int32_t rv = (int32_t)ROW_VEC;
        recomputedRows_ += v.CountValidRows(redo_, v.fa);
        if (reshifted) reshiftedRows_ += v.CountValidRows(far_, v.fa);
        BlockMaxInFrame(j);
        // E for block j + 2 takes block j's excess (the lag of two blocks); block j's parity slot passes to
        // block j + 2, whose shift column the AIC reads for its first pass after P_j V_j.
        Excess(v.tmp1, j);
        Max(eRun_, eRun_, v.tmp1, rv);
        PipeBarrier<PIPE_V>();
        if (j + 2 < k.nBlocks) {
            LoadCentreProducts(k, j + 2);
            BlockShift(j + 2);
            WriteShiftColumn(j + 2);
        }
        // Local softmax in FP32: P = exp(rho (S' - m')), l' its pairwise row sum; P enters P V in FP16.
        Maxs(v.tmp1, v.mBlk, Lowest<float>(), rv);
        v.ExpRowsScaled(v.sT, true, t_->rsRho);
        // Merge in block 1's frame: α = exp(rho (m - m_new)), γ = exp(rho (m~ - m_new)), guarded; l = α l + γ l'.
        Max(v.mNew, v.m, frame_, rv);
        PipeBarrier<PIPE_V>();
        Sub(v.tmp1, v.m, v.mNew, rv);
        Sub(v.tmp2, frame_, v.mNew, rv);
        PipeBarrier<PIPE_V>();
        Muls(v.tmp1, v.tmp1, t_->rsRho, rv);
        Muls(v.tmp2, v.tmp2, t_->rsRho, rv);
        PipeBarrier<PIPE_V>();
        v.MergeRowSums(v.Slot(j));
        v.CommitBlock(j);
    }

    AivRows<float>* v_;
    const PasaTilingData* t_;
    uint32_t round_ = 0;  // request rounds so far: the parity of the request words (pasa_row_shift_cube.h)
    uint32_t reshiftedRows_ = 0, recomputedRows_ = 0;  // the status words 1 and 2
    LocalTensor<float> cj_[2], lv_[2], psi_[2], c1_, psi1_, eRun_, redo_, far_, frame_, moved_;
    GlobalTensor<half> qGm_;
    RowShiftSlots rsSlots_;
};

}  // namespace pasa_kernel

#endif  // PASA_SOFTMAX_ROW_SHIFTED_H
