// Speculative decoding's draft_model method end to end (issue 46): a real
// pagoda-server and its pagoda-worker give the same tokens with a draft
// model as without, for 12 concurrent streams under preemption (a KV cache
// too small for all of them, recompute under the priority policy), with
// chunked prefill and prefix caching on (the server's defaults):
// - the target as its own draft, greedy: every draft is accepted (the
//   draft's KV cache follows the target's through preemption and prefix
//   cache hits);
// - a different, one-layer random model of the same vocabulary, half the
//   streams greedy and half seeded at temperature 1, and a SIGKILL of the
//   worker mid-run: the tokens are plain decoding's whatever the drafts;
// - at two tensor-parallel ranks (draft_tensor_parallel_size left out, as
//   a vLLM configuration would), the target as its draft sharded over both
//   (a draft model's default size is the target's), preempted by swapping
//   (both caches move): plain decoding's tokens, greedy and seeded; and the
//   same with a random EAGLE head (method eagle, inferred from the name as
//   vLLM does) sharded over both ranks too (a head's default size is the
//   target's, as vLLM's), each rank reading its own copy of the target's
//   hidden states, and with a random EAGLE-3 head (method eagle3) over the
//   target's aux layers' hidden states.
// And a draft of another vocabulary is refused at start, in one line, as
// is the rest of issue 46's bad input (an unknown method or key, k out of
// range, EAGLE heads that do not fit the target). EAGLE heads whose
// config.json says fewer positions than --max-model-len start and draft
// past them (vLLM's); a draft model of fewer positions starts too, each row
// drafting only while its proposals stay below them.
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <fstream>
#include <iostream>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/time.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "pagoda/v1/generation.grpc.pb.h"
#include "tests/integration/server_process.h"
#include "tests/integration/test_client.h"
#include "tests/support/tiny_model.h"

namespace pagoda::testing {
namespace {

using pagoda::v1::GenerateRequest;
using pagoda::v1::Generation;

constexpr int kStreams = 12;
constexpr int kMaxTokens = 40;
constexpr int kDrafts = 3;

class DraftModelTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new std::string(TempPath("pagoda_draft_model"));
    ASSERT_TRUE(MakeTinyModel(*dir_ + "/target", /*seed=*/11, TinyTokenizer::kNone).ok());
    // Another random model of the same vocabulary: one layer, narrower.
    ASSERT_TRUE(WriteTinyModel(*dir_ + "/small",
                               absl::StrCat("--vocab-size ", kTinyModelVocab,
                                            " --hidden-size 32 --intermediate-size 64 "
                                            "--num-layers 1 --num-heads 2 --num-kv-heads 1 "
                                            "--dtype f32 --seed 5"))
                    .ok());
    // An EAGLE head for the target (hidden 64): eagle_reference.py over a
    // one-layer Llama of its width.
    ASSERT_TRUE(WriteTinyModel(*dir_ + "/head_source",
                               absl::StrCat("--vocab-size ", kTinyModelVocab,
                                            " --hidden-size 64 --intermediate-size 96 "
                                            "--num-layers 1 --num-heads 2 --num-kv-heads 1 "
                                            "--dtype f32 --seed 3"))
                    .ok());
    const std::string make_head =
        absl::StrCat(PythonBinary(), " tests/reference/eagle_reference.py make --source ", *dir_,
                     "/head_source --out ", *dir_, "/eagle-head");
    ASSERT_EQ(std::system(make_head.c_str()), 0) << make_head;
    // An EAGLE-3 head for it (layer ids [1, 0, 1] of its 2, a 40-id draft
    // vocabulary): eagle3_reference.py over the same source.
    const std::string make_eagle3 = absl::StrCat(
        PythonBinary(), " tests/reference/eagle3_reference.py make --source ", *dir_,
        "/head_source --target-vocab ", kTinyModelVocab, " --out ", *dir_, "/eagle3-head");
    ASSERT_EQ(std::system(make_eagle3.c_str()), 0) << make_eagle3;
    ASSERT_TRUE(WriteTinyModel(*dir_ + "/other_vocab",
                               absl::StrCat("--vocab-size ", kTinyModelVocab + 8,
                                            " --hidden-size 32 --intermediate-size 64 "
                                            "--num-layers 1 --num-heads 2 --num-kv-heads 1 "
                                            "--dtype f32 --seed 5"))
                    .ok());
  }
  static void TearDownTestSuite() {
    std::filesystem::remove_all(*dir_);
    delete dir_;
  }

  // 40 blocks of 4 tokens hold about a third of the streams' 12 x 52
  // tokens: at one rank recompute under the priority policy, at two swap.
  static std::vector<std::string> ServerArgs(const std::string& draft, int world_size = 1) {
    std::vector<std::string> args = {absl::StrCat("--model=", *dir_, "/target"),
                                     absl::StrCat("--tensor-parallel-size=", world_size),
                                     "--max-model-len=128",
                                     "--block-size=4",
                                     "--num-gpu-blocks-override=40",
                                     "--cpu-threads=1",
                                     "--seed=5",
                                     "--port=0",
                                     "--metrics-port=-1"};
    if (world_size == 1) {
      args.push_back("--scheduling-policy=priority");
    } else {
      args.insert(args.end(), {"--preemption-mode=swap", "--swap-space=0.01"});
    }
    if (!draft.empty()) {
      // disable_by_batch_size above the streams, so all of them speculate.
      args.push_back(absl::StrCat(R"(--speculative-config={"model": ")", draft,
                                  R"(", "num_speculative_tokens": )", kDrafts,
                                  R"(, "disable_by_batch_size": 64})"));
    }
    return args;
  }

  // `extra` flags come last: a flag given twice takes its last value.
  static absl::StatusOr<std::unique_ptr<ServerProcess>> StartServer(
      const std::string& draft, int world_size = 1, const std::vector<std::string>& extra = {}) {
    std::vector<std::string> args = ServerArgs(draft, world_size);
    args.insert(args.end(), extra.begin(), extra.end());
    return ServerProcess::Start(PAGODA_SERVER_BINARY, args, absl::Seconds(60));
  }

  // Stream i: greedy, or seeded at temperature 1 when `seeded` and i is odd.
  static std::vector<GenerateRequest> Requests(bool seeded) {
    std::vector<GenerateRequest> requests;
    for (int i = 0; i < kStreams; ++i) {
      const bool sampled = seeded && i % 2 == 1;
      requests.push_back(TokenRequest(TestPrompt(3 + i % 9, i), kMaxTokens,
                                      sampled ? 1000 + static_cast<uint64_t>(i) : 0));
      if (sampled) requests.back().mutable_sampling()->set_temperature(1.0f);
      requests.back().set_priority(i % 3);
    }
    return requests;
  }

  static std::vector<StreamOutcome> RunAll(const ServerProcess& server, bool seeded,
                                           std::atomic<int>* received,
                                           std::atomic<int>* started = nullptr) {
    auto stub = Generation::NewStub(
        grpc::CreateChannel(server.address(), grpc::InsecureChannelCredentials()));
    const std::vector<GenerateRequest> requests = Requests(seeded);
    std::vector<StreamOutcome> outcomes(requests.size());
    std::vector<std::thread> threads;
    for (size_t i = 0; i < requests.size(); ++i) {
      threads.emplace_back(
          [&, i] { outcomes[i] = RunStream(*stub, requests[i], received, {}, started); });
    }
    for (std::thread& thread : threads) thread.join();
    return outcomes;
  }

  static void ExpectSameTokens(const std::vector<StreamOutcome>& outcomes,
                               const std::vector<StreamOutcome>& expected) {
    ASSERT_EQ(outcomes.size(), expected.size());
    for (size_t i = 0; i < outcomes.size(); ++i) {
      ASSERT_TRUE(outcomes[i].status.ok())
          << "stream " << i << ": " << outcomes[i].status.error_message();
      EXPECT_EQ(outcomes[i].tokens, expected[i].tokens) << "stream " << i;
    }
  }

  static std::string* dir_;
};

std::string* DraftModelTest::dir_ = nullptr;

TEST_F(DraftModelTest, SameTokensAsPlainDecodingUnderPreemption) {
  std::vector<StreamOutcome> expected;
  {
    auto plain = StartServer("");
    ASSERT_TRUE(plain.ok()) << plain.status();
    expected = RunAll(**plain, /*seeded=*/true, nullptr);
  }
  for (const StreamOutcome& outcome : expected) {
    ASSERT_TRUE(outcome.status.ok()) << outcome.status.error_message();
    ASSERT_EQ(outcome.tokens.size(), static_cast<size_t>(kMaxTokens));
  }

  {  // The target as its own draft, greedy streams: every draft accepted.
    auto server = StartServer(*dir_ + "/target");
    ASSERT_TRUE(server.ok()) << server.status();
    std::vector<StreamOutcome> outcomes = RunAll(**server, /*seeded=*/false, nullptr);
    for (int i = 0; i < kStreams; i += 2) {  // The greedy ones have plain tokens to compare.
      ASSERT_TRUE(outcomes[i].status.ok()) << outcomes[i].status.error_message();
      EXPECT_EQ(outcomes[i].tokens, expected[i].tokens) << "stream " << i;
    }
    const int port = (*server)->metrics_port();
    EXPECT_GT(MetricValue(port, "pagoda_num_preemptions_total"), 0) << "nothing was preempted";
    // A prompt that starts with an earlier one's: its blocks come from the
    // prefix cache, the draft's K/V in them included.
    auto stub = Generation::NewStub(
        grpc::CreateChannel((*server)->address(), grpc::InsecureChannelCredentials()));
    std::vector<int32_t> prompt = TestPrompt(16, 99);
    ASSERT_TRUE(Generate(*stub, TokenRequest(prompt, 8)).status.ok());
    const double hits = MetricValue(port, "pagoda_prefix_cache_hits_total");
    prompt.insert(prompt.end(), {7, 8, 9});
    ASSERT_TRUE(Generate(*stub, TokenRequest(prompt, 8)).status.ok());
    EXPECT_GE(MetricValue(port, "pagoda_prefix_cache_hits_total") - hits, 16);
    // A stream's final response may leave before its last step's counts
    // are published: read the three until they agree, with a deadline.
    double proposed = 0;
    double accepted = 0;
    double accepted_per_pos = 0;
    WaitFor(
        [&] {
          proposed = MetricValue(port, "vllm:spec_decode_num_draft_tokens_total");
          accepted = MetricValue(port, "vllm:spec_decode_num_accepted_tokens_total");
          accepted_per_pos =
              MetricValue(port, "vllm:spec_decode_num_accepted_tokens_per_pos_total");
          return accepted == proposed && accepted_per_pos == proposed;
        },
        absl::Seconds(10));
    EXPECT_GT(proposed, kStreams * kDrafts);
    EXPECT_EQ(accepted, proposed);
    EXPECT_EQ(accepted_per_pos, proposed);
  }

  // A small draft of its own, greedy and seeded streams, a worker killed.
  auto server = StartServer(*dir_ + "/small");
  ASSERT_TRUE(server.ok()) << server.status();
  std::atomic<int> received{0};
  std::vector<StreamOutcome> outcomes;
  std::atomic<int> started{0};
  std::thread clients([&] { outcomes = RunAll(**server, /*seeded=*/true, &received, &started); });
  const pid_t worker = (*server)->worker_pids().at(0);
  // Every stream running first (its first token in: accepted), then the
  // kill as soon as a third of the tokens are out. Counters the streams
  // keep themselves: on a fast machine the streams ran to their end within
  // the metrics scrapes an acceptance check took.
  ASSERT_TRUE(WaitFor([&] { return started.load() >= kStreams; }, absl::Seconds(60)));
  ASSERT_TRUE(
      WaitFor([&] { return received.load() >= kStreams * kMaxTokens / 3; }, absl::Seconds(60)));
  const bool killed = received.load() < kStreams * kMaxTokens && kill(worker, SIGKILL) == 0;
  clients.join();
  ASSERT_TRUE(killed) << "the streams ended before the kill";
  ExpectSameTokens(outcomes, expected);
  const int port = (*server)->metrics_port();
  EXPECT_EQ(MetricValue(port, "pagoda_worker_restarts_total"), 1);
  EXPECT_GT(MetricValue(port, "pagoda_num_preemptions_total"), 0) << "nothing was preempted";
  EXPECT_GT(MetricValue(port, "vllm:spec_decode_num_drafts_total"), 0);
  EXPECT_LE(MetricValue(port, "vllm:spec_decode_num_accepted_tokens_total"),
            MetricValue(port, "vllm:spec_decode_num_draft_tokens_total"));
}

TEST_F(DraftModelTest, AtTwoRanksAShardedDraftOrHeadKeepsPlainTokens) {
  std::vector<StreamOutcome> expected;
  {
    auto plain = StartServer("", /*world_size=*/2);
    ASSERT_TRUE(plain.ok()) << plain.status();
    expected = RunAll(**plain, /*seeded=*/true, nullptr);
  }
  {
    auto server = StartServer(*dir_ + "/target", /*world_size=*/2);
    ASSERT_TRUE(server.ok()) << server.status();
    ExpectSameTokens(RunAll(**server, /*seeded=*/true, nullptr), expected);
    const int port = (*server)->metrics_port();
    EXPECT_GT(MetricValue(port, "pagoda_num_preemptions_total"), 0) << "nothing was preempted";
    const double proposed = MetricValue(port, "vllm:spec_decode_num_draft_tokens_total");
    const double accepted = MetricValue(port, "vllm:spec_decode_num_accepted_tokens_total");
    // The greedy half accepts every draft of the target as its own draft,
    // sharded as the target is (the seeded half some).
    EXPECT_GT(accepted, proposed / 4) << accepted << " of " << proposed;
  }
  // An EAGLE head, then an EAGLE-3 head (methods inferred from the names).
  for (const char* head : {"/eagle-head", "/eagle3-head"}) {
    SCOPED_TRACE(head);
    auto eagle = StartServer(*dir_ + head, /*world_size=*/2);
    ASSERT_TRUE(eagle.ok()) << eagle.status();
    ExpectSameTokens(RunAll(**eagle, /*seeded=*/true, nullptr), expected);
    const int port = (*eagle)->metrics_port();
    EXPECT_GT(MetricValue(port, "pagoda_num_preemptions_total"), 0) << "nothing was preempted";
    EXPECT_GT(MetricValue(port, "vllm:spec_decode_num_draft_tokens_total"), kStreams * kDrafts);
  }
}

// pagoda-server's output when started with `speculative_config` (JSON),
// which must refuse it before any worker starts, exiting non-zero.
std::string RefusedAtStart(const std::vector<std::string>& args) {
  std::string command = PAGODA_SERVER_BINARY;
  for (const std::string& arg : args) absl::StrAppend(&command, " '", arg, "'");
  absl::StatusOr<std::string> output = RunCommand(absl::StrCat(command, " 2>&1; echo EXIT=$?"));
  EXPECT_TRUE(output.ok()) << output.status();
  if (!output.ok()) return "";
  EXPECT_FALSE(absl::StrContains(*output, "EXIT=0")) << *output;
  EXPECT_FALSE(absl::StrContains(*output, "PAGODA_WORKER_PIDS")) << "workers started";
  return *output;
}

TEST_F(DraftModelTest, DraftOfAnotherVocabularyIsRefusedAtStart) {
  const std::string output = RefusedAtStart(ServerArgs(*dir_ + "/other_vocab"));
  const std::string line =
      absl::StrCat("--speculative-config: the draft model's vocab_size ", kTinyModelVocab + 8,
                   " differs from the target's ", kTinyModelVocab);
  EXPECT_TRUE(absl::StrContains(output, line)) << output;
}

// Issue 46's bad input, each refused by pagoda-server at start in one line
// naming the problem: an unknown method or key, k out of range, an EAGLE
// head of another width, and an EAGLE-3 head whose draft vocabulary is
// larger than the target's (read from its config.json, not at load).
TEST_F(DraftModelTest, BadSpeculativeConfigsAreRefusedAtStartInOneLine) {
  auto with_config = [](const std::string& json) {
    std::vector<std::string> args = ServerArgs("");
    args.push_back("--speculative-config=" + json);
    return args;
  };
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {with_config(R"({"method": "medusa", "num_speculative_tokens": 2})"),
       "--speculative-config: unknown method \"medusa\" (ngram, draft_model, eagle or eagle3)"},
      {with_config(R"({"method": "ngram", "num_speculative_tokens": 2, "lookahead": 1})"),
       "--speculative-config: unknown key \"lookahead\""},
      {with_config(R"({"method": "ngram", "num_speculative_tokens": 17})"),
       "--speculative-config: num_speculative_tokens 17 must be in [1, 16]"},
      {with_config(R"({"method": "ngram", "num_speculative_tokens": 0})"),
       "--speculative-config: num_speculative_tokens 0 must be in [1, 16]"},
      // eagle_reference.py's head over the 32-wide model, for a 64-wide target.
      {ServerArgs(*dir_ + "/eagle-head-narrow"),
       "--speculative-config: the EAGLE head's hidden_size 32 differs from the target's 64"},
      {with_config(absl::StrCat(R"({"model": ")", *dir_,
                                R"(/eagle-head", "num_speculative_tokens": 2, "quantization": )",
                                R"("fp8"})")),
       "--speculative-config: quantization applies to method draft_model, not eagle"},
      {ServerArgs(*dir_ + "/eagle3-head-vocab"),
       absl::StrCat("--speculative-config: EAGLE-3 head: draft_vocab_size ", kTinyModelVocab + 1,
                    " exceeds vocab_size ", kTinyModelVocab)},
  };
  // A copy of the EAGLE-3 head claiming one more draft id than the target has.
  std::filesystem::copy(
      *dir_ + "/eagle3-head", *dir_ + "/eagle3-head-vocab",
      std::filesystem::copy_options::recursive | std::filesystem::copy_options::overwrite_existing);
  std::ifstream in(*dir_ + "/eagle3-head/config.json");
  nlohmann::json config = nlohmann::json::parse(in);
  ASSERT_EQ(config["draft_vocab_size"], 40);
  config["draft_vocab_size"] = kTinyModelVocab + 1;
  std::ofstream(*dir_ + "/eagle3-head-vocab/config.json") << config.dump();
  const std::string make_narrow =
      absl::StrCat(PythonBinary(), " tests/reference/eagle_reference.py make --source ", *dir_,
                   "/small --out ", *dir_, "/eagle-head-narrow");
  ASSERT_EQ(std::system(make_narrow.c_str()), 0) << make_narrow;
  for (const auto& [args, line] : cases) {
    const std::string output = RefusedAtStart(args);
    // The line names the problem and stands alone.
    EXPECT_TRUE(absl::StrContains(output, line + "\n")) << line << "\n" << output;
  }
}

// vLLM's quantization key on a dense draft model: "fp8" quantizes it at
// load, and the target's tokens stay plain decoding's, greedy and seeded,
// with drafts accepted (an FP8 copy of a draft still agrees with it).
TEST_F(DraftModelTest, AnFp8DraftKeepsPlainTokens) {
  std::vector<StreamOutcome> expected;
  {
    auto plain = StartServer("");
    ASSERT_TRUE(plain.ok()) << plain.status();
    expected = RunAll(**plain, /*seeded=*/true, nullptr);
  }
  auto config = [&](const char* quantization) {
    return absl::StrCat(R"(--speculative-config={"model": ")", *dir_, R"(/small", )",
                        R"("num_speculative_tokens": )", kDrafts,
                        R"(, "disable_by_batch_size": 64, "quantization": ")", quantization,
                        R"("})");
  };
  auto server = StartServer(*dir_ + "/small", 1, {config("fp8")});
  ASSERT_TRUE(server.ok()) << server.status();
  ExpectSameTokens(RunAll(**server, /*seeded=*/true, nullptr), expected);
  const int port = (*server)->metrics_port();
  EXPECT_GT(MetricValue(port, "vllm:spec_decode_num_accepted_tokens_total"), 0);
  // A method the draft's checkpoint is not in: the workers' load fails (as
  // for the target's --quantization), and the server exits naming the key.
  std::vector<std::string> args = ServerArgs(*dir_ + "/small");
  args.push_back(config("awq"));
  std::string command = PAGODA_SERVER_BINARY;
  for (const std::string& arg : args) absl::StrAppend(&command, " '", arg, "'");
  absl::StatusOr<std::string> output = RunCommand(absl::StrCat(command, " 2>&1; echo EXIT=$?"));
  ASSERT_TRUE(output.ok()) << output.status();
  EXPECT_FALSE(absl::StrContains(*output, "EXIT=0")) << *output;
  EXPECT_TRUE(absl::StrContains(*output,
                                "draft model: --speculative-config quantization awq does not "
                                "match the checkpoint's none quantization"))
      << *output;
}

// A copy of the model or head directory `from` at `to`, its config.json
// with `patch` merged in.
std::string PatchedCopy(const std::string& from, const std::string& to,
                        const nlohmann::json& patch) {
  std::filesystem::copy(
      from, to,
      std::filesystem::copy_options::recursive | std::filesystem::copy_options::overwrite_existing);
  std::ifstream in(from + "/config.json");
  nlohmann::json config = nlohmann::json::parse(in);
  config.merge_patch(patch);
  std::ofstream(to + "/config.json") << config.dump();
  return to;
}

// An EAGLE and an EAGLE-3 head whose config.json says 16 positions, under
// --max-model-len 128 (the streams reach position 50): the server starts,
// as vLLM does (it raises an eagle or eagle3 head's max_position_embeddings
// to the target's max_model_len), and the head drafts past its own 16
// positions with plain decoding's tokens, greedy and seeded (a draft
// model's are not raised: DraftModelOfFewerPositionsDraftsBelowThemPerRow).
TEST_F(DraftModelTest, HeadsOfFewerPositionsStartAndDraftPastThem) {
  std::vector<StreamOutcome> expected;
  {
    auto plain = StartServer("");
    ASSERT_TRUE(plain.ok()) << plain.status();
    expected = RunAll(**plain, /*seeded=*/true, nullptr);
  }
  const nlohmann::json short_positions = {{"max_position_embeddings", 16}};
  for (const char* head : {"/eagle-head", "/eagle3-head"}) {
    SCOPED_TRACE(head);
    auto server = StartServer(
        PatchedCopy(*dir_ + head, absl::StrCat(*dir_, head, "-short"), short_positions));
    ASSERT_TRUE(server.ok()) << server.status();
    ExpectSameTokens(RunAll(**server, /*seeded=*/true, nullptr), expected);
    EXPECT_GT(MetricValue((*server)->metrics_port(), "vllm:spec_decode_num_draft_tokens_total"),
              kStreams * kDrafts);
  }
}

// Two greedy streams at once: a long one whose prompt of 14 tokens leaves no
// room for k = 3 proposals below a draft model's 16 positions (it never
// drafts), and a short one (prompt 4) that starts once the long one runs.
// Both run well past position 16. `overlapped`: the short one ended before
// the long one, so every step of the short one had the long one beside it.
// The long one's 480 steps of a tiny model take well under a second: a
// loaded machine can start the short one after them (it did after 90).
struct LongThenShort {
  std::vector<StreamOutcome> outcomes;
  bool overlapped = false;
};
// The server flags RunLongThenShort needs: 14 + 480 and 4 + 40 tokens fit
// --max-model-len 512 and 160 blocks of 4.
std::vector<std::string> LongThenShortFlags() {
  return {"--max-model-len=512", "--num-gpu-blocks-override=160"};
}
LongThenShort RunLongThenShort(const ServerProcess& server) {
  constexpr int kLongTokens = 480;
  auto stub = Generation::NewStub(
      grpc::CreateChannel(server.address(), grpc::InsecureChannelCredentials()));
  LongThenShort run;
  run.outcomes.resize(2);
  std::atomic<int> long_received{0};
  std::thread long_stream([&] {
    run.outcomes[0] =
        RunStream(*stub, TokenRequest(TestPrompt(14, 1), kLongTokens), &long_received);
  });
  EXPECT_TRUE(WaitFor([&] { return long_received.load() >= 1; }, absl::Seconds(60)));
  run.outcomes[1] = RunStream(*stub, TokenRequest(TestPrompt(4, 2), kMaxTokens));
  run.overlapped = long_received.load() < kLongTokens;
  long_stream.join();
  return run;
}

// The counters after one overlapped RunLongThenShort: only the short row
// drafts, k each time (all or nothing). It decodes from length 5 (prompt and
// first token); each drafting step adds its accepted drafts and one token.
// It drafts at every length up to 13 it stands at, so it stops after
// reaching 14, and at most at 13 + 3 + 1.
void ExpectOnlyTheShortRowDrafted(int port) {
  const double drafts = MetricValue(port, "vllm:spec_decode_num_drafts_total");
  const double accepted = MetricValue(port, "vllm:spec_decode_num_accepted_tokens_total");
  EXPECT_GT(drafts, 0);
  EXPECT_EQ(MetricValue(port, "vllm:spec_decode_num_draft_tokens_total"), kDrafts * drafts);
  const double length_after_drafting = 5 + drafts + accepted;
  EXPECT_GE(length_after_drafting, 14);
  EXPECT_LE(length_after_drafting, 13 + kDrafts + 1);
}

// RunLongThenShort on the servers `start` starts: `check_tokens` gets its
// outcomes, and only the short row drafts. A run whose streams did not
// overlap runs again on a fresh server, so that the counters are one short
// stream's.
void ExpectOnlyTheShortRowDraftsOn(
    const std::function<absl::StatusOr<std::unique_ptr<ServerProcess>>()>& start,
    const std::function<void(const std::vector<StreamOutcome>&)>& check_tokens) {
  for (int attempt = 1; attempt <= 3; ++attempt) {
    auto server = start();
    ASSERT_TRUE(server.ok()) << server.status();
    const LongThenShort run = RunLongThenShort(**server);
    check_tokens(run.outcomes);
    if (run.overlapped) {
      ExpectOnlyTheShortRowDrafted((*server)->metrics_port());
      return;
    }
    std::cout << "run " << attempt << ": the long stream ended before the short one\n";
  }
  ADD_FAILURE() << "in 3 runs the long stream ended before the short one";
}

// A draft model of 16 positions under --max-model-len 512 starts, as vLLM's
// (its max_model_len becomes 16): a row drafts while its k = 3 proposals
// after `length` tokens stay below position 16 (length <= 13), and from then
// on verifies none, while a row near the limit in the same batch never
// stops the other from drafting. Both streams give plain decoding's tokens.
TEST_F(DraftModelTest, DraftModelOfFewerPositionsDraftsBelowThemPerRow) {
  std::vector<StreamOutcome> expected;
  {
    auto plain = StartServer("", 1, LongThenShortFlags());
    ASSERT_TRUE(plain.ok()) << plain.status();
    expected = RunLongThenShort(**plain).outcomes;
  }
  const nlohmann::json short_positions = {{"max_position_embeddings", 16}};
  const std::string draft = PatchedCopy(*dir_ + "/small", *dir_ + "/small-short", short_positions);
  ExpectOnlyTheShortRowDraftsOn(
      [&] { return StartServer(draft, 1, LongThenShortFlags()); },
      [&](const std::vector<StreamOutcome>& outcomes) { ExpectSameTokens(outcomes, expected); });
}

// vLLM's max_model_len key gives the proposer 16 positions as a draft
// model's config.json of 16 did above, for a draft model of the target's
// positions and for an EAGLE head (whose own are raised to the target's).
TEST_F(DraftModelTest, MaxModelLenKeyBoundsDraftingAsFewerPositionsDo) {
  std::vector<StreamOutcome> expected;
  {
    auto plain = StartServer("", 1, LongThenShortFlags());
    ASSERT_TRUE(plain.ok()) << plain.status();
    expected = RunLongThenShort(**plain).outcomes;
  }
  for (const char* proposer : {"/small", "/eagle-head"}) {
    SCOPED_TRACE(proposer);
    std::vector<std::string> flags = LongThenShortFlags();
    flags.push_back(absl::StrCat(R"(--speculative-config={"model": ")", *dir_, proposer,
                                 R"(", "num_speculative_tokens": )", kDrafts,
                                 R"(, "disable_by_batch_size": 64, "max_model_len": 16})"));
    ExpectOnlyTheShortRowDraftsOn(
        [&] { return StartServer(*dir_ + proposer, 1, flags); },
        [&](const std::vector<StreamOutcome>& outcomes) { ExpectSameTokens(outcomes, expected); });
  }
}

}  // namespace
}  // namespace pagoda::testing
