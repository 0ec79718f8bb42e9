// LocalTensor (a typed window on one buffer of an on-chip memory) and GlobalTensor (a typed window on
// host memory standing in for GM). Every access goes through Span()/Element(), which check that the
// tensor still owns its buffer (not freed, not sitting in a queue) and that the elements touched lie
// inside the buffer, so an overflow or a use-after-FreeTensor fails instead of corrupting a neighbour.
#pragma once
#include <cstdint>
#include <limits>
#include <string>

#include "host_model/cost.h"
#include "host_model/error.h"
#include "host_model/hazard.h"
#include "host_model/types.h"

namespace ascendc_model {

// Scalar GM access through the calling core's data cache (cache.h, src/cache.cpp).
void CachedRead(const void* gm, void* out, uint32_t bytes);
void CachedWrite(void* gm, const void* in, uint32_t bytes);

// One buffer handed out by TPipe::InitBuffer (a TQue slot or a TBuf). The generation changes on
// every FreeTensor so stale LocalTensor copies are recognised.
struct BufferSlot {
    enum class State { Free, Allocated, Enqueued, Fixed };
    AscendC::TPosition position = AscendC::TPosition::VECCALC;
    Memory memory = Memory::UB;
    uint32_t offset = 0;  // bytes from the start of the memory
    uint32_t length = 0;  // bytes
    uint64_t generation = 0;
    State state = State::Free;
    uint32_t ownerCore = 0;  // globalIndex of the core whose pipe created it
    // The queue's events order the vector instructions before this sequence number (hazard.h) before those
    // after the buffer's next AllocTensor (VECOUT) or DeQue (VECIN); 0: none yet.
    uint64_t orderedBefore = 0;
};

// Checks that `slot` (as seen at `generation`) may be used by `api` now; fails otherwise.
void CheckSlotUsable(const BufferSlot* slot, uint64_t generation, const std::string& api);
uint8_t* MemoryBase(Memory m);  // the calling core's memory (fails on the wrong core type)

}  // namespace ascendc_model

namespace AscendC {

template <typename T>
class LocalTensor {
public:
    using PrimType = T;
    LocalTensor() = default;
    LocalTensor(ascendc_model::BufferSlot* slot, uint32_t byteBegin, uint32_t byteEnd)
        : slot_(slot), generation_(slot->generation), begin_(byteBegin), end_(byteEnd) {}

    LocalTensor operator[](uint32_t offset) const {
        LocalTensor t = *this;
        t.begin_ = begin_ + offset * static_cast<uint32_t>(sizeof(T));
        if (t.begin_ > end_) ascendc_model::Fail("LocalTensor::operator[]",
            "offset " + std::to_string(offset) + " beyond the tensor's " + std::to_string(GetSize()) + " elements");
        return t;
    }
    template <typename U>
    LocalTensor<U> ReinterpretCast() const {
        LocalTensor<U> t;
        t.slot_ = slot_;
        t.generation_ = generation_;
        t.begin_ = begin_;
        t.end_ = end_;
        return t;
    }
    uint32_t GetSize() const { return (end_ - begin_) / sizeof(T); }
    uint32_t GetLength() const { return end_ - begin_; }
    void SetSize(uint32_t size) {
        if (slot_ == nullptr || begin_ + size * sizeof(T) > slot_->offset + slot_->length)
            ascendc_model::Fail("LocalTensor::SetSize", "size " + std::to_string(size) + " beyond the tensor's buffer");
        end_ = begin_ + size * static_cast<uint32_t>(sizeof(T));
    }
    TPosition GetPosition() const { return slot_ ? slot_->position : TPosition::MAX; }
    // Byte address inside its memory (what the hardware address registers hold).
    uint64_t GetPhyAddr() const { return begin_; }

    T GetValue(uint32_t index, ascendc_model::Site site = ascendc_model::Site::Here()) const {
        ascendc_model::CountScalarAccess();
        T* p = Span("LocalTensor::GetValue", index, 1);
        ScalarSync("LocalTensor::GetValue", site, false, index);
        return *p;
    }
    void SetValue(uint32_t index, T value, ascendc_model::Site site = ascendc_model::Site::Here()) const {
        ascendc_model::CountScalarAccess();
        T* p = Span("LocalTensor::SetValue", index, 1);
        ScalarSync("LocalTensor::SetValue", site, true, index);
        *p = value;
    }

    // Checked pointer to elements [first, first + count) of this tensor.
    T* Span(const std::string& api, uint64_t first, uint64_t count) const {
        ascendc_model::CheckSlotUsable(slot_, generation_, api);
        const uint64_t lo = begin_ + first * sizeof(T);
        const uint64_t hi = lo + count * sizeof(T);
        if (hi > end_)
            ascendc_model::Fail(api, "elements [" + std::to_string(first) + ", " + std::to_string(first + count) +
                                         ") beyond the tensor's " + std::to_string(GetSize()) + " elements (" +
                                         PositionName(slot_->position) + " buffer)");
        return reinterpret_cast<T*>(ascendc_model::MemoryBase(slot_->memory) + lo);
    }
    ascendc_model::Memory GetMemory() const { return slot_ ? slot_->memory : ascendc_model::Memory::UB; }
    const ascendc_model::BufferSlot* Slot() const { return slot_; }
    uint64_t Generation() const { return generation_; }
    uint32_t ByteBegin() const { return begin_; }

private:
    // A scalar access to UB must be ordered after the vector instructions on its bytes (hazard.h).
    void ScalarSync(const char* api, ascendc_model::Site site, bool write, uint32_t index) const {
        if (slot_->memory != ascendc_model::Memory::UB) return;
        const uint32_t lo = begin_ + index * static_cast<uint32_t>(sizeof(T));
        ascendc_model::ScalarAccess(api, site, write, lo, lo + static_cast<uint32_t>(sizeof(T)));
    }
    template <typename U>
    friend class LocalTensor;
    ascendc_model::BufferSlot* slot_ = nullptr;
    uint64_t generation_ = 0;
    uint32_t begin_ = 0;  // byte offsets in the memory
    uint32_t end_ = 0;
};

template <typename T>
class GlobalTensor {
public:
    using PrimType = T;
    // Without a size the model cannot check GM bounds; kernels should pass one.
    void SetGlobalBuffer(__gm__ T* buffer) { SetGlobalBuffer(buffer, std::numeric_limits<uint64_t>::max()); }
    void SetGlobalBuffer(__gm__ T* buffer, uint64_t bufferSize) {
        base_ = buffer;
        size_ = bufferSize;
    }
    GlobalTensor operator[](uint64_t offset) const {
        if (offset > size_)
            ascendc_model::Fail("GlobalTensor::operator[]", "offset " + std::to_string(offset) +
                                                               " beyond the global buffer's " + std::to_string(size_) +
                                                               " elements");
        GlobalTensor t;
        t.base_ = base_ + offset;
        t.size_ = size_ == std::numeric_limits<uint64_t>::max() ? size_ : size_ - offset;
        return t;
    }
    __gm__ T* GetPhyAddr() const { return base_; }
    __gm__ T* GetPhyAddr(uint64_t offset) const { return base_ + offset; }
    uint64_t GetSize() const { return size_; }
    // Scalar access to GM goes through the core's data cache (cache.h): a read returns the line as this
    // core last fetched it, so data another core wrote since is seen only after DataCacheCleanAndInvalid.
    T GetValue(uint64_t index) const {
        ascendc_model::CountScalarAccess();
        T v;
        ascendc_model::CachedRead(Span("GlobalTensor::GetValue", index, 1), &v, sizeof(T));
        return v;
    }
    void SetValue(uint64_t index, T value) const {
        ascendc_model::CountScalarAccess();
        ascendc_model::CachedWrite(Span("GlobalTensor::SetValue", index, 1), &value, sizeof(T));
    }

    T* Span(const std::string& api, uint64_t first, uint64_t count) const {
        if (base_ == nullptr) ascendc_model::Fail(api, "GlobalTensor has no buffer (SetGlobalBuffer not called or null GM_ADDR)");
        if (first + count > size_)
            ascendc_model::Fail(api, "GM elements [" + std::to_string(first) + ", " + std::to_string(first + count) +
                                         ") beyond SetGlobalBuffer's size " + std::to_string(size_));
        return base_ + first;
    }

private:
    T* base_ = nullptr;
    uint64_t size_ = 0;
};

}  // namespace AscendC
