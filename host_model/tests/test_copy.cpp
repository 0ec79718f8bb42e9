// DataCopy / DataCopyPad / Nd2Nz semantics against index formulas written out from the docs.
#include "harness.h"

using namespace AscendC;
using hm_test::OnAic;
using hm_test::OnAiv;

HM_CASE(datacopy_strided_roundtrip) {
    // GM -> UB: 3 bursts of 2 blocks, GM gap 1 block, UB gap 2 blocks; then UB -> GM contiguous.
    const auto src = hm_test::RandomHalf(16 * 12, -4, 4, 1);
    std::vector<half> dst(16 * 12, half(0));
    OnAiv([&] {
        TPipe pipe;
        TQue<TPosition::VECIN, 1> q;
        pipe.InitBuffer(q, 1, 16 * 2 * 12);
        GlobalTensor<half> gs, gd;
        gs.SetGlobalBuffer(const_cast<half*>(src.data()), src.size());
        gd.SetGlobalBuffer(dst.data(), dst.size());
        LocalTensor<half> t = q.AllocTensor<half>();
        DataCopy(t, gs, DataCopyParams(3, 2, 1, 2));
        q.EnQue(t);
        t = q.DeQue<half>();
        // burst n: GM elements [n*48, n*48+32) -> UB elements [n*64, n*64+32)
        for (int n = 0; n < 3; ++n)
            for (int i = 0; i < 32; ++i)
                HM_CHECK(t.GetValue(n * 64 + i) == src[n * 48 + i], "GM->UB burst layout");
        DataCopy(gd, t, DataCopyParams(3, 2, 2, 0));  // UB gap 2 blocks -> GM contiguous
        q.FreeTensor(t);
    });
    for (int n = 0; n < 3; ++n)
        for (int i = 0; i < 32; ++i) HM_CHECK(dst[n * 32 + i] == src[n * 48 + i], "UB->GM compacts the bursts");
    HM_CHECK(dst[96] == half(0), "nothing written past the bursts");
}

HM_CASE(datacopypad_bytes_and_padding) {
    // 3 rows of 5 floats (20 B, not 32-B aligned) with a GM row pitch of 7 floats.
    std::vector<float> src(21), dst(21, -1.0f);
    for (int i = 0; i < 21; ++i) src[i] = float(i);
    OnAiv([&] {
        TPipe pipe;
        TBuf<TPosition::VECCALC> b;
        pipe.InitBuffer(b, 1024);
        GlobalTensor<float> gs, gd;
        gs.SetGlobalBuffer(src.data(), src.size());
        gd.SetGlobalBuffer(dst.data(), dst.size());
        LocalTensor<float> t = b.Get<float>();
        // rightPadding 3 elements with value 9: each UB row = 5 data + 3 pad = 32 B.
        DataCopyPad(t, gs, DataCopyExtParams(3, 20, 8, 0, 0), DataCopyPadExtParams<float>(true, 0, 3, 9.0f));
        for (int r = 0; r < 3; ++r) {
            for (int i = 0; i < 5; ++i) HM_CHECK(t.GetValue(r * 8 + i) == float(r * 7 + i), "data of row");
            for (int i = 5; i < 8; ++i) HM_CHECK(t.GetValue(r * 8 + i) == 9.0f, "padding value");
        }
        // No padding requested: the dummy tail of each 32-B row repeats the row's first element.
        DataCopyPad(t[32], gs, DataCopyExtParams(1, 20, 0, 0, 0), DataCopyPadExtParams<float>(false, 0, 0, 0.0f));
        HM_CHECK(t.GetValue(37) == 0.0f && t.GetValue(39) == 0.0f, "dummy = first element");
        // UB -> GM: 3 rows of 20 B from 32-B UB rows to a GM pitch of 7 floats (8 B gap).
        DataCopyPad(gd, t, DataCopyExtParams(3, 20, 0, 8, 0));
    });
    for (int r = 0; r < 3; ++r) {
        for (int i = 0; i < 5; ++i) HM_CHECK(dst[r * 7 + i] == float(r * 7 + i), "row written");
        if (r < 2) HM_CHECK(dst[r * 7 + 5] == -1.0f && dst[r * 7 + 6] == -1.0f, "gap untouched");
    }
}

HM_CASE(nd2nz_layout_with_strides) {
    // Two 20 x 24 matrices (ND, row pitch 40, matrix pitch 1000) -> NZ with C0Stride 32 (rows padded
    // to 32), NStride 1, matrix stride 2048 elements. Checked element by element against the docs'
    // definition: fractal column c/16 starts at c0Stride*32 B, row n at n*nStride*32 B.
    const auto src = hm_test::RandomHalf(2000, -1, 1, 2);
    std::vector<half> l1(4096);
    OnAic([&] {
        TPipe pipe;
        TQue<TPosition::A1, 1> a1;
        pipe.InitBuffer(a1, 1, 4096 * 2);
        GlobalTensor<half> g;
        g.SetGlobalBuffer(const_cast<half*>(src.data()), src.size());
        LocalTensor<half> t = a1.AllocTensor<half>();
        DataCopy(t, g, Nd2NzParams(2, 20, 24, 1000, 40, 32, 1, 2048));
        for (int i = 0; i < 4096; ++i) l1[i] = t.GetValue(i);
    });
    for (int m = 0; m < 2; ++m)
        for (int n = 0; n < 20; ++n)
            for (int c = 0; c < 32; ++c) {
                const int fractalCol = c / 16, inner = c % 16;
                const half got = l1[m * 2048 + fractalCol * 32 * 16 + n * 16 + inner];
                const half want = c < 24 ? src[m * 1000 + n * 40 + c] : half(0);
                HM_CHECK(got == want, "NZ element (" + std::to_string(m) + "," + std::to_string(n) + "," +
                                          std::to_string(c) + ")");
            }
}

// DataCopy of `count` halves from a GM buffer of 64 into a VECIN tensor of 128 at element `offset`.
static void CopyIn(uint32_t count, uint32_t offset) {
    std::vector<half> gm(64);
    OnAiv([&] {
        TPipe pipe;
        TQue<TPosition::VECIN, 1> q;
        pipe.InitBuffer(q, 1, 256);
        GlobalTensor<half> g;
        g.SetGlobalBuffer(gm.data(), gm.size());
        LocalTensor<half> t = q.AllocTensor<half>();
        DataCopy(t[offset], g, count);
    });
}

HM_CASE(misuse_datacopy_length_not_32b) { CopyIn(10, 0); }
HM_CASE(misuse_datacopy_local_misaligned) { CopyIn(16, 8); }
HM_CASE(misuse_gm_beyond_size) { CopyIn(128, 0); }

HM_CASE(misuse_datacopy_block_count_zero) {
    hm_test::OnAiv([] {
        TPipe pipe;
        TBuf<TPosition::VECCALC> buf;
        pipe.InitBuffer(buf, 256);
        std::vector<half> g(128);
        GlobalTensor<half> gm;
        gm.SetGlobalBuffer(g.data(), g.size());
        DataCopy(buf.Get<half>(), gm, DataCopyParams(0, 1, 0, 0));
    });
}
