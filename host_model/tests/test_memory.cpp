// TPipe / TQue / TBuf / LocalTensor / GlobalTensor: capacity, queue state machine, bounds.
#include "harness.h"

using namespace AscendC;
using hm_test::OnAic;
using hm_test::OnAiv;

HM_CASE(pipe_capacity_exact) {
    // UB's usable 184 KB - 256 B shared by VECIN/VECOUT/VECCALC and the AIC memories (L1: 512 KB - 256 B) fill
    // exactly; buffers are 32-byte aligned and disjoint.
    OnAiv([] {
        TPipe pipe;
        TQue<TPosition::VECIN, 2> in;
        TQue<TPosition::VECOUT, 2> out;
        TBuf<TPosition::VECCALC> calc;
        pipe.InitBuffer(in, 2, 32 * 1024);
        pipe.InitBuffer(out, 2, 48 * 1024 - 1);  // rounded up to 48 KB
        pipe.InitBuffer(calc, 24 * 1024 - 256);
        LocalTensor<half> a = in.AllocTensor<half>(), b = in.AllocTensor<half>();
        LocalTensor<half> c = out.AllocTensor<half>(), d = out.AllocTensor<half>();
        LocalTensor<half> e = calc.Get<half>();
        HM_CHECK(a.GetPhyAddr() == 0 && b.GetPhyAddr() == 32768, "VECIN buffers back to back");
        HM_CHECK(c.GetPhyAddr() == 65536 && d.GetPhyAddr() == 65536 + 49152, "VECOUT after VECIN, 32-B aligned");
        HM_CHECK(e.GetPhyAddr() + e.GetSize() * 2 == 184 * 1024 - 256, "VECCALC ends at 184 KB - 256 B");
        HM_CHECK(calc.Get<float>(100).GetSize() == 100, "TBuf::Get(len)");
    });
    OnAic([] {
        TPipe pipe;
        TQue<TPosition::A1, 1> a1;
        TQue<TPosition::B1, 1> b1;
        TQue<TPosition::A2, 1> a2;
        TQue<TPosition::B2, 1> b2;
        TQue<TPosition::CO1, 1> co1;
        pipe.InitBuffer(a1, 2, 128 * 1024);
        pipe.InitBuffer(b1, 2, 128 * 1024 - 128);
        pipe.InitBuffer(a2, 2, 32 * 1024);
        pipe.InitBuffer(b2, 2, 32 * 1024);
        pipe.InitBuffer(co1, 2, 64 * 1024);
    });
}

HM_CASE(pipe_release_on_destroy) {
    // A destroyed pipe gives its memory back: a new pipe can take the whole UB again.
    OnAiv([] {
        {
            TPipe pipe;
            TBuf<TPosition::VECCALC> b;
            pipe.InitBuffer(b, 184 * 1024 - 256);
        }
        TPipe pipe;
        TBuf<TPosition::VECCALC> b;
        pipe.InitBuffer(b, 184 * 1024 - 256);
    });
}

HM_CASE(queue_fifo_double_buffer) {
    // EnQue/DeQue are FIFO; with 2 buffers and depth 2 both tensors can be in flight.
    OnAiv([] {
        TPipe pipe;
        TQue<TPosition::VECIN, 2> q;
        pipe.InitBuffer(q, 2, 256);
        for (int round = 0; round < 3; ++round) {
            LocalTensor<float> x = q.AllocTensor<float>(), y = q.AllocTensor<float>();
            x.SetValue(0, 1.0f + round);
            y.SetValue(0, 2.0f + round);
            q.EnQue(x);
            q.EnQue(y);
            HM_CHECK(q.GetTensorCountInQue() == 2 && !q.VacantInQue(), "two tensors queued");
            LocalTensor<float> first = q.DeQue<float>(), second = q.DeQue<float>();
            HM_CHECK(first.GetValue(0) == 1.0f + round && second.GetValue(0) == 2.0f + round, "FIFO order");
            q.FreeTensor(first);
            q.FreeTensor(second);
        }
    });
}

HM_CASE(misuse_initbuffer_ub_overflow) {
    OnAiv([] {
        TPipe pipe;
        TQue<TPosition::VECIN, 2> in;
        TBuf<TPosition::VECCALC> calc;
        pipe.InitBuffer(calc, 100 * 1024);
        pipe.InitBuffer(in, 2, 48 * 1024);
    });
}

HM_CASE(misuse_initbuffer_ub_scratch) {
    // 184 KB is already too much: the top 8 KB belong to the vector APIs' scratch, 256 B more to the framework.
    OnAiv([] {
        TPipe pipe;
        TBuf<TPosition::VECCALC> calc;
        pipe.InitBuffer(calc, 184 * 1024);
    });
}

HM_CASE(misuse_initbuffer_l1_reserved) {
    OnAic([] {
        TPipe pipe;
        TBuf<TPosition::A1> l1;
        pipe.InitBuffer(l1, 512 * 1024);
    });
}

HM_CASE(misuse_initbuffer_l0a_overflow) {
    OnAic([] {
        TPipe pipe;
        TQue<TPosition::A2, 1> a2;
        pipe.InitBuffer(a2, 2, 40 * 1024);
    });
}

HM_CASE(misuse_ub_position_on_aic) {
    OnAic([] {
        TPipe pipe;
        TQue<TPosition::VECIN, 1> q;
        pipe.InitBuffer(q, 1, 1024);
    });
}

HM_CASE(misuse_tensor_index_beyond_buffer) {
    OnAiv([] {
        TPipe pipe;
        TBuf<TPosition::VECCALC> b;
        pipe.InitBuffer(b, 256);
        LocalTensor<half> t = b.Get<half>();
        t.SetValue(128, half(1));
    });
}

HM_CASE(misuse_vector_length_beyond_buffer) {
    OnAiv([] {
        TPipe pipe;
        TBuf<TPosition::VECCALC> b;
        pipe.InitBuffer(b, 3 * 2048);
        LocalTensor<half> t = b.Get<half>();
        Add(t, t[1024], t[2048], 1025);  // src1 = t[2048] holds only 1024
    });
}

HM_CASE(misuse_deque_empty) {
    OnAiv([] {
        hm_test::PipeQueue<TPosition::VECIN, 2> q(2);
        q.que.AllocTensor<half>();
        q.que.DeQue<half>();
    });
}

// Duplicate into a tensor of a one-buffer queue at `pos` after `release(que, tensor)` has given it up.
template <TPosition pos, class Release>
static void UseAfter(Release release) {
    OnAiv([&] {
        hm_test::PipeQueue<pos> q;
        LocalTensor<half> t = q.que.template AllocTensor<half>();
        release(q.que, t);
        Duplicate(t, half(1), 128);
    });
}

HM_CASE(misuse_use_after_free) {
    UseAfter<TPosition::VECOUT>([](auto& que, LocalTensor<half>& t) { que.FreeTensor(t); });
}

HM_CASE(misuse_use_enqueued_tensor) {
    UseAfter<TPosition::VECIN>([](auto& que, LocalTensor<half>& t) { que.EnQue(t); });
}

HM_CASE(misuse_queue_depth_exceeded) {
    OnAiv([] {
        hm_test::PipeQueue<TPosition::VECIN> q(2);
        LocalTensor<half> a = q.que.AllocTensor<half>(), b = q.que.AllocTensor<half>();
        q.que.EnQue(a);
        q.que.EnQue(b);
    });
}

HM_CASE(misuse_alloc_all_buffers_in_use) {
    OnAiv([] {
        hm_test::PipeQueue<TPosition::VECIN, 2> q(2);
        for (int i = 0; i < 3; ++i) q.que.AllocTensor<half>();
    });
}
