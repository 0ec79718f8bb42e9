// Synchronisation. Inside a core the model executes every pipe in program order, so SetFlag/WaitFlag
// have the rules of event.h checked (binary events, a wait without a set, an event left set), and PipeBarrier<PIPE_V> and the V_S / S_V events order the UB accesses of the
// vector pipe and the scalar unit that hazard.h checks. Across cores the flags are real: CrossCoreSetFlag /
// CrossCoreWaitFlag block the calling thread with the counting semantics of the docs (see launch.cpp),
// and SyncAll is a barrier.
#pragma once
#include <cstdint>

#include "host_model/event.h"
#include "host_model/hazard.h"
#include "host_model/types.h"

namespace ascendc_model {
void CrossCoreSet(uint8_t mode, uint16_t flagId);
void CrossCoreWait(uint8_t mode, uint16_t flagId);
void SyncAllCores(bool aivOnly);
}  // namespace ascendc_model

namespace AscendC {

template <HardEvent evt>
void SetFlag(int32_t eventID, ascendc_model::Site site = ascendc_model::Site::Here()) {
    ascendc_model::SetEventFlag(evt, eventID, "SetFlag", site);
}
template <HardEvent evt>
void WaitFlag(int32_t eventID, ascendc_model::Site site = ascendc_model::Site::Here()) {
    ascendc_model::WaitEventFlag(evt, eventID, "WaitFlag", site);
}
template <pipe_t pipe>
void PipeBarrier(ascendc_model::Site site = ascendc_model::Site::Here()) { ascendc_model::PipeBarrierAt(pipe, site); }

template <uint8_t modeId, pipe_t pipe>
void CrossCoreSetFlag(uint16_t flagId) {
    static_assert(modeId == 0 || modeId == 1 || modeId == 2, "Atlas A2 supports CrossCoreSetFlag modes 0, 1, 2");
    static_assert(pipe != PIPE_S && pipe != PIPE_ALL, "CrossCoreSetFlag does not take PIPE_S or PIPE_ALL");
    ascendc_model::CrossCoreSet(modeId, flagId);
}
// On Atlas A2 the wait's modeId has no effect: it consumes one count of this core's flag.
template <uint8_t modeId = 0, pipe_t pipe = PIPE_S>
void CrossCoreWaitFlag(uint16_t flagId) { ascendc_model::CrossCoreWait(modeId, flagId); }

template <bool isAIVOnly = true>
void SyncAll() { ascendc_model::SyncAllCores(isAIVOnly); }

}  // namespace AscendC
