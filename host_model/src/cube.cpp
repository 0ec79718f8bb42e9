// Fractal moves, the cube multiply and the Fixpipe write-out (layouts in cube.h).
#include "host_model/cube.h"

#include <cstring>
#include <vector>

namespace ascendc_model {

void CheckCubeAligned(const std::string& api, const char* role, Memory memory, uint32_t byteAddr, uint32_t align,
                      const char* rule) {
    if (byteAddr % align != 0)
        Fail(api, std::string(role) + " address " + std::to_string(byteAddr) + " B in " + MemoryName(memory) +
                      " is not " + std::to_string(align) + "-byte aligned (" + rule + ")");
}

void CheckCubeRange(const std::string& api, const char* name, uint64_t value, uint64_t lo, uint64_t hi,
                    const char* rule) {
    if (value < lo || value > hi)
        Fail(api, std::string(name) + " " + std::to_string(value) + " outside [" + std::to_string(lo) + ", " +
                      std::to_string(hi) + "] (" + rule + ")");
}

void LoadFractals(const std::string& api, uint8_t* dst, const uint8_t* src, const AscendC::LoadData2DParams& p) {
    if (p.addrMode != 0) Fail(api, "addrMode 1 (decrementing) is only for GM->L1 and is not modelled");
    for (uint32_t r = 0; r < p.repeatTimes; ++r) {
        const uint8_t* s = src + uint64_t(p.startIndex + r * p.srcStride) * kFractalBytes;
        uint8_t* d = dst + uint64_t(r) * (p.dstGap + 1u) * kFractalBytes;
        if (!p.ifTranspose) {
            std::memmove(d, s, kFractalBytes);
            continue;
        }
        // 16x16 of 2-byte elements: d[i][j] = s[j][i]
        uint16_t tmp[256];
        std::memcpy(tmp, s, kFractalBytes);
        uint16_t* out = reinterpret_cast<uint16_t*>(d);
        for (int i = 0; i < 16; ++i)
            for (int j = 0; j < 16; ++j) out[i * 16 + j] = tmp[j * 16 + i];
    }
}

uint64_t L0cElements(const AscendC::MmadParams& p) {
    const uint64_t m1 = (p.m + 15) / 16, n1 = (p.n + 15) / 16;
    return (n1 - 1) * m1 * 256 + (m1 - 1) * 256 + 256;
}

void MmadHalf(const std::string& api, float* c, const half* a, const half* b, const AscendC::MmadParams& p) {
    if (p.cmatrixSource) Fail(api, "cmatrixSource (bias table) is not modelled");
    if (p.enSsparse || p.enWinogradA || p.enWinogradB) Fail(api, "sparse/winograd modes are not modelled");
    const bool accumulate = p.isBias || !p.cmatrixInitVal;
    const uint32_t k1 = (p.k + 15) / 16, m1 = (p.m + 15) / 16, n1 = (p.n + 15) / 16;
    // The operands are widened to double once per call (exact), row i of A and column j of B each
    // contiguous over k, not once per product: a half -> double conversion is a libgcc call on x86-64
    // (and a slow one, raising the denormal flag, for subnormal halves), and m*n*k of them per call
    // made this loop most of the model's run time.
    std::vector<double> aRows(size_t(p.m) * p.k), bCols(size_t(p.n) * p.k);
    for (uint32_t i = 0; i < p.m; ++i)
        for (uint32_t k = 0; k < p.k; ++k)
            aRows[size_t(i) * p.k + k] =
                double(p.m == 1 ? a[k]  // GEMV: L0A read as ND
                                : a[((i / 16) * k1 + k / 16) * 256 + (i % 16) * 16 + k % 16]);
    for (uint32_t j = 0; j < p.n; ++j)
        for (uint32_t k = 0; k < p.k; ++k)
            bCols[size_t(j) * p.k + k] = double(b[((k / 16) * n1 + j / 16) * 256 + (j % 16) * 16 + k % 16]);
    for (uint32_t i = 0; i < p.m; ++i)
        for (uint32_t j = 0; j < p.n; ++j) {
            // The cube's accumulator is modelled as wide: products of halves are exact in double and
            // so are their sums unless the products span more than ~2^30 in magnitude; the sum is
            // rounded once to FP32 per Mmad call, as the golden model does.
            const double* ai = &aRows[size_t(i) * p.k];
            const double* bj = &bCols[size_t(j) * p.k];
            double acc = 0.0;
            for (uint32_t k = 0; k < p.k; ++k) acc += ai[k] * bj[k];
            float& out = c[((j / 16) * m1 + i / 16) * 256 + (i % 16) * 16 + j % 16];
            out = accumulate ? out + static_cast<float>(acc) : static_cast<float>(acc);
        }
}

uint64_t FixpipeSourceElements(const AscendC::FixpipeParamsV220& p) {
    const uint64_t lastCol = p.nSize - 1u, lastRow = p.mSize - 1u;
    return ((lastCol / 16) * p.srcStride + lastRow) * 16 + 16;
}

uint64_t FixpipeDestElements(const AscendC::FixpipeParamsV220& p) {
    return uint64_t(p.mSize - 1u) * p.dstStride + p.nSize;
}

void FixpipeNz2Nd(const std::string& api, uint8_t* dst, uint32_t dstElemBytes, const float* src,
                  const AscendC::FixpipeParamsV220& p) {
    if (p.dstStride < p.nSize) Fail(api, "dstStride " + std::to_string(p.dstStride) + " < nSize " + std::to_string(p.nSize));
    for (uint32_t i = 0; i < p.mSize; ++i)
        for (uint32_t j = 0; j < p.nSize; ++j) {
            const float v = src[((j / 16) * uint64_t(p.srcStride) + i) * 16 + j % 16];
            uint8_t* out = dst + (uint64_t(i) * p.dstStride + j) * dstElemBytes;
            if (dstElemBytes == 2) {
                const half h = static_cast<half>(v);  // F322F16: round to nearest even
                std::memcpy(out, &h, 2);
            } else {
                std::memcpy(out, &v, 4);
            }
        }
}

}  // namespace ascendc_model
