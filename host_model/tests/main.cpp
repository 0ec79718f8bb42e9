#include <cstdlib>
#include <fstream>
#include <iostream>

#include "harness.h"

namespace hm_test {

namespace {
std::string gDumpDir;
}

std::map<std::string, Case>& Registry() {
    static std::map<std::string, Case> r;
    return r;
}

void FailCheck(const std::string& what) {
    std::cout << "FAIL: " << what << std::endl;
    std::exit(1);
}

void SaveBytes(const std::string& name, const void* data, size_t bytes) {
    if (gDumpDir.empty()) return;
    std::ofstream f(gDumpDir + "/" + name + ".bin", std::ios::binary);
    f.write(static_cast<const char*>(data), static_cast<std::streamsize>(bytes));
}

void OnAiv(const std::function<void()>& body) {
    ascendc_model::LaunchMix({1, 0, 5.0}, [&] {
        if (ASCEND_IS_AIV && AscendC::GetSubBlockIdx() == 0) body();
    });
}
void OnAic(const std::function<void()>& body) {
    ascendc_model::LaunchMix({1, 0, 5.0}, [&] {
        if (ASCEND_IS_AIC) body();
    });
}

std::vector<half> RandomHalf(size_t n, float lo, float hi, uint32_t seed) {
    std::mt19937 gen(seed);
    std::uniform_real_distribution<float> d(lo, hi);
    std::vector<half> v(n);
    for (half& x : v) x = static_cast<half>(d(gen));
    return v;
}

}  // namespace hm_test

int main(int argc, char** argv) {
    auto& reg = hm_test::Registry();
    if (argc < 2) {
        std::cerr << "usage: host_model_tests --list | --all | CASE [DUMP_DIR]\n";
        return 2;
    }
    const std::string arg = argv[1];
    if (arg == "--list") {
        for (auto& [name, c] : reg) std::cout << name << "\n";
        return 0;
    }
    if (argc > 2) hm_test::gDumpDir = argv[2];
    // --all (ctest): every case whose name does not start with "misuse_" must pass.
    std::vector<std::string> names;
    if (arg == "--all") {
        for (auto& [name, c] : reg)
            if (name.rfind("misuse_", 0) != 0) names.push_back(name);
    } else if (reg.count(arg)) {
        names.push_back(arg);
    } else {
        std::cerr << "unknown case " << arg << "\n";
        return 2;
    }
    for (const std::string& name : names) {
        try {
            reg[name]();
        } catch (const ascendc_model::Error& e) {
            std::cout << "ascendc_model::Error: " << e.what() << std::endl;
            return 3;
        }
    }
    std::cout << "PASS" << std::endl;
    return 0;
}
