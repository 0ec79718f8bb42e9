// Core identity, memories and error reporting.
#include "host_model/core.h"

#include "host_model/error.h"
#include "host_model/kernel_macros.h"
#include "host_model/tensor.h"
#include "host_model/types.h"
#include "launch_state.h"

namespace ascendc_model {

namespace {
thread_local CoreContext* tCore = nullptr;
}  // namespace

void BindCore(CoreContext* core) { tCore = core; }

CoreContext* CurrentCoreOrNull() { return tCore; }

CoreContext& CurrentCore() {
    if (tCore == nullptr) throw Error("host: AscendC API called outside LaunchMix (no core context)");
    return *tCore;
}

std::string CoreContext::Name() const {
    if (type == CoreType::AIC) return "AIC " + std::to_string(blockIdx);
    return "AIV " + std::to_string(blockIdx * 2 + subBlockIdx) + " (block " + std::to_string(blockIdx) +
           ", sub-block " + std::to_string(subBlockIdx) + ")";
}

void Fail(const std::string& api, const std::string& cause) {
    const std::string where = tCore ? tCore->Name() : std::string("host");
    throw Error(where + ": " + api + ": " + cause);
}

const char* MemoryName(Memory m) {
    static const char* names[] = {"UB", "L1", "L0A", "L0B", "L0C"};
    return names[static_cast<int>(m)];
}

uint32_t MemoryCapacity(Memory m) {
    static const uint32_t sizes[] = {kUbUsableBytes, kL1Bytes, kL0aBytes, kL0bBytes, kL0cBytes};
    return sizes[static_cast<int>(m)];
}

uint8_t* MemoryBase(Memory m) {
    std::vector<uint8_t>& mem = CurrentCore().Mem(m);
    if (mem.empty()) Fail("memory access", std::string(MemoryName(m)) + " does not exist on this core");
    return mem.data();
}

void CheckSlotUsable(const BufferSlot* slot, uint64_t generation, const std::string& api) {
    if (slot == nullptr) Fail(api, "tensor is not bound to a buffer (default-constructed LocalTensor)");
    if (slot->ownerCore != CurrentCore().globalIndex) Fail(api, "tensor belongs to another core");
    if (slot->generation != generation || slot->state == BufferSlot::State::Free)
        Fail(api, std::string("tensor used after FreeTensor (") + AscendC::PositionName(slot->position) + " queue)");
    if (slot->state == BufferSlot::State::Enqueued)
        Fail(api, std::string("tensor is enqueued in its ") + AscendC::PositionName(slot->position) +
                      " queue; DeQue it before use");
}

}  // namespace ascendc_model

namespace AscendC {

const char* PositionName(TPosition pos) {
    switch (pos) {
        case TPosition::GM: return "GM";
        case TPosition::A1: return "A1";
        case TPosition::A2: return "A2";
        case TPosition::B1: return "B1";
        case TPosition::B2: return "B2";
        case TPosition::C1: return "C1";
        case TPosition::C2: return "C2";
        case TPosition::CO1: return "CO1";
        case TPosition::CO2: return "CO2";
        case TPosition::VECIN: return "VECIN";
        case TPosition::VECOUT: return "VECOUT";
        case TPosition::VECCALC: return "VECCALC";
        default: return "?";
    }
}

ascendc_model::Memory PositionMemory(TPosition pos) {
    using ascendc_model::Memory;
    switch (pos) {
        case TPosition::VECIN:
        case TPosition::VECOUT:
        case TPosition::VECCALC: return Memory::UB;
        case TPosition::A1:
        case TPosition::B1: return Memory::L1;
        case TPosition::A2: return Memory::L0A;
        case TPosition::B2: return Memory::L0B;
        case TPosition::CO1: return Memory::L0C;
        default: ascendc_model::Fail("TPipe::InitBuffer", std::string("position ") + PositionName(pos) + " is not modelled");
    }
}

const char* HardEventName(HardEvent e) {
    static const char* names[] = {
        "MTE2_MTE1", "MTE1_MTE2", "MTE1_M", "M_MTE1", "MTE2_V", "V_MTE2", "MTE3_V", "V_MTE3", "M_V", "V_M", "V_V",
        "MTE3_MTE1", "MTE1_MTE3", "MTE1_V", "MTE2_M", "M_MTE2", "V_MTE1", "M_FIX", "FIX_M", "MTE3_MTE2", "MTE2_MTE3",
        "S_V", "V_S", "S_MTE2", "MTE2_S", "S_MTE3", "MTE3_S", "MTE2_FIX", "FIX_MTE2", "FIX_S", "M_S", "FIX_MTE3",
        "MTE1_FIX", "FIX_MTE1", "FIX_FIX"};
    const int i = static_cast<int>(e);
    return i < static_cast<int>(HardEvent::MAX) ? names[i] : "?";
}

void CheckKernelType(KernelMetaType type) {
    if (type != KERNEL_TYPE_MIX_AIC_1_2)
        ascendc_model::Fail("KERNEL_TASK_TYPE_DEFAULT", "the model runs KERNEL_TYPE_MIX_AIC_1_2 kernels only");
}

void CheckKernelType(KernelMetaType type, int builtForCoreType) {
    CheckKernelType(type);
    if (builtForCoreType != CurrentCoreTypeValue())
        ascendc_model::Fail("KERNEL_TASK_TYPE_DEFAULT", std::string("this kernel build was compiled for the ") +
                                                            (builtForCoreType == AIC ? "AIC" : "AIV") +
                                                            " (ASCENDC_MODEL_CORE_TYPE) and runs on another core type");
}

int CurrentCoreTypeValue() { return ascendc_model::CurrentCore().type == ascendc_model::CoreType::AIC ? AIC : AIV; }

int64_t GetBlockIdx() {
    const auto& c = ascendc_model::CurrentCore();
    return c.type == ascendc_model::CoreType::AIC ? c.blockIdx : c.blockIdx * 2 + c.subBlockIdx;
}
int64_t GetBlockNum() { return ascendc_model::CurrentCore().blockDim; }
int64_t GetSubBlockIdx() { return ascendc_model::CurrentCore().subBlockIdx; }
int64_t GetTaskRatio() { return ascendc_model::CurrentCore().type == ascendc_model::CoreType::AIC ? 1 : 2; }

}  // namespace AscendC
