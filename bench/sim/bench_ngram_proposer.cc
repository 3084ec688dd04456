// Prompt lookup's cost on the engine thread (issue 46): ProposeNgramDrafts
// per sequence per step at contexts of 256 to 32k tokens whose last token
// rarely occurred before (the common case: most positions cannot end a
// match), against the same lookup scanning one position at a time (the
// proposer before its blocked search), measured in the same run. Prints
// microseconds per proposal and the ratio; a step of batch B pays B of them.
//   build/bin/bench_ngram_proposer

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <random>
#include <vector>

#include "bench/common/bench_flags.h"
#include "scheduler/spec/ngram_proposer.h"

namespace pagoda::scheduler {
namespace {

// The earliest longest match, one position at a time.
std::vector<int32_t> ScanEveryPosition(const std::vector<int32_t>& tokens, const NgramLookup& lookup) {
  const int total = static_cast<int>(tokens.size());
  const int room = std::min(lookup.num_speculative_tokens, lookup.max_model_len - total);
  if (total < lookup.min_n || room <= 0) return {};
  int longest = 0, longest_end = -1;
  for (int end = 0; end + 1 < total; ++end) {
    int n = 0;
    const int bound = std::min(lookup.max_n, end + 1);
    while (n < bound && tokens[end - n] == tokens[total - 1 - n]) ++n;
    if (n > longest) {
      longest = n;
      longest_end = end;
      if (n == lookup.max_n) break;
    }
  }
  if (longest < lookup.min_n) return {};
  const int first = longest_end + 1;
  return std::vector<int32_t>(tokens.begin() + first,
                              tokens.begin() + first + std::min(room, total - first));
}

template <typename Propose>
double MicrosPerProposal(std::vector<int32_t>& tokens, Propose propose) {
  const int reps = 4000000 / static_cast<int>(tokens.size()) + 20;
  size_t drafts = 0;
  const auto start = std::chrono::steady_clock::now();
  for (int r = 0; r < reps; ++r) {
    tokens.back() = r % 32000;  // A different last token each step.
    drafts += propose(tokens).size();
  }
  const double us =
      std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count();
  if (drafts == static_cast<size_t>(-1)) std::printf("unreachable\n");  // Keeps the calls.
  return us / reps;
}

int Main() {
  const NgramLookup lookup{.min_n = 1, .max_n = 4, .num_speculative_tokens = 4,
                           .max_model_len = 1 << 20};
  std::printf("%8s %12s %12s %7s\n", "context", "blocked_us", "scan_us", "ratio");
  for (int context : {256, 1024, 8192, 32768}) {
    std::mt19937 rng(1);
    std::vector<int32_t> tokens(context);
    for (int32_t& t : tokens) t = static_cast<int32_t>(rng() % 32000);
    const double blocked = MicrosPerProposal(
        tokens, [&](const std::vector<int32_t>& t) { return ProposeNgramDrafts(t, lookup); });
    const double scan = MicrosPerProposal(
        tokens, [&](const std::vector<int32_t>& t) { return ScanEveryPosition(t, lookup); });
    std::printf("%8d %12.2f %12.2f %6.1fx\n", context, blocked, scan, scan / blocked);
  }
  return 0;
}

}  // namespace
}  // namespace pagoda::scheduler

int main(int argc, char** argv) {
  // No flags: --help, --version, and anything else refused.
  pagoda::bench::ParseBenchCommandLine(argc, argv,
                                       {"bench_ngram_proposer", "bench_ngram_proposer"});
  return pagoda::scheduler::Main();
}
