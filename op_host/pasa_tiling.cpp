// Host tiling of the PASA fused-attention kernel (plain C++17, no CANN header), split by concern as the kernel
// reads it: the call's shapes and options, the allocation's constants, the blocks and the on-chip plan, the
// masks, the work split over the AI cores, and the GM workspace. What an allocation needs is read from its
// policy's traits (KernelAllocations(), op_kernel/pasa_allocation.h). See op_host/pasa_tiling.h for the interface
// and op_kernel/pasa_tiling_data.h for the struct.
#include "pasa_tiling.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

#include "../op_kernel/pasa_buffer_plan.h"

namespace pasa {
namespace {

using pasa_kernel::BLOCK_KV;
using pasa_kernel::FRACTAL;
using pasa_kernel::Handshake;
using pasa_kernel::Prepass;
using pasa_kernel::ScaleRule;

constexpr uint64_t kWsAlign = 512;  // GM workspace regions start on 512-byte boundaries
// The stacked AIC <-> AIV handshake (op_kernel/pasa_cube_stage.h): KV blocks per stack (logical KV tiles of
// kvStack x 128 keys, ramped at a task's ends, PasaStack) and stacks of S computed ahead, the first that fits the
// UB (the AIVs keep per-slot row vectors), fastest first under the calibrated cost model (docs/cost_model.md,
// "The handshake search"): 256-key tiles 3 ahead, then shorter rings. The per-block conversation (pasa_rs) hands
// over single blocks, one ahead: its AIC hears the AIVs' verdict on every block before that block's P V.
struct Ring {
    uint32_t kvStack, preLaunch;
};
constexpr Ring kStackedRings[] = {{2, 3}, {1, 3}, {2, 2}, {1, 2}};
constexpr Ring kPerBlockRing = {1, 1};

uint64_t AlignUp(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }
uint64_t CeilDiv(uint64_t a, uint64_t b) { return (a + b - 1) / b; }

[[noreturn]] void Bad(const std::string& msg) { throw std::invalid_argument(msg); }

template <class Policy>
AllocationTraits TraitsOf(uint32_t tilingKey) {
    return AllocationTraits{pasa_kernel::TraitsOf<Policy>(), Policy::NAME, tilingKey};
}

// ---- the call ---------------------------------------------------------------------------------------------------

// The sizes of the call, read from the tensors' shapes in their layout.
struct Shapes {
    uint32_t layout;  // PASA_LAYOUT_*
    int64_t B, N, NKV, S1, S2, D;
    bool paged;  // key and value are PageAttention caches
    int64_t T;   // TND: the query's rows (0 otherwise)
};

// FIA's Q_S == 1 branch (IncreFlashAttention), where actual_seq_lengths, the sparse mode and the tokens have no
// effect; TND has none: a batch of one query row keeps its band.
bool DecodeBranch(const Shapes& s) { return s.S1 == 1 && s.layout != PASA_LAYOUT_TND; }

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

// TND's cumulative lengths `name`: non-negative, non-decreasing, the last at most `rows` (the tensor's T).
void CheckCumulative(const char* name, const std::vector<int64_t>& v, int64_t rows) {
    int64_t prev = 0;
    for (size_t i = 0; i < v.size(); ++i) {
        if (v[i] < prev)
            Bad(std::string(name) + " must be cumulative (non-decreasing, from 0) with input_layout TND, got entry " +
                std::to_string(i) + " = " + std::to_string(v[i]) + " after " + std::to_string(prev));
        prev = v[i];
    }
    if (prev > rows)
        Bad(std::string(name) + "'s last entry " + std::to_string(prev) + " exceeds the tensor's " +
            std::to_string(rows) + " rows (input_layout TND)");
}

// TND (pasa_tiling_data.h): query (T, N, D); key/value (T_kv, Nkv, D) with cumulative actual_seq_lengths_kv, or the
// caches of a block table with each batch's own key length. B is the number of lengths; S1 the most rows a batch's
// tiles cover (the last batch's run to T), S2 the longest key sequence.
void ReadTndShapes(const TilingInput& in, Shapes& s) {
    const auto& q = in.queryShape;
    const auto& k = in.keyShape;
    const std::vector<int64_t>& lq = in.actualSeqLengths;
    const std::vector<int64_t>& lk = in.actualSeqLengthsKv;
    if (q[1] != s.N) Bad("num_heads must equal query's N dim (input_layout TND)");
    s.T = q[0];
    s.D = q[2];
    s.B = (int64_t)lq.size();
    if (lq.empty()) Bad("actual_seq_lengths is required with input_layout TND (cumulative, one entry per batch)");
    if (lk.size() != lq.size())
        Bad("actual_seq_lengths_kv must have one entry per batch, as actual_seq_lengths (input_layout TND)");
    CheckCumulative("actual_seq_lengths", lq, s.T);
    s.S1 = s.T - lq[s.B - 1];
    for (int64_t b = 0, start = 0; b < s.B; start = lq[b++]) s.S1 = std::max(s.S1, lq[b] - start);
    if (s.paged) {
        s.S2 = PagedKeyLength(in, s.B, s.NKV, s.D);
        for (int64_t x : lk)
            if (x < 0 || x > s.S2)
                Bad("actual_seq_lengths_kv entries must be in [0, " + std::to_string(s.S2) +
                    "] with a block_table (each batch's own key length, at most a table row's keys)");
        return;
    }
    if (k[1] != s.NKV) Bad("num_key_value_heads must equal key's N dim (input_layout TND)");
    if (k[2] != s.D) Bad("key's head dim must equal query's");
    CheckCumulative("actual_seq_lengths_kv", lk, k[0]);
    s.S2 = 0;
    for (int64_t b = 0, start = 0; b < s.B; start = lk[b++]) s.S2 = std::max(s.S2, lk[b] - start);
}

Shapes ReadShapes(const TilingInput& in) {
    Shapes s{};
    const std::string& L = in.inputLayout;
    if (L == "BNSD") s.layout = PASA_LAYOUT_BNSD;
    else if (L == "BSH") s.layout = PASA_LAYOUT_BSH;
    else if (L == "BSND") s.layout = PASA_LAYOUT_BSND;
    else if (L == "TND") s.layout = PASA_LAYOUT_TND;
    else Bad("input_layout must be one of \"BNSD\", \"BSH\", \"BSND\", \"TND\", got \"" + L + "\"");
    const size_t rank = s.layout == PASA_LAYOUT_BSH || s.layout == PASA_LAYOUT_TND ? 3 : 4;
    auto checkRank = [&](const char* name, const std::vector<int64_t>& shape) {
        if (shape.size() != rank) Bad(std::string(name) + " must be " + std::to_string(rank) + "-D for input_layout " + L);
        for (int64_t v : shape) if (v < 0) Bad(std::string(name) + " has a negative dimension");
    };
    s.paged = !in.blockTableShape.empty() || in.blockSize != 0;
    checkRank("query", in.queryShape);
    if (!s.paged) {
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
    s.N = N;
    s.NKV = NKV;
    if (s.layout == PASA_LAYOUT_TND) {
        ReadTndShapes(in, s);
        B = s.B; S1 = s.S1; S2 = s.S2; D = s.D;
    } else {
        if (s.layout == PASA_LAYOUT_BSH) {
            B = q[0]; S1 = q[1];
            if (q[2] % N) Bad("num_heads must divide query's hidden size H (input_layout BSH)");
            D = q[2] / N;
        } else if (s.layout == PASA_LAYOUT_BSND) {
            B = q[0]; S1 = q[1]; D = q[3];
            if (q[2] != N) Bad("num_heads must equal query's N dim (input_layout BSND)");
        } else {
            B = q[0]; S1 = q[2]; D = q[3];
            if (q[1] != N) Bad("num_heads must equal query's N dim (input_layout BNSD)");
        }
        if (s.paged) {
            S2 = PagedKeyLength(in, B, NKV, D);
        } else {
            if (s.layout == PASA_LAYOUT_BSH) {
                if (k[2] != NKV * D) Bad("key's hidden size must be num_key_value_heads * D (input_layout BSH)");
                S2 = k[1];
            } else if (s.layout == PASA_LAYOUT_BSND) {
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
    }
    // GM rows are read through Nd2Nz (srcDValue <= 65535 elements)
    if ((s.layout != PASA_LAYOUT_BNSD && (N * D > 65535 || NKV * D > 65535)))
        Bad("num_heads * D must be <= 65535 for input_layout BSH/BSND/TND (one query row of all heads)");
    if (s.paged && in.keyShape.size() == 3 && NKV * D > 65535)
        Bad("num_key_value_heads * D must be <= 65535 for key/value caches (num_blocks, block_size, H) (one key row "
            "of all heads)");
    if (B < 1 || S1 < 1 || S2 < 1) Bad("query: B and S1, key: S2 must be >= 1 (empty inputs are handled by the caller)");
    if (D < 16 || D > 256 || D % 16) Bad("head dim D must be a multiple of 16 in [16, 256], got " + std::to_string(D));
    if (S1 > (1 << 24) || S2 > (1 << 24)) Bad("sequence lengths must be <= 2^24");
    s.B = B; s.N = N; s.NKV = NKV; s.S1 = S1; s.S2 = S2; s.D = D;
    return s;
}

// The options: scale, beta, the allocation, the sparse mode and its mask, the valid lengths, the platform.
const AllocationTraits& ReadOptions(const TilingInput& in, const Shapes& s) {
    if (!(std::isfinite(in.scale) && in.scale > 0)) Bad("scale must be a positive finite number");
    if (!(in.beta < 1.0) || std::isnan(in.beta)) Bad("beta must be negative (default) or in [0, 1)");
    const AllocationTraits& alloc = FindAllocation(in.precision);
    if (in.sparseMode < 0 || in.sparseMode > 4) Bad("sparse_mode must be one of 0, 1, 2, 3, 4");
    const bool hasMask = !in.maskShape.empty();
    if (hasMask) {
        if (in.sparseMode > 1) Bad("atten_mask: pass no mask for sparse_mode 2, 3, 4 (the band is computed from indices)");
        const auto& m = in.maskShape;
        if (m.size() != 4 || !(m[0] == 1 || m[0] == s.B) || !(m[1] == 1 || m[1] == s.N) || m[2] < s.S1 || m[3] < s.S2)
            Bad("atten_mask must be 4-D (1|B, 1|N, MS1 >= S1, MS2 >= S2)");
    } else if (in.sparseMode == 1) {
        Bad("atten_mask is required for sparse_mode 1");
    }
    if (!DecodeBranch(s) && (in.sparseMode == 4 || (in.sparseMode == 0 && hasMask)) && in.preTokens + in.nextTokens < 0)
        Bad("pre_tokens + next_tokens must be >= 0 where the band applies");
    auto checkLens = [&](const char* name, const std::vector<int64_t>& v, int64_t hi) {
        if (v.empty()) return;
        if ((int64_t)v.size() != s.B) Bad(std::string(name) + " must have B entries (expand a single value first)");
        for (int64_t x : v) if (x < 0 || x > hi) Bad(std::string(name) + " entries must be in [0, " + std::to_string(hi) + "]");
    };
    if (s.layout != PASA_LAYOUT_TND) {  // TND's were checked with its shapes (cumulative)
        checkLens("actual_seq_lengths", in.actualSeqLengths, s.S1);
        checkLens("actual_seq_lengths_kv", in.actualSeqLengthsKv, s.S2);
    } else if (hasMask) {
        Bad("input_layout TND takes no atten_mask: sparse_mode 0 without a mask, or 2, 3, 4 (the band from indices)");
    }
    const auto& sink = in.learnableSinkShape;
    if (!sink.empty() && (sink.size() != 1 || sink[0] != s.N))
        Bad("learnable_sink must be 1-D (num_heads,) = (" + std::to_string(s.N) + ",): one logit per query head");
    const PlatformInfo& pl = in.platform;
    if (pl.aicNum < 1 || pl.aivNum != 2 * pl.aicNum) Bad("platform: aivNum must be 2 * aicNum >= 2 (KERNEL_TYPE_MIX_AIC_1_2)");
    return alloc;
}

// ---- the tiling, concern by concern -----------------------------------------------------------------------------

// Sizes and element strides of query/output and key/value (pasa_tiling_data.h's index conventions).
void FillShapes(PasaTilingData& t, const TilingInput& in, const Shapes& s) {
    const int64_t B = s.B, N = s.N, NKV = s.NKV, S1 = s.S1, S2 = s.S2, D = s.D;
    t.batch = B; t.numHeads = N; t.numKvHeads = NKV; t.groupSize = N / NKV;
    t.seqQ = S1; t.seqKv = S2; t.headDim = D; t.layout = s.layout;
    if (s.layout == PASA_LAYOUT_BNSD) {
        t.qBatchStride = N * S1 * D; t.qHeadStride = S1 * D; t.qRowStride = D;
        t.kvBatchStride = NKV * S2 * D; t.kvHeadStride = S2 * D; t.kvRowStride = D;
    } else if (s.layout == PASA_LAYOUT_TND) {  // (T, N, D): a batch's rows are found by their token index
        t.qBatchStride = 0; t.qHeadStride = D; t.qRowStride = N * D;
        t.kvBatchStride = 0; t.kvHeadStride = D; t.kvRowStride = NKV * D;
        t.queryTokens = s.T;
    } else {  // BSH and BSND share the memory order (B, S, N, D)
        t.qBatchStride = S1 * N * D; t.qHeadStride = D; t.qRowStride = N * D;
        t.kvBatchStride = S2 * NKV * D; t.kvHeadStride = D; t.kvRowStride = NKV * D;
    }
    if (s.paged) {  // the caches' strides; the page a row sits in comes from the table
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
    t.hasActualSeqQ = !DecodeBranch(s) && !in.actualSeqLengths.empty();  // FIA ignores them for decode
    t.hasActualSeqKv = !in.actualSeqLengthsKv.empty();
    t.hasSink = !in.learnableSinkShape.empty();
}

// The allocation's tiling key and constants: the scale as its rule applies it, and K' one strip wider where the
// family subtracts its row shift through an augmented column.
void FillAllocation(PasaTilingData& t, const AllocationTraits& a, const TilingInput& in) {
    t.precision = a.tilingKey;
    t.scale = (float)in.scale;
    t.kShiftCols = t.headDim + a.keyExtraCols;
    if (a.scale == ScaleRule::IN_SHIFT_MATRIX) {  // PASA: M = (I - beta/n J) scale, its entries rounded to FP16
        double beta = in.beta < 0 ? DefaultBeta(BLOCK_KV, in.scale) : in.beta;
        double diag, off;
        ShiftEntries(beta, BLOCK_KV, in.scale, &diag, &off);
        t.beta = (float)beta;
        t.invariance = (float)(beta / (1.0 - beta));
        t.shiftDiag = (float)diag;
        t.shiftOff = (float)off;
    } else if (a.scale == ScaleRule::POW2_AND_RHO) {  // blockwise.row_shift_constants: e = min(floor(log2 scale),
        // 0), rho = scale / 2^e; the reshift threshold RESHIFT_AT in units of Q^ K times 2^floor(log2 rho)
        using Rs = pasa_kernel::RowShiftedFamily;
        const int eScale = (int)std::floor(std::log2(in.scale));
        const int e = std::min(eScale, 0);
        const double pow2 = std::ldexp(1.0, e);
        t.rsScalePow2 = (float)pow2;
        t.rsRho = (float)(in.scale / pow2);
        t.rsReshiftAt = (float)std::ldexp(Rs::RESHIFT_AT, e - eScale);
        t.rsRelevance = (float)(Rs::RESHIFT_RELEVANCE * pow2 / in.scale);
    }  // ON_SCORES (FlashAttention): beta, I, M's entries and the rs constants stay 0; any scale is accepted
    if (a.sumsOnCube)  // the frame's largest move down, in units of Q K
        t.frameDropLimit = (float)(pasa_kernel::FramedFamily::FRAME_DROP_LIMIT / in.scale);
}

// The on-chip buffers of a query block of bq rows (pasa_buffer_plan.h, what the kernel allocates), the head-dim
// chunk baseK of the S' products, and the L0 halves.
struct Plan {
    uint32_t blockQ, baseK;
    uint64_t ub, l1, l0a, l0b, l0c;
    uint32_t scoreRows;  // rows of an S' tile in L0C (0: none fits)
};

Plan MakePlan(uint32_t bq, uint32_t d, const AllocationTraits& a, uint32_t ring) {
    Plan p{};
    p.blockQ = bq;
    p.ub = pasa_kernel::PlanAivUb(bq / 2, d, ring, a).Total();
    const uint32_t cols = d + a.keyExtraCols;
    p.l1 = pasa_kernel::PlanAicL1(bq, d, a).Total();
    // L0A/L0B: two halves each (fp32_frame's L0A: the task's Q and pieces of P, PlanAicL0a); the head-dim chunk of
    // S' = Q K'^T fits both operands in one. pasa_rs: over D + 16 columns, so that for D <= 112 the augmented column
    // is in the same Mmad call as Q^ K'^T and psi is subtracted before the one rounding to FP32 (golden:
    // FP32(Q^ K'^T - psi)).
    p.baseK = std::min<uint32_t>(cols, pasa_kernel::L0_HALF_BYTES / (2 * std::max<uint32_t>(bq, BLOCK_KV))) / 16 * 16;
    p.l0a = pasa_kernel::PlanAicL0a(bq, d, a).Total();
    p.l0b = 2 * pasa_kernel::L0_HALF_BYTES;
    const pasa_kernel::AicL0cPlan l0c = pasa_kernel::PlanAicL0c(bq, d, a);
    p.l0c = l0c.Total();
    p.scoreRows = l0c.scoreRows;
    return p;
}

// UB and L1 as TPipe offers them: the physical sizes less the toolchain's reserves (pasa_tiling.h). The key
// centring (pasa_centre_keys.h) borrows the AIV's S' and P queues for one 16-column strip of a KV block
// (128 x 16 FP16) in and out: they hold it from 16 rows per AIV on.
bool Fits(const Plan& p, const PlatformInfo& pl, uint32_t d, const AllocationTraits& a) {
    const uint64_t ub = pl.ubSize > kUbReservedBytes ? pl.ubSize - kUbReservedBytes : 0;
    const uint64_t l1 = pl.l1Size > kL1ReservedBytes ? pl.l1Size - kL1ReservedBytes : 0;
    const uint64_t strip = (uint64_t)BLOCK_KV * FRACTAL * 2, rm = p.blockQ / 2;
    if (a.prepass == Prepass::CENTRED_KEYS && rm * BLOCK_KV * 2 < strip) return false;
    // L0C: S' (bq x n), P V (bq x D) and the pre-pass (n x 128) each fit a half; where the sums stay on the cube,
    // the accumulator and at least an S' tile of 16 rows (none where L0A cannot hold the task's Q, PlanAicL0c)
    const bool l0cFits = a.sumsOnCube ? p.scoreRows > 0
                                      : (uint64_t)p.blockQ * d * 4 <= pasa_kernel::L0C_HALF_BYTES &&
                                            (uint64_t)p.blockQ * BLOCK_KV * 4 <= pasa_kernel::L0C_HALF_BYTES;
    return p.ub <= ub && p.l1 <= l1 && p.l0a <= pl.l0aSize && p.l0b <= pl.l0bSize && p.l0c <= pl.l0cSize &&
           p.baseK >= 16 && l0cFits;
}

// The largest query block whose plan fits (up to the family's MAX_BLOCK_Q), with the first handshake of
// kStackedRings that fits beside it (the AIVs keep row vectors of every block slot; at most MAX_SLOT_RING slots),
// else single blocks one ahead, so that the handshake never costs query rows (a smaller query block re-reads K and
// V). A pinned handshake (the cost model's search) stands in for the list. The work split may shorten the stacks
// (SplitWork).
Plan ChooseBlocks(PasaTilingData& t, const AllocationTraits& a, const Shapes& s, const PlatformInfo& pl,
                  const HandshakePin& pin) {
    std::vector<Ring> rings;  // fastest first
    if (a.handshake == Handshake::STACKED) {
        if (pin.kvStack > 0) rings.push_back({pin.kvStack, pin.preLaunch});
        else rings.assign(std::begin(kStackedRings), std::end(kStackedRings));
    }
    rings.push_back(kPerBlockRing);
    // A query block beyond 128 rows (fp32_frame's) only where it makes fewer tasks than 128 rows do: with no fewer,
    // K and V are read as often and the AIVs take their rows in more tiles. fp32_frame also takes 96 rows, where the
    // AIVs' UB holds 48 rows of O but not 64 (D = 176 - 240). And where its [O | l] stays in L0C, a block of more
    // than 64 rows only where S leaves L0C beside it in tiles of at least MIN_SCORE_ROWS rows: in chunks of 16 rows
    // (192 rows at D = 112 - 144) S takes 6 - 12 Mmad and Fixpipe instructions per KV block, and the AIC's cube, not
    // the AIVs, bounds the task (docs/cost_model.md).
    const uint64_t headRows = (uint64_t)s.S1 * (DecodeBranch(s) && s.N > s.NKV ? s.N / s.NKV : 1);
    for (uint32_t bq : {256u, 128u, 96u, 64u, 32u, 16u}) {
        if (bq > a.maxBlockQ || (bq == 96 && !a.sumsOnCube)) continue;
        if (bq > BLOCK_KV && CeilDiv(headRows, bq) >= CeilDiv(headRows, BLOCK_KV)) continue;
        if (a.sumsOnCube && bq > 64 && pasa_kernel::PlanAicL0c(bq, s.D, a).scoreRows < pasa_kernel::MIN_SCORE_ROWS)
            continue;
        for (const Ring& r : rings) {
            t.kvStack = std::min<uint32_t>(r.kvStack, CeilDiv(s.S2, BLOCK_KV));
            t.preLaunch = r.preLaunch;
            const Plan plan = MakePlan(bq, s.D, a, PasaSlotRing(t));
            if (!Fits(plan, pl, s.D, a) || PasaSlotRing(t) > pasa_kernel::MAX_SLOT_RING) continue;
            t.blockQ = plan.blockQ;
            t.blockKv = BLOCK_KV;
            t.baseK = plan.baseK;
            // Decode with GQA packs a KV head's group of query heads into the rows of its tasks
            // (pasa_tiling_data.h), so K and V are read once per group; groups larger than blockQ take several
            // query blocks.
            t.packedHeads = DecodeBranch(s) && t.groupSize > 1 ? t.groupSize : 1;
            t.numQBlocks = CeilDiv((uint64_t)s.S1 * t.packedHeads, t.blockQ);
            t.numKvBlocks = CeilDiv(s.S2, BLOCK_KV);
            return plan;
        }
    }
    Bad("platform: no block plan fits the on-chip memories for this head dim");
}

// The user mask's strides (bytes) and the band from indices (modes 0 with a mask, 2, 3, 4; not for decode).
void FillMasks(PasaTilingData& t, const TilingInput& in, const Shapes& s) {
    const bool hasMask = !in.maskShape.empty();
    t.sparseMode = in.sparseMode;
    t.hasMask = hasMask;
    t.bandMode = (!DecodeBranch(s) && (in.sparseMode >= 2 || (in.sparseMode == 0 && hasMask))) ? 1 : 0;
    t.preTokens = in.preTokens; t.nextTokens = in.nextTokens;
    if (hasMask) {
        const auto& m = in.maskShape;
        t.maskBatch = m[0]; t.maskHeads = m[1];
        t.maskRowStride = m[3];
        t.maskHeadStride = m[1] == 1 ? 0 : m[2] * m[3];
        t.maskBatchStride = m[0] == 1 ? 0 : m[1] * m[2] * m[3];
    }
}

// Work split. Prefill: one task per (b, n, q block); decode with GQA: per (b, kv head, q block of the group's
// heads). Decode (S1 == 1) with fewer tasks than cores: split the KV blocks so that every core gets work;
// partials are combined through lse. The pre-pass items (b, kv head, KV block) are split over the same cores.
void SplitWork(PasaTilingData& t, const AllocationTraits& a, const Shapes& s, const PlatformInfo& pl) {
    const uint64_t baseTasks = (uint64_t)s.B * (s.N / t.packedHeads) * t.numQBlocks;
    t.kvSplits = 1;
    if (DecodeBranch(s) && baseTasks < pl.aicNum && t.numKvBlocks > 1) {
        // The split count that minimises the busiest core's work, ceil(tasks/cores) * (blocks per split
        // + 1), the +1 standing for a task's fixed cost (Q load, partial write, its share of the
        // combine); ties go to fewer splits. At most 64 splits, because the combine
        // reduces the lse values of a row in one repeat of 64 FP32 lanes.
        uint64_t best = ~0ull;
        for (uint32_t n = 1; n <= std::min<uint32_t>(t.numKvBlocks, 64); ++n) {
            const uint32_t per = CeilDiv(t.numKvBlocks, n);
            const uint32_t splits = CeilDiv(t.numKvBlocks, per);
            const uint64_t cost = CeilDiv(baseTasks * splits, pl.aicNum) * (per + 1ull);
            if (cost < best) { best = cost; t.kvBlocksPerSplit = per; t.kvSplits = splits; }
        }
    } else {
        t.kvBlocksPerSplit = t.numKvBlocks;
    }
    // A task has at most kvBlocksPerSplit blocks: no longer stacks, and no more stacks ahead than it can have
    // after its first (preLaunch 1 and 2 run two stacks alike).
    if (a.handshake == Handshake::STACKED) {
        t.kvStack = std::min(t.kvStack, t.kvBlocksPerSplit);
        const uint32_t stacks = PasaStacks(t, t.kvBlocksPerSplit);
        t.preLaunch = std::max<uint32_t>(1, std::min<uint32_t>(t.preLaunch, stacks - 1));
    }
    const uint64_t tasks = baseTasks * t.kvSplits;
    if (tasks > 0xFFFFFFFFull) Bad("query: too many tasks (B * N * ceil(S1/blockQ) must fit in 32 bits)");
    t.totalTasks = tasks;
    t.tasksPerCore = CeilDiv(tasks, pl.aicNum);
    t.blockDim = CeilDiv(tasks, t.tasksPerCore);
    t.prepassItems = a.prepass != Prepass::NONE ? (uint64_t)s.B * s.NKV * t.numKvBlocks : 0;
    t.prepassPerCore = CeilDiv(t.prepassItems, t.blockDim);
    t.combineRowsPerAiv = t.kvSplits > 1 ? CeilDiv((uint64_t)s.B * s.N * s.S1, 2ull * t.blockDim) : 0;
}

// GM workspace: the status words, the pre-pass's outputs (K', and the key centring's column sums, u and K^),
// every core's slots (the S', P and PV rings of PasaSlotRing block slots each; M or L for the pre-pass; the
// per-block conversation's own slots), the split-KV partials; regions 512-byte aligned.
void LayoutWorkspace(PasaTilingData& t, const AllocationTraits& a, const Shapes& s) {
    const uint64_t B = s.B, NKV = s.NKV, D = s.D;
    uint64_t off0 = 0;
    t.wsStatusOffset = off0;
    off0 = AlignUp(off0 + 2ull * t.blockDim * 32, kWsAlign);
    t.wsKShiftOffset = off0;
    if (a.prepass != Prepass::NONE)
        off0 = AlignUp(off0 + B * NKV * t.numKvBlocks * BLOCK_KV * t.kShiftCols * 2, kWsAlign);
    t.wsKSumOffset = off0;
    t.wsCentreOffset = off0;
    if (a.prepass == Prepass::CENTRED_KEYS) {
        t.wsCentreOffset = AlignUp(off0 + (uint64_t)t.prepassItems * D * 4, kWsAlign);
        off0 = AlignUp(t.wsCentreOffset + B * NKV * 2 * t.numKvBlocks * D * 2, kWsAlign);
    }
    const uint64_t segmentBytes = (uint64_t)t.blockQ * (D + a.valueExtraCols) * 4;  // [O | l] of a segment
    t.wsScoreSlot = (uint64_t)t.blockQ * BLOCK_KV * a.scoreBytes;
    t.wsProbSlot = (uint64_t)t.blockQ * BLOCK_KV * 2;
    t.wsPvSlot = a.sumsOnCube ? segmentBytes : (uint64_t)t.blockQ * D * a.stateBytes;
    t.wsCoreOffset = off0;
    // M (PASA) or the ones matrix L (the key centring): n x n FP16, written by the core's AIVs for its pre-pass;
    // or the column of ones of the V tiles, n x 16 FP16
    const uint64_t shiftSlot = a.prepass != Prepass::NONE ? (uint64_t)BLOCK_KV * BLOCK_KV * 2
                                                          : (uint64_t)BLOCK_KV * a.valueExtraCols * 2;
    uint64_t coreBytes = PasaSlotRing(t) * (t.wsScoreSlot + t.wsProbSlot + t.wsPvSlot) + shiftSlot;
    auto slot = [&](uint64_t bytes) {  // pasa_tiling_data.h, each 512-byte aligned
        coreBytes = AlignUp(coreBytes, kWsAlign);
        const uint64_t at = coreBytes;
        coreBytes += bytes;
        return at;
    };
    if (a.handshake == Handshake::PER_BLOCK_ROUNDS) {
        t.wsQhatSlot = slot((uint64_t)t.blockQ * D * 2);
        t.wsShiftColSlot = slot(2ull * t.blockQ * FRACTAL * 2);  // one per block parity
        t.wsCentreProdSlot = slot(2ull * t.kvBlocksPerSplit * t.blockQ * 4);
        t.wsScore32Slot = slot((uint64_t)t.blockQ * BLOCK_KV * 4);
        t.wsRequestSlot = slot(4 * 64);
    }
    if (a.sumsOnCube) {
        t.wsFinalSegmentSlot = slot(segmentBytes);
        t.wsVerdictSlot = slot((2ull * t.preLaunch + 2) * 64);
    }
    t.wsCoreStride = AlignUp(coreBytes, kWsAlign);
    off0 = AlignUp(off0 + t.wsCoreStride * t.blockDim, kWsAlign);
    t.wsPartialOffset = off0;
    if (t.kvSplits > 1) {
        const uint64_t rowsAll = B * s.N * s.S1;
        off0 = AlignUp(off0 + rowsAll * t.kvSplits * D * 4, kWsAlign);
        t.wsPartialLseOffset = off0;
        off0 = AlignUp(off0 + rowsAll * t.kvSplits * 4, kWsAlign);
    } else {
        t.wsPartialLseOffset = off0;
    }
    t.workspaceBytes = off0;
}

}  // namespace

const std::vector<AllocationTraits>& KernelAllocations() {
#define PASA_ALLOCATION_TRAITS(tilingKey, Policy) TraitsOf<pasa_kernel::Policy>(tilingKey),
    static const std::vector<AllocationTraits> table = {PASA_KERNEL_ALLOCATIONS(PASA_ALLOCATION_TRAITS)};
#undef PASA_ALLOCATION_TRAITS
    return table;
}

const AllocationTraits& FindAllocation(const std::string& precision) {
    std::string names;
    for (const AllocationTraits& a : KernelAllocations()) {
        if (precision == a.name) return a;
        names += std::string(names.empty() ? "" : ", ") + "\"" + a.name + "\"";
    }
    Bad("precision must be one of " + names + ", got \"" + precision + "\"");
}

TilingResult ComputeTiling(const TilingInput& in) {
    const Shapes s = ReadShapes(in);
    const AllocationTraits& a = ReadOptions(in, s);
    const PlatformInfo& pl = in.platform;
    TilingResult r{};
    PasaTilingData& t = r.data;
    FillShapes(t, in, s);
    FillAllocation(t, a, in);
    Plan plan = ChooseBlocks(t, a, s, pl, in.handshakePin);
    FillMasks(t, in, s);
    SplitWork(t, a, s, pl);
    plan = MakePlan(t.blockQ, s.D, a, PasaSlotRing(t));  // the ring SplitWork may have shortened
    LayoutWorkspace(t, a, s);
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
