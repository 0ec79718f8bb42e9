// STAND-IN for securec.h (libboundscheck, shipped in the CANN toolkit's include directory): the two functions
// metadef's headers call. Used only by scripts/check_ascendc_headers.sh (-fsyntax-only) and never compiled
// into anything else.
#pragma once
#include <cstddef>

typedef int errno_t;
#define EOK 0
errno_t memcpy_s(void* dest, size_t destMax, const void* src, size_t count);
errno_t memset_s(void* dest, size_t destMax, int c, size_t count);
