// The element types and conversions the real AscendC API accepts on Atlas A2 (__NPU_ARCH__ 2201, dav_c220),
// for the APIs the model implements, so that the model refuses what the real API refuses. Facts read from
// asc-devkit (the commit docs/npu.md names), not its code:
//   impl/basic_api/dav_c220/kernel_operator_vec_{binary,binary_scalar,unary,duplicate,cmp,cmpsel,brcb}_impl.h:
//     the SupportType<...> list of each API's static_assert or ASCENDC_DEBUG_ASSERT;
//   impl/c_api/instr_impl/npu_arch_2201/vector_compute_impl/asc_repeat_reduce_{sum,max,min}_impl.h: the types of
//     the instructions WholeReduceSum/Max/Min lower to (the basic API has no list of its own);
//   impl/basic_api/dav_c220/kernel_operator_vec_vconv_impl.h: the CastIntrinsicsImpl overloads (the Cast pairs
//     that compile), CheckCastDatatype (the pairs the count form supports) and each overload's round-mode switch.
// A type outside a list is refused at compile time (static_assert), as bisheng refuses it through the
// instructions' overloads; what the headers refuse only when the call runs (a Cast round mode a pair lacks, an
// int32_t Compare other than EQ) the model refuses when the call runs. bfloat16_t and int4b_t, which the lists
// also name, are not modelled. tests/npu/test_host_model_a2_types.py checks these tables against the headers.
#pragma once
#include <cstdint>
#include <initializer_list>
#include <type_traits>

#include "host_model/error.h"
#include "host_model/types.h"

namespace ascendc_model::a2 {

template <typename T, typename... Allowed>
inline constexpr bool kOneOf = (std::is_same<T, Allowed>::value || ...);

// ASCENDC_A2_REQUIRE(API, T, types...): the compile-time refusal, naming the API and what it takes.
#define ASCENDC_A2_REQUIRE(API, T, ...) ASCENDC_A2_REQUIRE_(API, T, __VA_ARGS__)
#define ASCENDC_A2_REQUIRE_(API, T, ...)                                         \
    static_assert(::ascendc_model::a2::kOneOf<T, __VA_ARGS__>,                   \
                  API ": Atlas A2 takes " #__VA_ARGS__ " only (asc-devkit dav_c220)")

#define ASCENDC_A2_ARITHMETIC half, float, int16_t, int32_t                // Add Sub Mul Max Min, Adds Muls Maxs Mins
#define ASCENDC_A2_FLOATING half, float                                    // Div Exp Ln Abs Sqrt Reciprocal WholeReduce
#define ASCENDC_A2_RELU half, float, int32_t                               // Relu
#define ASCENDC_A2_FILL half, int16_t, uint16_t, int32_t, uint32_t, float  // Duplicate, Brcb (and bfloat16_t)
#define ASCENDC_A2_COMPARE half, float, int32_t                            // Compare, CompareScalar (int32_t: EQ only)
#define ASCENDC_A2_COMPARE_MASK int8_t, uint8_t                            // Compare's dst
#define ASCENDC_A2_COMPARE_SCALAR_MASK uint8_t                             // CompareScalar's dst
#define ASCENDC_A2_SELECT half, float                                      // Select
#define ASCENDC_A2_SELECT_MASK uint8_t, uint16_t, uint32_t, uint64_t       // Select's selMask

// Compare and CompareScalar take int32_t for CMPMODE::EQ only (CheckVcmpvDtype, CheckVcmpvsDtype).
template <typename T>
void CheckCompareMode(const char* api, AscendC::CMPMODE mode) {
    if (std::is_same<T, int32_t>::value && mode != AscendC::CMPMODE::EQ)
        Fail(api, "Atlas A2 compares int32_t with CMPMODE::EQ only; other modes take half or float");
}

// Cast: the round modes each (dst, src) pair converts with, as a bit set over RoundMode; 0 for a pair whose
// overload compiles but converts nothing the model can run (int16_t -> int8_t/uint8_t: "not supported";
// int32_t -> half: a dequantisation through SetDeqScale, not modelled). Pairs not listed do not compile.
constexpr uint32_t Modes(std::initializer_list<AscendC::RoundMode> modes) {
    uint32_t bits = 0;
    for (AscendC::RoundMode m : modes) bits |= 1u << static_cast<uint32_t>(m);
    return bits;
}
using R = AscendC::RoundMode;
inline constexpr uint32_t kRounding = Modes({R::CAST_RINT, R::CAST_FLOOR, R::CAST_CEIL, R::CAST_ROUND, R::CAST_TRUNC});
inline constexpr uint32_t kRoundingOrNone = kRounding | Modes({R::CAST_NONE});
inline constexpr uint32_t kNone = Modes({R::CAST_NONE});

template <typename Dst, typename Src>
struct CastPair {
    static constexpr bool kExists = false;
    static constexpr uint32_t kModes = 0;
    static constexpr bool kCountForm = false;
};
#define ASCENDC_A2_CAST(DST, SRC, MODES, LEVEL2)                \
    template <>                                                 \
    struct CastPair<DST, SRC> {                                 \
        static constexpr bool kExists = true;                   \
        static constexpr uint32_t kModes = MODES;               \
        static constexpr bool kCountForm = LEVEL2;              \
    };
ASCENDC_A2_CAST(half, int32_t, 0, true)
ASCENDC_A2_CAST(half, int8_t, kNone, true)
ASCENDC_A2_CAST(half, uint8_t, kNone, true)
ASCENDC_A2_CAST(half, int16_t, kRoundingOrNone, true)
ASCENDC_A2_CAST(half, float, kRoundingOrNone | Modes({R::CAST_ODD}), true)
ASCENDC_A2_CAST(float, half, kNone, true)
ASCENDC_A2_CAST(float, int16_t, kNone, true)
ASCENDC_A2_CAST(float, int32_t, kRoundingOrNone, true)
ASCENDC_A2_CAST(float, int64_t, kRounding, true)
ASCENDC_A2_CAST(float, float, kRounding, true)
ASCENDC_A2_CAST(int8_t, half, kRoundingOrNone, true)
ASCENDC_A2_CAST(uint8_t, half, kRoundingOrNone, true)
ASCENDC_A2_CAST(int16_t, half, kRounding, true)
ASCENDC_A2_CAST(int16_t, float, kRounding, true)
ASCENDC_A2_CAST(int16_t, int32_t, kNone, true)
ASCENDC_A2_CAST(int32_t, half, kRounding, true)
ASCENDC_A2_CAST(int32_t, float, kRounding, true)
ASCENDC_A2_CAST(int32_t, int64_t, kNone, true)
ASCENDC_A2_CAST(int64_t, float, kRounding, true)
ASCENDC_A2_CAST(int64_t, int32_t, kNone, true)
ASCENDC_A2_CAST(int8_t, int16_t, 0, false)
ASCENDC_A2_CAST(uint8_t, int16_t, 0, false)
#undef ASCENDC_A2_CAST

// The compile-time half of Cast's rules: the pair has an overload.
template <typename Dst, typename Src>
constexpr void RequireCastPair() {
    static_assert(CastPair<Dst, Src>::kExists,
                  "Cast: Atlas A2 has no conversion between these types (asc-devkit dav_c220 CastIntrinsicsImpl)");
}

template <typename T> inline constexpr const char* kTypeName = "?";
template <> inline constexpr const char* kTypeName<half> = "half";
template <> inline constexpr const char* kTypeName<float> = "float";
template <> inline constexpr const char* kTypeName<int8_t> = "int8_t";
template <> inline constexpr const char* kTypeName<uint8_t> = "uint8_t";
template <> inline constexpr const char* kTypeName<int16_t> = "int16_t";
template <> inline constexpr const char* kTypeName<int32_t> = "int32_t";
template <> inline constexpr const char* kTypeName<int64_t> = "int64_t";

// The run-time half of Cast's rules: the pair converts with this round mode (and, for the count form, is one
// of the count form's pairs).
void CheckCastMode(const char* dst, const char* src, uint32_t modes, bool countFormPair, AscendC::RoundMode mode,
                   bool countForm);
template <typename Dst, typename Src>
void CheckCastMode(AscendC::RoundMode mode, bool countForm) {
    CheckCastMode(kTypeName<Dst>, kTypeName<Src>, CastPair<Dst, Src>::kModes, CastPair<Dst, Src>::kCountForm, mode,
                  countForm);
}

}  // namespace ascendc_model::a2
