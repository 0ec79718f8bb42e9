// Entry of the PASA fused-attention kernel (KERNEL_TYPE_MIX_AIC_1_2, Atlas A2): tiling-key dispatch
// between the allocations of pasa_allocation.h ("pasa", "pasa_fp32", the FlashAttention baseline
// "fp16_fp32" and "pasa_rs"), and the AIC / AIV programs. See pasa_common.h for the data flow and
// op_host/pasa_tiling.h for the tiling.
#include "kernel_operator.h"
#include "pasa_tiling_data.h"
#include "pasa_allocation.h"
#include "pasa_shift_matmul.h"
#include "pasa_centre_keys.h"
#include "pasa_cube_stage.h"
#include "pasa_vector_softmax.h"
#include "pasa_decode_combine.h"

using namespace pasa_kernel;

template <class Policy>
__aicore__ inline void RunAttention(const PasaTilingData& t, GM_ADDR query, GM_ADDR key, GM_ADDR value,
                                    GM_ADDR mask, GM_ADDR lenQAddr, GM_ADDR lenKvAddr, GM_ADDR blockTable, GM_ADDR out,
                                    GM_ADDR lse, GM_ADDR ws) {
    TPipe pipe;
    GlobalTensor<int64_t> lenQ, lenKv;
    if (lenQAddr != nullptr) lenQ.SetGlobalBuffer((__gm__ int64_t*)lenQAddr);
    if (lenKvAddr != nullptr) lenKv.SetGlobalBuffer((__gm__ int64_t*)lenKvAddr);
    if ASCEND_IS_AIC {
        const uint32_t core = GetBlockIdx();
        CubeOps cube;
        // Q and K' tiles: kShiftCols columns (pasa_rs's augmented column), V tiles D
        cube.Init(&pipe, t.blockQ * t.kShiftCols * 2, BLOCK_KV * t.kShiftCols * 2, BLOCK_KV * BLOCK_KV * 2);
        if constexpr (Policy::SHIFT == ShiftKind::PASA_M) ShiftPrepass(t, cube, key, blockTable, ws, lenKv, core);
        if constexpr (Policy::SHIFT == ShiftKind::ROW_SHIFTED) KeySumsPrepass(t, cube, key, blockTable, ws, lenKv, core);
        CubeStage<Policy> stage;
        stage.Init(&t, &cube, query, key, value, blockTable, ws, core);
        for (uint32_t k = 0; k < t.tasksPerCore; ++k) {
            const uint32_t id = PasaCoreTaskId(t, core, k);
            if (id == t.totalTasks) break;
            stage.Run(DecodeTask(t, id, lenQ, lenKv));
        }
    }
    if ASCEND_IS_AIV {
        const uint32_t aiv = GetBlockIdx();
        const uint32_t core = aiv / GetTaskRatio();
        const uint32_t sub = GetSubBlockIdx();
        VectorSoftmax<Policy> softmax;
        softmax.Init(&t, &pipe, query, mask, out, lse, ws, core, sub);
        if constexpr (Policy::SHIFT == ShiftKind::PASA_M) WriteShiftMatrix(t, softmax.ProbQueue(), ws, core, sub, softmax.RowsPerAiv());
        if constexpr (Policy::SHIFT == ShiftKind::ROW_SHIFTED) {
            KeyCentring centring(t, key, blockTable, ws, softmax.ScoreQueue(), softmax.ProbQueue(), softmax.LseQueue(),
                                 softmax.RowShiftScratch(), softmax.Bits());
            centring.Run(lenKv, core, sub, softmax.RowsPerAiv());
        }
        for (uint32_t k = 0; k < t.tasksPerCore; ++k) {
            const uint32_t id = PasaCoreTaskId(t, core, k);
            if (id == t.totalTasks) break;
            softmax.Run(DecodeTask(t, id, lenQ, lenKv));
        }
        if (t.kvSplits > 1)
            CombineSplits(t, ws, out, lse, aiv, softmax.InQueue(), softmax.OutQueue(), softmax.LseQueue(),
                          softmax.Scratch(), softmax.ScratchVec());
        softmax.WriteStatus(aiv);
    }
}

extern "C" __global__ __aicore__ void pasa_fused_attention(GM_ADDR query, GM_ADDR key, GM_ADDR value,
                                                           GM_ADDR attenMask, GM_ADDR actualSeqLengths,
                                                           GM_ADDR actualSeqLengthsKv, GM_ADDR blockTable,
                                                           GM_ADDR attentionOut, GM_ADDR softmaxLse, GM_ADDR workspace,
                                                           GM_ADDR tiling) {
    KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_MIX_AIC_1_2);
    REGISTER_TILING_DEFAULT(PasaTilingData);
    GET_TILING_DATA_WITH_STRUCT(PasaTilingData, td, tiling);
    GM_ADDR ws = GetUserWorkspace(workspace);
    if (TILING_KEY_IS(PASA_TILING_KEY_FP16_STATE)) {
        RunAttention<PasaFp16State>(td, query, key, value, attenMask, actualSeqLengths, actualSeqLengthsKv,
                                    blockTable, attentionOut, softmaxLse, ws);
    } else if (TILING_KEY_IS(PASA_TILING_KEY_FP32_STATE)) {
        RunAttention<PasaFp32State>(td, query, key, value, attenMask, actualSeqLengths, actualSeqLengthsKv,
                                    blockTable, attentionOut, softmaxLse, ws);
    } else if (TILING_KEY_IS(PASA_TILING_KEY_FLASH_FP16_SCORE)) {
        RunAttention<FlashFp16ScoreFp32State>(td, query, key, value, attenMask, actualSeqLengths,
                                              actualSeqLengthsKv, blockTable, attentionOut, softmaxLse, ws);
    } else if (TILING_KEY_IS(PASA_TILING_KEY_ROW_SHIFTED)) {
        RunAttention<RowShiftedFp32State>(td, query, key, value, attenMask, actualSeqLengths, actualSeqLengthsKv,
                                          blockTable, attentionOut, softmaxLse, ws);
    }
}
