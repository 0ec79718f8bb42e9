// Host tiling of the PASA fused-attention kernel (plain C++17, no CANN header).
// See op_host/pasa_tiling.h for the interface and op_kernel/pasa_tiling_data.h for the struct.
#include "pasa_tiling.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string>

namespace pasa {
namespace {

constexpr uint32_t kBlockKv = 128;      // n of M = (I - beta/n J)*scale; 1/n is exact
constexpr uint64_t kWsAlign = 512;      // GM workspace regions start on 512-byte boundaries
constexpr uint32_t kL0Half = 32 * 1024; // one of the two ping-pong buffers of L0A/L0B
constexpr uint32_t kFractal = 16;       // one NZ strip: the augmented column of pasa_rs takes one
// The AIC <-> AIV handshake (op_kernel/pasa_cube_stage.h): KV blocks per stack and stacks of S' computed
// ahead, as catlass's FlashAttention inference kernel has them. pasa_rs hands over single blocks, one ahead:
// its AIC hears the AIVs' verdict on every block before that block's P V.
constexpr uint32_t kKvStack = 4;
constexpr uint32_t kPreLaunch = 2;
// pasa_rs: the FP32 row vectors its AIVs keep beside the others (op_kernel/pasa_vector_softmax.h, kRowShiftVectors)
constexpr uint64_t kRowShiftVectors = 13;
// blockwise.RESHIFT_RELEVANCE: a block whose maximum lies this far below the running one is not reshifted
constexpr double kReshiftRelevance = 4.0;

uint64_t AlignUp(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }
uint64_t CeilDiv(uint64_t a, uint64_t b) { return (a + b - 1) / b; }

[[noreturn]] void Bad(const std::string& msg) { throw std::invalid_argument(msg); }

struct Plan {
    uint32_t blockQ, baseK;
    uint64_t ub, l1, l0a, l0b, l0c;
};

// The on-chip buffers the kernel allocates per core for query blocks of bq rows: this must stay the
// sum of the InitBuffer calls of op_kernel/pasa_vector_softmax.h (UB, per AIV) and
// op_kernel/pasa_cube_ops.h + pasa_fused_attention.cpp (L1, L0A, L0B, L0C, per AIC). ring: the block slots of
// the handshake (PasaSlotRing), whose merge weights alpha and gamma the AIVs keep.
Plan MakePlan(uint32_t bq, uint32_t d, bool fp32State, bool rowShifted, uint32_t ring) {
    Plan p{};
    p.blockQ = bq;
    const uint64_t st = fp32State ? 4 : 2;  // state / O / PV element size
    const uint64_t rm = bq / 2;             // rows per AIV
    const uint64_t n = kBlockKv, rowVec = 128;
    const uint64_t queues = 2 * rm * n * 2       /* S' in */ + 2 * rm * n * 2 /* P out */ +
                            2 * rm * d * st      /* PV in */ + rm * n /* mask */ +
                            std::max<uint64_t>(rm * d * 2, d * 4) /* out */ + 2 * rowVec * 4 /* lse */;
    const uint64_t calc = (fp32State ? 2 * rm * n * 4 : 0) /* S', P in FP32 */ + rm * n * st /* work */ +
                          AlignUp(rm * n / 8, 32) /* compare bits */ + rm * d * st /* O */ +
                          (11 + 2ull * ring) * rowVec * st /* row state, alpha and gamma */ +
                          4 * rowVec * 4 /* FP32 rows */ + rm * 32 /* Brcb */ +
                          (rowShifted ? kRowShiftVectors * rowVec * 4 : 0) /* pasa_rs: C, psi, excesses, ... */;
    p.ub = queues + calc;
    // pasa_rs: Q^ and K' carry one more NZ strip (the augmented column that subtracts psi in L0C)
    const uint64_t cols = d + (rowShifted ? kFractal : 0);
    p.l1 = (uint64_t)bq * cols * 2 + 2 * n * cols * 2 /* K' or K */ + 2 * n * cols * 2 /* V (same tile size) */ +
           2 * n * n * 2 /* P, or M / L */;
    // L0A/L0B: two 32 KB buffers each; the head-dim chunk of S' = Q K'^T fits both operands in one.
    // pasa_rs: over D + 16 columns, so that for D <= 112 the augmented column is in the same Mmad call as
    // Q^ K'^T and psi is subtracted before the one rounding to FP32 (golden: FP32(Q^ K'^T - psi)).
    p.baseK = std::min<uint32_t>(cols, kL0Half / (2 * std::max<uint32_t>(bq, n))) / 16 * 16;
    p.l0a = 2 * kL0Half;
    p.l0b = 2 * kL0Half;
    p.l0c = 2 * 64 * 1024;  // S' (bq x n), P V (bq x D) and the pre-pass (n x 128) each fit one FP32 buffer
    return p;
}

// UB and L1 as TPipe offers them: the physical sizes less the toolchain's reserves (pasa_tiling.h).
// pasa_rs's key pre-pass borrows the AIV's S' and P queues for one 16-column strip of a KV block (128 x 16
// FP16) in and out (op_kernel/pasa_centre_keys.h): they hold it from 16 rows per AIV on.
bool Fits(const Plan& p, const PlatformInfo& pl, uint32_t d, bool rowShifted) {
    const uint64_t ub = pl.ubSize > kUbReservedBytes ? pl.ubSize - kUbReservedBytes : 0;
    const uint64_t l1 = pl.l1Size > kL1ReservedBytes ? pl.l1Size - kL1ReservedBytes : 0;
    const uint64_t strip = (uint64_t)kBlockKv * kFractal * 2, rm = p.blockQ / 2;
    if (rowShifted && rm * kBlockKv * 2 < strip) return false;
    return p.ub <= ub && p.l1 <= l1 && p.l0a <= pl.l0aSize && p.l0b <= pl.l0bSize &&
           p.l0c <= pl.l0cSize && p.baseK >= 16 && (uint64_t)p.blockQ * d * 4 <= 64 * 1024 &&
           (uint64_t)p.blockQ * kBlockKv * 4 <= 64 * 1024;
}

// PageAttention's arguments against the query's B and D: the table (B, maxBlocksPerSeq), the page
// length, the caches' shape (either FIA layout). Returns S2 = maxBlocksPerSeq * blockSize, the longest
// key sequence a table row addresses.
int64_t PagedKeyLength(const TilingInput& in, int64_t B, int64_t NKV, int64_t D) {
    const auto& bt = in.blockTableShape;
    if (bt.empty()) Bad("block_size is PageAttention's page length and needs a block_table; pass 0 without one");
    if (bt.size() != 2 || bt[0] != B)
        Bad("block_table must be 2-D (B, max_blocks_per_seq) with B = " + std::to_string(B) + " rows");
    if (in.blockSize < 16 || in.blockSize > 512 || in.blockSize % 16)
        Bad("block_size must be a multiple of 16 in [16, 512] with a block_table, got " + std::to_string(in.blockSize));
    const auto& k = in.keyShape;
    const int64_t page = in.blockSize;
    const bool ok = (k.size() == 3 && k[1] == page && k[2] == NKV * D) ||
                    (k.size() == 4 && k[1] == NKV && k[2] == page && k[3] == D);
    if (!ok || k[0] < 1)
        Bad("key/value caches with a block_table must be (num_blocks >= 1, " + std::to_string(page) + ", " +
            std::to_string(NKV * D) + ") or (num_blocks >= 1, " + std::to_string(NKV) + ", " + std::to_string(page) +
            ", " + std::to_string(D) + ") for block_size, num_key_value_heads and D");
    if (in.actualSeqLengthsKv.empty())
        Bad("actual_seq_lengths_kv is required with a block_table (the live keys of each batch's pages)");
    return bt[1] * page;
}

}  // namespace

TilingResult ComputeTiling(const TilingInput& in) {
    const std::string& L = in.inputLayout;
    uint32_t layout;
    if (L == "BNSD") layout = PASA_LAYOUT_BNSD;
    else if (L == "BSH") layout = PASA_LAYOUT_BSH;
    else if (L == "BSND") layout = PASA_LAYOUT_BSND;
    else Bad("input_layout must be one of \"BNSD\", \"BSH\", \"BSND\", got \"" + L + "\"");
    const size_t rank = layout == PASA_LAYOUT_BSH ? 3 : 4;
    auto checkRank = [&](const char* name, const std::vector<int64_t>& s) {
        if (s.size() != rank) Bad(std::string(name) + " must be " + std::to_string(rank) + "-D for input_layout " + L);
        for (int64_t v : s) if (v < 0) Bad(std::string(name) + " has a negative dimension");
    };
    const bool paged = !in.blockTableShape.empty() || in.blockSize != 0;
    checkRank("query", in.queryShape);
    if (!paged) {
        checkRank("key", in.keyShape);
        checkRank("value", in.valueShape);
    }
    if (in.keyShape != in.valueShape) Bad("value must have key's shape");
    if (in.numHeads < 1) Bad("num_heads must be >= 1");
    if (in.numKeyValueHeads < 0) Bad("num_key_value_heads must be >= 0 (0 = num_heads)");
    const int64_t N = in.numHeads, NKV = in.numKeyValueHeads ? in.numKeyValueHeads : in.numHeads;
    if (N % NKV) Bad("num_heads must be a multiple of num_key_value_heads");
    int64_t B, S1, S2, D;
    const auto& q = in.queryShape;
    const auto& k = in.keyShape;
    if (layout == PASA_LAYOUT_BSH) {
        B = q[0]; S1 = q[1];
        if (q[2] % N) Bad("num_heads must divide query's hidden size H (input_layout BSH)");
        D = q[2] / N;
    } else if (layout == PASA_LAYOUT_BSND) {
        B = q[0]; S1 = q[1]; D = q[3];
        if (q[2] != N) Bad("num_heads must equal query's N dim (input_layout BSND)");
    } else {
        B = q[0]; S1 = q[2]; D = q[3];
        if (q[1] != N) Bad("num_heads must equal query's N dim (input_layout BNSD)");
    }
    if (paged) {
        S2 = PagedKeyLength(in, B, NKV, D);
    } else {
        if (layout == PASA_LAYOUT_BSH) {
            if (k[2] != NKV * D) Bad("key's hidden size must be num_key_value_heads * D (input_layout BSH)");
            S2 = k[1];
        } else if (layout == PASA_LAYOUT_BSND) {
            if (k[2] != NKV) Bad("num_key_value_heads must equal key's N dim (input_layout BSND)");
            if (k[3] != D) Bad("key's head dim must equal query's");
            S2 = k[1];
        } else {
            if (k[1] != NKV) Bad("num_key_value_heads must equal key's N dim (input_layout BNSD)");
            if (k[3] != D) Bad("key's head dim must equal query's");
            S2 = k[2];
        }
        if (k[0] != B) Bad("key's batch must equal query's batch");
    }
    // GM rows are read through Nd2Nz (srcDValue <= 65535 elements)
    if ((layout != PASA_LAYOUT_BNSD && (N * D > 65535 || NKV * D > 65535)))
        Bad("num_heads * D must be <= 65535 for input_layout BSH/BSND (one query row of all heads)");
    if (paged && in.keyShape.size() == 3 && NKV * D > 65535)
        Bad("num_key_value_heads * D must be <= 65535 for key/value caches (num_blocks, block_size, H) (one key row "
            "of all heads)");
    if (B < 1 || S1 < 1 || S2 < 1) Bad("query: B and S1, key: S2 must be >= 1 (empty inputs are handled by the caller)");
    if (D < 16 || D > 256 || D % 16) Bad("head dim D must be a multiple of 16 in [16, 256], got " + std::to_string(D));
    if (S1 > (1 << 24) || S2 > (1 << 24)) Bad("sequence lengths must be <= 2^24");
    if (!(std::isfinite(in.scale) && in.scale > 0)) Bad("scale must be a positive finite number");
    if (!(in.beta < 1.0) || std::isnan(in.beta)) Bad("beta must be negative (default) or in [0, 1)");
    // The allocation (python/pasa_npu/precision.py): its tiling key, the row state's type, and whether
    // K is shifted (PASA: the K' pre-pass and M) or not (FlashAttention).
    uint32_t key;
    if (in.precision == "pasa") key = PASA_TILING_KEY_FP16_STATE;
    else if (in.precision == "pasa_fp32") key = PASA_TILING_KEY_FP32_STATE;
    else if (in.precision == "fp16_fp32") key = PASA_TILING_KEY_FLASH_FP16_SCORE;
    else if (in.precision == "pasa_rs") key = PASA_TILING_KEY_ROW_SHIFTED;
    else Bad("precision must be one of \"pasa\", \"pasa_fp32\", \"fp16_fp32\", \"pasa_rs\", got \"" + in.precision + "\"");
    const bool fp32State = key != PASA_TILING_KEY_FP16_STATE;
    const bool shifted = key == PASA_TILING_KEY_FP16_STATE || key == PASA_TILING_KEY_FP32_STATE;
    const bool rowShifted = key == PASA_TILING_KEY_ROW_SHIFTED;
    if (in.sparseMode < 0 || in.sparseMode > 4) Bad("sparse_mode must be one of 0, 1, 2, 3, 4");
    const bool hasMask = !in.maskShape.empty();
    if (hasMask) {
        if (in.sparseMode > 1) Bad("atten_mask: pass no mask for sparse_mode 2, 3, 4 (the band is computed from indices)");
        const auto& m = in.maskShape;
        if (m.size() != 4 || !(m[0] == 1 || m[0] == B) || !(m[1] == 1 || m[1] == N) || m[2] < S1 || m[3] < S2)
            Bad("atten_mask must be 4-D (1|B, 1|N, MS1 >= S1, MS2 >= S2)");
    } else if (in.sparseMode == 1) {
        Bad("atten_mask is required for sparse_mode 1");
    }
    const bool decode = S1 == 1;
    if (!decode && (in.sparseMode == 4 || (in.sparseMode == 0 && hasMask)) && in.preTokens + in.nextTokens < 0)
        Bad("pre_tokens + next_tokens must be >= 0 where the band applies");
    auto checkLens = [&](const char* name, const std::vector<int64_t>& v, int64_t hi) {
        if (v.empty()) return;
        if ((int64_t)v.size() != B) Bad(std::string(name) + " must have B entries (expand a single value first)");
        for (int64_t x : v) if (x < 0 || x > hi) Bad(std::string(name) + " entries must be in [0, " + std::to_string(hi) + "]");
    };
    checkLens("actual_seq_lengths", in.actualSeqLengths, S1);
    checkLens("actual_seq_lengths_kv", in.actualSeqLengthsKv, S2);
    const PlatformInfo& pl = in.platform;
    if (pl.aicNum < 1 || pl.aivNum != 2 * pl.aicNum) Bad("platform: aivNum must be 2 * aicNum >= 2 (KERNEL_TYPE_MIX_AIC_1_2)");

    TilingResult r{};
    PasaTilingData& t = r.data;
    t.batch = B; t.numHeads = N; t.numKvHeads = NKV; t.groupSize = N / NKV;
    t.seqQ = S1; t.seqKv = S2; t.headDim = D; t.layout = layout;
    if (layout == PASA_LAYOUT_BNSD) {
        t.qBatchStride = N * S1 * D; t.qHeadStride = S1 * D; t.qRowStride = D;
        t.kvBatchStride = NKV * S2 * D; t.kvHeadStride = S2 * D; t.kvRowStride = D;
    } else {  // BSH and BSND share the memory order (B, S, N, D)
        t.qBatchStride = S1 * N * D; t.qHeadStride = D; t.qRowStride = N * D;
        t.kvBatchStride = S2 * NKV * D; t.kvHeadStride = D; t.kvRowStride = NKV * D;
    }
    if (paged) {  // pasa_tiling_data.h: the caches' strides, the page a row sits in comes from the table
        const int64_t page = in.blockSize;
        t.hasBlockTable = 1;
        t.pageSize = page;
        t.maxBlocksPerSeq = in.blockTableShape[1];
        t.kvBatchStride = 0;
        if (in.keyShape.size() == 3) {  // (num_blocks, page, Nkv*D)
            t.kvPageStride = page * NKV * D; t.kvHeadStride = D; t.kvRowStride = NKV * D;
        } else {                        // (num_blocks, Nkv, page, D)
            t.kvPageStride = NKV * page * D; t.kvHeadStride = page * D; t.kvRowStride = D;
        }
    }
    t.scale = (float)in.scale;
    if (rowShifted) {  // blockwise._query_block_rs: e = floor(log2 scale), rho = scale / 2^e
        const double pow2 = std::ldexp(1.0, (int)std::floor(std::log2(in.scale)));
        t.rsScalePow2 = (float)pow2;
        t.rsRho = (float)(in.scale / pow2);
        t.rsRelevance = (float)(kReshiftRelevance * pow2 / in.scale);
    }
    if (shifted) {  // FlashAttention and pasa_rs have no M: beta, I and M's entries stay 0, any scale is accepted
        double beta = in.beta < 0 ? DefaultBeta(kBlockKv, in.scale) : in.beta;
        double diag, off;
        ShiftEntries(beta, kBlockKv, in.scale, &diag, &off);
        t.beta = (float)beta;
        t.invariance = (float)(beta / (1.0 - beta));
        t.shiftDiag = (float)diag;
        t.shiftOff = (float)off;
    }
    t.precision = key;

    // The largest query block whose plan fits, with the longest stack of the handshake that fits beside it (the
    // AIVs keep alpha and gamma of every block slot): S' 2 stacks ahead in stacks of 4 blocks down to 1, then
    // single blocks one ahead, the first generation's ring, so that the handshake never costs query rows (a
    // smaller query block re-reads K and V). The work split below may shorten the stacks.
    struct Handshake {
        uint32_t kvStack, preLaunch;
    };
    std::vector<Handshake> handshakes;  // most blocks per flag first
    if (!rowShifted)
        for (uint32_t stack = std::min<uint32_t>(kKvStack, CeilDiv(S2, kBlockKv)); stack >= 1; --stack)
            handshakes.push_back({stack, kPreLaunch});
    handshakes.push_back({1, 1});
    Plan plan{};
    bool found = false;
    for (uint32_t bq : {128u, 64u, 32u, 16u}) {
        for (const Handshake& h : handshakes) {
            t.kvStack = h.kvStack;
            t.preLaunch = h.preLaunch;
            plan = MakePlan(bq, D, fp32State, rowShifted, PasaSlotRing(t));
            if (Fits(plan, pl, D, rowShifted)) { found = true; break; }
        }
        if (found) break;
    }
    if (!found) Bad("platform: no block plan fits the on-chip memories for this head dim");
    t.blockQ = plan.blockQ;
    t.blockKv = kBlockKv;
    t.baseK = plan.baseK;
    t.kShiftCols = D + (rowShifted ? kFractal : 0);
    // Decode with GQA packs a KV head's group of query heads into the rows of its tasks (pasa_tiling_data.h),
    // so K and V are read once per group; groups larger than blockQ take several query blocks.
    t.packedHeads = decode && t.groupSize > 1 ? t.groupSize : 1;
    t.numQBlocks = CeilDiv((uint64_t)S1 * t.packedHeads, t.blockQ);
    t.numKvBlocks = CeilDiv(S2, kBlockKv);

    t.sparseMode = in.sparseMode;
    t.hasMask = hasMask;
    t.bandMode = (!decode && (in.sparseMode >= 2 || (in.sparseMode == 0 && hasMask))) ? 1 : 0;
    t.preTokens = in.preTokens; t.nextTokens = in.nextTokens;
    if (hasMask) {
        const auto& m = in.maskShape;
        t.maskBatch = m[0]; t.maskHeads = m[1];
        t.maskRowStride = m[3];
        t.maskHeadStride = m[1] == 1 ? 0 : m[2] * m[3];
        t.maskBatchStride = m[0] == 1 ? 0 : m[1] * m[2] * m[3];
    }
    t.hasActualSeqQ = !decode && !in.actualSeqLengths.empty();
    t.hasActualSeqKv = !in.actualSeqLengthsKv.empty();

    // Work split. Prefill: one task per (b, n, q block); decode with GQA: per (b, kv head, q block of
    // the group's heads). Decode (S1 == 1) with fewer tasks than cores: split the KV blocks so that every
    // core gets work; partials are combined through lse.
    const uint64_t baseTasks = (uint64_t)B * (N / t.packedHeads) * t.numQBlocks;
    t.kvSplits = 1;
    if (decode && baseTasks < pl.aicNum && t.numKvBlocks > 1) {
        // The split count that minimises the busiest core's work, ceil(tasks/cores) * (blocks per split
        // + 1), the +1 standing for a task's fixed cost (Q load, partial write, its share of the
        // combine); ties go to fewer splits. At most 64 splits, because the combine
        // reduces the lse values of a row in one repeat of 64 FP32 lanes.
        uint64_t best = ~0ull;
        for (uint32_t s = 1; s <= std::min<uint32_t>(t.numKvBlocks, 64); ++s) {
            const uint32_t per = CeilDiv(t.numKvBlocks, s);
            const uint32_t splits = CeilDiv(t.numKvBlocks, per);
            const uint64_t cost = CeilDiv(baseTasks * splits, pl.aicNum) * (per + 1ull);
            if (cost < best) { best = cost; t.kvBlocksPerSplit = per; t.kvSplits = splits; }
        }
    } else {
        t.kvBlocksPerSplit = t.numKvBlocks;
    }
    // A task has at most kvBlocksPerSplit blocks: no longer stacks, and no more stacks ahead than it can have
    // after its first (preLaunch 1 and 2 run two stacks alike).
    if (!rowShifted) {
        t.kvStack = std::min(t.kvStack, t.kvBlocksPerSplit);
        const uint32_t stacks = CeilDiv(t.kvBlocksPerSplit, t.kvStack);
        t.preLaunch = std::max<uint32_t>(1, std::min<uint32_t>(t.preLaunch, stacks - 1));
        plan = MakePlan(t.blockQ, D, fp32State, rowShifted, PasaSlotRing(t));
    }
    const uint64_t tasks = baseTasks * t.kvSplits;
    if (tasks > 0xFFFFFFFFull) Bad("query: too many tasks (B * N * ceil(S1/blockQ) must fit in 32 bits)");
    t.totalTasks = tasks;
    t.tasksPerCore = CeilDiv(tasks, pl.aicNum);
    t.blockDim = CeilDiv(tasks, t.tasksPerCore);
    t.prepassItems = shifted || rowShifted ? (uint64_t)B * NKV * t.numKvBlocks : 0;
    t.prepassPerCore = CeilDiv(t.prepassItems, t.blockDim);
    const uint64_t rowsAll = (uint64_t)B * N * S1;
    t.combineRowsPerAiv = t.kvSplits > 1 ? CeilDiv(rowsAll, 2ull * t.blockDim) : 0;

    // GM workspace.
    uint64_t off0 = 0;
    t.wsStatusOffset = off0;
    off0 = AlignUp(off0 + 2ull * t.blockDim * 32, kWsAlign);
    t.wsKShiftOffset = off0;
    if (shifted || rowShifted) off0 = AlignUp(off0 + (uint64_t)B * NKV * t.numKvBlocks * kBlockKv * t.kShiftCols * 2, kWsAlign);
    t.wsKSumOffset = off0;
    t.wsCentreOffset = off0;
    if (rowShifted) {
        t.wsCentreOffset = AlignUp(off0 + (uint64_t)t.prepassItems * D * 4, kWsAlign);
        off0 = AlignUp(t.wsCentreOffset + (uint64_t)B * NKV * 2 * t.numKvBlocks * D * 2, kWsAlign);
    }
    t.wsScoreSlot = (uint64_t)t.blockQ * kBlockKv * 2;
    t.wsProbSlot = t.wsScoreSlot;
    t.wsPvSlot = (uint64_t)t.blockQ * D * (fp32State ? 4 : 2);
    t.wsCoreOffset = off0;
    // The S', P and PV rings of PasaSlotRing block slots each, then M (PASA) or the ones matrix L (pasa_rs): n x n
    // FP16, written by the core's AIVs for its pre-pass; then pasa_rs's own slots (pasa_tiling_data.h), each
    // 512-byte aligned
    const uint64_t shiftSlot = shifted || rowShifted ? (uint64_t)kBlockKv * kBlockKv * 2 : 0;
    uint64_t coreBytes = PasaSlotRing(t) * (t.wsScoreSlot + t.wsProbSlot + t.wsPvSlot) + shiftSlot;
    if (rowShifted) {
        auto slot = [&](uint64_t bytes) { coreBytes = AlignUp(coreBytes, kWsAlign); uint64_t at = coreBytes; coreBytes += bytes; return at; };
        t.wsQhatSlot = slot((uint64_t)t.blockQ * D * 2);
        t.wsShiftColSlot = slot(2ull * t.blockQ * kFractal * 2);  // one per block parity
        t.wsCentreProdSlot = slot(2ull * t.kvBlocksPerSplit * t.blockQ * 4);
        t.wsScore32Slot = slot((uint64_t)t.blockQ * kBlockKv * 4);
        t.wsRequestSlot = slot(4 * 64);
    }
    t.wsCoreStride = AlignUp(coreBytes, kWsAlign);
    off0 = AlignUp(off0 + t.wsCoreStride * t.blockDim, kWsAlign);
    t.wsPartialOffset = off0;
    if (t.kvSplits > 1) {
        off0 = AlignUp(off0 + rowsAll * t.kvSplits * D * 4, kWsAlign);
        t.wsPartialLseOffset = off0;
        off0 = AlignUp(off0 + rowsAll * t.kvSplits * 4, kWsAlign);
    } else {
        t.wsPartialLseOffset = off0;
    }
    t.workspaceBytes = off0;

    t.ubBytes = plan.ub; t.l1Bytes = plan.l1; t.l0aBytes = plan.l0a; t.l0bBytes = plan.l0b; t.l0cBytes = plan.l0c;
    r.tilingKey = t.precision;
    r.blockDim = t.blockDim;
    r.workspaceBytes = t.workspaceBytes;
    r.scheduleMode = kScheduleModeBatch;  // every launch meets at the K' pre-pass barrier
    return r;
}

void CheckBlockTable(const PasaTilingData& t, const int32_t* table, const std::vector<int64_t>& actualSeqLengthsKv,
                     int64_t numBlocks) {
    if (!t.hasBlockTable) return;
    for (uint32_t b = 0; b < t.batch; ++b) {
        const int64_t pages = CeilDiv(std::min<int64_t>(actualSeqLengthsKv[b], t.seqKv), t.pageSize);
        for (int64_t p = 0; p < pages; ++p) {
            const int32_t id = table[(uint64_t)b * t.maxBlocksPerSeq + p];
            if (id < 0 || id >= numBlocks)
                Bad("block_table[" + std::to_string(b) + "] holds a block id outside the cache's " +
                    std::to_string(numBlocks) + " blocks: entry " + std::to_string(p) + " is " + std::to_string(id));
        }
    }
}

std::vector<TaskInfo> CoreTasks(const PasaTilingData& t, uint32_t core) {
    std::vector<TaskInfo> out;
    for (uint32_t k = 0; k < t.tasksPerCore && core < t.blockDim; ++k) {
        const uint32_t id = PasaCoreTaskId(t, core, k);
        if (id == t.totalTasks) break;
        const PasaTaskCoord c = PasaDecodeTaskId(t, id);
        TaskInfo ti{};
        ti.b = c.b;
        ti.n = c.n;
        ti.heads = c.heads;
        ti.split = c.split;
        ti.row0 = c.row0;
        ti.rows = c.tileRows / c.heads;  // query positions per head: 1 where the rows are packed heads
        ti.kvBlock0 = ti.split * t.kvBlocksPerSplit;
        ti.kvBlockEnd = std::min(ti.kvBlock0 + t.kvBlocksPerSplit, t.numKvBlocks);
        out.push_back(ti);
    }
    return out;
}

void CombineRows(const PasaTilingData& t, uint32_t aiv, uint64_t* first, uint64_t* last) {
    if (t.kvSplits <= 1) { *first = *last = 0; return; }
    PasaCombineRange(t, aiv, first, last);
}

}  // namespace pasa
