// The AIVs' softmax epilogue of fp32_frame (FramedFamily in pasa_allocation.h; blockwise._query_block_frame, the
// rules in docs/golden.md), T = float. Per row a frame G (FP32, units of Q K), versioned: a row without a key yet
// has G = 0 and no frame. Per block j of the task:
//   S_j (FP32, unscaled) of this AIV's rows from its slot, masked; m = its row max;
//   has = m > -inf; top = FP32(scale FP32(m - G)) (the row max of the exp argument: FP32 rounding is monotonic);
//   low counts a row's consecutive blocks with a key more than FRAME_DOWN below its frame (a block with a key not
//   that low resets it, one without a key leaves it);
//   peak = the row's maximum so far (of the m); target = m for a row without a frame, else
//   max(m, FP32(peak - FRAME_DROP_LIMIT / scale));
//   move = has and (no frame yet, or top > FRAME_UP, or low >= FRAME_DOWN_BLOCKS and target < G): G moves to
//   target and low to 0 (a row already at its floor below the peak stays, and keeps counting);
//   P = FP16(exp(FP32(scale FP32(S - G)))) against the moved frames, to the AIC, which sums [O | l] += P [V | 1].
// Whether a valid row of this AIV moved is one vector sum and one scalar read per block; the stack's moves go to
// the AIC as one word per AIV (bit b: the stack's block b), with P. A move in any row of the tile closes the
// tile's segment before that block (pasa_framed_cube.h). After the stack's PV_READY this AIV reads both words and
// merges each closed segment into its rows' running O (the stage's O, rows x D) and l, in the golden model's
// order and roundings: acc = FP32(FP32(a acc) + seg), a = exp(FP32(scale FP32(G_acc - G_seg))) (0 where l = 0),
// G_acc = G_seg, G_seg being the frames the segment was summed against: the frame version in force before the
// block that closed it, or, for the task's last segment, the current one. O/l and lse = FP32(scale G_acc) + ln l
// are then the stage's (m = scale G_acc).
// An AIV with more rows than its tiles hold (a query block of 256: 128 rows, of 192: 96) takes each block in row
// tiles (AivRows::EnterTile); each tile keeps its own frame versions, and its lanes of the row vectors, which an op
// writes exactly (the tile's rows), so that a tile of 48 rows leaves the next tile's lanes alone; compares and ops
// on scratch vectors take a whole 256-byte repeat.
//
// The rings. Frames: a version per move, kept while a segment summed against it may still be merged: the merges
// trail the moves by at most a block-slot ring (PasaSlotRing) of blocks, so ring + 1 versions. Verdict words: an
// AIV's word for stack s is read by the AIC (before it sets PV_READY(s)) and by the other AIV (after it); this AIV
// may write stack s + R before the other reads stack s unless R >= 2 preLaunch + 2 (the other reads stack s after
// its softmax of stack s + preLaunch, and this AIV's softmax of stack s + R needs the AIC past P V of stack
// s + R - preLaunch - 1, which needs the other's P of that stack), counted over the launch, not the task: the
// AIVs may still read a task's last stacks when the next task's first ones are written.
#ifndef PASA_SOFTMAX_FRAMED_H
#define PASA_SOFTMAX_FRAMED_H

#include "pasa_components.h"
#include "pasa_framed_cube.h"
#include "pasa_vector_rows.h"

namespace pasa_kernel {

template <class Policy>
class FramedSoftmax : public SoftmaxBase {
public:
    // Nothing to check: S is FP32 from FP16 inputs, P <= exp(FRAME_UP), and O, l and G_acc are FP32 sums of them.
    static constexpr bool CHECKS_OVERFLOW = false;

    // Its FP32_ROW_VECTORS and, per block slot, a frame version.
    __aicore__ inline void Init(AivRows<float>* rows, const PasaTilingData* t, GM_ADDR, GM_ADDR workspace,
                                uint32_t core) {
        v_ = rows;
        t_ = t;
        scale_ = t->scale;
        dropLimit_ = t->frameDropLimit;
        versions_ = PasaSlotRing(*t) + 1;
        LocalTensor<float>* vecs[8] = {&ones_, &fresh_, &known_, &low_, &peak_, &move_, &accFrame_, &segL_};
        for (uint32_t i = 0; i < 8; ++i) *vecs[i] = rows->epilogueFp32[i * ROW_VEC];
        frames_ = rows->epilogueFp32[8 * ROW_VEC];
        slots_.Init(*t, workspace, core);
        core_ = core;
        tileLanes_ = (int32_t)rows->tileRows;
        Duplicate(ones_, 1.0f, LANES);
    }

    // Before the tasks: this AIV's half of the column of ones the AIC puts beside V (rows 64 sub on), FLAG_M_READY.
    __aicore__ inline void Prepare() {
        constexpr uint32_t HALF = BLOCK_KV / 2, cols = Policy::VALUE_EXTRA_COLS;
        LocalTensor<half> strip = v_->pQue.template AllocTensor<half>();
        Duplicate(strip, (half)0.0f, (int32_t)(HALF * cols));
        PipeBarrier<PIPE_V>();
        uint64_t firstLanes[2] = {0x0001000100010001ull, 0x0001000100010001ull};  // lane 0 of each 16-lane row
        Duplicate(strip, (half)1.0f, firstLanes, (uint8_t)(HALF * cols / 128), 1, 8);
        v_->pQue.EnQue(strip);
        strip = v_->pQue.template DeQue<half>();
        DataCopy(slots_.ones[(uint64_t)v_->sub * HALF * cols], strip, HALF * cols);
        v_->pQue.FreeTensor(strip);
        CrossCoreSetFlag<0x2, PIPE_MTE3>(FLAG_M_READY);
    }

    __aicore__ inline void BeginTask(const Task&) {
        taskStack0_ = stacksSent_;
        for (uint32_t i = 0; i < MAX_TILES; ++i) version_[i] = 0;
        merged_ = false;
        lanes_ = v_->rows > (uint32_t)LANES ? 2 * LANES : LANES;
    }

    // No frame, nothing below it, no key seen, nothing merged yet.
    __aicore__ inline void ResetRows() {
        Duplicate(known_, 0.0f, lanes_);
        Duplicate(low_, 0.0f, lanes_);
        Duplicate(peak_, NegInf<float>(), lanes_);
        Duplicate(Frame(0, 0), 0.0f, lanes_);
        Duplicate(accFrame_, 0.0f, lanes_);
    }

    // Block j of this AIV's rows, tile by tile; a move in a row of any tile sets the block's bit of the verdict.
    __aicore__ inline void Block(const Task& k, uint32_t j) {
        AivRows<float>& v = *v_;
        bool moved = false;
        for (uint32_t r = 0; r < v.aivRows; r += v.tileRows) {
            v.EnterTile(r);
            if (TileBlock(k, j, r)) moved = true;
        }
        v.LeaveTile();
        if (moved) verdict_ |= 1u << stackBlocks_;
        ++stackBlocks_;
    }

    // The stack's moves to the AIC (before the stage's P_READY), one word of this AIV's in the verdict ring.
    __aicore__ inline void EndStack() {
        LocalTensor<uint32_t> w = v_->lseQue.template AllocTensor<uint32_t>();
        Duplicate(w, verdict_, 8);
        v_->lseQue.EnQue(w);
        w = v_->lseQue.template DeQue<uint32_t>();
        DataCopy(slots_.verdict[VerdictWordIndex(*t_, stacksSent_, v_->sub)], w, 8);
        v_->lseQue.FreeTensor(w);
        ++stacksSent_;
        verdict_ = 0;
        stackBlocks_ = 0;
    }

    // After the stack's PV_READY: the segments closed before its blocks, and after the task's last block the final
    // one, merged into the rows' O and l; then m = scale G_acc for the stage's lse.
    __aicore__ inline void MergeStack(const Task& k, const KvStack& st) {
        const uint32_t closes = Closes(taskStack0_ + st.index);
        for (uint32_t j = st.first; j < st.end; ++j) {
            if (((closes >> (j - st.first)) & 1u) == 0) continue;
            if (v_->sub == 0) ++tileCloses_;
            if (j > 0) MergeSegment(slots_.Segment(j), j % PasaSlotRing(*t_), false);
        }
        if (st.end == k.nBlocks) {
            MergeSegment(slots_.finalSegment, 0, true);
            Muls(v_->m, accFrame_, scale_, lanes_);
        }
    }

    // lse = m + ln l with m = scale G_acc: no terms of its own (SoftmaxBase's no-ops).

    // Word 1: the (valid row, KV block) pairs whose frame moved (the first key of a row counts); word 2, from the
    // first AIV: the (tile, KV block) pairs that closed a segment (the golden model's moved_row_blocks and, for a
    // tile of one head, moved_tile_blocks).
    __aicore__ inline void WriteStatusWords(LocalTensor<uint32_t>& s) {
        s.SetValue(1, movedRows_);
        s.SetValue(2, tileCloses_);
    }

private:
    // A row tile's lanes of the row vectors fit one FP32 repeat (tiles of at most AIV_TILE_ROWS = 64 rows): LANES
    // where an op takes the whole repeat, tileLanes_ (the tile's rows) where it writes the tile's lanes.
    static constexpr int32_t LANES = 64;
    static constexpr uint32_t MAX_TILES = ROW_VEC / AIV_TILE_ROWS;

    // The frames of the row tile at row r (its lanes r on) in frame version `version` of that tile.
    __aicore__ inline LocalTensor<float> Frame(uint32_t r, uint32_t version) {
        return frames_[(version % versions_) * ROW_VEC + r];
    }
    __aicore__ inline uint32_t TileOf(uint32_t r) const { return r / v_->tileRows; }

    // Block j of the row tile at row r (AivRows::EnterTile'd): S, masks, row max, the frames' moves, P to the AIC.
    // P = FP16(exp(FP32(scale FP32(S - G)))) against the moved frames, four dependent ops over the tile. After the
    // task's first block a move is rare: P is then computed against the current frames within the decisions' levels
    // (their barriers order it), and again from S read anew from its slot where a row moved (the AIC rewrites the
    // slot only after this stack's P_READY). In the first block every row with a key moves: P follows the moves.
    // Returns whether a valid row of the tile moved.
    __aicore__ inline bool TileBlock(const Task& k, uint32_t j, uint32_t r) {
        AivRows<float>& v = *v_;
        const uint32_t tile = TileOf(r);
        LocalTensor<float> s = Scores(k, j);
        v.RowMax(v.mBlk, s);
        versionAt_[tile][j % PasaSlotRing(*t_)] = version_[tile];
        v.BroadcastUnordered(Frame(r, version_[tile]));  // ordered by the decisions' first barrier
        LocalTensor<half> p = v.pQue.template AllocTensor<half>();
        const bool early = j > 0;
        const bool moved = Decide(r, s, p, early) > 0;
        if (moved) {
            Move(r);
            v.Broadcast(Frame(r, version_[tile]));
            if (early) {
                v.sQue.FreeTensor(s);
                s = Scores(k, j);
            }
        }
        if (moved || !early) {
            for (uint32_t step = 0; step < PROB_STEPS; ++step) {
                if (step > 0) PipeBarrier<PIPE_V>();
                ProbStep(step, s, p);
            }
        }
        v.pQue.EnQue(p);
        v.sQue.FreeTensor(s);
        p = v.pQue.template DeQue<half>();
        DataCopy(v.slots.Prob(j)[(uint64_t)v.r0 * BLOCK_KV], p, v.rows * BLOCK_KV);
        v.pQue.FreeTensor(p);
        return moved;
    }

    // S of block j of the row tile (FP32, from its slot), masked: a tensor of S's queue, which the caller frees.
    __aicore__ inline LocalTensor<float> Scores(const Task& k, uint32_t j) {
        AivRows<float>& v = *v_;
        const uint32_t c0 = (k.kvBlock0 + j) * BLOCK_KV;
        LocalTensor<float> s = v.sQue.template AllocTensor<float>();
        DataCopy(s, slots_.Score(j)[(uint64_t)v.r0 * BLOCK_KV], v.rows * BLOCK_KV);
        v.sQue.EnQue(s);
        s = v.sQue.template DeQue<float>();
        v.ApplyMasks(k, s, c0, MinU(BLOCK_KV, k.seqKv - c0));
        return s;
    }

    // Step `step` of P from S (in place in s) and the frames in bc: S - G, times scale, exp, to FP16 in p; each
    // step reads what the one before wrote, so the caller puts a barrier between them.
    static constexpr uint32_t PROB_STEPS = 4;
    __aicore__ inline void ProbStep(uint32_t step, const LocalTensor<float>& s, const LocalTensor<half>& p) {
        AivRows<float>& v = *v_;
        const int32_t cnt = (int32_t)(v.rows * BLOCK_KV);
        if (step == 0) v.RowBroadcast(RowOp::SUB, s, s, v.bc, v.rows, BLOCK_KV);
        else if (step == 1) Muls(s, s, scale_, cnt);
        else if (step == 2) Exp(s, s, cnt);
        else Cast(p, s, RoundMode::CAST_RINT, (uint32_t)cnt);
    }

    // peak, low and move of the block (S's row max m in mBlk against the current frame G); returns the valid rows that
    // move. With has = m > -inf, top = FP32(scale FP32(m - G)), up = top > FRAME_UP, below = top < -FRAME_DOWN:
    //   low' = has ? (known and below ? low + 1 : 0) : low, peak' = max(peak, m);
    //   move = has and (not known, or up, or low' >= FRAME_DOWN_BLOCKS and target < G), target = max(m, FP32(peak' -
    //   the drop limit)) = max(m, FP32(peak - the drop limit)) (rounding is monotonic), which is m for a row
    //   without a frame (it has seen no key: peak = -inf), the frame Move gives.
    // A row without a frame has low 0, so low' >= FRAME_DOWN_BLOCKS is has, below and ready (low >= FRAME_DOWN_BLOCKS
    // - 1), and up excludes below: move = below ? (fresh or (target < G and has and ready)) : (up or fresh), fresh =
    // has and not known. Five levels of vector ops, each ending in the barrier its results need: tmp1 = top, fa =
    // target, fb = the low' of a row with a key, fc = 1 - known, fresh_, tmp2 = has and (ready or not known); bits
    // at [0] has, [32] ready then below, [64] up, [96] target < G. With withProb, the four steps of P against the
    // current frames (bc) run in levels 2 to 5, on s and p, which the decisions do not touch.
    __aicore__ inline uint32_t Decide(uint32_t r, const LocalTensor<float>& s, const LocalTensor<half>& p,
                                      bool withProb) {
        AivRows<float>& v = *v_;
        const LocalTensor<uint8_t> key = v.bits, ready = v.bits[32], below = v.bits[32], up = v.bits[64],
                                   lower = v.bits[96];
        const LocalTensor<float> low = low_[r], known = known_[r], peak = peak_[r];
        const LocalTensor<float> frame = Frame(r, version_[TileOf(r)]);
        CompareScalar(key, v.mBlk, NegInf<float>(), CMPMODE::NE, LANES);
        CompareScalar(ready, low, Policy::FRAME_DOWN_BLOCKS - 1.5f, CMPMODE::GT, LANES);
        Sub(v.tmp1, v.mBlk, frame, LANES);
        Adds(v.fa, peak, -dropLimit_, LANES);
        Adds(v.fb, low, 1.0f, LANES);
        Sub(v.fc, ones_, known, LANES);
        PipeBarrier<PIPE_V>();
        if (withProb) ProbStep(0, s, p);
        Muls(v.tmp1, v.tmp1, scale_, LANES);  // top
        Max(v.fa, v.fa, v.mBlk, LANES);        // target
        Max(peak, peak, v.mBlk, tileLanes_);
        Mul(v.fb, v.fb, known, LANES);         // known ? low + 1 : 0
        Select(v.tmp2, ready, ones_, v.fc, SELMODE::VSEL_TENSOR_TENSOR_MODE, LANES);
        Select(fresh_, key, v.fc, 0.0f, SELMODE::VSEL_TENSOR_SCALAR_MODE, LANES);
        PipeBarrier<PIPE_V>();
        if (withProb) ProbStep(1, s, p);
        CompareScalar(below, v.tmp1, -Policy::FRAME_DOWN, CMPMODE::LT, LANES);
        CompareScalar(up, v.tmp1, Policy::FRAME_UP, CMPMODE::GT, LANES);
        Compare(lower, v.fa, frame, CMPMODE::LT, LANES);
        Select(v.tmp2, key, v.tmp2, 0.0f, SELMODE::VSEL_TENSOR_SCALAR_MODE, LANES);
        PipeBarrier<PIPE_V>();
        if (withProb) ProbStep(2, s, p);
        Select(v.fc, lower, v.tmp2, fresh_, SELMODE::VSEL_TENSOR_TENSOR_MODE, LANES);  // fresh, or far and lower
        Select(v.tmp1, up, ones_, fresh_, SELMODE::VSEL_TENSOR_TENSOR_MODE, LANES);    // up, or fresh
        Select(v.fb, below, v.fb, 0.0f, SELMODE::VSEL_TENSOR_SCALAR_MODE, LANES);
        PipeBarrier<PIPE_V>();
        if (withProb) ProbStep(3, s, p);
        Select(move_, below, v.fc, v.tmp1, SELMODE::VSEL_TENSOR_TENSOR_MODE, LANES);
        Select(low, key, v.fb, low, SELMODE::VSEL_TENSOR_TENSOR_MODE, tileLanes_);
        PipeBarrier<PIPE_V>();
        const uint32_t moved = v.CountValidRows(move_, v.fd);
        movedRows_ += moved;
        return moved;
    }

    // The moving rows' new frame, a new version: the target Decide left in fa; low 0 on the moving rows; every moving
    // row has a frame from now on.
    __aicore__ inline void Move(uint32_t r) {
        AivRows<float>& v = *v_;
        uint32_t& version = version_[TileOf(r)];
        const LocalTensor<float> frame = Frame(r, version), moved = Frame(r, version + 1);
        const LocalTensor<float> low = low_[r], known = known_[r];
        const LocalTensor<uint8_t> moving = v.bits, staying = v.bits[32];
        CompareScalar(moving, move_, 0.5f, CMPMODE::GT, LANES);
        CompareScalar(staying, move_, 0.5f, CMPMODE::LT, LANES);
        PipeBarrier<PIPE_V>();
        Select(moved, moving, v.fa, frame, SELMODE::VSEL_TENSOR_TENSOR_MODE, tileLanes_);
        Select(low, staying, low, 0.0f, SELMODE::VSEL_TENSOR_SCALAR_MODE, tileLanes_);
        Max(known, known, move_, tileLanes_);
        PipeBarrier<PIPE_V>();
        ++version;
    }

    // The stack's close verdicts: both AIVs' words (written before their P_READY; the AIC set PV_READY after it
    // had both), ORed.
    __aicore__ inline uint32_t Closes(uint32_t stack) {
        LocalTensor<uint32_t> w = v_->maskQue.template AllocTensor<uint32_t>();
        DataCopy(w, slots_.verdict[VerdictWordIndex(*t_, stack, 0)], VerdictWordIndex(*t_, 0, 1) + 8);
        v_->maskQue.EnQue(w);
        w = v_->maskQue.template DeQue<uint32_t>();
        SyncPipes<HardEvent::MTE2_S>();
        const uint32_t closes = w.GetValue(0) | w.GetValue(VerdictWordIndex(*t_, 0, 1));
        v_->maskQue.FreeTensor(w);
        return closes;
    }

    // A segment into every row tile's O and l: summed against the frames in force before block slot `slot`'s
    // block, or, for the task's last segment (final), against the current ones.
    __aicore__ inline void MergeSegment(const GlobalTensor<float>& seg, uint32_t slot, bool final) {
        AivRows<float>& v = *v_;
        for (uint32_t r = 0; r < v.aivRows; r += v.tileRows) {
            v.EnterTile(r);
            const uint32_t tile = TileOf(r);
            const LocalTensor<float> segFrame = Frame(r, final ? version_[tile] : versionAt_[tile][slot]);
            if (!merged_) FirstMerge(seg, segFrame, r);  // nothing summed yet: a = 0 and acc = 0, so acc = seg
            else Merge(seg, segFrame, r);
        }
        v.LeaveTile();
        merged_ = true;
    }

    // acc = FP32(FP32(a acc) + seg) for O (the stage's oAcc, rows x D) and l of the row tile at row r, a =
    // exp(FP32(scale FP32(G_acc - G_seg))) or 0 where nothing was summed yet (l = 0); G_acc = G_seg. seg: the
    // segment's rows of [O | l] (D + 16 FP32 each) in GM; its O in row chunks through S's queue, its l column
    // through the mask queue.
    __aicore__ inline void Merge(const GlobalTensor<float>& seg, const LocalTensor<float>& segFrame, uint32_t r) {
        AivRows<float>& v = *v_;
        const uint32_t d = v.d, cols = d + Policy::VALUE_EXTRA_COLS, rows = v.rows;
        const LocalTensor<float> l = v.l[r], accFrame = accFrame_[r], oAcc = v.oAcc[r * d];
        Sub(v.tmp1, accFrame, segFrame, LANES);
        CompareScalar(v.bits, l, 0.0f, CMPMODE::NE, LANES);
        PipeBarrier<PIPE_V>();
        Muls(v.tmp1, v.tmp1, scale_, LANES);
        PipeBarrier<PIPE_V>();
        Exp(v.tmp1, v.tmp1, LANES);
        PipeBarrier<PIPE_V>();
        Select(v.tmp1, v.bits, v.tmp1, 0.0f, SELMODE::VSEL_TENSOR_SCALAR_MODE, LANES);  // a
        PipeBarrier<PIPE_V>();
        v.Broadcast(v.tmp1);
        const uint32_t chunk = MinU(rows, v.tileRows * BLOCK_KV / d);  // rows of O a buffer of S's queue holds
        for (uint32_t i = 0; i < rows; i += chunk) {
            const uint32_t n = MinU(chunk, rows - i);
            LocalTensor<float> o = v.sQue.template AllocTensor<float>();
            DataCopy(o, seg[(uint64_t)(v.r0 + i) * cols],
                     DataCopyParams((uint16_t)n, (uint16_t)(d * 4 / 32), (uint16_t)((cols - d) * 4 / 32), 0));
            v.sQue.EnQue(o);
            o = v.sQue.template DeQue<float>();
            v.RowBroadcast(RowOp::MUL, oAcc[i * d], oAcc[i * d], v.bc[i * 8], n, d);
            PipeBarrier<PIPE_V>();
            Add(oAcc[i * d], oAcc[i * d], o, (int32_t)(n * d));
            PipeBarrier<PIPE_V>();
            v.sQue.FreeTensor(o);
        }
        LocalTensor<float> lcol = LoadLColumn(seg);
        v.BlockMaxes(segL_, lcol, rows, 0x01);
        Mul(l, v.tmp1, l, tileLanes_);
        PipeBarrier<PIPE_V>();
        Add(l, l, segL_, tileLanes_);
        Muls(accFrame, segFrame, 1.0f, tileLanes_);
        PipeBarrier<PIPE_V>();
        v.maskQue.FreeTensor(lcol);
    }

    // Merge's first segment of a task: O, l and G_acc of the row tile at row r take the segment's.
    __aicore__ inline void FirstMerge(const GlobalTensor<float>& seg, const LocalTensor<float>& segFrame, uint32_t r) {
        AivRows<float>& v = *v_;
        const uint32_t d = v.d, cols = d + Policy::VALUE_EXTRA_COLS, rows = v.rows;
        SyncPipes<HardEvent::V_MTE2>();  // O's buffer was zeroed by the vector pipe
        DataCopy(v.oAcc[r * d], seg[(uint64_t)v.r0 * cols],
                 DataCopyParams((uint16_t)rows, (uint16_t)(d * 4 / 32), (uint16_t)((cols - d) * 4 / 32), 0));
        LocalTensor<float> lcol = LoadLColumn(seg);
        v.BlockMaxes(v.l[r], lcol, rows, 0x01);
        Muls(accFrame_[r], segFrame, 1.0f, tileLanes_);
        SyncPipes<HardEvent::MTE2_V>();
        PipeBarrier<PIPE_V>();
        v.maskQue.FreeTensor(lcol);
    }

    // The segment's l column of this AIV's rows: a 32-byte block from column D of each row (dequeued from the mask
    // queue; the caller frees it), lane 0 of each gathered by BlockMaxes.
    __aicore__ inline LocalTensor<float> LoadLColumn(const GlobalTensor<float>& seg) {
        AivRows<float>& v = *v_;
        const uint32_t cols = v.d + Policy::VALUE_EXTRA_COLS;
        LocalTensor<float> lcol = v.maskQue.template AllocTensor<float>();
        DataCopy(lcol, seg[(uint64_t)v.r0 * cols + v.d],
                 DataCopyParams((uint16_t)v.rows, 1, (uint16_t)(cols / 8 - 1), 0));
        v.maskQue.EnQue(lcol);
        return v.maskQue.template DeQue<float>();
    }

    AivRows<float>* v_;
    const PasaTilingData* t_;
    float scale_ = 0.0f, dropLimit_ = 0.0f;
    uint32_t core_ = 0, versions_ = 1;
    uint32_t lanes_ = LANES;            // lanes of this AIV's rows in its row vectors (64 or 128)
    int32_t tileLanes_ = LANES;         // lanes of a row tile (AivRows::tileRows)
    uint32_t version_[MAX_TILES] = {};  // per row tile, the current frame version of the task
    // per row tile, block slot j % PasaSlotRing -> the frame version in force before block j
    uint32_t versionAt_[MAX_TILES][MAX_SLOT_RING] = {};
    uint32_t verdict_ = 0;              // the open stack's moves (bit b: its block b)
    uint32_t stackBlocks_ = 0;          // blocks of the open stack so far
    uint32_t stacksSent_ = 0, taskStack0_ = 0;  // stacks of the launch whose verdicts were written; the task's first
    uint32_t movedRows_ = 0, tileCloses_ = 0;   // the status words 1 and 2
    bool merged_ = false;                       // a segment of the task merged already
    LocalTensor<float> ones_, fresh_, known_, low_, peak_, move_, accFrame_, segL_, frames_;
    FramedSlots slots_;
};

}  // namespace pasa_kernel

#endif  // PASA_SOFTMAX_FRAMED_H
