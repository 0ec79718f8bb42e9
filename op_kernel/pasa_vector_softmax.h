// The AIV program: the online softmax on the S' (S) rows of this vector core, the O update with the PV
// product, the final normalisation O/l and the true-scale lse, in exactly the order and the roundings
// of python/pasa_npu/blockwise.py, for the allocation policy of pasa_allocation.h (T = its
// ElementAccumulator: the type of the softmax, of m, l, F, I, O and of PV):
//   "pasa"      (shifted, T = half):  every vector op rounds to FP16
//   "pasa_fp32" (shifted, T = float): S' and P (into P V) FP16, the rest FP32
//   "fp16_fp32" (FlashAttention, T = float): S and P FP16, the rest FP32
// Rows are independent; the AIV with sub-block index 0 takes the first ceil(rows/2) rows of the
// query block, the other the rest.
// PASA (Algorithm 1, steps 3-6), per block: S' in, mean over all n columns (before any mask), masks
// (user mask, padded tail columns, causal/band from indices), row max, Welford update of F, corrections
// Δ'prev = I(F_{j-1} - F_j), Δ'cur = I(S̄'_j - F_j), m/l update with the guarded -inf start,
// P = exp(S' - m') out to the cube; then O = α O + γ (P V) when the cube's PV arrives.
// FlashAttention-2 (eqs. 4-7), per block: S in, S·scale, masks, row max, m_j = max(m_{j-1}, m'),
// P = exp(S - m_j) out to the cube, α = exp(m_{j-1} - m_j) (guarded), l_j = α l_{j-1} + rowsum P;
// then O = α O + P V.
// Row-shifted PASA ("pasa_rs", T = float; blockwise._query_block_rs), per task: Q^ = FP16(Q 2^e) to the
// cube, C_j and lv_j of every block from it; per block: psi_j = shift(lv_j + E_j) with E_j the largest excess
// of the blocks <= j - 2 (and of block 1's first pass, which uses psi = shift(lv_1)), the passes the AIVs
// request from the AIC (pasa_row_shift_cube.h): a row whose FP16 S' max is +inf, or lost below FP16's range,
// takes the FP32 recompute; a row whose max lies more than RESHIFT_AT from 0 in a block that matters
// (RESHIFT_RELEVANCE) takes a second FP16 pass with psi moved by its max; then the local softmax
// P = exp(rho (S' - m')), l' and the merge through delta_j = (C_j - C_1) + (psi_j - psi_1), all FP32, and
// lse = rho (m + C_1 + psi_1) + ln l.
//
// Overflow (an Inf in S', the paper's "adaptive mechanism" case): the documented alternative to a
// recompute path. The values follow the golden model (Inf/NaN propagate as the hardware's would), and
// every AIV writes a status word (bit 0: some valid row saw an Inf in S') at wsStatusOffset + 32*aiv,
// which the binding reads to fall back to a wider path. Detection costs nothing per block: a row's
// running pseudo-average F stays finite iff every block mean S̄' of that row was finite, and S̄' is
// finite iff no S' of the row is ±Inf (|S'/n| <= 65504/n, so the sum itself cannot overflow).
// FlashAttention has no F: there a row's running maximum m turns +Inf (then NaN) iff some S of the row
// overflowed upward; an S that overflowed downward weighs 0, as a masked key does (and as in the golden
// model), and is not reported. pasa_rs recomputes such rows in FP32 and never overflows.
#ifndef PASA_VECTOR_SOFTMAX_H
#define PASA_VECTOR_SOFTMAX_H

#include "pasa_allocation.h"
#include "pasa_common.h"

namespace pasa_kernel {

enum class RowOp { SUB, MUL, DIV };

// pasa_rs: the FP32 row vectors beside the others (C_j, lv_j, psi_j for two blocks, C_1, psi_1, E, the redo
// and reshift flags, the block max in block 1's frame, the moved psi); op_host/pasa_tiling.cpp counts them.
constexpr uint32_t kRowShiftVectors = 13;

template <class Policy>
class VectorSoftmax {
public:
    using T = typename Policy::ElementAccumulator;

    static constexpr bool ROW_SHIFTED = Policy::SHIFT == ShiftKind::ROW_SHIFTED;

    __aicore__ inline void Init(const PasaTilingData* t, TPipe* pipe, GM_ADDR query, GM_ADDR mask, GM_ADDR out,
                                GM_ADDR lse, GM_ADDR workspace, uint32_t core, uint32_t sub) {
        t_ = t;
        sub_ = sub;
        d_ = t->headDim;
        rm_ = t->blockQ / 2;
        inva_ = (T)t->invariance;
        scale_ = (T)t->scale;
        ring_ = PasaSlotRing(*t);
        const uint32_t st = sizeof(T);
        pipe->InitBuffer(sQue_, 2, rm_ * BLOCK_KV * 2);
        pipe->InitBuffer(pQue_, 2, rm_ * BLOCK_KV * 2);
        pipe->InitBuffer(pvQue_, 2, rm_ * d_ * st);
        pipe->InitBuffer(maskQue_, 1, rm_ * BLOCK_KV);
        pipe->InitBuffer(outQue_, 1, (rm_ * d_ * 2 > d_ * 4) ? rm_ * d_ * 2 : d_ * 4);
        pipe->InitBuffer(lseQue_, 1, 2 * ROW_VEC * 4);
        // VECCALC: [sT, pT (FP32 state only)] work, bits, oAcc, 11 state row vectors, alpha and gamma of every
        // block slot (ring_ each: a stack's are used when PV of the stack arrives), 4 FP32 row vectors, brcb
        const uint32_t tile = rm_ * BLOCK_KV * st;
        const uint32_t bitsBytes = ((rm_ * BLOCK_KV / 8) + 31) / 32 * 32;
        const uint32_t calc = (st == 4 ? 2 * tile : 0) + tile + bitsBytes + rm_ * d_ * st +
                              (11 + 2 * ring_) * ROW_VEC * st + 4 * ROW_VEC * 4 + rm_ * 32 +
                              (ROW_SHIFTED ? kRowShiftVectors * ROW_VEC * 4 : 0);
        pipe->InitBuffer(calc_, calc);
        uint32_t off = 0;
        LocalTensor<uint8_t> base = calc_.Get<uint8_t>();
        if (st == 4) {
            sT_ = base[off].template ReinterpretCast<T>(); off += tile;
            pT_ = base[off].template ReinterpretCast<T>(); off += tile;
        }
        work_ = base[off].template ReinterpretCast<T>(); off += tile;
        bits_ = base[off]; off += bitsBytes;
        oAcc_ = base[off].template ReinterpretCast<T>(); off += rm_ * d_ * st;
        LocalTensor<T>* vecs[11] = {&m_, &mNew_, &l_, &f_, &mean_, &mBlk_, &lBlk_, &dPrev_, &dCur_, &tmp1_, &tmp2_};
        for (uint32_t i = 0; i < 11; ++i) { *vecs[i] = base[off].template ReinterpretCast<T>(); off += ROW_VEC * st; }
        alpha_ = base[off].template ReinterpretCast<T>(); off += ring_ * ROW_VEC * st;
        gamma_ = base[off].template ReinterpretCast<T>(); off += ring_ * ROW_VEC * st;
        LocalTensor<float>* fvecs[4] = {&fa_, &fb_, &fc_, &fd_};
        for (uint32_t i = 0; i < 4; ++i) { *fvecs[i] = base[off].template ReinterpretCast<float>(); off += ROW_VEC * 4; }
        bc_ = base[off].template ReinterpretCast<T>();
        off += rm_ * 32;
        if constexpr (ROW_SHIFTED) {
            rsScratch_ = base[off].template ReinterpretCast<float>();
            LocalTensor<float>* rvecs[kRowShiftVectors] = {&cj_[0], &cj_[1], &lv_[0], &lv_[1], &psi_[0], &psi_[1],
                                                           &c1_, &psi1_, &eRun_, &redo_, &far_, &frame_, &moved_};
            for (uint32_t i = 0; i < kRowShiftVectors; ++i) *rvecs[i] = rsScratch_[i * ROW_VEC];
            qGm_.SetGlobalBuffer((__gm__ half*)query);
            rsSlots_.Init(*t, workspace, core);
        }

        if (mask != nullptr) maskGm_.SetGlobalBuffer((__gm__ uint8_t*)mask);
        outGm_.SetGlobalBuffer((__gm__ half*)out);
        lseGm_.SetGlobalBuffer((__gm__ float*)lse);
        statusGm_.SetGlobalBuffer((__gm__ uint32_t*)(workspace + t->wsStatusOffset));
        partOGm_.SetGlobalBuffer((__gm__ float*)(workspace + t->wsPartialOffset));
        partLseGm_.SetGlobalBuffer((__gm__ float*)(workspace + t->wsPartialLseOffset));
        slots_.Init(*t, workspace, core);
    }

    // Buffers lent to the other AIV stages (M writer, split-KV combine), which run outside the task loop.
    __aicore__ inline TQue<TPosition::VECOUT, 1>& ProbQueue() { return pQue_; }
    __aicore__ inline TQue<TPosition::VECIN, 1>& InQueue() { return pvQue_; }
    __aicore__ inline TQue<TPosition::VECIN, 1>& ScoreQueue() { return sQue_; }
    __aicore__ inline TQue<TPosition::VECOUT, 1>& OutQueue() { return outQue_; }
    __aicore__ inline TQue<TPosition::VECOUT, 1>& LseQueue() { return lseQue_; }
    __aicore__ inline uint32_t RowsPerAiv() const { return rm_; }
    __aicore__ inline LocalTensor<float> Scratch() { return oAcc_.template ReinterpretCast<float>(); }  // >= D floats
    __aicore__ inline LocalTensor<float> ScratchVec() { return fd_; }  // ROW_VEC floats
    // pasa_rs's key pre-pass (before the tasks): its kRowShiftVectors x ROW_VEC floats, and compare bits
    __aicore__ inline LocalTensor<float> RowShiftScratch() { return rsScratch_; }
    __aicore__ inline LocalTensor<uint8_t> Bits() { return bits_; }

    __aicore__ inline void Run(const Task& k) {
        const uint32_t first = (k.tileRows + 1) / 2;
        r0_ = sub_ == 0 ? 0 : first;
        rows_ = sub_ == 0 ? first : k.tileRows - first;
        valid_ = k.rowsValid > r0_ ? MinU(k.rowsValid - r0_, rows_) : 0;
        if constexpr (ROW_SHIFTED) {
            if (k.nBlocks > 0) WriteQhat(k);  // uses O's buffer, zeroed below
        }
        if (rows_ > 0) {
            Duplicate(m_, NegInf<T>(), (int32_t)ROW_VEC);
            Duplicate(l_, (T)0, (int32_t)ROW_VEC);
            Duplicate(f_, (T)0, (int32_t)ROW_VEC);
            Duplicate(oAcc_, (T)0, (int32_t)(rows_ * d_));
            PipeBarrier<PIPE_V>();
        }
        if constexpr (ROW_SHIFTED) {
            if (k.nBlocks > 0) CrossCoreWaitFlag(FLAG_CENTRE_PROD_READY);
        }
        // The AIC computes S' preLaunch stacks ahead (pasa_cube_stage.h): the softmax of stack i comes before
        // the O update of stack i - preLaunch, whose PV the AIC computes after S' of stack i.
        const uint32_t stacks = StacksOf(*t_, k);
        for (uint32_t i = 0; i < stacks + t_->preLaunch; ++i) {
            if (i < stacks) {
                if constexpr (ROW_SHIFTED) RowShiftBlock(k, i);  // its stacks are single blocks
                else SoftmaxStack(k, StackOf(*t_, k, i));
            }
            if (i >= t_->preLaunch) UpdateStack(StackOf(*t_, k, i - t_->preLaunch));
        }
        if (rows_ > 0) Finalize(k);
    }

    // The status words of this AIV, written once, at the end: word 0 bit 0: Inf in S' on a valid row; pasa_rs:
    // word 1 the (valid row, KV block) pairs reshifted, word 2 those recomputed in FP32 (block 1's learning
    // pass not counted: the golden model's reshifted_row_blocks and recomputed_row_blocks).
    __aicore__ inline void WriteStatus(uint32_t aiv) {
        LocalTensor<uint32_t> s = lseQue_.template AllocTensor<uint32_t>();
        Duplicate(s, 0u, 8);
        SetFlag<HardEvent::V_S>(EVENT_ID0);
        WaitFlag<HardEvent::V_S>(EVENT_ID0);
        s.SetValue(0, overflow_ ? 1u : 0u);
        s.SetValue(1, reshiftedRows_);
        s.SetValue(2, recomputedRows_);
        SetFlag<HardEvent::S_MTE3>(EVENT_ID0);
        WaitFlag<HardEvent::S_MTE3>(EVENT_ID0);
        lseQue_.EnQue(s);
        s = lseQue_.template DeQue<uint32_t>();
        DataCopy(statusGm_[aiv * 8], s, 8);
        lseQue_.FreeTensor(s);
    }

private:
    // Block j's slot in the rings (the GM slots, alpha_, gamma_).
    __aicore__ inline uint32_t Slot(uint32_t j) const { return j % ring_; }
    __aicore__ inline LocalTensor<T> Alpha(uint32_t slot) { return alpha_[slot * ROW_VEC]; }
    __aicore__ inline LocalTensor<T> Gamma(uint32_t slot) { return gamma_[slot * ROW_VEC]; }

    // dst[i, c] = src[i, c] op vb[i] for i < rows, c < cols; vb from Brcb (one 32-byte block per row).
    __aicore__ inline void RowBroadcast(RowOp op, const LocalTensor<T>& dst, const LocalTensor<T>& src,
                                        const LocalTensor<T>& vb, uint32_t rows, uint32_t cols) {
        const uint32_t perRepeat = 256 / sizeof(T);
        const uint8_t rowBlocks = (uint8_t)(cols * sizeof(T) / 32);
        BinaryRepeatParams rp(1, 1, 0, rowBlocks, rowBlocks, 1);
        for (uint32_t c0 = 0; c0 < cols; c0 += perRepeat) {
            const uint64_t mask = MinU(perRepeat, cols - c0);
            if (op == RowOp::SUB) Sub(dst[c0], src[c0], vb, mask, (uint8_t)rows, rp);
            else if (op == RowOp::MUL) Mul(dst[c0], src[c0], vb, mask, (uint8_t)rows, rp);
            else Div(dst[c0], src[c0], vb, mask, (uint8_t)rows, rp);
        }
    }

    // One value per row into bc_ (a 32-byte block each), for RowBroadcast.
    __aicore__ inline void Broadcast(const LocalTensor<T>& v) {
        Brcb(bc_, v, (uint8_t)((rows_ + 7) / 8), BrcbRepeatParams(1, 8));
        PipeBarrier<PIPE_V>();
    }

    // Row sums of x (rows_ x n) folded in halves with every partial sum rounded to T (blockwise._tree_rowsum).
    // FP32 rows of 128 span two repeats: the first fold (c + 64) is an Add, the rest one WholeReduceSum.
    __aicore__ inline void TreeRowSum(const LocalTensor<T>& dst, const LocalTensor<T>& x) {
        if (sizeof(T) == 2) {
            WholeReduceSum<T>(dst, x, BLOCK_KV, rows_, 1, 1, 8);
        } else {
            Add(x, x, x[64], 64, (uint8_t)rows_, BinaryRepeatParams(1, 1, 1, 16, 16, 16));
            PipeBarrier<PIPE_V>();
            WholeReduceSum<T>(dst, x, 64, rows_, 1, 1, 16);
        }
        PipeBarrier<PIPE_V>();
    }

    __aicore__ inline void RowMax(const LocalTensor<T>& dst, const LocalTensor<T>& x) {
        if (sizeof(T) == 2) {
            WholeReduceMax<T>(dst, x, BLOCK_KV, rows_, 1, 1, 8, ReduceOrder::ORDER_ONLY_VALUE);
        } else {
            Max(work_, x, x[64], 64, (uint8_t)rows_, BinaryRepeatParams(1, 1, 1, 16, 16, 16));
            PipeBarrier<PIPE_V>();
            WholeReduceMax<T>(dst, work_, 64, rows_, 1, 1, 16, ReduceOrder::ORDER_ONLY_VALUE);
        }
        PipeBarrier<PIPE_V>();
    }

    // -inf on the columns of row `row` (or of all rows when row < 0) outside [keepLo, keepHi]. The lane
    // masks of the kept range are built word by word with shifts: a band cuts every row of a diagonal
    // block, and a loop over the kept columns would cost the scalar unit up to 128 steps a row.
    __aicore__ inline void MaskColumns(const LocalTensor<T>& s, int32_t row, int64_t keepLo, int64_t keepHi) {
        uint64_t ex[2] = {~0ull, ~0ull};
        for (int64_t w = 0; w < 2; ++w) {
            const int64_t lo = keepLo > 64 * w ? keepLo - 64 * w : 0;
            const int64_t hi = keepHi < 64 * w + 63 ? keepHi - 64 * w : 63;
            if (lo <= hi) ex[w] &= ~((~0ull >> (63 - (hi - lo))) << lo);  // clear bits lo..hi: kept lanes
        }
        const uint8_t repeats = row < 0 ? (uint8_t)rows_ : 1;
        const uint32_t rowOff = row < 0 ? 0 : (uint32_t)row * BLOCK_KV;
        const uint8_t rowBlocks = (uint8_t)(BLOCK_KV * sizeof(T) / 32);
        if (sizeof(T) == 2) {
            if (ex[0] | ex[1]) Duplicate(s[rowOff], NegInf<T>(), ex, repeats, 1, rowBlocks);
        } else {
            for (uint32_t h = 0; h < 2; ++h) {
                uint64_t m[2] = {ex[h], 0};
                if (m[0]) Duplicate(s[rowOff + 64 * h], NegInf<T>(), m, repeats, 1, rowBlocks);
            }
        }
    }

    // The user mask's Select and the column masks' Duplicates rewrite s: a barrier between the two, and one
    // after the last for the row max (none where nothing is masked).
    __aicore__ inline void ApplyMasks(const Task& k, const LocalTensor<T>& s, uint32_t c0, uint32_t keys) {
        bool selected = false, masked = false;  // s written by the Select, by any mask, since the last barrier
        if (t_->hasMask) {
            const uint64_t base = k.b * t_->maskBatchStride + k.n * t_->maskHeadStride +
                                  (uint64_t)k.row0 * t_->maskRowStride + (uint64_t)r0_ * k.maskRowStride + c0;
            LocalTensor<uint8_t> mt = maskQue_.template AllocTensor<uint8_t>();
            const uint32_t rowBytes = (keys + 31) / 32 * 32;
            if (k.maskRowStride != 0) {
                DataCopyExtParams cp(rows_, keys, (uint32_t)(k.maskRowStride - keys), (BLOCK_KV - rowBytes) / 32, 0);
                DataCopyPad(mt, maskGm_[base], cp, DataCopyPadExtParams<uint8_t>(false, 0, 0, 0));
            } else {  // packed heads under a mask shared by every head: each row reads the same mask row
                for (uint32_t i = 0; i < rows_; ++i)
                    DataCopyPad(mt[i * BLOCK_KV], maskGm_[base], DataCopyExtParams(1, keys, 0, 0, 0),
                                DataCopyPadExtParams<uint8_t>(false, 0, 0, 0));
            }
            maskQue_.EnQue(mt);
            mt = maskQue_.template DeQue<uint8_t>();
            LocalTensor<half> m16 = work_.template ReinterpretCast<half>();
            Cast(m16, mt, RoundMode::CAST_NONE, rows_ * BLOCK_KV);
            PipeBarrier<PIPE_V>();
            CompareScalar(bits_, m16, (half)0.5f, CMPMODE::LT, rows_ * BLOCK_KV);  // 1 = kept
            PipeBarrier<PIPE_V>();
            Select(s, bits_, s, NegInf<T>(), SELMODE::VSEL_TENSOR_SCALAR_MODE, rows_ * BLOCK_KV);
            selected = masked = true;
            maskQue_.FreeTensor(mt);
        }
        if (!t_->bandMode) {
            if (keys < BLOCK_KV) {  // padded tail columns
                if (selected) PipeBarrier<PIPE_V>();
                MaskColumns(s, -1, 0, (int64_t)keys - 1);
                masked = true;
            }
        } else {
            const Band bd = BandOf(*t_, k.seqQ, k.seqKv);
            for (uint32_t i = 0; i < rows_; ++i) {
                const int64_t qi = (int64_t)(k.row0 + (r0_ + i) * k.positionStep) - (int64_t)c0;
                int64_t lo = bd.lo + qi, hi = bd.hi + qi;
                if (hi > (int64_t)keys - 1) hi = (int64_t)keys - 1;
                if (lo <= 0 && hi >= (int64_t)BLOCK_KV - 1) continue;
                if (selected) PipeBarrier<PIPE_V>();
                selected = false;
                MaskColumns(s, (int32_t)i, lo, hi);  // rows apart: no barrier between them
                masked = true;
            }
        }
        if (masked) PipeBarrier<PIPE_V>();
    }

    // Guarded exp of n vectors: dst[i] = exp(x[i]), 0 where the running maximum mNew_ is still -inf (one compare
    // and two barriers for all of them).
    __aicore__ inline void GuardedExp(const LocalTensor<T>* dst, const LocalTensor<T>* x, uint32_t n) {
        for (uint32_t i = 0; i < n; ++i) Exp(dst[i], x[i], (int32_t)ROW_VEC);
        CompareScalar(bits_, mNew_, NegInf<T>(), CMPMODE::NE, ROW_VEC);
        PipeBarrier<PIPE_V>();
        for (uint32_t i = 0; i < n; ++i) Select(dst[i], bits_, dst[i], (T)0, SELMODE::VSEL_TENSOR_SCALAR_MODE, ROW_VEC);
        PipeBarrier<PIPE_V>();
    }

    // The merge's weights of the running state and of block j, alpha = exp(tmp1_) and gamma = exp(tmp2_)
    // (guarded), into the slot's vectors, and l_j = alpha l_{j-1} + gamma l'.
    __aicore__ inline void MergeRowSums(uint32_t slot) {
        const LocalTensor<T> weights[2] = {Alpha(slot), Gamma(slot)}, exponents[2] = {tmp1_, tmp2_};
        GuardedExp(weights, exponents, 2);
        Mul(tmp1_, weights[0], l_, (int32_t)ROW_VEC);
        Mul(tmp2_, weights[1], lBlk_, (int32_t)ROW_VEC);
        PipeBarrier<PIPE_V>();
        Add(l_, tmp1_, tmp2_, (int32_t)ROW_VEC);
    }

    // dst = src / j rounded to T, computed as FP32 division then one rounding (the golden's r(x / j)).
    __aicore__ inline void DivideByBlockIndex(const LocalTensor<T>& x, uint32_t j) {
        Duplicate(fb_, (float)j, (int32_t)ROW_VEC);
        if (sizeof(T) == 2) {
            Cast(fa_, x, RoundMode::CAST_NONE, ROW_VEC);
            PipeBarrier<PIPE_V>();
            Div(fa_, fa_, fb_, (int32_t)ROW_VEC);
            PipeBarrier<PIPE_V>();
            Cast(x, fa_, RoundMode::CAST_RINT, ROW_VEC);
        } else {
            PipeBarrier<PIPE_V>();
            Div(x.template ReinterpretCast<float>(), x.template ReinterpretCast<float>(), fb_, (int32_t)ROW_VEC);
        }
        PipeBarrier<PIPE_V>();
    }

    // One handshake: the stack's S' from the AIC, the softmax block by block, its P to the AIC.
    __aicore__ inline void SoftmaxStack(const Task& k, const KvStack& st) {
        CrossCoreWaitFlag(FLAG_S_READY);
        if (rows_ > 0) {
            for (uint32_t j = st.first; j < st.end; ++j) Softmax(k, j);
        }
        CrossCoreSetFlag<0x2, PIPE_MTE3>(FLAG_P_READY);
    }

    __aicore__ inline void Softmax(const Task& k, uint32_t j) {
        const uint32_t slot = Slot(j);
        const uint32_t c0 = (k.kvBlock0 + j) * BLOCK_KV;
        const uint32_t keys = MinU(BLOCK_KV, k.seqKv - c0);
        LocalTensor<half> s16 = sQue_.template AllocTensor<half>();
        DataCopy(s16, slots_.Score(j)[r0_ * BLOCK_KV], rows_ * BLOCK_KV);
        sQue_.EnQue(s16);
        s16 = sQue_.template DeQue<half>();
        LocalTensor<T> s;
        if (sizeof(T) == 2) {
            s = s16.template ReinterpretCast<T>();
        } else {
            Cast(sT_, s16, RoundMode::CAST_NONE, rows_ * BLOCK_KV);
            PipeBarrier<PIPE_V>();
            s = sT_;
        }
        const int32_t cnt = (int32_t)(rows_ * BLOCK_KV);
        const int32_t rv = (int32_t)ROW_VEC;
        if constexpr (Policy::SHIFT == ShiftKind::PASA_M) {
            // Step 3: the block's pseudo-average over all n columns (padded copies included), before masks.
            Muls(work_, s, (T)(1.0f / BLOCK_KV), cnt);
            PipeBarrier<PIPE_V>();
            TreeRowSum(mean_, work_);
        } else {
            // S = Q K^T left the cube unscaled; the scale is one multiplication rounded to T
            Muls(s, s, scale_, cnt);
            PipeBarrier<PIPE_V>();
        }
        ApplyMasks(k, s, c0, keys);
        RowMax(mBlk_, s);
        if constexpr (Policy::SHIFT == ShiftKind::PASA_M) {
            ShiftedRowState(j);
            // P' = exp(S' - m') relative to the block's own max (m' -> lowest finite where the row is all -inf)
            Maxs(tmp1_, mBlk_, Lowest<T>(), rv);
        } else {
            // m_j = max(m_{j-1}, m'); P = exp(S - m_j) (m_j -> lowest finite where the row is all -inf so far)
            Max(mNew_, m_, mBlk_, rv);
            PipeBarrier<PIPE_V>();
            Maxs(tmp1_, mNew_, Lowest<T>(), rv);
        }
        PipeBarrier<PIPE_V>();
        Broadcast(tmp1_);
        RowBroadcast(RowOp::SUB, s, s, bc_, rows_, BLOCK_KV);
        PipeBarrier<PIPE_V>();
        LocalTensor<half> p = pQue_.template AllocTensor<half>();
        if (sizeof(T) == 2) {
            Exp(p.template ReinterpretCast<T>(), s, cnt);
            PipeBarrier<PIPE_V>();
            TreeRowSum(lBlk_, p.template ReinterpretCast<T>());
        } else {
            Exp(pT_, s, cnt);
            PipeBarrier<PIPE_V>();
            Cast(p, pT_, RoundMode::CAST_RINT, rows_ * BLOCK_KV);  // P enters P V in FP16
            PipeBarrier<PIPE_V>();
            TreeRowSum(lBlk_, pT_);
        }
        pQue_.EnQue(p);
        sQue_.FreeTensor(s16);
        if constexpr (Policy::SHIFT == ShiftKind::PASA_M) {
            // α = exp(m_{j-1} - m_j + Δ'prev), γ = exp(m' - m_j + Δ'cur), guarded; l_j = α l_{j-1} + γ l'
            Sub(tmp1_, m_, mNew_, rv);
            Sub(tmp2_, mBlk_, mNew_, rv);
            PipeBarrier<PIPE_V>();
            Add(tmp1_, tmp1_, dPrev_, rv);
            Add(tmp2_, tmp2_, dCur_, rv);
            PipeBarrier<PIPE_V>();
            MergeRowSums(slot);
        } else {
            // α = exp(m_{j-1} - m_j), guarded; l_j = α l_{j-1} + rowsum P
            Sub(tmp1_, m_, mNew_, rv);
            PipeBarrier<PIPE_V>();
            const LocalTensor<T> alpha = Alpha(slot);
            GuardedExp(&alpha, &tmp1_, 1);
            Mul(tmp1_, alpha, l_, rv);
            PipeBarrier<PIPE_V>();
            Add(l_, tmp1_, lBlk_, rv);
        }
        Muls(m_, mNew_, (T)1, rv);
        p = pQue_.template DeQue<half>();
        DataCopy(slots_.Prob(j)[r0_ * BLOCK_KV], p, rows_ * BLOCK_KV);
        pQue_.FreeTensor(p);
    }

    // PASA steps 4-6 of block j (0-based) from its mean S̄'_j (mean_) and row max m' (mBlk_): F_j in f_,
    // the corrections Δ'prev, Δ'cur and the new running maximum m_j in mNew_.
    __aicore__ inline void ShiftedRowState(uint32_t j) {
        // Step 4: Welford mean F_j = F_{j-1} + (S̄'_j - F_{j-1}) / j; F_1 = S̄'_1.
        // Step 5: Δ'prev = I(F_{j-1} - F_j) (0 for j = 1), Δ'cur = I(S̄'_j - F_j).
        const int32_t rv = (int32_t)ROW_VEC;
        // S̄'_j - F_j goes to dCur_ itself, so the two corrections share their barriers.
        if (j == 0) {
            Muls(tmp2_, mean_, (T)1, rv);  // F_1
            Duplicate(dPrev_, (T)0, rv);
            PipeBarrier<PIPE_V>();
            Sub(dCur_, mean_, tmp2_, rv);
            PipeBarrier<PIPE_V>();
        } else {
            Sub(tmp1_, mean_, f_, rv);
            PipeBarrier<PIPE_V>();
            DivideByBlockIndex(tmp1_, j + 1);
            Add(tmp2_, f_, tmp1_, rv);  // F_j
            PipeBarrier<PIPE_V>();
            Sub(tmp1_, f_, tmp2_, rv);
            Sub(dCur_, mean_, tmp2_, rv);
            PipeBarrier<PIPE_V>();
            Muls(dPrev_, tmp1_, inva_, rv);
        }
        Muls(dCur_, dCur_, inva_, rv);
        Muls(f_, tmp2_, (T)1, rv);
        PipeBarrier<PIPE_V>();
        // Step 6: m_j = max(m_{j-1} + Δ'prev, m' + Δ'cur)
        Add(tmp1_, m_, dPrev_, rv);
        Add(tmp2_, mBlk_, dCur_, rv);
        PipeBarrier<PIPE_V>();
        Max(mNew_, tmp1_, tmp2_, rv);
        PipeBarrier<PIPE_V>();  // the caller rewrites tmp1_
    }

    // The stack's PV from the AIC, then O updated block by block.
    __aicore__ inline void UpdateStack(const KvStack& st) {
        CrossCoreWaitFlag(FLAG_PV_READY);
        if (rows_ == 0) return;
        for (uint32_t j = st.first; j < st.end; ++j) Update(j);
    }

    // O = α O + γ PV (PASA, pasa_rs) or O = α O + PV (FlashAttention), each product and the sum rounded to T.
    __aicore__ inline void Update(uint32_t j) {
        const uint32_t slot = Slot(j);
        LocalTensor<T> pv = pvQue_.template AllocTensor<T>();
        DataCopy(pv, slots_.Pv(j)[r0_ * d_], rows_ * d_);
        pvQue_.EnQue(pv);
        pv = pvQue_.template DeQue<T>();
        Broadcast(Alpha(slot));
        RowBroadcast(RowOp::MUL, oAcc_, oAcc_, bc_, rows_, d_);
        PipeBarrier<PIPE_V>();
        if constexpr (Policy::SHIFT != ShiftKind::NONE) {
            Broadcast(Gamma(slot));
            RowBroadcast(RowOp::MUL, pv, pv, bc_, rows_, d_);
            PipeBarrier<PIPE_V>();
        }
        Add(oAcc_, oAcc_, pv, (int32_t)(rows_ * d_));
        pvQue_.FreeTensor(pv);
    }

    // O/l (rows without any kept key: l = 0, O = 0, out 0) and lse = m + ln l (+ I F for PASA; pasa_rs:
    // rho (m + C_1 + psi_1) + ln l) in FP32, -inf for l = 0.
    __aicore__ inline void Finalize(const Task& k) {
        const int32_t rv = (int32_t)ROW_VEC;
        CompareScalar(bits_, l_, (T)0, CMPMODE::NE, ROW_VEC);
        PipeBarrier<PIPE_V>();
        Select(tmp1_, bits_, l_, (T)1, SELMODE::VSEL_TENSOR_SCALAR_MODE, ROW_VEC);
        PipeBarrier<PIPE_V>();
        Broadcast(tmp1_);
        RowBroadcast(RowOp::DIV, oAcc_, oAcc_, bc_, rows_, d_);
        // lse in FP32: cast(m) + ln(cast(l)) + cast(I) * cast(F)
        if (sizeof(T) == 2) {
            Cast(fa_, m_, RoundMode::CAST_NONE, ROW_VEC);
            Cast(fb_, l_, RoundMode::CAST_NONE, ROW_VEC);
            if constexpr (Policy::SHIFT == ShiftKind::PASA_M) Cast(fc_, f_, RoundMode::CAST_NONE, ROW_VEC);
        } else {
            Muls(fa_, m_.template ReinterpretCast<float>(), 1.0f, rv);
            Muls(fb_, l_.template ReinterpretCast<float>(), 1.0f, rv);
            if constexpr (Policy::SHIFT == ShiftKind::PASA_M) Muls(fc_, f_.template ReinterpretCast<float>(), 1.0f, rv);
        }
        PipeBarrier<PIPE_V>();
        Ln(fb_, fb_, rv);
        if constexpr (Policy::SHIFT == ShiftKind::PASA_M) Muls(fc_, fc_, (float)inva_, rv);
        if constexpr (ROW_SHIFTED) {  // rho (m + C_1 + psi_1): m is in block 1's frame, in units of Q^ K
            Add(fa_, fa_, c1_, rv);
            PipeBarrier<PIPE_V>();
            Add(fa_, fa_, psi1_, rv);
            PipeBarrier<PIPE_V>();
            Muls(fa_, fa_, t_->rsRho, rv);
        }
        PipeBarrier<PIPE_V>();
        Add(fa_, fa_, fb_, rv);
        PipeBarrier<PIPE_V>();
        if constexpr (Policy::SHIFT == ShiftKind::PASA_M) {
            Add(fa_, fa_, fc_, rv);
            PipeBarrier<PIPE_V>();
        }
        Select(fa_, bits_, fa_, NegInf<float>(), SELMODE::VSEL_TENSOR_SCALAR_MODE, ROW_VEC);
        PipeBarrier<PIPE_V>();
        CheckOverflow();
        if (t_->kvSplits == 1) WriteFinal(k);
        else WritePartial(k);
    }

    // A valid row whose F (PASA: F - F is not 0) or m (FlashAttention: not below +inf; -inf is a row with every
    // key masked) is not finite: flags in fd_, their sum over the valid rows, one scalar read.
    __aicore__ inline void CheckOverflow() {
        if (valid_ == 0) return;
        if constexpr (Policy::SHIFT == ShiftKind::PASA_M) {
            Sub(tmp1_, f_, f_, (int32_t)ROW_VEC);
            PipeBarrier<PIPE_V>();
            CompareScalar(bits_, tmp1_, (T)0, CMPMODE::EQ, ROW_VEC);
        } else {
            CompareScalar(bits_, m_, PosInf<T>(), CMPMODE::LT, ROW_VEC);
        }
        Duplicate(fd_, 0.0f, (int32_t)ROW_VEC);
        PipeBarrier<PIPE_V>();
        Select(fd_, bits_, fd_, 1.0f, SELMODE::VSEL_TENSOR_SCALAR_MODE, ROW_VEC);
        PipeBarrier<PIPE_V>();
        WholeReduceSum<float>(fc_, fd_, (int32_t)valid_, 1, 1, 1, 8);
        SetFlag<HardEvent::V_S>(EVENT_ID0);
        WaitFlag<HardEvent::V_S>(EVENT_ID0);
        if (fc_.GetValue(0) > 0.0f) overflow_ = true;
    }

    // Element offset in query and output of this AIV's first row of the task (row r0_ of the tile).
    __aicore__ inline uint64_t FirstRowOffset(const Task& k) const {
        return QOffset(*t_, k.b, k.n, k.row0) + r0_ * k.qRowStride;
    }

    __aicore__ inline void WriteFinal(const Task& k) {
        LocalTensor<half> o = outQue_.template AllocTensor<half>();
        if (sizeof(T) == 2) Muls(o.template ReinterpretCast<T>(), oAcc_, (T)1, (int32_t)(rows_ * d_));
        else Cast(o, oAcc_, RoundMode::CAST_RINT, rows_ * d_);
        PipeBarrier<PIPE_V>();
        if (valid_ < rows_) Duplicate(o[valid_ * d_], (half)0, (int32_t)((rows_ - valid_) * d_));  // padded rows
        outQue_.EnQue(o);
        LocalTensor<float> lt = lseQue_.template AllocTensor<float>();
        Muls(lt, fa_, 1.0f, (int32_t)ROW_VEC);
        Duplicate(lt[ROW_VEC], PosInf<float>(), (int32_t)ROW_VEC);  // FIA's lse of a padded query row
        lseQue_.EnQue(lt);
        o = outQue_.template DeQue<half>();
        DataCopyParams cp((uint16_t)rows_, (uint16_t)(d_ * 2 / 32), 0, (uint16_t)((k.qRowStride - d_) * 2 / 32));
        DataCopy(outGm_[FirstRowOffset(k)], o, cp);
        outQue_.FreeTensor(o);
        lt = lseQue_.template DeQue<float>();
        const uint64_t base = ((uint64_t)k.b * t_->numHeads + k.n) * t_->seqQ + k.row0 + r0_;
        if (valid_ > 0) DataCopyPad(lseGm_[base], lt, DataCopyExtParams(1, valid_ * 4, 0, 0, 0));
        if (valid_ < rows_)
            DataCopyPad(lseGm_[base + valid_], lt[ROW_VEC], DataCopyExtParams(1, (rows_ - valid_) * 4, 0, 0, 0));
        lseQue_.FreeTensor(lt);
    }

    // Split-KV: this split's normalised O (FP32) and its lse, per row, for the combine. Splits exist
    // only for decode (S1 = 1), so the rows are one head's query, or the packed heads of a GQA group.
    __aicore__ inline void WritePartial(const Task& k) {
        for (uint32_t i = 0; i < rows_; ++i) {
            LocalTensor<float> o = outQue_.template AllocTensor<float>();
            if (sizeof(T) == 2) Cast(o, oAcc_[i * d_], RoundMode::CAST_NONE, d_);
            else Muls(o, oAcc_[i * d_].template ReinterpretCast<float>(), 1.0f, (int32_t)d_);
            outQue_.EnQue(o);
            o = outQue_.template DeQue<float>();
            const uint64_t g = ((uint64_t)k.b * t_->numHeads + k.n) * t_->seqQ + k.row0 + r0_ + i;
            DataCopy(partOGm_[(g * t_->kvSplits + k.split) * d_], o, d_);
            outQue_.FreeTensor(o);
        }
        // The rows' lse entries lie kvSplits floats apart: each value goes to a 32-byte block of its own
        // (Brcb; rows_ blocks fit the output buffer of rows_ x D halves), one burst of 4 bytes per block.
        LocalTensor<float> spread = outQue_.template AllocTensor<float>();
        Brcb(spread, fa_, (uint8_t)((rows_ + 7) / 8), BrcbRepeatParams(1, 8));
        outQue_.EnQue(spread);
        spread = outQue_.template DeQue<float>();
        const uint64_t g = ((uint64_t)k.b * t_->numHeads + k.n) * t_->seqQ + k.row0 + r0_;
        DataCopyPad(partLseGm_[g * t_->kvSplits + k.split], spread,
                    DataCopyExtParams(rows_, 4, 0, (t_->kvSplits - 1) * 4, 0));
        outQue_.FreeTensor(spread);
    }

    // ---- pasa_rs (ShiftKind::ROW_SHIFTED) ---------------------------------------------------------------
    // The conversation with the AIC is described in pasa_row_shift_cube.h. Per block parity s = j % 2 this
    // AIV keeps C_j, lv_j and psi_j (cj_[s], lv_[s], psi_[s]): block j + 1's are set while block j is open.

    // Q^ = FP16(Q 2^e) of this AIV's rows into the core's slot (Q 2^e is exact in FP32; one rounding to FP16,
    // which only a subnormal Q^ feels), through O's FP32 buffer, which the task zeroes afterwards.
    __aicore__ inline void WriteQhat(const Task& k) {
        if (rows_ > 0) {
            const int32_t cnt = (int32_t)(rows_ * d_);
            LocalTensor<half> q = pvQue_.template AllocTensor<half>();
            DataCopy(q, qGm_[FirstRowOffset(k)],
                     DataCopyParams((uint16_t)rows_, (uint16_t)(d_ * 2 / 32), (uint16_t)((k.qRowStride - d_) * 2 / 32), 0));
            pvQue_.EnQue(q);
            q = pvQue_.template DeQue<half>();
            Cast(oAcc_, q, RoundMode::CAST_NONE, cnt);
            PipeBarrier<PIPE_V>();
            pvQue_.FreeTensor(q);
            Muls(oAcc_, oAcc_, t_->rsScalePow2, cnt);
            PipeBarrier<PIPE_V>();
            LocalTensor<half> qh = outQue_.template AllocTensor<half>();
            Cast(qh, oAcc_, RoundMode::CAST_RINT, cnt);
            PipeBarrier<PIPE_V>();  // before the task zeroes O's buffer
            outQue_.EnQue(qh);
            qh = outQue_.template DeQue<half>();
            DataCopy(rsSlots_.qhat[r0_ * d_], qh, cnt);
            outQue_.FreeTensor(qh);
        }
        CrossCoreSetFlag<0x2, PIPE_MTE3>(FLAG_QHAT_READY);
    }

    // C_j and lv_j = Q^ K^_j - C_j of this AIV's rows (rows 2j and 2j + 1 of the centre products) into
    // cj_[j % 2], lv_[j % 2].
    __aicore__ inline void LoadCentreProducts(const Task& k, uint32_t j) {
        const uint32_t mp = Align16(k.tileRows), s = j % 2;
        const uint32_t second = (rows_ + 7) / 8 * 8;  // DataCopyPad starts each row on a 32-byte block
        LocalTensor<float> c = maskQue_.template AllocTensor<float>();
        DataCopyPad(c, rsSlots_.centreProd[(uint64_t)2 * j * mp + r0_],
                    DataCopyExtParams(2, rows_ * 4, (mp - rows_) * 4, 0, 0), DataCopyPadExtParams<float>(false, 0, 0, 0.0f));
        maskQue_.EnQue(c);
        c = maskQue_.template DeQue<float>();
        Muls(cj_[s], c, 1.0f, (int32_t)second);
        Sub(lv_[s], c[second], c, (int32_t)second);
        PipeBarrier<PIPE_V>();
        maskQue_.FreeTensor(c);
    }

    // dst = psi(x) = 64 FP16(x / 64), x / 64 saturated at +-65504 (an FP16 number times 64, exact in FP32).
    __aicore__ inline void ShiftOf(const LocalTensor<float>& dst, const LocalTensor<float>& x) {
        const int32_t rv = (int32_t)ROW_VEC;
        LocalTensor<half> h = fb_.template ReinterpretCast<half>();
        Muls(fa_, x, 1.0f / 64, rv);
        PipeBarrier<PIPE_V>();
        Mins(fa_, fa_, 65504.0f, rv);
        PipeBarrier<PIPE_V>();
        Maxs(fa_, fa_, -65504.0f, rv);
        PipeBarrier<PIPE_V>();
        Cast(h, fa_, RoundMode::CAST_RINT, ROW_VEC);
        PipeBarrier<PIPE_V>();
        Cast(dst, h, RoundMode::CAST_NONE, ROW_VEC);
        PipeBarrier<PIPE_V>();
        Muls(dst, dst, 64.0f, rv);
        PipeBarrier<PIPE_V>();
    }

    // psi_j = shift(lv_j + E), E = eRun_ taken as 0 on a row with no kept key yet (E = -inf).
    __aicore__ inline void BlockShift(uint32_t j) {
        const uint32_t s = j % 2;
        CompareScalar(bits_, eRun_, NegInf<float>(), CMPMODE::NE, ROW_VEC);
        PipeBarrier<PIPE_V>();
        Select(tmp1_, bits_, eRun_, 0.0f, SELMODE::VSEL_TENSOR_SCALAR_MODE, ROW_VEC);
        PipeBarrier<PIPE_V>();
        Add(tmp1_, lv_[s], tmp1_, (int32_t)ROW_VEC);
        PipeBarrier<PIPE_V>();
        ShiftOf(psi_[s], tmp1_);
    }

    // This AIV's rows of block j's shift column, -psi_j / 64 (exact in FP16), into slot j % 2.
    __aicore__ inline void WriteShiftColumn(uint32_t j) {
        if (rows_ == 0) return;
        LocalTensor<half> h = fb_.template ReinterpretCast<half>();
        Muls(fa_, psi_[j % 2], -1.0f / 64, (int32_t)ROW_VEC);
        PipeBarrier<PIPE_V>();
        Cast(h, fa_, RoundMode::CAST_RINT, ROW_VEC);
        PipeBarrier<PIPE_V>();
        LocalTensor<half> col = pQue_.template AllocTensor<half>();
        Brcb(col, h, (uint8_t)((rows_ + 7) / 8), BrcbRepeatParams(1, 8));  // one 16-lane block per row
        pQue_.EnQue(col);
        col = pQue_.template DeQue<half>();
        DataCopy(rsSlots_.shiftCol[((j % 2) * t_->blockQ + r0_) * FRACTAL], col, rows_ * FRACTAL);
        pQue_.FreeTensor(col);
    }

    // This AIV's request word for the current round (its shift column written before, where it changed).
    __aicore__ inline void SendRequest(uint32_t request) {
        LocalTensor<uint32_t> w = lseQue_.template AllocTensor<uint32_t>();
        Duplicate(w, request, 8);
        lseQue_.EnQue(w);
        w = lseQue_.template DeQue<uint32_t>();
        DataCopy(rsSlots_.request[RequestWordIndex(round_ % 2, sub_)], w, 8);
        lseQue_.FreeTensor(w);
        CrossCoreSetFlag<0x2, PIPE_MTE3>(FLAG_REQUEST);
    }

    // After the answer to a round: what the AIC served, the larger of the two AIVs' requests (both words
    // are in GM: the AIC answered only after both were written).
    __aicore__ inline uint32_t ServedRequest() {
        LocalTensor<uint32_t> w = maskQue_.template AllocTensor<uint32_t>();
        DataCopy(w, rsSlots_.request[RequestWordIndex(round_ % 2, 0)], RequestWordIndex(0, 1) + 8);
        maskQue_.EnQue(w);
        w = maskQue_.template DeQue<uint32_t>();
        SetFlag<HardEvent::MTE2_S>(EVENT_ID0);
        WaitFlag<HardEvent::MTE2_S>(EVENT_ID0);
        const uint32_t a = w.GetValue(0), b = w.GetValue(RequestWordIndex(0, 1));
        maskQue_.FreeTensor(w);
        ++round_;
        return a > b ? a : b;
    }

    // The valid rows where 0/1 flag vector v is 1 (rows past the valid ones ask for no work): one vector sum
    // over the first valid_ lanes (exact: at most 64 ones) and one scalar read, not one read per row.
    __aicore__ inline uint32_t ValidRowsFlagged(const LocalTensor<float>& v) {
        if (valid_ == 0) return 0;
        WholeReduceSum<float>(fa_, v, (int32_t)valid_, 1, 1, 1, 8);
        SetFlag<HardEvent::V_S>(EVENT_ID0);
        WaitFlag<HardEvent::V_S>(EVENT_ID0);
        return (uint32_t)fa_.GetValue(0);
    }

    // S' of an FP16 pass of block j into sT_ (FP32), masked, its row max mBlk_ and the rows that must be
    // recomputed (redo_): max +inf (a score more than 65504 above psi), or every kept score below FP16's range.
    // To tell the latter from a row with no kept key, -inf scores become the lowest finite value before the
    // masks: the row max is then that value, not -inf (such a score still weighs exp(-huge) = 0).
    __aicore__ inline void LoadScores16(const Task& k, uint32_t j, uint32_t c0, uint32_t keys) {
        const int32_t cnt = (int32_t)(rows_ * BLOCK_KV), rv = (int32_t)ROW_VEC;
        LocalTensor<half> s16 = sQue_.template AllocTensor<half>();
        DataCopy(s16, slots_.Score(j)[r0_ * BLOCK_KV], rows_ * BLOCK_KV);
        sQue_.EnQue(s16);
        s16 = sQue_.template DeQue<half>();
        Cast(sT_, s16, RoundMode::CAST_NONE, rows_ * BLOCK_KV);
        PipeBarrier<PIPE_V>();
        sQue_.FreeTensor(s16);
        Maxs(sT_, sT_, Lowest<float>(), cnt);
        PipeBarrier<PIPE_V>();
        ApplyMasks(k, sT_, c0, keys);
        RowMax(mBlk_, sT_);
        Duplicate(redo_, 0.0f, rv);
        CompareScalar(bits_, mBlk_, PosInf<float>(), CMPMODE::NE, ROW_VEC);
        PipeBarrier<PIPE_V>();
        Select(redo_, bits_, redo_, 1.0f, SELMODE::VSEL_TENSOR_SCALAR_MODE, ROW_VEC);
        PipeBarrier<PIPE_V>();
        CompareScalar(bits_, mBlk_, Lowest<float>(), CMPMODE::NE, ROW_VEC);
        PipeBarrier<PIPE_V>();
        Select(redo_, bits_, redo_, 1.0f, SELMODE::VSEL_TENSOR_SCALAR_MODE, ROW_VEC);
        Select(mBlk_, bits_, mBlk_, NegInf<float>(), SELMODE::VSEL_TENSOR_SCALAR_MODE, ROW_VEC);
        PipeBarrier<PIPE_V>();
    }

    // The FP32 pass: the rows in redo_ take their S' from it (the others keep the FP16 pass's), masked.
    __aicore__ inline void MergeRecomputed(const Task& k, uint32_t c0, uint32_t keys) {
        SetFlag<HardEvent::V_S>(EVENT_ID0);
        WaitFlag<HardEvent::V_S>(EVENT_ID0);
        for (uint32_t i = 0; i < rows_; ++i) {
            if (redo_.GetValue(i) == 0.0f) continue;
            LocalTensor<float> row = sQue_.template AllocTensor<float>();
            DataCopy(row, rsSlots_.score32[(uint64_t)(r0_ + i) * BLOCK_KV], BLOCK_KV);
            sQue_.EnQue(row);
            row = sQue_.template DeQue<float>();
            Muls(sT_[i * BLOCK_KV], row, 1.0f, (int32_t)BLOCK_KV);
            PipeBarrier<PIPE_V>();
            sQue_.FreeTensor(row);
        }
        ApplyMasks(k, sT_, c0, keys);
        RowMax(mBlk_, sT_);
    }

    // frame_ = mBlk + ((C_j - C_1) + (psi_j - psi_1)): block j's max in block 1's frame.
    __aicore__ inline void BlockMaxInFrame(uint32_t j) {
        const int32_t rv = (int32_t)ROW_VEC;
        Sub(tmp1_, cj_[j % 2], c1_, rv);
        Sub(tmp2_, psi_[j % 2], psi1_, rv);
        PipeBarrier<PIPE_V>();
        Add(tmp1_, tmp1_, tmp2_, rv);
        PipeBarrier<PIPE_V>();
        Add(frame_, mBlk_, tmp1_, rv);
        PipeBarrier<PIPE_V>();
    }

    // The reshift after block j's first FP16 pass: far_ = rows whose block max lies more than rsReshiftAt
    // from 0, that were not recomputed, whose moved psi differs from psi (beyond |psi| ~ 2^12 rsReshiftAt a
    // step of psi exceeds 2 rsReshiftAt), in a block that can matter (its max above the running max less the
    // relevance).
    // Those rows take the moved psi; returns whether a valid row did.
    __aicore__ inline bool Reshift(uint32_t j) {
        const int32_t rv = (int32_t)ROW_VEC;
        const LocalTensor<float>& psi = psi_[j % 2];
        BlockMaxInFrame(j);
        Adds(tmp1_, m_, -t_->rsRelevance, rv);
        Duplicate(far_, 1.0f, rv);
        PipeBarrier<PIPE_V>();
        Compare(bits_, frame_, tmp1_, CMPMODE::GT, ROW_VEC);
        PipeBarrier<PIPE_V>();
        Select(far_, bits_, far_, 0.0f, SELMODE::VSEL_TENSOR_SCALAR_MODE, ROW_VEC);
        Abs(tmp2_, mBlk_, rv);
        PipeBarrier<PIPE_V>();
        CompareScalar(bits_, tmp2_, t_->rsReshiftAt, CMPMODE::GT, ROW_VEC);
        PipeBarrier<PIPE_V>();
        Select(far_, bits_, far_, 0.0f, SELMODE::VSEL_TENSOR_SCALAR_MODE, ROW_VEC);
        PipeBarrier<PIPE_V>();
        CompareScalar(bits_, redo_, 0.0f, CMPMODE::EQ, ROW_VEC);
        PipeBarrier<PIPE_V>();
        Select(far_, bits_, far_, 0.0f, SELMODE::VSEL_TENSOR_SCALAR_MODE, ROW_VEC);
        Add(tmp2_, psi, mBlk_, rv);
        PipeBarrier<PIPE_V>();
        ShiftOf(moved_, tmp2_);
        Compare(bits_, moved_, psi, CMPMODE::NE, ROW_VEC);
        PipeBarrier<PIPE_V>();
        Select(far_, bits_, far_, 0.0f, SELMODE::VSEL_TENSOR_SCALAR_MODE, ROW_VEC);
        PipeBarrier<PIPE_V>();
        if (ValidRowsFlagged(far_) == 0) return false;
        CompareScalar(bits_, far_, 0.0f, CMPMODE::NE, ROW_VEC);
        PipeBarrier<PIPE_V>();
        Select(psi, bits_, moved_, psi, SELMODE::VSEL_TENSOR_TENSOR_MODE, ROW_VEC);
        PipeBarrier<PIPE_V>();
        return true;
    }

    // Block j's rounds from a served pass on, until the AIC closes them. After the first FP16 pass (if
    // mayReshift) this AIV asks for a reshift where Reshift() moved a row, else for the FP32 pass where a row
    // needs it, else accepts: its rows' S' are then final (sT_: FP16 values, FP32 for recomputed rows; mBlk_
    // their row max; psi_[j % 2] the shift), whatever the other AIV still asks for (rows are independent: this
    // AIV does not read those passes, whose rows of it may already use block j + 2's shift column), so
    // `close` (the block's own work, Close()) runs before the accepting word goes out, off the AIC's path. The learning conversation closes nothing:
    // it leaves S' and mBlk_ for its caller. nextFirstPass: the AIC runs block j + 1's first pass before it
    // serves this block's first round; its FLAG_S_READY comes first.
    __aicore__ inline void Rounds(const Task& k, uint32_t j, uint32_t served, bool mayReshift, bool nextFirstPass,
                                  bool close) {
        const uint32_t c0 = (k.kvBlock0 + j) * BLOCK_KV;
        const uint32_t keys = MinU(BLOCK_KV, k.seqKv - c0);
        bool reshiftDecided = !mayReshift, reshifted = false, closed = rows_ == 0;
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
                if (request == REQUEST_ACCEPT && ValidRowsFlagged(redo_) > 0) request = REQUEST_FP32;
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
        Add(dst, mBlk_, psi_[j % 2], (int32_t)ROW_VEC);
        PipeBarrier<PIPE_V>();
        Sub(dst, dst, lv_[j % 2], (int32_t)ROW_VEC);
        PipeBarrier<PIPE_V>();
    }

    // Before block 1: its learning conversation (psi = shift(lv_1), without a reshift) gives E's start, the
    // excess of block 1 over its mean; then one round for the first passes of blocks 1 and 2.
    __aicore__ inline void RowShiftLearn(const Task& k) {
        const int32_t rv = (int32_t)ROW_VEC;
        if (rows_ > 0) {
            LoadCentreProducts(k, 0);
            Muls(c1_, cj_[0], 1.0f, rv);
            ShiftOf(psi_[0], lv_[0]);
            WriteShiftColumn(0);
        }
        SendRequest(rows_ > 0 ? REQUEST_FP16 : REQUEST_ACCEPT);
        CrossCoreWaitFlag(FLAG_S_READY);
        Rounds(k, 0, ServedRequest(), false, false, false);
        if (rows_ > 0) {
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
        SendRequest(rows_ > 0 ? REQUEST_FP16 : REQUEST_ACCEPT);
        CrossCoreWaitFlag(FLAG_S_READY);  // block 1's first pass: a round answered without reading the words
        ++round_;
    }

    // Block j of the task: its rounds (which close it), then P_j to the AIC once the AIC has closed them:
    // P_j's slot holds both AIVs' rows, and a pass the other AIV still asked for must not find P_j V_j run.
    __aicore__ inline void RowShiftBlock(const Task& k, uint32_t j) {
        if (j == 0) RowShiftLearn(k);
        Rounds(k, j, REQUEST_FP16, true, j + 1 < k.nBlocks, true);
        CrossCoreSetFlag<0x2, PIPE_MTE3>(FLAG_P_READY);
    }

    // Block j's own work once its S' is final: its counters, excess, E for block j + 2 and that block's
    // shift column, the local softmax and the merge (blockwise._query_block_rs), P_j into its slot.
    __aicore__ inline void Close(const Task& k, uint32_t j, bool reshifted) {
        const uint32_t slot = Slot(j);
        const int32_t cnt = (int32_t)(rows_ * BLOCK_KV), rv = (int32_t)ROW_VEC;
        recomputedRows_ += ValidRowsFlagged(redo_);
        if (reshifted) reshiftedRows_ += ValidRowsFlagged(far_);
        BlockMaxInFrame(j);
        // E for block j + 2 takes block j's excess (the lag of two blocks); block j's parity slot passes to
        // block j + 2, whose shift column the AIC reads for its first pass after P_j V_j.
        Excess(tmp1_, j);
        Max(eRun_, eRun_, tmp1_, rv);
        PipeBarrier<PIPE_V>();
        if (j + 2 < k.nBlocks) {
            LoadCentreProducts(k, j + 2);
            BlockShift(j + 2);
            WriteShiftColumn(j + 2);
        }
        // Local softmax in FP32: P = exp(rho (S' - m')), l' its pairwise row sum; P enters P V in FP16.
        Maxs(tmp1_, mBlk_, Lowest<float>(), rv);
        PipeBarrier<PIPE_V>();
        Broadcast(tmp1_);
        RowBroadcast(RowOp::SUB, sT_, sT_, bc_, rows_, BLOCK_KV);
        PipeBarrier<PIPE_V>();
        Muls(sT_, sT_, t_->rsRho, cnt);
        PipeBarrier<PIPE_V>();
        LocalTensor<half> p = pQue_.template AllocTensor<half>();
        Exp(pT_, sT_, cnt);
        PipeBarrier<PIPE_V>();
        Cast(p, pT_, RoundMode::CAST_RINT, rows_ * BLOCK_KV);
        PipeBarrier<PIPE_V>();
        TreeRowSum(lBlk_, pT_);
        pQue_.EnQue(p);
        // Merge in block 1's frame: α = exp(rho (m - m_new)), γ = exp(rho (m~ - m_new)), guarded; l = α l + γ l'.
        Max(mNew_, m_, frame_, rv);
        PipeBarrier<PIPE_V>();
        Sub(tmp1_, m_, mNew_, rv);
        Sub(tmp2_, frame_, mNew_, rv);
        PipeBarrier<PIPE_V>();
        Muls(tmp1_, tmp1_, t_->rsRho, rv);
        Muls(tmp2_, tmp2_, t_->rsRho, rv);
        PipeBarrier<PIPE_V>();
        MergeRowSums(slot);
        Muls(m_, mNew_, 1.0f, rv);
        p = pQue_.template DeQue<half>();
        DataCopy(slots_.Prob(j)[r0_ * BLOCK_KV], p, rows_ * BLOCK_KV);
        pQue_.FreeTensor(p);
    }

    const PasaTilingData* t_;
    uint32_t sub_, d_, rm_, ring_, r0_ = 0, rows_ = 0, valid_ = 0;
    T inva_, scale_;
    bool overflow_ = false;
    TQue<TPosition::VECIN, 1> sQue_, pvQue_, maskQue_;
    TQue<TPosition::VECOUT, 1> pQue_, outQue_, lseQue_;
    TBuf<TPosition::VECCALC> calc_;
    LocalTensor<T> sT_, pT_, work_, oAcc_, bc_;
    LocalTensor<uint8_t> bits_;
    LocalTensor<T> m_, mNew_, l_, f_, mean_, mBlk_, lBlk_, dPrev_, dCur_, tmp1_, tmp2_;
    LocalTensor<T> alpha_, gamma_;  // ring_ row vectors each: block j's merge weights in row Slot(j)
    LocalTensor<float> fa_, fb_, fc_, fd_;
    GlobalTensor<uint8_t> maskGm_;
    GlobalTensor<half> outGm_;
    SlotTensors<T> slots_;
    GlobalTensor<float> lseGm_, partOGm_, partLseGm_;
    GlobalTensor<uint32_t> statusGm_;
    // pasa_rs only
    uint32_t round_ = 0;  // request rounds so far: the parity of the request words (pasa_row_shift_cube.h)
    uint32_t reshiftedRows_ = 0, recomputedRows_ = 0;  // the status words 1 and 2
    LocalTensor<float> rsScratch_, cj_[2], lv_[2], psi_[2], c1_, psi1_, eRun_, redo_, far_, frame_, moved_;
    GlobalTensor<half> qGm_;
    RowShiftSlots rsSlots_;  // pasa_rs only
};

}  // namespace pasa_kernel

#endif  // PASA_VECTOR_SOFTMAX_H
