#!/usr/bin/env bash
# Build the PasaFusedAttention custom op with CANN, install its .run package, build and install the
# torch_npu extension, and check the op on the NPU against the golden model.
#
# Never run in this repository's CI on real CANN (there is none); tests/npu/test_build_and_deploy.py runs
# every path short of the NPU with fake CANN trees and fake commands.
set -euo pipefail

# Exit codes (distinct, so that callers and tests can tell the failures apart).
readonly E_USAGE=2 E_NO_CANN=10 E_CANN_VERSION=11 E_NO_TORCH_NPU=12 E_NO_NPU=13 E_NO_ASC_CMAKE=14
readonly E_BUILD=20 E_INSTALL=21 E_EXTENSION=22 E_CHECK=23 E_HEADERS=24
# The supported CANN versions (docs/npu.md, "Supported CANN versions"): the oldest whose asc-devkit has the
# custom-op build flow cann/CMakeLists.txt follows (npu_op_package & co., from 8.5) to the newest whose headers
# the kernel and op_host/ are checked against (scripts/check_ascendc_headers.sh), as major * 100 + minor.
readonly MIN_CANN=805 MAX_CANN=901
readonly VENDOR=pasa  # vendor_name in cann/CMakeLists.txt

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD_DIR="$ROOT/build/npu"
INSTALL_PATH=""
PYTHON="${PYTHON:-python3}"
DRY_RUN=0
BUILD_ONLY=0

# shellcheck source=ascendc_check/flags.sh
source "$ROOT/scripts/ascendc_check/flags.sh"  # cann_version_of, cann_version_number
# shellcheck source=ascendc_check/cli.sh
source "$ROOT/scripts/ascendc_check/cli.sh"  # die

version_text() { echo "$(($1 / 100)).$(($1 % 100))"; }  # 805 -> 8.5

usage() {
    cat <<EOF
Usage: scripts/build_and_deploy.sh [options]

Builds the AscendC PASA op package with CANN (cann/CMakeLists.txt), installs it, builds and installs the
torch_npu extension pasa_npu._npu_ext, and runs scripts/npu_check.py (the op on the NPU against the golden
model).

Options:
  --install-path DIR  install the op package under DIR/vendors/$VENDOR (default: CANN's
                      \$ASCEND_OPP_PATH/vendors/$VENDOR); then source DIR/vendors/$VENDOR/bin/set_env.bash
                      before using the op
  --build-dir DIR     CMake build directory (default: build/npu)
  --python PY         the Python with torch and torch_npu (default: \$PYTHON or python3)
  --build-only        build and install without an NPU (no device check; npu-smi not required)
  --dry-run           check the prerequisites, then print the commands instead of running them
  -h, --help          this help

Prerequisites (exit code when missing): CANN toolkit $(version_text $MIN_CANN) to $(version_text $MAX_CANN).x, found
through ASCEND_CANN_PACKAGE_PATH or ASCEND_HOME_PATH (source <cann>/set_env.sh) ($E_NO_CANN; a version outside that
range, or an unreadable one: $E_CANN_VERSION; no asc-config.cmake: $E_NO_ASC_CMAKE), torch_npu importable by the Python ($E_NO_TORCH_NPU), an NPU visible to
npu-smi ($E_NO_NPU, unless --build-only).
Failures later: op_kernel/ or op_host/ not compiling against the toolkit's headers (scripts/check_ascendc_headers.sh
--cann, the type-check CI reasons about, here with the toolkit's own tikicpulib headers) $E_HEADERS, build $E_BUILD,
package install $E_INSTALL, extension $E_EXTENSION, on-device check $E_CHECK; bad options $E_USAGE.
EOF
}

say() { echo "build_and_deploy: $*"; }

run() {  # run CODE CMD...: run (or print, with --dry-run) a step; exit CODE if it fails
    local code=$1
    shift
    echo "+ $*"
    [[ $DRY_RUN -eq 1 ]] && return 0
    "$@" || die "$code" "command failed: $*"
}

while [[ $# -gt 0 ]]; do
    case "$1" in
        --install-path) [[ $# -ge 2 ]] || die $E_USAGE "--install-path needs a directory"; INSTALL_PATH=$2; shift 2 ;;
        --install-path=*) INSTALL_PATH=${1#*=}; shift ;;
        --build-dir) [[ $# -ge 2 ]] || die $E_USAGE "--build-dir needs a directory"; BUILD_DIR=$2; shift 2 ;;
        --build-dir=*) BUILD_DIR=${1#*=}; shift ;;
        --python) [[ $# -ge 2 ]] || die $E_USAGE "--python needs an interpreter"; PYTHON=$2; shift 2 ;;
        --python=*) PYTHON=${1#*=}; shift ;;
        --build-only) BUILD_ONLY=1; shift ;;
        --dry-run) DRY_RUN=1; shift ;;
        -h|--help) usage; exit 0 ;;
        *) usage >&2; die $E_USAGE "unknown option: $1" ;;
    esac
done
[[ -z "$INSTALL_PATH" || "$INSTALL_PATH" == /* ]] || INSTALL_PATH="$PWD/$INSTALL_PATH"

# ---- prerequisites ----------------------------------------------------------------------------------------
CANN="${ASCEND_CANN_PACKAGE_PATH:-${ASCEND_HOME_PATH:-}}"
[[ -n "$CANN" ]] || die $E_NO_CANN "CANN not found: ASCEND_CANN_PACKAGE_PATH and ASCEND_HOME_PATH are unset" \
    "(install the CANN toolkit and run: source <cann install dir>/set_env.sh)"
[[ -d "$CANN" ]] || die $E_NO_CANN "CANN not found: $CANN (from ASCEND_CANN_PACKAGE_PATH/ASCEND_HOME_PATH) is not a directory"

# The toolkit's version: <cann>/<arch>-linux/ascend_toolkit_install.info, line version=X.Y[.Z|.RCn]
VERSION=$(cann_version_of "$CANN")
[[ -n "$VERSION" ]] || die $E_CANN_VERSION "cannot read the CANN version: no" \
    "<arch>-linux/ascend_toolkit_install.info with a version= line under $CANN (is it a CANN toolkit install?)"
VERSION_NUMBER=$(cann_version_number "$VERSION")
[[ -n "$VERSION_NUMBER" ]] || die $E_CANN_VERSION "cannot parse the CANN version '$VERSION' under $CANN" \
    "(expected version=X.Y...)"
if (( VERSION_NUMBER < MIN_CANN || VERSION_NUMBER > MAX_CANN )); then
    die $E_CANN_VERSION "unsupported CANN version $VERSION at $CANN: supported are $(version_text $MIN_CANN) to" \
        "$(version_text $MAX_CANN).x (docs/npu.md)"
fi
say "CANN $VERSION at $CANN"

# find_package(ASC): asc-devkit installs asc-config.cmake (ASCConfig.cmake in 8.5) into <cann>/<arch>-linux/lib64/cmake.
ASC_CONFIG=""
for dir in "$CANN/$(uname -m)-linux/lib64/cmake" "$CANN"/*-linux/lib64/cmake "$CANN/lib64/cmake"; do
    for name in asc-config.cmake ASCConfig.cmake; do
        if [[ -z "$ASC_CONFIG" && -f "$dir/$name" ]]; then ASC_CONFIG="$dir/$name"; fi
    done
    [[ -n "$ASC_CONFIG" ]] && break
done
[[ -n "$ASC_CONFIG" ]] || die $E_NO_ASC_CMAKE "no asc-config.cmake under $CANN/<arch>-linux/lib64/cmake: this" \
    "toolkit lacks the ASC CMake package that cann/CMakeLists.txt finds with find_package(ASC) (install the" \
    "CANN toolkit with asc-devkit)"
say "ASC CMake package: $ASC_CONFIG"
export ASCEND_HOME_PATH="$CANN"  # asc-config.cmake reads it from the environment

command -v "$PYTHON" >/dev/null 2>&1 || die $E_NO_TORCH_NPU "Python '$PYTHON' not found (use --python)"
"$PYTHON" -c "import torch_npu" >/dev/null 2>&1 || die $E_NO_TORCH_NPU "torch_npu is not importable by $PYTHON" \
    "(pip install torch_npu matching your torch and CANN, or pass --python)"
say "torch_npu found by $PYTHON"

HAVE_NPU=0
if command -v npu-smi >/dev/null 2>&1 && npu-smi info >/dev/null 2>&1; then
    HAVE_NPU=1
    say "NPU present (npu-smi info)"
elif [[ $BUILD_ONLY -eq 1 ]]; then
    say "no NPU (npu-smi missing or failing): building and installing only (--build-only)"
else
    die $E_NO_NPU "no NPU: npu-smi is missing or 'npu-smi info' fails (check the driver; use --build-only" \
        "to build and install without a device)"
fi

# ---- type-check against the toolkit's headers -------------------------------------------------------------------
# The check of scripts/check_ascendc_headers.sh (its include list and flags, every tiling key, AIC and AIV, op_host/)
# against this toolkit: a misuse of the API is reported at our line before bisheng sees the kernel.
run $E_HEADERS bash "$ROOT/scripts/check_ascendc_headers.sh" --cann "$CANN" --build-dir "$BUILD_DIR/header_check"

# ---- build the op package -----------------------------------------------------------------------------------
run $E_BUILD cmake -S "$ROOT/cann" -B "$BUILD_DIR" -DASCEND_CANN_PACKAGE_PATH="$CANN" \
    -DASC_DIR="$(dirname "$ASC_CONFIG")" -DPASA_CANN_VERSION="$VERSION_NUMBER" -DCMAKE_BUILD_TYPE=Release
run $E_BUILD cmake --build "$BUILD_DIR" --target binary package --parallel "$(nproc 2>/dev/null || echo 2)"

# ---- install it -----------------------------------------------------------------------------------------------
if [[ $DRY_RUN -eq 1 ]]; then
    RUN_PKG="$BUILD_DIR/custom_opp_<os>_<arch>.run"
else
    RUN_PKG=$(ls "$BUILD_DIR"/custom_opp_*.run 2>/dev/null | head -n 1 || true)
    [[ -n "$RUN_PKG" ]] || die $E_BUILD "the build produced no custom_opp_*.run in $BUILD_DIR"
fi
if [[ -n "$INSTALL_PATH" ]]; then
    run $E_INSTALL mkdir -p "$INSTALL_PATH"
    run $E_INSTALL bash "$RUN_PKG" --install-path="$INSTALL_PATH"
    ENV_SCRIPT="$INSTALL_PATH/vendors/$VENDOR/bin/set_env.bash"
    if [[ $DRY_RUN -eq 0 ]]; then
        [[ -f "$ENV_SCRIPT" ]] || die $E_INSTALL "the package did not install $ENV_SCRIPT"
        # shellcheck disable=SC1090
        source "$ENV_SCRIPT"  # appends the vendor directory to ASCEND_CUSTOM_OPP_PATH
    fi
    say "installed to $INSTALL_PATH/vendors/$VENDOR; before using the op: source $ENV_SCRIPT"
else
    run $E_INSTALL bash "$RUN_PKG"
    say "installed to \$ASCEND_OPP_PATH/vendors/$VENDOR"
fi

# ---- the torch_npu extension ------------------------------------------------------------------------------------
# --no-build-isolation: the extension compiles against the torch and torch_npu installed in this Python.
run $E_EXTENSION env PASA_BUILD_NPU_EXT=1 ASCEND_CANN_PACKAGE_PATH="$CANN" \
    "$PYTHON" -m pip install --no-build-isolation "$ROOT"

# ---- on-device check ---------------------------------------------------------------------------------------------
if [[ $HAVE_NPU -eq 1 ]]; then
    run $E_CHECK "$PYTHON" "$ROOT/scripts/npu_check.py"
    say "done: the op matches the golden model on the NPU"
else
    say "done (built and installed; the on-device check needs an NPU: run $PYTHON scripts/npu_check.py there)"
fi
