#include "tests/integration/test_client.h"

#include <dirent.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/grpc_health.h"
#include "gtest/gtest.h"
#include "tests/integration/server_process.h"
#include "tests/support/tiny_model.h"

namespace pagoda::testing {

absl::Status MakeTinyModel(const std::string& dir, int seed, TinyTokenizer tokenizer) {
  return WriteTinyModel(
      dir, absl::StrCat("--vocab-size ", kTinyModelVocab,
                        " --hidden-size 64 --intermediate-size 128 --num-layers 2 --num-heads 4"
                        " --num-kv-heads 2 --dtype f32 --seed ",
                        seed, tokenizer == TinyTokenizer::kSentencePiece ? " --tokenizer" : "",
                        " --bos-id 1 --eos-id 2"));
}

std::vector<int32_t> TestPrompt(int length, int salt) {
  std::vector<int32_t> prompt;
  for (int i = 0; i < length; ++i)
    prompt.push_back(3 + (i * 11 + salt * 17) % (kTinyModelVocab - 3));
  return prompt;
}

pagoda::v1::GenerateRequest TokenRequest(const std::vector<int32_t>& prompt, int max_tokens,
                                         uint64_t seed) {
  pagoda::v1::GenerateRequest request;
  for (int32_t id : prompt) request.add_prompt_token_ids(id);
  request.mutable_stopping()->set_max_tokens(max_tokens);
  request.mutable_stopping()->set_ignore_eos(true);
  if (seed != 0) {
    request.mutable_sampling()->set_temperature(0.8f);
    request.mutable_sampling()->set_seed(seed);
  }
  return request;
}

UnaryOutcome Generate(pagoda::v1::Generation::Stub& stub,
                      const pagoda::v1::GenerateRequest& request) {
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(120));
  UnaryOutcome outcome;
  outcome.status = stub.Generate(&context, request, &outcome.response);
  return outcome;
}

pagoda::v1::ModelInfo InfoOf(pagoda::v1::Generation::Stub& stub) {
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  pagoda::v1::ModelInfo info;
  EXPECT_TRUE(stub.GetModelInfo(&context, pagoda::v1::GetModelInfoRequest(), &info).ok());
  return info;
}

StreamOutcome RunStream(pagoda::v1::Generation::Stub& stub,
                        const pagoda::v1::GenerateRequest& request, std::atomic<int>* received,
                        const std::vector<std::pair<std::string, std::string>>& metadata,
                        std::atomic<int>* started) {
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(90));
  for (const auto& [key, value] : metadata) context.AddMetadata(key, value);
  StreamOutcome outcome;
  auto reader = stub.GenerateStream(&context, request);
  pagoda::v1::GenerateResponse message;
  while (reader->Read(&message)) {
    ++outcome.messages;
    for (const auto& output : message.outputs()) {
      if (outcome.tokens.empty() && output.token_ids_size() > 0) {
        outcome.first_token_at = absl::Now();
        if (started != nullptr) ++*started;
      }
      outcome.tokens.insert(outcome.tokens.end(), output.token_ids().begin(),
                            output.token_ids().end());
      if (received != nullptr) *received += output.token_ids_size();
    }
  }
  outcome.status = reader->Finish();
  return outcome;
}

int HealthStatus(const std::shared_ptr<grpc::Channel>& channel) {
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  int serving_status = -1;
  return pagoda::CheckHealth(channel, context, &serving_status).ok() ? serving_status : -1;
}

bool WaitFor(const std::function<bool()>& done, absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (absl::Now() < deadline) {
    if (done()) return true;
    absl::SleepFor(absl::Milliseconds(2));
  }
  return done();
}

int HealthStatus(const std::string& address) {
  return HealthStatus(grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
}

std::vector<pid_t> ChildPids(pid_t parent) {
  std::vector<pid_t> children;
  DIR* proc = opendir("/proc");
  if (proc == nullptr) return children;
  while (dirent* entry = readdir(proc)) {
    pid_t pid = 0;
    if (!absl::SimpleAtoi(entry->d_name, &pid)) continue;
    std::ifstream stat(absl::StrCat("/proc/", pid, "/stat"));
    std::string line;
    if (!std::getline(stat, line)) continue;
    // "pid (comm) state ppid ...": comm may hold spaces, so parse after ')'.
    const size_t close = line.rfind(')');
    if (close == std::string::npos) continue;
    std::istringstream rest(line.substr(close + 1));
    std::string state;
    pid_t ppid = 0;
    rest >> state >> ppid;
    if (ppid == parent && state != "Z") children.push_back(pid);
  }
  closedir(proc);
  return children;
}

double MetricValue(int metrics_port, const std::string& name) {
  absl::StatusOr<std::string> page = HttpGet(metrics_port, "/metrics");
  if (!page.ok()) return -1;
  double total = -1;
  for (absl::string_view line : absl::StrSplit(*page, '\n')) {
    if (!absl::StartsWith(line, name + "{") && !absl::StartsWith(line, name + " ")) continue;
    double value = 0;
    if (absl::SimpleAtod(line.substr(line.rfind(' ') + 1), &value)) {
      total = std::max(total, 0.0) + value;
    }
  }
  return total;
}

double AcceptedRequests(int metrics_port, double finished_before) {
  // A labelled counter is absent (-1) until its first sample: 0 then.
  auto value = [metrics_port](const char* name) {
    return std::max(0.0, MetricValue(metrics_port, name));
  };
  return value("pagoda_num_requests_running") + value("pagoda_num_requests_waiting") +
         value("pagoda_request_success_total") - std::max(0.0, finished_before);
}

absl::Status MakeCertificates(const std::string& dir) {
  const std::string quiet = " 2>/dev/null";
  std::vector<std::string> commands = {
      absl::StrCat("openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=pagoda-test-ca",
                   " -keyout ", dir, "/ca.key -out ", dir, "/ca.pem", quiet),
      absl::StrCat("printf 'subjectAltName=IP:127.0.0.1,DNS:localhost,DNS:pagoda-worker\\n' > ",
                   dir, "/san.ext"),
  };
  commands.push_back(
      absl::StrCat("openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=rogue-ca -keyout ",
                   dir, "/rogue-ca.key -out ", dir, "/rogue-ca.pem", quiet));
  for (const char* name : {"server", "client", "rogue"}) {
    const std::string ca = std::string(name) == "rogue" ? "rogue-ca" : "ca";
    commands.push_back(absl::StrCat("openssl req -newkey rsa:2048 -nodes -subj /CN=", name,
                                    " -keyout ", dir, "/", name, ".key -out ", dir, "/", name,
                                    ".csr", quiet));
    commands.push_back(absl::StrCat("openssl x509 -req -days 2 -in ", dir, "/", name, ".csr -CA ",
                                    dir, "/", ca, ".pem -CAkey ", dir, "/", ca,
                                    ".key -CAcreateserial -out ", dir, "/", name, ".pem -extfile ",
                                    dir, "/san.ext", quiet));
  }
  for (const std::string& command : commands) {
    absl::StatusOr<std::string> ran = RunCommand(command);
    if (!ran.ok()) return ran.status();
  }
  return absl::OkStatus();
}

}  // namespace pagoda::testing
