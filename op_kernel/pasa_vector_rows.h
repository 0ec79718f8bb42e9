// What the AIVs of every allocation share: this AIV's rows of the task, the UB they live in (pasa_buffer_plan.h
// AivUbPlan: the queues, the tiles, the shared row state m, l and the merge weights of the handshake's block
// slots) and the row operations every softmax is made of, in the roundings of python/pasa_npu/blockwise.py. The
// stage (pasa_vector_stage.h) and the allocation's softmax epilogue (pasa_softmax_*.h) work on one AivRows.
// Rows are independent; the AIV with sub-block index 0 takes the first ceil(rows/2) rows of the query block, the
// other the rest. A block's tiles hold tileRows rows (AivTileRows: at most AIV_TILE_ROWS): an AIV with more rows (a
// query block of 192 or 256) takes a block in row tiles (EnterTile), its row vectors and O hold all its rows.
#ifndef PASA_VECTOR_ROWS_H
#define PASA_VECTOR_ROWS_H

#include "pasa_common.h"

namespace pasa_kernel {

enum class RowOp { SUB, MUL, DIV };

template <typename T>
class AivRows {
public:
    // The buffers of PlanAivUb for the policy's traits, with the epilogue's row vectors (STATE_ROW_VECTORS,
    // FP32_ROW_VECTORS and those per slot) in epilogueState and epilogueFp32.
    __aicore__ inline void Init(const PasaTilingData* tiling, TPipe* pipe, GM_ADDR mask, GM_ADDR workspace,
                                uint32_t core, uint32_t subBlock, const PolicyTraits& traits) {
        t = tiling;
        sub = subBlock;
        d = t->headDim;
        rm = t->blockQ / 2;
        tileRows = AivTileRows(rm);
        ring = PasaSlotRing(*t);
        const AivUbPlan plan = PlanAivUb(rm, d, ring, traits);
        pipe->InitBuffer(sQue, 2, plan.scoreBytes);
        pipe->InitBuffer(pQue, plan.probBuffers, plan.probBytes);
        pipe->InitBuffer(pvQue, 2, plan.pvBytes);
        pipe->InitBuffer(maskQue, 1, plan.maskBytes);
        pipe->InitBuffer(outQue, 1, plan.outBytes);
        pipe->InitBuffer(lseQue, 1, plan.lseBytes);
        pipe->InitBuffer(calc_, plan.calcBytes);
        uint32_t off = 0;
        LocalTensor<uint8_t> base = calc_.Get<uint8_t>();
        if (plan.fp32TileBytes > 0) {
            sT = base[off].template ReinterpretCast<T>(); off += plan.fp32TileBytes;
            pT = base[off].template ReinterpretCast<T>(); off += plan.fp32TileBytes;
        }
        work = base[off].template ReinterpretCast<T>(); off += plan.tileBytes;
        bits = base[off]; off += plan.bitsBytes;
        oAcc = base[off].template ReinterpretCast<T>(); off += plan.oBytes;
        LocalTensor<T>* vecs[SHARED_STATE_ROW_VECTORS] = {&m, &mNew, &l, &mBlk, &lBlk, &tmp1, &tmp2};
        for (uint32_t i = 0; i < SHARED_STATE_ROW_VECTORS; ++i) {
            *vecs[i] = base[off].template ReinterpretCast<T>();
            off += ROW_VEC * sizeof(T);
        }
        epilogueState = base[off].template ReinterpretCast<T>(); off += traits.stateRowVectors * ROW_VEC * sizeof(T);
        if (traits.mergeWeights) {
            alpha = base[off].template ReinterpretCast<T>(); off += ring * ROW_VEC * sizeof(T);
            gamma = base[off].template ReinterpretCast<T>(); off += ring * ROW_VEC * sizeof(T);
        }
        bc = base[off].template ReinterpretCast<T>(); off += plan.brcbBytes;
        LocalTensor<float>* fvecs[SHARED_FP32_ROW_VECTORS] = {&fa, &fb, &fc, &fd};
        for (uint32_t i = 0; i < SHARED_FP32_ROW_VECTORS; ++i) {
            *fvecs[i] = base[off].template ReinterpretCast<float>();
            off += ROW_VEC * 4;
        }
        epilogueFp32 = base[off].template ReinterpretCast<float>();
        if (mask != nullptr) maskGm.SetGlobalBuffer((__gm__ uint8_t*)mask);
        slots.Init(*t, workspace, core);
    }

    // This AIV's rows of task k: rows [r0, r0 + rows) of the tile, of which the first `valid` are query rows.
    __aicore__ inline void SelectRows(const Task& k) {
        const uint32_t first = (k.tileRows + 1) / 2;
        r0 = sub == 0 ? 0 : first;
        rows = sub == 0 ? first : k.tileRows - first;
        valid = k.rowsValid > r0 ? MinU(k.rowsValid - r0, rows) : 0;
        aivR0 = r0;
        aivRows = rows;
        aivValid = valid;
    }

    // The row tile of this AIV's rows that starts at its row c0 (a multiple of tileRows) as r0, rows and valid, for
    // the tile operations (scores, masks, row max, P); LeaveTile gives them back all of the AIV's rows. The row
    // vectors and O are the caller's to offset by c0.
    __aicore__ inline void EnterTile(uint32_t c0) {
        r0 = aivR0 + c0;
        rows = MinU(tileRows, aivRows - c0);
        valid = aivValid > c0 ? MinU(aivValid - c0, rows) : 0;
    }
    __aicore__ inline void LeaveTile() {
        r0 = aivR0;
        rows = aivRows;
        valid = aivValid;
    }

    // Block j's slot in the rings (the GM slots, alpha, gamma).
    __aicore__ inline uint32_t Slot(uint32_t j) const { return j % ring; }
    __aicore__ inline LocalTensor<T> Alpha(uint32_t slot) { return alpha[slot * ROW_VEC]; }
    __aicore__ inline LocalTensor<T> Gamma(uint32_t slot) { return gamma[slot * ROW_VEC]; }

    // dst[i, c] = src[i, c] op vb[i] for i < rows, c < cols; vb from Brcb (one 32-byte block per row).
    __aicore__ inline void RowBroadcast(RowOp op, const LocalTensor<T>& dst, const LocalTensor<T>& src,
                                        const LocalTensor<T>& vb, uint32_t nRows, uint32_t cols) {
        const uint32_t perRepeat = 256 / sizeof(T);
        const uint8_t rowBlocks = (uint8_t)(cols * sizeof(T) / 32);
        BinaryRepeatParams rp(1, 1, 0, rowBlocks, rowBlocks, 1);
        for (uint32_t c0 = 0; c0 < cols; c0 += perRepeat) {
            const uint64_t mask = MinU(perRepeat, cols - c0);
            if (op == RowOp::SUB) Sub(dst[c0], src[c0], vb, mask, (uint8_t)nRows, rp);
            else if (op == RowOp::MUL) Mul(dst[c0], src[c0], vb, mask, (uint8_t)nRows, rp);
            else Div(dst[c0], src[c0], vb, mask, (uint8_t)nRows, rp);
        }
    }

    // One value per row into bc (a 32-byte block each), for RowBroadcast; BroadcastUnordered leaves the barrier
    // before the RowBroadcast to the caller.
    __aicore__ inline void Broadcast(const LocalTensor<T>& v) {
        BroadcastUnordered(v);
        PipeBarrier<PIPE_V>();
    }
    __aicore__ inline void BroadcastUnordered(const LocalTensor<T>& v) {
        Brcb(bc, v, (uint8_t)((rows + 7) / 8), BrcbRepeatParams(1, 8));
    }

    // Row sums of x (rows x n) folded in halves with every partial sum rounded to T (blockwise._tree_rowsum).
    // FP32 rows of 128 span two repeats: the first fold (c + 64) is an Add, the rest one WholeReduceSum.
    __aicore__ inline void TreeRowSum(const LocalTensor<T>& dst, const LocalTensor<T>& x) {
        if constexpr (sizeof(T) == 2) {
            WholeReduceSum<T>(dst, x, BLOCK_KV, rows, 1, 1, 8);
        } else {
            Add(x, x, x[64], 64, (uint8_t)rows, BinaryRepeatParams(1, 1, 1, 16, 16, 16));
            PipeBarrier<PIPE_V>();
            WholeReduceSum<T>(dst, x, 64, rows, 1, 1, 16);
        }
        PipeBarrier<PIPE_V>();
    }

    // Row maxima of x (rows x n). FP32 rows of 128 span two repeats: their halves' maxima go to the work tile, 64
    // values a row (its rows 256 bytes apart); a BlockReduceMax takes each row's 8 blocks of those to 8 values in
    // bc (one 32-byte block a row, free until the next Broadcast), and BlockMaxes the 8 to one. For FP32 a block
    // reduction runs a repeat a cycle where WholeReduceMax takes 7 (asc-devkit's Vector指令理论性能汇总: 64
    // against 64/7 elements a cycle); for FP16 both take 7, and one WholeReduceMax per row is the fewest repeats.
    __aicore__ inline void RowMax(const LocalTensor<T>& dst, const LocalTensor<T>& x) {
        if constexpr (sizeof(T) == 2) {
            WholeReduceMax<T>(dst, x, BLOCK_KV, rows, 1, 1, 8, ReduceOrder::ORDER_ONLY_VALUE);
        } else {
            Max(work, x, x[64], 64, (uint8_t)rows, BinaryRepeatParams(1, 1, 1, 8, 16, 16));
            PipeBarrier<PIPE_V>();
            BlockReduceMax<T>(bc, work, (int32_t)rows, 64, 1, 1, 8);
            PipeBarrier<PIPE_V>();
            BlockMaxes(dst, bc, rows, 0xFF);
        }
        PipeBarrier<PIPE_V>();
    }

    // dst[i] = the largest of the lanes `lanes` selects (bit k: lane k) in the 32-byte block i of src, i < n: one
    // BlockReduceMax for the whole repeats of 8 blocks and one for the rest, with their blocks' lanes only (Atlas A2
    // writes no result for a block without an active lane), so that dst takes exactly n values. With one lane a
    // block it gathers that lane of each block exactly (the maximum of one value).
    __aicore__ inline void BlockMaxes(const LocalTensor<float>& dst, const LocalTensor<float>& src, uint32_t n,
                                      uint8_t lanes) {
        uint64_t mask[2] = {lanes * 0x0101010101010101ull, 0};
        const uint32_t whole = n / 8, rest = n % 8;
        if (whole > 0) BlockReduceMax<float>(dst, src, (int32_t)whole, mask, 1, 1, 8);
        if (rest > 0) {
            mask[0] &= ~0ull >> (64 - 8 * rest);
            BlockReduceMax<float>(dst[whole * 8], src[whole * 64], 1, mask, 1, 1, 8);
        }
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
        const uint8_t repeats = row < 0 ? (uint8_t)rows : 1;
        const uint32_t rowOff = row < 0 ? 0 : (uint32_t)row * BLOCK_KV;
        const uint8_t rowBlocks = (uint8_t)(BLOCK_KV * sizeof(T) / 32);
        if constexpr (sizeof(T) == 2) {
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
        if (t->hasMask) {
            const uint64_t maskBase = k.b * t->maskBatchStride + k.n * t->maskHeadStride +
                                      (uint64_t)k.row0 * t->maskRowStride + (uint64_t)r0 * k.maskRowStride + c0;
            LocalTensor<uint8_t> mt = maskQue.template AllocTensor<uint8_t>();
            const uint32_t rowBytes = (keys + 31) / 32 * 32;
            if (k.maskRowStride != 0) {
                DataCopyExtParams cp(rows, keys, (uint32_t)(k.maskRowStride - keys), (BLOCK_KV - rowBytes) / 32, 0);
                DataCopyPad(mt, maskGm[maskBase], cp, DataCopyPadExtParams<uint8_t>(false, 0, 0, 0));
            } else {  // packed heads under a mask shared by every head: each row reads the same mask row
                for (uint32_t i = 0; i < rows; ++i)
                    DataCopyPad(mt[i * BLOCK_KV], maskGm[maskBase], DataCopyExtParams(1, keys, 0, 0, 0),
                                DataCopyPadExtParams<uint8_t>(false, 0, 0, 0));
            }
            maskQue.EnQue(mt);
            mt = maskQue.template DeQue<uint8_t>();
            LocalTensor<half> m16 = work.template ReinterpretCast<half>();
            Cast(m16, mt, RoundMode::CAST_NONE, rows * BLOCK_KV);
            PipeBarrier<PIPE_V>();
            CompareScalar(bits, m16, (half)0.5f, CMPMODE::LT, rows * BLOCK_KV);  // 1 = kept
            PipeBarrier<PIPE_V>();
            Select(s, bits, s, NegInf<T>(), SELMODE::VSEL_TENSOR_SCALAR_MODE, rows * BLOCK_KV);
            selected = masked = true;
            maskQue.FreeTensor(mt);
        }
        if (!t->bandMode) {
            if (keys < BLOCK_KV) {  // padded tail columns
                if (selected) PipeBarrier<PIPE_V>();
                MaskColumns(s, -1, 0, (int64_t)keys - 1);
                masked = true;
            }
        } else {
            const Band bd = BandOf(*t, k.seqQ, k.seqKv);
            for (uint32_t i = 0; i < rows; ++i) {
                const int64_t qi = (int64_t)(k.row0 + (r0 + i) * k.positionStep) - (int64_t)c0;
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

    // S' (S) of block j of this AIV's rows from its GM slot: the FP16 tile itself (T = half) or its FP32 copy in
    // sT. `raw` is the queue's buffer, which the caller frees once it no longer reads the scores.
    __aicore__ inline LocalTensor<T> LoadScores(uint32_t j, LocalTensor<half>& raw) {
        raw = sQue.template AllocTensor<half>();
        DataCopy(raw, slots.Score(j)[r0 * BLOCK_KV], rows * BLOCK_KV);
        sQue.EnQue(raw);
        raw = sQue.template DeQue<half>();
        if constexpr (sizeof(T) == 2) {
            return raw.template ReinterpretCast<T>();
        } else {  // no Cast<half, half> for the FP16 state: the A2 has none
            Cast(sT, raw, RoundMode::CAST_NONE, rows * BLOCK_KV);
            PipeBarrier<PIPE_V>();
            return sT;
        }
    }

    // P = exp(s - tmp1), row by row (tmp1: one value per row, written just before), into a fresh FP16 buffer of
    // pQue (the cube's operand; FP32 state: exp in FP32, one rounding to FP16), enqueued; l' = the pairwise row
    // sum of P in the state type, into lBlk. s is overwritten.
    __aicore__ inline void ExpRows(const LocalTensor<T>& s) { ExpRowsScaled(s, false, (T)1); }

    // The same with P = exp(factor (s - tmp1)) (pasa_rs: factor rho, in FP32).
    __aicore__ inline void ExpRowsScaled(const LocalTensor<T>& s, bool scaled, T factor) {
        const int32_t cnt = (int32_t)(rows * BLOCK_KV);
        PipeBarrier<PIPE_V>();
        Broadcast(tmp1);
        RowBroadcast(RowOp::SUB, s, s, bc, rows, BLOCK_KV);
        PipeBarrier<PIPE_V>();
        if (scaled) {
            Muls(s, s, factor, cnt);
            PipeBarrier<PIPE_V>();
        }
        LocalTensor<half> p = pQue.template AllocTensor<half>();
        if constexpr (sizeof(T) == 2) {
            Exp(p.template ReinterpretCast<T>(), s, cnt);
            PipeBarrier<PIPE_V>();
            TreeRowSum(lBlk, p.template ReinterpretCast<T>());
        } else {
            Exp(pT, s, cnt);
            PipeBarrier<PIPE_V>();
            Cast(p, pT, RoundMode::CAST_RINT, rows * BLOCK_KV);  // P enters P V in FP16
            PipeBarrier<PIPE_V>();
            TreeRowSum(lBlk, pT);
        }
        pQue.EnQue(p);
    }

    // The end of block j's softmax: the running maximum takes the new one (mNew), P_j (enqueued by ExpRows) goes
    // to its slot for the AIC.
    __aicore__ inline void CommitBlock(uint32_t j) {
        Muls(m, mNew, (T)1, (int32_t)ROW_VEC);
        LocalTensor<half> p = pQue.template DeQue<half>();
        DataCopy(slots.Prob(j)[r0 * BLOCK_KV], p, rows * BLOCK_KV);
        pQue.FreeTensor(p);
    }

    // Guarded exp of n vectors: dst[i] = exp(x[i]), 0 where the running maximum mNew is still -inf (one compare
    // and two barriers for all of them).
    __aicore__ inline void GuardedExp(const LocalTensor<T>* dst, const LocalTensor<T>* x, uint32_t n) {
        for (uint32_t i = 0; i < n; ++i) Exp(dst[i], x[i], (int32_t)ROW_VEC);
        CompareScalar(bits, mNew, NegInf<T>(), CMPMODE::NE, ROW_VEC);
        PipeBarrier<PIPE_V>();
        for (uint32_t i = 0; i < n; ++i) Select(dst[i], bits, dst[i], (T)0, SELMODE::VSEL_TENSOR_SCALAR_MODE, ROW_VEC);
        PipeBarrier<PIPE_V>();
    }

    // The merge's weights of the running state and of block j, alpha = exp(tmp1) and gamma = exp(tmp2)
    // (guarded), into the slot's vectors, and l_j = alpha l_{j-1} + gamma l'.
    __aicore__ inline void MergeRowSums(uint32_t slot) {
        const LocalTensor<T> weights[2] = {Alpha(slot), Gamma(slot)}, exponents[2] = {tmp1, tmp2};
        GuardedExp(weights, exponents, 2);
        Mul(tmp1, weights[0], l, (int32_t)ROW_VEC);
        Mul(tmp2, weights[1], lBlk, (int32_t)ROW_VEC);
        PipeBarrier<PIPE_V>();
        Add(l, tmp1, tmp2, (int32_t)ROW_VEC);
    }

    // bits = the rows whose running maximum is below +inf: FlashAttention's m turns +inf (then NaN) iff some S of
    // the row overflowed upward (an S that overflowed downward weighs 0, as a masked key does, as in the golden
    // model).
    __aicore__ inline void FiniteRunningMax() { CompareScalar(bits, m, PosInf<T>(), CMPMODE::LT, ROW_VEC); }

    // Element offset in query and output of this AIV's first row of task k (row r0 of the tile).
    __aicore__ inline uint64_t FirstRowOffset(const Task& k) const {
        return TileQOffset(*t, k) + r0 * k.qRowStride;
    }

    // The valid rows where the 0/1 flag vector `flags` is 1 (rows past the valid ones count for nothing): one
    // vector sum over the first `valid` lanes into sum[0] (exact: at most 128 ones) and one scalar read, not one
    // read per row. Beyond 64 valid rows the flags' second repeat is first added onto the first (flags change).
    __aicore__ inline uint32_t CountValidRows(const LocalTensor<float>& flags, const LocalTensor<float>& sum) {
        if (valid == 0) return 0;
        if (valid > 64) {
            Add(flags, flags, flags[64], (int32_t)(valid - 64));
            PipeBarrier<PIPE_V>();
        }
        WholeReduceSum<float>(sum, flags, (int32_t)MinU(valid, 64), 1, 1, 1, 8);
        SyncPipes<HardEvent::V_S>();
        return (uint32_t)sum.GetValue(0);
    }

    const PasaTilingData* t;
    uint32_t sub, d, rm, tileRows, ring, r0 = 0, rows = 0, valid = 0;
    uint32_t aivR0 = 0, aivRows = 0, aivValid = 0;  // all of this AIV's rows of the task (SelectRows)
    TQue<TPosition::VECIN, 1> sQue, pvQue, maskQue;
    TQue<TPosition::VECOUT, 1> pQue, outQue, lseQue;
    LocalTensor<T> sT, pT, work, oAcc, bc;
    LocalTensor<uint8_t> bits;
    LocalTensor<T> m, mNew, l, mBlk, lBlk, tmp1, tmp2;
    LocalTensor<T> alpha, gamma;  // ring row vectors each: block j's merge weights in row Slot(j)
    LocalTensor<T> epilogueState;
    LocalTensor<float> fa, fb, fc, fd;
    LocalTensor<float> epilogueFp32;
    GlobalTensor<uint8_t> maskGm;
    SlotTensors<T> slots;

private:
    TBuf<TPosition::VECCALC> calc_;
};

}  // namespace pasa_kernel

#endif  // PASA_VECTOR_ROWS_H
