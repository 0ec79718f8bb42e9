// A translation unit compiled for the AIC only (ASCENDC_MODEL_CORE_TYPE=1, set on this file in
// CMakeLists.txt), as CANN compiles the cube side of a mixed kernel: its kernel must not run on an AIV.
#include "harness.h"

using namespace AscendC;

namespace {
void AicBuildOfAKernel() {
    KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_MIX_AIC_1_2);
    if ASCEND_IS_AIC {
        HM_CHECK(GetTaskRatio() == 1, "the AIC build runs on the AIC");
    }
}
}  // namespace

HM_CASE(core_build_runs_on_its_core_type) {
    ascendc_model::LaunchMix({1, 0, 5.0}, [] { AicBuildOfAKernel(); }, [] {});
}

HM_CASE(misuse_core_build_on_the_wrong_core) {
    ascendc_model::LaunchMix({1, 0, 5.0}, [] {}, [] { AicBuildOfAKernel(); });
}
