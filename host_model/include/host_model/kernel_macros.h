// Keywords, macros and system functions of AscendC kernels, mapped onto plain C++ so the unmodified
// kernel sources compile with g++: the device qualifiers vanish, GM pointers are host pointers, and
// core identity (ASCEND_IS_AIC, GetBlockIdx, ...) is read from the calling thread's core context.
#pragma once
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "host_model/types.h"

namespace AscendC {

// Kernel types of KERNEL_TASK_TYPE_DEFAULT. The model launches every kernel as MIX_AIC_1_2
// (LaunchMix); declaring another type is an error so a kernel cannot silently run with a core
// ratio it was not written for.
enum KernelMetaType {
    KERNEL_TYPE_AIV_ONLY,
    KERNEL_TYPE_AIC_ONLY,
    KERNEL_TYPE_MIX_AIV_1_0,
    KERNEL_TYPE_MIX_AIC_1_0,
    KERNEL_TYPE_MIX_AIC_1_1,
    KERNEL_TYPE_MIX_AIC_1_2,
};
void CheckKernelType(KernelMetaType type);

enum CoreTypeValue { AIC = 1, AIV = 2 };
int CurrentCoreTypeValue();

int64_t GetBlockIdx();     // AIC: its index; AIV: 2 * block + sub-block (the vector core index)
int64_t GetBlockNum();     // the launch's blockDim (number of AI cores)
int64_t GetSubBlockIdx();  // 0/1 on an AIV, 0 on the AIC
int64_t GetTaskRation();   // 2 on an AIV of a MIX_AIC_1_2 kernel, 1 on the AIC
// The model has no system workspace: the user workspace is the workspace pointer itself.
inline GM_ADDR GetUserWorkspace(GM_ADDR workspace) { return workspace; }

}  // namespace AscendC

#define g_coreType (::AscendC::CurrentCoreTypeValue())
#define ASCEND_IS_AIC (g_coreType == ::AscendC::AIC)
#define ASCEND_IS_AIV (g_coreType == ::AscendC::AIV)
#define ASCEND_IS_NOT_AIC (g_coreType != ::AscendC::AIC)
#define ASCEND_IS_NOT_AIV (g_coreType != ::AscendC::AIV)

#define KERNEL_TASK_TYPE_DEFAULT(type) ::AscendC::CheckKernelType(::AscendC::type)
#define TILING_KEY_IS(key) (::ascendc_model::CurrentCore().tilingKey == static_cast<uint64_t>(key))
// The tiling struct is a plain standard-layout struct shared with the host: registering it only
// checks that it can be copied bytewise from the tiling buffer.
#define REGISTER_TILING_DEFAULT(T) \
    static_assert(std::is_trivially_copyable<T>::value, "tiling struct must be trivially copyable")
#define GET_TILING_DATA_WITH_STRUCT(T, var, tiling) \
    T var;                                          \
    std::memcpy(&var, (tiling), sizeof(T))
