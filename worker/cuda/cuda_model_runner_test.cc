// The CUDA runner's load-time refusals, which come before any device work,
// so they run on every machine where the runner is built (no GPU needed):
// each unsupported model or flag is refused at LoadModel with one line
// naming it, and a machine without a device says so.

#include "worker/cuda/cuda_model_runner.h"

#include <cuda_runtime_api.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "absl/strings/str_cat.h"
#include "worker/cuda/cuda_support.h"

namespace pagoda::worker {
namespace {

using ::testing::HasSubstr;

// A model directory with only config.json: refusals come before weights.
std::string WriteConfig(const std::string& name, int hidden, int heads, int kv_heads,
                        const std::string& torch_dtype = "float32") {
  const std::filesystem::path dir = std::filesystem::temp_directory_path() /
                                    absl::StrCat("pagoda_cuda_runner_", name, "_", getpid());
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "config.json") << absl::StrCat(
      R"({"architectures": ["LlamaForCausalLM"], "vocab_size": 64, "hidden_size": )", hidden,
      R"(, "intermediate_size": 128, "num_hidden_layers": 1, "num_attention_heads": )", heads,
      R"(, "num_key_value_heads": )", kv_heads,
      R"(, "max_position_embeddings": 128, "torch_dtype": ")", torch_dtype, R"("})");
  return dir.string();
}

v1::LoadModelRequest Request(const std::string& dir) {
  v1::LoadModelRequest request;
  request.set_model_dir(dir);
  request.set_device("cuda");
  request.set_world_size(1);
  request.set_block_size(16);
  request.set_gpu_memory_utilization(0.9f);
  request.set_max_num_batched_tokens(256);
  request.set_max_num_seqs(8);
  return request;
}

absl::Status Load(const v1::LoadModelRequest& request) {
  return CreateCudaModelRunner(CudaRunnerOptions{})->LoadModel(request).status();
}

TEST(CudaModelRunnerTest, RefusesHeadSizesOtherThan64And128AtLoad) {
  const std::string dir = WriteConfig("h96", 384, 4, 4);  // head 96
  const absl::Status status = Load(Request(dir));
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(status.message(), "head size 96 is not supported on CUDA (supported: 64, 128)");
  std::filesystem::remove_all(dir);
}

TEST(CudaModelRunnerTest, RefusesBadRequestsNamingTheValue) {
  const std::string dir = WriteConfig("h64", 256, 4, 2);
  v1::LoadModelRequest request = Request(dir);
  request.set_block_size(8);
  EXPECT_THAT(Load(request).message(), HasSubstr("block size 8 is not supported on CUDA"));
  request = Request(dir);
  request.set_dtype("float32");
  EXPECT_THAT(Load(request).message(), HasSubstr("--dtype float32 is not supported on CUDA"));
  request = Request(dir);
  request.set_kv_cache_dtype("float32");
  EXPECT_EQ(Load(request).message(),
            "--kv-cache-dtype float32 is not supported on CUDA with --dtype bfloat16 (use auto)");
  request = Request(dir);
  request.set_max_num_seqs(kCudaMaxNumSeqs + 1);  // Past the attention kernels' grid.
  EXPECT_EQ(Load(request).message(), "max_num_seqs 65536 is not supported on CUDA (at most 65535)");
  request = Request(dir);
  request.set_draft_model_dir(dir);
  request.set_draft_tensor_parallel_size(3);  // Neither 1 nor the group's size.
  EXPECT_THAT(Load(request).message(), HasSubstr("draft_tensor_parallel_size"));
  request = Request(dir);
  request.set_gpu_memory_utilization(1.5f);
  EXPECT_EQ(Load(request).code(), absl::StatusCode::kInvalidArgument);
  request = Request(dir);
  request.set_device("cpu");
  EXPECT_EQ(Load(request).code(), absl::StatusCode::kInvalidArgument);
  std::filesystem::remove_all(dir);
}

// Appends `quantization_config` (a JSON object) to a written config.json.
void AddQuantizationConfig(const std::string& dir, const std::string& quantization_config) {
  std::ifstream in(dir + "/config.json");
  std::string config((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  config.pop_back();  // The closing brace.
  std::ofstream(dir + "/config.json")
      << config << R"(, "quantization_config": )" << quantization_config << "}";
}

// Quantized weights: the CUDA FP8 and int linears are built but have not run
// on a GPU, so an FP8, AWQ or int8 W8A8 checkpoint and online FP8 are
// refused at load, naming the format.
TEST(CudaModelRunnerTest, RefusesQuantizedWeightsUntilVerifiedOnAGpu) {
  const std::string dense = WriteConfig("fp8_online", 256, 4, 2);
  v1::LoadModelRequest request = Request(dense);
  request.set_quantization("fp8");
  const absl::Status online = Load(request);
  EXPECT_EQ(online.code(), absl::StatusCode::kUnimplemented);
  EXPECT_EQ(online.message(),
            "online fp8 FP8 E4M3 weights per tensor, FP8 inputs per token: served on --device cpu "
            "only so far (the CUDA quantized linears are built but have not run on a GPU yet)");

  const std::string checkpoint = WriteConfig("fp8_vllm", 256, 4, 2);
  AddQuantizationConfig(checkpoint, R"({"quant_method": "fp8", "activation_scheme": "dynamic"})");
  EXPECT_THAT(Load(Request(checkpoint)).message(), HasSubstr("served on --device cpu only so far"));
  const std::string awq = WriteConfig("awq", 256, 4, 2);
  AddQuantizationConfig(awq, R"({"quant_method": "awq", "bits": 4, "group_size": 128, )"
                             R"("zero_point": true, "version": "gemm"})");
  const absl::Status awq_status = Load(Request(awq));
  EXPECT_EQ(awq_status.code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(awq_status.message(),
              HasSubstr("awq int4 group 128: served on --device cpu only so far (the CUDA "
                        "quantized linears are built but have not run on a GPU yet)"));
  const std::string w8a8 = WriteConfig("w8a8", 256, 4, 2);
  AddQuantizationConfig(
      w8a8, R"({"quant_method": "compressed-tensors", "format": "int-quantized", )"
            R"("ignore": ["lm_head"], "config_groups": {"group_0": {"targets": ["Linear"], )"
            R"("weights": {"num_bits": 8, "type": "int", "symmetric": true, )"
            R"("strategy": "channel", "dynamic": false}, "input_activations": )"
            R"({"num_bits": 8, "type": "int", "symmetric": true, "dynamic": true, )"
            R"("strategy": "token"}}}})");
  EXPECT_THAT(Load(Request(w8a8)).message(),
              HasSubstr("compressed-tensors int8 weights per channel, int8 inputs per token: "
                        "served on --device cpu only so far"));
  std::filesystem::remove_all(dense);
  std::filesystem::remove_all(checkpoint);
  std::filesystem::remove_all(awq);
  std::filesystem::remove_all(w8a8);
}

v1::LoadModelRequest GroupRequest(const std::string& dir, int rank, int world) {
  v1::LoadModelRequest request = Request(dir);
  request.set_rank(rank);
  request.set_world_size(world);
  request.set_rendezvous_address("127.0.0.1:1");  // Nothing listens on port 1.
  request.set_rendezvous_secret("0123456789abcdef0123456789abcdef");
  request.set_rendezvous_prefix("cuda-group");
  request.set_collective_timeout_ms(2000);
  return request;
}

bool HasDevice() {
  int count = 0;
  const bool has = cudaGetDeviceCount(&count) == cudaSuccess && count > 0;
  cudaGetLastError();
  return has;
}

// The group fields go through the CPU runner's checks (ParseGroupMembership,
// then JoinGroup's split check), all before any device work.
TEST(CudaModelRunnerTest, RefusesBadGroupsBeforeTouchingTheDevice) {
  const std::string dir = WriteConfig("group", 256, 4, 2);
  v1::LoadModelRequest request = GroupRequest(dir, 2, 2);
  EXPECT_THAT(Load(request).message(), HasSubstr("rank 2 outside a tensor-parallel group of 2"));
  request = GroupRequest(dir, 0, 2);
  request.clear_rendezvous_address();
  EXPECT_THAT(Load(request).message(), HasSubstr("rendezvous_address"));
  request = GroupRequest(dir, 0, 2);
  request.clear_rendezvous_secret();
  EXPECT_EQ(Load(request).code(), absl::StatusCode::kInvalidArgument);
  request = GroupRequest(dir, 0, 2);
  request.set_collective_timeout_ms(-1);
  EXPECT_THAT(Load(request).message(), HasSubstr("collective_timeout_ms"));
  // 4 heads do not split over 3 ranks.
  const absl::Status split = Load(GroupRequest(dir, 1, 3));
  EXPECT_EQ(split.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(split.message(), HasSubstr("num_attention_heads (4)"));
  std::filesystem::remove_all(dir);
}

int DeviceCount() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) count = 0;
  cudaGetLastError();
  return count;
}

// A valid group reaches the device, then NCCL's unique-id relay: without a
// device the load says so; with one, the unreachable store fails the join
// within the collective timeout instead of hanging. Rank 0 runs on GPU 0,
// which every machine with a device has.
TEST(CudaModelRunnerTest, AValidGroupFailsAtTheDeviceOrTheStoreNotByHanging) {
  const std::string dir = WriteConfig("group_ok", 256, 4, 2);
  const absl::Status status = Load(GroupRequest(dir, 0, 2));
  if (HasDevice()) {
    EXPECT_TRUE(status.code() == absl::StatusCode::kUnavailable ||
                status.code() == absl::StatusCode::kDeadlineExceeded)
        << status;
  } else {
    EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition) << status;
    EXPECT_THAT(status.message(), HasSubstr("no usable CUDA device"));
  }
  std::filesystem::remove_all(dir);
}

// A rank whose GPU the machine lacks is a configuration error, named.
TEST(CudaModelRunnerTest, ARankPastTheVisibleGpusIsRefusedByName) {
  const int count = DeviceCount();
  if (count == 0) GTEST_SKIP() << "no device: AValidGroupFailsAtTheDeviceOrTheStore covers this";
  if (count >= 8) GTEST_SKIP() << "every rank of a group of 8 has a GPU here";
  const std::string dir = WriteConfig("group_past", 512, 8, 8);
  const absl::Status status = Load(GroupRequest(dir, count, 8));
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  EXPECT_THAT(status.message(), HasSubstr(absl::StrCat("CUDA device ", count, " does not exist")));
  std::filesystem::remove_all(dir);
}

TEST(CudaModelRunnerTest, RefusesAForeignDevice) {
  const std::string dir = WriteConfig("foreign", 256, 4, 2);
  v1::LoadModelRequest request = Request(dir);
  request = Request(dir);
  request.set_device("cpu");
  EXPECT_EQ(Load(request).code(), absl::StatusCode::kInvalidArgument);
  std::filesystem::remove_all(dir);
}

TEST(CudaModelRunnerTest, WithoutADeviceLoadSaysSo) {
  int count = 0;
  if (cudaGetDeviceCount(&count) == cudaSuccess && count > 0) {
    GTEST_SKIP() << "a device is present: the GPU tests cover loading";
  }
  cudaGetLastError();
  const std::string dir = WriteConfig("nodev", 256, 4, 2);
  const absl::Status status = Load(Request(dir));
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(status.message(), HasSubstr("no usable CUDA device"));
  // LoRA slots are served on CUDA now: such a load gets as far as the device.
  v1::LoadModelRequest lora = Request(dir);
  lora.set_max_loras(4);
  lora.set_max_lora_rank(16);
  EXPECT_EQ(Load(lora).code(), absl::StatusCode::kFailedPrecondition) << Load(lora);
  // So is an FP8 E4M3 KV cache (the server still refuses it on --device cuda).
  v1::LoadModelRequest fp8_kv = Request(dir);
  fp8_kv.set_kv_cache_dtype("fp8");
  EXPECT_EQ(Load(fp8_kv).code(), absl::StatusCode::kFailedPrecondition) << Load(fp8_kv);
  // So are a draft model and EAGLE heads (the server still refuses them on
  // CUDA until a GPU run has passed worker_cuda_draft_test).
  for (const bool eagle : {false, true}) {
    v1::LoadModelRequest draft = Request(dir);
    draft.set_draft_model_dir(dir);
    draft.set_draft_is_eagle_head(eagle);
    EXPECT_EQ(Load(draft).code(), absl::StatusCode::kFailedPrecondition) << Load(draft);
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace pagoda::worker
