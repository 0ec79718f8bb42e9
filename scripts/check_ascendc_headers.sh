#!/usr/bin/env bash
# Type-check of op_kernel/ and op_host/ against CANN's real headers, with g++ -fsyntax-only in AscendC's
# CPU-debug mode (the include list and flags of scripts/ascendc_check/flags.sh). The kernel is compiled once
# per tiling key that its entry dispatches (TILING_KEY_IS, found in the preprocessed entry) and per core type
# (AIC, AIV), as the op build compiles it; op_host/*.cpp against the op-registration and tiling headers. What this
# can and cannot judge: docs/npu.md.
#
# From source checkouts (what CI-less machines can fetch from GitHub), the headers that CANN does not publish
# are replaced by the stand-ins in scripts/ascendc_check/ (tikicpulib/, host/); with --cann, an installed
# toolkit's own headers are used, tikicpulib's included.
set -euo pipefail

readonly E_USAGE=2 E_FAILED=40 E_HEADERS=41

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CHECK_DIR="$ROOT/scripts/ascendc_check"
# shellcheck source=ascendc_check/flags.sh
source "$CHECK_DIR/flags.sh"
# shellcheck source=ascendc_check/cli.sh
source "$CHECK_DIR/cli.sh"  # die
SRC_ROOT="$ROOT"
BUILD_DIR="$ROOT/build/ascendc_check"
JOBS=2
CXX="${CXX:-g++}"
ASC="" METADEF="" GE="" CANN=""

usage() {
    cat <<USAGE
Usage: scripts/check_ascendc_headers.sh [options] ASC_DEVKIT_DIR
       scripts/check_ascendc_headers.sh [options] --cann CANN_DIR

Compiles (g++ -fsyntax-only, AscendC CPU-debug mode) the kernel entry of op_kernel/ once per tiling key it
dispatches and per core type (AIC, AIV), and op_host/*.cpp, against CANN's headers.

  ASC_DEVKIT_DIR    an asc-devkit checkout (github.com/mirror-cann/asc-devkit); the closed tikicpulib headers
                    are replaced by scripts/ascendc_check/tikicpulib/
  --metadef DIR     a metadef checkout (github.com/hicann/metadef) and
  --ge DIR          a ge checkout (github.com/hicann/ge): with both, op_host/ is checked too (securec.h and
                    platform/soc_spec.h replaced by scripts/ascendc_check/host/)
  --cann DIR        an installed CANN toolkit (ASCEND_HOME_PATH) instead: its asc/ headers with its
                    tools/tikicpulib/lib/include, and its include/ for op_host/
  --root DIR        the tree whose op_kernel/ and op_host/ are checked (default: this repository)
  --build-dir DIR   where the generated kernel_tiling header and the compiler logs go
                    (default: build/ascendc_check)
  --jobs N          compiles run at once (default: 2)
  -h, --help        this help

Exit codes: 0 every configuration compiles; $E_FAILED one does not (its errors are listed at the line of ours
that causes them); $E_HEADERS a header directory is missing or is not what it should be; $E_USAGE bad options.
USAGE
}

while [[ $# -gt 0 ]]; do
    case "$1" in
        --metadef) [[ $# -ge 2 ]] || die $E_USAGE "--metadef needs a directory"; METADEF=$2; shift 2 ;;
        --ge) [[ $# -ge 2 ]] || die $E_USAGE "--ge needs a directory"; GE=$2; shift 2 ;;
        --cann) [[ $# -ge 2 ]] || die $E_USAGE "--cann needs a directory"; CANN=$2; shift 2 ;;
        --root) [[ $# -ge 2 ]] || die $E_USAGE "--root needs a directory"; SRC_ROOT=$(cd "$2" && pwd); shift 2 ;;
        --build-dir) [[ $# -ge 2 ]] || die $E_USAGE "--build-dir needs a directory"; BUILD_DIR=$2; shift 2 ;;
        --jobs) [[ $# -ge 2 && "$2" =~ ^[1-9][0-9]*$ ]] || die $E_USAGE "--jobs needs a positive number"
                JOBS=$2; shift 2 ;;
        -h|--help) usage; exit 0 ;;
        -*) usage >&2; die $E_USAGE "unknown option: $1" ;;
        *) [[ -z "$ASC" ]] || die $E_USAGE "one ASC_DEVKIT_DIR only (got $ASC and $1)"; ASC=$1; shift ;;
    esac
done
[[ -n "$ASC" || -n "$CANN" ]] || { usage >&2; die $E_USAGE "give ASC_DEVKIT_DIR or --cann CANN_DIR"; }
[[ -z "$ASC" || -z "$CANN" ]] || die $E_USAGE "give ASC_DEVKIT_DIR or --cann CANN_DIR, not both"
[[ -z "$METADEF$GE" || ( -n "$METADEF" && -n "$GE" && -n "$ASC" ) ]] ||
    die $E_USAGE "--metadef and --ge go together, with ASC_DEVKIT_DIR"
command -v "$CXX" >/dev/null 2>&1 || die $E_USAGE "no C++ compiler: $CXX not found (set CXX)"

commit_of() {  # the checked-out commit of a git directory, or "unknown"
    git -C "$1" rev-parse HEAD 2>/dev/null || echo unknown
}

mkdir -p "$BUILD_DIR"
BUILD_DIR=$(cd "$BUILD_DIR" && pwd)
HOST_INCLUDES=() HOST_QUOTE_INCLUDES=()
if [[ -n "$ASC" ]]; then
    [[ -f "$ASC/include/kernel_operator.h" ]] ||
        die $E_HEADERS "$ASC is not an asc-devkit checkout (no include/kernel_operator.h)"
    ASC_ROOT=$(cd "$ASC" && pwd)
    TIKICPULIB="$CHECK_DIR/tikicpulib"
    # kernel_tiling/kernel_tiling.h, which the toolkit ships generated: made by asc-devkit's own generator
    GEN="$ASC_ROOT/impl/adv_api/cmake/scripts/gen_kernel_tiling_data_def.py"
    [[ -f "$GEN" ]] || die $E_HEADERS "$ASC has no $GEN"
    python3 "$GEN" "$ASC_ROOT/include/adv_api" "$BUILD_DIR/generated/kernel_tiling/kernel_tiling.h" >/dev/null ||
        die $E_HEADERS "$GEN failed"
    CANN_INCLUDES=("$BUILD_DIR/generated")
    echo "check_ascendc_headers: asc-devkit $ASC_ROOT (commit $(commit_of "$ASC_ROOT")), tikicpulib stand-in"
    if [[ -n "$METADEF" ]]; then
        # register/op_def_registry.h: metadef's inc/external/asc from 9.1, ge's inc/graph_metadef/external up to 9.0
        [[ -f "$METADEF/inc/external/exe_graph/runtime/tiling_context.h" ]] ||
            die $E_HEADERS "no $METADEF/inc/external/exe_graph/runtime/tiling_context.h (is --metadef a metadef checkout?)"
        [[ -f "$GE/inc/graph_metadef/external/graph/operator_reg.h" ]] ||
            die $E_HEADERS "no $GE/inc/graph_metadef/external/graph/operator_reg.h (is --ge a ge checkout?)"
        [[ -f "$METADEF/inc/external/asc/register/op_def_registry.h" ||
           -f "$GE/inc/graph_metadef/external/register/op_def_registry.h" ]] ||
            die $E_HEADERS "no register/op_def_registry.h in $METADEF/inc/external/asc or $GE/inc/graph_metadef/external"
        METADEF=$(cd "$METADEF" && pwd) GE=$(cd "$GE" && pwd)
        HOST_INCLUDES=("$CHECK_DIR/host" "$METADEF/inc/external/asc" "$METADEF/inc/external" "$METADEF/inc"
                       "$GE/inc/graph_metadef/external" "$ASC_ROOT/include/utils")
        # The toolkit's include/graph holds ge's and metadef's graph headers side by side; up to 9.0 ge's
        # graph/inference_context.h includes "tensor.h", which is metadef's graph/tensor.h.
        if [[ ! -f "$GE/inc/graph_metadef/external/graph/tensor.h" && -f "$METADEF/inc/external/graph/tensor.h" ]]; then
            HOST_QUOTE_INCLUDES=("$METADEF/inc/external/graph")
        fi
        echo "check_ascendc_headers: metadef $METADEF (commit $(commit_of "$METADEF")," \
             "ge $GE (commit $(commit_of "$GE"))"
    else
        echo "check_ascendc_headers: no --metadef/--ge: op_host/ is not checked"
    fi
else
    [[ -d "$CANN" ]] || die $E_HEADERS "--cann $CANN is not a directory"
    CANN=$(cd "$CANN" && pwd)
    ASC_ROOT=$(asc_toolkit_root "$CANN")
    [[ -n "$ASC_ROOT" ]] || die $E_HEADERS "no asc/include/kernel_operator.h under $CANN (a toolkit with asc-devkit?)"
    TIKICPULIB="$CANN/tools/tikicpulib/lib/include"
    [[ -d "$TIKICPULIB" ]] || die $E_HEADERS "no $TIKICPULIB (the toolkit's CPU-debug library)"
    CANN_INCLUDES=("$CANN/include")
    HOST_INCLUDES=("$CANN/include")
    echo "check_ascendc_headers: CANN toolkit $CANN, its asc headers $ASC_ROOT and tikicpulib"
fi
mapfile -t KERNEL_INCLUDES < <(asc_kernel_includes "$ASC_ROOT" "$TIKICPULIB" "${CANN_INCLUDES[@]}")
# op_host/ chooses between CANN 8.x's and 9.x's tiling API by the version (op_host/pasa_cann_compat.h), which the
# op package build passes too (cann/CMakeLists.txt).
if [[ ${#HOST_INCLUDES[@]} -gt 0 ]]; then
    VERSION_DIR=${CANN:-$ASC_ROOT}
    CANN_VERSION=$(cann_version_of "$VERSION_DIR")
    CANN_VERSION_NUMBER=$(cann_version_number "$CANN_VERSION")
    [[ -n "$CANN_VERSION_NUMBER" ]] || die $E_HEADERS "cannot tell the CANN version of $VERSION_DIR (no" \
        "<arch>-linux/ascend_toolkit_install.info, version.cmake or version.info with a version X.Y...)"
    echo "check_ascendc_headers: CANN version $CANN_VERSION (PASA_CANN_VERSION=$CANN_VERSION_NUMBER for op_host/)"
fi

# ---- the configurations ----------------------------------------------------------------------------------
# name|log|command...: one line each, fields separated by the unit separator
CONFIGS=()
SEP=$'\x1f'
add_config() {  # add_config NAME ARGS...
    local name=$1 log
    shift
    log="$BUILD_DIR/logs/${name//[^A-Za-z0-9_.-]/_}.log"
    local IFS=$SEP
    CONFIGS+=("$name$SEP$log$SEP$*")
}

ENTRIES=()
for src in "$SRC_ROOT"/op_kernel/*.cpp; do
    [[ -f "$src" ]] && grep -q '__global__' "$src" && ENTRIES+=("$src")
done
[[ ${#ENTRIES[@]} -gt 0 ]] || die $E_USAGE "no kernel entry (a .cpp with __global__) in $SRC_ROOT/op_kernel"
mkdir -p "$BUILD_DIR/logs"
for src in "${ENTRIES[@]}"; do
    rel=${src#"$SRC_ROOT"/}
    # The tiling keys it dispatches, found as the op build finds them (asc-devkit tools/build/asc_op_compile_base/
    # asc_op_compiler/kernel_info_infer.py, find_tilingkey): in the preprocessed source, where TILING_KEY_IS(k)
    # reads "g_tilingKey == (k)", k a literal (however macros generated the tests).
    pre="$BUILD_DIR/logs/${rel//[^A-Za-z0-9_.-]/_}.i"
    "$CXX" -E -P "${ASC_KERNEL_FLAGS[@]}" "${ASC_AIV_FLAGS[@]}" -include "$CHECK_DIR/get_tiling_data.h" \
        "${KERNEL_INCLUDES[@]}" "-I$SRC_ROOT/op_kernel" "$src" -o "$pre" >"$pre.log" 2>&1 ||
        die $E_FAILED "$rel does not preprocess against the headers (log: $pre.log)"
    mapfile -t keys < <(tr -s '[:space:]' ' ' <"$pre" | grep -oE 'g_tilingKey == \( ?-?[0-9]+' |
                        sed 's/.*( *//' | awk '!seen[$0]++')
    [[ ${#keys[@]} -gt 0 ]] || keys=(0)
    cores=(AIC AIV)
    case "$(grep -o 'KERNEL_TASK_TYPE_DEFAULT([A-Z0-9_]*)' "$src" | head -n 1)" in
        *AIV_ONLY*|*MIX_AIV_1_0*) cores=(AIV) ;;
        *AIC_ONLY*|*MIX_AIC_1_0*) cores=(AIC) ;;
    esac
    for key in "${keys[@]}"; do
        for core in "${cores[@]}"; do
            if [[ $core == AIC ]]; then core_flags=("${ASC_AIC_FLAGS[@]}"); else core_flags=("${ASC_AIV_FLAGS[@]}"); fi
            add_config "$rel:$core:$key" "$CXX" -fsyntax-only "${ASC_KERNEL_FLAGS[@]}" "${core_flags[@]}" \
                "-DTILING_KEY_VAR=$key" -include "$CHECK_DIR/get_tiling_data.h" "${KERNEL_INCLUDES[@]}" \
                "-I$SRC_ROOT/op_kernel" "$src"
        done
    done
done
if [[ ${#HOST_INCLUDES[@]} -gt 0 ]]; then
    host_flags=("-DPASA_CANN_VERSION=$CANN_VERSION_NUMBER")
    for dir in "${HOST_INCLUDES[@]}"; do host_flags+=("-isystem$dir"); done
    for dir in "${HOST_QUOTE_INCLUDES[@]}"; do host_flags+=("-iquote$dir"); done
    for src in "$SRC_ROOT"/op_host/*.cpp; do
        [[ -f "$src" ]] || continue
        add_config "${src#"$SRC_ROOT"/}" "$CXX" -fsyntax-only "${ASC_HOST_FLAGS[@]}" "${host_flags[@]}" \
            "-I$SRC_ROOT/op_host" "-I$SRC_ROOT/op_kernel" "$src"
    done
fi

# ---- compile them, JOBS at a time ------------------------------------------------------------------------
run_config() {  # run_config LINE: compile one configuration, its output into its log
    local IFS=$SEP
    read -r -a fields <<<"$1"
    "${fields[@]:2}" >"${fields[1]}" 2>&1
}
pids=()
for cfg in "${CONFIGS[@]}"; do
    while [[ $(jobs -rp | wc -l) -ge $JOBS ]]; do wait -n || true; done
    run_config "$cfg" &
    pids+=($!)
done
status=()
for pid in "${pids[@]}"; do
    if wait "$pid"; then status+=(0); else status+=(1); fi
done

# ---- report ----------------------------------------------------------------------------------------------
# Each error at a line of ours: its own line when it is in op_kernel/ or op_host/, else the innermost line of
# ours in its "In instantiation of / required from" chain (where our code called the API that refused).
ours_errors() {  # ours_errors LOG
    awk -v root="$SRC_ROOT/" '
        function ours(line) { return index(line, root "op_kernel/") == 1 || index(line, root "op_host/") == 1 }
        function loc(line,   m) { return match(line, /^[^:]+:[0-9]+/) ? substr(line, 1, RLENGTH) : "" }
        / error: / {
            where = ours($0) ? loc($0) : (first != "" ? first : loc($0))
            msg = $0; sub(/^.* error: /, "", msg)
            sub("^" root, "", where)
            print "  " where ": error: " msg
            first = ""
            next
        }
        ours($0) && first == "" && /(required from|In instantiation of|: In )/ { first = loc($0) }
        ours($0) && first == "" && /required from here/ { first = loc($0) }
    ' "$1"
}
failed=0
for i in "${!CONFIGS[@]}"; do
    IFS=$SEP read -r name log _ <<<"${CONFIGS[$i]}"
    if [[ ${status[$i]} -eq 0 ]]; then
        echo "check_ascendc_headers: ok      $name"
    else
        failed=$((failed + 1))
        echo "check_ascendc_headers: FAILED  $name (log: $log)"
        ours_errors "$log" | awk '!seen[$0]++'
    fi
done
if [[ $failed -gt 0 ]]; then
    die $E_FAILED "$failed of ${#CONFIGS[@]} configurations do not compile against the real headers"
fi
echo "check_ascendc_headers: done: all ${#CONFIGS[@]} configurations compile against the real headers"
