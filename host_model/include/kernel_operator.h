// Host functional model of the AscendC API subset used by the PASA kernel (see docs/host_model.md).
// Kernels include this header exactly as they include CANN's kernel_operator.h.
#pragma once
#include "host_model/kernel_macros.h"
#include "host_model/types.h"
#include "host_model/tensor.h"
#include "host_model/pipe.h"
#include "host_model/copy.h"
#include "host_model/cube.h"
#include "host_model/vector.h"
#include "host_model/reduce.h"
#include "host_model/sync.h"
#include "host_model/cache.h"
