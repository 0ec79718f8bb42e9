// Per-core state of the model: which core the calling thread is (AIC or AIV, block and sub-block
// index), its physical on-chip memories and its intra-core event counters. Each core of a launch
// runs on its own thread, so the state is reached through a thread-local pointer.
#pragma once
#include <array>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "host_model/cost.h"
#include "host_model/hazard.h"

namespace AscendC {
class TPipe;
}

namespace ascendc_model {

enum class CoreType { AIC, AIV };

// The physical memories of an Atlas A2 AI core. UB belongs to each AIV; L1, L0A, L0B and L0C to the AIC.
enum class Memory { UB, L1, L0A, L0B, L0C };
// Physical UB of an AIV, and what a mixed (AIC + AIV) kernel may allocate of it on Atlas A2:
//  - the vector APIs keep their scratch (masks, temporaries) in the top 8 KB: TMP_UB_OFFSET = 184 KB,
//    TOTAL_VEC_LOCAL_SIZE = 184 KB (asc-devkit impl/basic_api/utils/kernel_utils_constants.h, branch
//    __NPU_ARCH__ == 2201);
//  - the framework reserves another 256 B of UB and of L1 in mixed kernels (asc-devkit docs/zh/guide/
//    编程指南/高级编程/硬件实现/架构规格/NPU架构版本2201.md: "192KB - 256B - 8KB", "512KB - 256B"), which also
//    covers the header's TOTAL_L1_SIZE = 512 KB - KFC_L1_RESERVER_SIZE (128 B).
constexpr uint32_t kUbBytes = 192 * 1024;
constexpr uint32_t kUbUsableBytes = 184 * 1024 - 256;
constexpr uint32_t kL1Bytes = 512 * 1024 - 256;
constexpr uint32_t kL0aBytes = 64 * 1024;
constexpr uint32_t kL0bBytes = 64 * 1024;
constexpr uint32_t kL0cBytes = 128 * 1024;
constexpr uint32_t kBlockBytes = 32;  // the DMA / vector data block ("DataBlock")
const char* MemoryName(Memory m);
uint32_t MemoryCapacity(Memory m);  // what TPipe::InitBuffer may allocate

// Intra-core event flags: SetFlag/WaitFlag<HardEvent> ids 0..7 (QUE_MAX_EVENT = 8 on dav-c220, asc-devkit
// impl/basic_api/kernel_macros.h).
constexpr int kEventIds = 8;
constexpr int kHardEventKinds = 64;

// One (HardEvent, ID) flag of a core. It is one bit (SetFlag/WaitFlag docs: SetFlag sets the flag to 1; WaitFlag
// blocks while it is 0, then clears it), so who set it and where is kept for the messages of event.h's rules.
struct EventFlag {
    bool set = false;
    std::string by;  // the API that set it (SetFlag, TQue<VECIN, 1>::FreeTensor, TPipe, ...), or last waited it
    Site site;       // ... and where the kernel called it
};

class TPipeState;

// One 64-byte GM line in a core's scalar data cache: the bytes its reads fetched (valid bit per byte).
struct CachedLine {
    std::array<uint8_t, 64> bytes{};
    uint64_t valid = 0;
};

struct CoreContext {
    CoreType type = CoreType::AIV;
    uint32_t blockIdx = 0;     // index of the AI core (AIC index; for an AIV, the AIC it belongs to)
    uint32_t subBlockIdx = 0;  // 0 or 1 on an AIV, 0 on the AIC
    uint32_t blockDim = 1;     // number of AI cores launched
    uint64_t tilingKey = 0;
    uint32_t globalIndex = 0;  // position in the launch's core list (flag bookkeeping)
    // Physical memories, filled with 0xFF bytes (NaN for half and float) so a read of never-written
    // data shows up as NaN instead of a plausible zero.
    std::array<std::vector<uint8_t>, 5> memory;
    std::array<std::array<EventFlag, kEventIds>, kHardEventKinds> events{};
    std::string eventError;      // a rule broken where the model cannot throw (TPipe's destructor), reported at the end
    TPipeState* pipe = nullptr;  // the live TPipe of this core (at most one)
    AscendC::TPipe* tpipe = nullptr;  // ... as GetTPipePtr() returns it
    // The scalar unit's data cache (cache.h): 64-byte GM lines as this core's scalar reads last fetched
    // them, kept until DataCacheCleanAndInvalid drops them.
    std::map<uintptr_t, CachedLine> dataCache;
    // Cost model (cost.h): what this core issued, the cycles of the open segment per pipe, the unit costs.
    CoreCounters counters;
    std::array<double, kPipes> segment{};
    const CostTable* cost = nullptr;  // null: count only, no clocks
    HazardState hazards;  // UB dependences of the vector pipe and the scalar unit (hazard.h)

    std::vector<uint8_t>& Mem(Memory m) { return memory[static_cast<int>(m)]; }
    std::string Name() const;  // "AIC 2" / "AIV 5 (block 2, sub-block 1)"
};

// The core the calling thread runs as; outside LaunchMix there is none and this throws Error.
CoreContext& CurrentCore();
CoreContext* CurrentCoreOrNull();

}  // namespace ascendc_model
