// fp32_frame on the AIC (FramedFamily in pasa_allocation.h; python/pasa_npu/blockwise.py _query_block_frame), per
// task, with the stacked handshake of pasa_cube_stage.h:
//   * S_j = Q K_j^T, K straight from GM (a tail padded with copies of its last key, whose columns the AIVs mask),
//     unscaled, FP32 through the Fixpipe into block j's S slot; in row chunks of the L0C plan's scoreRows (ping-pong
//     buffers) where the accumulator leaves room for fewer rows than the tile's; the tile's Q in an L0A half for the
//     task where it fits one, else each chunk's rows of Q loaded from L1 beside its product (so a tile may have more
//     rows than an L0A half holds of Q: K and V are read once for all of them);
//   * once the AIVs sent a stack's P: the stack's close verdicts (each AIV's word, ORed: a frame moved in a row of
//     the tile before that block; read once the pass's first S is queued, off the cube's path), then per block j:
//     at a close, the accumulator [O | l] (FP32, L0C) out to block j's segment slot; then [O | l] += P_j [V_j | 1]
//     (a fresh sum at a close and at block 0), one Mmad per chunk of at most 128 columns (even chunks) and per half
//     of at most 128 rows (what an L0A half holds of P beside Q: a tile of 256 rows is summed as two NZ tiles of
//     128) over the block's 128 keys, so every element is FP32(sum + FP32(exact product)), the golden model's
//     rounding (the columns are independent: V's chunks and the ones strip in separate calls);
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
        // strip in the other half
        const uint32_t chunks = CeilDivU(t->headDim, BLOCK_KV);
        pvChunk_ = CeilDivU(t->headDim / FRACTAL, chunks) * FRACTAL;
        oneChunk_ = chunks == 1;
        scoreRows_ = PlanAicL0c(t->blockQ, t->headDim, TraitsOf<Policy>()).scoreRows;
    }

    // After the tasks: the AIVs' FLAG_M_READY is waited as often as it is set, also by a core whose tasks had no
    // block to sum.
    __aicore__ inline void Finish() {
        if (!onesLoaded_) CrossCoreWaitFlag(FLAG_M_READY);
        else cube_->valueExtraL1_.FreeTensor(ones1_);
    }

    // Q stays in one L0A half for the task where the tile's mp x D FP16 fit one; P takes the other.
    template <class Stage>
    __aicore__ inline void Run(const Task& k, Stage&) {
        const uint32_t mp = Align16(k.tileRows);
        LocalTensor<half> q1 = cube_->LoadRows(cube_->qL1_, qGm_[TileQOffset(*t_, k)], k.rowsValid, mp,
                                               t_->headDim, k.qRowStride);
        queryInL0a_ = mp * t_->headDim * 2 <= L0_HALF_BYTES;
        LocalTensor<half> q;
        if (queryInL0a_) {
            q = cube_->LoadA(q1, mp, 0, mp, 0, t_->headDim);
            q = cube_->L0A().DeQue<half>();
        }
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
                for (uint32_t j = ss.first; j < ss.end; ++j) Score(k, q1, q, mp, j);
                CrossCoreSetFlag<0x2, PIPE_FIX>(FLAG_S_READY);
                nScores = 0;
            }
            if (sums) BeginSums();
            // The close verdicts once the pass's first S is queued: the scalar unit's cache drop and GM read of
            // their line then run while the cube and the Fixpipe work, not before them.
            uint32_t closes = 0;
            for (uint32_t b = 0; b < (nScores > nSums ? nScores : nSums); ++b) {
                if (b < nScores) Score(k, q1, q, mp, ss.first + b);
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
        if (queryInL0a_) cube_->L0A().FreeTensor(q);
        cube_->qL1_.FreeTensor(q1);
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

    // S_j of the tile's mp rows, FP32, into block j's S slot: in row chunks of scoreRows_, each one Mmad call over
    // all of D per chunk of keys that fits an L0B half with it (the golden model's one rounding of the exact sum).
    // Where the keys fit one chunk, K is loaded into L0B once for every row chunk. q1: Q in L1 (NZ, mp rows); q: Q in
    // L0A (zZ, mp rows) where it stays there for the task, else each chunk's rows are loaded from q1.
    __aicore__ inline void Score(const Task& k, const LocalTensor<half>& q1, const LocalTensor<half>& q, uint32_t mp,
                                 uint32_t j) {
        const uint32_t d = t_->headDim, jb = k.kvBlock0 + j;
        const uint32_t keys = MinU(BLOCK_KV, k.seqKv - jb * BLOCK_KV);
        const uint32_t keyChunk = MinU(BLOCK_KV, L0_HALF_BYTES / (d * 2) / FRACTAL * FRACTAL);
        LocalTensor<half> kt = kRows_.Load(*cube_, cube_->kL1_, k.b, k.kvHead, k.kvStart + jb * BLOCK_KV, keys);
        LocalTensor<half> kAll;
        if (keyChunk == BLOCK_KV) {
            kAll = cube_->LoadB(kt, BLayout::TRANSPOSED, BLOCK_KV, BLOCK_KV, 0, 0, d);
            kAll = cube_->L0B().DeQue<half>();
        }
        for (uint32_t r0 = 0; r0 < mp; r0 += scoreRows_) {
            const uint32_t m = MinU(scoreRows_, mp - r0);
            LocalTensor<float> c = cube_->L0C().AllocTensor<float>();
            LocalTensor<half> a2;
            if (queryInL0a_) {
                a2 = q[r0 * d];  // zZ: the row chunk's fractals follow each other
            } else {
                a2 = cube_->LoadA(q1, mp, r0, m, 0, d);
                a2 = cube_->L0A().DeQue<half>();
            }
            if (keyChunk == BLOCK_KV) {
                cube_->Multiply(c, a2, kAll, m, BLOCK_KV, d, true, false);  // one call: the Fixpipe waits on it
            } else {
                for (uint32_t n0 = 0; n0 < BLOCK_KV; n0 += keyChunk) {
                    const uint32_t n = MinU(keyChunk, BLOCK_KV - n0);
                    LocalTensor<half> b2 = cube_->LoadB(kt, BLayout::TRANSPOSED, BLOCK_KV, n, n0, 0, d);
                    b2 = cube_->L0B().DeQue<half>();
                    cube_->Multiply(c[n0 * m], a2, b2, m, n, d, true, false);  // other columns each
                    cube_->L0B().FreeTensor(b2);
                }
            }
            if (!queryInL0a_) cube_->L0A().FreeTensor(a2);
            cube_->L0C().EnQue(c);
            c = cube_->L0C().DeQue<float>();
            cube_->template ToGm<float>(slots_.Score(j)[(uint64_t)r0 * BLOCK_KV], c, m, m, BLOCK_KV, BLOCK_KV);
        }
        if (keyChunk == BLOCK_KV) cube_->L0B().FreeTensor(kAll);
        cube_->kL1_.FreeTensor(kt);
    }

    // A stack's P from the AIVs, and the column of ones before the launch's first sum.
    __aicore__ inline void BeginSums() {
        CrossCoreWaitFlag(FLAG_P_READY);
        if (!onesLoaded_) LoadOnes();
    }

    // Block j's [O | l] += P_j [V_j | 1], after the open segment's [O | l] went out at a close.
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
        const bool init = j == 0 || close;
        // V in one chunk and the ones strip stay in the L0B halves for every row half. Per half, the ones' call
        // first, then V's: the calls write other columns, and the last one orders them before the next block's
        LocalTensor<half> b2, ones2;
        for (uint32_t h0 = 0; h0 < mp; h0 += PV_ROWS) {
            const uint32_t m = MinU(PV_ROWS, mp - h0);
            const bool last = h0 + PV_ROWS >= mp;
            LocalTensor<half> a2 = cube_->LoadA(p, mp, h0, m, 0, BLOCK_KV);
            a2 = cube_->L0A().DeQue<half>();
            const LocalTensor<float> acc = segmentSums_[h0 * cols_];  // the half's NZ tile of m rows
            if (h0 == 0 || !oneChunk_) {
                ones2 = cube_->LoadB(ones1_, BLayout::ROWS, BLOCK_KV, Policy::VALUE_EXTRA_COLS, 0, 0, BLOCK_KV);
                ones2 = cube_->L0B().DeQue<half>();
            }
            cube_->Multiply(acc[t_->headDim * m], a2, ones2, m, Policy::VALUE_EXTRA_COLS, BLOCK_KV, init, false);
            if (!oneChunk_ || last) cube_->L0B().FreeTensor(ones2);
            for (uint32_t n0 = 0; n0 < t_->headDim; n0 += pvChunk_) {
                const uint32_t n = MinU(pvChunk_, t_->headDim - n0);
                if (h0 == 0 || !oneChunk_) {
                    b2 = cube_->LoadB(v, BLayout::ROWS, BLOCK_KV, n, n0, 0, BLOCK_KV);
                    b2 = cube_->L0B().DeQue<half>();
                }
                cube_->Multiply(acc[n0 * m], a2, b2, m, n, BLOCK_KV, init, n0 + n >= t_->headDim);
                if (!oneChunk_ || last) cube_->L0B().FreeTensor(b2);
            }
            cube_->L0A().FreeTensor(a2);
        }
        cube_->pL1_.FreeTensor(p);
        cube_->vL1_.FreeTensor(v);
    }

    // The accumulator's mp rows of [O | l] to GM (rows of D + 16 FP32, of which O and l are written: the other
    // columns of the ones strip hold zeros), one Fixpipe per row half, and the accumulator freed.
    __aicore__ inline void CloseSegment(const GlobalTensor<float>& dst, uint32_t mp) {
        cube_->sums_.EnQue(segmentSums_);
        segmentSums_ = cube_->sums_.DeQue<float>();
        for (uint32_t h0 = 0; h0 < mp; h0 += PV_ROWS) {
            const uint32_t m = MinU(PV_ROWS, mp - h0);
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

    // Rows of P an L0A half holds (128 keys of FP16), the other half holding Q or a chunk of it.
    static constexpr uint32_t PV_ROWS = L0_HALF_BYTES / (BLOCK_KV * 2);

    const PasaTilingData* t_;
    CubeOps* cube_;
    GlobalTensor<half> qGm_;
    KvRows kRows_, vRows_;
    FramedSlots slots_;
    SlotTensors<float> probs_;  // the P ring of the stage's slots
    LocalTensor<float> segmentSums_;  // [O | l] of the open segment, in L0C
    LocalTensor<half> ones1_;         // the column of ones in L1 (NZ, 128 x 16), once loaded
    uint32_t cols_ = 0, pvChunk_ = 0, scoreRows_ = 0;
    bool oneChunk_ = false;  // V in one L0B chunk
    bool queryInL0a_ = false;  // the task's Q in an L0A half (else loaded per row chunk of S)
    uint32_t stacksSummed_ = 0;  // stacks of the launch summed so far: the verdict ring's index
    bool onesLoaded_ = false;
};

}  // namespace pasa_kernel

#endif  // PASA_FRAMED_CUBE_H
