// Host tiling of the PASA fused-attention kernel: plain C++17, no CANN header.
//
// The fields and functions below are the interface that the host-model module (python/csrc/npu_host_model.cpp),
// the op definition's tiling registration (op_host/pasa_fused_attention_def.cpp), the grid tests
// (op_host/tests/test_tiling.cpp) and the kernel rely on; changes to them are additive. What an allocation asks of
// the plan comes from its kernel policy (op_kernel/pasa_allocation.h, through KernelAllocations()), the sizes of
// the on-chip buffers from op_kernel/pasa_buffer_plan.h, both shared with the kernel.
#ifndef PASA_TILING_H
#define PASA_TILING_H

#include <cstdint>
#include <string>
#include <vector>

#include "../op_kernel/pasa_allocation.h"
#include "../op_kernel/pasa_tiling_data.h"

namespace pasa {

// The allocation used where none is named (the op's `precision` attribute, TilingInput): python/pasa_npu/precision.py's
// DEFAULT_PRECISION (tests/npu/test_npu_backend.py checks that they agree).
constexpr const char* kDefaultPrecision = "fp32_frame";

// An allocation the kernel runs: its policy (op_kernel/pasa_allocation.h) as plain values, one per row of
// PASA_KERNEL_ALLOCATIONS.
struct AllocationTraits : pasa_kernel::PolicyTraits {
    const char* name;
    uint32_t tilingKey;
};
const std::vector<AllocationTraits>& KernelAllocations();
// The allocation named `precision`; throws std::invalid_argument naming the accepted ones.
const AllocationTraits& FindAllocation(const std::string& precision);

// What the toolchain keeps for itself in a mixed kernel on Atlas A2: the vector APIs' scratch from
// TMP_UB_OFFSET = 184 KB to the end of the 192 KB UB (asc-devkit impl/basic_api/utils/kernel_utils_constants.h,
// __NPU_ARCH__ 2201: TOTAL_VEC_LOCAL_SIZE = 184 KB), and 256 B of UB and of L1 the framework reserves in
// mixed kernels (asc-devkit docs/zh/guide/编程指南/高级编程/硬件实现/架构规格/NPU架构版本2201.md: "192KB - 256B -
// 8KB", "512KB - 256B"; more than the header's KFC_L1_RESERVER_SIZE = 128 B).
constexpr uint64_t kUbReservedBytes = 8 * 1024 + 256;
constexpr uint64_t kL1ReservedBytes = 256;

// The sizes GetCoreMemSize reports (physical); the plan subtracts the reserves above.
struct PlatformInfo {
    uint32_t aicNum = 24, aivNum = 48;
    uint64_t ubSize = 192 * 1024, l1Size = 512 * 1024, l0aSize = 64 * 1024, l0bSize = 64 * 1024,
             l0cSize = 128 * 1024;
};

// The cost model's handshake search (python/pasa_npu/cost_model.py, handshake_search): a stacked handshake of
// kvStack KV blocks per stack, S preLaunch stacks ahead, in place of the tiling's own choice, where it fits (else
// the per-block one). kvStack 0: the tiling's choice, as for every call of the op.
struct HandshakePin {
    uint32_t kvStack = 0, preLaunch = 0;
};

// Everything the op receives, at FIA's level (torch_npu.npu_fused_infer_attention_score).
struct TilingInput {
    // Shapes of the tensors as given (3-D for "BSH" and "TND", 4-D for "BNSD"/"BSND").
    std::vector<int64_t> queryShape, keyShape, valueShape;
    std::string inputLayout = "BSH";      // "BNSD", "BSH", "BSND", "TND"; attention_out has the same layout
    int64_t numHeads = 1;
    int64_t numKeyValueHeads = 0;         // 0 = numHeads
    double scale = 1.0;
    double beta = -1.0;                   // < 0: DefaultBeta(blockKv, scale); else in [0, 1)
    int64_t sparseMode = 0;               // 0..4
    int64_t preTokens = 2147483647, nextTokens = 2147483647;
    // atten_mask: uint8/bool (1 = masked out), modes 0 and 1 only, normalised by the caller to 4-D
    // (1|B, 1|N, MS1, MS2) with MS1 >= S1 and MS2 >= S2 (top-left corner read), contiguous.
    // Empty = no mask. For modes 2-4 the compressed 2048x2048 causal mask is checked by the caller
    // and not passed: pass an empty maskShape (the band is computed from indices).
    std::vector<int64_t> maskShape;
    // Per-batch valid lengths (B entries after the caller expands a single value); empty = absent.
    // TND: both required, FIA's cumulative query lengths (B = their count, the last at most T) and cumulative key
    // lengths, or with a block table each batch's own key length; no atten_mask (sparse modes 0, 2, 3, 4).
    // The kernel reads them from GM as int64; these copies only validate and size the plan.
    std::vector<int64_t> actualSeqLengths, actualSeqLengthsKv;
    // PageAttention (FIA's block_table and block_size): the table's shape (B, maxBlocksPerSeq), empty
    // for dense key/value, and the page length. With a table, key and value are caches of pages,
    // (num_blocks, blockSize, Nkv*D) or (num_blocks, Nkv, blockSize, D) whatever inputLayout is (which
    // then describes the query and the output), S2 is maxBlocksPerSeq * blockSize, and
    // actualSeqLengthsKv is required. The table's entries are not seen here (the op's tiling gets its
    // shape only): CheckBlockTable checks them where they are on the host.
    std::vector<int64_t> blockTableShape;
    int64_t blockSize = 0;
    // FIA v2's learnable_sink: FP32 (N,), one logit per query head; empty = no sink.
    std::vector<int64_t> learnableSinkShape;
    std::string precision = kDefaultPrecision;  // a name of KernelAllocations()
    PlatformInfo platform;
    HandshakePin handshakePin;  // the cost model's only; the op leaves it empty
};

// What the kernel reads and writes in GM (pasa_fused_attention's arguments), for the launcher:
//   query/key/value  FP16 in inputLayout; attentionOut FP16 in the query's layout.
//   attenMask        nullptr, or uint8 (1 = masked out), contiguous, the 4-D maskShape above.
//   actualSeqLengths(Kv)  nullptr, or int64[B] (the same values as the vectors above). The kernel ignores
//                    actualSeqLengths when S1 == 1 (FIA's decode rule).
//   blockTable       nullptr, or int32 (B, maxBlocksPerSeq), contiguous: the pages of each batch's keys;
//                    the kernel reads entries [0, ceil(actualSeqLengthsKv[b] / blockSize)) of row b.
//   learnableSink    nullptr, or FP32 (N,): each row's sink joins its softmax once, in the true scale.
//   softmaxLse       FP32 (B, N, S1) (TND: (T, N)), always written: the true-scale lse; -inf for a valid
//                    row with no kept key (FIA: LSE_NO_KEY), +inf for a padded row past
//                    actual_seq_lengths (FIA: 3e+99 -> +inf). Output rows of both kinds are 0.
//   workspace        workspaceBytes of user workspace (CANN's op definition adds its system workspace).
//                    Status: uint32 at StatusWordOffset(t, aiv) for aiv < 2*blockDim; bit 0 set = an Inf
//                    appeared in S' (PASA could not absorb the scores' amplitude); the outputs then
//                    carry the same Inf/NaN as the golden model, and the binding should fall back.
inline uint64_t StatusWordOffset(const PasaTilingData& t, uint32_t aiv) { return t.wsStatusOffset + 32ull * aiv; }
// softmaxLse's shape, as above: (T, N) for TND, else (B, N, S1).
inline std::vector<int64_t> LseShape(const PasaTilingData& t) {
    if (t.layout == PASA_LAYOUT_TND) return {t.queryTokens, t.numHeads};
    return {t.batch, t.numHeads, t.seqQ};
}

// SetScheduleMode values (TilingContext): the kernel's all-core barriers (CrossCoreSetFlag mode 0 after
// the K' pre-pass, and after the split-KV partials) need batch mode, so that every core of the launch
// runs at once; FIA sets it for the same reason ("syncall场景需要使用batch mode").
constexpr uint32_t kScheduleModeBatch = 1;

struct TilingResult {
    PasaTilingData data;
    uint64_t tilingKey;
    uint32_t blockDim;
    uint64_t workspaceBytes;
    uint32_t scheduleMode;
};

// Throws std::invalid_argument naming the bad argument and the accepted values.
TilingResult ComputeTiling(const TilingInput& in);

// PageAttention: throws std::invalid_argument unless every table entry the kernel reads (those of the
// live pages of each batch, see blockTable above) names one of the caches' numBlocks pages.
void CheckBlockTable(const PasaTilingData& t, const int32_t* table, const std::vector<int64_t>& actualSeqLengthsKv,
                     int64_t numBlocks);

// pasa_npu.beta.default_beta(block_kv, scale): the FP16 fixed point of beta/(1-beta) = f(beta)
// from the start value 1 - 2^-6, for M = (I - beta/n J)*scale with entries rounded to FP16.
// scale <= 0 means "no scale" (Python's scale=None).
double DefaultBeta(int blockKv, double scale);
// pasa_npu.beta.shift_entries(beta, block_kv, "float16", scale): (diagonal, off-diagonal) rounded to FP16.
void ShiftEntries(double beta, int blockKv, double scale, double* diag, double* off);

// One AI core's share of the work, for coverage tests: the (b, first head, head count, first row, row
// count, kv split) of each task core `core` runs. Rows are [row0, row0 + rows) of (b, h) for each head h in
// [n, n + heads) (heads > 1: decode with GQA, a group's heads packed into one task); with kvSplits > 1
// every row is covered once per split and combined once (CombineRows).
struct TaskInfo {
    uint32_t b, n, heads, row0, rows, split, kvBlock0, kvBlockEnd;
};
std::vector<TaskInfo> CoreTasks(const PasaTilingData& t, uint32_t core);
// Rows (flattened (b*N + n)*S1 + s) combined by AIV `aiv` when kvSplits > 1: [first, last).
void CombineRows(const PasaTilingData& t, uint32_t aiv, uint64_t* first, uint64_t* last);

}  // namespace pasa

#endif  // PASA_TILING_H
