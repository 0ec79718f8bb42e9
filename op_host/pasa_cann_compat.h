// CANN-ONLY: the tiling API whose names changed between CANN 8.x and 9.0, chosen by the version the build passes
// (PASA_CANN_VERSION = major * 100 + minor: cann/CMakeLists.txt and scripts/check_ascendc_headers.sh take it
// from the toolkit). 9.0 renamed the block-dim pair (asc-devkit docs/zh/api/附录/接口变更说明.md):
// PlatformAscendC::CalcTschBlockDim -> CalcTschNumBlocks and TilingContext::SetBlockDim -> SetSimdNumBlocks; the
// old names stay in 9.0 and 9.1 as deprecated aliases, which FIA (ops-transformer) still calls.
#ifndef PASA_CANN_COMPAT_H
#define PASA_CANN_COMPAT_H

#include <cstdint>

#include "register/op_def_registry.h"
#include "tiling/platform/platform_ascendc.h"

#ifndef PASA_CANN_VERSION
#error "PASA_CANN_VERSION (major * 100 + minor of the CANN toolkit) is passed by the build (cann/CMakeLists.txt)"
#endif

namespace pasa_cann {

// Sets the launch's number of blocks for `slices` AIV tasks of a mixed kernel on aicNum AICs and aivNum AIVs.
inline ge::graphStatus SetNumBlocks(gert::TilingContext* ctx, const platform_ascendc::PlatformAscendC& platform,
                                    uint32_t slices, uint32_t aicNum, uint32_t aivNum) {
#if PASA_CANN_VERSION >= 900
    return ctx->SetSimdNumBlocks(platform.CalcTschNumBlocks(slices, aicNum, aivNum));
#else
    return ctx->SetBlockDim(platform.CalcTschBlockDim(slices, aicNum, aivNum));
#endif
}

}  // namespace pasa_cann

#endif  // PASA_CANN_COMPAT_H
