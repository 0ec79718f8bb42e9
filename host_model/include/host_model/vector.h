// Elementwise vector APIs (UB only): Duplicate, Adds/Muls/Maxs/Mins, Add/Sub/Mul/Div/Max/Min,
// Exp/Ln/Abs/Sqrt/Reciprocal/Relu, Cast, Compare/CompareScalar, Select. Every API has the count form
// and the (mask, repeatTimes, repeat params) forms, all built on the one VecIter machinery.
// Arithmetic is evaluated in double and rounded once to the result type (round-to-nearest-even), so
// half results are the correctly rounded results of the half inputs (Exp/Ln/Div: of the double result).
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "host_model/a2_types.h"
#include "host_model/vector_iter.h"

namespace ascendc_model {

inline Stride DstStride(const AscendC::UnaryRepeatParams& p) { return {p.dstBlkStride, p.dstRepStride}; }
inline Stride SrcStride(const AscendC::UnaryRepeatParams& p) { return {p.srcBlkStride, p.srcRepStride}; }

template <typename D, typename S, class F>
void UnaryOp(const std::string& api, const AscendC::LocalTensor<D>& dst, const AscendC::LocalTensor<S>& src,
             const VecIter& it, Stride sd, Stride ss, F f) {
    const auto d = Operand(api, "dst", dst, it, sd);
    const auto s = Operand(api, "src", src, it, ss);
    it.ForEach([&](uint64_t r, uint32_t l) { d.At(it, r, l) = f(s.At(it, r, l)); });
}

template <typename T, class F>
void BinaryOp(const std::string& api, const AscendC::LocalTensor<T>& dst, const AscendC::LocalTensor<T>& src0,
              const AscendC::LocalTensor<T>& src1, const VecIter& it, const AscendC::BinaryRepeatParams& p, F f) {
    const auto d = Operand(api, "dst", dst, it, {p.dstBlkStride, p.dstRepStride});
    const auto a = Operand(api, "src0", src0, it, {p.src0BlkStride, p.src0RepStride});
    const auto b = Operand(api, "src1", src1, it, {p.src1BlkStride, p.src1RepStride});
    it.ForEach([&](uint64_t r, uint32_t l) { d.At(it, r, l) = f(a.At(it, r, l), b.At(it, r, l)); });
}

// Conversion with an AscendC RoundMode (see docs/host_model.md for each mode).
template <typename T>
T ConvertRounded(double v, AscendC::RoundMode mode);

template <typename T, typename U>
constexpr uint32_t Widest() { return sizeof(T) > sizeof(U) ? sizeof(T) : sizeof(U); }

template <typename T, typename U>
void CastOp(const AscendC::LocalTensor<T>& dst, const AscendC::LocalTensor<U>& src, AscendC::RoundMode mode,
            const VecIter& it, Stride sd, Stride ss) {
    UnaryOp("Cast", dst, src, it, sd, ss, [mode](U x) { return ConvertRounded<T>(double(x), mode); });
}

template <typename T>
void DuplicateOp(const AscendC::LocalTensor<T>& dst, T value, const VecIter& it, Stride sd) {
    const auto d = Operand("Duplicate", "dst", dst, it, sd);
    it.ForEach([&](uint64_t r, uint32_t l) { d.At(it, r, l) = value; });
}

}  // namespace ascendc_model

// Defines the count form and both mask forms of an elementwise API from one lambda body.
#define ASCENDC_MODEL_BINARY(NAME, TYPES, EXPR)                                                                    \
    template <typename T>                                                                                          \
    void NAME(const LocalTensor<T>& dst, const LocalTensor<T>& src0, const LocalTensor<T>& src1,                   \
              const int32_t& count,                                                                                \
              ascendc_model::Site site = ascendc_model::Site::Here()) {                                            \
        ASCENDC_A2_REQUIRE(#NAME, T, TYPES);                                                                       \
        ascendc_model::BinaryOp(#NAME, dst, src0, src1, ascendc_model::VecIter::Count(#NAME, count, site),         \
                                BinaryRepeatParams(), [](T a, T b) { return ascendc_model::RoundTo<T>(EXPR); });   \
    }                                                                                                              \
    template <typename T, bool isSetMask = true>                                                                   \
    void NAME(const LocalTensor<T>& dst, const LocalTensor<T>& src0, const LocalTensor<T>& src1, uint64_t mask,    \
              const uint8_t repeatTime, const BinaryRepeatParams& p,                                               \
              ascendc_model::Site site = ascendc_model::Site::Here()) {                                            \
        ASCENDC_A2_REQUIRE(#NAME, T, TYPES);                                                                       \
        ascendc_model::BinaryOp(#NAME, dst, src0, src1,                                                            \
                                ascendc_model::VecIter::Continuous(#NAME, mask, repeatTime, sizeof(T), site), p,   \
                                [](T a, T b) { return ascendc_model::RoundTo<T>(EXPR); });                         \
    }                                                                                                              \
    template <typename T, bool isSetMask = true>                                                                   \
    void NAME(const LocalTensor<T>& dst, const LocalTensor<T>& src0, const LocalTensor<T>& src1, uint64_t mask[],  \
              const uint8_t repeatTime, const BinaryRepeatParams& p,                                               \
              ascendc_model::Site site = ascendc_model::Site::Here()) {                                            \
        ASCENDC_A2_REQUIRE(#NAME, T, TYPES);                                                                       \
        ascendc_model::BinaryOp(#NAME, dst, src0, src1,                                                            \
                                ascendc_model::VecIter::Bits(#NAME, mask, repeatTime, sizeof(T), site), p,         \
                                [](T a, T b) { return ascendc_model::RoundTo<T>(EXPR); });                         \
    }

#define ASCENDC_MODEL_UNARY(NAME, TYPES, EXPR)                                                                     \
    template <typename T>                                                                                          \
    void NAME(const LocalTensor<T>& dst, const LocalTensor<T>& src, const int32_t& count,                          \
    ascendc_model::Site site = ascendc_model::Site::Here()) {                                                      \
        ASCENDC_A2_REQUIRE(#NAME, T, TYPES);                                                                       \
        ascendc_model::UnaryOp(#NAME, dst, src, ascendc_model::VecIter::Count(#NAME, count, site), {}, {},         \
                               [](T x) { return ascendc_model::RoundTo<T>(EXPR); });                               \
    }                                                                                                              \
    template <typename T, bool isSetMask = true>                                                                   \
    void NAME(const LocalTensor<T>& dst, const LocalTensor<T>& src, uint64_t mask, const uint8_t repeatTime,       \
              const UnaryRepeatParams& p,                                                                          \
              ascendc_model::Site site = ascendc_model::Site::Here()) {                                            \
        ASCENDC_A2_REQUIRE(#NAME, T, TYPES);                                                                       \
        ascendc_model::UnaryOp(#NAME, dst, src,                                                                    \
                               ascendc_model::VecIter::Continuous(#NAME, mask, repeatTime, sizeof(T), site),       \
                               ascendc_model::DstStride(p), ascendc_model::SrcStride(p),                           \
                               [](T x) { return ascendc_model::RoundTo<T>(EXPR); });                               \
    }                                                                                                              \
    template <typename T, bool isSetMask = true>                                                                   \
    void NAME(const LocalTensor<T>& dst, const LocalTensor<T>& src, uint64_t mask[], const uint8_t repeatTime,     \
              const UnaryRepeatParams& p,                                                                          \
              ascendc_model::Site site = ascendc_model::Site::Here()) {                                            \
        ASCENDC_A2_REQUIRE(#NAME, T, TYPES);                                                                       \
        ascendc_model::UnaryOp(#NAME, dst, src,                                                                    \
                               ascendc_model::VecIter::Bits(#NAME, mask, repeatTime, sizeof(T), site),             \
                               ascendc_model::DstStride(p), ascendc_model::SrcStride(p),                           \
                               [](T x) { return ascendc_model::RoundTo<T>(EXPR); });                               \
    }

#define ASCENDC_MODEL_SCALAR(NAME, TYPES, EXPR)                                                                    \
    template <typename T>                                                                                          \
    void NAME(const LocalTensor<T>& dst, const LocalTensor<T>& src, const T& scalarValue, const int32_t& count,    \
    ascendc_model::Site site = ascendc_model::Site::Here()) {                                                      \
        ASCENDC_A2_REQUIRE(#NAME, T, TYPES);                                                                       \
        const double s = static_cast<double>(scalarValue);                                                         \
        ascendc_model::UnaryOp(#NAME, dst, src, ascendc_model::VecIter::Count(#NAME, count, site), {}, {},         \
                               [s](T x) { return ascendc_model::RoundTo<T>(EXPR); });                              \
    }                                                                                                              \
    template <typename T, bool isSetMask = true>                                                                   \
    void NAME(const LocalTensor<T>& dst, const LocalTensor<T>& src, const T& scalarValue, uint64_t mask,           \
              const uint8_t repeatTime, const UnaryRepeatParams& p,                                                \
              ascendc_model::Site site = ascendc_model::Site::Here()) {                                            \
        ASCENDC_A2_REQUIRE(#NAME, T, TYPES);                                                                       \
        const double s = static_cast<double>(scalarValue);                                                         \
        ascendc_model::UnaryOp(#NAME, dst, src,                                                                    \
                               ascendc_model::VecIter::Continuous(#NAME, mask, repeatTime, sizeof(T), site),       \
                               ascendc_model::DstStride(p), ascendc_model::SrcStride(p),                           \
                               [s](T x) { return ascendc_model::RoundTo<T>(EXPR); });                              \
    }                                                                                                              \
    template <typename T, bool isSetMask = true>                                                                   \
    void NAME(const LocalTensor<T>& dst, const LocalTensor<T>& src, const T& scalarValue, uint64_t mask[],         \
              const uint8_t repeatTime, const UnaryRepeatParams& p,                                                \
              ascendc_model::Site site = ascendc_model::Site::Here()) {                                            \
        ASCENDC_A2_REQUIRE(#NAME, T, TYPES);                                                                       \
        const double s = static_cast<double>(scalarValue);                                                         \
        ascendc_model::UnaryOp(#NAME, dst, src,                                                                    \
                               ascendc_model::VecIter::Bits(#NAME, mask, repeatTime, sizeof(T), site),             \
                               ascendc_model::DstStride(p), ascendc_model::SrcStride(p),                           \
                               [s](T x) { return ascendc_model::RoundTo<T>(EXPR); });                              \
    }

namespace AscendC {

// Binary: a, b are the lane values of src0, src1.
ASCENDC_MODEL_BINARY(Add, ASCENDC_A2_ARITHMETIC, double(a) + double(b))
ASCENDC_MODEL_BINARY(Sub, ASCENDC_A2_ARITHMETIC, double(a) - double(b))
ASCENDC_MODEL_BINARY(Mul, ASCENDC_A2_ARITHMETIC, double(a) * double(b))
ASCENDC_MODEL_BINARY(Div, ASCENDC_A2_FLOATING, double(a) / double(b))
ASCENDC_MODEL_BINARY(Max, ASCENDC_A2_ARITHMETIC, (a > b ? double(a) : double(b)))
ASCENDC_MODEL_BINARY(Min, ASCENDC_A2_ARITHMETIC, (a < b ? double(a) : double(b)))
// Unary: x is the lane value of src.
ASCENDC_MODEL_UNARY(Exp, ASCENDC_A2_FLOATING, std::exp(double(x)))
ASCENDC_MODEL_UNARY(Ln, ASCENDC_A2_FLOATING, std::log(double(x)))
ASCENDC_MODEL_UNARY(Abs, ASCENDC_A2_FLOATING, std::fabs(double(x)))
ASCENDC_MODEL_UNARY(Sqrt, ASCENDC_A2_FLOATING, std::sqrt(double(x)))
ASCENDC_MODEL_UNARY(Reciprocal, ASCENDC_A2_FLOATING, 1.0 / double(x))
ASCENDC_MODEL_UNARY(Relu, ASCENDC_A2_RELU, (double(x) > 0 ? double(x) : 0.0))
// Vector-scalar: x is the lane value, s the scalar.
ASCENDC_MODEL_SCALAR(Adds, ASCENDC_A2_ARITHMETIC, double(x) + s)
ASCENDC_MODEL_SCALAR(Muls, ASCENDC_A2_ARITHMETIC, double(x) * s)
ASCENDC_MODEL_SCALAR(Maxs, ASCENDC_A2_ARITHMETIC, (double(x) > s ? double(x) : s))
ASCENDC_MODEL_SCALAR(Mins, ASCENDC_A2_ARITHMETIC, (double(x) < s ? double(x) : s))

template <typename T>
void Duplicate(const LocalTensor<T>& dst, const T& scalarValue, const int32_t& count,
ascendc_model::Site site = ascendc_model::Site::Here()) {
    ASCENDC_A2_REQUIRE("Duplicate", T, ASCENDC_A2_FILL);
    ascendc_model::DuplicateOp(dst, scalarValue, ascendc_model::VecIter::Count("Duplicate", count, site), {});
}
template <typename T, bool isSetMask = true>
void Duplicate(const LocalTensor<T>& dst, const T& scalarValue, uint64_t mask, const uint8_t repeatTime,
               const uint16_t dstBlockStride, const uint8_t dstRepeatStride,
               ascendc_model::Site site = ascendc_model::Site::Here()) {
    ASCENDC_A2_REQUIRE("Duplicate", T, ASCENDC_A2_FILL);
    ascendc_model::DuplicateOp(dst, scalarValue,
                               ascendc_model::VecIter::Continuous("Duplicate", mask, repeatTime, sizeof(T), site),
                               {dstBlockStride, dstRepeatStride});
}
template <typename T, bool isSetMask = true>
void Duplicate(const LocalTensor<T>& dst, const T& scalarValue, uint64_t mask[], const uint8_t repeatTime,
               const uint16_t dstBlockStride, const uint8_t dstRepeatStride,
               ascendc_model::Site site = ascendc_model::Site::Here()) {
    ASCENDC_A2_REQUIRE("Duplicate", T, ASCENDC_A2_FILL);
    ascendc_model::DuplicateOp(dst, scalarValue,
                               ascendc_model::VecIter::Bits("Duplicate", mask, repeatTime, sizeof(T), site),
                               {dstBlockStride, dstRepeatStride});
}

// Cast: a repeat covers 256 bytes of the wider type (64 lanes for half <-> float).
template <typename T, typename U>
void Cast(const LocalTensor<T>& dst, const LocalTensor<U>& src, const RoundMode& roundMode, const uint32_t count,
ascendc_model::Site site = ascendc_model::Site::Here()) {
    ascendc_model::a2::RequireCastPair<T, U>();
    ascendc_model::a2::CheckCastMode<T, U>(roundMode, true);
    ascendc_model::CastOp(dst, src, roundMode, ascendc_model::VecIter::Count("Cast", count, site), {}, {});
}
template <typename T, typename U, bool isSetMask = true>
void Cast(const LocalTensor<T>& dst, const LocalTensor<U>& src, const RoundMode& roundMode, const uint64_t mask,
          const uint8_t repeatTime, const UnaryRepeatParams& p,
          ascendc_model::Site site = ascendc_model::Site::Here()) {
    ascendc_model::a2::RequireCastPair<T, U>();
    ascendc_model::a2::CheckCastMode<T, U>(roundMode, false);
    ascendc_model::CastOp(dst, src, roundMode,
                          ascendc_model::VecIter::Continuous("Cast", mask, repeatTime, ascendc_model::Widest<T, U>(),
                                                             site),
                          ascendc_model::DstStride(p), ascendc_model::SrcStride(p));
}
template <typename T, typename U, bool isSetMask = true>
void Cast(const LocalTensor<T>& dst, const LocalTensor<U>& src, const RoundMode& roundMode, const uint64_t mask[],
          const uint8_t repeatTime, const UnaryRepeatParams& p,
          ascendc_model::Site site = ascendc_model::Site::Here()) {
    ascendc_model::a2::RequireCastPair<T, U>();
    ascendc_model::a2::CheckCastMode<T, U>(roundMode, false);
    ascendc_model::CastOp(dst, src, roundMode,
                          ascendc_model::VecIter::Bits("Cast", mask, repeatTime, ascendc_model::Widest<T, U>(), site),
                          ascendc_model::DstStride(p), ascendc_model::SrcStride(p));
}

}  // namespace AscendC

#include "host_model/compare_select.h"
