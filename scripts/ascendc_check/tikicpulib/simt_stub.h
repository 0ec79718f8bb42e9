// STAND-IN for the CANN toolkit's closed CPU-debug header tools/tikicpulib/lib/include/simt_stub.h, which
// asc-devkit's SIMT headers include: the kernel uses no SIMT API, so nothing of it is needed. Used only by
// scripts/check_ascendc_headers.sh (-fsyntax-only) and never compiled into anything else.
#pragma once
