// The one place the kernel reads key or value rows from GM: where row s of (batch b, kv head h) sits,
// and the copy of up to one KV block of such rows into an L1 tile (NZ, padded to BLOCK_KV rows). Every
// K/V read goes through it: the K' pre-pass (pasa_shift_matmul.h), pasa_rs's key pre-pass on the AIC
// and the AIVs (pasa_centre_keys.h), and the cube stage's S = Q K^T and P V loads (pasa_cube_stage.h).
//
// A row's position is its index in batch b's keys, or in TND without a block table its token index (the caller
// adds the batch's start, Task::kvStart, KeySpan).
// Dense key/value: the block's rows are one strided run (KvOffset), copied exactly as CubeOps::LoadRows
// copies any operand. PageAttention (FIA's block_table): row s of batch b is row s % pageSize of page
// blockTable[b][s / pageSize] of the cache. Page lengths are multiples of 16 from 16 to 512, so a block
// of BLOCK_KV keys may start or end inside a page (48 or 144 do not divide 128) and spans up to
// 128/16 + 1 = 9 pages; it is copied as one DataCopy per run of rows that are consecutive in GM: the
// rows of one page, extended over the next pages where the table places them right after it (a cache
// (num_blocks, pageSize, Nkv*D) whose pages were handed out in order). The padding rows of a tail block
// repeat its last key, wherever that sits, so a paged block reaches the cube exactly as the dense one.
#ifndef PASA_KV_ROWS_H
#define PASA_KV_ROWS_H

#include "pasa_cube_ops.h"

namespace pasa_kernel {

class KvRows {
public:
    // cache: the key or the value input; blockTable: FIA's int32 (B, maxBlocksPerSeq) table, read only
    // when the tiling says the caches are paged.
    __aicore__ inline void Init(const PasaTilingData* t, GM_ADDR cache, GM_ADDR blockTable) {
        t_ = t;
        cache_.SetGlobalBuffer((__gm__ half*)cache);
        if (t->hasBlockTable) table_.SetGlobalBuffer((__gm__ int32_t*)blockTable);
    }

    // Rows [pos0, pos0 + rows) of (b, h), 1 <= rows <= BLOCK_KV, into a fresh NZ tile of `que` with
    // BLOCK_KV rows; rows [rows, BLOCK_KV) repeat the last one.
    template <class Q>
    __aicore__ inline LocalTensor<half> Load(CubeOps& cube, Q& que, uint32_t b, uint32_t h, uint32_t pos0,
                                             uint32_t rows) {
        const uint32_t d = t_->headDim;
        const uint64_t rowStride = t_->kvRowStride;
        if (!t_->hasBlockTable)
            return cube.LoadRows(que, cache_[KvOffset(*t_, b, h, pos0)], rows, BLOCK_KV, d, rowStride);
        LocalTensor<half> dst = que.template AllocTensor<half>();
        uint64_t lastRow = 0;
        for (uint32_t r = 0; r < rows;) {
            uint64_t runStart;
            const uint32_t n = Run(b, h, pos0 + r, rows - r, &runStart);
            cube.CopyRowsNz(dst, r, cache_[runStart], n, BLOCK_KV, d, rowStride);
            lastRow = runStart + (uint64_t)(n - 1) * rowStride;
            r += n;
        }
        cube.PadRowsNz(dst, rows, BLOCK_KV, cache_[lastRow], d, rowStride);
        que.EnQue(dst);
        return que.template DeQue<half>();
    }

    // The rows [pos, pos + n) of (b, h), 1 <= n <= rows, that follow each other in GM (row stride
    // kvRowStride) from row pos on: returns n and puts the first row's element offset in the cache in
    // *offset. Dense: all `rows`. Paged: the rest of pos's page, extended over the next pages where the
    // table places them right after it.
    __aicore__ inline uint32_t Run(uint32_t b, uint32_t h, uint32_t pos, uint32_t rows, uint64_t* offset) {
        if (!t_->hasBlockTable) {
            *offset = KvOffset(*t_, b, h, pos);
            return rows;
        }
        *offset = PagedRowOffset(b, h, pos);
        uint32_t n = MinU(t_->pageSize - pos % t_->pageSize, rows);
        while (n < rows && PagedRowOffset(b, h, pos + n) == *offset + (uint64_t)n * t_->kvRowStride)
            n += MinU(t_->pageSize, rows - n);
        return n;
    }

    __aicore__ inline const GlobalTensor<half>& Cache() const { return cache_; }

private:
    // Element offset of row `pos` of (b, h) in a paged cache. The table entry is read by the scalar unit
    // straight from GM (GetValue): the AIC has no UB to stage a table row in, and a row may hold any
    // number of entries, too many for a fixed scalar buffer. The entry last read is kept, so a walk that
    // visits a task's keys in order (each KvRows serves one walk: the K blocks, the V blocks, or the
    // pre-pass) reads each entry once, also where a page straddles two KV blocks or a run is extended.
    __aicore__ inline uint64_t PagedRowOffset(uint32_t b, uint32_t h, uint32_t pos) {
        const uint64_t entry = (uint64_t)b * t_->maxBlocksPerSeq + pos / t_->pageSize;
        if (entry != entry_) {
            entry_ = entry;
            page_ = (uint32_t)table_.GetValue(entry);
        }
        return page_ * t_->kvPageStride + h * t_->kvHeadStride + (uint64_t)(pos % t_->pageSize) * t_->kvRowStride;
    }

    const PasaTilingData* t_;
    GlobalTensor<half> cache_;
    GlobalTensor<int32_t> table_;
    uint64_t entry_ = ~0ull;  // the table entry (b * maxBlocksPerSeq + page index) last read, and its page
    uint64_t page_ = 0;
};

}  // namespace pasa_kernel

#endif  // PASA_KV_ROWS_H
