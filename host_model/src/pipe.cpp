// TPipe memory bookkeeping and queue state machine.
#include "host_model/pipe.h"

#include <algorithm>

namespace ascendc_model {

namespace {
// Why UB and L1 offer less than their physical size (see core.h): the message names the reserves, so a
// plan that assumed the physical size is found.
std::string CapacityNote(Memory mem) {
    if (mem == Memory::UB)
        return " (192 KB less the vector APIs' scratch at TMP_UB_OFFSET = 184 KB and the mixed kernel's 256 B)";
    if (mem == Memory::L1) return " (512 KB less the mixed kernel's 256 B)";
    return "";
}
}  // namespace

// TPipe::Init on dav-c220 takes M_MTE1 IDs 0, 1 and 2 on the AIC and sets them; TPipe::Destroy waits them.
constexpr int kMatmulMacroEvents = 3;
const char* const kMatmulMacroBy = "TPipe (M_MTE1 IDs 0-2 of the matmul macro: TPipe::Init, kernel_tpipe_impl.h)";

TPipeState::TPipeState(AscendC::TPipe* owner) : core_(&CurrentCore()), owner_(owner) {
    if (core_->pipe != nullptr) Fail("TPipe", "a second TPipe on this core while the first is alive");
    core_->pipe = this;
    core_->tpipe = owner;
    if (core_->type == CoreType::AIC)
        for (int i = 0; i < kMatmulMacroEvents; ++i)
            SetEventFlag(AscendC::HardEvent::M_MTE1, events_.Alloc(AscendC::HardEvent::M_MTE1, kMatmulMacroBy, {}),
                         kMatmulMacroBy, {});
}

TPipeState::~TPipeState() { Release(); }

void TPipeState::Detach(QueueState* q, std::vector<HeldEvent> held) {
    queues_.erase(std::remove(queues_.begin(), queues_.end(), q), queues_.end());
    for (HeldEvent& h : held) orphaned_.push_back(std::move(h));
}

void TPipeState::Release() {
    if (core_->pipe != this) return;
    const std::string by = "TPipe::Destroy";
    for (QueueState* q : queues_) {
        for (HeldEvent& h : q->TakeHeldEvents()) orphaned_.push_back(std::move(h));
        q->PipeGone();
    }
    queues_.clear();
    for (const HeldEvent& h : orphaned_) {
        WaitEventFlagDeferred(h.evt, h.id, by, h.site);
        events_.Drop(h.evt, h.id);
    }
    orphaned_.clear();
    if (core_->type == CoreType::AIC)
        for (int i = 0; i < kMatmulMacroEvents; ++i) {
            WaitEventFlagDeferred(AscendC::HardEvent::M_MTE1, i, by, {});
            events_.Drop(AscendC::HardEvent::M_MTE1, i);
        }
    const std::string left = events_.Allocated();
    if (!left.empty() && core_->eventError.empty())
        core_->eventError = "TPipe::Destroy: AllocEventID without ReleaseEventID: " + left +
                            " (AllocEventID docs: it must be paired with ReleaseEventID)";
    used_.fill(0);
    core_->pipe = nullptr;
    if (core_->tpipe == owner_) core_->tpipe = nullptr;
}

std::vector<BufferSlot> TPipeState::Reserve(AscendC::TPosition pos, uint32_t count, uint32_t bytes,
                                            const std::string& what) {
    const std::string api = "TPipe::InitBuffer";
    const Memory mem = AscendC::PositionMemory(pos);
    if (core_->Mem(mem).empty())
        Fail(api, std::string(AscendC::PositionName(pos)) + " lives in " + MemoryName(mem) + ", which this core does not have");
    if (count == 0 || bytes == 0) Fail(api, what + " with zero buffers or zero length");
    const uint32_t aligned = (bytes + kBlockBytes - 1) / kBlockBytes * kBlockBytes;
    uint32_t& used = used_[static_cast<int>(mem)];
    const uint64_t need = uint64_t(aligned) * count;
    if (used + need > MemoryCapacity(mem))
        Fail(api, what + " at " + AscendC::PositionName(pos) + " needs " + std::to_string(need) + " B but only " +
                      std::to_string(MemoryCapacity(mem) - used) + " B of " + MemoryName(mem) + "'s " +
                      std::to_string(MemoryCapacity(mem)) + " B are free" + CapacityNote(mem));
    std::vector<BufferSlot> slots(count);
    for (BufferSlot& s : slots) {
        s.position = pos;
        s.memory = mem;
        s.offset = used;
        s.length = aligned;
        s.ownerCore = core_->globalIndex;
        used += aligned;
    }
    return slots;
}

std::string QueueState::Label() const {
    return std::string("TQue<") + AscendC::PositionName(pos_) + ", " + std::to_string(depth_) + ">";
}

QueueState::~QueueState() {
    if (pipe_ != nullptr && CurrentCoreOrNull() != nullptr && CurrentCore().pipe == pipe_)
        pipe_->Detach(this, TakeHeldEvents());
}

std::vector<HeldEvent> QueueState::TakeHeldEvents() {
    std::vector<HeldEvent> held;
    for (size_t i = 0; i < slots_.size(); ++i) {
        if (freeHeld_[i].id >= 0 && slots_[i].state == BufferSlot::State::Free) held.push_back(freeHeld_[i]);
        // A tensor left in the queue: its event stays set ("event left set" at the end), its ID is not the pool's
        // concern any more.
        if (enQueHeld_[i].id >= 0) pipe_->Events().Drop(enQueHeld_[i].evt, enQueHeld_[i].id);
        freeHeld_[i].id = enQueHeld_[i].id = -1;
    }
    return held;
}

TPipeState& QueueState::Pipe(const std::string& api) {
    if (pipe_ == nullptr || CurrentCore().pipe != pipe_) Fail(api, "queue used after its TPipe was destroyed");
    return *pipe_;
}

void QueueState::Init(TPipeState& pipe, AscendC::TPosition pos, int32_t depth, uint8_t num, uint32_t len) {
    using AscendC::HardEvent;
    using AscendC::TPosition;
    if (!slots_.empty()) Fail("TPipe::InitBuffer", Label() + " initialised twice");
    pos_ = pos;
    depth_ = depth;
    if (depth < 1) Fail("TPipe::InitBuffer", Label() + ": queue depth must be at least 1");
    switch (pos) {  // GetQueEvt on dav-c220 (see pipe.h)
        case TPosition::VECIN: enQueEvt_ = HardEvent::MTE2_V, freeEvt_ = HardEvent::V_MTE2; break;
        case TPosition::VECOUT: enQueEvt_ = HardEvent::V_MTE3, freeEvt_ = HardEvent::MTE3_V; break;
        case TPosition::A1:
        case TPosition::B1: enQueEvt_ = HardEvent::MTE2_MTE1, freeEvt_ = HardEvent::MTE1_MTE2; break;
        case TPosition::A2:
        case TPosition::B2: enQueEvt_ = HardEvent::MTE1_M, freeEvt_ = HardEvent::M_MTE1; break;
        case TPosition::CO1: enQueEvt_ = HardEvent::M_FIX, freeEvt_ = HardEvent::FIX_M; break;
        default: Fail("TPipe::InitBuffer", Label() + ": TQue at this position is not modelled");
    }
    slots_ = pipe.Reserve(pos, num, len, Label());
    enQueHeld_.assign(slots_.size(), {});
    freeHeld_.assign(slots_.size(), {});
    pipe_ = &pipe;
    pipe.Attach(this);
}

BufferSlot* QueueState::Alloc(Site site) {
    const std::string api = Label() + "::AllocTensor";
    if (slots_.empty()) Fail(api, "queue used before TPipe::InitBuffer");
    TPipeState& pipe = Pipe(api);
    for (size_t i = 0; i < slots_.size(); ++i) {
        BufferSlot& s = slots_[i];
        if (s.state == BufferSlot::State::Free) {
            HeldEvent& held = freeHeld_[i];
            if (held.id >= 0) {  // the FreeTensor's event: the backward pipe is done with the buffer
                WaitEventFlag(held.evt, held.id, api, site);
                pipe.Events().Release(held.evt, held.id, site);
                held.id = -1;
            }
            s.state = BufferSlot::State::Allocated;
            if (pos_ == AscendC::TPosition::VECOUT) OrderVectorBefore(s.orderedBefore);
            return &s;
        }
    }
    Fail(Label() + "::AllocTensor", "all " + std::to_string(slots_.size()) +
                                        " buffers are in use (a FreeTensor is missing); the hardware would hang");
}

BufferSlot* QueueState::Own(const BufferSlot* slot, const std::string& api) {
    for (BufferSlot& s : slots_)
        if (&s == slot) return &s;
    Fail(api, "tensor does not belong to this queue");
}

void QueueState::EnQue(const BufferSlot* slot, uint64_t generation, Site site) {
    const std::string api = Label() + "::EnQue";
    BufferSlot* s = Own(slot, api);
    if (s->generation != generation || s->state != BufferSlot::State::Allocated)
        Fail(api, s->state == BufferSlot::State::Enqueued ? "tensor is already enqueued"
                                                           : "tensor was freed (EnQue after FreeTensor)");
    if (static_cast<int32_t>(queued_.size()) >= depth_)
        Fail(api, "queue depth " + std::to_string(depth_) + " exceeded (DeQue the earlier tensors first)");
    HeldEvent& held = enQueHeld_[s - slots_.data()];
    held = {enQueEvt_, Pipe(api).Events().Alloc(enQueEvt_, api, site), api, site};
    SetEventFlag(held.evt, held.id, api, site);
    s->state = BufferSlot::State::Enqueued;
    if (pos_ == AscendC::TPosition::VECOUT) s->orderedBefore = NextVectorSeq();
    queued_.push_back(s);
}

BufferSlot* QueueState::DeQue(Site site) {
    const std::string api = Label() + "::DeQue";
    if (queued_.empty()) Fail(api, "queue is empty: no tensor was EnQue'd");
    BufferSlot* s = queued_.front();
    queued_.pop_front();
    HeldEvent& held = enQueHeld_[s - slots_.data()];
    WaitEventFlag(held.evt, held.id, api, site);
    Pipe(api).Events().Release(held.evt, held.id, site);
    held.id = -1;
    s->state = BufferSlot::State::Allocated;
    if (pos_ == AscendC::TPosition::VECIN) OrderVectorBefore(s->orderedBefore);
    return s;
}

void QueueState::Free(const BufferSlot* slot, uint64_t generation, Site site) {
    const std::string api = Label() + "::FreeTensor";
    BufferSlot* s = Own(slot, api);
    if (s->generation != generation || s->state == BufferSlot::State::Free) Fail(api, "tensor freed twice");
    if (s->state == BufferSlot::State::Enqueued) Fail(api, "tensor is still enqueued; DeQue it first");
    HeldEvent& held = freeHeld_[s - slots_.data()];
    held = {freeEvt_, Pipe(api).Events().Alloc(freeEvt_, api, site), api, site};
    SetEventFlag(held.evt, held.id, api, site);
    s->state = BufferSlot::State::Free;
    ++s->generation;
    if (pos_ == AscendC::TPosition::VECIN) s->orderedBefore = NextVectorSeq();
}

}  // namespace ascendc_model

AscendC::TPipe* GetTPipePtr() {
    AscendC::TPipe* p = ascendc_model::CurrentCore().tpipe;
    if (p == nullptr) ascendc_model::Fail("GetTPipePtr", "no TPipe alive on this core");
    return p;
}
