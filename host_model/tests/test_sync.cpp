// Launch identity, cross-core flags (modes 0 and 2), SyncAll, intra-core event pairing, and the
// failure paths: a wait that can never be satisfied, a timeout, a counter past 15, a bad flag id,
// and one core's error releasing the others.
#include <atomic>
#include <chrono>
#include <thread>

#include "harness.h"

using namespace AscendC;
using ascendc_model::LaunchMix;

HM_CASE(launch_identity) {
    // blockDim 3: AIC i has GetBlockIdx i; AIV (i, s) has 2i + s; tiling key visible to all.
    std::vector<std::atomic<int>> seen(9);
    LaunchMix({3, 7, 5.0}, [&] {
        HM_CHECK(GetBlockNum() == 3 && TILING_KEY_IS(7) && !TILING_KEY_IS(6), "block num / tiling key");
        if ASCEND_IS_AIC {
            HM_CHECK(GetSubBlockIdx() == 0 && GetTaskRatio() == 1, "AIC sub-block / ratio");
            seen[GetBlockIdx()]++;
        }
        if ASCEND_IS_AIV {
            HM_CHECK(GetTaskRatio() == 2, "AIV ratio");
            seen[3 + GetBlockIdx()]++;
        }
    });
    for (auto& s : seen) HM_CHECK(s == 1, "every core ran once");
}

HM_CASE(sync_mode2_ping_pong) {
    // Per AI core: the AIC publishes a value in GM and sets flag 3 (mode 2); both AIVs wait, read it,
    // write value+1+sub and set flag 4 (mode 2); the AIC waits for both before the next round.
    constexpr int rounds = 20;
    std::vector<int32_t> gm(2 * 3, 0);
    std::atomic<int> errors{0};
    LaunchMix({2, 0, 5.0}, [&] {
        const uint32_t blk = ASCEND_IS_AIC ? GetBlockIdx() : GetBlockIdx() / 2;
        int32_t* slot = gm.data() + blk * 3;
        for (int r = 0; r < rounds; ++r) {
            if ASCEND_IS_AIC {
                slot[0] = 100 * r;
                CrossCoreSetFlag<2, PIPE_FIX>(3);
                CrossCoreWaitFlag(4);
                if (slot[1] != 100 * r + 1 || slot[2] != 100 * r + 2) errors++;
            } else {
                CrossCoreWaitFlag(3);
                slot[1 + GetSubBlockIdx()] = slot[0] + 1 + static_cast<int32_t>(GetSubBlockIdx());
                CrossCoreSetFlag<2, PIPE_MTE3>(4);
            }
        }
    });
    HM_CHECK(errors == 0, "the AIC saw both AIVs' writes every round");
}

HM_CASE(sync_mode0_and_syncall) {
    // Mode 0 on the AIVs: every AIV writes its id, sets flag 5, waits; afterwards all ids are visible.
    std::vector<std::atomic<int>> ids(8);
    std::atomic<int> bad{0};
    LaunchMix({4, 0, 5.0, ascendc_model::kScheduleModeBatch}, [&] {
        if ASCEND_IS_AIV {
            ids[GetBlockIdx()] = static_cast<int>(GetBlockIdx()) + 1;
            CrossCoreSetFlag<0, PIPE_MTE3>(5);
            CrossCoreWaitFlag(5);
            for (auto& x : ids) if (x == 0) bad++;
            SyncAll();
        }
        SyncAll<false>();
    });
    HM_CHECK(bad == 0, "mode-0 barrier: every AIV's write visible after the wait");
}

HM_CASE(sync_intra_core_events) {
    hm_test::OnAiv([] {
        TPipe pipe;
        TEventID id = pipe.AllocEventID<HardEvent::V_MTE3>();
        SetFlag<HardEvent::V_MTE3>(id);
        WaitFlag<HardEvent::V_MTE3>(id);
        pipe.ReleaseEventID<HardEvent::V_MTE3>(id);
        SetFlag<HardEvent::MTE2_V>(0);
        SetFlag<HardEvent::MTE2_V>(1);
        WaitFlag<HardEvent::MTE2_V>(1);
        WaitFlag<HardEvent::MTE2_V>(0);
        PipeBarrier<PIPE_V>();
    });
}

HM_CASE(misuse_crosscore_wait_never_set) {
    // The AIVs wait for flag 3 that the AIC never sets (it waits for flag 4 from them instead).
    LaunchMix({1, 0, 30.0}, [] {
        if ASCEND_IS_AIC CrossCoreWaitFlag(4);
        if ASCEND_IS_AIV {
            CrossCoreWaitFlag(3);
            CrossCoreSetFlag<2, PIPE_MTE3>(4);
        }
    });
}

HM_CASE(misuse_crosscore_wait_timeout) {
    // AIV 1 keeps running (sleeps 2 s) while AIV 0 waits for a flag nobody sets: the 0.3 s timeout fires.
    LaunchMix({1, 0, 0.3}, [] {
        if (ASCEND_IS_AIV && GetSubBlockIdx() == 0) CrossCoreWaitFlag<2, PIPE_V>(7);
        if (ASCEND_IS_AIV && GetSubBlockIdx() == 1) std::this_thread::sleep_for(std::chrono::seconds(2));
    });
}

HM_CASE(misuse_crosscore_counter_overflow) {
    LaunchMix({1, 0, 5.0}, [] {
        if ASCEND_IS_AIC
            for (int i = 0; i < 16; ++i) CrossCoreSetFlag<2, PIPE_FIX>(2);
    });
}

HM_CASE(misuse_crosscore_flag_id_range) {
    LaunchMix({1, 0, 5.0}, [] {
        if ASCEND_IS_AIC CrossCoreSetFlag<2, PIPE_FIX>(16);
    });
}

HM_CASE(misuse_crosscore_flag_id_syncall) {
    // 11..14 belong to SyncAll; 15 and 0..10 are the kernel's.
    LaunchMix({1, 0, 5.0}, [] {
        if ASCEND_IS_AIC {
            CrossCoreSetFlag<2, PIPE_FIX>(15);
            CrossCoreSetFlag<2, PIPE_FIX>(11);
        }
    });
}

HM_CASE(misuse_syncall_without_batch_mode) {
    LaunchMix({2, 0, 5.0}, [] { SyncAll<false>(); });
}

HM_CASE(misuse_mode0_without_batch_mode) {
    LaunchMix({2, 0, 5.0}, [] {
        if ASCEND_IS_AIC {
            CrossCoreSetFlag<0, PIPE_FIX>(2);
            CrossCoreWaitFlag(2);
        }
    });
}

HM_CASE(misuse_error_releases_waiters) {
    // The AIC overflows L0C while both AIVs wait for it: the AIC's error is reported, not a hang.
    LaunchMix({1, 0, 30.0}, [] {
        if ASCEND_IS_AIC {
            TPipe pipe;
            TBuf<TPosition::CO1> c;
            pipe.InitBuffer(c, 129 * 1024);
        }
        if ASCEND_IS_AIV CrossCoreWaitFlag(1);
    });
}

HM_CASE(sync_scalar_reads_need_dcci) {
    // The AIC reads a word its AIVs rewrite every round. A plain GetValue keeps returning the line as it was
    // first fetched (the scalar data cache); after DataCacheCleanAndInvalid it sees the new value.
    std::vector<int32_t> gm(16, 0);
    std::atomic<int> staleWithout{0}, freshWith{0};
    LaunchMix({1, 0, 5.0}, [&] {
        GlobalTensor<int32_t> word;
        word.SetGlobalBuffer(gm.data(), gm.size());
        for (int32_t r = 1; r <= 3; ++r) {
            if ASCEND_IS_AIV {
                if (GetSubBlockIdx() == 0) gm[0] = r;
                CrossCoreSetFlag<2, PIPE_MTE3>(3);
                CrossCoreWaitFlag(4);
            } else {
                CrossCoreWaitFlag(3);
                if (r == 1) (void)word.GetValue(0);  // the line is now cached with r = 1
                else if (word.GetValue(0) == r - 1) staleWithout++;  // last round's value, fetched after the last dcci
                DataCacheCleanAndInvalid<int32_t, CacheLine::SINGLE_CACHE_LINE, DcciDst::CACHELINE_OUT>(word);
                if (word.GetValue(0) == r) freshWith++;
                CrossCoreSetFlag<2, PIPE_FIX>(4);
            }
        }
    });
    HM_CHECK(staleWithout == 2, "a cached line hides the other core's write");
    HM_CHECK(freshWith == 3, "DataCacheCleanAndInvalid makes the next read fetch GM");
}

// Vector-pipe dependences (hazard.h): five float vectors of 128 in one UB buffer.
namespace {
struct Vectors {
    TPipe pipe;
    TBuf<TPosition::VECCALC> buf;
    Vectors() { pipe.InitBuffer(buf, 5 * 512); }
    LocalTensor<float> operator[](uint32_t i) { return buf.GetWithOffset<float>(128, i * 512); }
};
}  // namespace

HM_CASE(misuse_vector_read_after_write) {
    hm_test::OnAiv([] {
        Vectors v;
        Add(v[2], v[0], v[1], 128);
        Mul(v[3], v[2], v[1], 128);  // reads Add's result while Add may still run
    });
}

HM_CASE(misuse_vector_write_after_read) {
    hm_test::OnAiv([] {
        Vectors v;
        Add(v[2], v[0], v[1], 128);
        Duplicate(v[1], 0.0f, 128);  // overwrites an operand Add may still read
    });
}

HM_CASE(misuse_vector_write_after_write_strided) {
    // Duplicate writes the first block of two repeats 8 blocks apart; the Adds rewrites the second one.
    hm_test::OnAiv([] {
        Vectors v;
        Duplicate(v[0], 1.0f, 8, 2, 1, 8);
        Adds(v[0][64], v[1], 1.0f, 8);
    });
}

HM_CASE(misuse_scalar_read_without_v_s) {
    hm_test::OnAiv([] {
        Vectors v;
        Duplicate(v[0], 1.0f, 128);
        PipeBarrier<PIPE_V>();  // orders the vector pipe only, not the scalar unit
        (void)v[0].GetValue(5);
    });
}

HM_CASE(misuse_pipe_barrier_s) {
    hm_test::OnAiv([] { PipeBarrier<PIPE_S>(); });
}

HM_CASE(sync_vector_barriers_counted) {
    // Independent instructions run without a barrier; each barrier is counted, and one with no dependence
    // across it is idle.
    std::vector<ascendc_model::CoreCounters> counters;
    float sum = 0, product = 0, masked = 0;
    ascendc_model::LaunchConfig cfg{1, 0, 5.0};
    cfg.counters = &counters;
    ascendc_model::LaunchMix(cfg, [&] {
        if (!(ASCEND_IS_AIV && GetSubBlockIdx() == 0)) return;
        Vectors v;
        Duplicate(v[0], 1.0f, 128);
        Duplicate(v[1], 2.0f, 128);          // independent of the first
        PipeBarrier<PIPE_V>();               // used: the Add and the Mul read both
        Add(v[2], v[0], v[1], 128);
        Mul(v[3], v[0], v[1], 128);          // reads what the Add reads: independent
        PipeBarrier<PIPE_V>();               // idle: the Duplicate below touches none of their operands
        Duplicate(v[4][64], 3.0f, 64);
        PipeBarrier<PIPE_V>();               // used: the Add reads what the Duplicate wrote
        Add(v[2][64], v[2][64], v[4][64], 64);
        // the strided form: the first block of two repeats 8 blocks apart, then a block between them
        Duplicate(v[1], 5.0f, 8, 2, 1, 8);
        Duplicate(v[1][32], 7.0f, 8);
        SetFlag<HardEvent::V_S>(EVENT_ID0);
        WaitFlag<HardEvent::V_S>(EVENT_ID0);
        sum = v[2].GetValue(100);
        product = v[3].GetValue(100);
        masked = v[1].GetValue(64) + v[1].GetValue(32);
        PipeBarrier<PIPE_V>();               // idle: nothing after it
    });
    HM_CHECK(sum == 6.0f && product == 2.0f && masked == 12.0f, "values");
    const ascendc_model::CoreCounters& aiv0 = counters[1];
    HM_CHECK(aiv0.pipeBarriers.at("V") == 4, "every PipeBarrier<PIPE_V> counted");
    HM_CHECK(aiv0.idleVectorBarriers == 2, "two barriers guard no dependence");
}

HM_CASE(sync_queues_order_buffer_reuse) {
    // A VECOUT buffer's next AllocTensor waits for the copy out, which waited for the vector instructions before
    // its EnQue; a VECIN buffer's next DeQue waits for the copy in, which waited for those before its FreeTensor.
    // So rewriting a reused queue buffer needs no barrier.
    std::vector<float> gm(64, 1.0f);
    hm_test::OnAiv([&] {
        TPipe pipe;
        TQue<TPosition::VECOUT, 1> out;
        TQue<TPosition::VECIN, 1> in;
        pipe.InitBuffer(out, 1, 256);
        pipe.InitBuffer(in, 1, 256);
        GlobalTensor<float> g;
        g.SetGlobalBuffer(gm.data(), gm.size());
        LocalTensor<float> a = in.AllocTensor<float>();
        DataCopy(a, g, 64);
        in.EnQue(a);
        a = in.DeQue<float>();
        LocalTensor<float> o = out.AllocTensor<float>();
        Muls(o, a, 2.0f, 64);  // reads the VECIN buffer, writes the VECOUT one
        in.FreeTensor(a);
        out.EnQue(o);
        o = out.DeQue<float>();
        DataCopy(g, o, 64);
        out.FreeTensor(o);
        LocalTensor<float> o2 = out.AllocTensor<float>();
        Duplicate(o2, 3.0f, 64);  // the same VECOUT buffer: ordered after the Muls by the queue
        LocalTensor<float> a2 = in.AllocTensor<float>();
        DataCopy(a2, g, 64);
        in.EnQue(a2);
        a2 = in.DeQue<float>();
        Adds(a2, a2, 1.0f, 64);  // the same VECIN buffer: ordered after the Muls that read it
        out.FreeTensor(o2);
        in.FreeTensor(a2);
    });
    HM_CHECK(gm[0] == 2.0f, "the copy out");
}

HM_CASE(misuse_crosscore_flag_left_set) {
    // The AIC sets flag 3 for its AIVs twice; they wait once.
    LaunchMix({1, 0, 5.0}, [] {
        if ASCEND_IS_AIC {
            CrossCoreSetFlag<2, PIPE_FIX>(3);
            CrossCoreSetFlag<2, PIPE_FIX>(3);
        }
        if ASCEND_IS_AIV CrossCoreWaitFlag(3);
    });
}
