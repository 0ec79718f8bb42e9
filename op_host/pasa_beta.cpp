// The beta solver of python/pasa_npu/beta.py, ported for the host tiling (the op picks PASA's default beta on the
// host, where no Python runs): ShiftEntries rounds M's two entries to FP16, DefaultBeta is the fixed point of
// beta/(1 - beta) = f(beta) for that rounded M. tests/npu/test_npu_host_model.py checks both against Python's.
#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

#include "pasa_tiling.h"

namespace pasa {
namespace {

[[noreturn]] void Bad(const std::string& msg) { throw std::invalid_argument(msg); }

// IEEE binary16 round-to-nearest-even of a double, returned as double (what numpy's astype does).
double RoundToHalf(double x) {
    if (!std::isfinite(x) || x == 0.0) return x;
    double ax = std::fabs(x);
    if (ax >= 65520.0) return std::copysign(INFINITY, x);
    int e;
    std::frexp(ax, &e);                 // ax = f * 2^e, f in [0.5, 1)
    int exp2 = std::max(e - 11, -24);   // ulp exponent: 10 fraction bits, subnormals at 2^-24
    double ulp = std::ldexp(1.0, exp2);
    double q = ax / ulp;
    double r = std::nearbyint(q);       // default rounding mode: ties to even
    return std::copysign(r * ulp, x);
}

double PracticalInvariance(double beta, int n, double scale) {
    double diag, off;
    ShiftEntries(beta, n, scale, &diag, &off);
    double s = scale > 0 ? scale : 1.0;
    double b = -off / s;
    double a = diag / s + b;
    if (a - b * n <= 0.0) Bad("beta: M rounded to float16 is singular (effective beta >= 1)");
    return b * n / (a * (a - b * n)) + (1.0 - a) / a;
}

}  // namespace

void ShiftEntries(double beta, int blockKv, double scale, double* diag, double* off) {
    double s = scale > 0 ? scale : 1.0;
    // pasa_npu.beta.check_scale: above FP16's largest value M's diagonal overflows; below n * 2^-18
    // the off-diagonal beta/n * scale is an FP16 subnormal of fewer than 6 bits, too coarse for the
    // beta solver.
    const double lo = blockKv * std::ldexp(1.0, -18), hi = 65504.0;
    if (!(s >= lo && s <= hi))
        Bad("scale must be in [" + std::to_string(lo) + ", 65504] for the shifting matrix M = (I - beta/n J)*scale "
            "with n = " + std::to_string(blockKv) + " in float16, got " + std::to_string(s));
    double b = beta / blockKv;
    *diag = RoundToHalf((1.0 - b) * s);
    *off = RoundToHalf(-b * s);
}

double DefaultBeta(int blockKv, double scale) {
    double beta = 1.0 - std::ldexp(1.0, -6);
    for (int i = 0; i < 1000; ++i) {
        double inv = PracticalInvariance(beta, blockKv, scale);
        double nb = inv / (1.0 + inv);
        bool done = std::fabs(nb - beta) <= 1e-8 * std::fabs(beta);
        beta = nb;
        if (done) return beta;
    }
    Bad("beta: the default-beta fixed point did not converge");
}

}  // namespace pasa
