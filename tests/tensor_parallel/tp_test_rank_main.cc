// One rank of the tensor-parallel model tests, run as its own process: joins
// its TCP group through the test's rendezvous store (world size 1 needs
// none), loads its shard of the model, runs a fixed teacher-forced scenario
// (a batched prefill of two prompts, then decode steps with fixed tokens, so
// every rank is fed the same tokens without sampling) and writes
//   <out>.logits   rank 0 only: f32 logits of every step's sampled rows
//   <out>.txt      "key value" lines: rss_before_kb, rss_joined_kb,
//                  hwm_joined_kb, rss_after_kb, hwm_kb (VmRSS / VmHWM of
//                  /proc/self/status before joining the group, after joining
//                  it and after the load), weight_bytes, bytes_per_block.
// Usage: tp_test_rank --model DIR --rank R --world N [--rendezvous IP:PORT
//        --prefix P, secret in $PAGODA_TEST_RENDEZVOUS_SECRET] [--dtype auto]
//        [--cpu_weight_only_activations int8|float32]
//        --out PATH
// Exits 0 on success, 1 with the reason on stderr.

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/status/status.h"
#include "common/dtype.h"
#include "worker/cache_engine.h"
#include "worker/comm/rank_group_for_test.h"
#include "worker/cpu/cpu_backend.h"
#include "worker/flat_batch.h"
#include "worker/llama_model.h"
#include "worker/tensor_parallel_group.h"

ABSL_FLAG(std::string, model, "", "Model directory.");
ABSL_FLAG(int, rank, 0, "This rank.");
ABSL_FLAG(int, world, 1, "Ranks in the group.");
ABSL_FLAG(std::string, rendezvous, "", "IPv4:port of the rendezvous store.");
ABSL_FLAG(std::string, prefix, "", "Key prefix of this group.");
ABSL_FLAG(std::string, dtype, "auto", "Weight dtype.");
ABSL_FLAG(std::string, cpu_weight_only_activations, "int8",
          "Weight-only quantized Linears' inputs: int8 or float32.");
ABSL_FLAG(std::string, out, "", "Output path prefix.");

namespace pagoda::worker {
namespace {

constexpr int kBlockSize = 4;
constexpr int kNumBlocks = 32;

// A field of /proc/self/status in kB ("VmRSS", "VmHWM").
long StatusKb(const std::string& field) {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind(field + ":", 0) == 0) return std::stol(line.substr(field.size() + 1));
  }
  return -1;
}

v1::StepPlan Step(int step_id, const std::vector<std::vector<int>>& tokens,
                  const std::vector<int>& starts) {
  v1::StepPlan plan;
  plan.set_step_id(step_id);
  for (size_t s = 0; s < tokens.size(); ++s) {
    v1::SequenceStep* seq = plan.add_sequences();
    seq->set_seq_id(static_cast<int64_t>(s));
    seq->set_start_position(starts[s]);
    for (int t : tokens[s]) seq->add_token_ids(t);
    // Sequence s owns blocks 3 + 8s, 2 + 8s, ... (not contiguous, not in order).
    for (int b = 0; b < 4; ++b) seq->add_block_table(8 * static_cast<int>(s) + (3 + 5 * b) % 8);
    seq->set_do_sample(true);
  }
  return plan;
}

absl::Status Run() {
  v1::LoadModelRequest request;
  request.set_rank(absl::GetFlag(FLAGS_rank));
  request.set_world_size(absl::GetFlag(FLAGS_world));
  request.set_rendezvous_address(absl::GetFlag(FLAGS_rendezvous));
  // The secret comes through the environment, as argv is world-readable.
  const char* secret = std::getenv(worker::comm::kTestRendezvousSecretEnv);
  request.set_rendezvous_secret(secret != nullptr ? secret : "");
  request.set_rendezvous_prefix(absl::GetFlag(FLAGS_prefix));
  auto membership = ParseGroupMembership(request);
  if (!membership.ok()) return membership.status();
  auto weight_dtype = ParseDTypeFlag(absl::GetFlag(FLAGS_dtype));
  if (!weight_dtype.ok()) return weight_dtype.status();

  const long rss_before = StatusKb("VmRSS");
  // One thread: the test runs several ranks on few CPUs.
  auto backend = CreateCpuBackend(1, absl::GetFlag(FLAGS_cpu_weight_only_activations) == "float32"
                                         ? WeightOnlyActivations::kFloat32
                                         : WeightOnlyActivations::kInt8);
  auto communicator =
      JoinGroup(*membership, absl::GetFlag(FLAGS_model), TcpTransport("127.0.0.1"));
  if (!communicator.ok()) return communicator.status();
  const long rss_joined = StatusKb("VmRSS");
  const long hwm_joined = StatusKb("VmHWM");
  auto model =
      LlamaModel::Load(absl::GetFlag(FLAGS_model), backend.get(), communicator->get(),
                       LlamaLoadOptions{.weight_dtype = *weight_dtype, .block_size = kBlockSize});
  if (!model.ok()) return model.status();
  const long rss_after = StatusKb("VmRSS");
  const long hwm = StatusKb("VmHWM");

  const int vocab = (*model)->config().vocab_size;
  const KvCacheShape shape = (*model)->CacheShape(kBlockSize, DType::kF32);
  CacheEngine cache(backend.get(), shape, kNumBlocks, 0);
  // Teacher forcing: prompts of 9 and 6 tokens, then 3 decode steps.
  std::vector<std::vector<int>> prompts = {{5, 17, 3, 9, 21, 2, 14, 8, 11}, {7, 1, 30, 4, 19, 6}};
  std::vector<v1::StepPlan> plans = {Step(0, prompts, {0, 0})};
  for (int d = 0; d < 3; ++d) {
    plans.push_back(Step(1 + d, {{(13 + 5 * d) % vocab}, {(23 + 7 * d) % vocab}}, {9 + d, 6 + d}));
  }
  std::vector<float> all_logits;
  for (const v1::StepPlan& plan : plans) {
    auto batch = FlattenStepPlan(plan, BatchLimits{vocab, kBlockSize, kNumBlocks, 0});
    if (!batch.ok()) return batch.status();
    auto forward = (*model)->Forward(*batch, &cache);
    if (!forward.ok()) return forward.status();
    const Tensor& logits = forward->logits;
    if (membership->rank != 0) {
      if (logits.dim(0) != 0) return absl::InternalError("a rank other than 0 made logits");
      continue;
    }
    const size_t offset = all_logits.size();
    all_logits.resize(offset + static_cast<size_t>(logits.num_elements()));
    backend->DownloadBytes(logits.data, all_logits.data() + offset,
                           static_cast<size_t>(logits.num_elements()) * sizeof(float));
  }

  const std::string out = absl::GetFlag(FLAGS_out);
  if (membership->rank == 0) {
    std::ofstream file(out + ".logits", std::ios::binary);
    file.write(reinterpret_cast<const char*>(all_logits.data()),
               static_cast<std::streamsize>(all_logits.size() * sizeof(float)));
  }
  std::ofstream text(out + ".txt");
  text << "rss_before_kb " << rss_before << "\nrss_joined_kb " << rss_joined << "\nhwm_joined_kb "
       << hwm_joined << "\nrss_after_kb " << rss_after << "\nhwm_kb " << hwm << "\nweight_bytes "
       << (*model)->weight_bytes() << "\nbytes_per_block " << shape.bytes_per_block() << "\n";
  return text.good() ? absl::OkStatus() : absl::InternalError("cannot write " + out + ".txt");
}

}  // namespace
}  // namespace pagoda::worker

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  absl::Status status = pagoda::worker::Run();
  if (!status.ok()) {
    std::cerr << "tp_test_rank " << absl::GetFlag(FLAGS_rank) << ": " << status << "\n";
    return 1;
  }
  return 0;
}
