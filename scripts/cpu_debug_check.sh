#!/usr/bin/env bash
# Real-toolchain check without an NPU: type-checks op_kernel/ and op_host/ against the toolkit's headers
# (scripts/check_ascendc_headers.sh --cann, with the toolkit's own tikicpulib headers), then compiles the
# unmodified kernel against them in CPU-debug mode (ASCENDC_CPU_DEBUG with the tikicpulib library: ICPU_RUN_KF,
# GmAlloc) with the same include list and flags (scripts/ascendc_check/flags.sh), runs it on a few shapes and
# compares it with the golden model (scripts/cpu_debug/compare.py).
#
# Needs an x86_64 or aarch64 machine with the CANN toolkit (its set_env.sh sourced: ASCEND_HOME_PATH) and
# its CPU-debug library (<cann>/tools/tikicpulib), CMake, and a Python with pasa_npu importable. It has not
# been run in this repository's CI (no CANN there); tests/npu/test_cpu_debug_check.py checks the paths without one.
set -euo pipefail

readonly E_USAGE=2 E_NO_TOOLKIT=30 E_NO_CPU_DEBUG_LIB=31 E_BUILD=32 E_MISMATCH=33 E_HEADERS=34

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=ascendc_check/flags.sh
source "$ROOT/scripts/ascendc_check/flags.sh"
# shellcheck source=ascendc_check/cli.sh
source "$ROOT/scripts/ascendc_check/cli.sh"  # die
BUILD_DIR="$ROOT/build/cpu_debug"
PYTHON="${PYTHON:-python3}"
SOC_VERSION="${SOC_VERSION:-Ascend910B1}"

usage() {
    cat <<USAGE
Usage: scripts/cpu_debug_check.sh [--build-dir DIR] [--python PY] [--soc SOC]

Compiles the AscendC PASA kernel with CANN's real headers in CPU-debug mode (tikicpulib, ICPU_RUN_KF), runs
it on a few cases and compares the outputs with the golden model. No NPU is needed; the CANN toolkit is.

Options:
  --build-dir DIR  CMake build directory (default: build/cpu_debug)
  --python PY      Python with numpy and pasa_npu (default: \$PYTHON or python3)
  --soc SOC        the CPU-debug library's SoC, tikicpulib::<SOC> (default: \$SOC_VERSION or Ascend910B1)
  -h, --help       this help

Exit codes: 0 every case matches; $E_NO_TOOLKIT no CANN toolkit (ASCEND_HOME_PATH unset or not a directory);
$E_NO_CPU_DEBUG_LIB no CPU-debug library (<cann>/tools/tikicpulib); $E_HEADERS the header check failed (op_kernel/ or
op_host/ does not compile against the toolkit's headers, or they are not where asc-devkit puts them); $E_BUILD the
kernel did not compile or link; $E_MISMATCH a case failed or differs from the golden model; $E_USAGE bad options.
USAGE
}

while [[ $# -gt 0 ]]; do
    case "$1" in
        --build-dir) [[ $# -ge 2 ]] || die $E_USAGE "--build-dir needs a directory"; BUILD_DIR=$2; shift 2 ;;
        --python) [[ $# -ge 2 ]] || die $E_USAGE "--python needs an interpreter"; PYTHON=$2; shift 2 ;;
        --soc) [[ $# -ge 2 ]] || die $E_USAGE "--soc needs a SoC name"; SOC_VERSION=$2; shift 2 ;;
        -h|--help) usage; exit 0 ;;
        *) usage >&2; die $E_USAGE "unknown option: $1" ;;
    esac
done

CANN="${ASCEND_HOME_PATH:-}"
[[ -n "$CANN" ]] || die $E_NO_TOOLKIT "no CANN toolkit: ASCEND_HOME_PATH is unset (install the CANN toolkit" \
    "and run: source <cann install dir>/set_env.sh). Nothing was compiled."
[[ -d "$CANN" ]] || die $E_NO_TOOLKIT "no CANN toolkit: ASCEND_HOME_PATH=$CANN is not a directory"
LIB="$CANN/tools/tikicpulib"
[[ -d "$LIB" ]] || die $E_NO_CPU_DEBUG_LIB "the toolkit at $CANN has no CPU-debug library ($LIB): install the" \
    "CANN toolkit package that ships tools/tikicpulib"

echo "cpu_debug_check: CANN at $CANN, CPU-debug library $LIB, tikicpulib::$SOC_VERSION"
bash "$ROOT/scripts/check_ascendc_headers.sh" --cann "$CANN" --build-dir "$BUILD_DIR/header_check" ||
    die $E_HEADERS "op_kernel/ or op_host/ does not compile against the toolkit's headers (see above)"
# The kernel's flags: the check's (one CPU-debug binary runs both core types, so no core type of its own).
mapfile -t kernel_flags < <(printf '%s\n' "${ASC_KERNEL_FLAGS[@]}"
                            asc_kernel_includes "$(asc_toolkit_root "$CANN")" "$LIB/lib/include" "$CANN/include")
KERNEL_FLAGS=$(IFS=';'; echo "${kernel_flags[*]}")
cmake -S "$ROOT/scripts/cpu_debug" -B "$BUILD_DIR" -DSOC_VERSION="$SOC_VERSION" \
    -DCMAKE_PREFIX_PATH="$LIB/lib/cmake;$LIB" "-DPASA_KERNEL_FLAGS=$KERNEL_FLAGS" ||
    die $E_BUILD "cmake configure failed"
cmake --build "$BUILD_DIR" --parallel 1 || die $E_BUILD "the kernel did not compile in CPU-debug mode"

PYTHONPATH="$ROOT/python${PYTHONPATH:+:$PYTHONPATH}" "$PYTHON" "$ROOT/scripts/cpu_debug/compare.py" \
    "$BUILD_DIR/pasa_cpu_debug" "$BUILD_DIR/cases" || die $E_MISMATCH "the CPU-debug kernel does not match"
echo "cpu_debug_check: done: every case matches the golden model"
