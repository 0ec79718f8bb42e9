// Running a mixed (KERNEL_TYPE_MIX_AIC_1_2) kernel on the host: blockDim AIC threads and 2*blockDim
// AIV threads, each with its own core context, started together and joined. The first failure of any
// core is rethrown as Error after every thread has stopped: cores blocked in a cross-core wait or
// SyncAll are released, a wait that can never be satisfied (every other core finished or blocked) is
// reported at once, and any wait longer than flagTimeoutSeconds is reported as a timeout.
#pragma once
#include <cstdint>
#include <functional>

namespace ascendc_model {

struct LaunchConfig {
    uint32_t blockDim;
    uint64_t tilingKey = 0;
    double flagTimeoutSeconds = 10.0;
};

void LaunchMix(const LaunchConfig& cfg, const std::function<void()>& body);

}  // namespace ascendc_model
