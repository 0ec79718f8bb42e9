// CANN-ONLY: the op definition of PasaFusedAttention (OpDef, InferShape/InferDataType, tiling function).
// NEVER COMPILED in this repository's CI (no CANN there); built by cann/CMakeLists.txt into the custom op
// package, where opbuild also generates aclnnPasaFusedAttention(GetWorkspaceSize) from this OpDef.
//
// Interface: FusedInferAttentionScore's (torch_npu.npu_fused_infer_attention_score) for the subset the
// kernel implements, same input/attribute names and defaults, plus PASA's `beta` and `precision`:
//   inputs   query, key, value (FP16; the binding converts BF16), atten_mask (optional, bool/uint8/int8,
//            1 = masked out), actual_seq_lengths, actual_seq_lengths_kv (optional int64, B values; TND:
//            required, cumulative, B = their count; with a block_table the key lengths are each batch's own),
//            block_table (optional int32 (B, max_blocks_per_seq): PageAttention; key/value are then caches
//            (num_blocks, block_size, Nkv*D) or (num_blocks, Nkv, block_size, D)), learnable_sink (optional
//            FP32 (N,): FIA v2's sink logit per query head; the binding converts BF16)
//   outputs  attention_out (query's shape and layout, FP16), softmax_lse (FP32 (B, N, S1, 1), TND (T, N, 1), always
//            written; the binding returns FIA's placeholder when softmax_lse_flag is false)
//   attrs    num_heads, scale, pre_tokens, next_tokens, input_layout ("BNSD", "BSH", "BSND", "TND"),
//            num_key_value_heads, sparse_mode (0-4), inner_precise (0-3, accepted for compatibility; the
//            allocation is `precision`), block_size (PageAttention's page length, 0 without a block_table),
//            softmax_lse_flag, beta (< 0: the default for the block length and scale), precision (an allocation
//            of pasa::KernelAllocations(), default pasa::kDefaultPrecision: the tiling key)
// The tiling itself is pasa::ComputeTiling (op_host/pasa_tiling.cpp): the same code the host model runs
// in CI, so this file only translates the gert context to pasa::TilingInput and the result back.
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <string>
#include <vector>

#include "register/op_def_registry.h"
#include "tiling/platform/platform_ascendc.h"

#include "pasa_cann_compat.h"
#include "pasa_tiling.h"

namespace {
// Input, output and attribute indices (the order of the declarations in the OpDef below).
enum Input : size_t {
    QUERY = 0, KEY, VALUE, ATTEN_MASK, ACTUAL_SEQ_LENGTHS, ACTUAL_SEQ_LENGTHS_KV, BLOCK_TABLE, LEARNABLE_SINK
};
enum Output : size_t { ATTENTION_OUT = 0, SOFTMAX_LSE };
enum Attr : size_t {
    NUM_HEADS = 0, SCALE, PRE_TOKENS, NEXT_TOKENS, INPUT_LAYOUT, NUM_KEY_VALUE_HEADS, SPARSE_MODE,
    INNER_PRECISE, BLOCK_SIZE, SOFTMAX_LSE_FLAG, BETA, PRECISION
};
constexpr const char* kOpName = "PasaFusedAttention";

std::vector<int64_t> Dims(const gert::Shape& s) {
    std::vector<int64_t> v(s.GetDimNum());
    for (size_t i = 0; i < v.size(); ++i) v[i] = s.GetDim(i);
    return v;
}

// (B, N, S1) of the query for a layout, TND's as (0, N, T) (its B is the lengths' count); false if the layout or
// rank is not one the kernel reads.
bool QueryBns1(const gert::Shape& q, const char* layout, int64_t numHeads, int64_t* b, int64_t* n, int64_t* s1) {
    if (std::strcmp(layout, "TND") == 0 && q.GetDimNum() == 3) {
        *b = 0; *n = q.GetDim(1); *s1 = q.GetDim(0);
    } else if (std::strcmp(layout, "BNSD") == 0 && q.GetDimNum() == 4) {
        *b = q.GetDim(0); *n = q.GetDim(1); *s1 = q.GetDim(2);
    } else if (std::strcmp(layout, "BSND") == 0 && q.GetDimNum() == 4) {
        *b = q.GetDim(0); *n = q.GetDim(2); *s1 = q.GetDim(1);
    } else if (std::strcmp(layout, "BSH") == 0 && q.GetDimNum() == 3) {
        *b = q.GetDim(0); *n = numHeads; *s1 = q.GetDim(1);
    } else {
        return false;
    }
    return true;
}

// An optional int64 value-dependent input as B values (FIA: one value for all batches, or at least B); batch < 0
// (TND): all of its values, one per batch.
bool Lengths(gert::TilingContext* ctx, size_t index, int64_t batch, std::vector<int64_t>* out) {
    const gert::Tensor* t = ctx->GetOptionalInputTensor(index);
    if (t == nullptr || t->GetShapeSize() == 0) return true;  // absent
    const int64_t* data = t->GetData<int64_t>();
    if (data == nullptr) return false;
    const int64_t n = t->GetShapeSize();
    if (batch < 0) batch = n;
    // The kernel reads B int64 values from GM, so a single value must already be expanded by the caller.
    if (n < batch) return false;
    out->assign(data, data + batch);
    return true;
}

// atten_mask's shape as the tiling wants it: 4-D (1|B, 1|N, MS1, MS2). FIA also takes (S1, S2),
// (1|B, S1, S2) and, for decode, (1|B, S2): the missing dims are broadcast ones.
std::vector<int64_t> MaskShape4d(const gert::Shape& m, int64_t s1) {
    std::vector<int64_t> d = Dims(m);
    if (d.size() == 2 && s1 == 1) return {d[0], 1, 1, d[1]};  // decode (B, S2)
    while (d.size() < 4) d.insert(d.begin(), 1);
    return d;
}
}  // namespace

namespace ge {
static graphStatus InferShapePasaFusedAttention(gert::InferShapeContext* ctx) {
    const gert::Shape* q = ctx->GetInputShape(QUERY);
    const gert::RuntimeAttrs* attrs = ctx->GetAttrs();
    if (q == nullptr || attrs == nullptr) return GRAPH_FAILED;
    const char* layout = attrs->GetAttrPointer<char>(INPUT_LAYOUT);
    const int64_t* numHeads = attrs->GetAttrPointer<int64_t>(NUM_HEADS);
    int64_t b, n, s1;
    if (layout == nullptr || numHeads == nullptr || !QueryBns1(*q, layout, *numHeads, &b, &n, &s1)) {
        std::fprintf(stderr, "%s: input_layout must be BNSD, BSND (4-D query), BSH or TND (3-D query)\n", kOpName);
        return GRAPH_FAILED;
    }
    *ctx->GetOutputShape(ATTENTION_OUT) = *q;  // same layout and shape as the query
    gert::Shape* lse = ctx->GetOutputShape(SOFTMAX_LSE);
    if (std::strcmp(layout, "TND") == 0) {  // (T, N, 1)
        lse->SetDimNum(3);
        lse->SetDim(0, s1);
        lse->SetDim(1, n);
        lse->SetDim(2, 1);
        return GRAPH_SUCCESS;
    }
    lse->SetDimNum(4);
    lse->SetDim(0, b);
    lse->SetDim(1, n);
    lse->SetDim(2, s1);
    lse->SetDim(3, 1);
    return GRAPH_SUCCESS;
}

static graphStatus InferDataTypePasaFusedAttention(gert::InferDataTypeContext* ctx) {
    ctx->SetOutputDataType(ATTENTION_OUT, ctx->GetInputDataType(QUERY));
    ctx->SetOutputDataType(SOFTMAX_LSE, DT_FLOAT);
    return GRAPH_SUCCESS;
}
}  // namespace ge

namespace optiling {
static ge::graphStatus PasaFusedAttentionTiling(gert::TilingContext* ctx) {
    const gert::RuntimeAttrs* attrs = ctx->GetAttrs();
    const gert::StorageShape* q = ctx->GetInputShape(QUERY);
    const gert::StorageShape* k = ctx->GetInputShape(KEY);
    const gert::StorageShape* v = ctx->GetInputShape(VALUE);
    if (attrs == nullptr || q == nullptr || k == nullptr || v == nullptr) return ge::GRAPH_FAILED;

    pasa::TilingInput in;
    in.queryShape = Dims(q->GetStorageShape());
    in.keyShape = Dims(k->GetStorageShape());
    in.valueShape = Dims(v->GetStorageShape());
    in.numHeads = *attrs->GetAttrPointer<int64_t>(NUM_HEADS);
    in.scale = *attrs->GetAttrPointer<float>(SCALE);
    in.preTokens = *attrs->GetAttrPointer<int64_t>(PRE_TOKENS);
    in.nextTokens = *attrs->GetAttrPointer<int64_t>(NEXT_TOKENS);
    in.inputLayout = attrs->GetAttrPointer<char>(INPUT_LAYOUT);
    in.numKeyValueHeads = *attrs->GetAttrPointer<int64_t>(NUM_KEY_VALUE_HEADS);
    in.sparseMode = *attrs->GetAttrPointer<int64_t>(SPARSE_MODE);
    in.beta = *attrs->GetAttrPointer<float>(BETA);
    in.precision = attrs->GetAttrPointer<char>(PRECISION);
    in.blockSize = *attrs->GetAttrPointer<int64_t>(BLOCK_SIZE);
    // PageAttention: the table's shape only; its entries are device data the tiling never reads (FIA's
    // block_table is not value-dependent either).
    const gert::StorageShape* blockTable = ctx->GetOptionalInputShape(BLOCK_TABLE);
    if (blockTable != nullptr) in.blockTableShape = Dims(blockTable->GetStorageShape());
    const gert::StorageShape* sink = ctx->GetOptionalInputShape(LEARNABLE_SINK);
    if (sink != nullptr) in.learnableSinkShape = Dims(sink->GetStorageShape());
    const int64_t innerPrecise = *attrs->GetAttrPointer<int64_t>(INNER_PRECISE);
    if (innerPrecise < 0 || innerPrecise > 3) {
        std::fprintf(stderr, "%s: inner_precise must be one of 0, 1, 2, 3, got %lld\n", kOpName, (long long)innerPrecise);
        return ge::GRAPH_FAILED;
    }

    int64_t b = 0, n = 0, s1 = 0;
    if (!QueryBns1(q->GetStorageShape(), in.inputLayout.c_str(), in.numHeads, &b, &n, &s1)) {
        std::fprintf(stderr, "%s: input_layout must be BNSD, BSND (4-D query), BSH or TND (3-D query), got %s\n",
                     kOpName, in.inputLayout.c_str());
        return ge::GRAPH_FAILED;
    }
    const gert::StorageShape* mask = ctx->GetOptionalInputShape(ATTEN_MASK);
    // Modes 2-4 take FIA's compressed 2048x2048 causal mask; the kernel computes the band from indices.
    if (mask != nullptr && in.sparseMode <= 1) in.maskShape = MaskShape4d(mask->GetStorageShape(), s1);
    const int64_t batch = in.inputLayout == "TND" ? -1 : b;  // TND: one length per batch, B their count
    if (!Lengths(ctx, ACTUAL_SEQ_LENGTHS, batch, &in.actualSeqLengths) ||
        !Lengths(ctx, ACTUAL_SEQ_LENGTHS_KV, batch, &in.actualSeqLengthsKv)) {
        std::fprintf(stderr, "%s: actual_seq_lengths / actual_seq_lengths_kv must hold at least B = %lld int64 "
                     "values on the host (expand a single value to B)\n", kOpName, (long long)b);
        return ge::GRAPH_FAILED;
    }

    auto platform = platform_ascendc::PlatformAscendC(ctx->GetPlatformInfo());
    in.platform.aicNum = platform.GetCoreNumAic();
    in.platform.aivNum = platform.GetCoreNumAiv();
    platform.GetCoreMemSize(platform_ascendc::CoreMemType::UB, in.platform.ubSize);
    platform.GetCoreMemSize(platform_ascendc::CoreMemType::L1, in.platform.l1Size);
    platform.GetCoreMemSize(platform_ascendc::CoreMemType::L0_A, in.platform.l0aSize);
    platform.GetCoreMemSize(platform_ascendc::CoreMemType::L0_B, in.platform.l0bSize);
    platform.GetCoreMemSize(platform_ascendc::CoreMemType::L0_C, in.platform.l0cSize);

    pasa::TilingResult r;
    try {
        r = pasa::ComputeTiling(in);
    } catch (const std::exception& e) {  // std::invalid_argument naming the argument
        std::fprintf(stderr, "%s: %s\n", kOpName, e.what());
        return ge::GRAPH_FAILED;
    }

    // The tiling struct is a plain standard-layout struct (GET_TILING_DATA_WITH_STRUCT in the kernel).
    gert::TilingData* raw = ctx->GetRawTilingData();
    if (raw == nullptr || raw->GetCapacity() < sizeof(PasaTilingData)) {
        std::fprintf(stderr, "%s: tiling buffer smaller than PasaTilingData (%zu bytes)\n", kOpName,
                     sizeof(PasaTilingData));
        return ge::GRAPH_FAILED;
    }
    std::memcpy(raw->GetData(), &r.data, sizeof(PasaTilingData));
    raw->SetDataSize(sizeof(PasaTilingData));
    ctx->SetTilingKey(r.tilingKey);
    // KERNEL_TYPE_MIX_AIC_1_2: one block = 1 AIC + 2 AIV, so the launch dim is the number of AICs used.
    // (the block-dim API of the CANN version built against: pasa_cann_compat.h)
    if (pasa_cann::SetNumBlocks(ctx, platform, 2 * r.blockDim, in.platform.aicNum, in.platform.aivNum) !=
        ge::GRAPH_SUCCESS) {
        std::fprintf(stderr, "%s: setting the number of blocks (%u) failed\n", kOpName, r.blockDim);
        return ge::GRAPH_FAILED;
    }
    // Batch mode: the kernel's all-core barriers (CrossCoreSetFlag mode 0) deadlock if some of its cores wait
    // for others that a concurrent launch holds (CrossCoreSetFlag / SyncAll docs, 约束说明; FIA's tiling sets
    // it "for syncall"). The host model refuses such a barrier when this is not set.
    if (ctx->SetScheduleMode(r.scheduleMode) != ge::GRAPH_SUCCESS) {
        std::fprintf(stderr, "%s: SetScheduleMode(%u) failed\n", kOpName, r.scheduleMode);
        return ge::GRAPH_FAILED;
    }
    size_t* ws = ctx->GetWorkspaceSizes(1);
    ws[0] = platform.GetLibApiWorkSpaceSize() + r.workspaceBytes;  // system workspace + ours
    return ge::GRAPH_SUCCESS;
}
}  // namespace optiling

namespace ops {
class PasaFusedAttention : public OpDef {
public:
    explicit PasaFusedAttention(const char* name) : OpDef(name) {
        // Three dtype combinations, one per mask dtype; everything else is fixed.
        this->Input("query").ParamType(REQUIRED).DataTypeList({ge::DT_FLOAT16}).FormatList({ge::FORMAT_ND})
            .AutoContiguous();
        this->Input("key").ParamType(REQUIRED).DataTypeList({ge::DT_FLOAT16}).FormatList({ge::FORMAT_ND})
            .AutoContiguous();
        this->Input("value").ParamType(REQUIRED).DataTypeList({ge::DT_FLOAT16}).FormatList({ge::FORMAT_ND})
            .AutoContiguous();
        this->Input("atten_mask").ParamType(OPTIONAL).DataType({ge::DT_BOOL, ge::DT_UINT8, ge::DT_INT8})
            .FormatList({ge::FORMAT_ND}).AutoContiguous();
        this->Input("actual_seq_lengths").ParamType(OPTIONAL).ValueDepend(OPTIONAL).DataTypeList({ge::DT_INT64})
            .FormatList({ge::FORMAT_ND}).AutoContiguous();
        this->Input("actual_seq_lengths_kv").ParamType(OPTIONAL).ValueDepend(OPTIONAL).DataTypeList({ge::DT_INT64})
            .FormatList({ge::FORMAT_ND}).AutoContiguous();
        this->Input("block_table").ParamType(OPTIONAL).DataTypeList({ge::DT_INT32}).FormatList({ge::FORMAT_ND})
            .AutoContiguous();
        this->Input("learnable_sink").ParamType(OPTIONAL).DataTypeList({ge::DT_FLOAT}).FormatList({ge::FORMAT_ND})
            .AutoContiguous();
        this->Output("attention_out").ParamType(REQUIRED).DataTypeList({ge::DT_FLOAT16}).FormatList({ge::FORMAT_ND});
        this->Output("softmax_lse").ParamType(REQUIRED).DataTypeList({ge::DT_FLOAT}).FormatList({ge::FORMAT_ND});

        // FIA's attributes and defaults (same order as the Attr enum above), then PASA's.
        this->Attr("num_heads").AttrType(REQUIRED).Int(1);
        this->Attr("scale").AttrType(OPTIONAL).Float(1.0);
        this->Attr("pre_tokens").AttrType(OPTIONAL).Int(2147483647);
        this->Attr("next_tokens").AttrType(OPTIONAL).Int(2147483647);
        this->Attr("input_layout").AttrType(OPTIONAL).String("BSH");
        this->Attr("num_key_value_heads").AttrType(OPTIONAL).Int(0);
        this->Attr("sparse_mode").AttrType(OPTIONAL).Int(0);
        this->Attr("inner_precise").AttrType(OPTIONAL).Int(0);
        this->Attr("block_size").AttrType(OPTIONAL).Int(0);
        this->Attr("softmax_lse_flag").AttrType(OPTIONAL).Bool(false);
        this->Attr("beta").AttrType(OPTIONAL).Float(-1.0);          // < 0: pasa::DefaultBeta(128, scale)
        this->Attr("precision").AttrType(OPTIONAL).String(pasa::kDefaultPrecision);  // a pasa::KernelAllocations() name

        this->SetInferShape(ge::InferShapePasaFusedAttention).SetInferDataType(ge::InferDataTypePasaFusedAttention);
        this->AICore().SetTiling(optiling::PasaFusedAttentionTiling).AddConfig("ascend910b");
    }
};
OP_ADD(PasaFusedAttention);
}  // namespace ops
