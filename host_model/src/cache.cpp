// The scalar data cache of cache.h: per core, 64-byte GM lines as last fetched by its scalar reads.
#include "host_model/cache.h"

#include <cstring>

#include "host_model/core.h"

namespace ascendc_model {
namespace {

constexpr uintptr_t kLineBytes = 64;

// Calls f(line address, offset in the line, bytes) for each line that [gm, gm + bytes) touches.
template <class F>
void ForLines(const void* gm, uint32_t bytes, F f) {
    uintptr_t a = reinterpret_cast<uintptr_t>(gm);
    const uintptr_t end = a + bytes;
    while (a < end) {
        const uintptr_t line = a / kLineBytes * kLineBytes;
        const uintptr_t n = (line + kLineBytes < end ? line + kLineBytes : end) - a;
        f(line, static_cast<uint32_t>(a - line), static_cast<uint32_t>(n));
        a += n;
    }
}

}  // namespace

void CachedRead(const void* gm, void* out, uint32_t bytes) {
    CoreContext* core = CurrentCoreOrNull();
    if (core == nullptr) {  // host code around a launch: no core, no cache
        std::memcpy(out, gm, bytes);
        return;
    }
    uint8_t* dst = static_cast<uint8_t*>(out);
    ForLines(gm, bytes, [&](uintptr_t line, uint32_t off, uint32_t n) {
        // Only the bytes a read touched are fetched (the rest of the line may lie outside the host
        // allocation standing in for GM); once fetched, a byte is served from the cache.
        CachedLine& cached = core->dataCache[line];
        for (uint32_t i = off; i < off + n; ++i)
            if (!(cached.valid >> i & 1)) {
                cached.bytes[i] = reinterpret_cast<const uint8_t*>(line)[i];
                cached.valid |= uint64_t(1) << i;
            }
        std::memcpy(dst, cached.bytes.data() + off, n);
        dst += n;
    });
}

void CachedWrite(void* gm, const void* in, uint32_t bytes) {
    std::memcpy(gm, in, bytes);
    CoreContext* core = CurrentCoreOrNull();
    if (core == nullptr) return;
    const uint8_t* src = static_cast<const uint8_t*>(in);
    ForLines(gm, bytes, [&](uintptr_t line, uint32_t off, uint32_t n) {
        auto it = core->dataCache.find(line);
        if (it != core->dataCache.end())
            for (uint32_t i = 0; i < n; ++i)
                if (it->second.valid >> (off + i) & 1) it->second.bytes[off + i] = src[i];
        src += n;
    });
}

void DropCachedLines(const void* gm, bool entire) {
    CoreContext& core = CurrentCore();
    if (entire) core.dataCache.clear();
    else core.dataCache.erase(reinterpret_cast<uintptr_t>(gm) / kLineBytes * kLineBytes);
}

}  // namespace ascendc_model
