// The bases of the allocation's two components (pasa_allocation.h: the policy's Softmax and Scores): the hooks an
// allocation may leave out, as no-ops. A component derives from its base and defines only the hooks it uses; the
// stages call every hook on the concrete component type (Policy::Softmax<Policy>, Policy::Scores<Policy>), so its
// own definition hides the base's, with no virtual call. The full interfaces: pasa_vector_stage.h (Softmax) and
// pasa_cube_stage.h (Scores).
#ifndef PASA_COMPONENTS_H
#define PASA_COMPONENTS_H

#include "pasa_common.h"

namespace pasa_kernel {

struct SoftmaxBase {
    __aicore__ inline void Prepare() {}                   // before the tasks
    __aicore__ inline void BeginTask(const Task&) {}      // before the row state is reset
    __aicore__ inline void ResetRows() {}                 // its own row state
    __aicore__ inline void EndStack() {}                  // after a stack's blocks, before P_READY
    __aicore__ inline void LoadLseTerms() {}              // its terms of lse = m + ln l (+ ...): none
    __aicore__ inline void ScaleLseTerms() {}
    __aicore__ inline void AddLseTerms() {}
    __aicore__ inline void WriteStatusWords(LocalTensor<uint32_t>&) {}  // no status words beyond word 0
};

struct ScoresBase {
    __aicore__ inline void Finish() {}  // after the core's last task
};

}  // namespace pasa_kernel

#endif  // PASA_COMPONENTS_H
