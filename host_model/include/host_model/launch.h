// Running a mixed (KERNEL_TYPE_MIX_AIC_1_2) kernel on the host: blockDim AIC threads and 2*blockDim
// AIV threads, each with its own core context, started together and joined. The first failure of any
// core is rethrown as Error after every thread has stopped: cores blocked in a cross-core wait or
// SyncAll are released, a wait that can never be satisfied (every other core finished or blocked) is
// reported at once, and any wait longer than flagTimeoutSeconds is reported as a timeout.
#pragma once
#include <cstdint>
#include <functional>
#include <vector>

#include "host_model/cost.h"

namespace ascendc_model {

// The schedule modes of TilingContext::SetScheduleMode (0 normal, 1 batch: the launch starts only when
// all its cores are free, so none of them waits on a core that another stream holds).
constexpr uint32_t kScheduleModeNormal = 0;
constexpr uint32_t kScheduleModeBatch = 1;

struct LaunchConfig {
    uint32_t blockDim;
    uint64_t tilingKey = 0;
    double flagTimeoutSeconds = 10.0;
    // What the op's tiling set with SetScheduleMode. All-core barriers (SyncAll, CrossCoreSetFlag mode 0)
    // need batch mode: without it the cores of one launch may start in rounds and the barrier deadlocks
    // (SyncAll and CrossCoreSetFlag docs, 约束说明: "建议开启batchmode模式"); the model refuses them.
    uint32_t scheduleMode = kScheduleModeNormal;
    // Cost model (cost.h): unit costs for the modelled clocks (null: count only), and where to put each
    // core's counters after the run (AIC 0..blockDim-1, then AIV 0..2*blockDim-1; null: not wanted).
    const CostTable* cost = nullptr;
    std::vector<CoreCounters>* counters = nullptr;
};

// Runs `body` on every core: for code whose core-type tests are run-time (the model's own tests).
void LaunchMix(const LaunchConfig& cfg, const std::function<void()>& body);
// Runs `aicBody` on the AIC threads and `aivBody` on the AIV threads: the two builds of a kernel
// compiled once per core type (ASCENDC_MODEL_CORE_TYPE, see kernel_macros.h).
void LaunchMix(const LaunchConfig& cfg, const std::function<void()>& aicBody, const std::function<void()>& aivBody);

}  // namespace ascendc_model
