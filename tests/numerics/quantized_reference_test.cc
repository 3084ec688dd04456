// Quantized checkpoints (AWQ GEMM, GPTQ gptq/gptq_v2 with sym, asym and
// act-order, compressed-tensors pack-quantized W4A16/W8A16), made as the
// publishers' tools write them by tests/reference/make_quantized_model.py,
// run by the CPU worker's LlamaModel through a paged KV cache: its logits
// against the float64 reference of the exactly dequantized weights
// (tests/reference/quantized_reference.py, emulating the input quantization
// of W8A8, FP8 and the CPU's default int8 inputs of the weight-only formats;
// one weight-only case with f32 inputs, the exact numerics) and its greedy
// tokens equal to the reference's. Then each way a checkpoint can be wrong is refused at load
// with one line naming the tensor or setting.

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <numeric>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "worker/cache_engine.h"
#include "worker/communicator.h"
#include "worker/cpu/cpu_backend.h"
#include "worker/flat_batch.h"
#include "worker/llama_model.h"

namespace pagoda::worker {
namespace {

namespace fs = std::filesystem;
using pagoda::worker::v1::SequenceStep;
using pagoda::worker::v1::StepPlan;

std::string Env(const char* name, const std::string& fallback) {
  const char* value = std::getenv(name);
  return value != nullptr ? value : fallback;
}
std::string Python() { return Env("PAGODA_PYTHON3", "/usr/bin/python3"); }
std::string SourceDir() { return Env("PAGODA_SOURCE_DIR", "."); }

// Tiny model shapes every format packs: output and input features multiples
// of 8 (AWQ) and of the 32-input groups; two KV heads (GQA).
constexpr char kShapeFlags[] = "-- --intermediate-size 96 --num-kv-heads 2";
constexpr int kBlockSize = 4;
constexpr int kNumBlocks = 32;

std::string RunCommand(const std::string& command) {
  std::string output;
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return output;
  char buffer[4096];
  while (size_t n = fread(buffer, 1, sizeof(buffer), pipe)) output.append(buffer, n);
  EXPECT_EQ(pclose(pipe), 0) << command;
  return output;
}

struct Format {
  std::string name;
  std::string flags;
  std::string quantization = "";  // --quantization (online FP8).
  // Largest max|logit diff| / max|logit|. Formats that quantize inputs
  // (W8A8, FP8, and the weight-only ones with the CPU's default int8
  // inputs) see inputs that differ from the float64 reference's in their
  // last bits, so a value near a rounding boundary may take the other code
  // (one step: 1/254 of the group's range for int8); 1e-3 leaves room for a
  // few such (measured: 1e-7 to 2e-7, none took place). With f32 inputs
  // (the exact weight-only numerics, or FP8 weights alone) 1e-4.
  double tolerance = 1e-3;
  // The weight-only formats' inputs: int8 (the default) or float32
  // (--cpu-weight-only-activations, docs/quantization.md).
  std::string weight_only_activations = "int8";
};
void PrintTo(const Format& format, std::ostream* os) { *os << format.name; }

class TempDir {
 public:
  TempDir() {
    char pattern[] = "/tmp/pagoda_quantized_XXXXXX";
    path_ = mkdtemp(pattern);
  }
  ~TempDir() { fs::remove_all(path_); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

void MakeModel(const std::string& dir, const std::string& flags) {
  RunCommand(absl::StrCat(Python(), " ", SourceDir(), "/tests/reference/make_quantized_model.py",
                          " --out ", dir, " ", flags, " ", kShapeFlags));
}

// Runs `tokens` through the model in steps (the prompt at once, then one
// token a step) and returns the logits of every position, [tokens, vocab].
class PagedRun {
 public:
  PagedRun(LlamaModel* model, Backend* backend)
      : model_(model),
        backend_(backend),
        cache_(backend, model->CacheShape(kBlockSize, DType::kF32), kNumBlocks, 0) {}

  // Computes `tokens` after those already computed; returns their logits.
  std::vector<float> Step(const std::vector<int>& tokens) {
    StepPlan plan;
    SequenceStep* seq = plan.add_sequences();
    seq->set_seq_id(1);
    seq->set_start_position(computed_);
    for (int t : tokens) seq->add_token_ids(t);
    for (int b = kNumBlocks - 1; b >= 0; b -= 2) seq->add_block_table(b);  // Not contiguous.
    seq->set_do_sample(true);
    const int vocab = model_->config().vocab_size;
    auto batch = FlattenStepPlan(plan, BatchLimits{vocab, kBlockSize, kNumBlocks, 0});
    EXPECT_TRUE(batch.ok()) << batch.status();
    batch->logits_indices.resize(batch->num_tokens());
    std::iota(batch->logits_indices.begin(), batch->logits_indices.end(), 0);
    auto forward = model_->Forward(*batch, &cache_);
    EXPECT_TRUE(forward.ok()) << forward.status();
    std::vector<float> logits(tokens.size() * vocab);
    backend_->DownloadBytes(forward->logits.data, logits.data(), logits.size() * sizeof(float));
    computed_ += static_cast<int>(tokens.size());
    return logits;
  }

 private:
  LlamaModel* model_;
  Backend* backend_;
  CacheEngine cache_;
  int computed_ = 0;
};

int Argmax(const float* row, int vocab) {
  return static_cast<int>(std::max_element(row, row + vocab) - row);
}

class QuantizedReferenceTest : public ::testing::TestWithParam<Format> {};

TEST_P(QuantizedReferenceTest, LogitsAndGreedyTokensMatchDequantizedReference) {
  TempDir dir;
  const std::string model_dir = dir.path() + "/model";
  MakeModel(model_dir, GetParam().flags);
  const bool float32_inputs = GetParam().weight_only_activations == "float32";
  auto backend = CreateCpuBackend(
      2, float32_inputs ? WeightOnlyActivations::kFloat32 : WeightOnlyActivations::kInt8);
  auto communicator = CreateSingleRankCommunicator();
  LlamaLoadOptions options;
  options.quantization = GetParam().quantization;
  auto model = LlamaModel::Load(model_dir, backend.get(), communicator.get(), options);
  ASSERT_TRUE(model.ok()) << model.status();
  ASSERT_TRUE((*model)->quant_config().quantized());
  const std::string reference_flags =
      (GetParam().quantization.empty() ? "" : " --quantization " + GetParam().quantization) +
      " --cpu-weight-only-activations " + GetParam().weight_only_activations;
  const int vocab = (*model)->config().vocab_size;
  const std::vector<int> prompt = {5, 17, 200, 3, 99, 42, 7};
  constexpr int kNewTokens = 8;

  // Prefill logits of every prompt position against the reference's.
  PagedRun run(model->get(), backend.get());
  std::vector<float> logits = run.Step(prompt);
  const std::string out = dir.path() + "/reference.f64";
  RunCommand(absl::StrCat(
      Python(), " ", SourceDir(), "/tests/reference/quantized_reference.py logits --model ",
      model_dir, " --tokens ", absl::StrJoin(prompt, ","), " --out ", out, reference_flags));
  std::vector<double> reference(prompt.size() * vocab);
  std::ifstream(out, std::ios::binary)
      .read(reinterpret_cast<char*>(reference.data()), reference.size() * sizeof(double));
  double max_diff = 0.0, max_ref = 0.0;
  for (size_t k = 0; k < reference.size(); ++k) {
    max_diff = std::max(max_diff, std::abs(logits[k] - reference[k]));
    max_ref = std::max(max_ref, std::abs(reference[k]));
  }
  ASSERT_GT(max_ref, 0.0);
  EXPECT_LT(max_diff / max_ref, GetParam().tolerance)
      << GetParam().name << ": max |diff| " << max_diff;
  std::cout << GetParam().name << ": max |logit diff| / max |logit| " << max_diff / max_ref << "\n";

  // Greedy decode, one token a step through the cache.
  std::vector<int> generated = {Argmax(logits.data() + (prompt.size() - 1) * vocab, vocab)};
  while (static_cast<int>(generated.size()) < kNewTokens) {
    const std::vector<float> row = run.Step({generated.back()});
    generated.push_back(Argmax(row.data(), vocab));
  }
  const std::string expected = RunCommand(absl::StrCat(
      Python(), " ", SourceDir(), "/tests/reference/quantized_reference.py generate --model ",
      model_dir, " --tokens ", absl::StrJoin(prompt, ","), " --max-tokens ", kNewTokens,
      reference_flags));
  EXPECT_EQ(absl::StrJoin(generated, ","), std::string(absl::StripAsciiWhitespace(expected)))
      << GetParam().name;
}

INSTANTIATE_TEST_SUITE_P(
    Formats, QuantizedReferenceTest,
    testing::Values(
        Format{"awq_g32", "--format awq --group-size 32"},
        Format{"awq_per_channel", "--format awq --group-size -1"},
        Format{"gptq_int4_sym", "--format gptq --sym"},
        Format{"gptq_int4_asym_act_order", "--format gptq --desc-act"},
        Format{"gptq_int4_asym_v2", "--format gptq --v2 --group-size 16"},
        Format{"gptq_int8_asym", "--format gptq --bits 8"},
        Format{"gptq_int8_sym_v2_act_order", "--format gptq --bits 8 --sym --v2 --desc-act"},
        Format{"ct_w4a16_group", "--format ct"},
        Format{"ct_w4a16_act_order", "--format ct --desc-act"},
        Format{"ct_w8a16_channel", "--format ct --bits 8 --group-size -1"},
        // The exact weight-only numerics (f32 inputs).
        Format{"awq_g32_float32_inputs", "--format awq --group-size 32", "", 1e-4, "float32"},
        Format{"ct_w8a8_int8", "--format ct-w8a8"},
        Format{"ct_fp8_channel_dynamic", "--format ct-fp8"},
        Format{"ct_fp8_tensor_static_ignore",
               "--format ct-fp8 --weight-strategy tensor --activations static "
               "--ignore model.layers.1.mlp.down_proj"},
        Format{"ct_fp8_weight_only", "--format ct-fp8 --activations none", "", 1e-4},
        Format{"fp8_static", "--format fp8 --activations static"},
        Format{"fp8_dynamic", "--format fp8"}, Format{"online_fp8", "--format dense", "fp8"}),
    [](const testing::TestParamInfo<Format>& info) { return info.param.name; });

LlamaLoadOptions QuantizationOptions(const std::string& quantization) {
  LlamaLoadOptions options;
  options.quantization = quantization;
  return options;
}

// A checkpoint made with `flags`, config.json edited by `edit`, loaded with
// `quantization`: the load's error message.
// The checkpoint made with `flags` copied to `dest`: each is made once per
// process (the maker takes about half a second), each use edits its copy.
void CopyOfModel(const std::string& flags, const std::string& dest) {
  static TempDir made_dir;
  static std::map<std::string, std::string> made;
  auto [it, inserted] = made.try_emplace(flags, absl::StrCat(made_dir.path(), "/", made.size()));
  if (inserted) MakeModel(it->second, flags);
  fs::copy(it->second, dest, fs::copy_options::recursive);
}

std::string LoadError(const std::string& flags, void (*edit)(nlohmann::json&) = nullptr,
                      const std::string& quantization = "") {
  TempDir dir;
  const std::string model_dir = dir.path() + "/model";
  CopyOfModel(flags, model_dir);
  if (edit != nullptr) {
    nlohmann::json config;
    std::ifstream(model_dir + "/config.json") >> config;
    edit(config);
    std::ofstream(model_dir + "/config.json") << config.dump();
  }
  auto backend = CreateCpuBackend(1);
  auto communicator = CreateSingleRankCommunicator();
  auto model = LlamaModel::Load(model_dir, backend.get(), communicator.get(),
                                QuantizationOptions(quantization));
  EXPECT_FALSE(model.ok());
  return model.ok() ? "" : std::string(model.status().message());
}

TEST(QuantizedCheckpointErrors, EachIsRefusedNamingTheTensorOrSetting) {
  EXPECT_EQ(LoadError("--format awq --drop model.layers.1.mlp.up_proj.qzeros"),
            "weight \"model.layers.1.mlp.up_proj.qzeros\" not found in the model");
  EXPECT_EQ(LoadError("--format gptq --as-f32 model.layers.0.self_attn.o_proj.qweight"),
            "weight \"model.layers.0.self_attn.o_proj.qweight\" is F32, expected I32");
  EXPECT_EQ(LoadError("--format ct --drop model.layers.0.mlp.down_proj.weight_shape"),
            "weight \"model.layers.0.mlp.down_proj.weight_shape\" not found in the model");
  EXPECT_EQ(LoadError("--format gptq --desc-act --drop model.layers.0.self_attn.k_proj.g_idx"),
            "weight \"model.layers.0.self_attn.k_proj.g_idx\" not found in the model");
  // Scales of 16-input groups read as 32-input ones: the shape is wrong.
  EXPECT_EQ(LoadError("--format gptq --group-size 16",
                      [](nlohmann::json& c) { c["quantization_config"]["group_size"] = 32; }),
            "weight \"model.layers.0.self_attn.q_proj.scales\" has shape [4, 64], expected [2, "
            "64]");
  EXPECT_EQ(LoadError("--format awq",
                      [](nlohmann::json& c) { c["quantization_config"]["group_size"] = 48; }),
            "model.layers.0.self_attn.q_proj: group_size 48 does not divide its 64 input "
            "features");
  EXPECT_EQ(LoadError("--format awq",
                      [](nlohmann::json& c) { c["quantization_config"]["quant_method"] = "hqq"; }),
            "config.json quantization_config: unknown quant_method \"hqq\" (awq, gptq, "
            "compressed-tensors and fp8 are served)");
  EXPECT_EQ(
      LoadError("--format gptq", [](nlohmann::json& c) { c["quantization_config"]["bits"] = 3; }),
      "config.json quantization_config: bits 3 (4 and 8 are served)");
  EXPECT_EQ(LoadError("--format awq", nullptr, "gptq"),
            "--quantization gptq does not match the checkpoint's awq quantization");
}

TEST(QuantizedCheckpointErrors, W8A8AndFp8AreRefusedNamingTheTensorOrSetting) {
  EXPECT_EQ(LoadError("--format ct-fp8 --as-f32 model.layers.0.self_attn.q_proj.weight"),
            "weight \"model.layers.0.self_attn.q_proj.weight\" is F32, expected F8_E4M3");
  EXPECT_EQ(LoadError("--format ct-w8a8 --as-f32 model.layers.1.mlp.up_proj.weight"),
            "weight \"model.layers.1.mlp.up_proj.weight\" is F32, expected I8");
  EXPECT_EQ(LoadError("--format fp8 --drop model.layers.0.mlp.gate_proj.weight_scale"),
            "weight \"model.layers.0.mlp.gate_proj.weight_scale\" not found in the model");
  EXPECT_EQ(LoadError("--format fp8 --activations static --drop "
                      "model.layers.1.self_attn.o_proj.input_scale"),
            "weight \"model.layers.1.self_attn.o_proj.input_scale\" not found in the model");
  // Per-channel scales read as a per-tensor checkpoint's: the shape is wrong.
  EXPECT_EQ(
      LoadError("--format ct-fp8",
                [](nlohmann::json& c) {
                  c["quantization_config"]["config_groups"]["group_0"]["weights"]["strategy"] =
                      "tensor";
                }),
      "weight \"model.layers.0.self_attn.q_proj.weight_scale\" has shape [64, 1], "
      "expected [] or [1]");
  EXPECT_EQ(LoadError("--format fp8",
                      [](nlohmann::json& c) {
                        c["quantization_config"]["weight_block_size"] = {128, 128};
                      }),
            "config.json quantization_config: weight_block_size: block-quantized FP8 "
            "(weight_scale_inv) is not served");
  EXPECT_EQ(
      LoadError("--format ct-w8a8",
                [](nlohmann::json& c) {
                  auto& a =
                      c["quantization_config"]["config_groups"]["group_0"]["input_activations"];
                  a["dynamic"] = false;
                  a["strategy"] = "tensor";
                }),
      "config.json quantization_config: config_groups.group_0.input_activations: strategy "
      "\"tensor\" dynamic false (dynamic token is served)");
  EXPECT_EQ(LoadError("--format awq", nullptr, "fp8"),
            "--quantization fp8 does not match the checkpoint's awq quantization");
  EXPECT_EQ(LoadError("--format ct-fp8", nullptr, "fp8"),
            "--quantization fp8 does not match the checkpoint's compressed-tensors quantization");
}

// Older compressed-tensors exports name the one-byte formats naive-quantized
// (int or float by the weights' type), per group or for all, null in a group.
TEST(QuantizedCheckpointErrors, NaiveQuantizedLoadsAsItsWeightsType) {
  for (const char* flags : {"--format ct-w8a8", "--format ct-fp8"}) {
    TempDir dir;
    const std::string model_dir = dir.path() + "/model";
    CopyOfModel(flags, model_dir);
    nlohmann::json config;
    std::ifstream(model_dir + "/config.json") >> config;
    config["quantization_config"]["format"] = "naive-quantized";
    config["quantization_config"]["config_groups"]["group_0"]["format"] = nullptr;
    std::ofstream(model_dir + "/config.json") << config.dump();
    auto backend = CreateCpuBackend(1);
    auto communicator = CreateSingleRankCommunicator();
    auto model = LlamaModel::Load(model_dir, backend.get(), communicator.get());
    ASSERT_TRUE(model.ok()) << flags << ": " << model.status();
    EXPECT_EQ((*model)->quant_config().code_type,
              absl::StrContains(flags, "fp8") ? CodeType::kFloat8E4M3 : CodeType::kUnsignedInt);
  }
}

TEST(QuantizedCheckpointErrors, MatchingQuantizationFlagAndAliasesLoad) {
  TempDir dir;
  const std::string model_dir = dir.path() + "/model";
  MakeModel(model_dir, "--format gptq --sym");
  auto backend = CreateCpuBackend(1);
  auto communicator = CreateSingleRankCommunicator();
  for (const char* name : {"gptq", "gptq_marlin", "auto", ""}) {
    auto model =
        LlamaModel::Load(model_dir, backend.get(), communicator.get(), QuantizationOptions(name));
    EXPECT_TRUE(model.ok()) << name << ": " << model.status();
  }
  const std::string fp8_dir = dir.path() + "/fp8";
  MakeModel(fp8_dir, "--format fp8");
  for (const char* name : {"fp8", "auto"}) {
    auto model =
        LlamaModel::Load(fp8_dir, backend.get(), communicator.get(), QuantizationOptions(name));
    EXPECT_TRUE(model.ok()) << name << ": " << model.status();
  }
}

}  // namespace
}  // namespace pagoda::worker
