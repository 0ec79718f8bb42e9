// TPipe memory bookkeeping and queue state machine.
#include "host_model/pipe.h"

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

TPipeState::TPipeState() : core_(&CurrentCore()) {
    if (core_->pipe != nullptr) Fail("TPipe", "a second TPipe on this core while the first is alive");
    core_->pipe = this;
}

TPipeState::~TPipeState() { Release(); }

void TPipeState::Release() {
    used_.fill(0);
    if (core_->pipe == this) core_->pipe = nullptr;
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

void QueueState::Init(TPipeState& pipe, AscendC::TPosition pos, int32_t depth, uint8_t num, uint32_t len) {
    if (!slots_.empty()) Fail("TPipe::InitBuffer", Label() + " initialised twice");
    pos_ = pos;
    depth_ = depth;
    if (depth < 1) Fail("TPipe::InitBuffer", Label() + ": queue depth must be at least 1");
    slots_ = pipe.Reserve(pos, num, len, Label());
}

BufferSlot* QueueState::Alloc() {
    if (slots_.empty()) Fail(Label() + "::AllocTensor", "queue used before TPipe::InitBuffer");
    for (BufferSlot& s : slots_)
        if (s.state == BufferSlot::State::Free) {
            s.state = BufferSlot::State::Allocated;
            if (pos_ == AscendC::TPosition::VECOUT) OrderVectorBefore(s.orderedBefore);
            return &s;
        }
    Fail(Label() + "::AllocTensor", "all " + std::to_string(slots_.size()) +
                                        " buffers are in use (a FreeTensor is missing); the hardware would hang");
}

BufferSlot* QueueState::Own(const BufferSlot* slot, const std::string& api) {
    for (BufferSlot& s : slots_)
        if (&s == slot) return &s;
    Fail(api, "tensor does not belong to this queue");
}

void QueueState::EnQue(const BufferSlot* slot, uint64_t generation) {
    const std::string api = Label() + "::EnQue";
    BufferSlot* s = Own(slot, api);
    if (s->generation != generation || s->state != BufferSlot::State::Allocated)
        Fail(api, s->state == BufferSlot::State::Enqueued ? "tensor is already enqueued"
                                                           : "tensor was freed (EnQue after FreeTensor)");
    if (static_cast<int32_t>(queued_.size()) >= depth_)
        Fail(api, "queue depth " + std::to_string(depth_) + " exceeded (DeQue the earlier tensors first)");
    s->state = BufferSlot::State::Enqueued;
    if (pos_ == AscendC::TPosition::VECOUT) s->orderedBefore = NextVectorSeq();
    queued_.push_back(s);
}

BufferSlot* QueueState::DeQue() {
    if (queued_.empty()) Fail(Label() + "::DeQue", "queue is empty: no tensor was EnQue'd");
    BufferSlot* s = queued_.front();
    queued_.pop_front();
    s->state = BufferSlot::State::Allocated;
    if (pos_ == AscendC::TPosition::VECIN) OrderVectorBefore(s->orderedBefore);
    return s;
}

void QueueState::Free(const BufferSlot* slot, uint64_t generation) {
    const std::string api = Label() + "::FreeTensor";
    BufferSlot* s = Own(slot, api);
    if (s->generation != generation || s->state == BufferSlot::State::Free) Fail(api, "tensor freed twice");
    if (s->state == BufferSlot::State::Enqueued) Fail(api, "tensor is still enqueued; DeQue it first");
    s->state = BufferSlot::State::Free;
    ++s->generation;
    if (pos_ == AscendC::TPosition::VECIN) s->orderedBefore = NextVectorSeq();
}

}  // namespace ascendc_model
