// The scalar unit's data cache and DataCacheCleanAndInvalid (asc-devkit docs: DataCacheCleanAndInvalid,
// "Scalar单元访问Global Memory，首先会访问每个核内的Data Cache，因此存在Data Cache与Global Memory的Cache
// 一致性问题"). DMA (DataCopy, Fixpipe) reads and writes GM directly; GlobalTensor::GetValue goes through
// a per-core cache of 64-byte lines: the first read of a line fetches it, later reads return that copy,
// so a value another core (or this core's DMA) wrote since is seen only after the line was dropped with
// DataCacheCleanAndInvalid. SetValue writes through to GM and into the line if it is cached (the model
// keeps no dirty lines: it checks the reader's side of the protocol).
#pragma once
#include <cstdint>

#include "host_model/tensor.h"

namespace AscendC {

enum class CacheLine : uint8_t { SINGLE_CACHE_LINE = 0, ENTIRE_DATA_CACHE };
enum class DcciDst : uint8_t { CACHELINE_ALL = 0, CACHELINE_UB, CACHELINE_OUT, CACHELINE_ATOMIC };

}  // namespace AscendC

namespace ascendc_model {
// Drops the line holding `gm` (or every line) from the calling core's data cache.
void DropCachedLines(const void* gm, bool entire);
}  // namespace ascendc_model

namespace AscendC {

// CACHELINE_OUT and CACHELINE_ALL keep GM coherent; CACHELINE_UB and CACHELINE_ATOMIC concern other
// memories and leave the GM lines alone.
template <typename T, CacheLine entireType, DcciDst dcciDst>
void DataCacheCleanAndInvalid(const GlobalTensor<T>& dst) {
    ascendc_model::CountScalarAccess();
    if (dcciDst == DcciDst::CACHELINE_OUT || dcciDst == DcciDst::CACHELINE_ALL)
        ascendc_model::DropCachedLines(dst.GetPhyAddr(), entireType == CacheLine::ENTIRE_DATA_CACHE);
}

// Without dcciDst: DCache and GM only.
template <typename T, CacheLine entireType>
void DataCacheCleanAndInvalid(const GlobalTensor<T>& dst) {
    DataCacheCleanAndInvalid<T, entireType, DcciDst::CACHELINE_OUT>(dst);
}

}  // namespace AscendC
