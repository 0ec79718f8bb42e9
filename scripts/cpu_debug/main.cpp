// Runs the PASA kernel in CANN's CPU-debug mode (ASCENDC_CPU_DEBUG, tikicpulib): the tiling from
// pasa::ComputeTiling, GM buffers from AscendC::GmAlloc, the launch through ICPU_RUN_KF with the tiling key.
//
//   pasa_cpu_debug CASE_DIR
// CASE_DIR/args.txt: "B N NKV S1 S2 D precision" (BNSD layout, scale 1/sqrt(D), no mask); q.bin, k.bin, v.bin
// FP16 BNSD. Writes out.bin (FP16 BNSD), lse.bin (FP32 B x N x S1) and block_q.txt (the tiling's query
// block, which the golden model needs). Exit 0, or 1 with a message.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "tikicpulib.h"
#include "pasa_tiling.h"

extern "C" __global__ __aicore__ void pasa_fused_attention(GM_ADDR query, GM_ADDR key, GM_ADDR value,
                                                           GM_ADDR attenMask, GM_ADDR actualSeqLengths,
                                                           GM_ADDR actualSeqLengthsKv, GM_ADDR blockTable,
                                                           GM_ADDR learnableSink, GM_ADDR attentionOut,
                                                           GM_ADDR softmaxLse, GM_ADDR workspace, GM_ADDR tiling);

namespace {

// The system workspace GetUserWorkspace skips: 16 MiB, what asc-devkit's samples reserve for it on A2
// (the op's tiling asks GetLibApiWorkSpaceSize(); the CPU-debug build has no platform to ask).
constexpr size_t kSystemWorkspaceBytes = 16u << 20;

uint8_t* GmFrom(const std::string& path, size_t bytes) {
    auto* p = static_cast<uint8_t*>(AscendC::GmAlloc(bytes));
    std::ifstream f(path, std::ios::binary);
    if (!f.read(reinterpret_cast<char*>(p), static_cast<std::streamsize>(bytes)))
        throw std::runtime_error("cannot read " + std::to_string(bytes) + " bytes from " + path);
    return p;
}

void Save(const std::string& path, const uint8_t* p, size_t bytes) {
    std::ofstream f(path, std::ios::binary);
    f.write(reinterpret_cast<const char*>(p), static_cast<std::streamsize>(bytes));
    if (!f) throw std::runtime_error("cannot write " + path);
}

}  // namespace

int main(int argc, char** argv) {
    if (argc != 2) {
        std::fprintf(stderr, "usage: %s CASE_DIR\n", argv[0]);
        return 1;
    }
    const std::string dir = argv[1];
    try {
        int64_t b, n, nkv, s1, s2, d;
        std::string precision;
        std::ifstream args(dir + "/args.txt");
        if (!(args >> b >> n >> nkv >> s1 >> s2 >> d >> precision)) throw std::runtime_error("bad args.txt");

        pasa::TilingInput in;
        in.queryShape = {b, n, s1, d};
        in.keyShape = in.valueShape = {b, nkv, s2, d};
        in.inputLayout = "BNSD";
        in.numHeads = n;
        in.numKeyValueHeads = nkv;
        in.scale = 1.0 / std::sqrt(double(d));
        in.precision = precision;
        const pasa::TilingResult r = pasa::ComputeTiling(in);

        const size_t qBytes = size_t(b * n * s1 * d) * 2, kvBytes = size_t(b * nkv * s2 * d) * 2;
        const size_t lseBytes = size_t(b * n * s1) * 4;
        uint8_t* q = GmFrom(dir + "/q.bin", qBytes);
        uint8_t* k = GmFrom(dir + "/k.bin", kvBytes);
        uint8_t* v = GmFrom(dir + "/v.bin", kvBytes);
        auto* out = static_cast<uint8_t*>(AscendC::GmAlloc(qBytes));
        auto* lse = static_cast<uint8_t*>(AscendC::GmAlloc(lseBytes));
        auto* ws = static_cast<uint8_t*>(AscendC::GmAlloc(kSystemWorkspaceBytes + r.workspaceBytes));
        auto* tiling = static_cast<uint8_t*>(AscendC::GmAlloc(sizeof(PasaTilingData)));
        std::memcpy(tiling, &r.data, sizeof(PasaTilingData));

        AscendC::SetKernelMode(KernelMode::MIX_MODE);
        ICPU_SET_TILING_KEY(r.tilingKey);
        // The absent optional inputs (mask, actual lengths, block table, sink) are null pointers, as the op passes
        // them; the ICPU_RUN_KF docs ask for GmAlloc pointers, so this is the first thing to check if the
        // launch refuses.
        ICPU_RUN_KF(pasa_fused_attention, r.blockDim, q, k, v, nullptr, nullptr, nullptr, nullptr, nullptr, out, lse,
                    ws, tiling);

        Save(dir + "/out.bin", out, qBytes);
        Save(dir + "/lse.bin", lse, lseBytes);
        std::ofstream(dir + "/block_q.txt") << r.data.blockQ << "\n";
        for (uint8_t* p : {q, k, v, out, lse, ws, tiling}) AscendC::GmFree(p);
    } catch (const std::exception& e) {
        std::fprintf(stderr, "pasa_cpu_debug: %s\n", e.what());
        return 1;
    }
    return 0;
}
