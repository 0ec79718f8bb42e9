// The cube path GM -(Nd2Nz)-> L1 -(LoadData)-> L0A/L0B -(Mmad)-> L0C -(Fixpipe)-> GM, run the way a
// flash-attention kernel uses it: S = A Bt^T (B from an NZ copy of Bt, no transpose, K split over two
// accumulating Mmads, FP16 out) and O = P V (V's fractals transposed by LoadData, FP32 out). The
// arrays are saved and tests/npu/test_host_model.py compares them with numpy matmuls.
#include "harness.h"

using namespace AscendC;

namespace {

constexpr uint32_t M = 30, K = 80, N = 40, K2 = 48, NV = 80;

// ND (rows x cols, row pitch cols) -> NZ in L1 with rows padded to 16.
void ToL1(const LocalTensor<half>& l1, const GlobalTensor<half>& g, uint16_t rows, uint16_t cols) {
    const uint16_t rowsPadded = (rows + 15) / 16 * 16;
    DataCopy(l1, g, Nd2NzParams(1, rows, cols, 0, cols, rowsPadded, 1, 0));
}

// A (m x k, NZ in L1, rows padded to m1*16) chunk of k-fractals [kb0, kb0+kbn) -> zZ in L0A.
void LoadA(const LocalTensor<half>& a2, const LocalTensor<half>& a1, uint32_t m1, uint32_t kb0, uint32_t kbn,
           uint16_t srcStride) {
    for (uint32_t mb = 0; mb < m1; ++mb)
        LoadData(a2[mb * kbn * 256], a1,
                 LoadData2DParams(static_cast<uint16_t>(kb0 * m1 + mb), static_cast<uint8_t>(kbn), srcStride, 0, 0,
                                  false, 0));
}

void Gemms(const half* a, const half* bt, const half* p, const half* v, half* s, float* o, uint16_t aStride) {
    TPipe pipe;
    TBuf<TPosition::A1> l1;
    TBuf<TPosition::A2> l0a;
    TBuf<TPosition::B2> l0b;
    TBuf<TPosition::CO1> l0c;
    pipe.InitBuffer(l1, 32 * 1024);
    pipe.InitBuffer(l0a, 16 * 1024);
    pipe.InitBuffer(l0b, 16 * 1024);
    pipe.InitBuffer(l0c, 16 * 1024);
    GlobalTensor<half> ga, gbt, gp, gv, gs;
    GlobalTensor<float> go;
    ga.SetGlobalBuffer(const_cast<half*>(a), M * K);
    gbt.SetGlobalBuffer(const_cast<half*>(bt), N * K);
    gp.SetGlobalBuffer(const_cast<half*>(p), M * K2);
    gv.SetGlobalBuffer(const_cast<half*>(v), K2 * NV);
    gs.SetGlobalBuffer(s, M * N);
    go.SetGlobalBuffer(o, M * NV);
    LocalTensor<half> aL1 = l1.GetWithOffset<half>(32 * K, 0);
    LocalTensor<half> btL1 = l1.GetWithOffset<half>(48 * K, 8192);
    LocalTensor<half> pL1 = l1.GetWithOffset<half>(32 * K2, 16384);
    LocalTensor<half> vL1 = l1.GetWithOffset<half>(K2 * NV, 20480);
    ToL1(aL1, ga, M, K);
    ToL1(btL1, gbt, N, K);
    ToL1(pL1, gp, M, K2);
    ToL1(vL1, gv, K2, NV);
    LocalTensor<half> a2 = l0a.Get<half>(), b2 = l0b.Get<half>();
    LocalTensor<float> c = l0c.Get<float>();
    // S = A Bt^T, K = 80 as 48 + 32: the second Mmad accumulates onto L0C.
    const uint32_t m1 = 2, n1 = 3;
    uint32_t kb0 = 0;
    for (uint32_t kbn : {3u, 2u}) {
        LoadA(a2, aL1, m1, kb0, kbn, aStride);
        LoadData(b2, btL1, LoadData2DParams(static_cast<uint16_t>(kb0 * n1), static_cast<uint8_t>(kbn * n1), 1, 0, 0, false, 0));
        MmadParams mm(M, N, static_cast<uint16_t>(kbn * 16), 0, false, kb0 == 0);
        Mmad(c, a2, b2, mm);
        kb0 += kbn;
    }
    FixpipeParamsV220 fs(N, M, 32, N, false);
    fs.quantPre = QuantMode_t::F322F16;
    Fixpipe<half, float, CFG_ROW_MAJOR>(gs, c, fs);
    // O = P V: V (K2 x NV) is NZ with K2 rows; L0B needs its fractals transposed.
    LoadA(a2, pL1, m1, 0, K2 / 16, m1);
    for (uint32_t sb = 0; sb < K2 / 16; ++sb)
        LoadData(b2[sb * (NV / 16) * 256], vL1[sb * 256], LoadData2DParams(0, NV / 16, K2 / 16, 0, 0, true, 0));
    Mmad(c, a2, b2, MmadParams(M, NV, K2, 0, false, true));
    Fixpipe<float, float, CFG_ROW_MAJOR>(go, c, FixpipeParamsV220(NV, M, 32, NV, false));
}

}  // namespace

// aStride 2 (= m1) is right; the *_wrong_stride case passes 1 and must give a different S.
static void RunGemms(uint16_t aStride, const char* tag) {
    const auto a = hm_test::RandomHalf(M * K, -2, 2, 10), bt = hm_test::RandomHalf(N * K, -2, 2, 11);
    const auto p = hm_test::RandomHalf(M * K2, 0, 1, 12), v = hm_test::RandomHalf(K2 * NV, -3, 3, 13);
    std::vector<half> s(M * N);
    std::vector<float> o(M * NV);
    hm_test::OnAic([&] { Gemms(a.data(), bt.data(), p.data(), v.data(), s.data(), o.data(), aStride); });
    hm_test::Save("a", a);
    hm_test::Save("bt", bt);
    hm_test::Save("p", p);
    hm_test::Save("v", v);
    hm_test::Save(std::string("s") + tag, s);
    hm_test::Save(std::string("o") + tag, o);
}

HM_CASE(cube_pipeline) { RunGemms(2, ""); }
HM_CASE(cube_pipeline_wrong_stride) { RunGemms(1, "_wrong"); }

HM_CASE(cube_gemv_m1) {
    // m = 1: Mmad reads L0A as ND (GEMV). A row of 32 in L0A as plain elements, B (32 x 16) in nZ.
    const auto a = hm_test::RandomHalf(32, -2, 2, 20), b = hm_test::RandomHalf(32 * 16, -2, 2, 21);
    std::vector<float> c(16);
    hm_test::OnAic([&] {
        TPipe pipe;
        TBuf<TPosition::A2> l0a;
        TBuf<TPosition::B2> l0b;
        TBuf<TPosition::CO1> l0c;
        pipe.InitBuffer(l0a, 1024);
        pipe.InitBuffer(l0b, 1024);
        pipe.InitBuffer(l0c, 1024);
        LocalTensor<half> a2 = l0a.Get<half>(), b2 = l0b.Get<half>();
        for (uint32_t k = 0; k < 32; ++k) a2.SetValue(k, a[k]);
        for (uint32_t k = 0; k < 32; ++k)  // B(k, j) at (k/16)*256 + j*16 + k%16 (N1 = 1)
            for (uint32_t j = 0; j < 16; ++j) b2.SetValue((k / 16) * 256 + j * 16 + k % 16, b[k * 16 + j]);
        LocalTensor<float> l0 = l0c.Get<float>();
        Mmad(l0, a2, b2, MmadParams(1, 16, 32, 0, false, true));
        GlobalTensor<float> g;
        g.SetGlobalBuffer(c.data(), c.size());
        Fixpipe<float, float, CFG_ROW_MAJOR>(g, l0, FixpipeParamsV220(16, 1, 16, 16, false));
    });
    for (uint32_t j = 0; j < 16; ++j) {
        double want = 0;
        for (uint32_t k = 0; k < 32; ++k) want += double(a[k]) * double(b[k * 16 + j]);
        HM_CHECK(c[j] == static_cast<float>(want), "GEMV column " + std::to_string(j));
    }
}

// The documented ranges and alignments of the cube path (cube.h), one case each.
namespace {
struct CubeBuffers {
    TPipe pipe;
    TBuf<TPosition::A1> l1;
    TBuf<TPosition::A2> l0a;
    TBuf<TPosition::B2> l0b;
    TBuf<TPosition::CO1> l0c;
    std::vector<float> out = std::vector<float>(16 * 32, -1.0f);
    GlobalTensor<float> gm;  // out
    CubeBuffers() {
        pipe.InitBuffer(l1, 4096);
        pipe.InitBuffer(l0a, 4096);
        pipe.InitBuffer(l0b, 4096);
        pipe.InitBuffer(l0c, 4096);
        gm.SetGlobalBuffer(out.data(), out.size());
    }
};
}  // namespace

HM_CASE(misuse_load2d_repeat_zero) {
    hm_test::OnAic([] {
        CubeBuffers b;
        LoadData(b.l0a.Get<half>(), b.l1.Get<half>(), LoadData2DParams(0, 0, 1, 0, 0, false, 0));
    });
}

HM_CASE(misuse_load2d_l0_misaligned) {
    hm_test::OnAic([] {
        CubeBuffers b;
        LoadData(b.l0a.Get<half>()[128], b.l1.Get<half>(), LoadData2DParams(0, 1, 1, 0, 0, false, 0));  // 256 B
    });
}

HM_CASE(misuse_mmad_k_beyond_4095) {
    hm_test::OnAic([] {
        CubeBuffers b;
        Mmad(b.l0c.Get<float>(), b.l0a.Get<half>(), b.l0b.Get<half>(), MmadParams(16, 16, 4096, 0, false, true));
    });
}

HM_CASE(misuse_mmad_dst_not_256_elements) {
    hm_test::OnAic([] {
        CubeBuffers b;
        Mmad(b.l0c.Get<float>()[16], b.l0a.Get<half>(), b.l0b.Get<half>(), MmadParams(1, 16, 16, 0, false, true));
    });
}

HM_CASE(misuse_fixpipe_nsize_zero) {
    hm_test::OnAic([] {
        CubeBuffers b;
        Fixpipe<float, float, CFG_ROW_MAJOR>(b.gm, b.l0c.Get<float>(), FixpipeParamsV220(0, 16, 16, 16, false));
    });
}

HM_CASE(misuse_fixpipe_src_misaligned) {
    hm_test::OnAic([] {
        CubeBuffers b;
        Fixpipe<float, float, CFG_ROW_MAJOR>(b.gm, b.l0c.Get<float>()[8], FixpipeParamsV220(16, 1, 16, 16, false));
    });
}

HM_CASE(cube_fixpipe_nz2nd_width_not_multiple_of_16) {
    // NZ2ND takes any nSize in [1, 4095] (the multiple-of-16 rule is NZ out's): 17 columns, as [O | l] of D = 16.
    hm_test::OnAic([] {
        CubeBuffers b;
        LocalTensor<float> c = b.l0c.Get<float>();
        for (uint32_t i = 0; i < 512; ++i) c.SetValue(i, static_cast<float>(i));
        Fixpipe<float, float, CFG_ROW_MAJOR>(b.gm, c, FixpipeParamsV220(17, 16, 16, 32, false));
        // C(i, j) at ((j / 16) * M1 + i / 16) * 256 + (i % 16) * 16 + j % 16, M1 = 1
        const std::vector<float>& out = b.out;
        HM_CHECK(out[3 * 32 + 5] == 3 * 16 + 5 && out[3 * 32 + 16] == 256 + 3 * 16 && out[3 * 32 + 17] == -1.0f,
                 "17 columns per row, the 17th from the second fractal column");
    });
}
