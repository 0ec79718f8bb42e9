// Reductions and Brcb.
// WholeReduceMax/Min: per repeat, the extreme value over the active lanes and its lane index (first
// lane on ties); the index is stored as the raw bits of an unsigned integer of sizeof(T) bytes in a T
// slot. Output of repeat r at dst + r*dstRepStride*W, W = 2 for ORDER_VALUE_INDEX/ORDER_INDEX_VALUE
// (pair order as named), W = 1 for ORDER_ONLY_VALUE/ORDER_ONLY_INDEX.
// WholeReduceSum: per repeat the sum of the active lanes at dst + r*dstRepStride.
// ReduceMax/Min/Sum (count form): dst[0] = result over src[0..count); ReduceMax/Min with calIndex
// also dst[1] = index bits. Sums fold the lanes in halves, rounding every partial sum to T (FoldSum).
// BlockReduceMax: per repeat, each of its 8 source blocks (32 bytes) reduced to the largest of its active lanes;
// the repeat's 8 results at dst + r*dstRepStride*8 elements (dstRepStride counts one repeat's results: 16 bytes
// for half, 32 for float). A block with no active lane leaves its result unwritten (Atlas A2; ReduceDataBlock
// docs, 约束说明). dst is 16-byte (half) or 32-byte (float) aligned. No result may lie on a source element of its
// own or a later repeat (通用地址重叠约束: within a repeat all or nothing, which a reduction cannot be; no
// repeat's results over a later repeat's source).
// Brcb: repeat r reads 8 elements src[8r..8r+7]; element j fills the 32-byte block at
// dst + (r*dstRepStride + j*dstBlkStride) blocks.
#pragma once
#include <algorithm>
#include <cstring>
#include <utility>
#include <vector>

#include "host_model/a2_types.h"
#include "host_model/vector_iter.h"

namespace AscendC {
struct BrcbRepeatParams {
    BrcbRepeatParams() {}
    BrcbRepeatParams(const uint16_t dstBlkStrideIn, const uint16_t dstRepStrideIn)
        : dstRepStride(dstRepStrideIn), dstBlkStride(dstBlkStrideIn) {}
    uint32_t blockNumber = DEFAULT_BLK_NUM;
    uint16_t dstRepStride = DEFAULT_REPEAT_STRIDE;
    uint16_t dstBlkStride = DEFAULT_BLK_STRIDE;
};
}  // namespace AscendC

namespace ascendc_model {

enum class ReduceKind { Max, Min, Sum };

template <typename T>
T IndexBits(uint32_t index) {
    T out;
    if (sizeof(T) == 2) {
        const uint16_t v = static_cast<uint16_t>(index);
        std::memcpy(&out, &v, 2);
    } else {
        const uint32_t v = index;
        std::memcpy(&out, &v, 4);
    }
    return out;
}

// Sum of the lanes of repeat r by folding in halves: the lanes (inactive ones read as 0) padded
// with zeros to a power of two w, then x[i] = round_T(x[i] + x[i + w/2]) until one value is left.
// The hardware's adder tree is not public; this fold is the one the golden model
// (pasa_npu.blockwise._tree_rowsum) assumes, so kernel and golden round alike.
template <typename T>
T FoldSum(const VecIter& it, const VecOperand<T>& src, uint64_t r) {
    uint32_t width = 1;
    while (width < it.lanes()) width *= 2;
    std::vector<T> x(width, T(0));
    for (uint32_t l = 0; l < it.lanes(); ++l)
        if (it.Active(l)) x[l] = src.At(it, r, l);
    for (; width > 1; width /= 2)
        for (uint32_t i = 0; i < width / 2; ++i) x[i] = RoundTo<T>(double(x[i]) + double(x[i + width / 2]));
    return x[0];
}

// Extreme value of the active lanes of repeat r and its lane index (first lane on ties).
template <typename T>
std::pair<T, uint32_t> Extreme(const VecIter& it, const VecOperand<T>& src, uint64_t r, ReduceKind kind) {
    T best = T(0);
    uint32_t index = 0;
    bool first = true;
    for (uint32_t l = 0; l < it.lanes(); ++l) {
        if (!it.Active(l)) continue;
        const T v = src.At(it, r, l);
        if (first || (kind == ReduceKind::Max ? v > best : v < best)) {
            best = v;
            index = l;
        }
        first = false;
    }
    return {best, index};
}

template <typename T>
std::pair<T, uint32_t> ReduceRepeat(const VecIter& it, const VecOperand<T>& src, uint64_t r, ReduceKind kind) {
    if (kind == ReduceKind::Sum) return {FoldSum(it, src, r), 0};
    return Extreme(it, src, r, kind);
}

template <typename T>
void WholeReduce(const std::string& api, const AscendC::LocalTensor<T>& dst, const AscendC::LocalTensor<T>& src,
                 const VecIter& it, int32_t dstRepStride, Stride srcStride, ReduceKind kind, AscendC::ReduceOrder order) {
    using AscendC::ReduceOrder;
    const auto s = Operand(api, "src", src, it, srcStride);
    const bool pair = kind != ReduceKind::Sum &&
                      (order == ReduceOrder::ORDER_VALUE_INDEX || order == ReduceOrder::ORDER_INDEX_VALUE);
    const uint64_t width = pair ? 2 : 1;
    if (it.repeats() == 0) return;
    T* d = dst.Span(api, 0, (it.repeats() - 1) * uint64_t(dstRepStride) * width + width);
    Ranges written;
    for (uint64_t r = 0; r < it.repeats(); ++r) {
        const uint32_t lo = dst.ByteBegin() + static_cast<uint32_t>(r * dstRepStride * width * sizeof(T));
        const uint32_t hi = lo + static_cast<uint32_t>(width * sizeof(T));
        written.push_back({lo / kBlockBytes * kBlockBytes, (hi + kBlockBytes - 1) / kBlockBytes * kBlockBytes});
    }
    it.Access(true, std::move(written));
    for (uint64_t r = 0; r < it.repeats(); ++r) {
        const auto [value, index] = ReduceRepeat(it, s, r, kind);
        T* out = d + r * uint64_t(dstRepStride) * width;
        if (kind == ReduceKind::Sum || order == ReduceOrder::ORDER_ONLY_VALUE) {
            out[0] = value;
        } else if (order == ReduceOrder::ORDER_ONLY_INDEX) {
            out[0] = IndexBits<T>(index);
        } else if (order == ReduceOrder::ORDER_VALUE_INDEX) {
            out[0] = value;
            out[1] = IndexBits<T>(index);
        } else {
            out[0] = IndexBits<T>(index);
            out[1] = value;
        }
    }
}

template <typename T>
void BlockReduceMax(const std::string& api, const AscendC::LocalTensor<T>& dst, const AscendC::LocalTensor<T>& src,
                    const VecIter& it, int32_t dstRepStride, Stride srcStride) {
    constexpr uint32_t e = kBlockBytes / sizeof(T);  // lanes of a block
    const auto s = Operand(api, "src", src, it, srcStride);
    if (dst.GetMemory() != Memory::UB) Fail(api, "dst must be in UB (VECIN/VECOUT/VECCALC)");
    if (dst.ByteBegin() % (8 * sizeof(T)) != 0)
        Fail(api, "dst address " + std::to_string(dst.ByteBegin()) + " B is not " + std::to_string(8 * sizeof(T)) +
                      "-byte aligned (BlockReduceMax docs)");
    if (dstRepStride < 0) Fail(api, "dstRepStride " + std::to_string(dstRepStride) + " is negative");
    if (it.repeats() == 0) return;
    bool active[8] = {};
    for (uint32_t l = 0; l < it.lanes(); ++l) active[l / e] = active[l / e] || it.Active(l);
    // The source blocks by address, each with its repeat, to find a result on a source of its own or a later repeat.
    std::vector<std::pair<uint32_t, uint64_t>> sources;
    for (uint64_t r = 0; r < it.repeats(); ++r)
        for (uint32_t b = 0; b < 8; ++b)
            if (active[b])
                sources.push_back({src.ByteBegin() + static_cast<uint32_t>(
                                       (r * srcStride.rep + uint64_t(b) * srcStride.blk) * kBlockBytes), r});
    std::sort(sources.begin(), sources.end());
    Ranges written;
    for (uint64_t r = 0; r < it.repeats(); ++r)
        for (uint32_t b = 0; b < 8; ++b) {
            if (!active[b]) continue;
            const uint32_t lo = dst.ByteBegin() + static_cast<uint32_t>((r * uint64_t(dstRepStride) * 8 + b) * sizeof(T));
            written.push_back({lo / kBlockBytes * kBlockBytes, lo / kBlockBytes * kBlockBytes + kBlockBytes});
            const uint32_t from = lo >= kBlockBytes ? lo - kBlockBytes + 1 : 0;
            for (auto at = std::lower_bound(sources.begin(), sources.end(), std::make_pair(from, uint64_t(0)));
                 at != sources.end() && at->first < lo + sizeof(T); ++at)
                if (at->second >= r)
                    Fail(api, "result " + std::to_string(b) + " of repeat " + std::to_string(r) +
                                  " lies on the source of repeat " + std::to_string(at->second) +
                                  " (通用地址重叠约束: no result over a source element of its own or a later repeat)");
        }
    T* d = dst.Span(api, 0, (it.repeats() - 1) * uint64_t(dstRepStride) * 8 + 8);
    it.Access(true, std::move(written));
    for (uint64_t r = 0; r < it.repeats(); ++r)
        for (uint32_t b = 0; b < 8; ++b) {
            if (!active[b]) continue;
            bool first = true;
            T best = T(0);
            for (uint32_t l = b * e; l < (b + 1) * e; ++l) {
                if (!it.Active(l)) continue;
                const T v = s.At(it, r, l);
                if (first || v > best) best = v;
                first = false;
            }
            d[r * uint64_t(dstRepStride) * 8 + b] = best;
        }
}

// The hardware sequence behind the count form uses sharedTmpBuffer as scratch: its footprint is the whole tensor.
template <typename T>
void ReduceCount(const std::string& api, const AscendC::LocalTensor<T>& dst, const AscendC::LocalTensor<T>& src,
                 const AscendC::LocalTensor<T>& work, int32_t count, ReduceKind kind, bool calIndex, Site site) {
    work.Span(api + " sharedTmpBuffer", 0, 0);  // must be a live buffer
    const auto it = VecIter::Count(api, count, site);
    const auto s = Operand(api, "src", src, it);
    const auto [value, index] = ReduceRepeat(it, s, 0, kind);
    T* d = dst.Span(api, 0, calIndex ? 2 : 1);
    it.Access(true, {{work.ByteBegin(), work.ByteBegin() + work.GetLength()}});
    it.Access(true, {{dst.ByteBegin(), dst.ByteBegin() + kBlockBytes}});
    d[0] = value;
    if (calIndex) d[1] = IndexBits<T>(index);
}

}  // namespace ascendc_model

#define ASCENDC_MODEL_WHOLE_REDUCE(NAME, KIND, ORDER_PARAM, ORDER)                                                 \
    template <typename T, bool isSetMask = true>                                                                   \
    void NAME(const LocalTensor<T>& dst, const LocalTensor<T>& src, const int32_t mask, const int32_t repeatTime,  \
              const int32_t dstRepStride, const int32_t srcBlkStride, const int32_t srcRepStride ORDER_PARAM,     \
              ascendc_model::Site site = ascendc_model::Site::Here()) {                                            \
        ASCENDC_A2_REQUIRE(#NAME, T, ASCENDC_A2_FLOATING);                                                         \
        ascendc_model::WholeReduce(#NAME, dst, src,                                                                \
                                   ascendc_model::VecIter::Continuous(#NAME, mask, repeatTime, sizeof(T), site),   \
                                   dstRepStride, {uint32_t(srcBlkStride), uint32_t(srcRepStride)},                 \
                                   ascendc_model::ReduceKind::KIND, ORDER);                                        \
    }                                                                                                              \
    template <typename T, bool isSetMask = true>                                                                   \
    void NAME(const LocalTensor<T>& dst, const LocalTensor<T>& src, const uint64_t mask[],                         \
              const int32_t repeatTime, const int32_t dstRepStride, const int32_t srcBlkStride,                    \
              const int32_t srcRepStride ORDER_PARAM, ascendc_model::Site site = ascendc_model::Site::Here()) {   \
        ASCENDC_A2_REQUIRE(#NAME, T, ASCENDC_A2_FLOATING);                                                         \
        ascendc_model::WholeReduce(#NAME, dst, src,                                                                \
                                   ascendc_model::VecIter::Bits(#NAME, mask, repeatTime, sizeof(T), site),         \
                                   dstRepStride, {uint32_t(srcBlkStride), uint32_t(srcRepStride)},                 \
                                   ascendc_model::ReduceKind::KIND, ORDER);                                        \
    }

#define ASCENDC_MODEL_ORDER_PARAM , ReduceOrder order = ReduceOrder::ORDER_VALUE_INDEX

namespace AscendC {

ASCENDC_MODEL_WHOLE_REDUCE(WholeReduceMax, Max, ASCENDC_MODEL_ORDER_PARAM, order)
ASCENDC_MODEL_WHOLE_REDUCE(WholeReduceMin, Min, ASCENDC_MODEL_ORDER_PARAM, order)
ASCENDC_MODEL_WHOLE_REDUCE(WholeReduceSum, Sum, , ReduceOrder::ORDER_ONLY_VALUE)

template <typename T, bool isSetMask = true>
void BlockReduceMax(const LocalTensor<T>& dst, const LocalTensor<T>& src, const int32_t repeatTime, const int32_t mask,
                    const int32_t dstRepStride, const int32_t srcBlkStride, const int32_t srcRepStride,
                    ascendc_model::Site site = ascendc_model::Site::Here()) {
    ASCENDC_A2_REQUIRE("BlockReduceMax", T, ASCENDC_A2_FLOATING);
    ascendc_model::BlockReduceMax("BlockReduceMax", dst, src,
                                  ascendc_model::VecIter::Continuous("BlockReduceMax", mask, repeatTime, sizeof(T), site),
                                  dstRepStride, {uint32_t(srcBlkStride), uint32_t(srcRepStride)});
}
template <typename T, bool isSetMask = true>
void BlockReduceMax(const LocalTensor<T>& dst, const LocalTensor<T>& src, const int32_t repeatTime,
                    const uint64_t mask[], const int32_t dstRepStride, const int32_t srcBlkStride,
                    const int32_t srcRepStride, ascendc_model::Site site = ascendc_model::Site::Here()) {
    ASCENDC_A2_REQUIRE("BlockReduceMax", T, ASCENDC_A2_FLOATING);
    ascendc_model::BlockReduceMax("BlockReduceMax", dst, src,
                                  ascendc_model::VecIter::Bits("BlockReduceMax", mask, repeatTime, sizeof(T), site),
                                  dstRepStride, {uint32_t(srcBlkStride), uint32_t(srcRepStride)});
}

template <typename T>
void ReduceMax(const LocalTensor<T>& dst, const LocalTensor<T>& src, const LocalTensor<T>& sharedTmpBuffer,
               const int32_t count, bool calIndex = 0, ascendc_model::Site site = ascendc_model::Site::Here()) {
    ascendc_model::ReduceCount("ReduceMax", dst, src, sharedTmpBuffer, count, ascendc_model::ReduceKind::Max, calIndex,
                               site);
}
template <typename T>
void ReduceMin(const LocalTensor<T>& dst, const LocalTensor<T>& src, const LocalTensor<T>& sharedTmpBuffer,
               const int32_t count, bool calIndex = 0, ascendc_model::Site site = ascendc_model::Site::Here()) {
    ascendc_model::ReduceCount("ReduceMin", dst, src, sharedTmpBuffer, count, ascendc_model::ReduceKind::Min, calIndex,
                               site);
}
template <typename T>
void ReduceSum(const LocalTensor<T>& dst, const LocalTensor<T>& src, const LocalTensor<T>& sharedTmpBuffer,
               const int32_t count, ascendc_model::Site site = ascendc_model::Site::Here()) {
    ascendc_model::ReduceCount("ReduceSum", dst, src, sharedTmpBuffer, count, ascendc_model::ReduceKind::Sum, false,
                               site);
}

template <typename T>
void Brcb(const LocalTensor<T>& dst, const LocalTensor<T>& src, const uint8_t repeatTime, const BrcbRepeatParams& p,
          ascendc_model::Site site = ascendc_model::Site::Here()) {
    ASCENDC_A2_REQUIRE("Brcb", T, ASCENDC_A2_FILL);
    const std::string api = "Brcb";
    if (repeatTime == 0) return;
    constexpr uint32_t e = 32 / sizeof(T);
    const auto it = ascendc_model::VecIter::Continuous(api, 256 / sizeof(T), repeatTime, sizeof(T), site);
    it.NoteOperand(sizeof(T));
    ascendc_model::CheckVectorOperand(api, "src", src.GetMemory(), src.ByteBegin());
    ascendc_model::CheckVectorOperand(api, "dst", dst.GetMemory(), dst.ByteBegin());
    const T* s = src.Span(api, 0, uint64_t(repeatTime) * 8);
    const uint64_t lastBlock = uint64_t(repeatTime - 1) * p.dstRepStride + 7ull * p.dstBlkStride;
    T* d = dst.Span(api, 0, (lastBlock + 1) * e);
    const uint32_t srcBytes = repeatTime * 8u * sizeof(T);
    it.Access(false, {{src.ByteBegin(), src.ByteBegin() + (srcBytes + 31) / 32 * 32}});
    ascendc_model::Ranges written;
    for (uint32_t r = 0; r < repeatTime; ++r)
        for (uint32_t j = 0; j < 8; ++j) {
            const uint32_t lo = dst.ByteBegin() + (r * p.dstRepStride + j * p.dstBlkStride) * 32u;
            written.push_back({lo, lo + 32});
        }
    it.Access(true, std::move(written));
    for (uint32_t r = 0; r < repeatTime; ++r)
        for (uint32_t j = 0; j < 8; ++j) {
            T* block = d + (uint64_t(r) * p.dstRepStride + uint64_t(j) * p.dstBlkStride) * e;
            for (uint32_t i = 0; i < e; ++i) block[i] = s[r * 8 + j];
        }
}

}  // namespace AscendC
