// GET_TILING_DATA_WITH_STRUCT for a kernel compiled outside the op package build (the CPU-debug harness of
// scripts/cpu_debug, and scripts/check_ascendc_headers.sh). The package build's op compiler generates its own
// (asc-devkit tools/build/asc_op_compile_base/asc_op_compiler/get_op_tiling.py: a tiling_struct variable filled
// by InitTilingData from the tiling argument); this one fills it the same way, by a byte copy.
#pragma once
#include <cstdint>
#include <cstring>

template <class TilingStruct>
inline void InitTilingData(const uint8_t* tiling, TilingStruct* data) {
    std::memcpy(data, tiling, sizeof(TilingStruct));
}

#define GET_TILING_DATA_WITH_STRUCT(tiling_struct, tiling_data, tiling_arg) \
    tiling_struct tiling_data;                                              \
    InitTilingData<tiling_struct>(tiling_arg, &tiling_data)
