// CANN-ONLY: pasa_npu._npu_ext, the torch_npu binding of the deployed PasaFusedAttention custom op.
// NEVER COMPILED in this repository's CI (no CANN, no torch_npu there); python/pasa_npu/backends/npu.py
// is its only caller.
//
// The op is called through its generated two-stage aclnn API (aclnnPasaFusedAttentionGetWorkspaceSize,
// then aclnnPasaFusedAttention on the current NPU stream), the way vllm-ascend's EXEC_NPU_CMD calls
// custom ops: the functions are looked up in libcust_opapi.so of the deployed vendor package, the
// workspace is a torch_npu tensor, and the launch goes through torch_npu's task queue (OpCommand) so it
// is ordered with the other operations on the stream.
//
// The parameter list below follows opbuild's rules for the OpDef in op_host/pasa_fused_attention_def.cpp
// (inputs; optional ones "...Optional"; int64 value-dependent inputs as aclIntArray; attributes in
// declaration order, Float as double, String as char*; outputs "...Out"). It must be kept in step with
// that OpDef: the generated op_api/include/aclnn_pasa_fused_attention.h of the package is the reference.
#include <dlfcn.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <string>
#include <tuple>
#include <vector>

#include <torch/extension.h>

#include "acl/acl.h"
#include "aclnn/acl_meta.h"
#include "torch_npu/csrc/core/npu/NPUStream.h"
#include "torch_npu/csrc/framework/OpCommand.h"

namespace {

// aclnnStatus is an int32 status code; spelled out so that no aclnn header beyond acl_meta.h is needed.
using GetWorkspaceSizeFn = int32_t (*)(
    const aclTensor* query, const aclTensor* key, const aclTensor* value, const aclTensor* attenMaskOptional,
    const aclIntArray* actualSeqLengthsOptional, const aclIntArray* actualSeqLengthsKvOptional,
    const aclTensor* blockTableOptional, const aclTensor* learnableSinkOptional, int64_t numHeads, double scale,
    int64_t preTokens, int64_t nextTokens,
    char* inputLayout, int64_t numKeyValueHeads, int64_t sparseMode, int64_t innerPrecise, int64_t blockSize,
    bool softmaxLseFlag, double beta, char* precision,
    const aclTensor* attentionOutOut, const aclTensor* softmaxLseOut, uint64_t* workspaceSize,
    aclOpExecutor** executor);
using RunFn = int32_t (*)(void* workspace, uint64_t workspaceSize, aclOpExecutor* executor, aclrtStream stream);

const char* kVendor = "pasa";  // vendor_name of cann/CMakeLists.txt

std::vector<std::string> Split(const std::string& s, char sep) {
    std::vector<std::string> out;
    size_t at = 0;
    for (size_t next; (next = s.find(sep, at)) != std::string::npos; at = next + 1) out.push_back(s.substr(at, next - at));
    out.push_back(s.substr(at));
    return out;
}

// Candidate libcust_opapi.so paths, in CANN's lookup order: ASCEND_CUSTOM_OPP_PATH entries (what the
// package's set_env.bash appends after `--install-path`), then ASCEND_OPP_PATH/vendors/<load_priority>.
std::vector<std::string> OpApiCandidates() {
    std::vector<std::string> dirs;
    if (const char* custom = std::getenv("ASCEND_CUSTOM_OPP_PATH"))
        for (const auto& d : Split(custom, ':'))
            if (!d.empty()) dirs.push_back(d);
    if (const char* opp = std::getenv("ASCEND_OPP_PATH")) {
        const std::string vendors = std::string(opp) + "/vendors";
        std::ifstream ini(vendors + "/config.ini");
        for (std::string line; std::getline(ini, line);)
            if (line.rfind("load_priority=", 0) == 0)
                for (const auto& v : Split(line.substr(14), ',')) dirs.push_back(vendors + "/" + v);
        dirs.push_back(vendors + "/" + kVendor);
    }
    std::vector<std::string> libs;
    for (const auto& d : dirs) libs.push_back(d + "/op_api/lib/libcust_opapi.so");
    return libs;
}

struct OpApi {
    std::string path;  // the library the functions came from, "" when not found
    GetWorkspaceSizeFn getWorkspaceSize = nullptr;
    RunFn run = nullptr;
};

const OpApi& Api() {
    static const OpApi api = [] {
        OpApi a;
        for (const auto& lib : OpApiCandidates()) {
            if (access(lib.c_str(), R_OK) != 0) continue;
            void* h = dlopen(lib.c_str(), RTLD_LAZY);
            if (h == nullptr) continue;
            auto ws = reinterpret_cast<GetWorkspaceSizeFn>(dlsym(h, "aclnnPasaFusedAttentionGetWorkspaceSize"));
            auto run = reinterpret_cast<RunFn>(dlsym(h, "aclnnPasaFusedAttention"));
            if (ws != nullptr && run != nullptr) {
                a.path = lib;
                a.getWorkspaceSize = ws;
                a.run = run;
                break;
            }
        }
        return a;
    }();
    return api;
}

aclDataType AclType(const at::Tensor& t) {
    switch (t.scalar_type()) {
        case at::kHalf: return ACL_FLOAT16;
        case at::kFloat: return ACL_FLOAT;
        case at::kBool: return ACL_BOOL;
        case at::kByte: return ACL_UINT8;
        case at::kChar: return ACL_INT8;
        case at::kInt: return ACL_INT32;
        default: TORCH_CHECK(false, "pasa_npu._npu_ext: unsupported dtype ", t.scalar_type());
    }
}

// A descriptor of a contiguous NPU tensor (ND format; storage = view).
aclTensor* Describe(const at::Tensor& t) {
    std::vector<int64_t> dims(t.sizes().begin(), t.sizes().end()), strides(t.strides().begin(), t.strides().end());
    return aclCreateTensor(dims.data(), dims.size(), AclType(t), strides.data(), 0, ACL_FORMAT_ND, dims.data(),
                           dims.size(), t.data_ptr());
}

// (attention_out, softmax_lse FP32 (B, N, S1, 1), TND (T, N, 1)) of the deployed op. Inputs are checked and
// normalised by python/pasa_npu/backends/npu.py; the op's tiling checks them again (pasa::ComputeTiling).
// PageAttention: blockTable int32 (B, max_blocks_per_seq) with blockSize > 0, key/value the paged caches; the table's
// entries stay on the device unchecked, as FIA leaves them (pasa_npu's check_inputs checks them before).
std::tuple<at::Tensor, at::Tensor> FusedAttention(
    const at::Tensor& query, const at::Tensor& key, const at::Tensor& value, const c10::optional<at::Tensor>& attenMask,
    const c10::optional<std::vector<int64_t>>& actualSeqLengths,
    const c10::optional<std::vector<int64_t>>& actualSeqLengthsKv, const c10::optional<at::Tensor>& blockTable,
    const c10::optional<at::Tensor>& learnableSink, int64_t numHeads, double scale, int64_t preTokens,
    int64_t nextTokens, std::string inputLayout,
    int64_t numKeyValueHeads, int64_t sparseMode, int64_t innerPrecise, int64_t blockSize, double beta,
    std::string precision) {
    const OpApi& api = Api();
    TORCH_CHECK(api.getWorkspaceSize != nullptr,
                "pasa_npu: aclnnPasaFusedAttention not found in any libcust_opapi.so of ASCEND_CUSTOM_OPP_PATH or "
                "ASCEND_OPP_PATH/vendors: deploy the op package with scripts/build_and_deploy.sh and source its "
                "set_env.bash");
    for (const at::Tensor* t : {&query, &key, &value})
        TORCH_CHECK(t->is_contiguous() && t->scalar_type() == at::kHalf, "pasa_npu._npu_ext: contiguous FP16 inputs");
    TORCH_CHECK(!blockTable.has_value() || (blockTable->is_contiguous() && blockTable->scalar_type() == at::kInt),
                "pasa_npu._npu_ext: block_table must be a contiguous int32 tensor");

    at::Tensor out = at::empty_like(query);
    at::Tensor lse;
    if (inputLayout == "TND") {  // (T, N, 1)
        lse = at::empty({query.size(0), query.size(1), 1}, query.options().dtype(at::kFloat));
    } else {
        int64_t b, n, s1;
        if (inputLayout == "BNSD") {
            b = query.size(0); n = query.size(1); s1 = query.size(2);
        } else {  // BSH, BSND
            b = query.size(0); n = numHeads; s1 = query.size(1);
        }
        lse = at::empty({b, n, s1, 1}, query.options().dtype(at::kFloat));
    }

    aclTensor* q = Describe(query);
    aclTensor* k = Describe(key);
    aclTensor* v = Describe(value);
    aclTensor* m = attenMask.has_value() ? Describe(attenMask->contiguous()) : nullptr;
    aclTensor* bt = blockTable.has_value() ? Describe(*blockTable) : nullptr;
    TORCH_CHECK(!learnableSink.has_value() || (learnableSink->is_contiguous() &&
                                                learnableSink->scalar_type() == at::kFloat),
                "pasa_npu._npu_ext: learnable_sink must be a contiguous float32 tensor");
    aclTensor* sk = learnableSink.has_value() ? Describe(*learnableSink) : nullptr;
    aclIntArray* lq = actualSeqLengths ? aclCreateIntArray(actualSeqLengths->data(), actualSeqLengths->size()) : nullptr;
    aclIntArray* lk = actualSeqLengthsKv ? aclCreateIntArray(actualSeqLengthsKv->data(), actualSeqLengthsKv->size())
                                         : nullptr;
    aclTensor* o = Describe(out);
    aclTensor* l = Describe(lse);

    uint64_t wsSize = 0;
    aclOpExecutor* executor = nullptr;
    int32_t st = api.getWorkspaceSize(q, k, v, m, lq, lk, bt, sk, numHeads, scale, preTokens, nextTokens,
                                      inputLayout.data(), numKeyValueHeads, sparseMode, innerPrecise, blockSize,
                                      /*softmaxLseFlag=*/true, beta, precision.data(), o, l, &wsSize, &executor);
    TORCH_CHECK(st == 0, "aclnnPasaFusedAttentionGetWorkspaceSize failed (", st, "): ", aclGetRecentErrMsg());
    at::Tensor workspace;  // freed by the caching allocator only after the stream has used it
    void* wsPtr = nullptr;
    if (wsSize > 0) {
        workspace = at::empty({(int64_t)wsSize}, query.options().dtype(at::kByte));
        wsPtr = workspace.data_ptr();
    }
    aclrtStream stream = c10_npu::getCurrentNPUStream().stream(false);
    RunFn run = api.run;
    auto launch = [=]() -> int {
        int32_t rc = run(wsPtr, wsSize, executor, stream);
        TORCH_CHECK(rc == 0, "aclnnPasaFusedAttention failed (", rc, "): ", aclGetRecentErrMsg());
        for (aclTensor* t : {q, k, v, m, bt, sk, o, l})
            if (t != nullptr) aclDestroyTensor(t);
        if (lq != nullptr) aclDestroyIntArray(lq);
        if (lk != nullptr) aclDestroyIntArray(lk);
        return rc;
    };
    at_npu::native::OpCommand cmd;
    cmd.Name("aclnnPasaFusedAttention");
    cmd.SetCustomHandler(launch);
    cmd.Run();
    return {out, lse};
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, mod) {
    mod.doc() = "PasaFusedAttention custom op (AscendC, CANN) for torch_npu tensors";
    mod.def("fused_attention", &FusedAttention, py::arg("query"), py::arg("key"), py::arg("value"),
            py::arg("atten_mask") = py::none(), py::arg("actual_seq_lengths") = py::none(),
            py::arg("actual_seq_lengths_kv") = py::none(), py::arg("block_table") = py::none(),
            py::arg("learnable_sink") = py::none(), py::arg("num_heads"),
            py::arg("scale"), py::arg("pre_tokens"), py::arg("next_tokens"), py::arg("input_layout"),
            py::arg("num_key_value_heads"), py::arg("sparse_mode"), py::arg("inner_precise"), py::arg("block_size"),
            py::arg("beta"), py::arg("precision"));
    // Where the op was found ("" if nowhere): is_available() reports it.
    mod.def("op_library", [] { return Api().path; });
}
