// Alignment rules of the DMA paths.
#include "host_model/copy.h"

namespace ascendc_model {

void CheckLocalAligned(const std::string& api, const char* role, uint32_t byteAddr) {
    if (byteAddr % kBlockBytes != 0)
        Fail(api, std::string(role) + " address " + std::to_string(byteAddr) + " B is not 32-byte aligned");
}

void CheckBursts(const std::string& api, uint32_t blockCount, uint32_t blockLen, uint32_t maxBlockLen, const char* unit) {
    if (blockCount < 1 || blockCount > 4095)
        Fail(api, "blockCount " + std::to_string(blockCount) + " outside [1, 4095] (DataCopy docs)");
    if (blockLen < 1 || blockLen > maxBlockLen)
        Fail(api, "blockLen " + std::to_string(blockLen) + " " + unit + " outside [1, " + std::to_string(maxBlockLen) +
                      "] (DataCopy docs)");
}

void CheckBlockMultiple(const std::string& api, uint64_t bytes) {
    if (bytes % kBlockBytes != 0)
        Fail(api, "length " + std::to_string(bytes) + " B is not a multiple of 32 bytes (use DataCopyPad)");
}

void CheckElementMultiple(const std::string& api, uint64_t bytes, uint32_t elemBytes) {
    if (bytes % elemBytes != 0)
        Fail(api, "blockLen " + std::to_string(bytes) + " B is not a multiple of the element size");
}

}  // namespace ascendc_model
