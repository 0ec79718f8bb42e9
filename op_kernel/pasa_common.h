// Shared definitions of the PASA kernel: flag ids, task decoding, GM workspace addressing.
//
// Data flow per task (b, n, query block, kv split), per KV block j (n = blockKv = 128 keys), the blocks
// handed over in stacks of up to kvStack (PasaStack), one flag per stack and direction:
//   AIC  pre-pass (once per (b, kv head, j), before any task): K'_j = M K_j -> GM workspace (FP16)
//   AIC  S'_j = Q K'_j^T            -> GM slot S(j)  (FP16 through Fixpipe)        flag S_READY per stack
//   AIV  online softmax on S'_j      -> GM slot P(j)  (FP16)                        flag P_READY per stack
//   AIC  PV_j = P_j V_j              -> GM slot PV(j) (FP16 "pasa", FP32 "pasa_fp32") flag PV_READY per stack
//   AIV  O = alpha_j O + gamma_j PV_j, block by block
// The AIC computes S' of stack i + preLaunch before it waits for P of stack i, so the matrix unit works
// while the vector units run the softmax; the slots rotate over preLaunch + 1 stacks (SlotTensors).
// FlashAttention ("fp16_fp32", pasa_allocation.h) has no pre-pass: the AIC reads K_j from GM and writes
// the unscaled S_j = Q K_j^T, the AIVs scale it, and O = alpha_j O + PV_j.
// Row-shifted PASA ("pasa_rs") has its own pre-pass (pasa_centre_keys.h) and, per block, a conversation
// between the AIVs and the AIC in which the AIVs ask for S'_j with a per-row shift psi, and again with a
// moved psi or with FP32 out where a row needs it (pasa_row_shift_cube.h says how).
#ifndef PASA_COMMON_H
#define PASA_COMMON_H

#include "kernel_operator.h"
#include "pasa_allocation.h"
#include "pasa_buffer_plan.h"
#include "pasa_tiling_data.h"

namespace pasa_kernel {
using namespace AscendC;

// The allocation's state type (pasa_allocation.h STATE_BYTES): the softmax arithmetic, the row state, O, and
// P V out of the Fixpipe.
template <uint32_t BYTES> struct StateType;
template <> struct StateType<2> { using Type = half; };
template <> struct StateType<4> { using Type = float; };
template <class Policy> using ElementAccumulator = typename StateType<Policy::STATE_BYTES>::Type;

// Cross-core flag ids. Atlas A2 has 16 per core (0..15), and SyncAll's hardware barrier takes 11..14
// (CrossCoreSetFlag docs, 约束说明), so the kernel keeps to 0..10. Every flag is waited as often as it is
// set, per task.
constexpr uint16_t FLAG_M_READY = 1;       // AIV -> AIC (mode 2): M (PASA) or L (pasa_rs) written to the core's slot
constexpr uint16_t FLAG_PREPASS_DONE = 2;  // AIC <-> all AICs (mode 0): every K' block (and pasa_rs's u, K^) written
// The stack handshake's flags count: the k-th wait of a task consumes its k-th set, so one id per direction
// serves every slot of the ring (at most preLaunch + 1 sets are pending, below the counter's 15).
constexpr uint16_t FLAG_S_READY = 3;       // AIC -> AIV (mode 2)
constexpr uint16_t FLAG_P_READY = 4;       // AIV -> AIC (mode 2)
constexpr uint16_t FLAG_PV_READY = 5;      // AIC -> AIV (mode 2)
constexpr uint16_t FLAG_AIV_DONE = 6;      // AIV <-> all AIVs (mode 0): partials written (split-KV)
// pasa_rs only
constexpr uint16_t FLAG_REQUEST = 0;            // AIV -> AIC (mode 2): request word (and shift column) written
constexpr uint16_t FLAG_KEY_SUMS_READY = 7;     // AIC -> AIV (mode 2): the core's KV block column sums in GM
constexpr uint16_t FLAG_KEYS_CENTRED = 8;       // AIV -> AIC (mode 2): the core's K', u and K^ blocks written
constexpr uint16_t FLAG_QHAT_READY = 9;         // AIV -> AIC (mode 2): Q^ of the task's tile written
constexpr uint16_t FLAG_CENTRE_PROD_READY = 10; // AIC -> AIV (mode 2): C_j and Q^ K^_j of the task written

// The pipe `evt` names as its destination waits here for its source pipe's work issued so far. The event ID comes
// from the TPipe's pool (FetchEventID: free now, and needed no longer than the pair), never a literal: a literal ID
// can be one a TQue holds set between its FreeTensor and the buffer's next AllocTensor, and a second SetFlag of a
// set event hangs the core (SetFlag/WaitFlag (ISASI) docs, 约束说明).
template <HardEvent evt>
__aicore__ inline void SyncPipes() {
    const event_t id = static_cast<event_t>(GetTPipePtr()->FetchEventID(evt));
    SetFlag<evt>(id);
    WaitFlag<evt>(id);
}

__aicore__ inline uint32_t CeilDivU(uint32_t a, uint32_t b) { return (a + b - 1) / b; }
__aicore__ inline uint32_t Align16(uint32_t a) { return (a + 15) / 16 * 16; }
__aicore__ inline uint32_t MinU(uint32_t a, uint32_t b) { return a < b ? a : b; }

// One task, with the per-batch valid lengths applied. Row i of the tile is query position
// row0 + i*positionStep of head n + i*(1 - positionStep): positions of one head, or (decode with GQA,
// packedHeads > 1) position 0 of consecutive heads. Either way its softmax_lse index is
// (b*N + n)*S1 + row0 + i, as S1 == 1 where the rows are heads.
struct Task {
    uint32_t b, n, kvHead, split;
    uint32_t row0;       // first query position of the tile
    uint32_t tileRows;   // rows of the tile (<= blockQ)
    uint32_t rowsValid;  // rows below actual_seq_lengths[b] (the rest are padding: out 0, lse +inf)
    uint32_t positionStep;   // 1: the rows are consecutive query positions; 0: they are heads at position row0
    uint64_t qRowStride;     // elements between the rows in query and output: qRowStride, or qHeadStride
    uint64_t maskRowStride;  // bytes between the rows' mask rows: maskRowStride, or maskHeadStride (0: one row for all)
    uint32_t seqKv;      // valid keys of batch b
    uint32_t kvBlock0;   // first KV block of the split
    uint32_t nBlocks;    // KV blocks this task processes (0: no key, or no valid row)
    uint32_t seqQ;       // valid queries of batch b
    uint32_t qStart, kvStart;  // TND: the token index of batch b's first query / key row (0 otherwise)
    uint64_t lseFirst;   // softmax_lse index of the tile's row 0
    uint32_t lseStride;  // between consecutive rows of the tile in softmax_lse: 1, or N (TND)
};

__aicore__ inline uint32_t ValidLen(uint32_t has, GlobalTensor<int64_t>& lens, uint32_t b, uint32_t full) {
    if (!has) return full;
    int64_t v = lens.GetValue(b);
    return v < 0 ? 0 : (v > (int64_t)full ? full : (uint32_t)v);
}

// Batch b's rows in the token dimension: [start, start + len). FIA's per-batch lengths (start 0: the batch
// stride places the batch), or TND's cumulative ones (pasa_tiling_data.h), which the host tiling has checked
// non-decreasing and within the tensor.
struct SeqSpan {
    uint32_t start, len;
};
__aicore__ inline SeqSpan SpanOf(uint32_t has, uint32_t cumulative, GlobalTensor<int64_t>& lens, uint32_t b,
                                 uint32_t full) {
    if (!cumulative) return SeqSpan{0, ValidLen(has, lens, b, full)};
    const uint32_t start = b == 0 ? 0 : (uint32_t)lens.GetValue(b - 1);
    return SeqSpan{start, (uint32_t)lens.GetValue(b) - start};
}
__aicore__ inline bool IsTnd(const PasaTilingData& t) { return t.layout == PASA_LAYOUT_TND; }
__aicore__ inline SeqSpan QuerySpan(const PasaTilingData& t, GlobalTensor<int64_t>& lenQ, uint32_t b) {
    return SpanOf(t.hasActualSeqQ, IsTnd(t), lenQ, b, t.seqQ);
}
// Keys: cumulative in TND without a block table; with one, each batch's own length, its rows in its pages.
__aicore__ inline SeqSpan KeySpan(const PasaTilingData& t, GlobalTensor<int64_t>& lenKv, uint32_t b) {
    return SpanOf(t.hasActualSeqKv, IsTnd(t) && !t.hasBlockTable, lenKv, b, t.seqKv);
}

// Stack i of a task: its KV blocks [first, end) (task-relative) and its index (PasaStack: ramped at both ends).
using KvStack = PasaKvStack;
__aicore__ inline uint32_t StacksOf(const PasaTilingData& t, const Task& k) { return PasaStacks(t, k.nBlocks); }
__aicore__ inline KvStack StackOf(const PasaTilingData& t, const Task& k, uint32_t i) {
    return PasaStack(t, k.nBlocks, i);
}

// Byte offsets of one AI core's slots in the workspace: the S', P and PV rings, then M (PASA) or L (pasa_rs).
struct CoreSlots {
    uint64_t score, prob, pv, shift;
};
__aicore__ inline CoreSlots SlotsOf(const PasaTilingData& t, uint32_t core) {
    const uint64_t ring = PasaSlotRing(t);
    CoreSlots s;
    s.score = t.wsCoreOffset + (uint64_t)core * t.wsCoreStride;
    s.prob = s.score + ring * t.wsScoreSlot;
    s.pv = s.prob + ring * t.wsProbSlot;
    s.shift = s.pv + ring * t.wsPvSlot;
    return s;
}

// The core's rings as typed GM tensors (PvT: the PV product's type, FP16 or FP32): Score(j), Prob(j), Pv(j) are
// block j's slots.
template <typename PvT>
class SlotTensors {
public:
    __aicore__ inline void Init(const PasaTilingData& t, GM_ADDR workspace, uint32_t core) {
        const CoreSlots s = SlotsOf(t, core);
        ring_ = PasaSlotRing(t);
        scoreElems_ = t.wsScoreSlot / sizeof(half);
        probElems_ = t.wsProbSlot / sizeof(half);
        pvElems_ = t.wsPvSlot / sizeof(PvT);
        score_.SetGlobalBuffer((__gm__ half*)(workspace + s.score));
        prob_.SetGlobalBuffer((__gm__ half*)(workspace + s.prob));
        pv_.SetGlobalBuffer((__gm__ PvT*)(workspace + s.pv));
    }
    __aicore__ inline GlobalTensor<half> Score(uint32_t j) { return score_[(uint64_t)(j % ring_) * scoreElems_]; }
    __aicore__ inline GlobalTensor<half> Prob(uint32_t j) { return prob_[(uint64_t)(j % ring_) * probElems_]; }
    __aicore__ inline GlobalTensor<PvT> Pv(uint32_t j) { return pv_[(uint64_t)(j % ring_) * pvElems_]; }

private:
    GlobalTensor<half> score_, prob_;
    GlobalTensor<PvT> pv_;
    uint32_t ring_;
    uint64_t scoreElems_, probElems_, pvElems_;
};

// A core's pasa_rs slots in the workspace as typed GM tensors, the same for its AIC and its AIVs: Q^ (FP16),
// the augmented column -psi/64 (two, by block parity), the centre products C_j and Q^ K^_j (FP32), a
// recomputed block's FP32 S' - psi, and the AIVs' request words.
struct RowShiftSlots {
    GlobalTensor<half> qhat, shiftCol;
    GlobalTensor<float> centreProd, score32;
    GlobalTensor<uint32_t> request;
    __aicore__ inline void Init(const PasaTilingData& t, GM_ADDR workspace, uint32_t core) {
        GM_ADDR slots = workspace + t.wsCoreOffset + (uint64_t)core * t.wsCoreStride;
        qhat.SetGlobalBuffer((__gm__ half*)(slots + t.wsQhatSlot));
        shiftCol.SetGlobalBuffer((__gm__ half*)(slots + t.wsShiftColSlot));
        centreProd.SetGlobalBuffer((__gm__ float*)(slots + t.wsCentreProdSlot));
        score32.SetGlobalBuffer((__gm__ float*)(slots + t.wsScore32Slot));
        request.SetGlobalBuffer((__gm__ uint32_t*)(slots + t.wsRequestSlot));
    }
};

// Element offset of K'_j of (b, kv head h) in the K' region (FP16, blockKv rows x kShiftCols each).
__aicore__ inline uint64_t KShiftIndex(const PasaTilingData& t, uint32_t b, uint32_t h, uint32_t j) {
    return (((uint64_t)b * t.numKvHeads + h) * t.numKvBlocks + j) * BLOCK_KV * t.kShiftCols;
}

// Element offset of row 2j (u_j; row 2j + 1 holds K^_j) of (b, kv head h) in pasa_rs's centre region.
__aicore__ inline uint64_t CentreIndex(const PasaTilingData& t, uint32_t b, uint32_t h, uint32_t j) {
    return (((uint64_t)b * t.numKvHeads + h) * t.numKvBlocks + j) * 2 * t.headDim;
}

// pasa_rs: what an AIV asks of the AIC for the current block, in increasing precedence: the AIC serves the
// larger of the two AIVs' requests (a reshift first, then the FP32 recompute it may still need).
enum RowShiftRequest : uint32_t { REQUEST_ACCEPT = 0, REQUEST_FP32 = 1, REQUEST_FP16 = 2 };
// Element index (uint32) of AIV `sub`'s request word for a round of parity `parity` in the request slot: one
// 64-byte data-cache line each, so that the AIC can drop exactly the line it is about to read.
__aicore__ inline uint32_t RequestWordIndex(uint32_t parity, uint32_t sub) { return (parity * 2 + sub) * 16; }

// Row s of batch b: its position in the batch, or in TND (batch strides 0) its token index.
__aicore__ inline uint64_t QOffset(const PasaTilingData& t, uint32_t b, uint32_t n, uint32_t s) {
    return b * t.qBatchStride + n * t.qHeadStride + s * t.qRowStride;
}
__aicore__ inline uint64_t KvOffset(const PasaTilingData& t, uint32_t b, uint32_t h, uint32_t s) {
    return b * t.kvBatchStride + h * t.kvHeadStride + s * t.kvRowStride;
}
// Element offset in query and output of the tile's row 0.
__aicore__ inline uint64_t TileQOffset(const PasaTilingData& t, const Task& k) {
    return QOffset(t, k.b, k.n, k.qStart + k.row0);
}

// The band rule of sparse_mode for a batch of sq valid queries and skv valid keys: key j is kept
// for query i only where lo <= j - i <= hi (FIA's origins; see python/pasa_npu/interface.py _band).
struct Band {
    int64_t lo, hi;
};
__aicore__ inline Band BandOf(const PasaTilingData& t, uint32_t sq, uint32_t skv) {
    const int64_t open = -((int64_t)1 << 40);
    int64_t diag = (int64_t)skv - (int64_t)sq;
    Band bd{open, -open};
    if (t.sparseMode == 0) { bd.lo = -t.preTokens; bd.hi = t.nextTokens; }
    else if (t.sparseMode == 2) { bd.hi = 0; }
    else if (t.sparseMode == 3) { bd.hi = diag; }
    else if (t.sparseMode == 4) { bd.lo = -t.preTokens + diag; bd.hi = t.nextTokens + diag; }
    return bd;
}

// The task of id `id`, its KV blocks narrowed to those the causal/band rule keeps for at least one of
// its valid rows (blockwise.visited_blocks, the golden model's definition for every allocation): a
// hidden block leaves FlashAttention's m, l and O unchanged, and PASA's F and pasa_rs's frame (block 1,
// the first visited) and shift lag are defined over the visited blocks only. The AIC and the AIVs
// decode the same task, so they agree on the blocks they hand off.
__aicore__ inline Task DecodeTask(const PasaTilingData& t, uint32_t id, GlobalTensor<int64_t>& lenQ,
                                  GlobalTensor<int64_t>& lenKv) {
    const PasaTaskCoord c = PasaDecodeTaskId(t, id);
    Task k;
    k.b = c.b;
    k.n = c.n;
    k.split = c.split;
    k.kvHead = k.n / t.groupSize;
    k.row0 = c.row0;
    k.tileRows = c.tileRows;
    const SeqSpan qs = QuerySpan(t, lenQ, k.b);
    k.seqQ = qs.len;
    k.qStart = qs.start;
    if (IsTnd(t)) {  // the batch's own rows; the last batch's tiles run to T, its rows past seqQ padding
        const uint32_t rows = k.b + 1 == t.batch ? t.queryTokens - qs.start : qs.len;
        k.tileRows = rows > k.row0 ? MinU(rows - k.row0, t.blockQ) : 0;
    }
    if (t.packedHeads > 1) {  // every row is query position 0, valid as S1 == 1 (FIA ignores actual_seq_lengths)
        k.rowsValid = k.tileRows;
        k.positionStep = 0;
        k.qRowStride = t.qHeadStride;
        k.maskRowStride = t.maskHeadStride;
    } else {
        k.rowsValid = k.seqQ > k.row0 ? MinU(k.seqQ - k.row0, k.tileRows) : 0;
        k.positionStep = 1;
        k.qRowStride = t.qRowStride;
        k.maskRowStride = t.maskRowStride;
    }
    const SeqSpan ks = KeySpan(t, lenKv, k.b);
    k.seqKv = ks.len;
    k.kvStart = ks.start;
    k.lseStride = IsTnd(t) ? t.numHeads : 1;
    k.lseFirst = IsTnd(t) ? (uint64_t)(k.qStart + k.row0) * t.numHeads + k.n
                          : ((uint64_t)k.b * t.numHeads + k.n) * t.seqQ + k.row0;
    uint32_t blocksB = CeilDivU(k.seqKv, BLOCK_KV);
    k.kvBlock0 = k.split * t.kvBlocksPerSplit;
    uint32_t end = MinU(MinU(k.kvBlock0 + t.kvBlocksPerSplit, t.numKvBlocks), blocksB);
    if (t.bandMode && k.rowsValid > 0) {
        // The band keeps keys [row + lo, row + hi] of each row, so the tile's valid rows reach keys
        // [row0 + lo, lastRow + hi].
        const Band bd = BandOf(t, k.seqQ, k.seqKv);
        const int64_t lowestKey = (int64_t)k.row0 + bd.lo;
        const int64_t highestKey = (int64_t)(k.row0 + (k.rowsValid - 1) * k.positionStep) + bd.hi;
        if (highestKey < 0 || lowestKey >= (int64_t)k.seqKv) {
            end = k.kvBlock0;
        } else {
            const uint32_t bandFirst = lowestKey <= 0 ? 0 : (uint32_t)(lowestKey / BLOCK_KV);
            const int64_t lastKey = highestKey < (int64_t)k.seqKv ? highestKey : (int64_t)k.seqKv - 1;
            const uint32_t bandEnd = (uint32_t)(lastKey / BLOCK_KV) + 1;
            if (bandFirst > k.kvBlock0) k.kvBlock0 = bandFirst;
            end = MinU(end, bandEnd);
        }
    }
    k.nBlocks = (k.rowsValid == 0 || end <= k.kvBlock0) ? 0 : end - k.kvBlock0;
    return k;
}

template <typename T> __aicore__ inline T NegInf();
template <> __aicore__ inline float NegInf<float>() {
    union { uint32_t u; float f; } v{0xFF800000u};
    return v.f;
}
template <> __aicore__ inline half NegInf<half>() {
    union { uint16_t u; half h; } v{0xFC00u};
    return v.h;
}
template <typename T> __aicore__ inline T PosInf();
template <> __aicore__ inline float PosInf<float>() {
    union { uint32_t u; float f; } v{0x7F800000u};
    return v.f;
}
// The most negative finite value: max(m, Lowest) is m, or Lowest where m = -inf (neginf_to_zero's
// job in the golden model, for rows whose every score is -inf).
template <typename T> __aicore__ inline T Lowest();
template <> __aicore__ inline float Lowest<float>() { return -3.4028234663852886e38f; }
template <> __aicore__ inline half Lowest<half>() { return (half)-65504.0f; }

}  // namespace pasa_kernel

#endif  // PASA_COMMON_H
