// Pipe-level cost model: what each core issues, counted per pipe while the kernel runs on the model, and
// a modelled time from per-unit costs (docs/cost_model.md has the table and its sources).
//
// Counting: Mmad in 16x16x16 FP16 fractals (ceil(m/16)*ceil(n/16)*ceil(k/16)), LoadData bytes into L0A /
// L0B (MTE1), GM->local bytes (MTE2), local->GM bytes (MTE3), Fixpipe bytes (FIX), vector instructions in
// 256-byte repeats of their widest operand, by API and type (V), UB->UB copies (V), scalar tensor
// accesses (S), cross-core sets and waits, PipeBarriers per pipe (each charged barrierCycles on its pipe).
//
// Timing: each core keeps three clocks (cycles). Work between two synchronisation points is a segment;
// at a CrossCoreSetFlag / CrossCoreWaitFlag / SyncAll the segment's per-pipe cycles are added to the
// clocks, as the largest pipe (`overlap`: the pipes of one core run concurrently), as their sum
// (`serial`: no overlap) and as the largest pipe plus dependentFraction of the others (`model`: the
// calibrated clock, between the two; pasa_npu.cost_model fits the fraction). A set stamps the flag with the setter's clocks; a wait moves the waiter's clocks
// to at least the stamp of the set it consumes (plus a flag latency); a mode-0 barrier or an AIV pair
// releases at the latest of its setters. So the modelled time of a core follows the AIC <-> AIV handshake,
// and the kernel's time is the latest clock of any core.
#pragma once
#include <array>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace ascendc_model {

enum class Pipe : int { S, V, M, MTE1, MTE2, MTE3, FIX };
constexpr int kPipes = 7;
const char* PipeName(Pipe p);

// Cycles per unit of work; all zero (the default) leaves the clocks at zero and only counts.
struct CostTable {
    double cubeCyclesPerFractal = 0;  // one 16x16x16 FP16 fractal
    double mmadHeadCycles = 0;        // per Mmad call (the docs' Δt)
    double l0aBytesPerCycle = 0;      // MTE1 L1 -> L0A
    double l0bBytesPerCycle = 0;      // MTE1 L1 -> L0B
    double gmBytesPerCycle = 0;       // one DMA engine's GM rate (MTE2, MTE3; FIX where fixBytesPerCycle is 0)
    double fixBytesPerCycle = 0;      // Fixpipe L0C -> GM, with its conversion
    double dmaHeadCycles = 0;         // per MTE2 / MTE3 / FIX instruction
    double vecRepeatScale = 0;        // x the documented cycles per repeat (VectorCyclesPerRepeat); 1 = as documented
    double vecHeadCycles = 0;         // per vector instruction
    double ubCopyBytesPerCycle = 0;   // DataCopy UB -> UB (V)
    double scalarCyclesPerAccess = 0; // GetValue / SetValue
    double flagLatencyCycles = 0;     // from a CrossCoreSetFlag to the released wait
    double barrierCycles = 0;         // per PipeBarrier, on its pipe: the pipe drains before it issues again
    double dependentFraction = 0;     // model clock: the share of a segment's non-widest pipes that does not overlap
    double recordSegments = 0;        // non-zero: keep every segment's per-pipe cycles (CoreCounters::segments)
};

// One closed segment of a core: its cycles per pipe (recorded where CostTable::recordSegments is set).
using SegmentCycles = std::array<double, kPipes>;

struct VectorCount {
    uint64_t calls = 0, repeats = 0;
    double cycles = 0;
};

struct CoreCounters {
    uint64_t mmadCalls = 0, cubeFractals = 0, cubeMacs = 0;
    uint64_t loadDataCalls = 0, l0aBytes = 0, l0bBytes = 0;
    uint64_t mte2Calls = 0, mte2Bytes = 0, mte3Calls = 0, mte3Bytes = 0, fixCalls = 0, fixBytes = 0;
    uint64_t ubCopyBytes = 0;
    std::map<std::string, VectorCount> vector;  // "<API>.<bytes of the widest type>"
    uint64_t scalarAccesses = 0;
    uint64_t crossCoreSets = 0, crossCoreWaits = 0, barriers = 0;  // barriers: SyncAll
    std::map<std::string, uint64_t> pipeBarriers;  // PipeBarrier<pipe> by pipe name ("V", "M", "ALL", ...)
    uint64_t idleVectorBarriers = 0;               // PipeBarrier<PIPE_V> that guarded no dependence (hazard.h)
    std::map<std::string, std::array<uint64_t, 2>> vectorBarrierSites;  // per call site: {used, idle}
    std::array<double, kPipes> pipeCycles{};  // Σ over the run
    double clockOverlap = 0, clockSerial = 0, clockModel = 0;  // the core's modelled end time
    double waitOverlap = 0, waitSerial = 0, waitModel = 0;     // of which spent waiting for other cores
    std::vector<SegmentCycles> segments;      // in order, where recorded
};

// Modelled time of a set, or the release of a barrier: the three clocks.
struct Stamp {
    double overlap = 0, serial = 0, model = 0;
};
inline Stamp Later(Stamp a, Stamp b) {
    return {a.overlap > b.overlap ? a.overlap : b.overlap, a.serial > b.serial ? a.serial : b.serial,
            a.model > b.model ? a.model : b.model};
}

// Called by the APIs on the current core.
void CountMmad(uint32_t m, uint32_t n, uint32_t k);
void CountLoadData(bool toL0a, uint64_t bytes);
void CountCopy(Pipe pipe, uint64_t bytes);  // MTE2, MTE3 or FIX
void CountUbCopy(uint64_t bytes);
void CountVector(const std::string& api, uint64_t repeats, uint32_t widestBytes);
void CountScalarAccess();
void CountPipeBarrier(const char* pipeName, Pipe charged);
// Synchronisation points: close the segment, return the core's clocks.
Stamp CloseSegment();
// The waiter's clocks move to at least `released` (+ the flag latency).
void WaitUntil(Stamp released);

// Vector cycles per 256-byte repeat of `api` on elements of `widestBytes` (docs/cost_model.md, from
// asc-devkit docs/zh/api/附录/Vector指令理论性能汇总.md).
double VectorCyclesPerRepeat(const std::string& api, uint32_t widestBytes);

}  // namespace ascendc_model
