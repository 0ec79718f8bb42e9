// Entry of the PASA fused-attention kernel (KERNEL_TYPE_MIX_AIC_1_2, Atlas A2): tiling-key dispatch over the
// allocations of pasa_allocation.h (PASA_KERNEL_ALLOCATIONS), and the AIC / AIV programs, which compose each
// allocation's components (its pre-pass, its Scores on the AIC, its Softmax epilogue on the AIVs) with the shared
// stages. See pasa_common.h for the data flow and op_host/pasa_tiling.h for the tiling.
#include "kernel_operator.h"
#include "pasa_tiling_data.h"
#include "pasa_allocation.h"
#include "pasa_shift_matmul.h"
#include "pasa_centre_keys.h"
#include "pasa_cube_stage.h"
#include "pasa_row_shift_cube.h"
#include "pasa_framed_cube.h"
#include "pasa_vector_stage.h"
#include "pasa_softmax_flash.h"
#include "pasa_softmax_pasa.h"
#include "pasa_softmax_row_shifted.h"
#include "pasa_softmax_framed.h"
#include "pasa_decode_combine.h"

using namespace pasa_kernel;

template <class Policy>
__aicore__ inline void RunAttention(const PasaTilingData& t, GM_ADDR query, GM_ADDR key, GM_ADDR value,
                                    GM_ADDR mask, GM_ADDR lenQAddr, GM_ADDR lenKvAddr, GM_ADDR blockTable, GM_ADDR sink,
                                    GM_ADDR out, GM_ADDR lse, GM_ADDR ws) {
    TPipe pipe;
    GlobalTensor<int64_t> lenQ, lenKv;
    if (lenQAddr != nullptr) lenQ.SetGlobalBuffer((__gm__ int64_t*)lenQAddr);
    if (lenKvAddr != nullptr) lenKv.SetGlobalBuffer((__gm__ int64_t*)lenKvAddr);
    if ASCEND_IS_AIC {
        const uint32_t core = GetBlockIdx();
        CubeOps cube;
        cube.Init(&pipe, PlanAicL1(t.blockQ, t.headDim, TraitsOf<Policy>()),
                  PlanAicL0a(t.blockQ, t.headDim, TraitsOf<Policy>()),
                  PlanAicL0c(t.blockQ, t.headDim, TraitsOf<Policy>()));
        if constexpr (Policy::PREPASS == Prepass::SHIFT_MATRIX) ShiftPrepass(t, cube, key, blockTable, ws, lenKv, core);
        if constexpr (Policy::PREPASS == Prepass::CENTRED_KEYS)
            KeySumsPrepass(t, cube, key, blockTable, ws, lenKv, core);
        CubeStage<Policy> stage;
        stage.Init(&t, &cube, query, key, value, blockTable, ws, core);
        for (uint32_t k = 0; k < t.tasksPerCore; ++k) {
            const uint32_t id = PasaCoreTaskId(t, core, k);
            if (id == t.totalTasks) break;
            stage.Run(DecodeTask(t, id, lenQ, lenKv));
        }
        stage.Finish();
    }
    if ASCEND_IS_AIV {
        const uint32_t aiv = GetBlockIdx();
        const uint32_t core = aiv / GetTaskRatio();
        const uint32_t sub = GetSubBlockIdx();
        VectorStage<Policy> stage;
        stage.Init(&t, &pipe, query, mask, sink, out, lse, ws, core, sub);
        auto& rows = stage.Rows();
        if constexpr (Policy::PREPASS == Prepass::SHIFT_MATRIX) WriteShiftMatrix(t, rows.pQue, ws, core, sub, rows.rm);
        if constexpr (Policy::PREPASS == Prepass::CENTRED_KEYS) {
            KeyCentring centring(t, key, blockTable, ws, rows.sQue, rows.pQue, rows.lseQue, rows.epilogueFp32,
                                 rows.bits);
            centring.Run(lenKv, core, sub, rows.rm);
        }
        stage.Prepare();
        for (uint32_t k = 0; k < t.tasksPerCore; ++k) {
            const uint32_t id = PasaCoreTaskId(t, core, k);
            if (id == t.totalTasks) break;
            stage.Run(DecodeTask(t, id, lenQ, lenKv));
        }
        if (t.kvSplits > 1)
            CombineSplits(t, ws, sink, out, lse, aiv, rows.pvQue, rows.outQue, rows.lseQue,
                          rows.oAcc.template ReinterpretCast<float>(), rows.fd);
        stage.WriteStatus(aiv);
    }
}

extern "C" __global__ __aicore__ void pasa_fused_attention(GM_ADDR query, GM_ADDR key, GM_ADDR value,
                                                           GM_ADDR attenMask, GM_ADDR actualSeqLengths,
                                                           GM_ADDR actualSeqLengthsKv, GM_ADDR blockTable,
                                                           GM_ADDR learnableSink, GM_ADDR attentionOut,
                                                           GM_ADDR softmaxLse, GM_ADDR workspace, GM_ADDR tiling) {
    KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_MIX_AIC_1_2);
    REGISTER_TILING_DEFAULT(PasaTilingData);
    GET_TILING_DATA_WITH_STRUCT(PasaTilingData, td, tiling);
    GM_ADDR ws = GetUserWorkspace(workspace);
    // One binary per tiling key, one test per row of PASA_KERNEL_ALLOCATIONS: the op build finds the keys in the
    // preprocessed source, where TILING_KEY_IS(k) reads "g_tilingKey == (k)" with k a literal (asc-devkit
    // tools/build/asc_op_compile_base/asc_op_compiler/kernel_info_infer.py, find_tilingkey).
#define PASA_RUN_IF_KEY(tilingKey, Policy)                                                                       \
    if (TILING_KEY_IS(tilingKey))                                                                                \
        RunAttention<Policy>(td, query, key, value, attenMask, actualSeqLengths, actualSeqLengthsKv, blockTable, \
                             learnableSink, attentionOut, softmaxLse, ws);
    PASA_KERNEL_ALLOCATIONS(PASA_RUN_IF_KEY)
#undef PASA_RUN_IF_KEY
}
