// STAND-IN for the CANN toolkit's closed CPU-debug header tools/tikicpulib/lib/include/stub_def.h: what
// asc-devkit's headers take from it in CPU-debug mode (ASCENDC_CPU_DEBUG) on Atlas A2: bisheng's address-space
// and pipe qualifiers (empty on the host), the hardware enumerations (pipes, events, cache lines, quantisation
// modes, ...), the register types of the newer architectures that the headers name, the core index variables
// and the low-precision float types. Used only by scripts/check_ascendc_headers.sh (-fsyntax-only) and never
// compiled into anything else. Its enumerators are those the headers name; their values are not CANN's.
#pragma once
#include <cassert>
#include <cstdint>
#include <iostream>
#include <string>
#include <vector>

#include "kernel_bf16.h"
#include "kernel_fp16.h"

// qualifiers and attributes of bisheng's AI-core language
#define __aicore__
#define __global__
#define __gm__
#define __ubuf__
#define __cbuf__
#define __ca__
#define __cb__
#define __cc__
#define __fbuf__
#define __ssbuf__
#define __host__
#define __simd_callee__
#define __sync_alias__
#define __check_sync_alias__
#define __BLOCK_LOCAL__
#define __disable_kernel_type_autoinfer__
#define __in_pipe__(...)
#define __out_pipe__(...)
#define __inout_pipe__(...)
#define ASCENDC_HOST_AICORE

struct fp8_e4m3fn_t { uint8_t bits; };
struct fp8_e5m2_t { uint8_t bits; };
struct fp8_e8m0_t { uint8_t bits; };
struct fp4x2_e1m2_t { uint8_t bits; };
struct fp4x2_e2m1_t { uint8_t bits; };
struct vector_bool {};
struct vector_align {};
struct vector_address {};

enum pipe_t { PIPE_S, PIPE_V, PIPE_M, PIPE_MTE1, PIPE_MTE2, PIPE_MTE3, PIPE_ALL, PIPE_FIX };
enum event_t { EVENT_ID0, EVENT_ID1, EVENT_ID2, EVENT_ID3, EVENT_ID4, EVENT_ID5, EVENT_ID6, EVENT_ID7 };
enum class cache_line_t { SINGLE_CACHE_LINE, ENTIRE_DATA_CACHE };
enum class dcci_dst_t { CACHELINE_ALL, CACHELINE_UB, CACHELINE_OUT, CACHELINE_ATOMIC };
enum addr_cal_mode_t { inc, dec };
enum class pad_t { PAD_NONE };
enum mem_t {};
enum mem_dsb_t {};
enum atomic_type_t {};
enum atomic_op_t {};
enum class Order_t { VALUE_INDEX, INDEX_VALUE, ONLY_VALUE, ONLY_INDEX };
enum ub_addr8_t { VA0, VA1, VA2, VA3, VA4, VA5, VA6, VA7 };
enum vld_pos_t { L128, H128 };
enum class QuantMode_t {
    NoQuant, F322F16, F322BF16, DEQF16, VDEQF16, DEQS16, VDEQS16, REQ8, VREQ8, REQ4, VREQ4,
    QF322B8_PRE, VQF322B8_PRE, QF322F16_PRE, VQF322F16_PRE, QF322BF16_PRE, VQF322BF16_PRE, QF322F32_PRE,
    VQF322F32_PRE, QF322FP8_PRE, VQF322FP8_PRE, QF322HIF8_PRE, VQF322HIF8_PRE, QF322HIF8_PRE_HYBRID,
    VQF322HIF8_PRE_HYBRID, QS322BF16_PRE, VQS322BF16_PRE, QF162B8_PRE, VQF162B8_PRE, QF162S4_PRE, VQF162S4_PRE,
    QF162S16_PRE, VQF162S16_PRE
};

// the CPU-debug run's core identity
extern int64_t block_idx;
extern int64_t sub_block_idx;
extern int64_t g_taskRation;
extern uint64_t g_fixpipeNdNzParam;
namespace AscendC {
enum { AIC_TYPE = 1, AIV_TYPE = 2 };
extern bool g_isVdeq;
}  // namespace AscendC
