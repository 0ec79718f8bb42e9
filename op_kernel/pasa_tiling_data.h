// PasaTilingData: the plain, standard-layout tiling struct shared by the host tiling
// (op_host/pasa_tiling.cpp) and the kernel (GET_TILING_DATA_WITH_STRUCT in
// op_kernel/pasa_fused_attention.cpp). Fixed-width fields only, no pointers, no CANN types:
// the host copies it byte for byte into the kernel's tiling buffer.
//
// Index conventions used everywhere (kernel, tiling, tests):
//   element offset of query/output row s of (batch b, head n):  b*qBatchStride + n*qHeadStride + s*qRowStride
//   element offset of key/value row s of (batch b, kv head h):   b*kvBatchStride + h*kvHeadStride + s*kvRowStride
//     PageAttention (hasBlockTable): blockTable[b][s / pageSize]*kvPageStride + h*kvHeadStride
//                                    + (s % pageSize)*kvRowStride, blockTable int32 (B, maxBlocksPerSeq)
//   softmax_lse (FP32, (B, N, S1)):                               (b*numHeads + n)*seqQ + s
//   TND (layout PASA_LAYOUT_TND: query/output (T, N, D), key/value (T_kv, Nkv, D) or the caches): batch b is
//     the rows [start_b, start_b + len_b) of the token dimension, from FIA's cumulative actual_seq_lengths (and,
//     without a block table, cumulative actual_seq_lengths_kv; with one, each batch's own key length): the batch
//     strides are 0 and a row's position s becomes the token index start_b + s (pasa_common.h Task::qStart,
//     Task::kvStart); softmax_lse is (T, N): (start_b + s)*numHeads + n. Rows past the last cumulative query
//     length are padding (out 0, lse +inf), written by the last batch's tasks: that batch's tiles run to T.
// A task is (b, n, q block, kv split); task id t = ((b*numHeads + n)*numQBlocks + qBlock)*kvSplits + split.
// Decode with GQA (S1 == 1, packedHeads = N/Nkv > 1) packs the query heads of a KV head into the rows of its
// tasks, so that K and V are read once per KV head and split, not once per query head: a task is
// (b, kv head h, q block, kv split), t = ((b*numKvHeads + h)*numQBlocks + qBlock)*kvSplits + split, and its
// row i is query head h*packedHeads + qBlock*blockQ + i (groups larger than blockQ take several q blocks).
// Consecutive rows are then heads, qHeadStride apart in query/output, and consecutive in softmax_lse.
// AI core c (0 <= c < blockDim) runs at most tasksPerCore tasks, dealt in rounds (PasaCoreTaskId).
// The K' pre-pass item id p = (b*numKvHeads + h)*numKvBlocks + j; core c runs items
// [c*prepassPerCore, min((c+1)*prepassPerCore, prepassItems)).
// With kvSplits > 1 (decode), the final (b, n, s) rows are combined by AIV w (0 <= w < 2*blockDim) from
// rows [w*combineRowsPerAiv, min((w+1)*combineRowsPerAiv, B*N*S1)).
#ifndef PASA_TILING_DATA_H
#define PASA_TILING_DATA_H

#include <cstdint>

// input_layout codes
#define PASA_LAYOUT_BNSD 0
#define PASA_LAYOUT_BSH 1
#define PASA_LAYOUT_BSND 2
#define PASA_LAYOUT_TND 3

struct PasaTilingData {
    // ---- shapes ----
    uint32_t batch;            // B
    uint32_t numHeads;         // N (query heads)
    uint32_t numKvHeads;       // Nkv, divides N
    uint32_t groupSize;        // N / Nkv
    uint32_t seqQ;             // S1 (max over batches; TND: the most rows a batch's tiles cover)
    uint32_t seqKv;            // S2 (max over batches)
    uint32_t headDim;          // D, a multiple of 16, <= 256
    uint32_t layout;           // PASA_LAYOUT_*
    // ---- strides, in elements ----
    uint64_t qBatchStride, qHeadStride, qRowStride;     // query and attention_out (same layout)
    uint64_t kvBatchStride, kvHeadStride, kvRowStride;  // key and value
    // ---- PASA constants ----
    float scale;               // softmax scale (PASA: folded into M; FlashAttention: S times scale on the AIV)
    float beta;                // the shift coefficient actually used
    float invariance;          // I = beta / (1 - beta), in float; the kernel rounds it to the state type
    float shiftDiag;           // M's diagonal (1 - beta/n)*scale, already rounded to FP16 (exact in float)
    float shiftOff;            // M's off-diagonal -beta/n*scale, already rounded to FP16
    uint32_t precision;        // the allocation's tiling key (pasa_allocation.h PASA_KERNEL_ALLOCATIONS)
    // ---- row-shifted PASA constants ("pasa_rs"; 0 for the other allocations) ----
    float rsScalePow2;         // 2^e, e = min(floor(log2 scale), 0): Q^ = FP16(Q 2^e), never larger than Q
    float rsRho;               // rho = scale / 2^e ([1, 2) below scale 2), rounded to FP32 from the double scale
    float rsRelevance;         // RESHIFT_RELEVANCE 2^e / scale, rounded to FP32: a block below m - this is not reshifted
    float rsReshiftAt;         // RESHIFT_AT / 2^floor(log2 rho): a row whose block max lies further from 0 is reshifted
    // ---- framed FlashAttention constants ("fp32_frame"; 0 for the other allocations) ----
    float frameDropLimit;      // FRAME_DROP_LIMIT / scale rounded to FP32 (units of Q K): the most a frame moves down
    // ---- blocks ----
    uint32_t blockQ;           // query rows per task (128, or 64 for D > 128; fp32_frame up to 256)
    uint32_t blockKv;          // KV block length n (128)
    uint32_t numQBlocks;       // ceil(S1 / blockQ)
    uint32_t numKvBlocks;      // ceil(S2 / blockKv)
    uint32_t baseK;            // head-dim chunk of one L0A/L0B buffer (<= 128)
    // ---- the AIC <-> AIV handshake (op_kernel/pasa_cube_stage.h) ----
    uint32_t kvStack;          // KV blocks per handshake (a stack; PasaStack ramps a task's first and last ones):
                               // the AIC signals S' once per stack, the AIVs P
    uint32_t preLaunch;        // stacks of S' the AIC computes ahead of the P V it waits for; its slots rotate
                               // over preLaunch + 1 stacks (pasa_rs: kvStack 1, preLaunch 1, its own conversation)
    uint32_t kShiftCols;       // columns of a K' row in the workspace: D, or D + 16 for pasa_rs (the column of 64)
    // ---- masks ----
    uint32_t sparseMode;       // 0..4 (FIA)
    uint32_t hasMask;          // 1: attenMask (uint8/bool, 1 = masked out) is read, modes 0 and 1
    uint32_t bandMode;         // 0 none, 1 band/causal from indices (modes 0 with mask, 2, 3, 4)
    int64_t preTokens, nextTokens;  // FIA's, used by modes 0 (with mask) and 4
    uint32_t maskBatch, maskHeads;  // 1 or B, 1 or N (the host side makes 2-D/3-D masks 4-D before the launch)
    uint64_t maskBatchStride, maskHeadStride, maskRowStride;  // in bytes (elements of 1 byte)
    // ---- valid lengths (int64 per batch in GM, B entries) ----
    uint32_t hasActualSeqQ;    // 0 for decode (S1 == 1): FIA ignores actual_seq_lengths there
    uint32_t hasActualSeqKv;
    uint32_t queryTokens;      // TND: T, the query's rows (the last batch's tiles run to it); 0 otherwise
    // ---- FIA v2's learnable_sink: FP32 (N,), one logit per query head in the true scale ----
    uint32_t hasSink;          // 1: each row's sink joins its state once (pasa_vector_stage.h JoinSink, or the combine)
    // ---- PageAttention (FIA's block_table and block_size): key/value are caches of pages ----
    // Caches (num_blocks, pageSize, Nkv*D): kvPageStride = pageSize*Nkv*D, kvHeadStride = D, kvRowStride = Nkv*D;
    // (num_blocks, Nkv, pageSize, D): kvPageStride = Nkv*pageSize*D, kvHeadStride = pageSize*D, kvRowStride = D.
    // kvBatchStride is 0 (a batch's keys are where its table row says). seqKv is maxBlocksPerSeq*pageSize.
    uint32_t hasBlockTable;    // 1: read key/value rows through the block table
    uint32_t pageSize;         // keys per page (FIA's block_size: 16..512, a multiple of 16); 0 without a table
    uint32_t maxBlocksPerSeq;  // entries per table row
    uint64_t kvPageStride;     // elements between consecutive pages of the caches
    // ---- work split ----
    uint32_t blockDim;         // AI cores used (AIC count; 2x AIVs)
    uint32_t packedHeads;      // query heads in the rows of a task: N/Nkv for decode with GQA, else 1
    uint32_t kvSplits;         // 1, or > 1 for decode split-KV
    uint32_t kvBlocksPerSplit; // KV blocks per split
    uint32_t totalTasks;
    uint32_t tasksPerCore;
    uint32_t prepassItems;     // 0 for FlashAttention (no K')
    uint32_t prepassPerCore;
    uint32_t combineRowsPerAiv;
    // ---- GM workspace layout (byte offsets from the user workspace) ----
    uint64_t wsStatusOffset;   // uint32 status words per AIV (32-byte stride): [0] bit 0 = Inf seen in S'; pasa_rs: [1] reshifted, [2] recomputed (row, block) pairs
    uint64_t wsKShiftOffset;   // K' FP16 [B][Nkv][numKvBlocks*blockKv][kShiftCols] (empty for FlashAttention)
    uint64_t wsCoreOffset;     // per-AI-core handshake slots, wsCoreStride bytes each
    uint64_t wsCoreStride;
    // per core, (preLaunch + 1) * kvStack block slots of each kind, S' first, then P, then PV
    uint64_t wsScoreSlot;      // bytes of one S' block slot (blockQ x blockKv, FP16; fp32_frame FP32)
    uint64_t wsProbSlot;       // bytes of one P block slot (blockQ x blockKv FP16)
    uint64_t wsPvSlot;         // bytes of one PV block slot (blockQ x D, FP16 or FP32); fp32_frame: the segment
                               // closed before block j, [O | l] FP32 blockQ x (D + 16)
    // pasa_rs only (0 otherwise): the pre-pass outputs, shared by every task of a (b, kv head)
    uint64_t wsKSumOffset;     // column sums of the KV blocks, FP32 [prepassItems][D] (the AIC's ones-row GEMM)
    uint64_t wsCentreOffset;   // u_j and K^_j, FP16 [B][Nkv][2*numKvBlocks][D]: row 2j = u_j, row 2j+1 = K^_j
    // pasa_rs per-core slots, after the S'/P/PV slots and the ones matrix L (byte offsets in the core's stride)
    uint64_t wsQhatSlot;       // Q^ of the task's tile, FP16 blockQ x D
    uint64_t wsShiftColSlot;   // the augmented column of Q^: -psi/64 in FP16, blockQ x 16 (one NZ strip), x 2 block parities
    uint64_t wsCentreProdSlot; // C_j and Q^ K^_j, FP32 [2*kvBlocksPerSplit][blockQ]: row 2j = C_j
    uint64_t wsScore32Slot;    // S' - psi with FP32 out (the recompute), blockQ x blockKv FP32 (FP16 passes use the S' slots)
    uint64_t wsRequestSlot;    // the AIVs' requests to the AIC: uint32 [2 parities][2 AIVs], 64 B apart
    // fp32_frame per-core slots, after the rings and the column of ones (128 x 16 FP16, in M's place)
    uint64_t wsFinalSegmentSlot;  // the task's last segment, [O | l] FP32 blockQ x (D + 16)
    uint64_t wsVerdictSlot;       // the AIVs' close verdicts: uint32 [2 preLaunch + 2 stacks][2 AIVs], a stack's two
                                  // in one 64-byte line, 32 B apart
    uint64_t wsPartialOffset;  // split-KV partials: O/l FP32 [B*N*S1][kvSplits][D], then lse FP32 [B*N*S1][kvSplits]
    uint64_t wsPartialLseOffset;
    uint64_t workspaceBytes;   // total user workspace
    // ---- on-chip plan (bytes actually allocated by the kernel's TPipe per core) ----
    uint32_t ubBytes, l1Bytes, l0aBytes, l0bBytes, l0cBytes;
};

// The task decoding, shared by the kernel (pasa_common.h DecodeTask) and the host's coverage helper
// (pasa::CoreTasks), so that the tests check the split the kernel actually runs. __aicore__ is defined
// by kernel_operator.h (and by the host model); a host-only translation unit sees a plain function.
#ifdef __aicore__
#define PASA_HOST_AICORE __aicore__
#else
#define PASA_HOST_AICORE
#endif

// The rows of a task: tileRows rows from query position row0 of head n, or, where the rows are packed heads
// (packedHeads > 1), query position 0 of the tileRows heads from n on.
struct PasaTaskCoord {
    uint32_t b, split;
    uint32_t n;         // query head of the first row
    uint32_t row0;      // first query position
    uint32_t tileRows;  // rows of the task's tile (<= blockQ)
    uint32_t heads;     // query heads the rows cover: tileRows where they are packed heads, else 1
};

PASA_HOST_AICORE inline PasaTaskCoord PasaDecodeTaskId(const PasaTilingData& t, uint32_t id) {
    PasaTaskCoord c;
    c.split = id % t.kvSplits;
    uint32_t rest = id / t.kvSplits;
    const uint32_t qBlock = rest % t.numQBlocks;
    rest /= t.numQBlocks;
    const uint32_t taskHeads = t.numHeads / t.packedHeads;  // N, or Nkv where a task's rows are a group's heads
    const uint32_t taskHead = rest % taskHeads;
    c.b = rest / taskHeads;
    const uint32_t firstRow = qBlock * t.blockQ, rowsOfTaskHead = t.seqQ * t.packedHeads;
    c.tileRows = rowsOfTaskHead - firstRow < t.blockQ ? rowsOfTaskHead - firstRow : t.blockQ;
    if (t.packedHeads > 1) {
        c.n = taskHead * t.packedHeads + firstRow;
        c.row0 = 0;
        c.heads = c.tileRows;
    } else {
        c.n = taskHead;
        c.row0 = firstRow;
        c.heads = 1;
    }
    return c;
}

// The k-th task of AI core `core` (0 <= k < tasksPerCore), or totalTasks where the core has no k-th task.
// Tasks are dealt to the cores in rounds of blockDim, in alternating directions: consecutive task ids are
// the query blocks of one head, and under a causal mask their cost grows with the block, so the dealing
// pairs a core's cheap early blocks with expensive late ones (each core's total stays within one task's
// cost of the others'), where consecutive ranges per core would give the last query blocks of a head all to
// one core. Varlen batches are spread over the cores the same way. Within a core the ids increase with k.
PASA_HOST_AICORE inline uint32_t PasaCoreTaskId(const PasaTilingData& t, uint32_t core, uint32_t k) {
    const uint32_t lane = (k % 2 == 0) ? core : t.blockDim - 1 - core;
    const uint64_t id = (uint64_t)k * t.blockDim + lane;
    return id < t.totalTasks ? (uint32_t)id : t.totalTasks;
}

// Block slots of each kind (S', P, PV) per core: preLaunch + 1 stacks of kvStack blocks. Block j of a task takes
// slot j % ring, so stack i takes the slots of stack i - preLaunch - 1, which both sides have finished with
// before either reaches stack i (op_kernel/pasa_cube_stage.h says why); the AIVs keep the blocks' merge weights
// in a ring of the same length.
PASA_HOST_AICORE inline uint32_t PasaSlotRing(const PasaTilingData& t) { return (t.preLaunch + 1) * t.kvStack; }

// The stacks of a task of nBlocks KV blocks (shared by the kernel's stages and the host tiling). A task of at most
// kvStack blocks is one stack. A longer one ramps: stacks of 1, 2, 4, ... blocks below kvStack (2^r - 1 blocks in
// the r ramp stacks), then kvStack each (the last of these shorter), then ..., 4, 2, 1, so that the AIVs' first
// softmax waits for S of one block and the AIC's last P V for P of one block, not of kvStack, while the stacks
// between keep one handshake per kvStack blocks; a task too short for both ramps (fewer than 2 (2^r - 1) blocks)
// goes block by block. No stack has more than kvStack blocks, so the slot rings of PasaSlotRing hold as for even
// stacks (stack i's blocks reuse the slots of blocks in stacks before i - preLaunch).
struct PasaKvStack {
    uint32_t first, end, index;  // blocks [first, end) of the task, the stack's index in it
};
PASA_HOST_AICORE inline uint32_t PasaRampStacks(const PasaTilingData& t) {
    uint32_t r = 0;
    while ((1u << r) < t.kvStack) ++r;
    return r;
}
// The kvStack-block stacks between the ramps of a task of n >= 2 (2^r - 1) blocks (the last of them may be shorter).
PASA_HOST_AICORE inline uint32_t PasaMiddleStacks(const PasaTilingData& t, uint32_t n, uint32_t ramp) {
    return (n - 2 * ramp + t.kvStack - 1) / t.kvStack;
}
PASA_HOST_AICORE inline uint32_t PasaStacks(const PasaTilingData& t, uint32_t nBlocks) {
    if (nBlocks <= t.kvStack) return nBlocks > 0 ? 1 : 0;
    const uint32_t r = PasaRampStacks(t), ramp = (1u << r) - 1;
    if (nBlocks < 2 * ramp) return nBlocks;
    return 2 * r + PasaMiddleStacks(t, nBlocks, ramp);
}
PASA_HOST_AICORE inline PasaKvStack PasaStack(const PasaTilingData& t, uint32_t nBlocks, uint32_t i) {
    const uint32_t n = nBlocks;
    if (n <= t.kvStack) return PasaKvStack{0, n, 0};
    const uint32_t r = PasaRampStacks(t), ramp = (1u << r) - 1;
    if (n < 2 * ramp) return PasaKvStack{i, i + 1, i};
    if (i < r) return PasaKvStack{(1u << i) - 1, (1u << (i + 1)) - 1, i};
    const uint32_t middle = PasaMiddleStacks(t, n, ramp);
    if (i < r + middle) {
        const uint32_t first = ramp + (i - r) * t.kvStack;
        return PasaKvStack{first, first + t.kvStack < n - ramp ? first + t.kvStack : n - ramp, i};
    }
    const uint32_t down = r - (i - r - middle);  // this stack holds 2^(down - 1) blocks, 2^down - 1 remain
    return PasaKvStack{n - ((1u << down) - 1), n - ((1u << (down - 1)) - 1), i};
}

// Rows (flattened (b*N + n)*S1 + s) that AIV `aiv` combines when kvSplits > 1: [*first, *last).
PASA_HOST_AICORE inline void PasaCombineRange(const PasaTilingData& t, uint32_t aiv, uint64_t* first, uint64_t* last) {
    const uint64_t rows = (uint64_t)t.batch * t.numHeads * t.seqQ;
    const uint64_t f = (uint64_t)aiv * t.combineRowsPerAiv;
    *first = f < rows ? f : rows;
    *last = *first + t.combineRowsPerAiv < rows ? *first + t.combineRowsPerAiv : rows;
}

#endif  // PASA_TILING_DATA_H
