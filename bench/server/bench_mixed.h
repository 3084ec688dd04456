#ifndef PAGODA_BENCH_SERVER_BENCH_MIXED_H_
#define PAGODA_BENCH_SERVER_BENCH_MIXED_H_

#include "absl/flags/declare.h"
#include "pagoda/v1/generation.grpc.pb.h"

ABSL_DECLARE_FLAG(bool, mixed);

namespace pagoda::bench {

// Whether the --mixed-* flags are within their bounds (checked before
// connecting).
bool MixedFlagsInRange();

// pagoda-bench --mixed: --mixed-streams streams decode (each a --mixed-context
// token prompt, re-sent as it finishes) while a --mixed-long-prompt token
// prompt arrives every --mixed-long-every seconds, for --mixed-duration
// seconds. Prints TTFT and inter-token latency p50/p90/p99 per class and the
// output tokens/s, draws a progress bar on stderr and writes an SVG plot of
// the streams' inter-token latency over time to --mixed-plot. With
// --mixed-urgent-every, short requests of a better priority arrive too, and
// their TTFT is first taken on the idle server (class "urgent-idle"), so the
// cost of saturation to them reads from one run. Returns the process exit
// code.
int RunMixedBench(pagoda::v1::Generation::Stub& stub, const pagoda::v1::ModelInfo& info);

}  // namespace pagoda::bench

#endif  // PAGODA_BENCH_SERVER_BENCH_MIXED_H_
