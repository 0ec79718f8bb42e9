// Counting and clocks of the cost model (see cost.h and docs/cost_model.md).
#include "host_model/cost.h"

#include <algorithm>
#include <cmath>

#include "host_model/core.h"

namespace ascendc_model {

namespace {

void Charge(CoreContext& c, Pipe p, double cycles) {
    if (c.cost == nullptr) return;
    c.segment[static_cast<int>(p)] += cycles;
    c.counters.pipeCycles[static_cast<int>(p)] += cycles;
}

double PerByte(uint64_t bytes, double bytesPerCycle) { return bytesPerCycle > 0 ? double(bytes) / bytesPerCycle : 0.0; }

}  // namespace

const char* PipeName(Pipe p) {
    static const char* names[] = {"S", "V", "M", "MTE1", "MTE2", "MTE3", "FIX"};
    return names[static_cast<int>(p)];
}

// Cycles per 256-byte repeat = elements per repeat / elements per cycle, with the A2 parallelism of
// asc-devkit docs/zh/api/附录/Vector指令理论性能汇总.md (tables 6, 9, 10, 11, 13):
//   Exp, Ln, Sqrt, Div: 32 elements/cycle (half: 4 cycles a repeat of 128, float: 2 a repeat of 64);
//   WholeReduce* ("ReduceRepeat"): 128/7 half, 64/7 float elements/cycle: 7 cycles a repeat; BlockReduceMax
//   ("ReduceDataBlock"): 128/7 half (7 cycles a repeat), 64 float (1 cycle); ReduceMax/Min/Sum are software
//   sequences with no published figure and are charged like WholeReduce over their input;
//   every other API the kernel uses (Add, Sub, Mul, Max, Min, Adds, Muls, Maxs, Mins, Abs, Relu, Reciprocal,
//   Compare, CompareScalar, Select, Cast, Duplicate, Brcb): a full 256-byte repeat a cycle.
double VectorCyclesPerRepeat(const std::string& api, uint32_t widestBytes) {
    const double lanes = 256.0 / widestBytes;
    if (api == "Exp" || api == "Ln" || api == "Sqrt" || api == "Div") return lanes / 32.0;
    if (api == "BlockReduceMax") return widestBytes == 2 ? 7.0 : 1.0;
    if (api.rfind("WholeReduce", 0) == 0 || api.rfind("Reduce", 0) == 0) return 7.0;
    return 1.0;
}

void CountMmad(uint32_t m, uint32_t n, uint32_t k) {
    CoreContext* c = CurrentCoreOrNull();
    if (c == nullptr) return;
    const uint64_t fractals = uint64_t((m + 15) / 16) * ((n + 15) / 16) * ((k + 15) / 16);
    c->counters.mmadCalls += 1;
    c->counters.cubeFractals += fractals;
    c->counters.cubeMacs += uint64_t(m) * n * k;
    if (c->cost) Charge(*c, Pipe::M, fractals * c->cost->cubeCyclesPerFractal + c->cost->mmadHeadCycles);
}

void CountLoadData(bool toL0a, uint64_t bytes) {
    CoreContext* c = CurrentCoreOrNull();
    if (c == nullptr) return;
    c->counters.loadDataCalls += 1;
    (toL0a ? c->counters.l0aBytes : c->counters.l0bBytes) += bytes;
    if (c->cost) Charge(*c, Pipe::MTE1, PerByte(bytes, toL0a ? c->cost->l0aBytesPerCycle : c->cost->l0bBytesPerCycle));
}

void CountCopy(Pipe pipe, uint64_t bytes) {
    CoreContext* c = CurrentCoreOrNull();
    if (c == nullptr) return;
    CoreCounters& k = c->counters;
    if (pipe == Pipe::MTE2) k.mte2Calls += 1, k.mte2Bytes += bytes;
    else if (pipe == Pipe::MTE3) k.mte3Calls += 1, k.mte3Bytes += bytes;
    else k.fixCalls += 1, k.fixBytes += bytes;
    if (c->cost == nullptr) return;
    const double rate = pipe == Pipe::FIX && c->cost->fixBytesPerCycle > 0 ? c->cost->fixBytesPerCycle
                                                                            : c->cost->gmBytesPerCycle;
    Charge(*c, pipe, c->cost->dmaHeadCycles + PerByte(bytes, rate));
}

void CountUbCopy(uint64_t bytes) {
    CoreContext* c = CurrentCoreOrNull();
    if (c == nullptr) return;
    c->counters.ubCopyBytes += bytes;
    if (c->cost) Charge(*c, Pipe::V, c->cost->vecHeadCycles + PerByte(bytes, c->cost->ubCopyBytesPerCycle));
}

void CountVector(const std::string& api, uint64_t repeats, uint32_t widestBytes) {
    CoreContext* c = CurrentCoreOrNull();
    if (c == nullptr) return;
    VectorCount& v = c->counters.vector[api + "." + (widestBytes == 2 ? "b16" : widestBytes == 4 ? "b32" : "b8")];
    const double cycles = repeats * VectorCyclesPerRepeat(api, widestBytes);
    v.calls += 1;
    v.repeats += repeats;
    v.cycles += cycles;
    if (c->cost) Charge(*c, Pipe::V, cycles * c->cost->vecRepeatScale + c->cost->vecHeadCycles);
}

void CountScalarAccess() {
    CoreContext* c = CurrentCoreOrNull();
    if (c == nullptr) return;
    c->counters.scalarAccesses += 1;
    if (c->cost) Charge(*c, Pipe::S, c->cost->scalarCyclesPerAccess);
}

void CountPipeBarrier(const char* pipeName, Pipe charged) {
    CoreContext* c = CurrentCoreOrNull();
    if (c == nullptr) return;
    c->counters.pipeBarriers[pipeName] += 1;
    if (c->cost) Charge(*c, charged, c->cost->barrierCycles);
}

Stamp CloseSegment() {
    CoreContext& c = CurrentCore();
    CoreCounters& k = c.counters;
    double widest = 0, sum = 0;
    for (double s : c.segment) widest = std::max(widest, s), sum += s;
    k.clockOverlap += widest;
    k.clockSerial += sum;
    if (c.cost != nullptr) {
        k.clockModel += widest + c.cost->dependentFraction * (sum - widest);
        if (c.cost->recordSegments != 0 && sum > 0) k.segments.push_back(c.segment);
    }
    c.segment.fill(0.0);
    return {k.clockOverlap, k.clockSerial, k.clockModel};
}

void WaitUntil(Stamp released) {
    CoreContext& c = CurrentCore();
    CoreCounters& k = c.counters;
    const double latency = c.cost ? c.cost->flagLatencyCycles : 0.0;
    const double overlap = std::max(k.clockOverlap, released.overlap + latency);
    const double serial = std::max(k.clockSerial, released.serial + latency);
    const double model = std::max(k.clockModel, released.model + latency);
    k.waitOverlap += overlap - k.clockOverlap;
    k.waitSerial += serial - k.clockSerial;
    k.waitModel += model - k.clockModel;
    k.clockOverlap = overlap;
    k.clockSerial = serial;
    k.clockModel = model;
}

}  // namespace ascendc_model
