// Data movement between GM and the on-chip memories: DataCopy (contiguous, strided in 32-byte blocks,
// and GM->L1 with the ND->NZ fractal conversion) and DataCopyPad (byte-granular bursts, padded to
// 32 bytes in UB). Checks: UB/L1 addresses 32-byte aligned, DataCopy lengths whole 32-byte blocks,
// every element inside its LocalTensor / inside SetGlobalBuffer's size; the burst parameters' documented ranges
// (基础数据搬运.md, DataCopyPad(ISASI).md: blockCount in [1, 4095]; blockLen in [1, 65535] 32-byte blocks, DataCopyPad's
// in [1, 2097151] bytes).
#pragma once
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "host_model/cost.h"
#include "host_model/tensor.h"

namespace AscendC {

struct DataCopyParams {
    DataCopyParams() {}
    DataCopyParams(const uint16_t count, const uint16_t len, const uint16_t srcStrideIn, const uint16_t dstStrideIn)
        : blockCount(count), blockLen(len), srcStride(srcStrideIn), dstStride(dstStrideIn) {}
    uint16_t blockCount = DEFAULT_DATA_COPY_NBURST;
    uint16_t blockLen = 0;   // 32-byte blocks per burst
    uint16_t srcStride = 0;  // gap between bursts, 32-byte blocks
    uint16_t dstStride = 0;
};

struct DataCopyExtParams {
    DataCopyExtParams() {}
    DataCopyExtParams(const uint16_t count, const uint32_t len, const uint32_t srcStrideIn, const uint32_t dstStrideIn,
                      const uint32_t rsvIn)
        : blockCount(count), blockLen(len), srcStride(srcStrideIn), dstStride(dstStrideIn), rsv(rsvIn) {}
    uint16_t blockCount = DEFAULT_DATA_COPY_NBURST;
    uint32_t blockLen = 0;   // bytes per burst
    uint32_t srcStride = 0;  // gap: bytes on the GM side, 32-byte blocks on the UB side
    uint32_t dstStride = 0;
    uint32_t rsv = 0;
};

struct DataCopyPadParams {
    DataCopyPadParams() {}
    DataCopyPadParams(const bool isPadValue, const uint8_t leftPadValue, const uint8_t rightPadValue,
                      const uint64_t padValue)
        : isPad(isPadValue), leftPadding(leftPadValue), rightPadding(rightPadValue), paddingValue(padValue) {}
    bool isPad = false;
    uint8_t leftPadding = 0;
    uint8_t rightPadding = 0;
    uint64_t paddingValue = 0;
};

template <typename T>
struct DataCopyPadExtParams {
    DataCopyPadExtParams() {}
    DataCopyPadExtParams(const bool isPadValue, const uint8_t leftPadValue, const uint8_t rightPadValue, T padValue)
        : isPad(isPadValue), leftPadding(leftPadValue), rightPadding(rightPadValue), paddingValue(padValue) {}
    bool isPad = false;
    uint8_t leftPadding = 0;   // elements
    uint8_t rightPadding = 0;  // elements
    T paddingValue = 0;
};

struct Nd2NzParams {
    Nd2NzParams() {}
    Nd2NzParams(const uint16_t ndNumIn, const uint16_t nValueIn, const uint16_t dValueIn,
                const uint16_t srcNdMatrixStrideIn, const uint16_t srcDValueIn, const uint16_t dstNzC0StrideIn,
                const uint16_t dstNzNStrideIn, const uint16_t dstNzMatrixStrideIn)
        : ndNum(ndNumIn), nValue(nValueIn), dValue(dValueIn), srcNdMatrixStride(srcNdMatrixStrideIn),
          srcDValue(srcDValueIn), dstNzC0Stride(dstNzC0StrideIn), dstNzNStride(dstNzNStrideIn),
          dstNzMatrixStride(dstNzMatrixStrideIn) {}
    uint16_t ndNum = 0;              // number of ND matrices
    uint16_t nValue = 0;             // rows per matrix
    uint16_t dValue = 0;             // columns per matrix (elements)
    uint16_t srcNdMatrixStride = 0;  // elements between matrices in GM
    uint16_t srcDValue = 0;          // elements between rows in GM
    uint16_t dstNzC0Stride = 0;      // 32-byte blocks between fractal columns (C0 groups) in L1
    uint16_t dstNzNStride = 0;       // 32-byte blocks between rows in L1
    uint16_t dstNzMatrixStride = 0;  // elements between matrices in L1
};

}  // namespace AscendC

namespace ascendc_model {

// One burst-structured copy: `count` bursts of `bytes`, the n-th starting at src + n*srcPitch and
// dst + n*dstPitch (all in bytes). Both element-typed tensors are resolved by the callers.
void CheckLocalAligned(const std::string& api, const char* role, uint32_t byteAddr);
void CheckBlockMultiple(const std::string& api, uint64_t bytes);
void CheckElementMultiple(const std::string& api, uint64_t bytes, uint32_t elemBytes);
// blockCount in [1, 4095] and blockLen in [1, maxBlockLen] (`unit`: "32-byte blocks" or "bytes").
void CheckBursts(const std::string& api, uint32_t blockCount, uint32_t blockLen, uint32_t maxBlockLen, const char* unit);

// The pipe of a copy follows its direction: GM -> local MTE2, local -> GM MTE3, UB -> UB the vector unit.
template <typename Dst, typename Src>
void CountBurstCopy(uint64_t bytes) {
    constexpr bool fromGm = !std::is_same<Src, AscendC::LocalTensor<typename Src::PrimType>>::value;
    constexpr bool toGm = !std::is_same<Dst, AscendC::LocalTensor<typename Dst::PrimType>>::value;
    if (fromGm) CountCopy(Pipe::MTE2, bytes);
    else if (toGm) CountCopy(Pipe::MTE3, bytes);
    else CountUbCopy(bytes);
}

template <typename T, typename Dst, typename Src>
void BurstCopy(const std::string& api, const Dst& dst, const Src& src, uint32_t count, uint32_t bytesPerBurst,
               uint64_t srcPitchBytes, uint64_t dstPitchBytes) {
    if (count == 0 || bytesPerBurst == 0) return;
    const uint64_t elems = bytesPerBurst / sizeof(T);
    const uint64_t srcPitch = srcPitchBytes / sizeof(T), dstPitch = dstPitchBytes / sizeof(T);
    const T* s = src.Span(api, 0, (count - 1) * srcPitch + elems);
    T* d = dst.Span(api, 0, (count - 1) * dstPitch + elems);
    CountBurstCopy<Dst, Src>(uint64_t(count) * bytesPerBurst);
    for (uint32_t n = 0; n < count; ++n)
        for (uint64_t i = 0; i < elems; ++i) d[n * dstPitch + i] = s[n * srcPitch + i];
}

// DataCopyParams counts bursts and strides in 32-byte blocks; every DataCopy direction checks and copies them alike.
template <typename T, typename Dst, typename Src>
void BlockBurstCopy(const std::string& api, const Dst& dst, const Src& src, const AscendC::DataCopyParams& p) {
    CheckBursts(api, p.blockCount, p.blockLen, 65535, "32-byte blocks");
    BurstCopy<T>(api, dst, src, p.blockCount, p.blockLen * 32u, (p.blockLen + p.srcStride) * 32ull,
                 (p.blockLen + p.dstStride) * 32ull);
}

template <typename T>
void CheckUbOrL1(const std::string& api, const AscendC::LocalTensor<T>& t) {
    const Memory m = t.GetMemory();
    if (m != Memory::UB && m != Memory::L1)
        Fail(api, std::string("GM copies reach UB or L1 only, not ") + MemoryName(m));
    CheckLocalAligned(api, "local", t.ByteBegin());
}

}  // namespace ascendc_model

namespace AscendC {

template <typename T>
void DataCopy(const LocalTensor<T>& dst, const GlobalTensor<T>& src, const DataCopyParams& p) {
    const std::string api = "DataCopy(GM->local)";
    ascendc_model::CheckUbOrL1(api, dst);
    ascendc_model::BlockBurstCopy<T>(api, dst, src, p);
}

template <typename T>
void DataCopy(const GlobalTensor<T>& dst, const LocalTensor<T>& src, const DataCopyParams& p) {
    const std::string api = "DataCopy(local->GM)";
    if (src.GetMemory() != ascendc_model::Memory::UB) ascendc_model::Fail(api, "source must be in UB");
    ascendc_model::CheckLocalAligned(api, "source", src.ByteBegin());
    ascendc_model::BlockBurstCopy<T>(api, dst, src, p);
}

template <typename T>
void DataCopy(const LocalTensor<T>& dst, const LocalTensor<T>& src, const DataCopyParams& p) {
    const std::string api = "DataCopy(UB->UB)";
    if (dst.GetMemory() != ascendc_model::Memory::UB || src.GetMemory() != ascendc_model::Memory::UB)
        ascendc_model::Fail(api, "local copies are modelled between UB buffers only");
    ascendc_model::CheckLocalAligned(api, "source", src.ByteBegin());
    ascendc_model::CheckLocalAligned(api, "destination", dst.ByteBegin());
    ascendc_model::BlockBurstCopy<T>(api, dst, src, p);
}

// Count forms: one burst of `count` elements, which must fill whole 32-byte blocks.
template <typename T>
void DataCopy(const LocalTensor<T>& dst, const GlobalTensor<T>& src, const uint32_t count) {
    ascendc_model::CheckBlockMultiple("DataCopy(GM->local)", uint64_t(count) * sizeof(T));
    DataCopy(dst, src, DataCopyParams(1, static_cast<uint16_t>(count * sizeof(T) / 32), 0, 0));
}
template <typename T>
void DataCopy(const GlobalTensor<T>& dst, const LocalTensor<T>& src, const uint32_t count) {
    ascendc_model::CheckBlockMultiple("DataCopy(local->GM)", uint64_t(count) * sizeof(T));
    DataCopy(dst, src, DataCopyParams(1, static_cast<uint16_t>(count * sizeof(T) / 32), 0, 0));
}
template <typename T>
void DataCopy(const LocalTensor<T>& dst, const LocalTensor<T>& src, const uint32_t count) {
    ascendc_model::CheckBlockMultiple("DataCopy(UB->UB)", uint64_t(count) * sizeof(T));
    DataCopy(dst, src, DataCopyParams(1, static_cast<uint16_t>(count * sizeof(T) / 32), 0, 0));
}

// GM (ND) -> L1 (NZ): element (n, d) of matrix i lands at
//   dst + i*dstNzMatrixStride + (d/C0)*dstNzC0Stride*C0 + n*dstNzNStride*C0 + d%C0   (elements),
// C0 = 32 B / sizeof(T) (16 for half). Columns dValue..roundup(dValue, C0) of each written row are
// zero-filled, as the hardware pads the last fractal column with zeros.
template <typename T>
void DataCopy(const LocalTensor<T>& dst, const GlobalTensor<T>& src, const Nd2NzParams& p) {
    const std::string api = "DataCopy(Nd2Nz)";
    if (dst.GetMemory() != ascendc_model::Memory::L1) ascendc_model::Fail(api, "ND->NZ copies write to L1 (A1/B1)");
    ascendc_model::CheckLocalAligned(api, "destination", dst.ByteBegin());
    constexpr uint32_t c0 = 32 / sizeof(T);
    if (p.ndNum == 0 || p.nValue == 0 || p.dValue == 0) return;
    if (p.srcDValue < p.dValue)
        ascendc_model::Fail(api, "srcDValue " + std::to_string(p.srcDValue) + " < dValue " + std::to_string(p.dValue));
    if (p.dstNzNStride == 0) ascendc_model::Fail(api, "dstNzNStride must be >= 1");
    const uint32_t dPadded = (p.dValue + c0 - 1) / c0 * c0;
    auto dstIndex = [&](uint32_t i, uint32_t n, uint32_t d) {
        return uint64_t(i) * p.dstNzMatrixStride + uint64_t(d / c0) * p.dstNzC0Stride * c0 +
               uint64_t(n) * p.dstNzNStride * c0 + d % c0;
    };
    auto srcIndex = [&](uint32_t i, uint32_t n, uint32_t d) {
        return uint64_t(i) * p.srcNdMatrixStride + uint64_t(n) * p.srcDValue + d;
    };
    const uint64_t srcExtent = srcIndex(p.ndNum - 1, p.nValue - 1, p.dValue - 1) + 1;
    const uint64_t dstExtent = dstIndex(p.ndNum - 1, p.nValue - 1, dPadded - 1) + 1;
    const T* s = src.Span(api, 0, srcExtent);
    T* d = dst.Span(api, 0, dstExtent);
    ascendc_model::CountCopy(ascendc_model::Pipe::MTE2, uint64_t(p.ndNum) * p.nValue * p.dValue * sizeof(T));
    for (uint32_t i = 0; i < p.ndNum; ++i)
        for (uint32_t n = 0; n < p.nValue; ++n)
            for (uint32_t c = 0; c < dPadded; ++c)
                d[dstIndex(i, n, c)] = c < p.dValue ? s[srcIndex(i, n, c)] : T(0);
}

}  // namespace AscendC

namespace ascendc_model {

// DataCopyPad GM->UB: burst n reads `bytes` from GM at n*(bytes + srcGapBytes) and writes
// [left pad][data][right pad][dummy up to 32 B] to UB at n*(roundup32(padded) + dstGapBlocks*32).
template <typename T>
void PadCopyIn(const AscendC::LocalTensor<T>& dst, const AscendC::GlobalTensor<T>& src, uint32_t count, uint32_t bytes,
               uint64_t srcGapBytes, uint64_t dstGapBlocks, bool isPad, uint32_t left, uint32_t right, T padValue) {
    const std::string api = "DataCopyPad(GM->UB)";
    CheckBursts(api, count, bytes, 2097151, "bytes");
    if (dst.GetMemory() != Memory::UB) Fail(api, "destination must be in UB");
    CheckLocalAligned(api, "destination", dst.ByteBegin());
    CheckElementMultiple(api, bytes, sizeof(T));
    if ((left + right) * sizeof(T) > 32) Fail(api, "leftPadding/rightPadding exceed 32 bytes");
    if (count == 0 || bytes == 0) return;
    const uint64_t elems = bytes / sizeof(T), rowElems = left + elems + right;
    const uint64_t rowBytes = (rowElems * sizeof(T) + 31) / 32 * 32;
    const uint64_t dstPitch = (rowBytes + dstGapBlocks * 32) / sizeof(T), srcPitch = (bytes + srcGapBytes) / sizeof(T);
    const uint64_t rowSlots = rowBytes / sizeof(T);
    const T* s = src.Span(api, 0, (count - 1) * srcPitch + elems);
    T* d = dst.Span(api, 0, (count - 1) * dstPitch + rowSlots);
    CountCopy(Pipe::MTE2, uint64_t(count) * bytes);
    // Dummy data: with no padding requested the hardware repeats the burst's first element; with
    // padding but isPad false the values are unspecified, which the model makes NaN-like (0xFF bytes).
    T poison;
    std::memset(&poison, 0xFF, sizeof(T));
    for (uint32_t n = 0; n < count; ++n) {
        T* row = d + n * dstPitch;
        const T* in = s + n * srcPitch;
        const T fill = isPad ? padValue : (left == 0 && right == 0 ? in[0] : poison);
        for (uint64_t i = 0; i < rowSlots; ++i)
            row[i] = (i >= left && i < left + elems) ? in[i - left] : fill;
    }
}

// DataCopyPad UB->GM: burst n reads `bytes` from UB at n*(roundup32(bytes) + srcGapBlocks*32) and
// writes exactly `bytes` to GM at n*(bytes + dstGapBytes).
template <typename T>
void PadCopyOut(const AscendC::GlobalTensor<T>& dst, const AscendC::LocalTensor<T>& src, uint32_t count, uint32_t bytes,
                uint64_t srcGapBlocks, uint64_t dstGapBytes) {
    const std::string api = "DataCopyPad(UB->GM)";
    CheckBursts(api, count, bytes, 2097151, "bytes");
    if (src.GetMemory() != Memory::UB) Fail(api, "source must be in UB");
    CheckLocalAligned(api, "source", src.ByteBegin());
    CheckElementMultiple(api, bytes, sizeof(T));
    const uint64_t ubPitch = (uint64_t(bytes) + 31) / 32 * 32 + srcGapBlocks * 32;
    BurstCopy<T>(api, dst, src, count, bytes, ubPitch, bytes + dstGapBytes);
}

}  // namespace ascendc_model

namespace AscendC {

template <typename T>
void DataCopyPad(const LocalTensor<T>& dst, const GlobalTensor<T>& src, const DataCopyExtParams& p,
                 const DataCopyPadExtParams<T>& pad) {
    ascendc_model::PadCopyIn(dst, src, p.blockCount, p.blockLen, p.srcStride, p.dstStride, pad.isPad, pad.leftPadding,
                             pad.rightPadding, pad.paddingValue);
}
template <typename T>
void DataCopyPad(const LocalTensor<T>& dst, const GlobalTensor<T>& src, const DataCopyParams& p,
                 const DataCopyPadParams& pad) {
    T value;
    std::memcpy(&value, &pad.paddingValue, sizeof(T));
    ascendc_model::PadCopyIn(dst, src, p.blockCount, p.blockLen, p.srcStride, p.dstStride, pad.isPad, pad.leftPadding,
                             pad.rightPadding, value);
}
template <typename T>
void DataCopyPad(const GlobalTensor<T>& dst, const LocalTensor<T>& src, const DataCopyExtParams& p) {
    ascendc_model::PadCopyOut(dst, src, p.blockCount, p.blockLen, p.srcStride, p.dstStride);
}
template <typename T>
void DataCopyPad(const GlobalTensor<T>& dst, const LocalTensor<T>& src, const DataCopyParams& p) {
    ascendc_model::PadCopyOut(dst, src, p.blockCount, p.blockLen, p.srcStride, p.dstStride);
}

}  // namespace AscendC
