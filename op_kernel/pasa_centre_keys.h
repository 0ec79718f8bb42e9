// pasa_rs's key pre-pass (python/pasa_npu/blockwise.py _centre_keys), once per (batch, KV head, KV block j)
// and shared by every query tile and every query head of the GQA group:
//   K^_j = FP16(FP32(sum of the block's n_j keys) / n_j), a non-finite K^ replaced by 0;
//   per dimension, u_j = +-clip(|K^_j|, max|K|/2, 2 min|K|) where all n_j keys have one sign, the interval is
//   non-empty and the clipped value is an FP16 number, else 0 (Sterbenz: K - u is then exact);
//   K'_j = K_j - u_j, FP16 and exact, with one more 16-column strip: 64 in its first column, zeros after
//   (the augmented column through which the AIC subtracts the row shift psi in L0C).
// Outputs: K' (kShiftCols per row) in the K' region, u_j and K^_j as rows 2j and 2j + 1 of the centre region.
//
// The column sum must be exact before its one rounding to FP32 (the golden model's ones-row GEMM): an FP32
// sum on the vector unit rounds at every partial sum, so the AIC computes it. Its A operand is a 16-row
// stripe of L (n x n FP16, ones on and below the diagonal, written once per core by the AIVs): row r of
// L K sums keys 0..r exactly, so row n_j - 1 is the block's sum whatever the tail length, and the
// padded rows of a tail tile (copies of the last key) get weight 0. Fixpipe writes that one row, FP32.
// Everything else is vector work on 16-column strips of the block, split between the core's two AIVs.
//
// Handshake per core: AIVs write L -> FLAG_M_READY -> AIC column sums of its items -> FLAG_KEY_SUMS_READY ->
// AIVs centre the same items -> FLAG_KEYS_CENTRED -> AIC-only barrier (mode 0, FLAG_PREPASS_DONE), after
// which any AIC may read any block's K', u and K^. The AIVs read none of them, so they go on to their
// tasks without a barrier of their own.
#ifndef PASA_CENTRE_KEYS_H
#define PASA_CENTRE_KEYS_H

#include "pasa_cube_ops.h"
#include "pasa_kv_rows.h"
#include "pasa_shift_matmul.h"

namespace pasa_kernel {

// The pre-pass item `item` of the tiling: (batch, KV head, block), the block's valid keys (0: beyond the
// batch's keys, never read) and the batch's first key row (TND: its token index, KeySpan).
struct KeyBlock {
    uint32_t b, h, j, rows, start;
};
__aicore__ inline KeyBlock KeyBlockOf(const PasaTilingData& t, GlobalTensor<int64_t>& lenKv, uint32_t item) {
    KeyBlock kb;
    kb.j = item % t.numKvBlocks;
    const uint32_t bh = item / t.numKvBlocks;
    kb.h = bh % t.numKvHeads;
    kb.b = bh / t.numKvHeads;
    const SeqSpan keys = KeySpan(t, lenKv, kb.b);
    kb.start = keys.start;
    kb.rows = kb.j * BLOCK_KV >= keys.len ? 0 : MinU(BLOCK_KV, keys.len - kb.j * BLOCK_KV);
    return kb;
}

// AIC side: the column sums of this core's blocks, then (once the AIVs centred them) the AIC-only barrier.
__aicore__ inline void KeySumsPrepass(const PasaTilingData& t, CubeOps& cube, GM_ADDR key, GM_ADDR blockTable,
                                      GM_ADDR workspace, GlobalTensor<int64_t>& lenKv, uint32_t core) {
    const uint32_t d = t.headDim;
    KvRows keys;
    keys.Init(&t, key, blockTable);
    GlobalTensor<half> lGm;
    GlobalTensor<float> sumGm;
    lGm.SetGlobalBuffer((__gm__ half*)(workspace + SlotsOf(t, core).shift));
    sumGm.SetGlobalBuffer((__gm__ float*)(workspace + t.wsKSumOffset));
    CrossCoreWaitFlag(FLAG_M_READY);  // L is in the core's slot
    const uint32_t first = core * t.prepassPerCore;
    const uint32_t last = MinU(first + t.prepassPerCore, t.prepassItems);
    for (uint32_t item = first; item < last; ++item) {
        const KeyBlock kb = KeyBlockOf(t, lenKv, item);
        if (kb.rows == 0) continue;
        const uint32_t stripe = (kb.rows - 1) / FRACTAL;  // the 16 rows of L that hold row n_j - 1
        LocalTensor<half> ones = cube.LoadRows(cube.pL1_, lGm[(uint64_t)stripe * FRACTAL * BLOCK_KV], FRACTAL,
                                               FRACTAL, BLOCK_KV, BLOCK_KV);
        LocalTensor<half> kTile = keys.Load(cube, cube.kL1_, kb.b, kb.h, kb.start + kb.j * BLOCK_KV, kb.rows);
        for (uint32_t n0 = 0; n0 < d; n0 += BLOCK_KV) {  // one L0B buffer holds 128 x 128 FP16
            const uint32_t nLen = MinU(BLOCK_KV, d - n0);
            LocalTensor<float> c = cube.Gemm(ones, FRACTAL, BLOCK_KV, kTile, BLayout::ROWS, BLOCK_KV, nLen, n0, BLOCK_KV);
            cube.RowToGm(sumGm[(uint64_t)item * d + n0], c, FRACTAL, (kb.rows - 1) % FRACTAL, nLen);
        }
        cube.kL1_.FreeTensor(kTile);
        cube.pL1_.FreeTensor(ones);
    }
    CrossCoreSetFlag<0x2, PIPE_FIX>(FLAG_KEY_SUMS_READY);
    CrossCoreWaitFlag(FLAG_KEYS_CENTRED);  // this core's K', u, K^ are in GM
    CrossCoreSetFlag<0x0, PIPE_FIX>(FLAG_PREPASS_DONE);
    CrossCoreWaitFlag(FLAG_PREPASS_DONE);  // every core's are
}

// AIV side. Queues lent by the vector stage (AivRows): inQue (VECIN) and outQue (VECOUT) hold a 128 x 16 FP16 strip
// each, smallQue (VECOUT) 32 FP16; `vecs` is FP32 scratch of at least 11 x 64 values, `bits` at least 96
// bytes of compare results.
template <class InQ, class OutQ, class SmallQ>
class KeyCentring {
public:
    __aicore__ inline KeyCentring(const PasaTilingData& t, GM_ADDR key, GM_ADDR blockTable, GM_ADDR workspace,
                                  InQ& inQue, OutQ& outQue,
                                  SmallQ& smallQue, const LocalTensor<float>& vecs, const LocalTensor<uint8_t>& bits)
        : t_(t), workspace_(workspace), inQue_(inQue), outQue_(outQue), smallQue_(smallQue), bits_(bits) {
        keys_.Init(&t, key, blockTable);
        kShiftGm_.SetGlobalBuffer((__gm__ half*)(workspace + t.wsKShiftOffset));
        centreGm_.SetGlobalBuffer((__gm__ half*)(workspace + t.wsCentreOffset));
        sumGm_.SetGlobalBuffer((__gm__ float*)(workspace + t.wsKSumOffset));
        LocalTensor<float>* v[9] = {&kmax_, &kmin_, &kbar_, &absMin_, &absMax_, &mag_, &neg_, &u_, &tmp_};
        for (uint32_t i = 0; i < 9; ++i) *v[i] = vecs[i * LANES];
        h16_ = vecs[9 * LANES].template ReinterpretCast<half>();
        u16_ = vecs[10 * LANES].template ReinterpretCast<half>();
    }

    // L into the core's slot (this AIV's half of its rows), then the centring of the core's items once the
    // AIC has their column sums. Strips 0 .. D/16 - 1 of K and strip D/16 (the augmented column) alternate
    // between the two AIVs.
    __aicore__ inline void Run(GlobalTensor<int64_t>& lenKv, uint32_t core, uint32_t sub, uint32_t tileRows) {
        GlobalTensor<half> lGm;
        lGm.SetGlobalBuffer((__gm__ half*)(workspace_ + SlotsOf(t_, core).shift));
        WriteRowPatternMatrix(lGm, outQue_, sub, tileRows, (half)0.0f, (half)1.0f, true);
        CrossCoreSetFlag<0x2, PIPE_MTE3>(FLAG_M_READY);
        CrossCoreWaitFlag(FLAG_KEY_SUMS_READY);
        const uint32_t strips = t_.headDim / FRACTAL;
        const uint32_t first = core * t_.prepassPerCore;
        const uint32_t last = MinU(first + t_.prepassPerCore, t_.prepassItems);
        for (uint32_t item = first; item < last; ++item) {
            const KeyBlock kb = KeyBlockOf(t_, lenKv, item);
            if (kb.rows == 0) continue;
            for (uint32_t s = sub; s <= strips; s += 2) {
                if (s == strips) AugmentedColumn(kb);
                else CentreStrip(kb, item, s);
            }
        }
        CrossCoreSetFlag<0x2, PIPE_MTE3>(FLAG_KEYS_CENTRED);
    }

private:
    static constexpr uint32_t LANES = 64;  // FP32 lanes of one 256-byte repeat (Compare's unit); 16 are used

    __aicore__ inline void AugmentedColumn(const KeyBlock& kb) {
        LocalTensor<half> a = outQue_.template AllocTensor<half>();
        Duplicate(a, (half)0.0f, (int32_t)(BLOCK_KV * FRACTAL));
        PipeBarrier<PIPE_V>();
        // 64 in the first lane of each row's 32-byte block: 8 rows per 128-lane repeat
        uint64_t firstLanes[2] = {0x0001000100010001ull, 0x0001000100010001ull};
        Duplicate(a, (half)64.0f, firstLanes, (uint8_t)(BLOCK_KV / 8), 1, 8);
        outQue_.EnQue(a);
        a = outQue_.template DeQue<half>();
        DataCopy(kShiftGm_[KShiftIndex(t_, kb.b, kb.h, kb.j) + t_.headDim], a, StripRows(kb.rows));
        outQue_.FreeTensor(a);
    }

    // n_j rows of one 32-byte block each, t.kShiftCols apart in the K' region.
    __aicore__ inline DataCopyParams StripRows(uint32_t rows) const {
        return DataCopyParams((uint16_t)rows, 1, 0, (uint16_t)((t_.kShiftCols - FRACTAL) / FRACTAL));
    }

    // Centres strip s (16 dimensions) of one key block: K' = K - u and the strip's centre (u, K^).
    __aicore__ inline void CentreStrip(const KeyBlock& kb, uint32_t item, uint32_t s) {
        const uint32_t col = s * FRACTAL;
        LocalTensor<half> x = LoadStrip(kb, col);
        LocalTensor<float> sum = inQue_.template AllocTensor<float>();
        DataCopy(sum, sumGm_[(uint64_t)item * t_.headDim + col], FRACTAL);
        inQue_.EnQue(sum);
        sum = inQue_.template DeQue<float>();
        if (kb.rows < BLOCK_KV) {  // a tail: copies of its last key, which change no column max or min
            Muls(x[kb.rows * FRACTAL], x[(kb.rows - 1) * FRACTAL], (half)1.0f, (uint64_t)FRACTAL,
                 (uint8_t)(BLOCK_KV - kb.rows), UnaryRepeatParams(1, 1, 1, 0));
            PipeBarrier<PIPE_V>();
        }
        LocalTensor<half> out = outQue_.template AllocTensor<half>();
        ColumnRange(x, out);
        BlockMean(sum, kb.rows);
        CentreShift();
        WriteCentred(kb, col, x, out);
    }

    // The strip's rows, one DataCopy per run of rows that follow each other in GM (one for dense keys).
    __aicore__ inline LocalTensor<half> LoadStrip(const KeyBlock& kb, uint32_t col) {
        LocalTensor<half> x = inQue_.template AllocTensor<half>();
        for (uint32_t r = 0; r < kb.rows;) {
            uint64_t runStart;
            const uint32_t rows = keys_.Run(kb.b, kb.h, kb.start + kb.j * BLOCK_KV + r, kb.rows - r, &runStart);
            DataCopy(x[r * FRACTAL], keys_.Cache()[runStart + col],
                     DataCopyParams((uint16_t)rows, 1, (uint16_t)((t_.kvRowStride - FRACTAL) / FRACTAL), 0));
            r += rows;
        }
        inQue_.EnQue(x);
        return inQue_.template DeQue<half>();
    }

    // Column max and min into kmax_ and kmin_: the rows folded in halves, in the output tile (free until K' is
    // formed).
    __aicore__ inline void ColumnRange(const LocalTensor<half>& x, const LocalTensor<half>& out) {
        const uint32_t halfTile = BLOCK_KV / 2 * FRACTAL;
        Max(out, x, x[halfTile], (int32_t)halfTile);
        Min(out[halfTile], x, x[halfTile], (int32_t)halfTile);
        PipeBarrier<PIPE_V>();
        for (uint32_t w = halfTile / 2; w >= FRACTAL; w /= 2) {
            Max(out, out, out[w], (int32_t)w);
            Min(out[halfTile], out[halfTile], out[halfTile + w], (int32_t)w);
            PipeBarrier<PIPE_V>();
        }
        Cast(kmax_, out, RoundMode::CAST_NONE, LANES);
        Cast(kmin_, out[halfTile], RoundMode::CAST_NONE, LANES);
    }

    // kbar_: K^ = FP16(sum / n_j), 0 where it is not finite (an Inf key). Frees sum.
    __aicore__ inline void BlockMean(LocalTensor<float>& sum, uint32_t rows) {
        const int32_t n = (int32_t)LANES;
        Duplicate(tmp_, (float)rows, n);
        PipeBarrier<PIPE_V>();
        Div(kbar_, sum, tmp_, n);
        PipeBarrier<PIPE_V>();
        inQue_.FreeTensor(sum);
        Cast(h16_, kbar_, RoundMode::CAST_RINT, LANES);
        PipeBarrier<PIPE_V>();
        Cast(kbar_, h16_, RoundMode::CAST_NONE, LANES);
        PipeBarrier<PIPE_V>();
        Abs(tmp_, kbar_, n);
        PipeBarrier<PIPE_V>();
        CompareScalar(bits_, tmp_, PosInf<float>(), CMPMODE::LT, LANES);
        PipeBarrier<PIPE_V>();
        Select(kbar_, bits_, kbar_, 0.0f, SELMODE::VSEL_TENSOR_SCALAR_MODE, LANES);
    }

    // The shift u of each dimension (u_ in FP32, u16_ in FP16) from its key range (kmax_, kmin_) and K^ (kbar_).
    __aicore__ inline void CentreShift() {
        const int32_t n = (int32_t)LANES;
        // pos: every key of the dimension > 0; neg: every key < 0
        LocalTensor<uint8_t> pos = bits_[32], negBits = bits_[64];
        CompareScalar(pos, kmin_, 0.0f, CMPMODE::GT, LANES);
        CompareScalar(negBits, kmax_, 0.0f, CMPMODE::LT, LANES);
        Muls(neg_, kmax_, -1.0f, n);
        PipeBarrier<PIPE_V>();
        Select(absMin_, pos, kmin_, neg_, SELMODE::VSEL_TENSOR_TENSOR_MODE, LANES);
        PipeBarrier<PIPE_V>();
        Muls(neg_, kmin_, -1.0f, n);
        PipeBarrier<PIPE_V>();
        Select(absMax_, pos, kmax_, neg_, SELMODE::VSEL_TENSOR_TENSOR_MODE, LANES);
        PipeBarrier<PIPE_V>();
        Muls(neg_, kbar_, -1.0f, n);
        PipeBarrier<PIPE_V>();
        Select(mag_, pos, kbar_, neg_, SELMODE::VSEL_TENSOR_TENSOR_MODE, LANES);  // |K^| for a one-signed dimension
        // the Sterbenz interval [max|K|/2, 2 min|K|] (exact in FP32), and |K^| clipped to it
        Muls(absMax_, absMax_, 0.5f, n);
        Muls(absMin_, absMin_, 2.0f, n);
        PipeBarrier<PIPE_V>();
        Min(mag_, mag_, absMin_, n);
        PipeBarrier<PIPE_V>();
        Max(mag_, mag_, absMax_, n);
        PipeBarrier<PIPE_V>();
        // u = +mag (all keys > 0), -mag (all < 0), else 0; 0 where the interval is empty or mag is not an
        // FP16 number (a subnormal max|K|/2, or 2 min|K| beyond 65504)
        Muls(neg_, mag_, -1.0f, n);
        PipeBarrier<PIPE_V>();
        Select(u_, negBits, neg_, 0.0f, SELMODE::VSEL_TENSOR_SCALAR_MODE, LANES);
        PipeBarrier<PIPE_V>();
        Select(u_, pos, mag_, u_, SELMODE::VSEL_TENSOR_TENSOR_MODE, LANES);
        Compare(bits_, absMax_, absMin_, CMPMODE::LE, LANES);
        PipeBarrier<PIPE_V>();
        Select(u_, bits_, u_, 0.0f, SELMODE::VSEL_TENSOR_SCALAR_MODE, LANES);
        Cast(h16_, mag_, RoundMode::CAST_RINT, LANES);
        PipeBarrier<PIPE_V>();
        Cast(tmp_, h16_, RoundMode::CAST_NONE, LANES);
        PipeBarrier<PIPE_V>();
        Compare(bits_, tmp_, mag_, CMPMODE::EQ, LANES);
        PipeBarrier<PIPE_V>();
        Select(u_, bits_, u_, 0.0f, SELMODE::VSEL_TENSOR_SCALAR_MODE, LANES);
        PipeBarrier<PIPE_V>();
        Cast(u16_, u_, RoundMode::CAST_RINT, LANES);  // exact: u is an FP16 number
        PipeBarrier<PIPE_V>();
    }

    // K' = K - u into the K' region and (u, K^) into the centres. Frees x and out.
    __aicore__ inline void WriteCentred(const KeyBlock& kb, uint32_t col, LocalTensor<half>& x,
                                        LocalTensor<half>& out) {
        // exact: every row's block minus the one block u (source-1 strides 0)
        Sub(out, x, u16_, (uint64_t)128, (uint8_t)(BLOCK_KV / 8), BinaryRepeatParams(1, 1, 0, 8, 8, 0));
        inQue_.FreeTensor(x);
        LocalTensor<half> uk = smallQue_.template AllocTensor<half>();
        Muls(uk, u16_, (half)1.0f, (int32_t)FRACTAL);
        Cast(uk[FRACTAL], kbar_, RoundMode::CAST_RINT, FRACTAL);  // exact: K^ is an FP16 number
        outQue_.EnQue(out);
        out = outQue_.template DeQue<half>();
        smallQue_.EnQue(uk);
        uk = smallQue_.template DeQue<half>();
        DataCopy(kShiftGm_[KShiftIndex(t_, kb.b, kb.h, kb.j) + col], out, StripRows(kb.rows));
        const uint64_t centre = CentreIndex(t_, kb.b, kb.h, kb.j) + col;
        DataCopy(centreGm_[centre], uk, FRACTAL);
        DataCopy(centreGm_[centre + t_.headDim], uk[FRACTAL], FRACTAL);
        outQue_.FreeTensor(out);
        smallQue_.FreeTensor(uk);
    }

    const PasaTilingData& t_;
    GM_ADDR workspace_;
    InQ& inQue_;
    OutQ& outQue_;
    SmallQ& smallQue_;
    LocalTensor<uint8_t> bits_;
    KvRows keys_;
    GlobalTensor<half> kShiftGm_, centreGm_;
    GlobalTensor<float> sumGm_;
    LocalTensor<float> kmax_, kmin_, kbar_, absMin_, absMax_, mag_, neg_, u_, tmp_;
    LocalTensor<half> h16_, u16_;
};

}  // namespace pasa_kernel

#endif  // PASA_CENTRE_KEYS_H
