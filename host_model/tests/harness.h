// Minimal case registry for host_model_tests.
//   host_model_tests --list          names of all cases, one a line
//   host_model_tests NAME [DIR]      runs one case; arrays a case saves go to DIR/<name>.bin
// A case passes by returning; CHECK failures print "FAIL: ..." and exit 1. Misuse cases let the
// model's ascendc_model::Error escape: main prints "ascendc_model::Error: <message>" and exits 3,
// and tests/npu/test_host_model.py asserts the message.
#pragma once
#include <cstdio>
#include <functional>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "host_model/launch.h"
#include "kernel_operator.h"

namespace hm_test {

using Case = std::function<void()>;
std::map<std::string, Case>& Registry();
struct Register {
    Register(const char* name, Case c) { Registry()[name] = std::move(c); }
};
#define HM_CASE(name)                                     \
    static void name();                                   \
    static hm_test::Register reg_##name(#name, name);     \
    static void name()

[[noreturn]] void FailCheck(const std::string& what);
#define HM_CHECK(cond, msg) \
    do { if (!(cond)) hm_test::FailCheck(std::string(#cond) + ": " + (msg)); } while (0)

// Writes n elements to DIR/<name>.bin (no-op without DIR).
void SaveBytes(const std::string& name, const void* data, size_t bytes);
template <typename T>
void Save(const std::string& name, const std::vector<T>& v) { SaveBytes(name, v.data(), v.size() * sizeof(T)); }

// Runs body on one core of a blockDim-1 launch (AIV 0 or the AIC); the other cores idle.
void OnAiv(const std::function<void()>& body);
void OnAic(const std::function<void()>& body);

// A pipe with one queue at `pos` of `buffers` buffers of 256 bytes: the setting of the queue and event cases.
template <AscendC::TPosition pos, int32_t depth = 1>
struct PipeQueue {
    AscendC::TPipe pipe;
    AscendC::TQue<pos, depth> que;
    explicit PipeQueue(int32_t buffers = 1) { pipe.InitBuffer(que, buffers, 256); }
};

std::vector<half> RandomHalf(size_t n, float lo, float hi, uint32_t seed);

}  // namespace hm_test
