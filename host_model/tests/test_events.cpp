// Intra-core events (event.h): binary flags, the TPipe's pool of IDs and the events TQue takes from it. Each misuse
// case breaks one rule; tests/npu/test_host_model.py asserts the rule, the event and the source lines its message names.
#include "harness.h"

using namespace AscendC;

using hm_test::PipeQueue;

namespace {
// Allocates and frees a buffer of `que`: the FreeTensor's event stays set until the buffer's next AllocTensor.
template <typename T, class Que>
void AllocAndFree(Que& que) {
    LocalTensor<T> t = que.template AllocTensor<T>();
    que.FreeTensor(t);  // queue's set
}
}  // namespace

HM_CASE(events_queue_ids_come_from_the_pool) {
    // A freed VECIN buffer holds V_MTE2 ID 0 until its next AllocTensor: FetchEventID hands out ID 1 meanwhile.
    hm_test::OnAiv([] {
        PipeQueue<TPosition::VECIN> q;
        TPipe& pipe = q.pipe;
        TQue<TPosition::VECIN, 1>& que = q.que;
        LocalTensor<half> t = que.AllocTensor<half>();
        que.EnQue(t);
        HM_CHECK(pipe.FetchEventID(HardEvent::MTE2_V) == 1, "EnQue holds MTE2_V ID 0 until DeQue");
        t = que.DeQue<half>();
        que.FreeTensor(t);
        HM_CHECK(GetTPipePtr() == &pipe, "GetTPipePtr is the live pipe");
        const TEventID id = GetTPipePtr()->FetchEventID(HardEvent::V_MTE2);
        HM_CHECK(id == 1, "FreeTensor holds V_MTE2 ID 0");
        SetFlag<HardEvent::V_MTE2>(id);
        WaitFlag<HardEvent::V_MTE2>(id);
        t = que.AllocTensor<half>();  // waits the FreeTensor's event and gives its ID back
        HM_CHECK(pipe.FetchEventID<HardEvent::V_MTE2>() == 0, "AllocTensor released V_MTE2 ID 0");
        que.FreeTensor(t);  // left for the pipe's destruction to wait, as TPipe::Destroy does
    });
    // The AIC's pipe holds M_MTE1 IDs 0-2 for the matmul macro; an A2 queue's FreeTensor takes the next one.
    hm_test::OnAic([] {
        TPipe pipe;
        TQue<TPosition::A2, 1> que;
        pipe.InitBuffer(que, 1, 512);
        HM_CHECK(pipe.FetchEventID(HardEvent::M_MTE1) == 3, "TPipe holds M_MTE1 0-2 on the AIC");
        LocalTensor<half> t = que.AllocTensor<half>();
        que.FreeTensor(t);
        HM_CHECK(pipe.FetchEventID(HardEvent::M_MTE1) == 4, "A2's FreeTensor holds M_MTE1 ID 3");
    });
}

HM_CASE(misuse_event_set_twice) {
    hm_test::OnAiv([] {
        SetFlag<HardEvent::MTE2_V>(0);  // first set
        SetFlag<HardEvent::MTE2_V>(0);  // second set
    });
}

HM_CASE(misuse_event_id_collides_with_a_queue) {
    // A hard-coded ID 0: the VECIN queue's FreeTensor holds V_MTE2 ID 0 set until the buffer's next AllocTensor.
    hm_test::OnAiv([] {
        PipeQueue<TPosition::VECIN> q;
        AllocAndFree<half>(q.que);
        SetFlag<HardEvent::V_MTE2>(EVENT_ID0);  // colliding set
        WaitFlag<HardEvent::V_MTE2>(EVENT_ID0);
    });
}

HM_CASE(misuse_event_id_collides_with_the_matmul_macro) {
    hm_test::OnAic([] {
        TPipe pipe;  // on the AIC it holds M_MTE1 IDs 0-2 set from here on
        SetFlag<HardEvent::M_MTE1>(EVENT_ID1);  // hard-coded ID 1
        WaitFlag<HardEvent::M_MTE1>(EVENT_ID1);
    });
}

HM_CASE(misuse_event_wait_without_set) {
    hm_test::OnAiv([] {
        SetFlag<HardEvent::S_MTE3>(2);
        WaitFlag<HardEvent::S_MTE3>(2);  // first wait
        WaitFlag<HardEvent::S_MTE3>(2);  // missing set
    });
}

HM_CASE(misuse_event_wait_steals_a_queue_event) {
    // A WaitFlag of its own consumes the queue's set; the buffer's next AllocTensor then waits for nothing.
    hm_test::OnAiv([] {
        PipeQueue<TPosition::VECOUT> q;
        AllocAndFree<float>(q.que);
        WaitFlag<HardEvent::MTE3_V>(0);  // stealing wait
        LocalTensor<float> t = q.que.AllocTensor<float>();  // starved alloc
        q.que.FreeTensor(t);
    });
}

HM_CASE(misuse_event_left_set) {
    hm_test::OnAiv([] {
        SetFlag<HardEvent::V_S>(3);  // never waited
    });
}

HM_CASE(misuse_tensor_left_in_a_queue) {
    hm_test::OnAiv([] {
        PipeQueue<TPosition::VECIN> q;
        LocalTensor<half> t = q.que.AllocTensor<half>();
        q.que.EnQue(t);  // never dequeued
    });
}

HM_CASE(misuse_event_pool_exhausted) {
    hm_test::OnAiv([] {
        TPipe pipe;
        for (int i = 0; i < 9; ++i) pipe.AllocEventID<HardEvent::V_S>();  // ninth alloc
    });
}

HM_CASE(misuse_release_of_an_id_not_allocated) {
    hm_test::OnAiv([] {
        TPipe pipe;
        const TEventID id = pipe.FetchEventID<HardEvent::S_V>();
        pipe.ReleaseEventID<HardEvent::S_V>(id);  // fetched, not allocated
    });
}

HM_CASE(misuse_alloc_without_release) {
    hm_test::OnAiv([] {
        TPipe pipe;
        const TEventID id = pipe.AllocEventID<HardEvent::MTE2_S>();  // never released
        SetFlag<HardEvent::MTE2_S>(id);
        WaitFlag<HardEvent::MTE2_S>(id);
    });
}
