#include "scheduler/config/server_config.h"

#include <functional>
#include <set>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/reflection.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "scheduler/config/server_flags.h"

namespace pagoda::scheduler {
namespace {

ServerConfig ValidConfig() {
  ServerConfig config;
  config.model.model_dir = "/nonexistent/model";
  return config;
}

ModelConfig SmallModel() {
  ModelConfig model;
  model.max_position_embeddings = 4096;
  model.num_attention_heads = 8;
  model.num_key_value_heads = 4;
  model.intermediate_size = 512;
  model.hidden_size = 256;
  model.vocab_size = 1000;
  return model;
}

struct BadValue {
  std::string flag;   // As the message names it, dashed.
  std::string value;  // As the message prints it.
  std::function<void(ServerConfig&)> set;
};

// One out-of-range value for every numeric field; each must be refused in
// one line naming the flag, the value and the allowed range.
std::vector<BadValue> BadValues() {
  return {
      {"port", "99999", [](ServerConfig& c) { c.front_door.port = 99999; }},
      {"port", "-1", [](ServerConfig& c) { c.front_door.port = -1; }},
      {"http-port", "65536", [](ServerConfig& c) { c.front_door.http_port = 65536; }},
      {"http-port", "-2", [](ServerConfig& c) { c.front_door.http_port = -2; }},
      {"metrics-port", "-7", [](ServerConfig& c) { c.front_door.metrics_port = -7; }},
      {"http-max-connections", "0", [](ServerConfig& c) { c.front_door.http_max_connections = 0; }},
      {"http-io-threads", "65", [](ServerConfig& c) { c.front_door.http_io_threads = 65; }},
      {"max-stream-queued-messages", "0",
       [](ServerConfig& c) { c.front_door.max_stream_queued_messages = 0; }},
      {"drain-timeout", "-1", [](ServerConfig& c) { c.front_door.drain_timeout = -1; }},
      {"max-model-len", "-3", [](ServerConfig& c) { c.model.max_model_len = -3; }},
      {"max-num-seqs", "-1", [](ServerConfig& c) { c.scheduling.max_num_seqs = -1; }},
      {"max-num-seqs", "2097152", [](ServerConfig& c) { c.scheduling.max_num_seqs = 1 << 21; }},
      {"max-num-batched-tokens", "2097152",
       [](ServerConfig& c) { c.scheduling.max_num_batched_tokens = 1 << 21; }},
      {"max-num-partial-prefills", "257",
       [](ServerConfig& c) { c.scheduling.max_num_partial_prefills = 257; }},
      {"max-long-partial-prefills", "0",
       [](ServerConfig& c) { c.scheduling.max_long_partial_prefills = 0; }},
      {"long-prefill-token-threshold", "-1",
       [](ServerConfig& c) { c.scheduling.long_prefill_token_threshold = -1; }},
      {"max-queued-requests", "0", [](ServerConfig& c) { c.scheduling.max_queued_requests = 0; }},
      {"block-size", "0", [](ServerConfig& c) { c.cache.block_size = 0; }},
      {"gpu-memory-utilization", "1.5",
       [](ServerConfig& c) { c.cache.gpu_memory_utilization = 1.5; }},
      {"num-gpu-blocks-override", "-1",
       [](ServerConfig& c) { c.cache.num_gpu_blocks_override = -1; }},
      {"cpu-kv-cache-space", "-1", [](ServerConfig& c) { c.cache.cpu_kv_cache_space_gib = -1; }},
      {"swap-space", "-0.5", [](ServerConfig& c) { c.cache.swap_space_gib = -0.5; }},
      {"tensor-parallel-size", "0", [](ServerConfig& c) { c.workers.tensor_parallel_size = 0; }},
      {"cpu-threads", "-1", [](ServerConfig& c) { c.workers.cpu_threads = -1; }},
      {"worker-restart-limit", "-1", [](ServerConfig& c) { c.workers.restart_limit = -1; }},
      {"worker-restart-window", "0", [](ServerConfig& c) { c.workers.restart_window = 0; }},
      {"worker-failure-exit-delay", "601",
       [](ServerConfig& c) { c.workers.failure_exit_delay = 601; }},
      {"worker-stall-timeout", "0.1", [](ServerConfig& c) { c.workers.stall_timeout = 0.1; }},
      {"worker-start-timeout", "0", [](ServerConfig& c) { c.workers.start_timeout = 0; }},
      {"collective-timeout", "0", [](ServerConfig& c) { c.workers.collective_timeout = 0; }},
      {"rendezvous-port", "70000", [](ServerConfig& c) { c.workers.rendezvous_port = 70000; }},
      {"kv-events-queue-batches", "0",
       [](ServerConfig& c) {
         c.kv_events.endpoint = "tcp://*:5557";
         c.kv_events.queue_batches = 0;
       }},
  };
}

TEST(ServerConfigTest, DefaultsPass) {
  EXPECT_TRUE(CheckServerConfig(ValidConfig()).ok()) << CheckServerConfig(ValidConfig());
}

TEST(ServerConfigTest, EveryOutOfRangeValueIsOneLineNamingFlagValueAndRange) {
  for (const BadValue& bad : BadValues()) {
    ServerConfig config = ValidConfig();
    bad.set(config);
    const absl::Status status = CheckServerConfig(config);
    ASSERT_FALSE(status.ok()) << bad.flag << " " << bad.value;
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
    const std::string message(status.message());
    EXPECT_TRUE(absl::StartsWith(message, "--" + bad.flag + " " + bad.value + " ")) << message;
    EXPECT_TRUE(absl::StrContains(message, "expected")) << message;
    EXPECT_FALSE(absl::StrContains(message, "\n")) << message;
  }
}

TEST(ServerConfigTest, SpecialPortValuesAreAccepted) {
  ServerConfig config = ValidConfig();
  config.front_door.port = 0;
  config.front_door.http_port = -1;
  config.front_door.metrics_port = -1;
  EXPECT_TRUE(CheckServerConfig(config).ok());
  config.front_door.http_port = 65535;
  config.front_door.metrics_port = 1;
  EXPECT_TRUE(CheckServerConfig(config).ok());
}

TEST(ServerConfigTest, CrossFlagRules) {
  ServerConfig config = ValidConfig();
  config.workers.addresses = {"a:1"};
  config.workers.tensor_parallel_size = 2;
  EXPECT_TRUE(absl::StrContains(CheckServerConfig(config).message(), "--worker-addresses has 1"));
  config = ValidConfig();
  config.workers.ssl_certfile = "cert.pem";
  EXPECT_TRUE(absl::StrContains(CheckServerConfig(config).message(), "--worker-ssl-*"));
  config = ValidConfig();
  config.kv_events.endpoint = "tcp://*:1";
  config.scheduling.enable_prefix_caching = false;
  EXPECT_TRUE(absl::StrContains(CheckServerConfig(config).message(), "need prefix caching"));
  config = ValidConfig();
  config.model.model_dir = "";
  EXPECT_EQ(CheckServerConfig(config).message(), "--model is required");
  // vLLM's --enable-auto-tool-choice needs a parser, as in vLLM.
  config = ValidConfig();
  config.model.enable_auto_tool_choice = true;
  EXPECT_EQ(CheckServerConfig(config).message(),
            "--enable-auto-tool-choice needs --tool-call-parser (hermes or llama3_json)");
  config.model.tool_call_parser = "llama3_json";
  EXPECT_TRUE(CheckServerConfig(config).ok());
  // vLLM's --enable-log-outputs needs --enable-log-requests, as in vLLM.
  config = ValidConfig();
  config.front_door.log_outputs = true;
  EXPECT_EQ(CheckServerConfig(config).message(),
            "--enable-log-outputs needs --enable-log-requests, as in vLLM");
  config.front_door.log_requests = true;
  EXPECT_TRUE(CheckServerConfig(config).ok());
  config.front_door.max_log_len = -2;
  EXPECT_EQ(CheckServerConfig(config).message(),
            "--max-log-len -2 is out of range: expected -1 to 16777216");
}

TEST(ServerConfigTest, QuantizationNamesAMethodPagodaServes) {
  ServerConfig config = ValidConfig();
  for (const char* name : {"", "auto", "awq", "gptq_marlin", "compressed-tensors", "fp8"}) {
    config.model.quantization = name;
    EXPECT_TRUE(CheckServerConfig(config).ok()) << name;
  }
  config.model.quantization = "bitsandbytes";
  EXPECT_EQ(CheckServerConfig(config).message(),
            "--quantization bitsandbytes: Pagoda serves auto, awq, awq_marlin, gptq, gptq_marlin, "
            "compressed-tensors and fp8");
  config = ValidConfig();
  for (const char* name : {"int8", "float32"}) {
    config.model.cpu_weight_only_activations = name;
    EXPECT_TRUE(CheckServerConfig(config).ok()) << name;
  }
  for (const char* name : {"", "fp32", "int4"}) {
    config.model.cpu_weight_only_activations = name;
    EXPECT_EQ(CheckServerConfig(config).message(),
              absl::StrCat("--cpu-weight-only-activations ", name, ": expected int8 or float32"));
  }
}

TEST(ServerConfigTest, ResolveForModelFillsDefaultsAndChecksTheModel) {
  ServerConfig config = ValidConfig();
  ASSERT_TRUE(ResolveForModel(SmallModel(), &config).ok());
  EXPECT_EQ(config.model.max_model_len, 4096);
  EXPECT_FALSE(config.model.max_model_len_given);
  EXPECT_EQ(config.scheduling.max_num_batched_tokens, 2048);

  config = ValidConfig();
  config.scheduling.enable_chunked_prefill = false;
  config.model.max_model_len = 3000;
  ASSERT_TRUE(ResolveForModel(SmallModel(), &config).ok());
  EXPECT_TRUE(config.model.max_model_len_given);
  EXPECT_EQ(config.scheduling.max_num_batched_tokens, 3000);

  config = ValidConfig();
  config.model.max_model_len = 5000;
  EXPECT_TRUE(absl::StrContains(ResolveForModel(SmallModel(), &config).message(),
                                "--max-model-len 5000 exceeds"));
  config = ValidConfig();
  config.workers.tensor_parallel_size = 3;  // 8 heads do not split over 3.
  EXPECT_FALSE(ResolveForModel(SmallModel(), &config).ok());
  // vLLM's vocabulary split: 12 heads and 768 channels split over 3 ranks,
  // 32000 tokens (padded to 32000) do not; 128256 do.
  ModelConfig twelve_heads = SmallModel();
  twelve_heads.num_attention_heads = twelve_heads.num_key_value_heads = 12;
  twelve_heads.hidden_size = 384;
  twelve_heads.intermediate_size = 768;
  twelve_heads.vocab_size = 32000;
  config = ValidConfig();
  config.workers.tensor_parallel_size = 3;
  EXPECT_EQ(ResolveForModel(twelve_heads, &config).message(),
            "cannot split the vocabulary over 3 tensor-parallel ranks: vocab_size 32000 (padded "
            "to 32000, a multiple of 64) is not divisible by 3");
  twelve_heads.vocab_size = 128256;
  config = ValidConfig();
  config.workers.tensor_parallel_size = 3;
  EXPECT_TRUE(ResolveForModel(twelve_heads, &config).ok());
  config = ValidConfig();
  config.scheduling.max_num_partial_prefills = 2;
  ASSERT_TRUE(ResolveForModel(SmallModel(), &config).ok());
  EXPECT_EQ(config.scheduling.long_prefill_token_threshold, 4096 * 4 / 100);
}

TEST(ServerConfigTest, ServedModelNameFallsBackToTheDirectory) {
  ModelOptions model;
  model.model_dir = "/models/llama-3/";
  EXPECT_EQ(ServedModelName(model), "llama-3");
  model.served_model_name = "chat";
  EXPECT_EQ(ServedModelName(model), "chat");
}

// The flags are the config's only source: what is set on the command line
// arrives in the config, parsed.
TEST(ServerFlagsTest, FlagsArriveInTheConfig) {
  absl::FlagSaver saver;
  for (const auto& [name, value] :
       std::vector<std::pair<std::string, std::string>>{{"model", "/m"},
                                                        {"max_num_seqs", "7"},
                                                        {"scheduling_policy", "priority"},
                                                        {"preemption_mode", "swap"},
                                                        {"worker_addresses", "a:1,b:2"},
                                                        {"tensor_parallel_size", "2"},
                                                        {"worker_secret_file", "/s"},
                                                        {"enable_prefix_caching", "false"}}) {
    std::string error;
    ASSERT_TRUE(absl::FindCommandLineFlag(name)->ParseFrom(value, &error)) << name << error;
  }
  absl::StatusOr<ServerConfig> config = ServerConfigFromFlags();
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->model.model_dir, "/m");
  EXPECT_EQ(config->scheduling.max_num_seqs, 7);
  EXPECT_EQ(config->scheduling.policy, SchedulingPolicy::kPriority);
  EXPECT_EQ(config->scheduling.preemption_mode, PreemptionMode::kSwap);
  EXPECT_EQ(config->workers.addresses, (std::vector<std::string>{"a:1", "b:2"}));
  EXPECT_FALSE(config->scheduling.enable_prefix_caching);
  EXPECT_EQ(config->front_door.metrics_host, config->front_door.host);
}

// The LoRA flags (docs/lora.md) arrive parsed and checked, and reach the
// workers' LoadModelRequest only with --enable-lora.
TEST(ServerFlagsTest, LoraFlagsArriveParsedAndChecked) {
  absl::FlagSaver saver;
  auto set = [](const std::string& name, const std::string& value) {
    std::string error;
    ASSERT_TRUE(absl::FindCommandLineFlag(name)->ParseFrom(value, &error)) << name << error;
  };
  set("model", "/m");
  set("enable_lora", "true");
  set("lora_modules", R"(sql=/a/sql {"name": "chat", "path": "/a/chat", "base_model_name": "b"})");
  set("max_loras", "3");
  set("max_lora_rank", "64");
  set("lora_dir", "/adapters");
  set("max_lora_trainable_tokens", "8");
  absl::StatusOr<ServerConfig> config = ServerConfigFromFlags();
  ASSERT_TRUE(config.ok()) << config.status();
  ASSERT_EQ(config->lora.modules.size(), 2u);
  EXPECT_EQ(config->lora.modules[1].base_model_name, "b");
  EXPECT_EQ(config->lora.max_cpu_loras, 3);  // Defaults to --max-loras.
  EXPECT_EQ(config->lora.lora_dir, "/adapters");
  EXPECT_EQ(config->lora.max_lora_trainable_tokens, 8);

  set("lora_modules", "sql=/a sql=/b");
  EXPECT_TRUE(absl::StrContains(ServerConfigFromFlags().status().message(), "sql"));
  set("lora_modules", "");
  set("max_lora_rank", "1024");
  EXPECT_TRUE(absl::StrContains(ServerConfigFromFlags().status().message(), "--max-lora-rank"));
  set("max_lora_rank", "16");
  set("enable_lora", "false");
  EXPECT_FALSE(ServerConfigFromFlags().ok());  // --lora-dir without --enable-lora.

  ServerConfig cuda = ValidConfig();
  cuda.lora.enable_lora = true;
  cuda.workers.device = "cuda";
  EXPECT_TRUE(absl::StrContains(CheckServerConfig(cuda).message(), "--device cpu only"));
}

// The CUDA worker's FP8 KV kernels have not run on a GPU yet: the server
// refuses them there, naming the flag's value and the device.
TEST(ServerConfigTest, Fp8KvCacheIsServedOnCpuOnlySoFar) {
  ServerConfig config = ValidConfig();
  config.model.kv_cache_dtype = "fp8";
  EXPECT_TRUE(CheckServerConfig(config).ok());
  config.workers.device = "cuda";
  EXPECT_EQ(CheckServerConfig(config).message(),
            "--kv-cache-dtype fp8 is served on --device cpu only so far, got --device cuda");
  config.model.kv_cache_dtype = "fp8_e5m2";
  EXPECT_FALSE(CheckServerConfig(config).ok());
  config.model.kv_cache_dtype = "bfloat16";
  EXPECT_TRUE(CheckServerConfig(config).ok());
}

// vLLM's --served-model-name A B: the words, the first reported; none: the
// directory's name.
TEST(ServerConfigTest, ServedModelNamesAreTheFlagsWordsOrTheDirectory) {
  ModelOptions model;
  model.model_dir = "/models/Llama-3/";
  EXPECT_EQ(ServedModelNames(model), (std::vector<std::string>{"Llama-3"}));
  model.served_model_name = "llama  llama-alias";
  EXPECT_EQ(ServedModelNames(model), (std::vector<std::string>{"llama", "llama-alias"}));
  EXPECT_EQ(ServedModelName(model), "llama");
}

// vLLM's `vllm serve MODEL`: the model directory as the one argument.
TEST(ServerFlagsTest, TheModelMayBeTheOneArgument) {
  absl::FlagSaver saver;
  absl::StatusOr<ServerConfig> config = ServerConfigFromFlags({"/models/tiny"});
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->model.model_dir, "/models/tiny");
  EXPECT_EQ(ServerConfigFromFlags({"/a", "/b"}).status().message(),
            "unexpected arguments: /a /b (one argument, the model directory, or none with "
            "--model DIR)");
  std::string error;
  ASSERT_TRUE(absl::FindCommandLineFlag("model")->ParseFrom("/m", &error));
  EXPECT_EQ(ServerConfigFromFlags({"/models/tiny"}).status().message(),
            "unexpected argument /models/tiny (the model is --model /m; a second model "
            "directory, or a word meant for a flag?)");
  EXPECT_EQ(ServerConfigFromFlags()->model.model_dir, "/m");
}

TEST(ServerFlagsTest, UnknownPolicyIsRefusedNamingTheFlag) {
  absl::FlagSaver saver;
  std::string error;
  ASSERT_TRUE(absl::FindCommandLineFlag("scheduling_policy")->ParseFrom("lifo", &error));
  EXPECT_TRUE(absl::StartsWith(ServerConfigFromFlags().status().message(),
                               "--scheduling-policy: expected fcfs or priority"));
}

TEST(ServerFlagsTest, SpeculativeConfigIsParsedAndCheckedAgainstTheTarget) {
  absl::FlagSaver saver;
  std::string error;
  ASSERT_TRUE(absl::FindCommandLineFlag("model")->ParseFrom("/m", &error));
  auto* flag = absl::FindCommandLineFlag("speculative_config");
  ASSERT_NE(flag, nullptr);
  ASSERT_TRUE(flag->ParseFrom(R"({"method": "ngram", "num_speculative_tokens": 4})", &error));
  absl::StatusOr<ServerConfig> config = ServerConfigFromFlags();
  ASSERT_TRUE(config.ok()) << config.status();
  ASSERT_TRUE(config->speculative.has_value());
  EXPECT_EQ(config->speculative->num_speculative_tokens, 4);
  // One line naming the problem: a bad key, then a method not run yet.
  ASSERT_TRUE(flag->ParseFrom(R"({"method": "ngram", "lookahead": 4})", &error));
  EXPECT_EQ(ServerConfigFromFlags().status().message(),
            "--speculative-config: unknown key \"lookahead\"");
  ASSERT_TRUE(flag->ParseFrom(R"({"model": "/m", "num_speculative_tokens": 2})", &error));
  config = ServerConfigFromFlags();
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->speculative->method, SpeculativeMethod::kDraftModel);
  // A draft model runs on the CPU at draft size 1 or the target's; unset,
  // the draft's size is the target's (as vLLM).
  ASSERT_TRUE(absl::FindCommandLineFlag("tensor_parallel_size")->ParseFrom("2", &error));
  config = ServerConfigFromFlags();
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(DraftTensorParallelSize(*config->speculative, 2), 2);
  ASSERT_TRUE(flag->ParseFrom(
      R"({"model": "/m", "num_speculative_tokens": 2, "draft_tensor_parallel_size": 1})", &error));
  EXPECT_TRUE(ServerConfigFromFlags().ok());
  // An EAGLE head too: unset, the target's size (as vLLM); 1 and the
  // target's accepted, another refused.
  ASSERT_TRUE(flag->ParseFrom(R"({"model": "/m/eagle-x", "num_speculative_tokens": 2})", &error));
  config = ServerConfigFromFlags();
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(DraftTensorParallelSize(*config->speculative, 2), 2);
  for (int size : {1, 2}) {
    ASSERT_TRUE(
        flag->ParseFrom(absl::StrCat(R"({"model": "/m/eagle-x", "num_speculative_tokens": 2, )",
                                     R"("draft_tensor_parallel_size": )", size, "}"),
                        &error));
    config = ServerConfigFromFlags();
    ASSERT_TRUE(config.ok()) << config.status();
    EXPECT_EQ(DraftTensorParallelSize(*config->speculative, 2), size);
  }
  ASSERT_TRUE(flag->ParseFrom(
      R"({"model": "/m/eagle-x", "num_speculative_tokens": 2, "draft_tensor_parallel_size": 3})",
      &error));
  EXPECT_EQ(ServerConfigFromFlags().status().message(),
            "--speculative-config: draft_tensor_parallel_size 3 must be 1 or the target's 2");
  ASSERT_TRUE(flag->ParseFrom(R"({"model": "/m", "num_speculative_tokens": 2})", &error));
  ASSERT_TRUE(absl::FindCommandLineFlag("tensor_parallel_size")->ParseFrom("1", &error));
  ASSERT_TRUE(absl::FindCommandLineFlag("device")->ParseFrom("cuda", &error));
  EXPECT_EQ(ServerConfigFromFlags().status().message(),
            "--speculative-config: a draft model runs on --device cpu only so far, got --device "
            "cuda");
  ASSERT_TRUE(absl::FindCommandLineFlag("device")->ParseFrom("cpu", &error));
  ASSERT_TRUE(flag->ParseFrom(R"({"model": "/m/eagle-x", "num_speculative_tokens": 2})", &error));
  config = ServerConfigFromFlags();
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->speculative->method, SpeculativeMethod::kEagle);
  ASSERT_TRUE(flag->ParseFrom(R"({"model": "/m/eagle3-x", "num_speculative_tokens": 2})", &error));
  config = ServerConfigFromFlags();
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->speculative->method, SpeculativeMethod::kEagle3);
  ASSERT_TRUE(flag->ParseFrom("", &error));
  config = ServerConfigFromFlags();
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_FALSE(config->speculative.has_value());
}

TEST(ServerFlagsTest, EveryServerFlagIsInExactlyOneHelpGroup) {
  std::multiset<std::string> grouped;
  for (const FlagGroup& group : ServerFlagGroups()) {
    EXPECT_FALSE(group.flags.empty()) << group.title;
    grouped.insert(group.flags.begin(), group.flags.end());
  }
  int defined = 0;
  for (const auto& [name, flag] : absl::GetAllFlags()) {
    if (!absl::StrContains(flag->Filename(), "scheduler/config/server_flags.cc")) continue;
    ++defined;
    EXPECT_EQ(grouped.count(std::string(name)), 1u) << name;
  }
  EXPECT_EQ(defined, static_cast<int>(grouped.size()));
  EXPECT_GE(defined, 60);
}

}  // namespace
}  // namespace pagoda::scheduler
