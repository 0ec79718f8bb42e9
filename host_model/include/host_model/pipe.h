// TPipe, TQue and TBuf: carving the on-chip memories into buffers and handing them between stages.
// Checks: InitBuffer against the memory's capacity (UB 192 KB shared by VECIN/VECOUT/VECCALC, L1 512 KB
// for A1/B1, L0A/L0B 64 KB, L0C 128 KB); buffers are 32-byte aligned like the real TPipe; AllocTensor
// with every buffer in use, EnQue past the queue depth, DeQue on an empty queue, FreeTensor of a
// tensor the queue does not hold, and any use of a freed or still-enqueued tensor fail.
//
// Events (event.h's rules apply to them): TPipe owns the pool of event IDs, and TQue sets and waits the events of
// asc-devkit's TQueBind (impl/basic_api/kernel_tquebind_impl.h) with IDs from that pool: EnQue takes an ID of the
// queue's forward event and sets it, DeQue waits it and gives the ID back; FreeTensor takes an ID of the backward
// event and sets it, and the buffer's next AllocTensor waits it and gives it back. The events of each position on
// dav-c220 (GetQueEvt in impl/basic_api/kernel_event.h): VECIN MTE2_V / V_MTE2, VECOUT V_MTE3 / MTE3_V, A1 and B1
// MTE2_MTE1 / MTE1_MTE2, A2 and B2 MTE1_M / M_MTE1, CO1 M_FIX / FIX_M. On the AIC, TPipe's constructor takes and
// sets M_MTE1 IDs 0, 1 and 2 for the matmul macro, and its destruction waits them (TPipe::Init and TPipe::Destroy in
// impl/basic_api/kernel_tpipe_impl.h); the destruction also waits the events of freed buffers no AllocTensor waited.
#pragma once
#include <array>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "host_model/event.h"
#include "host_model/tensor.h"

namespace ascendc_model {

// An event a freed buffer holds until its next AllocTensor: its HardEvent, its ID, who set it and where.
struct HeldEvent {
    AscendC::HardEvent evt = AscendC::HardEvent::MAX;
    int32_t id = -1;
    std::string by;
    Site site;
};

class QueueState;

// Memory and event bookkeeping of one core's TPipe: a bump allocator per memory and the event pool, released when
// the pipe dies.
class TPipeState {
public:
    explicit TPipeState(AscendC::TPipe* owner);
    ~TPipeState();
    TPipeState(const TPipeState&) = delete;
    TPipeState& operator=(const TPipeState&) = delete;
    // Reserves `count` buffers of `bytes` (rounded up to 32 B) at `pos`; `what` names the caller.
    std::vector<BufferSlot> Reserve(AscendC::TPosition pos, uint32_t count, uint32_t bytes, const std::string& what);
    EventPool& Events() { return events_; }
    void Attach(QueueState* q) { queues_.push_back(q); }
    // A queue that dies before its pipe leaves the events of its freed buffers to the pipe's destruction.
    void Detach(QueueState* q, std::vector<HeldEvent> held);
    // TPipe::Destroy: waits what the real one waits (see above); never throws (eventError takes a broken rule).
    void Release();

private:
    CoreContext* core_;
    AscendC::TPipe* owner_;
    std::array<uint32_t, 5> used_{};
    EventPool events_;
    std::vector<QueueState*> queues_;
    std::vector<HeldEvent> orphaned_;
};

// Queue bookkeeping shared by all TQue instantiations.
class QueueState {
public:
    QueueState() = default;
    QueueState(const QueueState&) = delete;
    QueueState& operator=(const QueueState&) = delete;
    ~QueueState();
    void Init(TPipeState& pipe, AscendC::TPosition pos, int32_t depth, uint8_t num, uint32_t len);
    BufferSlot* Alloc(Site site);
    void EnQue(const BufferSlot* slot, uint64_t generation, Site site);
    BufferSlot* DeQue(Site site);
    void Free(const BufferSlot* slot, uint64_t generation, Site site);
    bool HasTensorInQue() const { return !queued_.empty(); }
    int32_t GetTensorCountInQue() const { return static_cast<int32_t>(queued_.size()); }
    bool VacantInQue() const { return static_cast<int32_t>(queued_.size()) < depth_; }
    // The pipe's destruction: the freed buffers' events, handed over and forgotten.
    std::vector<HeldEvent> TakeHeldEvents();
    void PipeGone() { pipe_ = nullptr; }

private:
    BufferSlot* Own(const BufferSlot* slot, const std::string& api);
    TPipeState& Pipe(const std::string& api);
    std::string Label() const;
    AscendC::TPosition pos_ = AscendC::TPosition::VECIN;
    int32_t depth_ = 0;
    AscendC::HardEvent enQueEvt_ = AscendC::HardEvent::MAX, freeEvt_ = AscendC::HardEvent::MAX;
    TPipeState* pipe_ = nullptr;
    std::vector<BufferSlot> slots_;
    std::vector<HeldEvent> enQueHeld_, freeHeld_;  // per slot: the event EnQue / FreeTensor set (id -1: none)
    std::deque<BufferSlot*> queued_;
};

}  // namespace ascendc_model

namespace AscendC {

template <TPosition pos, int32_t depth>
class TQue {
public:
    static constexpr TPosition position = pos;
    template <typename T>
    LocalTensor<T> AllocTensor(ascendc_model::Site site = ascendc_model::Site::Here()) {
        ascendc_model::BufferSlot* s = state_.Alloc(site);
        return LocalTensor<T>(s, s->offset, s->offset + s->length);
    }
    template <typename T>
    bool EnQue(const LocalTensor<T>& tensor, ascendc_model::Site site = ascendc_model::Site::Here()) {
        state_.EnQue(tensor.Slot(), tensor.Generation(), site);
        return true;
    }
    template <typename T>
    LocalTensor<T> DeQue(ascendc_model::Site site = ascendc_model::Site::Here()) {
        ascendc_model::BufferSlot* s = state_.DeQue(site);
        return LocalTensor<T>(s, s->offset, s->offset + s->length);
    }
    template <typename T>
    void FreeTensor(LocalTensor<T>& tensor, ascendc_model::Site site = ascendc_model::Site::Here()) {
        state_.Free(tensor.Slot(), tensor.Generation(), site);
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
    TPipe() : state_(new ascendc_model::TPipeState(this)) {}
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
    // Gives the pipe's memory and events back; buffers handed out before must not be used afterwards.
    void Destroy() { state_.reset(); }
    void Reset() { Destroy(); }

    // The event pool (event.h): 8 IDs per HardEvent.
    template <HardEvent evt>
    TEventID AllocEventID(ascendc_model::Site site = ascendc_model::Site::Here()) {
        return State().Events().Alloc(evt, "TPipe::AllocEventID", site);
    }
    template <HardEvent evt>
    void ReleaseEventID(TEventID id, ascendc_model::Site site = ascendc_model::Site::Here()) {
        State().Events().Release(evt, id, site);
    }
    template <HardEvent evt>
    TEventID FetchEventID(ascendc_model::Site site = ascendc_model::Site::Here()) {
        return State().Events().Fetch(evt, site);
    }
    TEventID FetchEventID(HardEvent evt, ascendc_model::Site site = ascendc_model::Site::Here()) {
        return State().Events().Fetch(evt, site);
    }

private:
    template <class Q>
    struct QueDepth;
    template <TPosition p, int32_t d>
    struct QueDepth<TQue<p, d>> {
        static constexpr int32_t value = d;
    };
    ascendc_model::TPipeState& State() {
        if (!state_) ascendc_model::Fail("TPipe", "TPipe used after Destroy()");
        return *state_;
    }
    std::unique_ptr<ascendc_model::TPipeState> state_;
};

}  // namespace AscendC

// The calling core's TPipe (the one constructed last and not yet destroyed), as the real global accessor.
AscendC::TPipe* GetTPipePtr();
