// Compare/CompareScalar (one result bit per lane, packed little-endian into the dst bytes: lane i ->
// bit i%8 of byte i/8, repeats packed one after another) and Select (bit 1 takes src0, bit 0 takes
// src1 or the scalar; in the mask/repeat form repeat r reads bits r*lanes .. r*lanes + lanes - 1).
#pragma once
#include "host_model/a2_types.h"
#include "host_model/vector_iter.h"

namespace ascendc_model {

inline bool CompareValues(double a, double b, AscendC::CMPMODE mode) {
    switch (mode) {
        case AscendC::CMPMODE::LT: return a < b;
        case AscendC::CMPMODE::GT: return a > b;
        case AscendC::CMPMODE::EQ: return a == b;
        case AscendC::CMPMODE::LE: return a <= b;
        case AscendC::CMPMODE::GE: return a >= b;
        case AscendC::CMPMODE::NE: return a != b;
    }
    return false;
}

// Bits of lane (r, l) in a packed mask tensor.
struct BitOperand {
    uint8_t* bytes;
    uint64_t Index(const VecIter& it, uint64_t r, uint32_t l) const { return r * it.lanes() + l; }
    bool Get(const VecIter& it, uint64_t r, uint32_t l) const {
        const uint64_t i = Index(it, r, l);
        return (bytes[i / 8] >> (i % 8)) & 1;
    }
    void Set(const VecIter& it, uint64_t r, uint32_t l, bool v) const {
        const uint64_t i = Index(it, r, l);
        bytes[i / 8] = static_cast<uint8_t>(v ? bytes[i / 8] | (1u << (i % 8)) : bytes[i / 8] & ~(1u << (i % 8)));
    }
};
template <typename U>
BitOperand Bits(const std::string& api, const char* role, const AscendC::LocalTensor<U>& t, const VecIter& it) {
    CheckVectorOperand(api, role, t.GetMemory(), t.ByteBegin());
    const uint64_t bits = it.repeats() * it.lanes();
    uint8_t* bytes = t.template ReinterpretCast<uint8_t>().Span(api, 0, (bits + 7) / 8);
    const uint32_t blocks = static_cast<uint32_t>((bits + 8 * kBlockBytes - 1) / (8 * kBlockBytes));
    it.Access(std::string(role) == "dst", {{t.ByteBegin(), t.ByteBegin() + blocks * kBlockBytes}});
    return BitOperand{bytes};
}

// Compare over `it`; src1 is either a tensor operand or a scalar (value of lane 0 ignored).
template <typename U, typename T, class Rhs>
void CompareOp(const std::string& api, const AscendC::LocalTensor<U>& dst, const AscendC::LocalTensor<T>& src0,
               const VecIter& it, Stride s0, AscendC::CMPMODE mode, Rhs rhs) {
    if (it.counted() && (it.lanes() * sizeof(T)) % 256 != 0)
        Fail(api, "count * sizeof(T) must be a multiple of 256 bytes");
    const auto a = Operand(api, "src0", src0, it, s0);
    const BitOperand d = Bits(api, "dst", dst, it);
    it.ForEach([&](uint64_t r, uint32_t l) {
        d.Set(it, r, l, CompareValues(double(a.At(it, r, l)), rhs(r, l), mode));
    });
}

template <typename T, typename U, class Rhs>
void SelectOp(const std::string& api, const AscendC::LocalTensor<T>& dst, const AscendC::LocalTensor<U>& selMask,
              const AscendC::LocalTensor<T>& src0, const VecIter& it, const AscendC::BinaryRepeatParams& p, Rhs rhs) {
    const auto d = Operand(api, "dst", dst, it, {p.dstBlkStride, p.dstRepStride});
    const auto a = Operand(api, "src0", src0, it, {p.src0BlkStride, p.src0RepStride});
    const BitOperand m = Bits(api, "selMask", selMask, it);
    it.ForEach([&](uint64_t r, uint32_t l) { d.At(it, r, l) = m.Get(it, r, l) ? a.At(it, r, l) : rhs(r, l); });
}

}  // namespace ascendc_model

namespace AscendC {

template <typename T, typename U>
void Compare(const LocalTensor<U>& dst, const LocalTensor<T>& src0, const LocalTensor<T>& src1, CMPMODE cmpMode,
             uint32_t count, ascendc_model::Site site = ascendc_model::Site::Here()) {
    ASCENDC_A2_REQUIRE("Compare", T, ASCENDC_A2_COMPARE);
    ASCENDC_A2_REQUIRE("Compare", U, ASCENDC_A2_COMPARE_MASK);
    ascendc_model::a2::CheckCompareMode<T>("Compare", cmpMode);
    const auto it = ascendc_model::VecIter::Count("Compare", count, site);
    const auto b = ascendc_model::Operand("Compare", "src1", src1, it);
    ascendc_model::CompareOp("Compare", dst, src0, it, {}, cmpMode,
                             [&](uint64_t r, uint32_t l) { return double(b.At(it, r, l)); });
}
template <typename T, typename U, bool isSetMask = true>
void Compare(const LocalTensor<U>& dst, const LocalTensor<T>& src0, const LocalTensor<T>& src1, CMPMODE cmpMode,
             const uint64_t mask, uint8_t repeatTime, const BinaryRepeatParams& p,
             ascendc_model::Site site = ascendc_model::Site::Here()) {
    ASCENDC_A2_REQUIRE("Compare", T, ASCENDC_A2_COMPARE);
    ASCENDC_A2_REQUIRE("Compare", U, ASCENDC_A2_COMPARE_MASK);
    ascendc_model::a2::CheckCompareMode<T>("Compare", cmpMode);
    const auto it = ascendc_model::VecIter::Continuous("Compare", mask, repeatTime, sizeof(T), site);
    const auto b = ascendc_model::Operand("Compare", "src1", src1, it, {p.src1BlkStride, p.src1RepStride});
    ascendc_model::CompareOp("Compare", dst, src0, it, {p.src0BlkStride, p.src0RepStride}, cmpMode,
                             [&](uint64_t r, uint32_t l) { return double(b.At(it, r, l)); });
}
template <typename T, typename U>
void CompareScalar(const LocalTensor<U>& dst, const LocalTensor<T>& src0, const T src1Scalar, CMPMODE cmpMode,
                   uint32_t count, ascendc_model::Site site = ascendc_model::Site::Here()) {
    ASCENDC_A2_REQUIRE("CompareScalar", T, ASCENDC_A2_COMPARE);
    ASCENDC_A2_REQUIRE("CompareScalar", U, ASCENDC_A2_COMPARE_SCALAR_MASK);
    ascendc_model::a2::CheckCompareMode<T>("CompareScalar", cmpMode);
    const double s = double(src1Scalar);
    ascendc_model::CompareOp("CompareScalar", dst, src0, ascendc_model::VecIter::Count("CompareScalar", count, site),
                             {}, cmpMode, [s](uint64_t, uint32_t) { return s; });
}
template <typename T, typename U, bool isSetMask = true>
void CompareScalar(const LocalTensor<U>& dst, const LocalTensor<T>& src0, const T src1Scalar, CMPMODE cmpMode,
                   const uint64_t mask, uint8_t repeatTime, const UnaryRepeatParams& p,
                   ascendc_model::Site site = ascendc_model::Site::Here()) {
    ASCENDC_A2_REQUIRE("CompareScalar", T, ASCENDC_A2_COMPARE);
    ASCENDC_A2_REQUIRE("CompareScalar", U, ASCENDC_A2_COMPARE_SCALAR_MASK);
    ascendc_model::a2::CheckCompareMode<T>("CompareScalar", cmpMode);
    const double s = double(src1Scalar);
    ascendc_model::CompareOp("CompareScalar", dst, src0,
                             ascendc_model::VecIter::Continuous("CompareScalar", mask, repeatTime, sizeof(T), site),
                             ascendc_model::SrcStride(p), cmpMode, [s](uint64_t, uint32_t) { return s; });
}

template <typename T, typename U>
void Select(const LocalTensor<T>& dst, const LocalTensor<U>& selMask, const LocalTensor<T>& src0,
            const LocalTensor<T>& src1, SELMODE selMode, uint32_t count,
            ascendc_model::Site site = ascendc_model::Site::Here()) {
    ASCENDC_A2_REQUIRE("Select", T, ASCENDC_A2_SELECT);
    ASCENDC_A2_REQUIRE("Select", U, ASCENDC_A2_SELECT_MASK);
    if (selMode != SELMODE::VSEL_TENSOR_TENSOR_MODE)
        ascendc_model::Fail("Select", "a tensor src1 needs SELMODE::VSEL_TENSOR_TENSOR_MODE");
    const auto it = ascendc_model::VecIter::Count("Select", count, site);
    const auto b = ascendc_model::Operand("Select", "src1", src1, it);
    ascendc_model::SelectOp("Select", dst, selMask, src0, it, BinaryRepeatParams(),
                            [&](uint64_t r, uint32_t l) { return b.At(it, r, l); });
}
template <typename T, typename U>
void Select(const LocalTensor<T>& dst, const LocalTensor<U>& selMask, const LocalTensor<T>& src0, T src1,
            SELMODE selMode, uint32_t count, ascendc_model::Site site = ascendc_model::Site::Here()) {
    ASCENDC_A2_REQUIRE("Select", T, ASCENDC_A2_SELECT);
    ASCENDC_A2_REQUIRE("Select", U, ASCENDC_A2_SELECT_MASK);
    if (selMode != SELMODE::VSEL_TENSOR_SCALAR_MODE)
        ascendc_model::Fail("Select", "a scalar src1 needs SELMODE::VSEL_TENSOR_SCALAR_MODE");
    ascendc_model::SelectOp("Select", dst, selMask, src0, ascendc_model::VecIter::Count("Select", count, site),
                            BinaryRepeatParams(), [src1](uint64_t, uint32_t) { return src1; });
}
// Mask/repeat form. VSEL_TENSOR_TENSOR_MODE: src1 is a tensor; VSEL_TENSOR_SCALAR_MODE: src1[0] is
// the scalar. VSEL_CMPMASK_SPR (mask from the Compare register) is not modelled.
template <typename T, typename U, bool isSetMask = true>
void Select(const LocalTensor<T>& dst, const LocalTensor<U>& selMask, const LocalTensor<T>& src0,
            const LocalTensor<T>& src1, SELMODE selMode, uint64_t mask, uint8_t repeatTime,
            const BinaryRepeatParams& p, ascendc_model::Site site = ascendc_model::Site::Here()) {
    ASCENDC_A2_REQUIRE("Select", T, ASCENDC_A2_SELECT);
    ASCENDC_A2_REQUIRE("Select", U, ASCENDC_A2_SELECT_MASK);
    const auto it = ascendc_model::VecIter::Continuous("Select", mask, repeatTime, sizeof(T), site);
    if (selMode == SELMODE::VSEL_TENSOR_TENSOR_MODE) {
        const auto b = ascendc_model::Operand("Select", "src1", src1, it, {p.src1BlkStride, p.src1RepStride});
        ascendc_model::SelectOp("Select", dst, selMask, src0, it, p,
                                [&](uint64_t r, uint32_t l) { return b.At(it, r, l); });
    } else if (selMode == SELMODE::VSEL_TENSOR_SCALAR_MODE) {
        // the vector unit reads src1[0] itself: no scalar access
        const T s = *src1.Span("Select", 0, 1);
        it.Access(false, {{src1.ByteBegin(), src1.ByteBegin() + ascendc_model::kBlockBytes}});
        ascendc_model::SelectOp("Select", dst, selMask, src0, it, p, [s](uint64_t, uint32_t) { return s; });
    } else {
        ascendc_model::Fail("Select", "SELMODE::VSEL_CMPMASK_SPR is not modelled");
    }
}

}  // namespace AscendC
