// Grid tests of the host tiling (op_host/pasa_tiling.h): every plan fits every on-chip capacity and the
// GM workspace, and the split of the work over the AI cores covers every output row exactly once.
//
//   test_tiling            run every section
//   test_tiling SECTION    one of: grid, decode, platforms, layouts, beta, errors
//
// Each section prints "SECTION: <n> checks passed"; any failure prints "FAIL ..." and the exit code is 1.
// The checks are written from the contract in op_kernel/pasa_tiling_data.h (task ids, strides, workspace
// regions) and recompute every quantity independently instead of trusting the tiling's own fields.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <map>
#include <sstream>
#include <stdexcept>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "pasa_tiling.h"
#include "../../op_kernel/pasa_buffer_plan.h"

namespace {

int g_failures = 0;
long g_checks = 0;
std::string g_case;  // description of the input being checked, printed with a failure

#define CHECK(cond)                                                                                  \
    do {                                                                                             \
        ++g_checks;                                                                                  \
        if (!(cond)) {                                                                               \
            if (++g_failures <= 50)                                                                  \
                std::printf("FAIL %s:%d: %s  [%s]\n", __FILE__, __LINE__, #cond, g_case.c_str());    \
        }                                                                                            \
    } while (0)

uint64_t CeilDiv(uint64_t a, uint64_t b) { return (a + b - 1) / b; }

struct Dims {
    int64_t B, N, NKV, S1, S2, D;
};

// Shapes of query and key for a layout, from (B, N, NKV, S1, S2, D).
void Shapes(const Dims& d, const std::string& layout, pasa::TilingInput* in) {
    if (layout == "BNSD") {
        in->queryShape = {d.B, d.N, d.S1, d.D};
        in->keyShape = {d.B, d.NKV, d.S2, d.D};
    } else if (layout == "BSND") {
        in->queryShape = {d.B, d.S1, d.N, d.D};
        in->keyShape = {d.B, d.S2, d.NKV, d.D};
    } else {  // BSH
        in->queryShape = {d.B, d.S1, d.N * d.D};
        in->keyShape = {d.B, d.S2, d.NKV * d.D};
    }
    in->valueShape = in->keyShape;
}

pasa::TilingInput MakeInput(const Dims& d, const std::string& layout = "BNSD",
                            const std::string& precision = "pasa_fp32") {
    pasa::TilingInput in;
    Shapes(d, layout, &in);
    in.inputLayout = layout;
    in.numHeads = d.N;
    in.numKeyValueHeads = d.NKV == d.N ? 0 : d.NKV;
    in.scale = 1.0 / std::sqrt((double)d.D);
    in.precision = precision;
    return in;
}

std::string Describe(const pasa::TilingInput& in) {
    std::ostringstream os;
    os << in.inputLayout << " q=(";
    for (size_t i = 0; i < in.queryShape.size(); ++i) os << (i ? "," : "") << in.queryShape[i];
    os << ") k=(";
    for (size_t i = 0; i < in.keyShape.size(); ++i) os << (i ? "," : "") << in.keyShape[i];
    os << ") N=" << in.numHeads << " Nkv=" << in.numKeyValueHeads << " " << in.precision
       << " aic=" << in.platform.aicNum << " ub=" << in.platform.ubSize;
    return os.str();
}

// Half-open [lo, hi) intervals tile [0, n) exactly once.
bool TilesExactly(std::vector<std::pair<uint64_t, uint64_t>> iv, uint64_t n) {
    std::sort(iv.begin(), iv.end());
    uint64_t at = 0;
    for (const auto& r : iv) {
        if (r.first != at || r.second <= r.first) return false;
        at = r.second;
    }
    return at == n;
}

bool IsFp16Exact(double x) { return (double)(_Float16)x == x; }

// Every property of one plan. `d` holds the true dims, independent of how the tiling reads the shapes.
void CheckPlan(const pasa::TilingInput& in, const Dims& d) {
    g_case = Describe(in);
    pasa::TilingResult r;
    try {
        r = pasa::ComputeTiling(in);
    } catch (const std::exception& e) {
        g_case += std::string(" threw: ") + e.what();
        CHECK(!"ComputeTiling threw on a valid input");
        return;
    }
    const PasaTilingData& t = r.data;
    const pasa::PlatformInfo& pl = in.platform;
    // The allocation's policy (op_kernel/pasa_allocation.h; tests/npu/test_npu_backend.py holds it equal to
    // python/pasa_npu/precision.py's state type and shift).
    const pasa::AllocationTraits& alloc = pasa::FindAllocation(in.precision);
    const bool fp32 = alloc.stateBytes == 4;                                  // FP32 row state, O and PV
    const bool rowShifted = alloc.prepass == pasa_kernel::Prepass::CENTRED_KEYS;  // pasa_rs: the key pre-pass,
                                                                              // K' one strip wider
    const bool shifted = alloc.prepass == pasa_kernel::Prepass::SHIFT_MATRIX;  // PASA: K' = M K and M
    const bool framed = alloc.sumsOnCube;  // fp32_frame: FP32 S, O and l summed on the cube from [V | 1]
    CHECK(framed == (alloc.valueExtraCols == 16) && (alloc.scoreBytes == 4) == framed);

    // ---- shapes, key, launch ------------------------------------------------------------------
    CHECK(t.batch == d.B && t.numHeads == d.N && t.numKvHeads == d.NKV && t.groupSize * d.NKV == d.N);
    CHECK(t.seqQ == d.S1 && t.seqKv == d.S2 && t.headDim == d.D);
    // the allocation's key (tests/npu/test_npu_backend.py checks the keys against python/pasa_npu/precision.py)
    CHECK(r.tilingKey == pasa::FindAllocation(in.precision).tilingKey);
    CHECK(t.precision == r.tilingKey);
    CHECK(r.blockDim == t.blockDim && r.blockDim >= 1 && r.blockDim <= pl.aicNum);
    CHECK(r.workspaceBytes == t.workspaceBytes);

    // ---- blocks -------------------------------------------------------------------------------
    CHECK(t.blockKv == 128);  // the n of M = (I - beta/n J) * scale the beta solver assumes
    CHECK(t.blockQ >= 16 && t.blockQ % 16 == 0 && t.blockQ <= alloc.maxBlockQ);
    // fp32_frame takes the most query rows of 256, 128, 96, 64, ... whose accumulator [O | l] (FP32, D + 16 columns)
    // fits L0C beside an S chunk of 16 rows, and whose Q (FP16) L0A holds beside a piece of P of 16 rows; more than 64
    // only where L0C also holds two S chunks of 32 rows, or the whole S tile, or (K wider than an L0B half, D > 128)
    // a tile of all the rows over 16 keys, or the tile in two halves through one buffer, beside it, and more than 128
    // only where that makes fewer query blocks than 128 would: on the A2's memories 256 up to D = 80, 128 from D = 96
    // to 160, 96 from 176 to 256 (where the AIVs' UB takes fewer than 64 rows each; at 256 S in tiles of all 96 rows
    // over 64 keys). The others take at most 128, and never 96.
    CHECK(t.blockQ <= 128 || (framed && t.blockQ == 256));
    CHECK(t.blockQ != 96 || framed);
    if (framed) {
        const uint64_t headRows = (uint64_t)d.S1 * (d.S1 == 1 && d.N > d.NKV ? d.N / d.NKV : 1);
        uint32_t rows = 0;
        for (uint32_t bq : {256u, 128u, 96u, 64u, 32u, 16u}) {
            const uint64_t acc = (uint64_t)bq * (d.D + 16) * 4, tile = (uint64_t)bq * t.blockKv * 4;
            const uint64_t half = (bq / 2 + 15) / 16 * 16;
            const bool queryHeld = (uint64_t)bq * d.D * 2 + 16ull * t.blockKv * 2 <= 64 * 1024;
            const bool largeChunks = acc + 2ull * 32 * t.blockKv * 4 <= pl.l0cSize || acc + tile <= pl.l0cSize ||
                                     (d.D > 128 && acc + (uint64_t)bq * 16 * 4 <= pl.l0cSize) ||
                                     acc + half * t.blockKv * 4 <= pl.l0cSize;
            if (rows == 0 && queryHeld && acc + 16ull * t.blockKv * 4 <= pl.l0cSize && (bq <= 64 || largeChunks) &&
                (bq <= 128 || CeilDiv(headRows, bq) < CeilDiv(headRows, 128)))
                rows = bq;
        }
        CHECK(t.blockQ <= rows);
        // beyond D = 160 the AIVs' UB (their rows of O in FP32) takes fewer rows than L0C would
        if (pl.ubSize >= 192 * 1024 && pl.l1Size >= 512 * 1024) {
            if (d.D <= 144) CHECK(t.blockQ == rows);
            if (d.D <= 80 && headRows > 128) CHECK(t.blockQ == 256);
            if (d.D >= 96 && d.D <= 144 && headRows > 64) CHECK(t.blockQ == 128);
            if (d.D <= 144 && headRows <= 128) CHECK(t.blockQ == 128);
            if (d.D >= 176 && d.D <= 240 && headRows > 64) CHECK(t.blockQ == 96);
            if (d.D == 256 && headRows > 64) CHECK(t.blockQ == 96);
        }
    }
    // decode with GQA: a task's rows are its KV head's group of query heads
    const uint32_t packedHeads = d.S1 == 1 && d.N > d.NKV ? d.N / d.NKV : 1;
    CHECK(t.packedHeads == packedHeads);
    CHECK(t.numQBlocks == CeilDiv(d.S1 * packedHeads, t.blockQ));
    CHECK(t.numKvBlocks == CeilDiv(d.S2, t.blockKv));
    CHECK(t.kShiftCols == d.D + (rowShifted ? 16 : 0));
    CHECK(t.baseK >= 16 && t.baseK % 16 == 0 && t.baseK <= t.kShiftCols);
    // pasa_rs: psi is subtracted in the same Mmad call as Q^ K'^T wherever the augmented column fits
    if (rowShifted && t.kShiftCols <= 128 && t.blockQ <= 128) CHECK(t.baseK == t.kShiftCols);

    // ---- the AIC <-> AIV handshake: stacks of at most 2 KV blocks (ramped at a task's ends), no longer than a
    // task's blocks, S' at most 3 stacks ahead, the slot rings within MAX_SLOT_RING; pasa_rs single blocks one
    // ahead (its AIC hears every block's verdict before P V) ----------------------------------------------------
    if (rowShifted) {
        CHECK(t.kvStack == 1 && t.preLaunch == 1);
    } else {
        CHECK(t.kvStack >= 1 && t.kvStack <= std::min<uint32_t>(2, t.kvBlocksPerSplit));
        // UB holds the first handshake of the list (2 blocks, 3 ahead) beside every query block of head dims up to
        // 128 (the handshake shortens before the query block does)
        if (d.D <= 128) CHECK(t.kvStack == std::min<uint32_t>(2, t.kvBlocksPerSplit));
        CHECK(t.preLaunch >= 1 && t.preLaunch <= 3);
        // no more stacks ahead than a task can have after its first
        const uint32_t stacks = PasaStacks(t, t.kvBlocksPerSplit);
        CHECK(t.preLaunch == std::max<uint32_t>(1, std::min<uint32_t>(d.D <= 128 ? 3 : t.preLaunch, stacks - 1)));
        CHECK(PasaSlotRing(t) <= pasa_kernel::MAX_SLOT_RING);
    }
    CHECK(PasaSlotRing(t) == (t.preLaunch + 1) * t.kvStack);

    // ---- on-chip capacities -------------------------------------------------------------------
    // UB and L1 as TPipe offers them: less the vector APIs' scratch (TMP_UB_OFFSET = 184 KB on A2) and the
    // mixed kernel's 256 B (see pasa_tiling.h).
    CHECK(t.ubBytes <= pl.ubSize - pasa::kUbReservedBytes);
    CHECK(t.l1Bytes <= pl.l1Size - pasa::kL1ReservedBytes);
    CHECK(r.scheduleMode == pasa::kScheduleModeBatch);
    CHECK(t.l0aBytes <= pl.l0aSize);
    CHECK(t.l0bBytes <= pl.l0bSize);
    CHECK(t.l0cBytes <= pl.l0cSize);
    // What the plan must at least hold (a plan that under-counts would "fit" trivially): L1 keeps a
    // Q block and double-buffered K and V blocks in FP16; one L0A/L0B ping-pong half holds a
    // (rows x baseK) FP16 operand chunk, or, where the cube sums O and l, L0A holds the task's Q (FP16) beside a
    // piece of P of 16 rows; one L0C half holds an FP32 S' tile and an FP32 PV tile, or, where the cube sums O and
    // l, L0C holds the segment's FP32 accumulator [O | l] beside at least one FP32 S chunk of 16 rows.
    const uint64_t l1Min = (uint64_t)t.blockQ * d.D * 2 + 2ull * t.blockKv * d.D * 2 * 2;
    CHECK(t.l1Bytes >= l1Min);
    const uint64_t rowsMax = std::max(t.blockQ, t.blockKv);
    if (framed) {
        CHECK((uint64_t)t.blockQ * d.D * 2 + 16ull * t.blockKv * 2 <= t.l0aBytes);
        CHECK((uint64_t)t.blockQ * (d.D + 16) * 4 + 16ull * t.blockKv * 4 <= t.l0cBytes);
    } else {
        CHECK(2ull * rowsMax * t.baseK * 2 <= t.l0aBytes && 2ull * rowsMax * t.baseK * 2 <= t.l0bBytes);
        CHECK(2ull * t.blockQ * std::max<uint64_t>(t.blockKv, d.D) * 4 <= t.l0cBytes);
    }
    // UB per AIV: at least the double-buffered S' tile (FP16) of its half of the rows and its O rows
    // in the state type.
    const uint64_t aivRows = t.blockQ / 2, st = fp32 ? 4 : 2;
    CHECK(t.ubBytes >= 2 * aivRows * t.blockKv * 2 + aivRows * d.D * st);

    // ---- strides: the element offset formula of pasa_tiling_data.h is the layout's ----------------
    // Corners of (b, head, row) for a tensor of `heads` heads and `rows` rows with the given strides.
    auto checkStrides = [&](int64_t heads, int64_t rows, uint64_t bStride, uint64_t hStride, uint64_t sStride) {
        for (int64_t b : {int64_t(0), d.B - 1})
            for (int64_t h : {int64_t(0), heads - 1})
                for (int64_t s : {int64_t(0), rows - 1}) {
                    uint64_t want = in.inputLayout == "BNSD" ? ((b * heads + h) * rows + s) * d.D
                                                              : ((b * rows + s) * heads + h) * d.D;
                    CHECK(b * bStride + h * hStride + s * sStride == want);
                }
    };
    checkStrides(d.N, d.S1, t.qBatchStride, t.qHeadStride, t.qRowStride);
    checkStrides(d.NKV, d.S2, t.kvBatchStride, t.kvHeadStride, t.kvRowStride);

    // ---- work split: every (b, n, row) exactly once per KV split, KV splits partition the blocks ----
    const uint64_t baseTasks = (uint64_t)d.B * (d.N / packedHeads) * t.numQBlocks;
    CHECK(t.kvSplits >= 1 && t.totalTasks == baseTasks * t.kvSplits);
    CHECK(t.kvSplits == 1 || d.S1 == 1);  // split-KV only for decode
    CHECK(t.kvSplits <= 64);               // the combine reduces a row's split lse values in one 64-lane repeat
    std::map<std::tuple<uint32_t, uint32_t, uint32_t>, std::vector<std::pair<uint64_t, uint64_t>>> rows;
    std::map<std::tuple<uint32_t, uint32_t, uint32_t>, std::pair<uint32_t, uint32_t>> kvRange;
    uint64_t tasksSeen = 0;
    for (uint32_t c = 0; c < t.blockDim; ++c) {
        auto tasks = pasa::CoreTasks(t, c);
        CHECK(!tasks.empty());  // blockDim counts only cores with work
        for (const auto& ti : tasks) {
            ++tasksSeen;
            CHECK(ti.b < d.B && ti.n + ti.heads <= d.N && ti.split < t.kvSplits && ti.rows >= 1 && ti.heads >= 1);
            CHECK(ti.row0 % t.blockQ == 0 && ti.rows * ti.heads <= t.blockQ && ti.row0 + ti.rows <= d.S1);
            CHECK(ti.heads == 1 || (ti.rows == 1 && ti.n / t.groupSize == (ti.n + ti.heads - 1) / t.groupSize));
            CHECK(ti.kvBlock0 < ti.kvBlockEnd && ti.kvBlockEnd <= t.numKvBlocks);
            for (uint32_t h = ti.n; h < ti.n + ti.heads; ++h) {
                rows[{ti.b, h, ti.split}].push_back({ti.row0, (uint64_t)ti.row0 + ti.rows});
                auto key = std::make_tuple(ti.b, h, ti.split);
                auto it = kvRange.find(key);
                if (it == kvRange.end()) kvRange[key] = {ti.kvBlock0, ti.kvBlockEnd};
                else CHECK(it->second == std::make_pair(ti.kvBlock0, ti.kvBlockEnd));
            }
        }
    }
    CHECK(pasa::CoreTasks(t, t.blockDim).empty());  // no work beyond blockDim
    CHECK(tasksSeen == t.totalTasks);
    CHECK(rows.size() == (uint64_t)d.B * d.N * t.kvSplits);
    for (auto& kv : rows) CHECK(TilesExactly(kv.second, d.S1));
    for (int64_t b = 0; b < d.B; ++b)
        for (int64_t n = 0; n < d.N; ++n) {
            std::vector<std::pair<uint64_t, uint64_t>> kvb;
            for (uint32_t s = 0; s < t.kvSplits; ++s) {
                auto it = kvRange.find({(uint32_t)b, (uint32_t)n, s});
                if (it != kvRange.end()) kvb.push_back(it->second);
            }
            CHECK(kvb.size() == t.kvSplits && TilesExactly(kvb, t.numKvBlocks));
        }

    // Decode: the combine step of the split-KV partials covers every row exactly once.
    const uint64_t rowsAll = (uint64_t)d.B * d.N * d.S1;
    if (t.kvSplits > 1) {
        std::vector<std::pair<uint64_t, uint64_t>> comb;
        for (uint32_t w = 0; w < 2 * t.blockDim; ++w) {
            uint64_t f, l;
            pasa::CombineRows(t, w, &f, &l);
            CHECK(f <= l && l <= rowsAll);
            if (l > f) comb.push_back({f, l});
        }
        CHECK(TilesExactly(comb, rowsAll));
        uint64_t f, l;
        pasa::CombineRows(t, 2 * t.blockDim, &f, &l);
        CHECK(f == l);
    }

    // K' pre-pass: items (b, h, j) split over the cores (none for FlashAttention).
    CHECK(t.prepassItems == (shifted || rowShifted ? (uint64_t)d.B * d.NKV * t.numKvBlocks : 0));
    CHECK((uint64_t)t.prepassPerCore * t.blockDim >= t.prepassItems);

    // ---- GM workspace: regions in order, large enough, aligned, inside workspaceBytes ------------
    const uint64_t kshift =
        shifted || rowShifted ? (uint64_t)d.B * d.NKV * t.numKvBlocks * t.blockKv * t.kShiftCols * 2 : 0;
    // the S', P and PV rings: (preLaunch + 1) * kvStack block slots each; S in the score type; where the cube
    // sums O and l, a PV slot holds a closed segment [O | l] (FP32, D + 16 columns), and M's slot the n x 16
    // strip of ones that V's tiles append
    const uint64_t scoreSlot = (uint64_t)t.blockQ * t.blockKv * alloc.scoreBytes;
    const uint64_t pvSlot = (uint64_t)t.blockQ * (d.D + (framed ? 16 : 0)) * st;
    const uint64_t slotMin = (uint64_t)(t.preLaunch + 1) * t.kvStack *
                             (scoreSlot + (uint64_t)t.blockQ * t.blockKv * 2 + pvSlot);
    CHECK(t.wsScoreSlot >= scoreSlot);
    CHECK(t.wsProbSlot >= (uint64_t)t.blockQ * t.blockKv * 2);
    CHECK(t.wsPvSlot >= pvSlot);
    for (uint64_t off : {t.wsStatusOffset, t.wsKShiftOffset, t.wsCoreOffset, t.wsCoreStride,
                         t.wsPartialOffset, t.wsPartialLseOffset, t.workspaceBytes})
        CHECK(off % 32 == 0);
    CHECK(t.wsStatusOffset + 2ull * t.blockDim * 32 <= t.wsKShiftOffset);
    CHECK(t.wsKShiftOffset + kshift <= t.wsKSumOffset);
    if (rowShifted) {
        // the column sums, u and K^; per core, after the S'/P/PV slots and L: Q^, the shift column, the
        // centre products of a whole split, S' in FP32 and the four 64-byte request words, in that order
        CHECK(t.wsKSumOffset + (uint64_t)t.prepassItems * d.D * 4 <= t.wsCentreOffset);
        CHECK(t.wsCentreOffset + (uint64_t)d.B * d.NKV * 2 * t.numKvBlocks * d.D * 2 <= t.wsCoreOffset);
        const uint64_t fixed = slotMin + (uint64_t)t.blockKv * t.blockKv * 2;
        CHECK(fixed <= t.wsQhatSlot);
        CHECK(t.wsQhatSlot + (uint64_t)t.blockQ * d.D * 2 <= t.wsShiftColSlot);
        CHECK(t.wsShiftColSlot + 2ull * t.blockQ * 16 * 2 <= t.wsCentreProdSlot);
        CHECK(t.wsCentreProdSlot + 2ull * t.kvBlocksPerSplit * t.blockQ * 4 <= t.wsScore32Slot);
        CHECK(t.wsScore32Slot + (uint64_t)t.blockQ * t.blockKv * 4 <= t.wsRequestSlot);
        CHECK(t.wsRequestSlot + 4 * 64 <= t.wsCoreStride);
        for (uint64_t off : {t.wsKSumOffset, t.wsCentreOffset, t.wsQhatSlot, t.wsShiftColSlot, t.wsCentreProdSlot,
                             t.wsScore32Slot, t.wsRequestSlot})
            CHECK(off % 64 == 0);  // DMA-friendly, and a request word starts a data-cache line
    } else {
        CHECK(t.wsKSumOffset <= t.wsCoreOffset && t.wsCentreOffset == t.wsKSumOffset);
    }
    if (framed) {
        // per core, after the slots and the strip of ones: the task's last segment [O | l], then the ring of
        // the AIVs' close verdicts, a 64-byte line per stack (a 32-byte word per AIV), 2 preLaunch + 2 stacks deep
        const uint64_t fixed = slotMin + (uint64_t)t.blockKv * 16 * 2;
        CHECK(fixed <= t.wsFinalSegmentSlot);
        CHECK(t.wsFinalSegmentSlot + pvSlot <= t.wsVerdictSlot);
        CHECK(t.wsVerdictSlot + (2ull * t.preLaunch + 2) * 64 <= t.wsCoreStride);
        CHECK(t.wsFinalSegmentSlot % 64 == 0 && t.wsVerdictSlot % 64 == 0);
    } else {
        CHECK(t.wsFinalSegmentSlot == 0 && t.wsVerdictSlot == 0);
    }
    CHECK(t.wsCoreStride >= slotMin);
    CHECK(t.wsCoreOffset + (uint64_t)t.blockDim * t.wsCoreStride <= t.wsPartialOffset);
    if (t.kvSplits > 1) {
        CHECK(t.wsPartialOffset + rowsAll * t.kvSplits * d.D * 4 <= t.wsPartialLseOffset);
        CHECK(t.wsPartialLseOffset + rowsAll * t.kvSplits * 4 <= t.workspaceBytes);
    } else {
        CHECK(t.wsPartialLseOffset <= t.workspaceBytes);
    }

    // ---- PASA constants (FlashAttention and pasa_rs have none: all 0) ---------------------------
    // fp32_frame: the most a frame moves down, FRAME_DROP_LIMIT / scale in units of Q K (0 elsewhere)
    CHECK(t.frameDropLimit == (framed ? (float)(pasa_kernel::FramedFamily::FRAME_DROP_LIMIT / in.scale) : 0.0f));
    if (!shifted) {
        CHECK(t.beta == 0.0f && t.invariance == 0.0f && t.shiftDiag == 0.0f && t.shiftOff == 0.0f);
        CHECK(t.scale == (float)in.scale);
        if (rowShifted) {  // 2^e <= 1, rho = scale / 2^e (in [1, 2) below scale 2), the relevance 4 / rho and
                           // the reshift threshold 2 to 4 / rho, a power of two
            int e;
            CHECK(std::frexp((double)t.rsScalePow2, &e) == 0.5 && t.rsScalePow2 <= 1.0f);
            CHECK(in.scale >= 2.0 ? t.rsRho == (float)in.scale : t.rsRho >= 1.0f && t.rsRho < 2.0f);
            CHECK(std::fabs((double)t.rsRho * t.rsScalePow2 - in.scale) <= 1e-6 * in.scale);
            CHECK(std::fabs((double)t.rsRelevance * t.rsRho - 4.0) <= 1e-6);
            CHECK(std::frexp((double)t.rsReshiftAt, &e) == 0.5);
            const double at = (double)t.rsReshiftAt * t.rsRho;
            CHECK(at >= 2.0 * (1 - 1e-6) && at <= 4.0 * (1 + 1e-6));
        } else {
            CHECK(t.rsScalePow2 == 0.0f && t.rsRho == 0.0f && t.rsRelevance == 0.0f && t.rsReshiftAt == 0.0f);
        }
        return;
    }
    CHECK(t.rsScalePow2 == 0.0f && t.rsRho == 0.0f && t.rsRelevance == 0.0f && t.rsReshiftAt == 0.0f);
    CHECK(t.beta >= 0.0f && t.beta < 1.0f);
    CHECK(std::fabs(t.invariance - t.beta / (1.0 - t.beta)) <= 1e-5 * t.invariance + 1e-7);
    CHECK(t.scale == (float)in.scale);
    // M's entries: rounded to FP16 once, from the beta actually used (round through _Float16 here).
    const double n = t.blockKv;
    CHECK(IsFp16Exact(t.shiftDiag) && IsFp16Exact(t.shiftOff));
    CHECK((double)t.shiftDiag == (double)(_Float16)((1.0 - (double)t.beta / n) * in.scale) ||
          std::fabs(t.shiftDiag - (1.0 - t.beta / n) * in.scale) <= std::ldexp(std::fabs(t.shiftDiag), -10));
    CHECK(t.shiftOff <= 0.0f &&
          std::fabs(t.shiftOff + t.beta / n * in.scale) <= std::ldexp(std::fabs(t.shiftOff), -10));
}

// ---- sections -------------------------------------------------------------------------------------

// The stacks of a task (PasaStack): they cover its blocks in order, each of at most kvStack blocks, and a task
// longer than kvStack starts and ends with a stack of one block.
void CheckStacks() {
    PasaTilingData t{};
    for (uint32_t stack = 1; stack <= 8; ++stack)
        for (uint32_t n = 0; n <= 64; ++n) {
            t.kvStack = stack;
            g_case = "stacks of " + std::to_string(stack) + " over " + std::to_string(n) + " blocks";
            const uint32_t stacks = PasaStacks(t, n);
            uint32_t next = 0;
            for (uint32_t i = 0; i < stacks; ++i) {
                const PasaKvStack st = PasaStack(t, n, i);
                CHECK(st.index == i && st.first == next && st.end > st.first && st.end - st.first <= stack);
                next = st.end;
            }
            CHECK(next == n);
            if (n > stack) {
                CHECK(PasaStack(t, n, 0).end == 1);
                CHECK(PasaStack(t, n, stacks - 1).first == n - 1);
            }
        }
}

// D x S1 x S2 x GQA ratio x allocation, prefill and decode, lengths up to 128k.
void SectionGrid() {
    CheckStacks();
    const int64_t Ds[] = {64, 80, 96, 128, 192, 256};
    const int64_t S1s[] = {1, 17, 128, 129, 1000, 8192, 131072};
    const int64_t S2s[] = {1, 127, 128, 129, 4096, 131072};
    const int64_t ratios[] = {1, 2, 4, 8, 16};
    for (int64_t D : Ds)
        for (int64_t S1 : S1s)
            for (int64_t S2 : S2s)
                for (int64_t g : ratios)
                    for (const pasa::AllocationTraits& alloc : pasa::KernelAllocations()) {
                        // Long queries with few heads keep the task list small enough to enumerate.
                        const int64_t nkv = S1 >= 8192 ? 1 : 2, B = S1 >= 8192 ? 1 : 2;
                        Dims d{B, nkv * g, nkv, S1, S2, D};
                        CheckPlan(MakeInput(d, "BNSD", alloc.name), d);
                    }
}

// Decode (S1 = 1): few (b, n) rows and a long KV split over the cores, and many rows with no split.
void SectionDecode() {
    for (int64_t D : {64, 128, 256})
        for (int64_t B : {1, 3, 32})
            for (int64_t g : {1, 4, 16})
                for (int64_t S2 : {1, 128, 129, 1000, 32768, 131072}) {
                    Dims d{B, g, 1, 1, S2, D};
                    pasa::TilingInput in = MakeInput(d, "BSH");
                    CheckPlan(in, d);
                    g_case = Describe(in);
                    auto r = pasa::ComputeTiling(in);
                    const uint64_t base = B * g;  // one task per (b, n)
                    // Shortening the critical path is the point of split-KV: with a long KV and fewer
                    // rows than cores, the busiest core must walk fewer KV blocks than one row's whole KV.
                    if (base < in.platform.aicNum && r.data.numKvBlocks >= in.platform.aicNum)
                        CHECK(r.data.kvSplits > 1 &&
                              (uint64_t)r.data.tasksPerCore * r.data.kvBlocksPerSplit < r.data.numKvBlocks);
                }
}

// Other platform capacities (fewer cores, smaller memories): plans still fit, or the tiling says why.
void SectionPlatforms() {
    struct P { uint32_t aic; uint64_t ub, l1; };
    const P plats[] = {{24, 192 * 1024, 512 * 1024}, {20, 192 * 1024, 512 * 1024}, {1, 192 * 1024, 512 * 1024},
                       {8, 128 * 1024, 256 * 1024}};
    for (const P& p : plats)
        for (int64_t D : {64, 80, 96, 128, 256})
            for (int64_t S1 : {1, 300, 4096})
                for (int64_t g : {1, 8}) {
                    Dims d{2, 2 * g, 2, S1, 1000, D};
                    pasa::TilingInput in = MakeInput(d, "BSND");
                    in.platform.aicNum = p.aic;
                    in.platform.aivNum = 2 * p.aic;
                    in.platform.ubSize = p.ub;
                    in.platform.l1Size = p.l1;
                    g_case = Describe(in);
                    bool threw = false;
                    try {
                        pasa::ComputeTiling(in);
                    } catch (const std::invalid_argument& e) {
                        threw = true;
                        CHECK(std::string(e.what()).find("platform") != std::string::npos);
                    }
                    if (!threw) CheckPlan(in, d);
                    // The A2 capacities must always have a plan.
                    if (p.ub == 192 * 1024 && p.l1 == 512 * 1024) CHECK(!threw);
                }
}

// Every head dim the op accepts (16..256, step 16), every allocation: each A2 plan fits the UB TPipe
// offers (184 KB - 256 B: the vector APIs' scratch takes the top 8 KB) and L1 less 256 B. The
// largest plans are printed, so the margin is visible in the test log.
void SectionHeadDims() {
    uint64_t worstUb = 0, worstL1 = 0;
    std::string worstUbCase, worstL1Case;
    for (int64_t D = 16; D <= 256; D += 16)
        for (const pasa::AllocationTraits& alloc : pasa::KernelAllocations())
            for (int64_t S1 : {1, 128, 4096})
                for (int64_t g : {1, 8}) {
                    Dims d{1, 2 * g, 2, S1, 4096, D};
                    pasa::TilingInput in = MakeInput(d, "BNSD", alloc.name);
                    CheckPlan(in, d);
                    g_case = Describe(in);
                    const pasa::TilingResult r = pasa::ComputeTiling(in);
                    CHECK(r.data.ubBytes <= 184 * 1024 - 256);
                    // The handshake's ring never costs query rows: the FP32 plan at D = 192 and 32 rows per
                    // AIV takes 184320 B with single blocks one ahead (15 row vectors), so blockQ stays 64
                    // and the stack shortens instead.
                    const std::string p = alloc.name;
                    if (D == 192 && (p == "pasa_fp32" || p == "fp16_fp32")) CHECK(r.data.blockQ == 64);
                    CHECK(r.data.l1Bytes <= 512 * 1024 - 256);
                    if (r.data.ubBytes > worstUb) worstUb = r.data.ubBytes, worstUbCase = g_case;
                    if (r.data.l1Bytes > worstL1) worstL1 = r.data.l1Bytes, worstL1Case = g_case;
                }
    std::printf("largest UB plan: %llu of 188160 B (%s)\nlargest L1 plan: %llu of 524032 B (%s)\n",
                (unsigned long long)worstUb, worstUbCase.c_str(), (unsigned long long)worstL1, worstL1Case.c_str());
}

// All three layouts with masks, lengths, sparse modes: the same plan properties.
void SectionLayouts() {
    for (const char* layout : {"BNSD", "BSH", "BSND"})
        for (int64_t sm : {0, 1, 2, 3, 4})
            for (bool lens : {false, true}) {
                Dims d{3, 8, 2, 300, 515, 80};
                pasa::TilingInput in = MakeInput(d, layout, "pasa");
                in.sparseMode = sm;
                if (sm <= 1) in.maskShape = {3, 1, 320, 528};  // FIA's padded mask, top-left corner read
                if (sm == 4) { in.preTokens = 100; in.nextTokens = 0; }
                if (lens) {
                    in.actualSeqLengths = {300, 1, 150};
                    in.actualSeqLengthsKv = {0, 515, 128};
                }
                CheckPlan(in, d);
                auto t = pasa::ComputeTiling(in).data;
                CHECK(t.hasMask == (sm <= 1 ? 1u : 0u));
                CHECK(t.hasActualSeqQ == (lens ? 1u : 0u) && t.hasActualSeqKv == (lens ? 1u : 0u));
                if (sm <= 1) {
                    // Byte strides of a (B, 1, 320, 528) uint8 mask: broadcast over heads.
                    CHECK(t.maskHeads == 1 && t.maskHeadStride == 0 && t.maskRowStride == 528 &&
                          t.maskBatchStride == 320ull * 528);
                }
            }
    // Decode ignores actual_seq_lengths (FIA), and reads actual_seq_lengths_kv.
    Dims d{2, 4, 4, 1, 1000, 128};
    pasa::TilingInput in = MakeInput(d, "BNSD");
    in.actualSeqLengths = {1, 0};
    in.actualSeqLengthsKv = {1000, 3};
    CheckPlan(in, d);
    auto t = pasa::ComputeTiling(in).data;
    CHECK(t.hasActualSeqQ == 0 && t.hasActualSeqKv == 1);
}

// beta: the default is the solver's fixed point (in range, stable under scale), an explicit one is kept.
void SectionBeta() {
    Dims d{1, 2, 2, 256, 256, 128};
    pasa::TilingInput in = MakeInput(d);
    g_case = "default beta";
    auto t = pasa::ComputeTiling(in).data;
    // The fixed point for n = 128 from 1 - 2^-6 is 0.984497 (the paper's Table 3), 0.984711 with the scale
    // 1/sqrt(128) folded into M (pasa_npu.beta.default_beta gives the same).
    CHECK(t.beta > 0.98f && t.beta < 0.99f);
    CHECK(std::fabs(t.beta - pasa::DefaultBeta(128, in.scale)) < 1e-7);
    for (double beta : {0.0, 0.5, 0.9375, 0.968994}) {
        in.beta = beta;
        g_case = "beta " + std::to_string(beta);
        CheckPlan(in, d);
        auto t2 = pasa::ComputeTiling(in).data;
        CHECK(t2.beta == (float)beta);
        if (beta == 0.0) CHECK(t2.shiftOff == 0.0f && t2.shiftDiag == (float)(_Float16)in.scale);
    }
    double diag, off;
    pasa::ShiftEntries(0.9375, 128, -1.0, &diag, &off);  // scale <= 0: "no scale"
    g_case = "ShiftEntries without scale";
    CHECK(diag == (double)(_Float16)(1.0 - 0.9375 / 128) && off == (double)(_Float16)(-0.9375 / 128));
}

// Bad inputs raise std::invalid_argument whose message names the argument.
void SectionErrors() {
    const Dims d{2, 8, 2, 256, 300, 128};
    auto expect = [](const char* what, const std::function<void(pasa::TilingInput&)>& edit, const char* name) {
        pasa::TilingInput in = MakeInput(Dims{2, 8, 2, 256, 300, 128});
        edit(in);
        g_case = std::string(what) + " -> expected an error naming '" + name + "'";
        try {
            pasa::ComputeTiling(in);
            CHECK(!"no error raised");
        } catch (const std::invalid_argument& e) {
            g_case += std::string(", got: ") + e.what();
            CHECK(std::string(e.what()).find(name) != std::string::npos);
        }
    };
    expect("layout TND", [](auto& in) { in.inputLayout = "TND"; }, "input_layout");
    expect("3-D query for BNSD", [](auto& in) { in.queryShape = {2, 256, 1024}; }, "query");
    expect("5-D key", [](auto& in) { in.keyShape = {2, 2, 300, 128, 1}; }, "key");
    expect("value shape", [](auto& in) { in.valueShape = {2, 2, 299, 128}; }, "value");
    expect("negative dim", [](auto& in) { in.queryShape = {2, 8, -1, 128}; }, "query");
    expect("num_heads 0", [](auto& in) { in.numHeads = 0; }, "num_heads");
    expect("num_heads != query N", [](auto& in) { in.numHeads = 4; in.numKeyValueHeads = 2; }, "num_heads");
    expect("Nkv negative", [](auto& in) { in.numKeyValueHeads = -1; }, "num_key_value_heads");
    expect("N % Nkv", [](auto& in) { in.numKeyValueHeads = 3; in.keyShape = in.valueShape = {2, 3, 300, 128}; },
           "num_key_value_heads");
    expect("key N", [](auto& in) { in.keyShape = in.valueShape = {2, 4, 300, 128}; }, "num_key_value_heads");
    expect("key batch", [](auto& in) { in.keyShape = in.valueShape = {3, 2, 300, 128}; }, "batch");
    expect("key head dim", [](auto& in) { in.keyShape = in.valueShape = {2, 2, 300, 64}; }, "head dim");
    expect("D = 72", [](auto& in) { in.queryShape = {2, 8, 256, 72}; in.keyShape = in.valueShape = {2, 2, 300, 72}; },
           "head dim");
    expect("D = 512", [](auto& in) { in.queryShape = {2, 8, 256, 512}; in.keyShape = in.valueShape = {2, 2, 300, 512}; },
           "head dim");
    expect("S1 = 0", [](auto& in) { in.queryShape = {2, 8, 0, 128}; }, "S1");
    expect("S2 = 0", [](auto& in) { in.keyShape = in.valueShape = {2, 2, 0, 128}; }, "S2");
    expect("scale 0", [](auto& in) { in.scale = 0.0; }, "scale");
    expect("scale NaN", [](auto& in) { in.scale = std::nan(""); }, "scale");
    // M = (I - beta/128 J)*scale must be storable in FP16: scale in [128 * 2^-18, 65504]
    expect("scale 1e6", [](auto& in) { in.scale = 1e6; }, "scale must be in [");
    expect("scale 1e6, beta 0.5", [](auto& in) { in.scale = 1e6; in.beta = 0.5; }, "scale must be in");
    expect("scale 1e-4", [](auto& in) { in.scale = 1e-4; }, "scale must be in");
    expect("beta 1", [](auto& in) { in.beta = 1.0; }, "beta");
    expect("beta NaN", [](auto& in) { in.beta = std::nan(""); }, "beta");
    expect("precision fp16", [](auto& in) { in.precision = "fp16"; }, "precision");
    // FlashAttention and pasa_rs have no M: a scale PASA refuses is planned
    for (const char* prec : {"fp16_fp32", "pasa_rs"})
        for (double scale : {1e6, 1e-4, 1.5, 2.0, 2e4}) {
            pasa::TilingInput in = MakeInput(d, "BNSD", prec);
            in.scale = scale;
            CheckPlan(in, d);
        }
    expect("sparse_mode 5", [](auto& in) { in.sparseMode = 5; }, "sparse_mode");
    expect("sparse_mode -1", [](auto& in) { in.sparseMode = -1; }, "sparse_mode");
    expect("mode 1 without mask", [](auto& in) { in.sparseMode = 1; }, "atten_mask");
    expect("mask with mode 2", [](auto& in) { in.sparseMode = 2; in.maskShape = {1, 1, 256, 300}; }, "atten_mask");
    expect("mask 3-D", [](auto& in) { in.maskShape = {2, 256, 300}; }, "atten_mask");
    expect("mask too short", [](auto& in) { in.maskShape = {1, 1, 255, 300}; }, "atten_mask");
    expect("mask batch 3", [](auto& in) { in.maskShape = {3, 1, 256, 300}; }, "atten_mask");
    expect("band empty", [](auto& in) { in.sparseMode = 4; in.preTokens = -10; in.nextTokens = 5; }, "pre_tokens");
    expect("lengths count", [](auto& in) { in.actualSeqLengths = {256}; }, "actual_seq_lengths");
    expect("lengths range", [](auto& in) { in.actualSeqLengths = {256, 257}; }, "actual_seq_lengths");
    expect("kv lengths range", [](auto& in) { in.actualSeqLengthsKv = {-1, 3}; }, "actual_seq_lengths_kv");
    expect("platform aiv", [](auto& in) { in.platform.aivNum = 24; }, "platform");
    expect("platform tiny UB", [](auto& in) { in.platform.ubSize = 16 * 1024; }, "platform");
}

}  // namespace

int main(int argc, char** argv) {
    const std::vector<std::pair<std::string, void (*)()>> sections = {
        {"grid", SectionGrid},     {"decode", SectionDecode}, {"platforms", SectionPlatforms},
        {"layouts", SectionLayouts}, {"beta", SectionBeta},   {"errors", SectionErrors},
        {"head_dims", SectionHeadDims}};
    bool ran = false;
    for (const auto& s : sections) {
        if (argc > 1 && s.first != argv[1]) continue;
        ran = true;
        const long before = g_checks;
        const int failuresBefore = g_failures;
        try {
            s.second();
        } catch (const std::exception& e) {
            std::printf("FAIL %s: uncaught exception: %s [%s]\n", s.first.c_str(), e.what(), g_case.c_str());
            ++g_failures;
        }
        std::printf("%s: %ld checks, %d failed\n", s.first.c_str(), g_checks - before, g_failures - failuresBefore);
    }
    if (!ran) {
        std::printf("unknown section '%s'; one of: grid decode platforms layouts beta errors\n", argv[1]);
        return 2;
    }
    return g_failures ? 1 : 0;
}
