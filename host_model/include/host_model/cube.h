// The cube path: LoadData (L1 -> L0A/L0B, 512-byte fractals, optional per-fractal transpose),
// Mmad (L0A x L0B -> L0C with FP32 accumulation) and Fixpipe (L0C NZ -> GM ND, FP32 -> FP16 RNE or
// FP32 kept). The fractal layouts are stored for real, so wrong strides or repeat counts give wrong
// results:
//   L1 (after Nd2Nz), "NZ": element (r, c) at ((c/16)*C0Stride + r*NStride)*16 + c%16
//   L0A, "zZ": A(i, k) at ((i/16)*K1 + k/16)*256 + (i%16)*16 + k%16,  K1 = ceil(k/16)
//   L0B, "nZ": B(k, j) at ((k/16)*N1 + j/16)*256 + (j%16)*16 + k%16,  N1 = ceil(n/16)
//   L0C, "NZ": C(i, j) at ((j/16)*M1 + i/16)*256 + (i%16)*16 + j%16,  M1 = ceil(m/16), FP32
// Mmad with m == 1 reads L0A as ND (GEMV mode, as the Mmad docs state for M = 1).
//
// Checks, as asc-devkit's docs state them (docs/api/context/): operand start addresses (通用说明和约束.md, 通用地址
// 对齐约束: L1 32 B, L0A/L0B 512 B, L0C 64 B; Mmad.md: dst 256 elements); Load2D.md: repeatTimes in [1, 255];
// Mmad.md: m, n, k in [0, 4095] (0: not executed); Fixpipe.md, with NZ2ND (CFG_ROW_MAJOR): nSize in [1, 4095],
// mSize in [1, 8192], dstStride non-zero (and, for the ND rows not to overlap, at least nSize).
#pragma once
#include <cstdint>

#include "host_model/cost.h"
#include "host_model/tensor.h"

namespace AscendC {

struct LoadData2DParams {
    LoadData2DParams() {}
    LoadData2DParams(const uint16_t startIndexIn, const uint8_t repeatTimesIn, const uint16_t srcStrideIn,
                     const uint8_t sidIn, const uint16_t dstGapIn, const bool ifTransposeIn, const uint8_t addrModeIn)
        : startIndex(startIndexIn), dstGap(dstGapIn), srcStride(srcStrideIn), ifTranspose(ifTransposeIn),
          repeatTimes(repeatTimesIn), sid(sidIn), addrMode(addrModeIn) {}
    uint16_t startIndex = 0;  // first source fractal (512 B units)
    uint16_t dstGap = 0;      // fractals left free between destination fractals
    uint16_t srcStride = 0;   // fractals between consecutive source fractals
    bool ifTranspose = false;
    uint8_t repeatTimes = 0;  // fractals moved
    uint8_t sid = 0;
    uint8_t addrMode = 0;
};

struct MmadParams {
    MmadParams() {}
    MmadParams(const uint16_t mIn, const uint16_t nIn, const uint16_t kIn, const bool isBiasIn,
               const int32_t fmOffsetIn, const bool enSsparseIn, const bool enWinogradAIn, const bool enWinogradBIn)
        : m(mIn), n(nIn), k(kIn), isBias(isBiasIn), fmOffset(fmOffsetIn), enSsparse(enSsparseIn),
          enWinogradA(enWinogradAIn), enWinogradB(enWinogradBIn) {}
    MmadParams(const uint16_t mIn, const uint16_t nIn, const uint16_t kIn, const uint8_t unitFlagIn,
               const bool cmatrixSourceIn, const bool cmatrixInitValIn)
        : m(mIn), n(nIn), k(kIn), unitFlag(unitFlagIn), cmatrixSource(cmatrixSourceIn),
          cmatrixInitVal(cmatrixInitValIn) {}
    uint16_t m = 0;
    uint16_t n = 0;
    uint16_t k = 0;
    bool isBias = false;  // deprecated: true = accumulate onto L0C
    int32_t fmOffset = 0;
    bool enSsparse = false;
    bool enWinogradA = false;
    bool enWinogradB = false;
    uint8_t unitFlag = 0;
    bool kDirectionAlign = false;
    bool cmatrixSource = false;
    bool cmatrixInitVal = true;  // true: C = A*B; false: C += A*B
};

enum class CO2Layout : uint8_t { NZ = 0, ROW_MAJOR, COLUMN_MAJOR };
struct FixpipeConfig {
    CO2Layout format;
};
inline constexpr FixpipeConfig CFG_NZ = {CO2Layout::NZ};
inline constexpr FixpipeConfig CFG_ROW_MAJOR = {CO2Layout::ROW_MAJOR};
inline constexpr FixpipeConfig CFG_COLUMN_MAJOR = {CO2Layout::COLUMN_MAJOR};

struct FixpipeParamsV220 {
    FixpipeParamsV220() {}
    FixpipeParamsV220(const uint16_t nSizeIn, const uint16_t mSizeIn, const uint16_t srcStrideIn,
                      const uint32_t dstStrideIn, const bool reluEnIn)
        : nSize(nSizeIn), mSize(mSizeIn), srcStride(srcStrideIn), dstStride(dstStrideIn), reluEn(reluEnIn) {}
    FixpipeParamsV220(const uint16_t nSizeIn, const uint16_t mSizeIn, const uint16_t srcStrideIn,
                      const uint32_t dstStrideIn, const bool reluEnIn, const QuantMode_t quantPreIn,
                      const int64_t deqScalarIn, const uint16_t ndNumIn, const uint16_t srcNdStrideIn,
                      const uint16_t dstNdStrideIn, const uint8_t unitFlagIn)
        : nSize(nSizeIn), mSize(mSizeIn), srcStride(srcStrideIn), dstStride(dstStrideIn), quantPre(quantPreIn),
          deqScalar(deqScalarIn), ndNum(ndNumIn), srcNdStride(srcNdStrideIn), dstNdStride(dstNdStrideIn),
          reluEn(reluEnIn), unitFlag(unitFlagIn) {}
    uint16_t nSize = 0;      // columns (N)
    uint16_t mSize = 0;      // rows (M)
    uint16_t srcStride = 0;  // 16-row groups between fractal columns in L0C (= ceil16(mSize))
    uint32_t dstStride = 0;  // ND: elements between output rows
    QuantMode_t quantPre = QuantMode_t::NoQuant;
    uint64_t deqScalar = 0;
    uint16_t ndNum = 1;
    uint16_t srcNdStride = 0;
    uint16_t dstNdStride = 0;
    bool reluEn = false;
    uint8_t unitFlag = 0;
    bool isChannelSplit = false;
};

}  // namespace AscendC

namespace ascendc_model {

constexpr uint32_t kFractalBytes = 512;
// Fails unless `byteAddr` (of `role`, in `memory`) is a multiple of `align` bytes; `rule` names the documented rule.
void CheckCubeAligned(const std::string& api, const char* role, Memory memory, uint32_t byteAddr, uint32_t align,
                      const char* rule);
// Fails unless lo <= value <= hi (the documented range of parameter `name`).
void CheckCubeRange(const std::string& api, const char* name, uint64_t value, uint64_t lo, uint64_t hi,
                    const char* rule);
void LoadFractals(const std::string& api, uint8_t* dst, const uint8_t* src, const AscendC::LoadData2DParams& p);
void MmadHalf(const std::string& api, float* c, const half* a, const half* b, const AscendC::MmadParams& p);
void FixpipeNz2Nd(const std::string& api, uint8_t* dst, uint32_t dstElemBytes, const float* src,
                  const AscendC::FixpipeParamsV220& p);
uint64_t L0cElements(const AscendC::MmadParams& p);
uint64_t FixpipeSourceElements(const AscendC::FixpipeParamsV220& p);
uint64_t FixpipeDestElements(const AscendC::FixpipeParamsV220& p);

}  // namespace ascendc_model

namespace AscendC {

template <typename T>
void LoadData(const LocalTensor<T>& dst, const LocalTensor<T>& src, const LoadData2DParams& p) {
    const std::string api = "LoadData";
    using ascendc_model::Memory;
    if (src.GetMemory() != Memory::L1) ascendc_model::Fail(api, "source must be in L1 (A1/B1)");
    if (dst.GetMemory() != Memory::L0A && dst.GetMemory() != Memory::L0B)
        ascendc_model::Fail(api, "destination must be in L0A (A2) or L0B (B2)");
    if (p.ifTranspose && sizeof(T) != 2) ascendc_model::Fail(api, "ifTranspose supports 16-bit types only");
    ascendc_model::CheckCubeRange(api, "repeatTimes", p.repeatTimes, 1, 255, "Load2D docs");
    ascendc_model::CheckCubeAligned(api, "src", Memory::L1, src.ByteBegin(), 32, "通用地址对齐约束");
    ascendc_model::CheckCubeAligned(api, "dst", dst.GetMemory(), dst.ByteBegin(), 512, "通用地址对齐约束");
    const uint32_t perFractal = ascendc_model::kFractalBytes / sizeof(T);
    const uint32_t srcFractals = p.startIndex + (p.repeatTimes - 1u) * p.srcStride + 1u;
    const uint32_t dstFractals = (p.repeatTimes - 1u) * (p.dstGap + 1u) + 1u;
    T* s = src.Span(api, 0, uint64_t(srcFractals) * perFractal);
    T* d = dst.Span(api, 0, uint64_t(dstFractals) * perFractal);
    ascendc_model::CountLoadData(dst.GetMemory() == Memory::L0A, uint64_t(p.repeatTimes) * ascendc_model::kFractalBytes);
    ascendc_model::LoadFractals(api, reinterpret_cast<uint8_t*>(d), reinterpret_cast<const uint8_t*>(s), p);
}

template <typename T, typename U, typename S>
void Mmad(const LocalTensor<T>& dst, const LocalTensor<U>& fm, const LocalTensor<S>& filter, const MmadParams& p) {
    static_assert(std::is_same<T, float>::value && std::is_same<U, half>::value && std::is_same<S, half>::value,
                  "the model implements Mmad for half x half -> float");
    const std::string api = "Mmad";
    using ascendc_model::Memory;
    if (dst.GetMemory() != Memory::L0C || fm.GetMemory() != Memory::L0A || filter.GetMemory() != Memory::L0B)
        ascendc_model::Fail(api, "operands must be dst in L0C (CO1), fm in L0A (A2), filter in L0B (B2)");
    ascendc_model::CheckCubeRange(api, "m", p.m, 0, 4095, "Mmad docs");
    ascendc_model::CheckCubeRange(api, "n", p.n, 0, 4095, "Mmad docs");
    ascendc_model::CheckCubeRange(api, "k", p.k, 0, 4095, "Mmad docs");
    ascendc_model::CheckCubeAligned(api, "dst", Memory::L0C, dst.ByteBegin(), 256 * sizeof(T), "Mmad docs: 256 elements");
    ascendc_model::CheckCubeAligned(api, "fm", Memory::L0A, fm.ByteBegin(), 512, "Mmad docs");
    ascendc_model::CheckCubeAligned(api, "filter", Memory::L0B, filter.ByteBegin(), 512, "Mmad docs");
    if (p.m == 0 || p.n == 0 || p.k == 0) return;  // "not executed" (Mmad docs)
    const uint64_t k1 = (p.k + 15) / 16, m1 = (p.m + 15) / 16, n1 = (p.n + 15) / 16;
    const half* a = fm.Span(api, 0, p.m == 1 ? p.k : m1 * k1 * 256);
    const half* b = filter.Span(api, 0, k1 * n1 * 256);
    float* c = dst.Span(api, 0, ascendc_model::L0cElements(p));
    ascendc_model::CountMmad(p.m, p.n, p.k);
    ascendc_model::MmadHalf(api, c, a, b, p);
}

template <typename T, typename U, const FixpipeConfig& config = CFG_ROW_MAJOR>
void Fixpipe(const GlobalTensor<T>& dst, const LocalTensor<U>& src, const FixpipeParamsV220& p) {
    static_assert(std::is_same<U, float>::value, "the model implements Fixpipe from an FP32 L0C");
    static_assert(config.format == CO2Layout::ROW_MAJOR, "the model implements Fixpipe NZ->ND (CFG_ROW_MAJOR)");
    const std::string api = "Fixpipe";
    if (src.GetMemory() != ascendc_model::Memory::L0C) ascendc_model::Fail(api, "source must be in L0C (CO1)");
    if (std::is_same<T, half>::value && p.quantPre != QuantMode_t::F322F16)
        ascendc_model::Fail(api, "a half destination needs quantPre = F322F16");
    if (std::is_same<T, float>::value && p.quantPre != QuantMode_t::NoQuant)
        ascendc_model::Fail(api, "a float destination needs quantPre = NoQuant");
    if (!std::is_same<T, half>::value && !std::is_same<T, float>::value)
        ascendc_model::Fail(api, "destination type must be half or float");
    if (p.ndNum != 1) ascendc_model::Fail(api, "ndNum != 1 is not modelled");
    if (p.reluEn) ascendc_model::Fail(api, "reluEn is not modelled");
    ascendc_model::CheckCubeRange(api, "nSize", p.nSize, 1, 4095, "Fixpipe docs, NZ2ND");
    ascendc_model::CheckCubeRange(api, "mSize", p.mSize, 1, 8192, "Fixpipe docs, NZ2ND");
    ascendc_model::CheckCubeAligned(api, "src", ascendc_model::Memory::L0C, src.ByteBegin(), 64, "Fixpipe docs");
    const float* s = src.Span(api, 0, ascendc_model::FixpipeSourceElements(p));
    T* d = dst.Span(api, 0, ascendc_model::FixpipeDestElements(p));
    ascendc_model::CountCopy(ascendc_model::Pipe::FIX, uint64_t(p.mSize) * p.nSize * sizeof(T));
    ascendc_model::FixpipeNz2Nd(api, reinterpret_cast<uint8_t*>(d), sizeof(T), s, p);
}

}  // namespace AscendC
