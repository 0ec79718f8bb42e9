// Intra-core events: SetFlag/WaitFlag of a (HardEvent, ID) pair and the TPipe's pool of IDs, with the rules of the
// real API. Every rule the model enforces names itself first in its message, then the event and the source lines:
//
//  - "event set twice": an event is one flag per HardEvent and ID (SetFlag/WaitFlag docs: SetFlag sets the flag
//    to 1, WaitFlag blocks while it is 0 and then clears it), so a second SetFlag before the WaitFlag of the first
//    is lost and one of the two WaitFlags waits forever. This is what a hard-coded ID does when it collides with
//    an event a TQue holds (SetFlag/WaitFlag (ISASI) docs, 约束说明: with TPipe and TQue the IDs come from
//    AllocEventID/FetchEventID, "容易与框架同步事件冲突，导致卡死").
//  - "wait without a set": a WaitFlag with no SetFlag of that event pending blocks its pipe forever.
//  - "event left set": SetFlag and WaitFlag come in pairs (SetFlag/WaitFlag docs, 约束说明); a flag still set
//    when the core's program ends, a tensor left in a queue included, is an error.
//  - the pool (TPipe::AllocEventID/FetchEventID/ReleaseEventID, asc-devkit impl/basic_api/kernel_tpipe_impl.h):
//    8 IDs per HardEvent; AllocEventID takes the lowest free one until ReleaseEventID ("event pool exhausted" when
//    none is free: the real one returns an ID out of range), FetchEventID returns it without taking it,
//    ReleaseEventID takes an ID that AllocEventID handed out ("ReleaseEventID of an ID not allocated"), and every
//    AllocEventID has its ReleaseEventID before the pipe dies ("AllocEventID without ReleaseEventID").
// The TQue events that come from this pool are in pipe.h.
#pragma once
#include <array>
#include <cstdint>
#include <string>

#include "host_model/hazard.h"
#include "host_model/types.h"

namespace ascendc_model {

// "SetFlag<HardEvent::V_MTE2>(0)" and the like: how the messages name an event.
std::string EventText(const char* api, AscendC::HardEvent evt, int32_t id);

// `by` names the caller (the kernel's SetFlag, or the TQue or TPipe API that sets events itself), `site` its line.
void SetEventFlag(AscendC::HardEvent evt, int32_t id, const std::string& by, Site site);
void WaitEventFlag(AscendC::HardEvent evt, int32_t id, const std::string& by, Site site);
// Where a failure must not throw (a destructor): waits if the flag is set, else records the rule broken in the core's
// eventError for FinishEvents.
void WaitEventFlagDeferred(AscendC::HardEvent evt, int32_t id, const std::string& by, Site site);
// The end of a core's program: fails on a flag still set, or on a rule recorded in eventError.
void FinishEvents();

// The event IDs of one TPipe.
class EventPool {
public:
    AscendC::TEventID Alloc(AscendC::HardEvent evt, const std::string& by, Site site);
    AscendC::TEventID Fetch(AscendC::HardEvent evt, Site site) const;
    void Release(AscendC::HardEvent evt, int32_t id, Site site);
    void Drop(AscendC::HardEvent evt, int32_t id);  // Release without its checks (the pipe's destruction)
    // The IDs still allocated ("" when none): "HardEvent::V_S ID 1 (AllocEventID at x.h:12)", ...
    std::string Allocated() const;

private:
    [[noreturn]] void Exhausted(const char* api, AscendC::HardEvent evt, Site site) const;
    std::array<uint8_t, kHardEventKinds> occupied_{};
    std::array<std::array<std::string, kEventIds>, kHardEventKinds> holder_;  // who allocated each ID, and where
};

}  // namespace ascendc_model
