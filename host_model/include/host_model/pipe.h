// TPipe, TQue and TBuf: carving the on-chip memories into buffers and handing them between stages.
// Checks: InitBuffer against the memory's capacity (UB 192 KB shared by VECIN/VECOUT/VECCALC, L1 512 KB
// for A1/B1, L0A/L0B 64 KB, L0C 128 KB); buffers are 32-byte aligned like the real TPipe; AllocTensor
// with every buffer in use, EnQue past the queue depth, DeQue on an empty queue, FreeTensor of a
// tensor the queue does not hold, and any use of a freed or still-enqueued tensor fail.
#pragma once
#include <array>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "host_model/tensor.h"

namespace ascendc_model {

// Memory bookkeeping of one core's TPipe: a bump allocator per memory, released when the pipe dies.
class TPipeState {
public:
    TPipeState();
    ~TPipeState();
    TPipeState(const TPipeState&) = delete;
    TPipeState& operator=(const TPipeState&) = delete;
    // Reserves `count` buffers of `bytes` (rounded up to 32 B) at `pos`; `what` names the caller.
    std::vector<BufferSlot> Reserve(AscendC::TPosition pos, uint32_t count, uint32_t bytes, const std::string& what);
    void Release();

private:
    CoreContext* core_;
    std::array<uint32_t, 5> used_{};
};

// Queue bookkeeping shared by all TQue instantiations.
class QueueState {
public:
    void Init(TPipeState& pipe, AscendC::TPosition pos, int32_t depth, uint8_t num, uint32_t len);
    BufferSlot* Alloc();
    void EnQue(const BufferSlot* slot, uint64_t generation);
    BufferSlot* DeQue();
    void Free(const BufferSlot* slot, uint64_t generation);
    bool HasTensorInQue() const { return !queued_.empty(); }
    int32_t GetTensorCountInQue() const { return static_cast<int32_t>(queued_.size()); }
    bool VacantInQue() const { return static_cast<int32_t>(queued_.size()) < depth_; }

private:
    BufferSlot* Own(const BufferSlot* slot, const std::string& api);
    std::string Label() const;
    AscendC::TPosition pos_ = AscendC::TPosition::VECIN;
    int32_t depth_ = 0;
    std::vector<BufferSlot> slots_;
    std::deque<BufferSlot*> queued_;
};

}  // namespace ascendc_model

namespace AscendC {

template <TPosition pos, int32_t depth>
class TQue {
public:
    static constexpr TPosition position = pos;
    template <typename T>
    LocalTensor<T> AllocTensor() {
        ascendc_model::BufferSlot* s = state_.Alloc();
        return LocalTensor<T>(s, s->offset, s->offset + s->length);
    }
    template <typename T>
    bool EnQue(const LocalTensor<T>& tensor) {
        state_.EnQue(tensor.Slot(), tensor.Generation());
        return true;
    }
    template <typename T>
    LocalTensor<T> DeQue() {
        ascendc_model::BufferSlot* s = state_.DeQue();
        return LocalTensor<T>(s, s->offset, s->offset + s->length);
    }
    template <typename T>
    void FreeTensor(LocalTensor<T>& tensor) {
        state_.Free(tensor.Slot(), tensor.Generation());
    }
    bool HasTensorInQue() const { return state_.HasTensorInQue(); }
    int32_t GetTensorCountInQue() const { return state_.GetTensorCountInQue(); }
    bool VacantInQue() const { return state_.VacantInQue(); }
    ascendc_model::QueueState& State() { return state_; }

private:
    ascendc_model::QueueState state_;
};

template <TPosition pos = TPosition::VECCALC>
class TBuf {
public:
    template <typename T>
    LocalTensor<T> Get() {
        Check("TBuf::Get");
        return LocalTensor<T>(&slot_, slot_.offset, slot_.offset + slot_.length / sizeof(T) * sizeof(T));
    }
    template <typename T>
    LocalTensor<T> Get(uint32_t len) {
        return GetWithOffset<T>(len, 0);
    }
    template <typename T>
    LocalTensor<T> GetWithOffset(uint32_t size, uint32_t bufOffset) {
        Check("TBuf::GetWithOffset");
        if (bufOffset % ascendc_model::kBlockBytes != 0)
            ascendc_model::Fail("TBuf::GetWithOffset",
                                "offset " + std::to_string(bufOffset) + " B is not 32-byte aligned");
        const uint64_t end = uint64_t(bufOffset) + uint64_t(size) * sizeof(T);
        if (end > slot_.length)
            ascendc_model::Fail("TBuf::Get", std::to_string(end) + " B requested from a " +
                                                 std::to_string(slot_.length) + " B TBuf");
        return LocalTensor<T>(&slot_, slot_.offset + bufOffset, slot_.offset + static_cast<uint32_t>(end));
    }
    void Init(ascendc_model::TPipeState& pipe, uint32_t len) {
        if (slot_.state != ascendc_model::BufferSlot::State::Free)
            ascendc_model::Fail("TPipe::InitBuffer", "TBuf initialised twice");
        slot_ = pipe.Reserve(pos, 1, len, "TBuf")[0];
        slot_.state = ascendc_model::BufferSlot::State::Fixed;
    }

private:
    void Check(const char* api) const {
        if (slot_.state != ascendc_model::BufferSlot::State::Fixed)
            ascendc_model::Fail(api, "TBuf used before TPipe::InitBuffer");
    }
    ascendc_model::BufferSlot slot_;
};

class TPipe {
public:
    TPipe() : state_(new ascendc_model::TPipeState()) {}
    ~TPipe() { Destroy(); }
    TPipe(const TPipe&) = delete;
    TPipe& operator=(const TPipe&) = delete;

    template <class Q>
    bool InitBuffer(Q& que, uint8_t num, uint32_t len) {
        que.State().Init(State(), Q::position, QueDepth<Q>::value, num, len);
        return true;
    }
    template <TPosition bufPos>
    bool InitBuffer(TBuf<bufPos>& buf, uint32_t len) {
        buf.Init(State(), len);
        return true;
    }
    // Gives the pipe's memory back; buffers handed out before must not be used afterwards.
    void Destroy() { state_.reset(); }
    void Reset() { Destroy(); }

    // Event ids 0..7 per event type for SetFlag/WaitFlag: Alloc marks an id used until Release,
    // Fetch returns a free id without marking it.
    template <HardEvent evt>
    TEventID AllocEventID() { return FreeEventId(evt, "TPipe::AllocEventID", true); }
    template <HardEvent evt>
    void ReleaseEventID(TEventID id) {
        eventIdsInUse_[static_cast<int>(evt)] &= static_cast<uint8_t>(~(1u << (id & 7)));
    }
    template <HardEvent evt>
    TEventID FetchEventID() { return FreeEventId(evt, "TPipe::FetchEventID", false); }
    TEventID FetchEventID(HardEvent evt) { return FreeEventId(evt, "TPipe::FetchEventID", false); }

private:
    template <class Q>
    struct QueDepth;
    template <TPosition p, int32_t d>
    struct QueDepth<TQue<p, d>> {
        static constexpr int32_t value = d;
    };
    ascendc_model::TPipeState& State() {
        if (!state_) ascendc_model::Fail("TPipe::InitBuffer", "TPipe used after Destroy()");
        return *state_;
    }
    TEventID FreeEventId(HardEvent evt, const char* api, bool mark) {
        uint8_t& used = eventIdsInUse_[static_cast<int>(evt)];
        for (int id = 0; id < ascendc_model::kEventIds; ++id) {
            if (!(used & (1u << id))) {
                if (mark) used = static_cast<uint8_t>(used | (1u << id));
                return static_cast<TEventID>(id);
            }
        }
        ascendc_model::Fail(api, std::string("all 8 event ids of HardEvent::") + HardEventName(evt) + " are allocated");
    }
    std::unique_ptr<ascendc_model::TPipeState> state_;
    std::array<uint8_t, static_cast<int>(HardEvent::MAX)> eventIdsInUse_{};
};

}  // namespace AscendC
