// STAND-IN for the CANN toolkit's closed include/platform/soc_spec.h, which asc-devkit's
// tiling/platform/platform_ascendc.h includes; that header declares the one name it needs from it
// (enum class NpuArch) itself. Used only by scripts/check_ascendc_headers.sh (-fsyntax-only) and never compiled
// into anything else.
#pragma once
