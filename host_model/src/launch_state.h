// Internal: shared state of one LaunchMix run (the cores, the cross-core flag counters, the barrier),
// guarded by one mutex. Blocking waits go through BlockUntil, which also detects waits that can
// never be satisfied and waits past the timeout.
#pragma once
#include <array>
#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "host_model/core.h"
#include "host_model/launch.h"

namespace ascendc_model {

void BindCore(CoreContext* core);

// CrossCoreSetFlag docs (约束说明): every core has 16 flag counters, flagId 0..15 (higher ids keep only
// their low 4 bits); SyncAll's hardware barrier uses flagIds 11..14 itself ("SyncAll硬件同步接口flagId占用
//范围为[11-14]"; impl/basic_api/dav_c220/kernel_operator_sync_impl.h: SYNC_AIC_FLAG 11, SYNC_AIV_FLAG 12,
// SYNC_AIC_AIV_FLAG 13, SYNC_AIV_ONLY_ALL 14), so kernels may use 0..10 and 15.
constexpr int kCrossCoreFlags = 16;
constexpr int kSyncAllFirstFlag = 11, kSyncAllLastFlag = 14;
constexpr int kFlagCounterLimit = 15;    // "the counter of one flagId can be set at most 15 times"

// Thrown into cores blocked in a wait when another core failed; never reported itself.
struct Aborted {};

class LaunchState {
public:
    explicit LaunchState(const LaunchConfig& cfg);
    void Run(const std::function<void()>& aicBody, const std::function<void()>& aivBody);

    void CrossCoreSet(CoreContext& self, uint8_t mode, uint16_t flagId);
    void CrossCoreWait(CoreContext& self, uint8_t mode, uint16_t flagId);
    void SyncAll(CoreContext& self, bool aivOnly);

private:
    struct Waiter {
        const CoreContext* core;
        std::string what;
        std::function<bool()> ready;
    };
    // With mu_ held: waits until ready(), then runs consume(). Fails on abort, deadlock, timeout.
    void BlockUntil(std::unique_lock<std::mutex>& lock, CoreContext& self, const std::string& api,
                    const std::string& what, const std::function<bool()>& ready, const std::function<void()>& consume);
    void Count(uint32_t target, uint16_t flagId, const char* api, Stamp when);
    void CheckPending(int& pending, const std::string& whose, uint16_t flagId);
    void CheckFlagId(const char* api, uint16_t flagId) const;
    void CheckBatchMode(const std::string& api) const;
    void RunCore(CoreContext& core, const std::function<void()>& body);
    void CheckFlagsConsumed() const;  // after every core finished: no count or pending half left

    LaunchConfig cfg_;
    std::vector<std::unique_ptr<CoreContext>> cores_;  // AIC b at b; AIV (b, s) at blockDim + 2b + s
    std::mutex mu_;
    std::condition_variable cv_;
    std::vector<std::array<int, kCrossCoreFlags>> flags_;              // per core
    std::array<std::array<int, kCrossCoreFlags>, 2> mode0Arrivals_{};  // per core type
    std::vector<std::array<std::array<int, kCrossCoreFlags>, 2>> mode1Pending_, mode2Pending_;  // per block, sub-block
    std::array<uint32_t, 2> barrierArrived_{};   // SyncAll: [AIV only, all cores]
    std::array<uint64_t, 2> barrierGeneration_{};
    // Cost-model stamps (cost.h), beside the counters they belong to: one per pending count of a flag, the
    // latest arrival of an open mode-0 round or barrier, one per pending set of an AIV pair.
    using StampQueue = std::deque<Stamp>;
    std::vector<std::array<StampQueue, kCrossCoreFlags>> flagStamps_;
    std::array<std::array<Stamp, kCrossCoreFlags>, 2> mode0Latest_{};
    std::vector<std::array<std::array<StampQueue, kCrossCoreFlags>, 2>> mode1Stamps_, mode2Stamps_;
    std::array<Stamp, 2> barrierLatest_{}, barrierRelease_{};
    std::vector<Waiter*> waiters_;
    uint32_t finished_ = 0;
    bool aborted_ = false;
    std::exception_ptr firstError_;
};

LaunchState& CurrentLaunch();

}  // namespace ascendc_model
