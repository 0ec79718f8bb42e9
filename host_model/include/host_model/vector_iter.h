// The iteration space of one vector instruction, shared by every vector API of the model.
// Count form: elements 0..count-1 of each operand, contiguous. Mask/repeat form: `repeatTimes`
// repeats of 256 bytes of the widest operand type (128 half or 64 float lanes); lane l of repeat r
// addresses element  r*repStride*E + (l/E)*blkStride*E + l%E  of an operand with E elements per
// 32-byte block (strides in blocks). Lanes run only where the mask enables them: continuous mask
// (the first `mask` lanes) or bit mask (mask[0] bits 0..63, mask[1] lanes 64..127).
#pragma once
#include <cstdint>
#include <string>

#include "host_model/cost.h"
#include "host_model/hazard.h"
#include "host_model/tensor.h"

namespace AscendC {

struct UnaryRepeatParams {
    UnaryRepeatParams() {}
    UnaryRepeatParams(const uint16_t dstBlkStrideIn, const uint16_t srcBlkStrideIn, const uint8_t dstRepStrideIn,
                      const uint8_t srcRepStrideIn)
        : dstBlkStride(dstBlkStrideIn), srcBlkStride(srcBlkStrideIn), dstRepStride(dstRepStrideIn),
          srcRepStride(srcRepStrideIn) {}
    uint32_t blockNumber = DEFAULT_BLK_NUM;
    uint16_t dstBlkStride = DEFAULT_BLK_STRIDE;
    uint16_t srcBlkStride = DEFAULT_BLK_STRIDE;
    uint8_t dstRepStride = DEFAULT_REPEAT_STRIDE;
    uint8_t srcRepStride = DEFAULT_REPEAT_STRIDE;
    bool repeatStrideMode = false;
    bool strideSizeMode = false;
    bool halfBlock = false;
};

struct BinaryRepeatParams {
    BinaryRepeatParams() {}
    BinaryRepeatParams(const uint8_t dstBlkStrideIn, const uint8_t src0BlkStrideIn, const uint8_t src1BlkStrideIn,
                       const uint8_t dstRepStrideIn, const uint8_t src0RepStrideIn, const uint8_t src1RepStrideIn)
        : dstBlkStride(dstBlkStrideIn), src0BlkStride(src0BlkStrideIn), src1BlkStride(src1BlkStrideIn),
          dstRepStride(dstRepStrideIn), src0RepStride(src0RepStrideIn), src1RepStride(src1RepStrideIn) {}
    uint32_t blockNumber = DEFAULT_BLK_NUM;
    uint8_t dstBlkStride = DEFAULT_BLK_STRIDE;
    uint8_t src0BlkStride = DEFAULT_BLK_STRIDE;
    uint8_t src1BlkStride = DEFAULT_BLK_STRIDE;
    uint8_t dstRepStride = DEFAULT_REPEAT_STRIDE;
    uint8_t src0RepStride = DEFAULT_REPEAT_STRIDE;
    uint8_t src1RepStride = DEFAULT_REPEAT_STRIDE;
    bool repeatStrideMode = false;
    bool strideSizeMode = false;
};

}  // namespace AscendC

namespace ascendc_model {

struct Stride {
    uint32_t blk = 1;  // 32-byte blocks between the blocks of one repeat
    uint32_t rep = 8;  // 32-byte blocks between repeats
};

// One vector instruction: it is counted for the cost model (cost.h) when it ends, in repeats of 256 bytes of
// its widest operand (every operand passes through Operand(), which records its width), and its operands'
// UB footprints are checked against the instructions it may overlap with (hazard.h).
class VecIter {
public:
    VecIter(const VecIter&) = delete;
    VecIter& operator=(const VecIter&) = delete;
    VecIter(VecIter&& other) noexcept;
    ~VecIter();
    void NoteOperand(uint32_t elemBytes) const {
        if (elemBytes > widest_) widest_ = elemBytes;
    }

    static VecIter Count(const std::string& api, int64_t count, Site site);
    static VecIter Continuous(const std::string& api, uint64_t mask, int64_t repeatTimes, uint32_t widestBytes, Site site);
    static VecIter Bits(const std::string& api, const uint64_t mask[], int64_t repeatTimes, uint32_t widestBytes,
                        Site site);

    bool counted() const { return counted_; }
    uint64_t repeats() const { return repeats_; }
    uint32_t lanes() const { return lanes_; }  // lanes per repeat (count form: count)
    bool Active(uint32_t lane) const {
        return counted_ || (lane < 64 ? (bits_[0] >> lane) & 1 : (bits_[1] >> (lane - 64)) & 1);
    }
    // Element offset of (repeat, lane) in an operand of `elemBytes`-sized elements.
    uint64_t Offset(uint32_t elemBytes, Stride s, uint64_t r, uint32_t lane) const {
        if (counted_) return lane;
        const uint32_t e = 32 / elemBytes;
        return (r * s.rep + uint64_t(lane / e) * s.blk) * e + lane % e;
    }
    // Number of elements from the operand start that the instruction may touch (bounds check).
    uint64_t Extent(uint32_t elemBytes, Stride s) const;
    // The 32-byte blocks of an operand at UB byte `begin` in which some lane of some repeat is active.
    Ranges Footprint(uint32_t begin, uint32_t elemBytes, Stride s) const;
    // Checks and records that the instruction reads or writes `bytes` of UB (hazard.h).
    void Access(bool write, Ranges bytes) const { VectorAccess(op_, write, std::move(bytes)); }

    // Runs f(r, lane) for every active lane.
    template <class F>
    void ForEach(F f) const {
        for (uint64_t r = 0; r < repeats_; ++r)
            for (uint32_t l = 0; l < lanes_; ++l)
                if (Active(l)) f(r, l);
    }

private:
    VecIter(const std::string& api, Site site);
    static VecIter Masked(const std::string& api, int64_t repeatTimes, uint32_t widestBytes, Site site);
    std::string api_;
    mutable uint32_t widest_ = 0;
    bool live_ = true;  // false once moved from: only the last owner counts the instruction
    bool counted_ = true;
    uint64_t repeats_ = 0;
    uint32_t lanes_ = 0;
    uint32_t highestLane_ = 0;
    uint64_t bits_[2] = {0, 0};
    mutable VectorOp op_;
};

// A vector operand: checked base pointer (UB, 32-byte aligned, extent inside the tensor) + strides.
template <typename T>
struct VecOperand {
    T* data;
    Stride stride;
    T& At(const VecIter& it, uint64_t r, uint32_t lane) const { return data[it.Offset(sizeof(T), stride, r, lane)]; }
};
void CheckVectorOperand(const std::string& api, const char* role, Memory memory, uint32_t byteAddr);

template <typename T>
VecOperand<T> Operand(const std::string& api, const char* role, const AscendC::LocalTensor<T>& t, const VecIter& it,
                      Stride s = Stride()) {
    CheckVectorOperand(api, role, t.GetMemory(), t.ByteBegin());
    it.NoteOperand(sizeof(T));
    T* data = t.Span(api, 0, it.Extent(sizeof(T), s));
    it.Access(std::string(role) == "dst", it.Footprint(t.ByteBegin(), sizeof(T), s));
    return VecOperand<T>{data, s};
}

// Rounds `v` to T with round-to-nearest-even (IEEE default; what the vector unit does for
// half/float results).
template <typename T>
T RoundTo(double v) { return static_cast<T>(v); }

}  // namespace ascendc_model
