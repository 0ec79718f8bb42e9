// STAND-IN for the CANN toolkit's closed CPU-debug header tools/tikicpulib/lib/include/stub_fun.h: the AI
// core's built-in functions (bisheng's cce intrinsics: vadd, copy_gm_to_ubuf, set_flag, ...) and tikicpulib's
// CPU-debug bookkeeping calls, as asc-devkit's headers call them in CPU-debug mode. Used only by
// scripts/check_ascendc_headers.sh (-fsyntax-only) and never compiled into anything else.
//
// Every built-in takes any arguments: the check judges our code against the AscendC API (the asc-devkit
// headers), not the headers against the intrinsics' real signatures, which only bisheng and tikicpulib know.
// The names are those the headers call on the kernel's paths (an undeclared one is a compile error).
#pragma once
#include <cstdint>

#include "stub_def.h"

#define ASC_BUILTIN(name) \
    template <typename... Args> \
    inline void name(Args&&...) {}
#define ASC_BUILTIN_VALUE(name) \
    template <typename... Args> \
    inline int64_t name(Args&&...) { return 0; }

// tikicpulib's CPU-debug runtime: buffer bookkeeping, cross-core synchronisation
ASC_BUILTIN(AscendCBufAbsAddr) ASC_BUILTIN(AscendCBufAlloc) ASC_BUILTIN(AscendCBufDeque) ASC_BUILTIN(AscendCBufEnque)
ASC_BUILTIN(AscendCBufFree) ASC_BUILTIN(AscendCBufGet) ASC_BUILTIN(AscendCBufInit) ASC_BUILTIN(AscendCQueCreate)
ASC_BUILTIN(AscendCRecordPoolHierarchy) ASC_BUILTIN(AscendCTBufPoolInit) ASC_BUILTIN(AscendCTBufPoolResetCheck)
ASC_BUILTIN(AscendCUpdateTbufPoolStatus) ASC_BUILTIN(__ib_set_stub) ASC_BUILTIN(__ib_wait_stub)
ASC_BUILTIN(__sync_all_stub)

// intrinsics that return a value (registers, counters, scalar conversions)
ASC_BUILTIN_VALUE(bcnt0) ASC_BUILTIN_VALUE(bcnt1) ASC_BUILTIN_VALUE(clz) ASC_BUILTIN_VALUE(conv_f322f16o)
ASC_BUILTIN_VALUE(conv_f322s32a) ASC_BUILTIN_VALUE(conv_f322s32c) ASC_BUILTIN_VALUE(conv_f322s32f)
ASC_BUILTIN_VALUE(conv_f322s32r) ASC_BUILTIN_VALUE(get_acc_val) ASC_BUILTIN_VALUE(get_arch_ver)
ASC_BUILTIN_VALUE(get_block_idx) ASC_BUILTIN_VALUE(get_block_num) ASC_BUILTIN_VALUE(get_coreid) ASC_BUILTIN_VALUE(get_ctrl)
ASC_BUILTIN_VALUE(get_icache_prl_st) ASC_BUILTIN_VALUE(get_max_min_cnt) ASC_BUILTIN_VALUE(get_pc)
ASC_BUILTIN_VALUE(get_rsvd_cnt) ASC_BUILTIN_VALUE(get_st_atomic_cfg) ASC_BUILTIN_VALUE(get_vms4_sr)
ASC_BUILTIN_VALUE(ld_dev) ASC_BUILTIN_VALUE(sbitset0) ASC_BUILTIN_VALUE(sbitset1) ASC_BUILTIN_VALUE(sff0)
ASC_BUILTIN_VALUE(sff1) ASC_BUILTIN_VALUE(sflbits)

// intrinsics without a result (vector, cube, copy, synchronisation, special registers)
ASC_BUILTIN(copy_cbuf_to_bt) ASC_BUILTIN(copy_cbuf_to_fbuf) ASC_BUILTIN(copy_cbuf_to_gm) ASC_BUILTIN(copy_gm_to_cbuf)
ASC_BUILTIN(copy_gm_to_cbuf_multi_nd2nz_b16) ASC_BUILTIN(copy_gm_to_cbuf_multi_nd2nz_b32s)
ASC_BUILTIN(copy_gm_to_cbuf_multi_nd2nz_b8) ASC_BUILTIN(copy_gm_to_ubuf) ASC_BUILTIN(copy_gm_to_ubuf_align_b16)
ASC_BUILTIN(copy_gm_to_ubuf_align_b32) ASC_BUILTIN(copy_gm_to_ubuf_align_b8) ASC_BUILTIN(copy_matrix_cc_to_gm)
ASC_BUILTIN(copy_ubuf_to_gm) ASC_BUILTIN(copy_ubuf_to_gm_align_b32) ASC_BUILTIN(copy_ubuf_to_ubuf)
ASC_BUILTIN(create_cbuf_matrix) ASC_BUILTIN(dc_preload) ASC_BUILTIN(dcci) ASC_BUILTIN(dsb)
ASC_BUILTIN(ffts_cross_core_sync) ASC_BUILTIN(hset_flag) ASC_BUILTIN(hwait_flag) ASC_BUILTIN(img2colv2_cbuf_to_ca)
ASC_BUILTIN(img2colv2_cbuf_to_ca_s4) ASC_BUILTIN(img2colv2_cbuf_to_cb) ASC_BUILTIN(load_cbuf_to_ca)
ASC_BUILTIN(load_cbuf_to_ca_s4) ASC_BUILTIN(load_cbuf_to_cb) ASC_BUILTIN(load_cbuf_to_cb_s4)
ASC_BUILTIN(load_cbuf_to_cb_sp) ASC_BUILTIN(load_cbuf_to_cb_transpose_s4) ASC_BUILTIN(mad) ASC_BUILTIN(mad_sp)
ASC_BUILTIN(pipe_barrier) ASC_BUILTIN(preload) ASC_BUILTIN(scatter_vnchwconv_b16) ASC_BUILTIN(scatter_vnchwconv_b32)
ASC_BUILTIN(scatter_vnchwconv_b8) ASC_BUILTIN(set_aipp_spr_0) ASC_BUILTIN(set_aipp_spr_1)
ASC_BUILTIN(set_aipp_spr_18) ASC_BUILTIN(set_aipp_spr_19) ASC_BUILTIN(set_aipp_spr_2) ASC_BUILTIN(set_aipp_spr_20)
ASC_BUILTIN(set_aipp_spr_21) ASC_BUILTIN(set_aipp_spr_3) ASC_BUILTIN(set_aipp_spr_4) ASC_BUILTIN(set_aipp_spr_5)
ASC_BUILTIN(set_aipp_spr_6) ASC_BUILTIN(set_aipp_spr_7) ASC_BUILTIN(set_aipp_spr_8) ASC_BUILTIN(set_aipp_spr_9)
ASC_BUILTIN(set_atomic_add) ASC_BUILTIN(set_atomic_bf16) ASC_BUILTIN(set_atomic_f16) ASC_BUILTIN(set_atomic_f32)
ASC_BUILTIN(set_atomic_max) ASC_BUILTIN(set_atomic_min) ASC_BUILTIN(set_atomic_none) ASC_BUILTIN(set_atomic_s16)
ASC_BUILTIN(set_atomic_s32) ASC_BUILTIN(set_atomic_s8) ASC_BUILTIN(set_cmpmask) ASC_BUILTIN(set_ctrl)
ASC_BUILTIN(set_data_exp_0) ASC_BUILTIN(set_data_exp_1) ASC_BUILTIN(set_data_exp_2) ASC_BUILTIN(set_data_exp_3)
ASC_BUILTIN(set_deqscale) ASC_BUILTIN(set_ffts_base_addr) ASC_BUILTIN(set_flag) ASC_BUILTIN(set_fmatrix)
ASC_BUILTIN(set_fmatrix_b) ASC_BUILTIN(set_fpc) ASC_BUILTIN(set_l1_3d_size) ASC_BUILTIN(set_l3d_rpt)
ASC_BUILTIN(set_mask_count) ASC_BUILTIN(set_mask_norm) ASC_BUILTIN(set_mov_pad_val) ASC_BUILTIN(set_nd_para)
ASC_BUILTIN(set_padding) ASC_BUILTIN(set_quant_pre) ASC_BUILTIN(set_st_atomic_cfg) ASC_BUILTIN(set_va_reg_sb)
ASC_BUILTIN(set_vector_mask) ASC_BUILTIN(st_dev) ASC_BUILTIN(trap) ASC_BUILTIN(vabs) ASC_BUILTIN(vadd)
ASC_BUILTIN(vadds) ASC_BUILTIN(vand) ASC_BUILTIN(vbrcb) ASC_BUILTIN(vcadd) ASC_BUILTIN(vcgadd) ASC_BUILTIN(vcgmax)
ASC_BUILTIN(vcmax) ASC_BUILTIN(vcmpv_eq) ASC_BUILTIN(vcmpv_ge) ASC_BUILTIN(vcmpv_gt) ASC_BUILTIN(vcmpv_le)
ASC_BUILTIN(vcmpv_lt) ASC_BUILTIN(vcmpv_ne) ASC_BUILTIN(vcmpvs_eq) ASC_BUILTIN(vcmpvs_ge) ASC_BUILTIN(vcmpvs_gt)
ASC_BUILTIN(vcmpvs_le) ASC_BUILTIN(vcmpvs_lt) ASC_BUILTIN(vcmpvs_ne) ASC_BUILTIN(vconv_bf162f32)
ASC_BUILTIN(vconv_bf162s32a) ASC_BUILTIN(vconv_bf162s32c) ASC_BUILTIN(vconv_bf162s32f) ASC_BUILTIN(vconv_bf162s32r)
ASC_BUILTIN(vconv_bf162s32z) ASC_BUILTIN(vconv_deq) ASC_BUILTIN(vconv_f162f32) ASC_BUILTIN(vconv_f162s16a)
ASC_BUILTIN(vconv_f162s16c) ASC_BUILTIN(vconv_f162s16f) ASC_BUILTIN(vconv_f162s16r) ASC_BUILTIN(vconv_f162s16z)
ASC_BUILTIN(vconv_f162s32a) ASC_BUILTIN(vconv_f162s32c) ASC_BUILTIN(vconv_f162s32f) ASC_BUILTIN(vconv_f162s32r)
ASC_BUILTIN(vconv_f162s32z) ASC_BUILTIN(vconv_f162s4) ASC_BUILTIN(vconv_f162s4a) ASC_BUILTIN(vconv_f162s4c)
ASC_BUILTIN(vconv_f162s4f) ASC_BUILTIN(vconv_f162s4r) ASC_BUILTIN(vconv_f162s4z) ASC_BUILTIN(vconv_f162s8)
ASC_BUILTIN(vconv_f162s8a) ASC_BUILTIN(vconv_f162s8c) ASC_BUILTIN(vconv_f162s8f) ASC_BUILTIN(vconv_f162s8r)
ASC_BUILTIN(vconv_f162s8z) ASC_BUILTIN(vconv_f162u8) ASC_BUILTIN(vconv_f162u8a) ASC_BUILTIN(vconv_f162u8c)
ASC_BUILTIN(vconv_f162u8f) ASC_BUILTIN(vconv_f162u8r) ASC_BUILTIN(vconv_f162u8z) ASC_BUILTIN(vconv_f322bf16a)
ASC_BUILTIN(vconv_f322bf16c) ASC_BUILTIN(vconv_f322bf16f) ASC_BUILTIN(vconv_f322bf16r) ASC_BUILTIN(vconv_f322bf16z)
ASC_BUILTIN(vconv_f322f16) ASC_BUILTIN(vconv_f322f16a) ASC_BUILTIN(vconv_f322f16c) ASC_BUILTIN(vconv_f322f16f)
ASC_BUILTIN(vconv_f322f16o) ASC_BUILTIN(vconv_f322f16r) ASC_BUILTIN(vconv_f322f16z) ASC_BUILTIN(vconv_f322f32a)
ASC_BUILTIN(vconv_f322f32c) ASC_BUILTIN(vconv_f322f32f) ASC_BUILTIN(vconv_f322f32r) ASC_BUILTIN(vconv_f322f32z)
ASC_BUILTIN(vconv_f322s16a) ASC_BUILTIN(vconv_f322s16c) ASC_BUILTIN(vconv_f322s16f) ASC_BUILTIN(vconv_f322s16r)
ASC_BUILTIN(vconv_f322s16z) ASC_BUILTIN(vconv_f322s32a) ASC_BUILTIN(vconv_f322s32c) ASC_BUILTIN(vconv_f322s32f)
ASC_BUILTIN(vconv_f322s32r) ASC_BUILTIN(vconv_f322s32z) ASC_BUILTIN(vconv_f322s64a) ASC_BUILTIN(vconv_f322s64c)
ASC_BUILTIN(vconv_f322s64f) ASC_BUILTIN(vconv_f322s64r) ASC_BUILTIN(vconv_f322s64z) ASC_BUILTIN(vconv_s162f16)
ASC_BUILTIN(vconv_s162f16a) ASC_BUILTIN(vconv_s162f16c) ASC_BUILTIN(vconv_s162f16f) ASC_BUILTIN(vconv_s162f16r)
ASC_BUILTIN(vconv_s162f16z) ASC_BUILTIN(vconv_s162f32) ASC_BUILTIN(vconv_s322f32) ASC_BUILTIN(vconv_s322f32a)
ASC_BUILTIN(vconv_s322f32c) ASC_BUILTIN(vconv_s322f32f) ASC_BUILTIN(vconv_s322f32r) ASC_BUILTIN(vconv_s322f32z)
ASC_BUILTIN(vconv_s322s16) ASC_BUILTIN(vconv_s322s64) ASC_BUILTIN(vconv_s42f16) ASC_BUILTIN(vconv_s642f32a)
ASC_BUILTIN(vconv_s642f32c) ASC_BUILTIN(vconv_s642f32f) ASC_BUILTIN(vconv_s642f32r) ASC_BUILTIN(vconv_s642f32z)
ASC_BUILTIN(vconv_s642s32) ASC_BUILTIN(vconv_s82f16) ASC_BUILTIN(vconv_u82f16) ASC_BUILTIN(vcopy) ASC_BUILTIN(vdiv)
ASC_BUILTIN(vector_dup) ASC_BUILTIN(vexp) ASC_BUILTIN(vgather) ASC_BUILTIN(vld_va_reg) ASC_BUILTIN(vln)
ASC_BUILTIN(vmax) ASC_BUILTIN(vmaxs) ASC_BUILTIN(vmin) ASC_BUILTIN(vmins) ASC_BUILTIN(vmul)
ASC_BUILTIN(vmulconv_f162s8) ASC_BUILTIN(vmulconv_f162u8) ASC_BUILTIN(vmuls) ASC_BUILTIN(vnot) ASC_BUILTIN(vor)
ASC_BUILTIN(vrec) ASC_BUILTIN(vrelu) ASC_BUILTIN(vreducev2) ASC_BUILTIN(vsel) ASC_BUILTIN(vshr) ASC_BUILTIN(vsqrt)
ASC_BUILTIN(vsub)
ASC_BUILTIN(vtranspose) ASC_BUILTIN(wait_flag) ASC_BUILTIN(wait_flag_dev)
