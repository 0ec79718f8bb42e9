// The vector iteration space and the rounding conversions of Cast.
#include "host_model/vector.h"

#include <cmath>
#include <cstring>
#include <limits>

namespace ascendc_model {

VecIter::VecIter(VecIter&& o) noexcept
    : api_(std::move(o.api_)), widest_(o.widest_), live_(o.live_), counted_(o.counted_), repeats_(o.repeats_),
      lanes_(o.lanes_), highestLane_(o.highestLane_), bits_{o.bits_[0], o.bits_[1]}, op_(std::move(o.op_)) {
    o.live_ = false;
}

VecIter::~VecIter() {
    if (!live_) return;
    CommitVectorOp(std::move(op_));
    if (widest_ == 0 || repeats_ == 0) return;
    // Count form: the hardware runs ceil(count * width / 256) repeats of the widest operand.
    const uint64_t repeats = counted_ ? (uint64_t(lanes_) * widest_ + 255) / 256 : repeats_;
    CountVector(api_, repeats, widest_);
}

VecIter VecIter::Count(const std::string& api, int64_t count, Site site) {
    if (count < 0) Fail(api, "negative count " + std::to_string(count));
    VecIter it(api, site);
    it.counted_ = true;
    it.repeats_ = count > 0 ? 1 : 0;
    it.lanes_ = static_cast<uint32_t>(count);
    it.highestLane_ = count > 0 ? static_cast<uint32_t>(count - 1) : 0;
    return it;
}

VecIter::VecIter(const std::string& api, Site site) : api_(api) {
    op_.api = api;
    op_.site = site;
}

// The mask/repeat forms' common part, once their arguments are checked (a VecIter counts its instruction when it
// ends, so none exists before the checks pass).
VecIter VecIter::Masked(const std::string& api, int64_t repeatTimes, uint32_t widestBytes, Site site) {
    VecIter it(api, site);
    it.widest_ = widestBytes;
    it.counted_ = false;
    it.repeats_ = static_cast<uint64_t>(repeatTimes);
    it.lanes_ = 256 / widestBytes;
    return it;
}

namespace {
void CheckRepeat(const std::string& api, int64_t repeatTimes) {
    if (repeatTimes < 0 || repeatTimes > AscendC::MAX_REPEAT_TIMES)
        Fail(api, "repeatTimes " + std::to_string(repeatTimes) + " outside [0, 255]");
}
}  // namespace

VecIter VecIter::Continuous(const std::string& api, uint64_t mask, int64_t repeatTimes, uint32_t widestBytes,
                            Site site) {
    CheckRepeat(api, repeatTimes);
    const uint32_t lanes = 256 / widestBytes;
    if (mask < 1 || mask > lanes)
        Fail(api, "continuous mask " + std::to_string(mask) + " outside [1, " + std::to_string(lanes) + "]");
    VecIter it = Masked(api, repeatTimes, widestBytes, site);
    it.highestLane_ = static_cast<uint32_t>(mask - 1);
    it.bits_[0] = mask >= 64 ? ~0ull : ((1ull << mask) - 1);
    it.bits_[1] = mask > 64 ? (mask == 128 ? ~0ull : ((1ull << (mask - 64)) - 1)) : 0;
    return it;
}

VecIter VecIter::Bits(const std::string& api, const uint64_t mask[], int64_t repeatTimes, uint32_t widestBytes,
                      Site site) {
    CheckRepeat(api, repeatTimes);
    const uint32_t lanes = 256 / widestBytes;
    if (lanes == 64 && mask[1] != 0) Fail(api, "bit mask: mask[1] must be 0 for 32-bit types (64 lanes)");
    if (mask[0] == 0 && (lanes == 64 || mask[1] == 0)) Fail(api, "bit mask enables no lane");
    VecIter it = Masked(api, repeatTimes, widestBytes, site);
    it.bits_[0] = mask[0];
    it.bits_[1] = lanes == 128 ? mask[1] : 0;
    it.highestLane_ = it.bits_[1] ? 127 - __builtin_clzll(it.bits_[1]) : 63 - __builtin_clzll(it.bits_[0]);
    return it;
}

uint64_t VecIter::Extent(uint32_t elemBytes, Stride s) const {
    if (repeats_ == 0) return 0;
    if (counted_) return lanes_;
    const uint32_t e = 32 / elemBytes;
    // Whole 32-byte blocks: the last block touched by the highest active lane of the last repeat.
    return ((repeats_ - 1) * s.rep + uint64_t(highestLane_ / e) * s.blk) * e + e;
}

Ranges VecIter::Footprint(uint32_t begin, uint32_t elemBytes, Stride s) const {
    Ranges out;
    if (repeats_ == 0 || lanes_ == 0) return out;
    if (counted_) {
        out.push_back({begin, begin + (lanes_ * elemBytes + kBlockBytes - 1) / kBlockBytes * kBlockBytes});
        return out;
    }
    const uint32_t e = kBlockBytes / elemBytes;
    std::vector<uint32_t> blocks;  // blocks of one repeat with an active lane
    for (uint32_t b = 0; b * e < lanes_; ++b)
        for (uint32_t l = b * e; l < (b + 1) * e && l < lanes_; ++l)
            if (Active(l)) {
                blocks.push_back(b);
                break;
            }
    for (uint64_t r = 0; r < repeats_; ++r)
        for (uint32_t b : blocks) {
            const uint32_t lo = begin + static_cast<uint32_t>((r * s.rep + uint64_t(b) * s.blk) * kBlockBytes);
            out.push_back({lo, lo + kBlockBytes});
        }
    Normalise(out);
    return out;
}

void CheckVectorOperand(const std::string& api, const char* role, Memory memory, uint32_t byteAddr) {
    if (memory != Memory::UB) Fail(api, std::string(role) + " must be in UB (VECIN/VECOUT/VECCALC)");
    if (byteAddr % kBlockBytes != 0)
        Fail(api, std::string(role) + " address " + std::to_string(byteAddr) + " B is not 32-byte aligned");
}

namespace {

// The next representable value of an IEEE type after x, towards +inf (up) or -inf, by stepping
// the bit pattern (works for _Float16, which has no std::nextafter).
template <typename T, typename Bits>
T Step(T x, bool up) {
    Bits b;
    std::memcpy(&b, &x, sizeof(T));
    const Bits sign = Bits(1) << (8 * sizeof(T) - 1);
    if ((b & ~sign) == 0) b = up ? Bits(1) : Bits(sign | 1);  // from +-0 to the smallest subnormal
    else if (((b & sign) == 0) == up) ++b;                     // away from zero
    else --b;                                                   // towards zero
    std::memcpy(&x, &b, sizeof(T));
    return x;
}
template <typename T>
T StepTowards(T x, bool up) {
    if constexpr (sizeof(T) == 2) return Step<T, uint16_t>(x, up);
    else return Step<T, uint32_t>(x, up);
}

// Neighbouring representable values around v: lo <= v <= hi (equal when v is representable).
template <typename T>
std::pair<double, double> Bracket(double v) {
    if constexpr (std::is_same<T, int32_t>::value) {
        return {std::floor(v), std::ceil(v)};
    } else {
        const T nearest = static_cast<T>(v);  // round to nearest even
        const double n = double(nearest);
        if (n == v || std::isnan(v)) return {n, n};
        const double other = double(StepTowards(nearest, n < v));
        return n < v ? std::make_pair(n, other) : std::make_pair(other, n);
    }
}

template <typename T>
bool LastBitOdd(double v) {
    if constexpr (std::is_same<T, int32_t>::value) {
        return static_cast<int64_t>(v) & 1;
    } else {
        const T t = static_cast<T>(v);
        uint32_t bits = 0;
        std::memcpy(&bits, &t, sizeof(T));
        return bits & 1;
    }
}

}  // namespace

// Round modes (the AscendC Cast documentation): CAST_NONE / CAST_RINT round to nearest, ties to even;
// CAST_FLOOR towards -inf; CAST_CEIL towards +inf; CAST_ROUND to nearest, ties away from zero;
// CAST_TRUNC towards zero; CAST_ODD to the neighbour with an odd last bit when inexact.
// Overflow follows IEEE (RINT to infinity); the hardware's saturation mode is not modelled.
// Float -> int32 saturates to the int32 range, NaN -> 0.
template <typename T>
T ConvertRounded(double v, AscendC::RoundMode mode) {
    using AscendC::RoundMode;
    const auto [lo, hi] = Bracket<T>(v);
    double r = lo;
    if (lo != hi) {
        const double dl = v - lo, dh = hi - v;
        switch (mode) {
            case RoundMode::CAST_NONE:
            case RoundMode::CAST_RINT:
                if constexpr (std::is_same<T, int32_t>::value) r = std::nearbyint(v);
                else return static_cast<T>(v);  // the native conversion is round-to-nearest-even
                break;
            case RoundMode::CAST_FLOOR: r = lo; break;
            case RoundMode::CAST_CEIL: r = hi; break;
            case RoundMode::CAST_ROUND: r = dl < dh ? lo : dh < dl ? hi : (v > 0 ? hi : lo); break;
            case RoundMode::CAST_TRUNC: r = v > 0 ? lo : hi; break;
            case RoundMode::CAST_ODD: r = LastBitOdd<T>(lo) ? lo : hi; break;
        }
    }
    if constexpr (std::is_same<T, int32_t>::value) {
        if (std::isnan(r)) return 0;
        if (r >= 2147483647.0) return std::numeric_limits<int32_t>::max();
        if (r <= -2147483648.0) return std::numeric_limits<int32_t>::min();
    }
    return static_cast<T>(r);
}

template half ConvertRounded<half>(double, AscendC::RoundMode);
template float ConvertRounded<float>(double, AscendC::RoundMode);
template int32_t ConvertRounded<int32_t>(double, AscendC::RoundMode);

}  // namespace ascendc_model

namespace ascendc_model::a2 {

void CheckCastMode(const char* dst, const char* src, uint32_t modes, bool countFormPair, AscendC::RoundMode mode,
                   bool countForm) {
    static const char* const kModeNames[] = {"CAST_NONE", "CAST_RINT", "CAST_FLOOR", "CAST_CEIL",
                                             "CAST_ROUND", "CAST_TRUNC", "CAST_ODD"};
    const std::string pair = std::string(src) + " -> " + dst;
    if (countForm && !countFormPair)
        Fail("Cast", pair + " is not one of the count form's conversions on Atlas A2 (CheckCastDatatype)");
    if (modes == 0)
        Fail("Cast", pair + (std::string(dst) == "half" ? " is a dequantisation (SetDeqScale), not modelled"
                                                       : " is not supported on Atlas A2"));
    if ((modes >> static_cast<uint32_t>(mode) & 1u) == 0) {
        std::string ok;
        for (uint32_t m = 0; m < 7; ++m)
            if (modes >> m & 1u) ok += std::string(ok.empty() ? "" : ", ") + kModeNames[m];
        Fail("Cast", pair + " has no " + kModeNames[static_cast<uint32_t>(mode)] + " on Atlas A2; it takes " + ok);
    }
}

}  // namespace ascendc_model::a2
