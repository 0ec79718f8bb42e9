// LaunchMix and the cross-core synchronisation semantics.
//
// Flag counting (CrossCoreSetFlag docs, Atlas A2): every core has one counter per flagId; a
// CrossCoreWaitFlag blocks until its own counter is non-zero and decrements it (the wait's modeId
// has no effect on A2). A set raises counters as follows:
//   mode 0: when all cores of the setter's type have set flagId, every core of that type gets +1;
//   mode 1 (AIV only): when both AIVs of an AI core have set it, both get +1;
//   mode 2 from the AIC: both of its AIVs get +1; from an AIV: when both AIVs have set it, the AIC
//           gets +1.
// A counter (or a pending half of a pair) beyond 15 is an error, as the hardware would hang.
#include "host_model/launch.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <thread>

#include "host_model/error.h"
#include "host_model/sync.h"
#include "launch_state.h"

namespace ascendc_model {

namespace {
thread_local LaunchState* tLaunch = nullptr;
std::string FlagText(const char* api, uint8_t mode, uint16_t flagId) {
    return std::string(api) + "(flag " + std::to_string(flagId) + ", mode " + std::to_string(mode) + ")";
}
}  // namespace

LaunchState& CurrentLaunch() {
    if (tLaunch == nullptr) throw Error("host: cross-core synchronisation called outside LaunchMix");
    return *tLaunch;
}

LaunchState::LaunchState(const LaunchConfig& cfg) : cfg_(cfg) {
    if (cfg.blockDim == 0) throw Error("host: LaunchMix: blockDim must be at least 1");
    const uint32_t b = cfg.blockDim;
    for (uint32_t i = 0; i < 3 * b; ++i) {
        auto core = std::make_unique<CoreContext>();
        core->type = i < b ? CoreType::AIC : CoreType::AIV;
        core->blockIdx = i < b ? i : (i - b) / 2;
        core->subBlockIdx = i < b ? 0 : (i - b) % 2;
        core->blockDim = b;
        core->tilingKey = cfg.tilingKey;
        core->globalIndex = i;
        if (core->type == CoreType::AIC) {
            for (Memory m : {Memory::L1, Memory::L0A, Memory::L0B, Memory::L0C})
                core->Mem(m).assign(MemoryCapacity(m), 0xFF);
        } else {
            core->Mem(Memory::UB).assign(kUbBytes, 0xFF);
        }
        cores_.push_back(std::move(core));
    }
    flags_.assign(3 * b, {});
    mode1Pending_.assign(b, {});
    mode2Pending_.assign(b, {});
    flagStamps_.assign(3 * b, {});
    mode1Stamps_.assign(b, {});
    mode2Stamps_.assign(b, {});
    for (auto& core : cores_) core->cost = cfg.cost;
}

void LaunchState::RunCore(CoreContext& core, const std::function<void()>& body) {
    BindCore(&core);
    tLaunch = this;
    std::exception_ptr error;
    try {
        body();
        FinishEvents();
        FinishHazards();
        CloseSegment();  // the work after the last synchronisation point
    } catch (const Aborted&) {
    } catch (const Error&) {
        error = std::current_exception();
    } catch (const std::exception& e) {
        error = std::make_exception_ptr(Error(core.Name() + ": unexpected exception: " + e.what()));
    }
    std::lock_guard<std::mutex> lock(mu_);
    if (error && !firstError_) firstError_ = error;
    if (error) aborted_ = true;
    ++finished_;
    cv_.notify_all();
}

void LaunchState::Run(const std::function<void()>& aicBody, const std::function<void()>& aivBody) {
    std::vector<std::thread> threads;
    threads.reserve(cores_.size());
    for (auto& core : cores_) {
        const std::function<void()>& body = core->type == CoreType::AIC ? aicBody : aivBody;
        threads.emplace_back([this, &core, &body] { RunCore(*core, body); });
    }
    for (std::thread& t : threads) t.join();
    if (firstError_) std::rethrow_exception(firstError_);
    CheckFlagsConsumed();
    if (const char* log = std::getenv("ASCENDC_MODEL_BARRIER_LOG")) {
        std::ofstream out(log, std::ios::app);
        for (const auto& core : cores_)
            for (const auto& [site, n] : core->counters.vectorBarrierSites) out << site << ' ' << n[0] << ' ' << n[1] << '\n';
    }
    if (cfg_.counters != nullptr) {
        cfg_.counters->clear();
        for (const auto& core : cores_) cfg_.counters->push_back(core->counters);
    }
}

void LaunchState::CheckFlagsConsumed() const {
    // CrossCoreSetFlag is used with CrossCoreWaitFlag (CrossCoreSetFlag docs, 功能说明): a count no wait consumed, or
    // an AIV's half of a pair its partner never completed, is a protocol error of the kernel.
    const auto fail = [](const std::string& what) { throw Error("launch end: cross-core flag left set: " + what); };
    for (size_t c = 0; c < cores_.size(); ++c)
        for (int f = 0; f < kCrossCoreFlags; ++f)
            if (flags_[c][f] > 0)
                fail("flag " + std::to_string(f) + " of " + cores_[c]->Name() + " holds " + std::to_string(flags_[c][f]) +
                     " set(s) no CrossCoreWaitFlag consumed");
    for (uint32_t blk = 0; blk < cfg_.blockDim; ++blk)
        for (int sub = 0; sub < 2; ++sub)
            for (int f = 0; f < kCrossCoreFlags; ++f)
                for (const auto* pend : {&mode1Pending_, &mode2Pending_})
                    if ((*pend)[blk][sub][f] > 0)
                        fail("flag " + std::to_string(f) + " (mode " + (pend == &mode1Pending_ ? "1" : "2") + ") set by " +
                             cores_[cfg_.blockDim + 2 * blk + sub]->Name() + " without the matching set of the other AIV");
    for (int type = 0; type < 2; ++type)
        for (int f = 0; f < kCrossCoreFlags; ++f)
            if (mode0Arrivals_[type][f] > 0)
                fail("flag " + std::to_string(f) + " (mode 0) set by " + std::to_string(mode0Arrivals_[type][f]) +
                     (type == 0 ? " AIC(s)" : " AIV(s)") + ", not by all");
}

void LaunchState::BlockUntil(std::unique_lock<std::mutex>& lock, CoreContext& self, const std::string& api,
                             const std::string& what, const std::function<bool()>& ready,
                             const std::function<void()>& consume) {
    Waiter me{&self, what, ready};
    waiters_.push_back(&me);
    struct Unregister {
        std::vector<Waiter*>& list;
        Waiter* w;
        ~Unregister() { list.erase(std::find(list.begin(), list.end(), w)); }
    } unregister{waiters_, &me};
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(cfg_.flagTimeoutSeconds);
    while (true) {
        if (aborted_) throw Aborted{};
        if (ready()) {
            consume();
            return;
        }
        const bool othersRunning = finished_ + waiters_.size() < cores_.size();
        bool someoneReady = false;
        for (Waiter* w : waiters_) someoneReady = someoneReady || w->ready();
        if (!othersRunning && !someoneReady) {
            std::string blocked;
            for (Waiter* w : waiters_) blocked += "; " + w->core->Name() + " in " + w->what;
            Fail(api, what + " can never be satisfied: every core has finished or is blocked (blocked: " +
                          blocked.substr(2) + ")");
        }
        if (cv_.wait_until(lock, deadline) == std::cv_status::timeout && !ready() && !aborted_)
            Fail(api, what + " timed out after " + std::to_string(cfg_.flagTimeoutSeconds) + " s");
    }
}

void LaunchState::CheckPending(int& pending, const std::string& whose, uint16_t flagId) {
    if (++pending > kFlagCounterLimit)
        Fail("CrossCoreSetFlag", "flag " + std::to_string(flagId) + " set more than " +
                                     std::to_string(kFlagCounterLimit) + " times by " + whose +
                                     " without the matching sets of its partner cores");
}

void LaunchState::Count(uint32_t target, uint16_t flagId, const char* api, Stamp when) {
    int& c = flags_[target][flagId];
    if (c >= kFlagCounterLimit)
        Fail(api, "flag " + std::to_string(flagId) + " of " + cores_[target]->Name() + " set more than " +
                      std::to_string(kFlagCounterLimit) + " times without a CrossCoreWaitFlag (hardware limit)");
    ++c;
    flagStamps_[target][flagId].push_back(when);
}

void LaunchState::CheckFlagId(const char* api, uint16_t flagId) const {
    if (flagId >= kCrossCoreFlags)
        Fail(api, "flagId " + std::to_string(flagId) + " outside 0..15 (16 flag counters per core; the hardware would "
                      "keep the low 4 bits)");
    if (flagId >= kSyncAllFirstFlag && flagId <= kSyncAllLastFlag)
        Fail(api, "flagId " + std::to_string(flagId) + " is reserved: SyncAll uses flagIds 11-14 (CrossCoreSetFlag "
                      "docs, 约束说明)");
}

void LaunchState::CheckBatchMode(const std::string& api) const {
    if (cfg_.scheduleMode != kScheduleModeBatch)
        Fail(api, "an all-core barrier in a launch whose tiling did not set batch mode (SetScheduleMode(1)); "
                  "without it the cores may start in rounds and the barrier deadlocks (SyncAll docs, 约束说明)");
}

void LaunchState::CrossCoreSet(CoreContext& self, uint8_t mode, uint16_t flagId) {
    const char* api = "CrossCoreSetFlag";
    CheckFlagId(api, flagId);
    if (mode == 0) CheckBatchMode(FlagText(api, mode, flagId));
    const Stamp now = CloseSegment();
    self.counters.crossCoreSets += 1;
    std::lock_guard<std::mutex> lock(mu_);
    const uint32_t b = cfg_.blockDim, blk = self.blockIdx;
    const uint32_t aiv0 = b + 2 * blk, aic = blk;
    const bool isAic = self.type == CoreType::AIC;
    if (mode == 0) {
        int& arrived = mode0Arrivals_[isAic ? 0 : 1][flagId];
        Stamp& latest = mode0Latest_[isAic ? 0 : 1][flagId];
        latest = Later(latest, now);
        const uint32_t group = isAic ? b : 2 * b;
        if (++arrived == static_cast<int>(group)) {
            arrived = 0;
            for (uint32_t i = isAic ? 0 : b; i < (isAic ? b : 3 * b); ++i) Count(i, flagId, api, latest);
            latest = Stamp{};
        }
    } else if (mode == 1 || !isAic) {
        if (isAic) Fail(api, "mode 1 synchronises the two AIVs of an AI core; the AIC cannot use it");
        // Both AIVs must set before anyone is counted: mode 1 counts both AIVs, mode 2 the AIC.
        auto& pend = (mode == 1 ? mode1Pending_ : mode2Pending_)[blk];
        auto& stamps = (mode == 1 ? mode1Stamps_ : mode2Stamps_)[blk];
        CheckPending(pend[self.subBlockIdx][flagId], self.Name(), flagId);
        stamps[self.subBlockIdx][flagId].push_back(now);
        if (pend[0][flagId] > 0 && pend[1][flagId] > 0) {
            --pend[0][flagId];
            --pend[1][flagId];
            const Stamp both = Later(stamps[0][flagId].front(), stamps[1][flagId].front());
            stamps[0][flagId].pop_front();
            stamps[1][flagId].pop_front();
            if (mode == 1) {
                Count(aiv0, flagId, api, both);
                Count(aiv0 + 1, flagId, api, both);
            } else {
                Count(aic, flagId, api, both);
            }
        }
    } else {  // mode 2 from the AIC: both of its AIVs
        Count(aiv0, flagId, api, now);
        Count(aiv0 + 1, flagId, api, now);
    }
    cv_.notify_all();
}

void LaunchState::CrossCoreWait(CoreContext& self, uint8_t mode, uint16_t flagId) {
    const char* api = "CrossCoreWaitFlag";
    CheckFlagId(api, flagId);
    CloseSegment();
    self.counters.crossCoreWaits += 1;
    std::unique_lock<std::mutex> lock(mu_);
    int& counter = flags_[self.globalIndex][flagId];
    StampQueue& stamps = flagStamps_[self.globalIndex][flagId];
    Stamp released;
    BlockUntil(lock, self, api, FlagText(api, mode, flagId), [&counter] { return counter > 0; },
               [&counter, &stamps, &released] {
                   --counter;
                   released = stamps.front();
                   stamps.pop_front();
               });
    WaitUntil(released);
}

void LaunchState::SyncAll(CoreContext& self, bool aivOnly) {
    if (aivOnly && self.type == CoreType::AIC) Fail("SyncAll", "SyncAll<true> synchronises AIVs; called on the AIC");
    CheckBatchMode(aivOnly ? "SyncAll<true>" : "SyncAll<false>");
    const Stamp now = CloseSegment();
    self.counters.barriers += 1;
    std::unique_lock<std::mutex> lock(mu_);
    const int g = aivOnly ? 0 : 1;
    const uint32_t group = aivOnly ? 2 * cfg_.blockDim : 3 * cfg_.blockDim;
    const uint64_t generation = barrierGeneration_[g];
    barrierLatest_[g] = Later(barrierLatest_[g], now);
    if (++barrierArrived_[g] == group) {
        barrierArrived_[g] = 0;
        ++barrierGeneration_[g];
        barrierRelease_[g] = barrierLatest_[g];
        barrierLatest_[g] = Stamp{};
        WaitUntil(barrierRelease_[g]);
        cv_.notify_all();
        return;
    }
    BlockUntil(lock, self, "SyncAll", aivOnly ? "SyncAll<true>" : "SyncAll<false>",
               [this, g, generation] { return barrierGeneration_[g] != generation; }, [] {});
    WaitUntil(barrierRelease_[g]);
}

void LaunchMix(const LaunchConfig& cfg, const std::function<void()>& body) {
    LaunchState state(cfg);
    state.Run(body, body);
}

void LaunchMix(const LaunchConfig& cfg, const std::function<void()>& aicBody, const std::function<void()>& aivBody) {
    LaunchState state(cfg);
    state.Run(aicBody, aivBody);
}

void CrossCoreSet(uint8_t mode, uint16_t flagId) { CurrentLaunch().CrossCoreSet(CurrentCore(), mode, flagId); }
void CrossCoreWait(uint8_t mode, uint16_t flagId) { CurrentLaunch().CrossCoreWait(CurrentCore(), mode, flagId); }
void SyncAllCores(bool aivOnly) { CurrentLaunch().SyncAll(CurrentCore(), aivOnly); }

}  // namespace ascendc_model
