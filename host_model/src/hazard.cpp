// UB dependences of the vector pipe and the scalar unit (see hazard.h).
#include "host_model/hazard.h"

#include <algorithm>

#include "host_model/core.h"
#include "host_model/error.h"
#include "host_model/types.h"

namespace ascendc_model {

namespace {

// The first byte range where a and b overlap; empty (lo == hi) when they do not.
std::pair<uint32_t, uint32_t> Overlap(const Ranges& a, const Ranges& b) {
    size_t i = 0, j = 0;
    while (i < a.size() && j < b.size()) {
        const uint32_t lo = std::max(a[i].first, b[j].first), hi = std::min(a[i].second, b[j].second);
        if (lo < hi) return {lo, hi};
        if (a[i].second <= b[j].second) ++i;
        else ++j;
    }
    return {0, 0};
}

std::string RangeText(std::pair<uint32_t, uint32_t> r) {
    return "UB [" + std::to_string(r.first) + ", " + std::to_string(r.second) + ")";
}

std::string OpText(const std::string& api, Site site) { return api + " (" + site.Text() + ")"; }

// The open barrier's decision: idle unless an instruction after it conflicted with one before it.
void CloseBarrier(CoreContext& c) {
    HazardState& h = c.hazards;
    if (h.barrierOpen) {
        if (!h.barrierUsed) c.counters.idleVectorBarriers += 1;
        c.counters.vectorBarrierSites[h.barrierSite.Text()][h.barrierUsed ? 0 : 1] += 1;
    }
    h.barrierOpen = false;
    h.beforeBarrier.clear();
}

template <class V>
void DropBefore(V& v, uint64_t seq) {
    v.erase(std::remove_if(v.begin(), v.end(), [seq](const auto& x) { return x.seq < seq; }), v.end());
}

}  // namespace

std::string Site::Text() const {
    if (file == nullptr) return "?";
    const std::string f(file);
    const size_t slash = f.find_last_of('/');
    return (slash == std::string::npos ? f : f.substr(slash + 1)) + ":" + std::to_string(line);
}

void Normalise(Ranges& r) {
    std::sort(r.begin(), r.end());
    Ranges out;
    for (const auto& x : r) {
        if (x.first >= x.second) continue;
        if (!out.empty() && x.first <= out.back().second) out.back().second = std::max(out.back().second, x.second);
        else out.push_back(x);
    }
    r.swap(out);
}

void VectorAccess(VectorOp& op, bool write, Ranges bytes) {
    CoreContext* c = CurrentCoreOrNull();
    if (c == nullptr || bytes.empty()) return;
    Normalise(bytes);
    HazardState& h = c->hazards;
    const char* what = write ? "writes" : "reads";
    for (const VectorOp& prev : h.current) {
        auto r = Overlap(prev.writes, bytes);
        const char* kind = write ? "write after write" : "read after write";
        const char* did = "wrote";
        if (r.first == r.second && write) r = Overlap(prev.reads, bytes), kind = "write after read", did = "read";
        if (r.first == r.second) continue;
        Fail(op.api, OpText(op.api, op.site) + " " + what + " " + RangeText(r) + ", which " +
                         OpText(prev.api, prev.site) + " " + did + " with no PipeBarrier<PIPE_V>() between them (" +
                         kind + " on the vector pipe)");
    }
    if (h.barrierOpen && !h.barrierUsed)
        for (const VectorOp& prev : h.beforeBarrier) {
            const bool dependent =
                Overlap(prev.writes, bytes).second != 0 || (write && Overlap(prev.reads, bytes).second != 0);
            if (dependent) {
                h.barrierUsed = true;
                break;
            }
        }
    for (const ScalarWrite& w : h.unsyncedForVector) {
        const auto r = Overlap(w.bytes, bytes);
        if (r.first != r.second)
            Fail(op.api, OpText(op.api, op.site) + " " + what + " " + RangeText(r) + ", which the scalar " +
                             OpText(w.api, w.site) + " wrote with no SetFlag/WaitFlag<HardEvent::S_V> between them");
    }
    Ranges& into = write ? op.writes : op.reads;
    into.insert(into.end(), bytes.begin(), bytes.end());
    Normalise(into);
}

void CommitVectorOp(VectorOp&& op) {
    CoreContext* c = CurrentCoreOrNull();
    if (c == nullptr || (op.reads.empty() && op.writes.empty())) return;
    HazardState& h = c->hazards;
    op.seq = h.seq++;
    h.unsyncedForScalar.push_back(op);
    h.current.push_back(std::move(op));
}

void ScalarAccess(const std::string& api, Site site, bool write, uint32_t lo, uint32_t hi) {
    CoreContext& c = CurrentCore();
    HazardState& h = c.hazards;
    const Ranges bytes{{lo, hi}};
    for (const VectorOp& prev : h.unsyncedForScalar) {
        auto r = Overlap(prev.writes, bytes);
        const char* did = "wrote";
        if (r.first == r.second && write) r = Overlap(prev.reads, bytes), did = "read";
        if (r.first == r.second) continue;
        Fail(api, OpText(api, site) + (write ? " writes " : " reads ") + RangeText(r) +
                      ", which the vector instruction " + OpText(prev.api, prev.site) + " " + did +
                      ", with no SetFlag/WaitFlag<HardEvent::V_S> between them");
    }
    if (write) h.unsyncedForVector.push_back({api, site, bytes, h.seq++});
}

void PipeBarrierAt(int pipe, Site site) {
    static const char* names[] = {"S", "V", "M", "MTE1", "MTE2", "MTE3", "ALL", "FIX"};
    if (pipe == PIPE_S)
        Fail("PipeBarrier<PIPE_S>", site.Text() + ": the hardware orders the scalar pipe itself; PipeBarrier<PIPE_S> "
                                    "raises a hardware error (PipeBarrier docs, 约束说明)");
    static const Pipe charged[] = {Pipe::S, Pipe::V, Pipe::M, Pipe::MTE1, Pipe::MTE2, Pipe::MTE3, Pipe::S, Pipe::FIX};
    CountPipeBarrier(names[pipe], charged[pipe]);
    if (pipe != PIPE_V && pipe != PIPE_ALL) return;
    CoreContext& c = CurrentCore();
    HazardState& h = c.hazards;
    CloseBarrier(c);
    h.beforeBarrier.swap(h.current);
    h.current.clear();
    h.barrierOpen = true;
    h.barrierUsed = false;
    h.barrierSite = site;
    if (pipe == PIPE_ALL) {
        h.unsyncedForScalar.clear();
        h.unsyncedForVector.clear();
    }
}

void VectorScalarSet(bool vToS, int32_t id) {
    HazardState& h = CurrentCore().hazards;
    (vToS ? h.vsSets : h.svSets)[id].push_back(h.seq);
}

void VectorScalarWait(bool vToS, int32_t id) {
    CoreContext& c = CurrentCore();
    HazardState& h = c.hazards;
    auto& sets = vToS ? h.vsSets[id] : h.svSets[id];
    const uint64_t seq = sets.front();
    sets.pop_front();
    if (!vToS) {
        DropBefore(h.unsyncedForVector, seq);
        return;
    }
    // The scalar unit waited for the vector instructions before the SetFlag: they are ordered before every
    // vector instruction it issues from now on.
    OrderVectorBefore(seq);
    DropBefore(h.unsyncedForScalar, seq);
}

uint64_t NextVectorSeq() {
    CoreContext* c = CurrentCoreOrNull();
    return c ? c->hazards.seq : 0;
}

void OrderVectorBefore(uint64_t seq) {
    CoreContext* c = CurrentCoreOrNull();
    if (c == nullptr) return;
    DropBefore(c->hazards.current, seq);
    DropBefore(c->hazards.beforeBarrier, seq);
}

void FinishHazards() {
    CoreContext* c = CurrentCoreOrNull();
    if (c != nullptr) CloseBarrier(*c);
}

}  // namespace ascendc_model
