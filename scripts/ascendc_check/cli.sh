# The command-line conventions of the CANN scripts (scripts/build_and_deploy.sh, check_ascendc_headers.sh,
# cpu_debug_check.sh), sourced by each.

# die CODE MESSAGE...: "<script>: error: MESSAGE" on stderr, then exit CODE (each script documents its codes).
die() {
    local code=$1
    shift
    echo "$(basename "$0" .sh): error: $*" >&2
    exit "$code"
}
