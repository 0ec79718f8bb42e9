// Failure reporting of the host functional model.
// Every misuse the model detects throws ascendc_model::Error whose message names the core
// (e.g. "AIV 3 (block 1, sub-block 1)"), the AscendC API and the cause, so a failing kernel run
// says where it went wrong instead of producing silently wrong numbers.
#pragma once
#include <stdexcept>
#include <string>

namespace ascendc_model {

class Error : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

// Throws Error("<core>: <api>: <cause>") for the calling core (or "host" outside a launch).
[[noreturn]] void Fail(const std::string& api, const std::string& cause);

}  // namespace ascendc_model
