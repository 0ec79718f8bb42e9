// Intra-core events and the TPipe's event pool (see event.h).
#include "host_model/event.h"

#include "host_model/core.h"
#include "host_model/error.h"

namespace ascendc_model {

namespace {

EventFlag& Flag(const std::string& api, AscendC::HardEvent evt, int32_t id) {
    if (id < 0 || id >= kEventIds) Fail(api, "event ID " + std::to_string(id) + " outside 0..7 (SetFlag/WaitFlag docs)");
    return CurrentCore().events[static_cast<int>(evt)][id];
}

std::string ByText(const std::string& by, Site site) { return site.file ? by + " at " + site.Text() : by; }

std::string WaitWithoutSet(const std::string& by, Site site, const EventFlag& f) {
    return "wait without a set: " + ByText(by, site) + " waits for an event no SetFlag has set" +
           (f.by.empty() ? std::string() : " since " + ByText(f.by, f.site) + " waited it") +
           "; the pipe would wait forever (deadlock)";
}

bool IsVectorScalar(AscendC::HardEvent evt) { return evt == AscendC::HardEvent::V_S || evt == AscendC::HardEvent::S_V; }

}  // namespace

std::string EventText(const char* api, AscendC::HardEvent evt, int32_t id) {
    return std::string(api) + "<HardEvent::" + AscendC::HardEventName(evt) + ">(" + std::to_string(id) + ")";
}

void SetEventFlag(AscendC::HardEvent evt, int32_t id, const std::string& by, Site site) {
    const std::string api = EventText("SetFlag", evt, id);
    EventFlag& f = Flag(api, evt, id);
    if (f.set)
        Fail(api, "event set twice: " + ByText(by, site) + " sets it while the set by " + ByText(f.by, f.site) +
                      " is not yet waited; an event is one flag per HardEvent and ID, so one of the two WaitFlags "
                      "would wait forever (with TPipe and TQue, take IDs from AllocEventID/FetchEventID: SetFlag/"
                      "WaitFlag (ISASI) docs, 约束说明)");
    f = {true, by, site};
    if (IsVectorScalar(evt)) VectorScalarSet(evt == AscendC::HardEvent::V_S, id);
}

void WaitEventFlag(AscendC::HardEvent evt, int32_t id, const std::string& by, Site site) {
    const std::string api = EventText("WaitFlag", evt, id);
    EventFlag& f = Flag(api, evt, id);
    if (!f.set) Fail(api, WaitWithoutSet(by, site, f));
    f = {false, by, site};
    if (IsVectorScalar(evt)) VectorScalarWait(evt == AscendC::HardEvent::V_S, id);
}

void WaitEventFlagDeferred(AscendC::HardEvent evt, int32_t id, const std::string& by, Site site) {
    CoreContext& c = CurrentCore();
    EventFlag& f = c.events[static_cast<int>(evt)][id];
    if (f.set) f = {false, by, site};
    else if (c.eventError.empty())
        c.eventError = EventText("WaitFlag", evt, id) + ": " + WaitWithoutSet(by, site, f);
}

void FinishEvents() {
    CoreContext& c = CurrentCore();
    for (int e = 0; e < static_cast<int>(AscendC::HardEvent::MAX); ++e)
        for (int id = 0; id < kEventIds; ++id) {
            const EventFlag& f = c.events[e][id];
            if (f.set)
                Fail("kernel end", "event left set: " + EventText("SetFlag", static_cast<AscendC::HardEvent>(e), id) +
                                       " by " + ByText(f.by, f.site) + " has no WaitFlag before the core's program "
                                       "ends (SetFlag/WaitFlag docs: they come in pairs)");
        }
    if (!c.eventError.empty()) {
        const std::string e = c.eventError;
        c.eventError.clear();
        Fail("kernel end", e);
    }
}

AscendC::TEventID EventPool::Alloc(AscendC::HardEvent evt, const std::string& by, Site site) {
    const int e = static_cast<int>(evt);
    for (int id = 0; id < kEventIds; ++id)
        if (!(occupied_[e] & (1u << id))) {
            occupied_[e] = static_cast<uint8_t>(occupied_[e] | (1u << id));
            holder_[e][id] = ByText(by, site);
            return static_cast<AscendC::TEventID>(id);
        }
    Exhausted("TPipe::AllocEventID", evt, site);
}

AscendC::TEventID EventPool::Fetch(AscendC::HardEvent evt, Site site) const {
    const int e = static_cast<int>(evt);
    for (int id = 0; id < kEventIds; ++id)
        if (!(occupied_[e] & (1u << id))) return static_cast<AscendC::TEventID>(id);
    Exhausted("TPipe::FetchEventID", evt, site);
}

void EventPool::Release(AscendC::HardEvent evt, int32_t id, Site site) {
    const int e = static_cast<int>(evt);
    const std::string api = EventText("TPipe::ReleaseEventID", evt, id);
    if (id < 0 || id >= kEventIds || !(occupied_[e] & (1u << id)))
        Fail(api, "ReleaseEventID of an ID not allocated, at " + site.Text() +
                      ": the ID must come from AllocEventID (ReleaseEventID docs, 约束说明)");
    occupied_[e] = static_cast<uint8_t>(occupied_[e] & ~(1u << id));
    holder_[e][id].clear();
}

void EventPool::Drop(AscendC::HardEvent evt, int32_t id) {
    const int e = static_cast<int>(evt);
    occupied_[e] = static_cast<uint8_t>(occupied_[e] & ~(1u << id));
    holder_[e][id].clear();
}

std::string EventPool::Allocated() const {
    std::string out;
    for (int e = 0; e < static_cast<int>(AscendC::HardEvent::MAX); ++e)
        for (int id = 0; id < kEventIds; ++id)
            if (occupied_[e] & (1u << id))
                out += std::string(out.empty() ? "" : ", ") + "HardEvent::" +
                       AscendC::HardEventName(static_cast<AscendC::HardEvent>(e)) + " ID " + std::to_string(id) +
                       " (" + holder_[e][id] + ")";
    return out;
}

void EventPool::Exhausted(const char* api, AscendC::HardEvent evt, Site site) const {
    std::string holders;
    const int e = static_cast<int>(evt);
    for (int id = 0; id < kEventIds; ++id) holders += "; " + std::to_string(id) + ": " + holder_[e][id];
    Fail(std::string(api) + "<HardEvent::" + AscendC::HardEventName(evt) + ">",
         "event pool exhausted at " + site.Text() + ": all 8 IDs are allocated (" + holders.substr(2) +
             "); AllocEventID's IDs must be released once used (AllocEventID docs, 约束说明)");
}

}  // namespace ascendc_model
