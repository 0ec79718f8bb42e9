// Vector APIs: the repeat/stride/mask machinery against explicitly written index loops, the
// reductions' output layout, Brcb, Compare/Select; Cast and Exp/Ln values are saved for numpy.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "harness.h"

using namespace AscendC;
using hm_test::OnAiv;

namespace {
// UB scratch of `bytes` as one VECCALC buffer.
struct Ub {
    TPipe pipe;
    TBuf<TPosition::VECCALC> buf;
    explicit Ub(uint32_t bytes) { pipe.InitBuffer(buf, bytes); }
    template <typename T>
    LocalTensor<T> At(uint32_t byteOffset, uint32_t elems) { return buf.GetWithOffset<T>(elems, byteOffset); }
};
// The scalar unit's UB writes before the vector instructions that read them, and the vector instructions'
// results before the scalar reads of them (hazard.h).
void ScalarToVector() {
    SetFlag<HardEvent::S_V>(EVENT_ID0);
    WaitFlag<HardEvent::S_V>(EVENT_ID0);
}
void VectorToScalar() {
    SetFlag<HardEvent::V_S>(EVENT_ID0);
    WaitFlag<HardEvent::V_S>(EVENT_ID0);
}
template <typename T>
void Fill(const LocalTensor<T>& t, const std::vector<T>& v) {
    for (size_t i = 0; i < v.size(); ++i) t.SetValue(i, v[i]);
    ScalarToVector();
}
}  // namespace

HM_CASE(vec_binary_repeat_strides) {
    // Add, half, continuous mask 100 of 128 lanes, 3 repeats; src0 every other block (blk 2, rep 16),
    // src1 contiguous (rep 8), dst blk 1 rep 10. Reference: explicit loops over repeat/block/element.
    OnAiv([] {
        Ub ub(64 * 1024);
        auto a = hm_test::RandomHalf(16 * 48, -8, 8, 3), b = hm_test::RandomHalf(16 * 24, -8, 8, 4);
        LocalTensor<half> s0 = ub.At<half>(0, a.size()), s1 = ub.At<half>(4096, b.size());
        LocalTensor<half> d = ub.At<half>(8192, 16 * 30);
        Fill(s0, a);
        Fill(s1, b);
        Duplicate(d, half(-100), 16 * 30);
        PipeBarrier<PIPE_V>();
        Add(d, s0, s1, 100, 3, BinaryRepeatParams(1, 2, 1, 10, 16, 8));
        VectorToScalar();
        for (int r = 0; r < 3; ++r)
            for (int blk = 0; blk < 8; ++blk)
                for (int e = 0; e < 16; ++e) {
                    const int lane = blk * 16 + e;
                    const half got = d.GetValue(r * 10 * 16 + blk * 16 + e);
                    if (lane >= 100) {
                        HM_CHECK(got == half(-100), "masked lane untouched");
                        continue;
                    }
                    const half x = a[r * 16 * 16 + blk * 2 * 16 + e], y = b[r * 8 * 16 + blk * 16 + e];
                    HM_CHECK(got == static_cast<half>(double(x) + double(y)), "lane value");
                }
    });
}

HM_CASE(vec_bitmask_float_and_scalar_ops) {
    // Mul/Muls/Maxs on float (64 lanes) with a bit mask enabling the odd lanes; 2 repeats.
    OnAiv([] {
        Ub ub(8192);
        std::vector<float> a(128), b(128);
        for (int i = 0; i < 128; ++i) a[i] = 0.5f * i - 20, b[i] = 1.5f - 0.01f * i;
        LocalTensor<float> s0 = ub.At<float>(0, 128), s1 = ub.At<float>(512, 128);
        LocalTensor<float> d = ub.At<float>(1024, 128), e = ub.At<float>(1536, 128);
        Fill(s0, a);
        Fill(s1, b);
        Duplicate(d, 7.0f, 128);
        Duplicate(e, 7.0f, 128);
        PipeBarrier<PIPE_V>();
        uint64_t mask[2] = {0xAAAAAAAAAAAAAAAAull, 0};
        Mul(d, s0, s1, mask, 2, BinaryRepeatParams());
        Maxs(e, s0, 3.0f, mask, 2, UnaryRepeatParams());
        VectorToScalar();
        for (int i = 0; i < 128; ++i) {
            const bool on = (i % 64) % 2 == 1;
            HM_CHECK(d.GetValue(i) == (on ? a[i] * b[i] : 7.0f), "Mul lane " + std::to_string(i));
            HM_CHECK(e.GetValue(i) == (on ? std::max(a[i], 3.0f) : 7.0f), "Maxs lane " + std::to_string(i));
        }
        Muls(d, s0, -2.0f, 128);
        Adds(e, s0, 0.25f, 128);
        VectorToScalar();
        for (int i = 0; i < 128; ++i) HM_CHECK(d.GetValue(i) == -2 * a[i] && e.GetValue(i) == a[i] + 0.25f, "count form");
    });
}

HM_CASE(vec_cast_rounding) {
    // float -> half in every RoundMode over values that hit ties, overflow and subnormals; saved for numpy.
    std::vector<float> in;
    for (float base : {1.0f, 1000.0f, 0.001f, 65504.0f, 6.0e-8f}) {
        for (int k = -3; k <= 3; ++k) {
            // exact half values, half-way points and quarter points between neighbours
            const half h = static_cast<half>(base);
            const float ulp = std::ldexp(1.0f, std::max(std::ilogb(float(h)) - 10, -24));  // half spacing at h
            in.push_back(float(h) + ulp * (0.5f * k));
            in.push_back(-(float(h) + ulp * (0.25f * k)));
        }
    }
    in.push_back(70000.0f);
    in.push_back(-1e-9f);
    while (in.size() % 64) in.push_back(0.1f * in.size());
    const RoundMode modes[] = {RoundMode::CAST_NONE, RoundMode::CAST_RINT, RoundMode::CAST_FLOOR,
                               RoundMode::CAST_CEIL, RoundMode::CAST_ROUND, RoundMode::CAST_TRUNC, RoundMode::CAST_ODD};
    std::vector<half> out(in.size() * 7);
    std::vector<float> back(in.size());
    OnAiv([&] {
        Ub ub(16384);
        LocalTensor<float> src = ub.At<float>(0, in.size());
        LocalTensor<half> dst = ub.At<half>(4096, in.size());
        LocalTensor<float> f = ub.At<float>(8192, in.size());
        Fill(src, in);
        for (int m = 0; m < 7; ++m) {
            // the repeat form for half the modes: 64 lanes per repeat, dst rep stride 4 blocks (half)
            if (m % 2) Cast(dst, src, modes[m], 64, static_cast<uint8_t>(in.size() / 64), UnaryRepeatParams(1, 1, 4, 8));
            else Cast(dst, src, modes[m], in.size());
            VectorToScalar();
            for (size_t i = 0; i < in.size(); ++i) out[m * in.size() + i] = dst.GetValue(i);
        }
        Cast(f, dst, RoundMode::CAST_NONE, in.size());  // half -> float is exact
        VectorToScalar();
        for (size_t i = 0; i < in.size(); ++i) back[i] = f.GetValue(i);
    });
    hm_test::Save("cast_in", in);
    hm_test::Save("cast_out", out);
    hm_test::Save("cast_back", back);
}

HM_CASE(vec_exp_ln_values) {
    std::vector<half> x = hm_test::RandomHalf(1024, -12, 11, 5), y = hm_test::RandomHalf(1024, 0.001f, 60000, 6);
    std::vector<half> ex(1024), ln(1024);
    OnAiv([&] {
        Ub ub(8192);
        LocalTensor<half> a = ub.At<half>(0, 1024), b = ub.At<half>(2048, 1024);
        Fill(a, x);
        Exp(a, a, 1024);
        VectorToScalar();
        for (int i = 0; i < 1024; ++i) ex[i] = a.GetValue(i);
        Fill(b, y);
        Ln(b, b, 128, 8, UnaryRepeatParams());
        VectorToScalar();
        for (int i = 0; i < 1024; ++i) ln[i] = b.GetValue(i);
    });
    hm_test::Save("exp_in", x);
    hm_test::Save("exp_out", ex);
    hm_test::Save("ln_in", y);
    hm_test::Save("ln_out", ln);
}

HM_CASE(vec_whole_reduce_layout) {
    // 4 repeats of 128 halves with srcRepStride 8; WholeReduceMax (value,index) / only value, and
    // WholeReduceSum with a 64-lane mask; dstRepStride 1 = packed outputs.
    OnAiv([] {
        Ub ub(16384);
        auto v = hm_test::RandomHalf(512, -1000, 1000, 7);
        LocalTensor<half> s = ub.At<half>(0, 512), d = ub.At<half>(2048, 16), e = ub.At<half>(2080, 16);
        LocalTensor<float> f = ub.At<float>(4096, 256), fs = ub.At<float>(5120, 16);
        Fill(s, v);
        WholeReduceMax(d, s, 128, 4, 1, 1, 8);
        WholeReduceMax(e, s, 128, 4, 1, 1, 8, ReduceOrder::ORDER_ONLY_VALUE);
        VectorToScalar();
        for (int r = 0; r < 4; ++r) {
            int best = 0;
            for (int l = 1; l < 128; ++l) if (v[r * 128 + l] > v[r * 128 + best]) best = l;
            uint16_t idxBits;
            const half idx = d.GetValue(2 * r + 1);
            std::memcpy(&idxBits, &idx, 2);
            HM_CHECK(d.GetValue(2 * r) == v[r * 128 + best] && idxBits == best, "max value/index of repeat");
            HM_CHECK(e.GetValue(r) == v[r * 128 + best], "ORDER_ONLY_VALUE packs values");
        }
        for (int i = 0; i < 256; ++i) f.SetValue(i, float(i % 7) - 2.5f);
        ScalarToVector();
        WholeReduceSum(fs, f, 32, 4, 1, 1, 8);  // float: first 32 of 64 lanes per repeat
        VectorToScalar();
        for (int r = 0; r < 4; ++r) {
            double sum = 0;
            for (int l = 0; l < 32; ++l) sum += float((r * 64 + l) % 7) - 2.5f;
            HM_CHECK(fs.GetValue(r) == float(sum), "sum of repeat");
        }
        ReduceMax(d, s, e, 300, true);
        VectorToScalar();
        int best = 0;
        for (int i = 1; i < 300; ++i) if (v[i] > v[best]) best = i;
        uint16_t idxBits;
        const half idx = d.GetValue(1);
        std::memcpy(&idxBits, &idx, 2);
        HM_CHECK(d.GetValue(0) == v[best] && idxBits == best, "ReduceMax value and index");
        ReduceSum(fs, f, f, 100);
        VectorToScalar();
        double sum = 0;
        for (int i = 0; i < 100; ++i) sum += float(i % 7) - 2.5f;
        HM_CHECK(fs.GetValue(0) == float(sum), "ReduceSum");
    });
}

HM_CASE(vec_block_reduce_max_layout) {
    // BlockReduceMax, float: 3 repeats of 8 blocks (srcRepStride 8, dstRepStride 1: the results packed), then a
    // bit mask of lane 0 and lane 5 of blocks 0-2 only (blocks 3-7 inactive: their results keep what was there),
    // 2 repeats with srcBlkStride 2, srcRepStride 16, dstRepStride 2; half: one repeat of 8 blocks of 16.
    OnAiv([] {
        Ub ub(16384);
        const auto v = hm_test::RandomHalf(512, -1000, 1000, 21);
        LocalTensor<float> s = ub.At<float>(0, 512), d = ub.At<float>(4096, 64);
        LocalTensor<half> h = ub.At<half>(8192, 128), hd = ub.At<half>(8448, 16);
        for (int i = 0; i < 512; ++i) s.SetValue(i, float(v[i]));
        for (int i = 0; i < 128; ++i) h.SetValue(i, v[i]);
        for (int i = 0; i < 64; ++i) d.SetValue(i, -7.0f);
        ScalarToVector();
        BlockReduceMax(d, s, 3, 64, 1, 1, 8);
        VectorToScalar();
        for (int r = 0; r < 3; ++r)
            for (int b = 0; b < 8; ++b) {
                float best = s.GetValue(r * 64 + b * 8);
                for (int l = 1; l < 8; ++l) best = std::max(best, s.GetValue(r * 64 + b * 8 + l));
                HM_CHECK(d.GetValue(r * 8 + b) == best, "max of each block, results packed");
            }
        HM_CHECK(d.GetValue(24) == -7.0f, "nothing written past the last repeat");
        const uint64_t lanes[2] = {0x2121ull | (0x21ull << 16), 0};  // lanes 0 and 5 of blocks 0, 1, 2
        BlockReduceMax(d[32], s, 2, lanes, 2, 2, 16);
        BlockReduceMax(hd, h, 1, 128, 1, 1, 8);
        VectorToScalar();
        for (int r = 0; r < 2; ++r)
            for (int b = 0; b < 8; ++b) {
                const int at = r * 128 + b * 16;  // srcBlkStride 2: block b of repeat r at 2b blocks
                const float want = b < 3 ? std::max(s.GetValue(at), s.GetValue(at + 5)) : -7.0f;
                HM_CHECK(d.GetValue(32 + r * 16 + b) == want, "active lanes only; an inactive block is not written");
            }
        for (int b = 0; b < 8; ++b) {
            half best = v[b * 16];
            for (int l = 1; l < 16; ++l) best = v[b * 16 + l] > best ? v[b * 16 + l] : best;
            HM_CHECK(hd.GetValue(b) == best, "half: 16 lanes a block");
        }
    });
}

// BlockReduceMax in place with the results of repeat 0 on the source of repeat 1 (通用地址重叠约束).
HM_CASE(misuse_block_reduce_result_on_a_later_source) {
    OnAiv([] {
        Ub ub(4096);
        LocalTensor<float> t = ub.At<float>(0, 512);
        BlockReduceMax(t[64], t, 2, 64, 1, 1, 8);
    });
}

HM_CASE(vec_brcb_duplicate_compare_select) {
    OnAiv([] {
        Ub ub(32768);
        LocalTensor<float> s = ub.At<float>(0, 16), d = ub.At<float>(1024, 8 * 32);
        for (int i = 0; i < 16; ++i) s.SetValue(i, float(i) + 0.5f);
        ScalarToVector();
        // Brcb: 2 repeats of 8 elements, each to one 8-float block; blocks 2 apart, repeats 16 apart.
        Duplicate(d, -1.0f, 256);
        PipeBarrier<PIPE_V>();
        Brcb(d, s, 2, BrcbRepeatParams(2, 16));
        VectorToScalar();
        for (int r = 0; r < 2; ++r)
            for (int j = 0; j < 8; ++j)
                for (int e = 0; e < 8; ++e) {
                    HM_CHECK(d.GetValue((r * 16 + j * 2) * 8 + e) == float(r * 8 + j) + 0.5f, "Brcb block");
                    HM_CHECK(d.GetValue((r * 16 + j * 2 + 1) * 8 + e) == -1.0f, "Brcb gap");
                }
        // Duplicate repeat form: 2 repeats, 16 lanes, block stride 1, repeat stride 4 (floats: 8 per block)
        LocalTensor<float> g = ub.At<float>(2048, 64);
        Duplicate(g, 0.0f, 64);
        PipeBarrier<PIPE_V>();
        Duplicate(g, 3.0f, 16, 2, 1, 4);
        VectorToScalar();
        for (int i = 0; i < 64; ++i) HM_CHECK(g.GetValue(i) == ((i % 32) < 16 ? 3.0f : 0.0f), "Duplicate repeat");
        // Compare (LT) then Select: where a < b take a, else the scalar 9.
        LocalTensor<half> a = ub.At<half>(4096, 256), b = ub.At<half>(4608, 256), o = ub.At<half>(5120, 256);
        LocalTensor<uint8_t> m = ub.At<uint8_t>(6144, 32);
        auto av = hm_test::RandomHalf(256, -1, 1, 8), bv = hm_test::RandomHalf(256, -1, 1, 9);
        Fill(a, av);
        Fill(b, bv);
        Compare(m, a, b, CMPMODE::LT, 256);
        PipeBarrier<PIPE_V>();
        Select(o, m, a, half(9), SELMODE::VSEL_TENSOR_SCALAR_MODE, 256);
        VectorToScalar();
        for (int i = 0; i < 256; ++i) {
            HM_CHECK(((m.GetValue(i / 8) >> (i % 8)) & 1) == (av[i] < bv[i]), "Compare bit");
            HM_CHECK(o.GetValue(i) == (av[i] < bv[i] ? av[i] : half(9)), "Select");
        }
        CompareScalar(m, a, half(0), CMPMODE::GE, 256);
        PipeBarrier<PIPE_V>();
        Select(o, m, a, b, SELMODE::VSEL_TENSOR_TENSOR_MODE, 256);
        VectorToScalar();
        for (int i = 0; i < 256; ++i) HM_CHECK(o.GetValue(i) == (av[i] >= half(0) ? av[i] : bv[i]), "Select tensors");
    });
}

HM_CASE(misuse_vector_operand_misaligned) {
    OnAiv([] {
        Ub ub(4096);
        LocalTensor<half> t = ub.At<half>(0, 1024);
        Add(t, t[3], t[512], 128);
    });
}

// Atlas A2 converts half -> float only with CAST_NONE (asc-devkit dav_c220 CastIntrinsicsImpl).
HM_CASE(misuse_cast_round_mode_the_pair_lacks) {
    OnAiv([] {
        Ub ub(4096);
        Cast(ub.At<float>(0, 128), ub.At<half>(1024, 128), RoundMode::CAST_RINT, 128);
    });
}

// Atlas A2 compares int32_t with CMPMODE::EQ only (asc-devkit dav_c220 CheckVcmpvsDtype).
HM_CASE(misuse_compare_int32_other_than_eq) {
    OnAiv([] {
        Ub ub(4096);
        CompareScalar(ub.At<uint8_t>(0, 64), ub.At<int32_t>(1024, 64), int32_t(0), CMPMODE::LT, 64);
    });
}

HM_CASE(vec_reduce_sum_fold) {
    // WholeReduceSum on half rows (mask 128 and 100) and ReduceSum over 300: saved for numpy's fold.
    const auto x = hm_test::RandomHalf(512, -30, 40, 14);
    std::vector<half> full(4), part(4), all(1);
    OnAiv([&] {
        Ub ub(4096);
        LocalTensor<half> s = ub.At<half>(0, 512), d = ub.At<half>(1024, 16), w = ub.At<half>(2048, 512);
        Fill(s, x);
        WholeReduceSum(d, s, 128, 4, 1, 1, 8);
        VectorToScalar();
        for (int r = 0; r < 4; ++r) full[r] = d.GetValue(r);
        WholeReduceSum(d, s, 100, 4, 1, 1, 8);
        VectorToScalar();
        for (int r = 0; r < 4; ++r) part[r] = d.GetValue(r);
        ReduceSum(d, s, w, 300);
        VectorToScalar();
        all[0] = d.GetValue(0);
    });
    hm_test::Save("fold_in", x);
    hm_test::Save("fold_full", full);
    hm_test::Save("fold_part", part);
    hm_test::Save("fold_all", all);
}
