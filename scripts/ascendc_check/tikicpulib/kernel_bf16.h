// STAND-IN for the CANN toolkit's closed CPU-debug header tools/tikicpulib/lib/include/kernel_bf16.h:
// `bfloat16_t`, shaped like the `half` of kernel_fp16.h. Used only by scripts/check_ascendc_headers.sh
// (-fsyntax-only) and never compiled into anything else.
#pragma once
#include <cstdint>
#include <type_traits>

struct bfloat16_t {
    uint16_t bits;
    bfloat16_t() = default;
    template <typename T, typename = std::enable_if_t<std::is_arithmetic<T>::value>>
    bfloat16_t(T) : bits(0) {}
    operator float() const { return 0.0f; }
    float ToFloat() const { return 0.0f; }
};
static_assert(sizeof(bfloat16_t) == 2, "bfloat16_t is 2 bytes");
