// Cube-core (AIC) primitives shared by the K' pre-pass and the attention loop: GM rows -> L1 (ND->NZ,
// short tiles padded with copies of their last row), L1 -> L0A/L0B fractal loads, Mmad over K chunks
// with FP32 accumulation in L0C, and Fixpipe L0C -> GM (NZ -> ND, FP32 -> FP16 or FP32 kept).
//
// Fractal formats (Atlas A2): L1 holds NZ (16-column strips, rows of 16 elements); L0A wants zZ
// (fractals row-major over (m/16, k/16), each fractal row-major); L0B wants nZ (fractals row-major
// over (k/16, n/16), each fractal stored n-major); L0C is NZ.
#ifndef PASA_CUBE_OPS_H
#define PASA_CUBE_OPS_H

#include "pasa_common.h"

namespace pasa_kernel {

// How the right operand B (K x N) sits in L1.
enum class BLayout {
    TRANSPOSED,  // L1 holds B^T (N rows of K), e.g. K' for S' = Q K'^T: fractals are already nZ
    ROWS,        // L1 holds B (K rows of N), e.g. V or K: each fractal is transposed on the way to L0B
};

class CubeOps {
public:
    // L1, L0A and L0C as pasa_buffer_plan.h plans them; L0B as two ping-pong halves.
    __aicore__ inline void Init(TPipe* pipe, const AicL1Plan& l1, const AicL0aPlan& l0a, const AicL0cPlan& l0c) {
        pipe->InitBuffer(qL1_, 1, l1.qBytes);
        pipe->InitBuffer(kL1_, 2, l1.kBytes);
        pipe->InitBuffer(vL1_, 2, l1.vBytes);
        pipe->InitBuffer(pL1_, 2, l1.pBytes);
        if (l0a.queryBytes > 0) pipe->InitBuffer(queryL0a_, 1, l0a.queryBytes);
        pipe->InitBuffer(l0a_, l0a.operandBuffers, l0a.operandBytes);
        pipe->InitBuffer(l0b_, 2, L0_HALF_BYTES);
        pipe->InitBuffer(l0c_, l0c.scoreBuffers, l0c.scoreBufferBytes);
        if (l0c.accBytes > 0) pipe->InitBuffer(sums_, 1, l0c.accBytes);
        if (l1.valueExtraBytes > 0) pipe->InitBuffer(valueExtraL1_, 1, l1.valueExtraBytes);
    }

    TQue<TPosition::A1, 1> qL1_;   // the query block (pasa_rs: Q^ and its augmented column)
    TQue<TPosition::B1, 1> kL1_;   // K' (PASA), K (FlashAttention, and PASA's pre-pass)
    TQue<TPosition::B1, 1> vL1_;   // V
    TQue<TPosition::A1, 1> pL1_;   // P (M of PASA's pre-pass, a stripe of L in pasa_rs's)
    TQue<TPosition::CO1, 1> sums_;  // fp32_frame's [O | l], summed across the blocks of a segment
    TQue<TPosition::B1, 1> valueExtraL1_;  // fp32_frame's column of ones beside every V tile (128 x 16, NZ)
    TQue<TPosition::A2, 1> queryL0a_;      // fp32_frame's Q, held in L0A for a task

    // rows x cols FP16 from GM (row stride srcStride elements) into a fresh L1 tile of `que` in NZ
    // with rowsPad rows; rows [rows, rowsPad) repeat row rows-1 so that no operand row is garbage
    // (the tail KV block of PASA is padded exactly this way; padded query/P rows are discarded).
    template <class Q>
    __aicore__ inline LocalTensor<half> LoadRows(Q& que, const GlobalTensor<half>& src, uint32_t rows,
                                                 uint32_t rowsPad, uint32_t cols, uint64_t srcStride) {
        LocalTensor<half> dst = que.template AllocTensor<half>();
        CopyRows(dst, src, rows, rowsPad, cols, srcStride);
        que.EnQue(dst);
        return que.template DeQue<half>();
    }

    // LoadRows's copy into a tile the caller holds: dst's NZ strips are rowsPad rows apart, so dst may be
    // a later strip of a wider tile (pasa_rs writes the augmented column of its Q^ tile this way). A tail's
    // padding rows repeat its last row.
    __aicore__ inline void CopyRows(const LocalTensor<half>& dst, const GlobalTensor<half>& src, uint32_t rows,
                                    uint32_t rowsPad, uint32_t cols, uint64_t srcStride) {
        CopyRowsNz(dst, 0, src, rows, rowsPad, cols, srcStride);
        PadRowsNz(dst, rows, rowsPad, src[(uint64_t)(rows - 1) * srcStride], cols, srcStride);
    }

    // rows x cols FP16 from GM (row stride srcStride elements) into rows [row0, row0 + rows) of an
    // L1 tile in NZ with rowsPad rows: one DataCopy.
    __aicore__ inline void CopyRowsNz(const LocalTensor<half>& dst, uint32_t row0, const GlobalTensor<half>& src,
                                      uint32_t rows, uint32_t rowsPad, uint32_t cols, uint64_t srcStride) {
        Nd2NzParams p;
        p.ndNum = 1;
        p.nValue = rows;
        p.dValue = cols;
        p.srcNdMatrixStride = 0;
        p.srcDValue = srcStride;
        p.dstNzC0Stride = rowsPad;
        p.dstNzNStride = 1;
        p.dstNzMatrixStride = 0;
        DataCopy(dst[row0 * FRACTAL], src, p);
    }

    // Rows [rows, rowsPad) of an NZ tile with rowsPad rows, each a copy of the GM row `lastRow`: one
    // DataCopy of rowsPad - rows one-row matrices, all read from lastRow (srcNdMatrixStride 0), written
    // to consecutive NZ rows (16 elements apart). None when rows == rowsPad.
    __aicore__ inline void PadRowsNz(const LocalTensor<half>& dst, uint32_t rows, uint32_t rowsPad,
                                     const GlobalTensor<half>& lastRow, uint32_t cols, uint64_t srcStride) {
        if (rowsPad <= rows) return;
        Nd2NzParams r;
        r.ndNum = rowsPad - rows;
        r.nValue = 1;
        r.dValue = cols;
        r.srcNdMatrixStride = 0;
        r.srcDValue = srcStride;
        r.dstNzC0Stride = rowsPad;
        r.dstNzNStride = 1;
        r.dstNzMatrixStride = FRACTAL;
        DataCopy(dst[rows * FRACTAL], lastRow, r);
    }

    // C (mp x n, L0C) = A (mp x k, NZ in L1 with mp rows) * B, K processed in chunks of kc.
    // B: TRANSPOSED: NZ of n rows (== bRows) x k columns; ROWS: NZ of bRows (>= k) rows, columns [n0, n0 + n).
    __aicore__ inline LocalTensor<float> Gemm(const LocalTensor<half>& a, uint32_t mp, uint32_t k,
                                              const LocalTensor<half>& b, BLayout layout, uint32_t bRows,
                                              uint32_t n, uint32_t n0, uint32_t kc) {
        LocalTensor<float> c = l0c_.AllocTensor<float>();
        for (uint32_t k0 = 0; k0 < k; k0 += kc) {
            const uint32_t kLen = MinU(kc, k - k0);
            LocalTensor<half> a2 = LoadA(a, mp, 0, mp, k0, kLen);
            LocalTensor<half> b2 = LoadB(b, layout, bRows, n, n0, k0, kLen);
            a2 = l0a_.DeQue<half>();
            b2 = l0b_.DeQue<half>();
            Multiply(c, a2, b2, mp, n, kLen, k0 == 0);
            l0a_.FreeTensor(a2);
            l0b_.FreeTensor(b2);
        }
        l0c_.EnQue(c);
        return l0c_.DeQue<float>();
    }

    // Rows [row0, row0 + m) of A (NZ in L1 with mp rows), columns [k0, k0 + kLen), into a fresh L0A buffer (zZ) of
    // `que` (the operand halves unless said), enqueued: DeQue it from that queue before the product.
    __aicore__ inline LocalTensor<half> LoadA(const LocalTensor<half>& a, uint32_t mp, uint32_t row0, uint32_t m,
                                              uint32_t k0, uint32_t kLen) {
        return LoadA(l0a_, a, mp, row0, m, k0, kLen);
    }
    __aicore__ inline LocalTensor<half> LoadA(TQue<TPosition::A2, 1>& que, const LocalTensor<half>& a, uint32_t mp,
                                              uint32_t row0, uint32_t m, uint32_t k0, uint32_t kLen) {
        LocalTensor<half> a2 = que.AllocTensor<half>();
        for (uint32_t mb = 0; mb < m / FRACTAL; ++mb)
            LoadFractals(a2[mb * kLen * FRACTAL], a, (k0 / FRACTAL) * (mp / FRACTAL) + row0 / FRACTAL + mb,
                         kLen / FRACTAL, mp / FRACTAL, false);
        que.EnQue(a2);
        return a2;
    }

    // Rows [k0, k0 + kLen) of B, columns [n0, n0 + n) (TRANSPOSED: B^T's rows), into a fresh L0B buffer (nZ),
    // enqueued.
    __aicore__ inline LocalTensor<half> LoadB(const LocalTensor<half>& b, BLayout layout, uint32_t bRows, uint32_t n,
                                              uint32_t n0, uint32_t k0, uint32_t kLen) {
        LocalTensor<half> b2 = l0b_.AllocTensor<half>();
        if (layout == BLayout::TRANSPOSED && n == bRows) {  // every row: the fractals in one run
            LoadFractals(b2, b, (k0 / FRACTAL) * (bRows / FRACTAL), (kLen / FRACTAL) * (n / FRACTAL), 1, false);
        } else if (layout == BLayout::TRANSPOSED) {  // rows [n0, n0 + n): a run per 16 columns of K
            for (uint32_t kb = 0; kb < kLen / FRACTAL; ++kb)
                LoadFractals(b2[kb * n * FRACTAL], b, (k0 / FRACTAL + kb) * (bRows / FRACTAL) + n0 / FRACTAL,
                             n / FRACTAL, 1, false);
        } else {
            for (uint32_t kb = 0; kb < kLen / FRACTAL; ++kb)
                LoadFractals(b2[kb * n * FRACTAL], b, (n0 / FRACTAL) * (bRows / FRACTAL) + k0 / FRACTAL + kb,
                             n / FRACTAL, bRows / FRACTAL, true);
        }
        l0b_.EnQue(b2);
        return b2;
    }

    // One Load2D run from L1 to L0A/L0B: `repeats` fractals, the first at fractal `start` of src and each next one
    // `stride` fractals on, written back to back from dst (no gap); each transposed on the way where `transpose`
    // (ROWS-layout B into nZ).
    __aicore__ inline void LoadFractals(const LocalTensor<half>& dst, const LocalTensor<half>& src, uint32_t start,
                                        uint32_t repeats, uint32_t stride, bool transpose) {
        // (startIndex, repeatTimes, srcStride, sid, dstGap, ifTranspose, addrMode)
        LoadData(dst, src, LoadData2DParams(start, repeats, stride, 0, 0, transpose, 0));
    }

    // C (m x n, an NZ tile of m rows in L0C) = A2 B2, or C += A2 B2 where init is false (the sum rounded once to
    // FP32 per call, added to C in FP32). A small tile is ordered before the next Mmad, which may accumulate into
    // it, unless the caller says that the next one does not (`ordered` false: it writes other columns of L0C, and a
    // later call orders both).
    __aicore__ inline void Multiply(const LocalTensor<float>& c, const LocalTensor<half>& a2,
                                    const LocalTensor<half>& b2, uint32_t m, uint32_t n, uint32_t k, bool init,
                                    bool ordered = true) {
        MmadParams mm;
        mm.m = m;
        mm.n = n;
        mm.k = k;
        mm.cmatrixInitVal = init;
        Mmad(c, a2, b2, mm);
        if (ordered && (m / FRACTAL) * (n / FRACTAL) < 10) PipeBarrier<PIPE_M>();  // small tiles: order the K
                                                                                    // accumulation
    }

    __aicore__ inline TQue<TPosition::A2, 1>& L0A() { return l0a_; }
    __aicore__ inline TQue<TPosition::B2, 1>& L0B() { return l0b_; }
    __aicore__ inline TQue<TPosition::CO1, 1>& L0C() { return l0c_; }

    // First mRows rows (n columns) of C (mp rows in L0C) to GM rows of dstRowLen elements, as OutT
    // (FP16: Fixpipe's F322F16, round to nearest even; FP32: unchanged). Frees C.
    template <typename OutT>
    __aicore__ inline void ToGm(const GlobalTensor<OutT>& dst, LocalTensor<float>& c, uint32_t mp, uint32_t mRows,
                                uint32_t n, uint32_t dstRowLen) {
        CopyOut(dst, c, mp, mRows, n, dstRowLen);
        l0c_.FreeTensor(c);
    }

    // ToGm's Fixpipe alone: C stays with the caller.
    template <typename OutT>
    __aicore__ inline void CopyOut(const GlobalTensor<OutT>& dst, const LocalTensor<float>& c, uint32_t mp,
                                   uint32_t mRows, uint32_t n, uint32_t dstRowLen) {
        FixpipeParamsV220 fp;
        fp.nSize = n;
        fp.mSize = mRows;
        fp.srcStride = mp;
        fp.dstStride = dstRowLen;
        fp.quantPre = sizeof(OutT) == 2 ? QuantMode_t::F322F16 : QuantMode_t::NoQuant;
        fp.ndNum = 1;
        Fixpipe<OutT, float, CFG_ROW_MAJOR>(dst, c, fp);
    }

    // Row `row` (n columns) of C (mp rows in L0C) to GM as FP32. Frees C.
    __aicore__ inline void RowToGm(const GlobalTensor<float>& dst, LocalTensor<float>& c, uint32_t mp, uint32_t row,
                                   uint32_t n) {
        CopyOut(dst, c[row * FRACTAL], mp, 1, n, n);
        l0c_.FreeTensor(c);
    }

private:
    TQue<TPosition::A2, 1> l0a_;
    TQue<TPosition::B2, 1> l0b_;
    TQue<TPosition::CO1, 1> l0c_;
};

}  // namespace pasa_kernel

#endif  // PASA_CUBE_OPS_H
