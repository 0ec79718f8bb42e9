// Dependences on UB inside an AIV: between the instructions of the vector pipe, and between the vector pipe
// and the scalar unit.
//
// The scalar unit issues vector instructions in program order, but the vector pipe may run them overlapped,
// so an instruction that reads what an earlier one writes (read after write), writes what it writes (write
// after write) or what it reads (write after read) needs PipeBarrier<PIPE_V>() between them (PipeBarrier docs:
// "具有数据依赖的相同流水之间需要插入此同步", with Add -> PipeBarrier<PIPE_V> -> Mul as the example). A scalar
// GetValue/SetValue of UB that a vector instruction writes (SetValue: or reads) needs SetFlag/WaitFlag
// <HardEvent::V_S> between them, and a vector instruction on UB that SetValue wrote needs SetFlag/WaitFlag
// <HardEvent::S_V>. The model fails the later access of such a pair.
//
// Footprints are conservative: every 32-byte block (the vector unit's DataBlock) in which an operand has an
// active lane, so two instructions on different bytes of one block count as dependent.
//
// Ordering points of the vector pipe: PipeBarrier<PIPE_V> (or PIPE_ALL) orders every earlier vector
// instruction before every later one; WaitFlag<HardEvent::V_S> does so for the instructions issued before its
// SetFlag, since the scalar unit, which issues the later ones, waited for them. So do the events a TQue sets
// and waits on: a VECOUT tensor's EnQue sets V_MTE3 once the vector instructions before it are done, its
// FreeTensor sets MTE3_V after the copy out, and the next AllocTensor of that buffer waits for it on the vector
// pipe; a VECIN tensor's FreeTensor sets V_MTE2, the copy into the buffer's next tensor waits for it, and
// that tensor's DeQue waits for the copy on the vector pipe. A PipeBarrier<PIPE_V> is
// idle when no instruction between it and the ordering point before it conflicts with one between it and the
// next: on this run it guards nothing (CoreCounters::idleVectorBarriers, and per call site
// CoreCounters::vectorBarrierSites; with ASCENDC_MODEL_BARRIER_LOG=<file> every launch appends the latter,
// one "site used idle" line per site and core, so the barriers no run needs can be found over a test suite).
#pragma once
#include <array>
#include <cstdint>
#include <deque>
#include <string>
#include <utility>
#include <vector>

namespace ascendc_model {

// Where the kernel called an API: the caller's file and line (default arguments evaluate at the call site).
struct Site {
    const char* file = nullptr;
    int line = 0;
    static Site Here(const char* f = __builtin_FILE(), int l = __builtin_LINE()) { return {f, l}; }
    std::string Text() const;  // "file.h:123"
};

// Sorted, disjoint byte ranges [lo, hi) of UB.
using Ranges = std::vector<std::pair<uint32_t, uint32_t>>;
void Normalise(Ranges& r);  // sorts and merges touching ranges

// One vector instruction's footprint.
struct VectorOp {
    std::string api;
    Site site;
    Ranges reads, writes;
    uint64_t seq = 0;
};

struct ScalarWrite {
    std::string api;
    Site site;
    Ranges bytes;
    uint64_t seq = 0;
};

// Per-core state (CoreContext::hazards).
struct HazardState {
    std::vector<VectorOp> current;         // vector instructions since the last ordering point
    std::vector<VectorOp> beforeBarrier;   // those between the two ordering points before the open barrier
    bool barrierOpen = false;              // the last ordering point was a PipeBarrier whose use is not decided
    bool barrierUsed = false;              // ... and an instruction after it conflicts with one before it
    Site barrierSite;                      // ... and where the kernel calls it
    std::vector<VectorOp> unsyncedForScalar;     // vector instructions no WaitFlag<V_S> has waited for
    std::vector<ScalarWrite> unsyncedForVector;  // SetValue writes no WaitFlag<S_V> has waited for
    std::array<std::deque<uint64_t>, 8> vsSets, svSets;  // per event id: the sequence number at each SetFlag
    uint64_t seq = 0;
};

// Checks one operand access of the vector instruction `op` being issued (fails on a hazard) and adds it to op.
void VectorAccess(VectorOp& op, bool write, Ranges bytes);
// The instruction's operands are all checked: it joins the windows.
void CommitVectorOp(VectorOp&& op);
// A scalar GetValue (write = false) or SetValue of UB bytes [lo, hi).
void ScalarAccess(const std::string& api, Site site, bool write, uint32_t lo, uint32_t hi);
// PipeBarrier<pipe> (pipe_t as int: the model's sync.h), SetFlag / WaitFlag of the V_S and S_V events, the end
// of a core's program.
void PipeBarrierAt(int pipe, Site site);
void VectorScalarSet(bool vToS, int32_t id);
void VectorScalarWait(bool vToS, int32_t id);
void FinishHazards();
// The TQue events: the sequence number of the next vector instruction, and an ordering point for every
// vector instruction before `seq`.
uint64_t NextVectorSeq();
void OrderVectorBefore(uint64_t seq);

}  // namespace ascendc_model
