// Decode (Q_S = 1) with the KV sequence split across AI cores: every split wrote its normalised partial
// output O_s/l_s (FP32) and its true-scale lse_s. The combiner of flash-attention-combiner-notes (the
// blocked reduction of log-sum-exp): lse = max_s lse_s + ln Σ_s exp(lse_s - max), O = Σ_s exp(lse_s - lse) O_s,
// in FP32. Splits without a key have lse_s = -inf and weigh 0; a row where every split is empty gets
// out 0 and lse -inf. PASA's shift needs no special care here: each lse_s is already in the true scale.
// A learnable sink joins here, once (the splits' partials have none): one more split of output 0 and lse the
// head's sink, after the others (merge.merge_partials's rule), so a row that saw no key gets out 0, lse = sink.
// Runs on the AIVs after an AIV-only barrier (CrossCoreSetFlag mode 0) that orders it after every partial.
#ifndef PASA_DECODE_COMBINE_H
#define PASA_DECODE_COMBINE_H

#include "pasa_common.h"

namespace pasa_kernel {

// The combine's GM tensors: the splits' partial outputs and lses (workspace), the sinks, the output and lse.
struct CombineGm {
    GlobalTensor<float> partO, partLse, sink, lse;
    GlobalTensor<half> out;
};

// Row g of head n (its splits' lse_s and the head's sink): acc = sum_s e^{lse_s - mx} O_s / sum, with *mx the
// largest of the lse_s and the sink and sum = sum_s e^{lse_s - mx} (+ e^{sink - mx}); acc 0 and *mx -inf where the
// row saw no key.
template <class InQ>
__aicore__ inline float WeighSplits(const PasaTilingData& t, const CombineGm& gm, uint64_t g, uint32_t n, InQ& inQue,
                                   const LocalTensor<float>& acc, const LocalTensor<float>& vec, float* mx) {
    const uint32_t d = t.headDim, splits = t.kvSplits;
    LocalTensor<float> w = inQue.template AllocTensor<float>();
    DataCopyPad(w, gm.partLse[g * splits], DataCopyExtParams(1, splits * 4, 0, 0, 0),
                DataCopyPadExtParams<float>(false, 0, 0, 0.0f));
    inQue.EnQue(w);
    w = inQue.template DeQue<float>();
    WholeReduceMax<float>(vec, w, splits, 1, 1, 1, 8, ReduceOrder::ORDER_ONLY_VALUE);
    SyncPipes<HardEvent::V_S>();
    *mx = vec.GetValue(0);
    const float sinkLogit = t.hasSink ? gm.sink.GetValue(n) : NegInf<float>();
    if (sinkLogit > *mx) *mx = sinkLogit;
    float sum = 0.0f;
    Duplicate(acc, 0.0f, (int32_t)d);
    if (*mx != NegInf<float>()) {
        Adds(w, w, -*mx, (int32_t)splits);
        PipeBarrier<PIPE_V>();
        Exp(w, w, (int32_t)splits);
        SyncPipes<HardEvent::V_S>();
        for (uint32_t i = 0; i < splits; ++i) {
            const float wi = w.GetValue(i);
            sum += wi;
            if (wi == 0.0f) continue;
            LocalTensor<float> o = inQue.template AllocTensor<float>();
            DataCopy(o, gm.partO[(g * splits + i) * d], d);
            inQue.EnQue(o);
            o = inQue.template DeQue<float>();
            Muls(o, o, wi, (int32_t)d);
            PipeBarrier<PIPE_V>();
            Add(acc, acc, o, (int32_t)d);
            inQue.FreeTensor(o);
        }
        if (t.hasSink) {  // e^{sink - max}, after the splits
            Duplicate(vec, sinkLogit, 8);
            PipeBarrier<PIPE_V>();
            Adds(vec, vec, -*mx, 8);
            PipeBarrier<PIPE_V>();
            Exp(vec, vec, 8);
            SyncPipes<HardEvent::V_S>();
            sum += vec.GetValue(0);
        }
        PipeBarrier<PIPE_V>();
        Muls(acc, acc, 1.0f / sum, (int32_t)d);
    }
    inQue.FreeTensor(w);
    return sum;
}

template <class InQ, class OutQ>
__aicore__ inline void CombineSplits(const PasaTilingData& t, GM_ADDR workspace, GM_ADDR sink, GM_ADDR out, GM_ADDR lse,
                                     uint32_t aiv, InQ& inQue, OutQ& outQue, OutQ& lseQue,
                                     const LocalTensor<float>& acc, const LocalTensor<float>& vec) {
    CrossCoreSetFlag<0x0, PIPE_MTE3>(FLAG_AIV_DONE);
    CrossCoreWaitFlag(FLAG_AIV_DONE);
    const uint32_t d = t.headDim;
    CombineGm gm;
    if (t.hasSink) gm.sink.SetGlobalBuffer((__gm__ float*)sink);
    gm.partO.SetGlobalBuffer((__gm__ float*)(workspace + t.wsPartialOffset));
    gm.partLse.SetGlobalBuffer((__gm__ float*)(workspace + t.wsPartialLseOffset));
    gm.lse.SetGlobalBuffer((__gm__ float*)lse);
    gm.out.SetGlobalBuffer((__gm__ half*)out);
    uint64_t first, last;
    PasaCombineRange(t, aiv, &first, &last);
    for (uint64_t g = first; g < last; ++g) {
        const uint32_t s = g % t.seqQ, n = (g / t.seqQ) % t.numHeads, b = g / t.seqQ / t.numHeads;
        float mx;
        const float sum = WeighSplits(t, gm, g, n, inQue, acc, vec, &mx);
        PipeBarrier<PIPE_V>();
        LocalTensor<half> o16 = outQue.template AllocTensor<half>();
        Cast(o16, acc, RoundMode::CAST_RINT, d);
        outQue.EnQue(o16);
        LocalTensor<float> l = lseQue.template AllocTensor<float>();
        if (mx == NegInf<float>()) {
            Duplicate(l, NegInf<float>(), 8);
        } else {
            Duplicate(l, sum, 8);
            PipeBarrier<PIPE_V>();
            Ln(l, l, 8);
            PipeBarrier<PIPE_V>();
            Adds(l, l, mx, 8);
        }
        lseQue.EnQue(l);
        o16 = outQue.template DeQue<half>();
        DataCopy(gm.out[QOffset(t, b, n, s)], o16, d);
        outQue.FreeTensor(o16);
        l = lseQue.template DeQue<float>();
        DataCopyPad(gm.lse[g], l, DataCopyExtParams(1, 4, 0, 0, 0));
        lseQue.FreeTensor(l);
    }
}

}  // namespace pasa_kernel

#endif  // PASA_DECODE_COMBINE_H
