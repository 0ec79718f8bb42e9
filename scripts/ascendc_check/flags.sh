# How the kernel (op_kernel/) and the host code (op_host/) are compiled against CANN's headers in
# CPU-debug mode: one list for every script that does it (sourced by scripts/check_ascendc_headers.sh and
# scripts/cpu_debug_check.sh; scripts/build_and_deploy.sh runs the check with them).
#
# Kernel, from asc-devkit (the commit docs/npu.md names):
#   include list  cmake/asc/asc_modules/CMakeASCInformation.cmake, CMAKE_ASC_RUN_MODE cpu: tikicpulib's
#                 include directory, <cann>/include, and the asc/impl/* and asc/include/* directories below
#                 (the ones a source checkout lacks are skipped), relative to the asc root (a source checkout,
#                 or <cann>/asc); plus the asc root itself, which the headers' own "impl/..." and
#                 "utils/..." includes need (cmake/asc/legacy_modules/bisheng_intf.cmake lists it); and
#                 impl/ itself, the directory bisheng_intf.cmake reaches as tikcpp/tikcfw/impl: the release tags'
#                 (v9.0.0, v9.0.1) impl/basic_api/kernel_scalar_convert.h includes "utils/std/..." relative to it.
#   definitions   cmake/asc/legacy_modules/function.cmake (run mode cpu): ASCENDC_CPU_DEBUG=1 ASCENDC_DEBUG=1
#                 ASCENDC_DUMP=0; CMakeASCInformation.cmake: -D_GLIBCXX_USE_CXX11_ABI=0 -D__NPU_ARCH__=2201
#                 (dav-2201, Atlas A2) and C++17; tests/api/basic_api/CMakeLists.txt (ascend910B1_AIC/_AIV):
#                 __DAV_C220__ with __DAV_C220_CUBE__ __DAV_CUBE__ (AIC) or __DAV_C220_VEC__ __DAV_VEC__ (AIV).
# Host: the op package build compiles op_host/ with <cann>/include only
# (cmake/asc/fwk_modules/intf.cmake, intf_pub), C++17 and -D_GLIBCXX_USE_CXX11_ABI=0. From source checkouts that
# directory is assembled from metadef (inc/external/asc, inc/external, inc), ge (inc/graph_metadef/external) and
# asc-devkit (include/utils: tiling/platform/platform_ascendc.h).

ASC_KERNEL_INCLUDE_DIRS=(
    impl/adv_api impl/basic_api impl/c_api impl/micro_api impl/simt_api impl/utils
    include include/adv_api include/adv_api/matmul include/aicpu_api include/basic_api include/c_api
    include/interface include/micro_api include/simt_api include/tiling include/utils
    impl
)
ASC_KERNEL_FLAGS=(-x c++ -std=c++17 -D_GLIBCXX_USE_CXX11_ABI=0 -DASCENDC_CPU_DEBUG=1 -DASCENDC_DEBUG=1
                  -DASCENDC_DUMP=0 -D__NPU_ARCH__=2201 -D__DAV_C220__)
ASC_AIC_FLAGS=(-D__DAV_C220_CUBE__ -D__DAV_CUBE__)
ASC_AIV_FLAGS=(-D__DAV_C220_VEC__ -D__DAV_VEC__)
ASC_HOST_FLAGS=(-std=c++17 -D_GLIBCXX_USE_CXX11_ABI=0)

# asc_kernel_includes ASC_ROOT TIKICPULIB_INCLUDE CANN_INCLUDE...: the -isystem flags, one per line, in the
# order above (CANN_INCLUDE: <cann>/include, or the directories standing for it; absent ones are skipped).
asc_kernel_includes() {
    local root=$1 tik=$2 dir
    shift 2
    echo "-isystem$tik"
    for dir in "$@"; do [[ -d "$dir" ]] && echo "-isystem$dir"; done
    for dir in "${ASC_KERNEL_INCLUDE_DIRS[@]}"; do [[ -d "$root/$dir" ]] && echo "-isystem$root/$dir"; done
    echo "-isystem$root"
}

# asc_toolkit_root CANN: the asc root of an installed toolkit (<cann>/asc, as CMakeASCInformation.cmake names it,
# or <cann>/<arch>-linux/asc), or nothing.
asc_toolkit_root() {
    local dir
    for dir in "$1/asc" "$1/$(uname -m)-linux/asc"; do
        [[ -f "$dir/include/kernel_operator.h" ]] && { echo "$dir"; return 0; }
    done
    return 0
}

# cann_version_of DIR: the CANN version X.Y.Z[...] of an installed toolkit (<arch>-linux/ascend_toolkit_install.info,
# line version=) or of an asc-devkit / metadef source checkout (version.cmake, set_package or set_cann_package
# VERSION "X.Y.Z", from 9.0; version.info, Version=X.Y.Z, before), or nothing.
cann_version_of() {
    local dir=$1 info
    for info in "$dir/$(uname -m)-linux/ascend_toolkit_install.info" "$dir"/*-linux/ascend_toolkit_install.info; do
        [[ -f "$info" ]] && { sed -n 's/^version=//p' "$info" | head -n 1 | tr -d '[:space:]'; return 0; }
    done
    if [[ -f "$dir/version.cmake" ]]; then
        sed -n 's/^set_\(cann_\)\{0,1\}package([A-Za-z_-]* VERSION "\([^"]*\)").*/\2/p' "$dir/version.cmake" | head -n 1
    elif [[ -f "$dir/version.info" ]]; then
        sed -n 's/^Version=//p' "$dir/version.info" | head -n 1 | tr -d '[:space:]'
    fi
}

# cann_version_number VERSION: major * 100 + minor (8.5.0 -> 805, 9.0.RC1 -> 900), or nothing when VERSION does
# not start with X.Y. op_host/pasa_cann_compat.h chooses the tiling API by it (PASA_CANN_VERSION).
cann_version_number() {
    [[ "$1" =~ ^([0-9]+)\.([0-9]+) ]] && echo $((BASH_REMATCH[1] * 100 + BASH_REMATCH[2]))
    return 0
}
