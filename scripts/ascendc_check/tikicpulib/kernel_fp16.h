// STAND-IN for the CANN toolkit's closed CPU-debug header tools/tikicpulib/lib/include/kernel_fp16.h: `half`, a
// 2-byte type converting implicitly from and to the arithmetic types as bisheng's built-in half does, with the
// ToFloat() that asc-devkit's CPU-debug printing calls. No arithmetic of its own (the check only type-checks).
// Used only by scripts/check_ascendc_headers.sh (-fsyntax-only) and never compiled into anything else.
#pragma once
#include <cstdint>
#include <type_traits>

struct half {
    uint16_t bits;
    half() = default;
    template <typename T, typename = std::enable_if_t<std::is_arithmetic<T>::value>>
    half(T) : bits(0) {}
    operator float() const { return 0.0f; }
    float ToFloat() const { return 0.0f; }
};
static_assert(sizeof(half) == 2, "half is 2 bytes");
