// fp32_frame on the AIC (FramedFamily in pasa_allocation.h; python/pasa_npu/blockwise.py _query_block_frame), per
// task, with the stacked handshake of pasa_cube_stage.h:
//   * S_j = Q K_j^T, K straight from GM (a tail padded with copies of its last key, whose columns the AIVs mask),
//     unscaled, FP32 through the Fixpipe into block j's S slot, in the L0C plan's tiles of scoreRows x scoreKeys
//     beside the accumulator (the whole block's where it fits; at D > 128 all the rows over chunks of keys, each K
//     chunk loaded into L0B once a block; else row chunks, ping-pong); the task's Q stays in a buffer of its own in
//     L0A (PlanAicL0a), which every tile reads in place, so a tile may have more rows than an L0A half holds of Q:
//     K and V are read once for all of them;
//   * once the AIVs sent a stack's P: the stack's close verdicts (each AIV's word, ORed: a frame moved in a row of
//     the tile before that block; read once the pass's first S is queued, off the cube's path), then per block j:
//     at a close, the accumulator [O | l] (FP32, L0C) out to block j's segment slot; then [O | l] += P_j [V_j | 1]
//     (a fresh sum at a close and at block 0), one Mmad per chunk of at most 128 columns (even chunks) and per piece
//     of the L0A plan's probRows rows (what L0A holds of P beside Q: the accumulator is one NZ tile per piece) over
//     the block's 128 keys, so every element is FP32(sum + FP32(exact product)), the golden model's rounding (the
//     columns are independent: V's chunks and the ones strip in separate calls);
//     the column of ones is an NZ strip of 128 x 16 in L1 (column 0 = 1, the others 0) that the core loads once,
//     before its first P V, from the strip its AIVs wrote (FLAG_M_READY);
//   * after the task's last block the accumulator goes to the final segment slot. PV_READY says that the stack's
//     segments, and after the last stack the final one, are in GM.
// The two interleave: once stack i - preLaunch's P is in, S of stack i and the sums of stack i - preLaunch go block
// by block, so that the Fixpipe drains a block's S (the AIC's largest transfer) while the cube sums the other
// block, and S_READY and PV_READY follow together; the slots' reuse is as safe as in pasa_cube_stage.h, each S now
// written after a later P wait. A tile of one fractal row (decode) keeps pasa_cube_stage.h's order instead: S of
// stack i before the P wait of stack i - preLaunch (Run says why).
// The verdict words come in a ring of 2 preLaunch + 2 stacks counted over the launch (pasa_softmax_framed.h says
// why that many): this AIC counts the stacks it sums, as the AIVs count the stacks they send.
#ifndef PASA_FRAMED_CUBE_H
#define PASA_FRAMED_CUBE_H

#include "pasa_components.h"
#include "pasa_cube_ops.h"
#include "pasa_kv_rows.h"

namespace pasa_kernel {

// The AIVs' verdict words of one stack: uint32 [2 preLaunch + 2 stacks][2 AIVs], a stack's two words in one 64-byte
// data-cache line, each AIV's in a 32-byte half of its own (what one DMA block writes).
__aicore__ inline uint32_t VerdictRing(const PasaTilingData& t) { return 2 * t.preLaunch + 2; }
__aicore__ inline uint32_t VerdictWordIndex(const PasaTilingData& t, uint32_t stack, uint32_t sub) {
    return (stack % VerdictRing(t)) * 16 + sub * 8;
}

// One core's fp32_frame slots as typed GM tensors: S in FP32, the segments ([O | l] FP32, one per block slot, the
// final one apart), the verdict words and the column of ones.
struct FramedSlots {
    GlobalTensor<float> score, segment, finalSegment;
    GlobalTensor<uint32_t> verdict;
    GlobalTensor<half> ones;
    uint64_t scoreElems, segmentElems;
    uint32_t ring;
    __aicore__ inline void Init(const PasaTilingData& t, GM_ADDR workspace, uint32_t core) {
        const CoreSlots s = SlotsOf(t, core);
        GM_ADDR slots = workspace + t.wsCoreOffset + (uint64_t)core * t.wsCoreStride;
        score.SetGlobalBuffer((__gm__ float*)(workspace + s.score));
        segment.SetGlobalBuffer((__gm__ float*)(workspace + s.pv));
        finalSegment.SetGlobalBuffer((__gm__ float*)(slots + t.wsFinalSegmentSlot));
        verdict.SetGlobalBuffer((__gm__ uint32_t*)(slots + t.wsVerdictSlot));
        ones.SetGlobalBuffer((__gm__ half*)(workspace + s.shift));
        scoreElems = t.wsScoreSlot / sizeof(float);
        segmentElems = t.wsPvSlot / sizeof(float);
        ring = PasaSlotRing(t);
    }
    __aicore__ inline GlobalTensor<float> Score(uint32_t j) { return score[(uint64_t)(j % ring) * scoreElems]; }
    __aicore__ inline GlobalTensor<float> Segment(uint32_t j) { return segment[(uint64_t)(j % ring) * segmentElems]; }
};

template <class Policy>
class FramedScores : public ScoresBase {
public:
    __aicore__ inline void Init(const PasaTilingData* t, CubeOps* cube, GM_ADDR query, GM_ADDR key, GM_ADDR value,
                                GM_ADDR blockTable, GM_ADDR workspace, uint32_t core) {
        t_ = t;
        cube_ = cube;
        qGm_.SetGlobalBuffer((__gm__ half*)query);
        kRows_.Init(t, key, blockTable);
        vRows_.Init(t, value, blockTable);
        slots_.Init(*t, workspace, core);
        probs_.Init(*t, workspace, core);
        cols_ = t->headDim + Policy::VALUE_EXTRA_COLS;
        // V in chunks of at most 128 columns (an L0B half with the 128 keys), as even as 16 columns allow; the ones
        // strip a chunk of its own
        const uint32_t chunks = CeilDivU(t->headDim, BLOCK_KV);
        pvChunk_ = CeilDivU(t->headDim / FRACTAL, chunks) * FRACTAL;
        chunks_ = chunks + 1;
        const AicL0cPlan l0c = PlanAicL0c(t->blockQ, t->headDim, TraitsOf<Policy>());
        scoreRows_ = l0c.scoreRows;
        scoreKeys_ = l0c.scoreKeys;
        probRows_ = PlanAicL0a(t->blockQ, t->headDim, TraitsOf<Policy>()).probRows;
    }

    // After the tasks: the AIVs' FLAG_M_READY is waited as often as it is set, also by a core whose tasks had no
    // block to sum.
    __aicore__ inline void Finish() {
        if (!onesLoaded_) CrossCoreWaitFlag(FLAG_M_READY);
        else cube_->valueExtraL1_.FreeTensor(ones1_);
    }

    // Q stays in its own L0A buffer for the task (the tile's mp x D FP16, PlanAicL0a); P takes the rest of L0A.
    template <class Stage>
    __aicore__ inline void Run(const Task& k, Stage&) {
        const uint32_t mp = Align16(k.tileRows);
        LocalTensor<half> q1 = cube_->LoadRows(cube_->qL1_, qGm_[TileQOffset(*t_, k)], k.rowsValid, mp,
                                               t_->headDim, k.qRowStride);
        LocalTensor<half> q = cube_->LoadA(cube_->queryL0a_, q1, mp, 0, mp, 0, t_->headDim);
        q = cube_->queryL0a_.DeQue<half>();
        cube_->qL1_.FreeTensor(q1);
        // Stack i's S and stack i - preLaunch's sums in one pass, block by block, after the P wait: the Fixpipe drains
        // a block's S while the cube sums a block. Not in the task's first such pass: there the AIVs, which have
        // only preLaunch stacks of S so far, would wait for stack i's S behind the P wait, so S goes first.
        // Nor on a tile of one fractal row (decode: one head's query, or a GQA group's heads): its S is 8 KB a block,
        // too little Fixpipe work for the overlap to gain, and the AIVs' softmax of so few rows is short, so they
        // wait for S. Behind the P wait, S of stack i would follow P of stack i - preLaunch (not i - preLaunch - 1):
        // over a task the AIVs' chain of hand-offs grows by two every preLaunch stacks instead of every
        // preLaunch + 1, and the task's last S comes a pass of sums later. There S goes first in every pass.
        const bool scoresFirst = mp <= FRACTAL;
        const uint32_t stacks = StacksOf(*t_, k), stack0 = stacksSummed_;
        for (uint32_t i = 0; i < stacks + t_->preLaunch; ++i) {
            const bool scores = i < stacks, sums = i >= t_->preLaunch;
            const KvStack ss = scores ? StackOf(*t_, k, i) : KvStack{0, 0, 0};
            const KvStack ps = sums ? StackOf(*t_, k, i - t_->preLaunch) : KvStack{0, 0, 0};
            const uint32_t nSums = ps.end - ps.first;
            uint32_t nScores = ss.end - ss.first;
            if (scores && (!sums || i == t_->preLaunch || scoresFirst)) {
                for (uint32_t j = ss.first; j < ss.end; ++j) Score(k, q, mp, j);
                CrossCoreSetFlag<0x2, PIPE_FIX>(FLAG_S_READY);
                nScores = 0;
            }
            if (sums) BeginSums();
            // The close verdicts once the pass's first S is queued: the scalar unit's cache drop and GM read of
            // their line then run while the cube and the Fixpipe work, not before them.
            uint32_t closes = 0;
            for (uint32_t b = 0; b < (nScores > nSums ? nScores : nSums); ++b) {
                if (b < nScores) Score(k, q, mp, ss.first + b);
                if (b == 0 && sums) closes = Verdicts(stack0 + i - t_->preLaunch);
                if (b < nSums) Sum(k, mp, ps.first + b, (closes >> b) & 1u);
            }
            if (nScores > 0) CrossCoreSetFlag<0x2, PIPE_FIX>(FLAG_S_READY);
            if (sums) {
                if (ps.end == k.nBlocks) CloseSegment(slots_.finalSegment, mp);
                CrossCoreSetFlag<0x2, PIPE_FIX>(FLAG_PV_READY);
            }
        }
        stacksSummed_ = stack0 + stacks;
        cube_->queryL0a_.FreeTensor(q);
    }

private:
    // The column of ones into its L1 strip, held for the launch, before the launch's first P V: its FLAG_M_READY
    // came before the AIVs' first P, off this core's path.
    __aicore__ inline void LoadOnes() {
        onesLoaded_ = true;
        CrossCoreWaitFlag(FLAG_M_READY);
        ones1_ = cube_->LoadRows(cube_->valueExtraL1_, slots_.ones, BLOCK_KV, BLOCK_KV, Policy::VALUE_EXTRA_COLS,
                                 Policy::VALUE_EXTRA_COLS);
    }

    // S_j of the tile's mp rows, FP32, into block j's S slot, in the L0C plan's tiles of scoreRows_ x scoreKeys_: per
    // chunk of scoreKeys_ keys, K loaded into an L0B half once, then per chunk of rows one Mmad over all of D (the
    // golden model's one rounding of the exact sum) and its Fixpipe to the slot's rows and columns. q: Q in L0A (zZ, mp
    // rows: a row chunk's fractals follow each other).
    __aicore__ inline void Score(const Task& k, const LocalTensor<half>& q, uint32_t mp, uint32_t j) {
        const uint32_t d = t_->headDim, jb = k.kvBlock0 + j;
        const uint32_t keys = MinU(BLOCK_KV, k.seqKv - jb * BLOCK_KV);
        LocalTensor<half> kt = kRows_.Load(*cube_, cube_->kL1_, k.b, k.kvHead, k.kvStart + jb * BLOCK_KV, keys);
        for (uint32_t n0 = 0; n0 < BLOCK_KV; n0 += scoreKeys_) {
            const uint32_t n = MinU(scoreKeys_, BLOCK_KV - n0);
            LocalTensor<half> b2 = cube_->LoadB(kt, BLayout::TRANSPOSED, BLOCK_KV, n, n0, 0, d);
            b2 = cube_->L0B().DeQue<half>();
            for (uint32_t r0 = 0; r0 < mp; r0 += scoreRows_) {
                const uint32_t m = MinU(scoreRows_, mp - r0);
                LocalTensor<float> c = cube_->L0C().AllocTensor<float>();
                cube_->Multiply(c, q[r0 * d], b2, m, n, d, true, false);  // one call: the Fixpipe waits on it
                cube_->L0C().EnQue(c);
                c = cube_->L0C().DeQue<float>();
                cube_->template ToGm<float>(slots_.Score(j)[(uint64_t)r0 * BLOCK_KV + n0], c, m, m, n, BLOCK_KV);
            }
            cube_->L0B().FreeTensor(b2);
        }
        cube_->kL1_.FreeTensor(kt);
    }

    // A stack's P from the AIVs, and the column of ones before the launch's first sum.
    __aicore__ inline void BeginSums() {
        CrossCoreWaitFlag(FLAG_P_READY);
        if (!onesLoaded_) LoadOnes();
    }

    // Block j's [O | l] += P_j [V_j | 1], after the open segment's [O | l] went out at a close: per piece of probRows_
    // rows of P (an L0A buffer), one Mmad per column chunk of [V | 1] (the ones strip, then V's chunks), each over the
    // block's 128 keys. The chunks stay in the two L0B halves from piece to piece (ValueChunk); where they are more
    // than two, every other piece takes them in reverse, so that it starts with the two the previous piece left
    // there. The calls write other columns or other rows; the next block's first call accumulates into the first
    // piece, so where that is the only one its last call orders them (elsewhere the block's last call wrote other
    // rows).
    __aicore__ inline void Sum(const Task& k, uint32_t mp, uint32_t j, bool close) {
        if (j == 0) {
            segmentSums_ = cube_->sums_.AllocTensor<float>();
        } else if (close) {
            CloseSegment(slots_.Segment(j), mp);
            segmentSums_ = cube_->sums_.AllocTensor<float>();
        }
        const uint32_t jb = k.kvBlock0 + j;
        const uint32_t keys = MinU(BLOCK_KV, k.seqKv - jb * BLOCK_KV);
        LocalTensor<half> p = cube_->LoadRows(cube_->pL1_, probs_.Prob(j), k.tileRows, mp, BLOCK_KV, BLOCK_KV);
        // padded V rows repeat the last key's value, the ones strip holds 1 there too; their P columns are 0
        LocalTensor<half> v = vRows_.Load(*cube_, cube_->vL1_, k.b, k.kvHead, k.kvStart + jb * BLOCK_KV, keys);
        const bool init = j == 0 || close, onePiece = mp <= probRows_;
        for (uint32_t h0 = 0, piece = 0; h0 < mp; h0 += probRows_, ++piece) {
            const uint32_t m = MinU(probRows_, mp - h0);
            LocalTensor<half> a2 = cube_->LoadA(p, mp, h0, m, 0, BLOCK_KV);
            a2 = cube_->L0A().DeQue<half>();
            const LocalTensor<float> acc = segmentSums_[h0 * cols_];  // the piece's NZ tile of m rows
            const bool reverse = (piece & 1) != 0 && chunks_ > 2;
            for (uint32_t i = 0; i < chunks_; ++i) {
                const uint32_t c = reverse ? chunks_ - 1 - i : i;
                const uint32_t n0 = c == 0 ? t_->headDim : (c - 1) * pvChunk_;
                const uint32_t n = c == 0 ? Policy::VALUE_EXTRA_COLS : MinU(pvChunk_, t_->headDim - n0);
                cube_->Multiply(acc[n0 * m], a2, ValueChunk(v, c, n0, n), m, n, BLOCK_KV, init,
                                onePiece && i + 1 == chunks_);
            }
            cube_->L0A().FreeTensor(a2);
        }
        for (uint32_t h = 0; h < 2; ++h)
            if (heldChunk_[h] != NO_CHUNK) cube_->L0B().FreeTensor(heldB2_[h]);
        heldChunk_[0] = heldChunk_[1] = NO_CHUNK;
        cube_->pL1_.FreeTensor(p);
        cube_->vL1_.FreeTensor(v);
    }

    // [V | 1]'s column chunk c (0: the ones strip; else V's columns [n0, n0 + n)) in an L0B half: the half that holds
    // it, else loaded into a free half or, both held, the one used less recently. Sum frees them after the block.
    __aicore__ inline LocalTensor<half> ValueChunk(const LocalTensor<half>& v, uint32_t c, uint32_t n0, uint32_t n) {
        uint32_t h = heldChunk_[0] == c ? 0 : 1;
        if (heldChunk_[h] != c) {
            h = heldChunk_[0] == NO_CHUNK ? 0 : heldChunk_[1] == NO_CHUNK ? 1 : 1 - recentHalf_;
            if (heldChunk_[h] != NO_CHUNK) cube_->L0B().FreeTensor(heldB2_[h]);
            heldB2_[h] = c == 0 ? cube_->LoadB(ones1_, BLayout::ROWS, BLOCK_KV, n, 0, 0, BLOCK_KV)
                                : cube_->LoadB(v, BLayout::ROWS, BLOCK_KV, n, n0, 0, BLOCK_KV);
            heldB2_[h] = cube_->L0B().DeQue<half>();
            heldChunk_[h] = c;
        }
        recentHalf_ = h;
        return heldB2_[h];
    }

    // The accumulator's mp rows of [O | l] to GM (rows of D + 16 FP32, of which O and l are written: the other
    // columns of the ones strip hold zeros), one Fixpipe per piece of P's rows (Sum's NZ tiles), and the accumulator
    // freed.
    __aicore__ inline void CloseSegment(const GlobalTensor<float>& dst, uint32_t mp) {
        cube_->sums_.EnQue(segmentSums_);
        segmentSums_ = cube_->sums_.DeQue<float>();
        for (uint32_t h0 = 0; h0 < mp; h0 += probRows_) {
            const uint32_t m = MinU(probRows_, mp - h0);
            cube_->CopyOut(dst[(uint64_t)h0 * cols_], segmentSums_[h0 * cols_], m, m, t_->headDim + 1, cols_);
        }
        cube_->sums_.FreeTensor(segmentSums_);
    }

    // The close verdicts of the launch's stack `stack` (bit b: block b of the stack closes a segment), the two AIVs'
    // words ORed. The words were written by the AIVs' DMA after this core's scalar unit may have cached their line
    // (a ring ago), so the line is dropped first.
    __aicore__ inline uint32_t Verdicts(uint32_t stack) {
        GlobalTensor<uint32_t> line = slots_.verdict[VerdictWordIndex(*t_, stack, 0)];
        DataCacheCleanAndInvalid<uint32_t, CacheLine::SINGLE_CACHE_LINE, DcciDst::CACHELINE_OUT>(line);
        return line.GetValue(0) | line.GetValue(VerdictWordIndex(*t_, 0, 1));
    }

    static constexpr uint32_t NO_CHUNK = 0xFFFFFFFFu;

    const PasaTilingData* t_;
    CubeOps* cube_;
    GlobalTensor<half> qGm_;
    KvRows kRows_, vRows_;
    FramedSlots slots_;
    SlotTensors<float> probs_;  // the P ring of the stage's slots
    LocalTensor<float> segmentSums_;  // [O | l] of the open segment, in L0C
    LocalTensor<half> ones1_;         // the column of ones in L1 (NZ, 128 x 16), once loaded
    uint32_t cols_ = 0, pvChunk_ = 0;
    uint32_t chunks_ = 0;  // column chunks of [V | 1]: the ones strip and V's
    uint32_t scoreRows_ = 0, scoreKeys_ = 0, probRows_ = 0;  // the L0C plan's S tiles, the L0A plan's pieces of P
    LocalTensor<half> heldB2_[2];  // Sum's chunks of [V | 1] in the L0B halves
    uint32_t heldChunk_[2] = {NO_CHUNK, NO_CHUNK};
    uint32_t recentHalf_ = 0;
    uint32_t stacksSummed_ = 0;  // stacks of the launch summed so far: the verdict ring's index
    bool onesLoaded_ = false;
};

}  // namespace pasa_kernel

#endif  // PASA_FRAMED_CUBE_H
