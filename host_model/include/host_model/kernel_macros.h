// Keywords, macros and system functions of AscendC kernels, mapped onto plain C++ so the unmodified
// kernel sources compile with g++: the device qualifiers vanish, GM pointers are host pointers, and
// core identity (GetBlockIdx, ...) is read from the calling thread's core context.
//
// ASCEND_IS_AIC / ASCEND_IS_AIV are compile-time, as in the real toolchain, which compiles a mixed
// kernel once per core type: asc-devkit impl/utils/sys_macros.h defines
// `constexpr int32_t g_coreType = AscendC::AIC` (cube compile, __DAV_CUBE__) or `AscendC::AIV`
// (vector compile, __DAV_VEC__) and `#define ASCEND_IS_AIC constexpr(g_coreType == AscendC::AIC)`,
// so `if ASCEND_IS_AIC { ... }` is an `if constexpr` and the other core's code is not compiled.
// The model does the same: kernel sources are compiled twice, with -DASCENDC_MODEL_CORE_TYPE=1 (AIC)
// and =2 (AIV) (CMake function ascendc_model_add_kernel), and each AI core thread runs its own build.
// A kernel that tests the core type at run time (`if (ASCEND_IS_AIC && x)`) does not compile, as with
// the real compiler. Only ASCENDC_MODEL_RUNTIME_CORE_TYPE, which the model's own test cases define,
// keeps the run-time test of the CPU-debug build (sys_macros.h, ASCENDC_CPU_DEBUG).
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
// The same, for a build compiled for one core type: it must run on a core of that type.
void CheckKernelType(KernelMetaType type, int builtForCoreType);

enum CoreTypeValue { AIC = 1, AIV = 2 };
int CurrentCoreTypeValue();

int64_t GetBlockIdx();     // AIC: its index; AIV: 2 * block + sub-block (the vector core index)
int64_t GetBlockNum();     // the launch's blockDim (number of AI cores)
int64_t GetSubBlockIdx();  // 0/1 on an AIV, 0 on the AIC
// GetTaskRatio: 2 on an AIV of a MIX_AIC_1_2 kernel, 1 on the AIC (include/basic_api/
// kernel_operator_sys_var_intf.h). The legacy spelling GetTaskRation survives in the real headers only as
// a forwarding alias (impl/basic_api/kernel_operator_sys_var_intf_impl.h); the model offers the current name.
int64_t GetTaskRatio();
// The model has no system workspace: the user workspace is the workspace pointer itself.
inline GM_ADDR GetUserWorkspace(GM_ADDR workspace) { return workspace; }

}  // namespace AscendC

#if defined(ASCENDC_MODEL_CORE_TYPE)
static_assert(ASCENDC_MODEL_CORE_TYPE == ::AscendC::AIC || ASCENDC_MODEL_CORE_TYPE == ::AscendC::AIV,
              "ASCENDC_MODEL_CORE_TYPE must be 1 (AIC) or 2 (AIV)");
constexpr int32_t g_coreType = ASCENDC_MODEL_CORE_TYPE;
#define ASCEND_IS_AIC constexpr(g_coreType == ::AscendC::AIC)
#define ASCEND_IS_AIV constexpr(g_coreType == ::AscendC::AIV)
#define ASCEND_IS_NOT_AIC constexpr(g_coreType != ::AscendC::AIC)
#define ASCEND_IS_NOT_AIV constexpr(g_coreType != ::AscendC::AIV)
#elif defined(ASCENDC_MODEL_RUNTIME_CORE_TYPE)
#define g_coreType (::AscendC::CurrentCoreTypeValue())
#define ASCEND_IS_AIC (g_coreType == ::AscendC::AIC)
#define ASCEND_IS_AIV (g_coreType == ::AscendC::AIV)
#define ASCEND_IS_NOT_AIC (g_coreType != ::AscendC::AIC)
#define ASCEND_IS_NOT_AIV (g_coreType != ::AscendC::AIV)
#else
#error "kernel sources are compiled once per core type: define ASCENDC_MODEL_CORE_TYPE=1 (AIC) or 2 (AIV) (CMake: ascendc_model_add_kernel)"
#endif

#if defined(ASCENDC_MODEL_CORE_TYPE)
#define KERNEL_TASK_TYPE_DEFAULT(type) ::AscendC::CheckKernelType(::AscendC::type, g_coreType)
#else
#define KERNEL_TASK_TYPE_DEFAULT(type) ::AscendC::CheckKernelType(::AscendC::type)
#endif
#define TILING_KEY_IS(key) (::ascendc_model::CurrentCore().tilingKey == static_cast<uint64_t>(key))
// The tiling struct is a plain standard-layout struct shared with the host: registering it only
// checks that it can be copied bytewise from the tiling buffer.
#define REGISTER_TILING_DEFAULT(T) \
    static_assert(std::is_trivially_copyable<T>::value, "tiling struct must be trivially copyable")
#define GET_TILING_DATA_WITH_STRUCT(T, var, tiling) \
    T var;                                          \
    std::memcpy(&var, (tiling), sizeof(T))
