// pasa_npu._npu_host_model: the unchanged AscendC kernel pasa_fused_attention, compiled against the
// host functional model (host_model/), launched from Python on CPU arrays.
//
// What a CANN op launch does, done here on host memory: the tiling (pasa::ComputeTiling, the same
// code the op's tiling function calls) gives the tiling data, the tiling key, the block dim and the
// user workspace size; every GM tensor gets its own buffer, aligned like device memory; the kernel
// runs through ascendc_model::LaunchMix on blockDim AIC threads (its AIC build) and 2*blockDim AIV
// threads (its AIV build), under the schedule mode the tiling chose.
//
// Faults the model cannot see are caught here: each GM buffer sits between guard zones filled with
// 0xFF (an FP16/FP32 NaN pattern) that must be unchanged after the run (a write outside a tensor),
// the inputs must be unchanged (a write into an input), and the outputs and the workspace start as
// NaN bytes, so an output element the kernel never writes, or workspace read before it is written
// (device workspace is not zeroed), shows up as NaN instead of a plausible zero.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "host_model/error.h"
#include "host_model/launch.h"
#include "pasa_tiling.h"

// The kernel entry (op_kernel/pasa_fused_attention.cpp), compiled once per core type as CANN does
// (ascendc_model_add_kernel: the AIC build is pasa_fused_attention_aic, the AIV build _aiv); GM_ADDR is
// uint8_t* in the host model.
#define PASA_KERNEL_ENTRY(name)                                                                           \
    extern "C" void name(uint8_t* query, uint8_t* key, uint8_t* value, uint8_t* attenMask,               \
                         uint8_t* actualSeqLengths, uint8_t* actualSeqLengthsKv, uint8_t* blockTable,   \
                         uint8_t* learnableSink, uint8_t* attentionOut, uint8_t* softmaxLse,            \
                         uint8_t* workspace, uint8_t* tiling)
PASA_KERNEL_ENTRY(pasa_fused_attention_aic);
PASA_KERNEL_ENTRY(pasa_fused_attention_aiv);
#undef PASA_KERNEL_ENTRY

namespace py = pybind11;

namespace {

constexpr size_t kGmAlign = 512;    // device allocations (aclrtMalloc) are at least this aligned
constexpr size_t kGuardBytes = 4096;
constexpr uint8_t kFill = 0xFF;     // NaN in FP16 and FP32, -1 in integers

// One GM tensor: [guard | payload | guard] in a kGmAlign-aligned host allocation.
class GmBuffer {
public:
    GmBuffer(std::string name, size_t bytes, const void* init = nullptr)
        : name_(std::move(name)), bytes_(bytes), total_(bytes + 2 * kGuardBytes),
          mem_(static_cast<uint8_t*>(std::aligned_alloc(kGmAlign, RoundUp(total_))), &std::free) {
        if (!mem_) throw std::bad_alloc();
        std::memset(mem_.get(), kFill, total_);
        if (init != nullptr && bytes_ > 0) std::memcpy(data(), init, bytes_);
    }
    uint8_t* data() const { return mem_.get() + kGuardBytes; }
    size_t bytes() const { return bytes_; }

    // Throws if anything outside the payload changed (a write past either end of the tensor).
    void CheckGuards() const {
        for (size_t i = 0; i < kGuardBytes; ++i) {
            if (mem_.get()[i] != kFill) Fault("before its start", kGuardBytes - i);
            if (data()[bytes_ + i] != kFill) Fault("past its end", i);
        }
    }
    // Throws if the payload differs from `expected` (the kernel wrote into an input).
    void CheckUnchanged(const void* expected) const {
        if (bytes_ > 0 && std::memcmp(data(), expected, bytes_) != 0)
            throw std::runtime_error("host model: pasa_fused_attention wrote into its input '" + name_ + "'");
    }

private:
    static size_t RoundUp(size_t n) { return (n + kGmAlign - 1) / kGmAlign * kGmAlign; }
    [[noreturn]] void Fault(const char* where, size_t offset) const {
        throw std::runtime_error("host model: pasa_fused_attention wrote outside GM tensor '" + name_ + "' (" +
                                 std::to_string(bytes_) + " bytes), " + std::to_string(offset) +
                                 " bytes " + where);
    }
    std::string name_;
    size_t bytes_, total_;
    std::unique_ptr<uint8_t, decltype(&std::free)> mem_;
};

std::vector<int64_t> ShapeOf(const py::array& a) {
    return std::vector<int64_t>(a.shape(), a.shape() + a.ndim());
}

// Checks a C-contiguous array of the given numpy dtype (the Python wrapper prepares them).
void CheckArray(const char* name, const py::array& a, const char* dtype) {
    if (!a.dtype().is(py::dtype(dtype)))
        throw py::type_error(std::string(name) + " must be a " + dtype + " array, got " +
                             py::str(a.dtype()).cast<std::string>());
    if (!(a.flags() & py::array::c_style))
        throw py::value_error(std::string(name) + " must be C-contiguous");
}

// The arguments of one call: the arrays (held, so that their memory outlives the launch) and the
// tiling input built from them.
struct Call {
    py::array query, key, value;
    std::optional<py::array> mask, actualSeqQ, actualSeqKv, blockTable, sink;
    pasa::TilingInput in;
};

std::vector<int64_t> Lengths(const char* name, const std::optional<py::array>& a) {
    if (!a) return {};
    CheckArray(name, *a, "int64");
    if (a->ndim() != 1) throw py::value_error(std::string(name) + " must be 1-D");
    const auto* p = static_cast<const int64_t*>(a->data());
    return std::vector<int64_t>(p, p + a->shape(0));
}

Call MakeCall(py::array query, py::array key, py::array value, std::optional<py::array> mask,
              std::optional<py::array> actualSeqQ, std::optional<py::array> actualSeqKv,
              std::optional<py::array> blockTable, std::optional<py::array> sink, const std::string& inputLayout,
              int64_t numHeads,
              int64_t numKeyValueHeads, double scale, double beta, int64_t sparseMode, int64_t preTokens,
              int64_t nextTokens, const std::string& precision, int64_t blockSize) {
    CheckArray("query", query, "float16");
    CheckArray("key", key, "float16");
    CheckArray("value", value, "float16");
    Call c{query, key, value, mask, actualSeqQ, actualSeqKv, blockTable, sink, {}};
    pasa::TilingInput& in = c.in;
    in.queryShape = ShapeOf(query);
    in.keyShape = ShapeOf(key);
    in.valueShape = ShapeOf(value);
    in.inputLayout = inputLayout;
    in.numHeads = numHeads;
    in.numKeyValueHeads = numKeyValueHeads;
    in.scale = scale;
    in.beta = beta;
    in.sparseMode = sparseMode;
    in.preTokens = preTokens;
    in.nextTokens = nextTokens;
    if (mask) {
        CheckArray("atten_mask", *mask, "uint8");
        if (mask->ndim() != 4) throw py::value_error("atten_mask must be normalised to 4-D (1|B, 1|N, MS1, MS2)");
        in.maskShape = ShapeOf(*mask);
    }
    in.actualSeqLengths = Lengths("actual_seq_lengths", actualSeqQ);
    in.actualSeqLengthsKv = Lengths("actual_seq_lengths_kv", actualSeqKv);
    if (blockTable) {
        CheckArray("block_table", *blockTable, "int32");
        in.blockTableShape = ShapeOf(*blockTable);
    }
    if (sink) {
        CheckArray("learnable_sink", *sink, "float32");
        in.learnableSinkShape = ShapeOf(*sink);
    }
    in.blockSize = blockSize;
    in.precision = precision;
    return c;
}

pasa::TilingResult Tiling(const pasa::TilingInput& in) {
    try {
        return pasa::ComputeTiling(in);
    } catch (const std::invalid_argument& e) {
        throw py::value_error(std::string("pasa::ComputeTiling: ") + e.what());
    }
}

// PageAttention: the table entries the kernel will read must name pages of the caches (the launch
// would read outside key/value otherwise). The tiling has already checked the table's shape.
void CheckTable(const Call& c, const PasaTilingData& t) {
    if (!c.blockTable) return;
    try {
        pasa::CheckBlockTable(t, static_cast<const int32_t*>(c.blockTable->data()), c.in.actualSeqLengthsKv,
                              c.in.keyShape[0]);
    } catch (const std::invalid_argument& e) {
        throw py::value_error(e.what());
    }
}

py::dict TilingDict(const pasa::TilingResult& r) {
    py::dict d;
    d["tiling_key"] = r.tilingKey;
    d["block_dim"] = r.blockDim;
    d["workspace_bytes"] = r.workspaceBytes;
    const PasaTilingData& t = r.data;
#define PASA_FIELD(f) d[#f] = t.f;
    PASA_FIELD(batch) PASA_FIELD(numHeads) PASA_FIELD(numKvHeads) PASA_FIELD(groupSize) PASA_FIELD(seqQ)
    PASA_FIELD(seqKv) PASA_FIELD(headDim) PASA_FIELD(layout) PASA_FIELD(qBatchStride) PASA_FIELD(qHeadStride)
    PASA_FIELD(qRowStride) PASA_FIELD(kvBatchStride) PASA_FIELD(kvHeadStride) PASA_FIELD(kvRowStride)
    PASA_FIELD(scale) PASA_FIELD(beta) PASA_FIELD(invariance) PASA_FIELD(shiftDiag) PASA_FIELD(shiftOff)
    PASA_FIELD(precision) PASA_FIELD(blockQ) PASA_FIELD(blockKv) PASA_FIELD(numQBlocks) PASA_FIELD(numKvBlocks)
    PASA_FIELD(baseK) PASA_FIELD(kvStack) PASA_FIELD(preLaunch) PASA_FIELD(sparseMode) PASA_FIELD(hasMask)
    PASA_FIELD(bandMode) PASA_FIELD(preTokens)
    PASA_FIELD(nextTokens) PASA_FIELD(maskBatch) PASA_FIELD(maskHeads) PASA_FIELD(maskBatchStride)
    PASA_FIELD(maskHeadStride) PASA_FIELD(maskRowStride) PASA_FIELD(hasActualSeqQ) PASA_FIELD(hasActualSeqKv)
    PASA_FIELD(queryTokens)
    PASA_FIELD(hasSink)
    PASA_FIELD(hasBlockTable) PASA_FIELD(pageSize) PASA_FIELD(maxBlocksPerSeq) PASA_FIELD(kvPageStride)
    PASA_FIELD(blockDim) PASA_FIELD(packedHeads) PASA_FIELD(kvSplits) PASA_FIELD(kvBlocksPerSplit) PASA_FIELD(totalTasks)
    PASA_FIELD(tasksPerCore) PASA_FIELD(prepassItems) PASA_FIELD(prepassPerCore) PASA_FIELD(combineRowsPerAiv)
    PASA_FIELD(wsStatusOffset) PASA_FIELD(wsKShiftOffset) PASA_FIELD(wsCoreOffset) PASA_FIELD(wsCoreStride)
    PASA_FIELD(wsScoreSlot) PASA_FIELD(wsProbSlot) PASA_FIELD(wsPvSlot) PASA_FIELD(wsPartialOffset)
    PASA_FIELD(wsPartialLseOffset) PASA_FIELD(workspaceBytes) PASA_FIELD(ubBytes) PASA_FIELD(l1Bytes)
    PASA_FIELD(l0aBytes) PASA_FIELD(l0bBytes) PASA_FIELD(l0cBytes)
    PASA_FIELD(kShiftCols) PASA_FIELD(rsScalePow2) PASA_FIELD(rsRho) PASA_FIELD(rsRelevance) PASA_FIELD(rsReshiftAt)
    PASA_FIELD(wsKSumOffset) PASA_FIELD(wsCentreOffset) PASA_FIELD(wsQhatSlot) PASA_FIELD(wsShiftColSlot)
    PASA_FIELD(wsCentreProdSlot) PASA_FIELD(wsScore32Slot) PASA_FIELD(wsRequestSlot) PASA_FIELD(frameDropLimit)
    PASA_FIELD(wsFinalSegmentSlot) PASA_FIELD(wsVerdictSlot)
#undef PASA_FIELD
    return d;
}

std::unique_ptr<GmBuffer> OptionalInput(const char* name, const std::optional<py::array>& a) {
    if (!a) return nullptr;
    return std::make_unique<GmBuffer>(name, a->nbytes(), a->data());
}

// The kernel's overflow report: each AIV writes one uint32 status word at pasa::StatusWordOffset,
// bit 0 set when a valid row of its saw an Inf in S'. Returns the OR of bit 0, and throws if a word
// is neither 0 nor 1 (e.g. still the workspace's fill pattern: an AIV that never wrote its status).
bool OverflowStatus(const GmBuffer& ws, const PasaTilingData& t, uint32_t blockDim) {
    bool overflow = false;
    for (uint32_t aiv = 0; aiv < 2 * blockDim; ++aiv) {
        uint32_t word;
        std::memcpy(&word, ws.data() + pasa::StatusWordOffset(t, aiv), sizeof(word));
        if (word > 1)
            throw std::runtime_error("host model: AIV " + std::to_string(aiv) + " left status word " +
                                     std::to_string(word) + " (expected 0 or 1) at wsStatusOffset");
        overflow |= (word & 1u) != 0;
    }
    return overflow;
}

// One core's counters of the cost model (host_model/include/host_model/cost.h) as a dict.
py::dict CountersDict(const ascendc_model::CoreCounters& k) {
    py::dict d;
    d["mmad_calls"] = k.mmadCalls;
    d["cube_fractals"] = k.cubeFractals;
    d["cube_macs"] = k.cubeMacs;
    d["load_data_calls"] = k.loadDataCalls;
    d["l0a_bytes"] = k.l0aBytes;
    d["l0b_bytes"] = k.l0bBytes;
    d["mte2_calls"] = k.mte2Calls;
    d["mte2_bytes"] = k.mte2Bytes;
    d["mte3_calls"] = k.mte3Calls;
    d["mte3_bytes"] = k.mte3Bytes;
    d["fix_calls"] = k.fixCalls;
    d["fix_bytes"] = k.fixBytes;
    d["ub_copy_bytes"] = k.ubCopyBytes;
    py::dict vec;
    for (const auto& [key, v] : k.vector) vec[py::str(key)] = py::make_tuple(v.calls, v.repeats, v.cycles);
    d["vector"] = vec;
    d["scalar_accesses"] = k.scalarAccesses;
    d["cross_core_sets"] = k.crossCoreSets;
    d["cross_core_waits"] = k.crossCoreWaits;
    d["barriers"] = k.barriers;
    py::dict pipeBarriers;
    for (const auto& [pipe, n] : k.pipeBarriers) pipeBarriers[py::str(pipe)] = n;
    d["pipe_barriers"] = pipeBarriers;
    d["idle_vector_barriers"] = k.idleVectorBarriers;
    py::dict sites;
    for (const auto& [site, n] : k.vectorBarrierSites) sites[py::str(site)] = py::make_tuple(n[0], n[1]);
    d["vector_barrier_sites"] = sites;
    py::dict pipes;
    for (int p = 0; p < ascendc_model::kPipes; ++p)
        pipes[ascendc_model::PipeName(static_cast<ascendc_model::Pipe>(p))] = k.pipeCycles[p];
    d["pipe_cycles"] = pipes;
    d["clock_overlap"] = k.clockOverlap;
    d["clock_serial"] = k.clockSerial;
    d["clock_model"] = k.clockModel;
    d["wait_overlap"] = k.waitOverlap;
    d["wait_serial"] = k.waitSerial;
    d["wait_model"] = k.waitModel;
    if (!k.segments.empty()) {
        py::list segments;
        for (const auto& seg : k.segments) {
            py::dict cycles;
            for (int p = 0; p < ascendc_model::kPipes; ++p)
                if (seg[p] != 0) cycles[ascendc_model::PipeName(static_cast<ascendc_model::Pipe>(p))] = seg[p];
            segments.append(cycles);
        }
        d["segments"] = segments;
    }
    return d;
}

ascendc_model::CostTable CostTableFrom(const py::dict& d) {
    ascendc_model::CostTable t;
    const std::pair<const char*, double*> fields[] = {
        {"cube_cycles_per_fractal", &t.cubeCyclesPerFractal}, {"mmad_head_cycles", &t.mmadHeadCycles},
        {"l0a_bytes_per_cycle", &t.l0aBytesPerCycle},         {"l0b_bytes_per_cycle", &t.l0bBytesPerCycle},
        {"gm_bytes_per_cycle", &t.gmBytesPerCycle},           {"dma_head_cycles", &t.dmaHeadCycles},
        {"fix_bytes_per_cycle", &t.fixBytesPerCycle},
        {"vec_head_cycles", &t.vecHeadCycles},                {"vec_repeat_scale", &t.vecRepeatScale},                {"ub_copy_bytes_per_cycle", &t.ubCopyBytesPerCycle},
        {"scalar_cycles_per_access", &t.scalarCyclesPerAccess}, {"flag_latency_cycles", &t.flagLatencyCycles},
        {"barrier_cycles", &t.barrierCycles}, {"dependent_fraction", &t.dependentFraction},
        {"record_segments", &t.recordSegments}};
    size_t used = 0;
    for (const auto& [name, field] : fields)
        if (d.contains(name)) *field = d[name].cast<double>(), ++used;
    if (used != d.size()) throw std::invalid_argument("cost: unknown key (expected the CostTable fields in snake_case)");
    return t;
}

py::tuple Run(const Call& c, const ascendc_model::CostTable* cost = nullptr, py::list* counters = nullptr) {
    const pasa::TilingResult r = Tiling(c.in);
    const PasaTilingData& t = r.data;
    CheckTable(c, t);

    GmBuffer q("query", c.query.nbytes(), c.query.data());
    GmBuffer k("key", c.key.nbytes(), c.key.data());
    GmBuffer v("value", c.value.nbytes(), c.value.data());
    auto mask = OptionalInput("atten_mask", c.mask);
    auto seqQ = OptionalInput("actual_seq_lengths", c.actualSeqQ);
    auto seqKv = OptionalInput("actual_seq_lengths_kv", c.actualSeqKv);
    auto table = OptionalInput("block_table", c.blockTable);
    auto sink = OptionalInput("learnable_sink", c.sink);
    GmBuffer out("attention_out", c.query.nbytes());
    const std::vector<int64_t> lseShape = pasa::LseShape(t);
    size_t lseCount = 1;
    for (int64_t dim : lseShape) lseCount *= size_t(dim);
    GmBuffer lse("softmax_lse", lseCount * sizeof(float));
    GmBuffer ws("workspace", r.workspaceBytes);
    GmBuffer tiling("tiling", sizeof(PasaTilingData), &t);

    auto ptr = [](const std::unique_ptr<GmBuffer>& b) { return b ? b->data() : nullptr; };
    ascendc_model::LaunchConfig cfg;
    cfg.blockDim = r.blockDim;
    cfg.tilingKey = r.tilingKey;
    cfg.scheduleMode = r.scheduleMode;  // what the op's tiling function passes to SetScheduleMode
    std::vector<ascendc_model::CoreCounters> coreCounters;
    cfg.cost = cost;
    cfg.counters = counters ? &coreCounters : nullptr;
    // The model reports a wait that can never be satisfied at once; the timeout only catches a wait
    // that is merely slow, which with 3*blockDim threads on a loaded 2-core CI machine can take a while.
    cfg.flagTimeoutSeconds = 120.0;
    {
        py::gil_scoped_release release;  // the kernel's core threads need no Python
        try {
            ascendc_model::LaunchMix(
                cfg,
                [&] {
                    pasa_fused_attention_aic(q.data(), k.data(), v.data(), ptr(mask), ptr(seqQ), ptr(seqKv),
                                             ptr(table), ptr(sink), out.data(), lse.data(), ws.data(), tiling.data());
                },
                [&] {
                    pasa_fused_attention_aiv(q.data(), k.data(), v.data(), ptr(mask), ptr(seqQ), ptr(seqKv),
                                             ptr(table), ptr(sink), out.data(), lse.data(), ws.data(), tiling.data());
                });
        } catch (const ascendc_model::Error& e) {
            throw std::runtime_error(std::string("host model: pasa_fused_attention failed: ") + e.what());
        }
    }
    for (const GmBuffer* b : {&q, &k, &v, &out, &lse, &ws, &tiling}) b->CheckGuards();
    for (const auto* b : {&mask, &seqQ, &seqKv, &table, &sink})
        if (*b) (*b)->CheckGuards();
    q.CheckUnchanged(c.query.data());
    k.CheckUnchanged(c.key.data());
    v.CheckUnchanged(c.value.data());
    if (mask) mask->CheckUnchanged(c.mask->data());
    if (table) table->CheckUnchanged(c.blockTable->data());
    if (sink) sink->CheckUnchanged(c.sink->data());

    py::array outArr(py::dtype("float16"), ShapeOf(c.query));
    std::memcpy(outArr.mutable_data(), out.data(), out.bytes());
    py::array_t<float> lseArr(lseShape);
    std::memcpy(lseArr.mutable_data(), lse.data(), lse.bytes());
    if (counters) {
        // Status words 1 and 2 (the epilogue's, pasa_vector_stage.h), named as the golden model's counters:
        // fp32_frame's moved rows and closed tiles, else pasa_rs's reshifted and recomputed rows (0 for the others).
        const bool framed = pasa::FindAllocation(c.in.precision).sumsOnCube;
        const char* word1 = framed ? "moved_row_blocks" : "reshifted_row_blocks";
        const char* word2 = framed ? "moved_tile_blocks" : "recomputed_row_blocks";
        for (size_t i = 0; i < coreCounters.size(); ++i) {
            py::dict d = CountersDict(coreCounters[i]);
            d["kv_stack"] = t.kvStack;  // the handshake the launch ran (a pinned one where it fitted)
            d["pre_launch"] = t.preLaunch;
            if (i >= r.blockDim) {  // an AIV
                uint32_t words[3];
                std::memcpy(words, ws.data() + pasa::StatusWordOffset(t, uint32_t(i - r.blockDim)), sizeof(words));
                d[word1] = words[1];
                d[word2] = words[2];
            }
            counters->append(d);
        }
    }
    return py::make_tuple(outArr, lseArr, OverflowStatus(ws, t, r.blockDim));
}

// Defines `name` with the common argument list of run() and tiling(); `f` takes the prepared Call.
template <class F>
void DefCall(py::module_& m, const char* name, F f, const char* doc) {
    m.def(
        name,
        [f](py::array q, py::array k, py::array v, std::optional<py::array> mask, std::optional<py::array> sq,
            std::optional<py::array> skv, std::optional<py::array> table, std::optional<py::array> sink,
            const std::string& layout, int64_t n, int64_t nkv, double scale, double beta, int64_t sparse, int64_t pre,
            int64_t next, const std::string& precision, int64_t blockSize) {
            return f(MakeCall(q, k, v, mask, sq, skv, table, sink, layout, n, nkv, scale, beta, sparse, pre, next,
                              precision, blockSize));
        },
        doc, py::arg("query"), py::arg("key"), py::arg("value"), py::arg("atten_mask") = py::none(),
        py::arg("actual_seq_lengths") = py::none(), py::arg("actual_seq_lengths_kv") = py::none(),
        py::arg("block_table") = py::none(), py::arg("learnable_sink") = py::none(), py::kw_only(),
        py::arg("input_layout"), py::arg("num_heads"),
        py::arg("num_key_value_heads"), py::arg("scale"), py::arg("beta"), py::arg("sparse_mode"),
        py::arg("pre_tokens"), py::arg("next_tokens"), py::arg("precision"), py::arg("block_size") = 0);
}

// run() with the cost model: the same arguments and a `cost` dict (the CostTable fields in snake_case).
void DefCount(py::module_& m) {
    m.def(
        "count",
        [](py::array q, py::array k, py::array v, std::optional<py::array> mask, std::optional<py::array> sq,
           std::optional<py::array> skv, std::optional<py::array> blockTable, std::optional<py::array> sink,
           const std::string& layout, int64_t n, int64_t nkv, double scale, double beta, int64_t sparse, int64_t pre,
           int64_t next, const std::string& precision, int64_t blockSize, const py::dict& cost, uint32_t aiCores,
           std::pair<uint32_t, uint32_t> handshake) {
            const ascendc_model::CostTable table = CostTableFrom(cost);
            py::list counters;
            Call call = MakeCall(q, k, v, mask, sq, skv, blockTable, sink, layout, n, nkv, scale, beta, sparse, pre,
                                 next, precision, blockSize);
            if (aiCores > 0) {  // a smaller machine, so a reduced problem keeps the per-core work it is scaled from
                call.in.platform.aicNum = aiCores;
                call.in.platform.aivNum = 2 * aiCores;
            }
            call.in.handshakePin = pasa::HandshakePin{handshake.first, handshake.second};
            py::tuple res = Run(call, &table, &counters);
            return py::make_tuple(res[0], res[1], res[2], counters);
        },
        "run() that also counts what every core issues per pipe and runs the modelled clocks (cost model). "
        "ai_cores > 0 tiles for that many AI cores instead of the A2's 24; handshake (kvStack, preLaunch) with "
        "kvStack > 0 pins the stacked handshake where it fits (the cost model's handshake search). "
        "Returns (attention_out, softmax_lse, overflow, counters: one dict per core, AICs first; the AIVs' also "
        "hold pasa_rs's reshifted_row_blocks and recomputed_row_blocks).",
        py::arg("query"), py::arg("key"), py::arg("value"), py::arg("atten_mask") = py::none(),
        py::arg("actual_seq_lengths") = py::none(), py::arg("actual_seq_lengths_kv") = py::none(),
        py::arg("block_table") = py::none(), py::arg("learnable_sink") = py::none(), py::kw_only(),
        py::arg("input_layout"), py::arg("num_heads"), py::arg("num_key_value_heads"), py::arg("scale"),
        py::arg("beta"), py::arg("sparse_mode"), py::arg("pre_tokens"), py::arg("next_tokens"), py::arg("precision"),
        py::arg("block_size") = 0, py::arg("cost"), py::arg("ai_cores") = 0,
        py::arg("handshake") = std::pair<uint32_t, uint32_t>{0, 0});
}

}  // namespace

PYBIND11_MODULE(_npu_host_model, m) {
    m.doc() = "The AscendC kernel pasa_fused_attention on the host functional model (CPU threads, not an NPU). "
              "Use pasa_npu.npu_host_model.run, which checks FIA's arguments and prepares these.";
    DefCall(m, "run", [](const Call& c) { return Run(c); },
            "Launch the kernel: FP16 query/key/value (C-contiguous, the layout's shape; with an int32 block_table "
            "(B, max_blocks_per_seq) and block_size, key/value are the paged caches; float32 learnable_sink (N,)), "
            "uint8 mask (1|B, 1|N, MS1, "
            "MS2) or None, int64 per-batch lengths or None; beta < 0 = the kernel's default. Returns "
            "(attention_out FP16 in query's shape, softmax_lse FP32 (B, N, S1) (TND: (T, N)), overflow: the kernel's "
            "status words report an Inf in S').");
    DefCount(m);
    DefCall(m, "tiling", [](const Call& c) { return TilingDict(Tiling(c.in)); },
            "pasa::ComputeTiling for the same arguments as run(), as a dict (tiling_key, block_dim, "
            "workspace_bytes and every PasaTilingData field).");
    m.def(
        "core_task_ids",
        [](uint32_t blockDim, uint32_t totalTasks, uint32_t tasksPerCore) {
            PasaTilingData t{};
            t.blockDim = blockDim;
            t.totalTasks = totalTasks;
            t.tasksPerCore = tasksPerCore;
            std::vector<std::vector<uint32_t>> cores(blockDim);
            for (uint32_t c = 0; c < blockDim; ++c)
                for (uint32_t k = 0; k < tasksPerCore; ++k) {
                    const uint32_t id = PasaCoreTaskId(t, c, k);
                    if (id == totalTasks) break;
                    cores[c].push_back(id);
                }
            return cores;
        },
        py::arg("block_dim"), py::arg("total_tasks"), py::arg("tasks_per_core"),
        "The task ids each AI core runs, in order (PasaCoreTaskId of op_kernel/pasa_tiling_data.h), for a tiling "
        "with these fields.");
    m.def("default_beta", &pasa::DefaultBeta, py::arg("block_kv"), py::arg("scale"),
          "pasa::DefaultBeta: the C++ port of pasa_npu.beta.default_beta (scale <= 0: no scale).");
    m.def(
        "kernel_allocations",
        [] {
            static const char* prepass[] = {"none", "shift_matrix", "centred_keys"};
            static const char* scale[] = {"on_scores", "in_shift_matrix", "pow2_and_rho"};
            static const char* handshake[] = {"stacked", "per_block_rounds"};
            py::list out;
            for (const pasa::AllocationTraits& a : pasa::KernelAllocations()) {
                py::dict d;
                d["name"] = a.name;
                d["tiling_key"] = a.tilingKey;
                d["state_bytes"] = a.stateBytes;
                d["prepass"] = prepass[static_cast<uint32_t>(a.prepass)];
                d["scale"] = scale[static_cast<uint32_t>(a.scale)];
                d["handshake"] = handshake[static_cast<uint32_t>(a.handshake)];
                d["score_bytes"] = a.scoreBytes;
                d["key_extra_cols"] = a.keyExtraCols;
                d["value_extra_cols"] = a.valueExtraCols;
                d["sums_on_cube"] = a.sumsOnCube;
                d["state_row_vectors"] = a.stateRowVectors;
                d["fp32_row_vectors"] = a.fp32RowVectors;
                out.append(d);
            }
            return out;
        },
        "The allocations the kernel runs (op_kernel/pasa_allocation.h's PASA_KERNEL_ALLOCATIONS), each policy as "
        "a dict, in table order.");
    m.attr("DEFAULT_PRECISION") = pasa::kDefaultPrecision;
    m.attr("RESHIFT_AT") = pasa_kernel::RowShiftedFamily::RESHIFT_AT;
    m.attr("RESHIFT_RELEVANCE") = pasa_kernel::RowShiftedFamily::RESHIFT_RELEVANCE;
    m.attr("FRAME_UP") = pasa_kernel::FramedFamily::FRAME_UP;
    m.attr("FRAME_DOWN") = pasa_kernel::FramedFamily::FRAME_DOWN;
    m.attr("FRAME_DOWN_BLOCKS") = pasa_kernel::FramedFamily::FRAME_DOWN_BLOCKS;
    m.attr("FRAME_DROP_LIMIT") = pasa_kernel::FramedFamily::FRAME_DROP_LIMIT;
}
