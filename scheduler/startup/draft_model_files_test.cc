// The draft model's files against the target's at start: the same
// vocabulary size in config.json and, when both ship one, in the tokenizer;
// positions reaching --max-model-len; a split over the draft's
// tensor-parallel size; an unreadable draft named as such.
// Each refusal is one line naming both values. An EAGLE head: the target's
// hidden and vocabulary sizes (its positions raised to --max-model-len, not
// refused), and an fc of [hidden, 2 * hidden]; an EAGLE-3
// head: its fc, its own keys (as the worker checks them at load) and its
// draft vocabulary: size, lm_head, d2t and split over the draft's ranks.
#include "scheduler/startup/draft_model_files.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/support/tiny_model.h"

namespace pagoda::scheduler {
namespace {

class DraftModelFilesTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    small_ = new std::string(pagoda::testing::TempPath("pagoda_draft_files_256"));
    large_ = new std::string(pagoda::testing::TempPath("pagoda_draft_files_300"));
    auto small = pagoda::testing::MakeTinyTokenizer(*small_, 256);
    auto large = pagoda::testing::MakeTinyTokenizer(*large_, 300);
    ASSERT_TRUE(small.ok() && large.ok());
    small_tokenizer_ = small->release();
  }
  static void TearDownTestSuite() {
    std::filesystem::remove_all(*small_);
    std::filesystem::remove_all(*large_);
    delete small_;
    delete large_;
    delete small_tokenizer_;
  }

  static SpeculativeConfig Draft(const std::string& dir) {
    SpeculativeConfig config;
    config.method = SpeculativeMethod::kDraftModel;
    config.model = dir;
    config.num_speculative_tokens = 4;
    return config;
  }

  static std::string Refusal(const std::string& draft, const std::string& target, int max_len,
                             const Tokenizer* tokenizer) {
    absl::StatusOr<ModelConfig> config = LoadModelConfig(target);
    EXPECT_TRUE(config.ok()) << config.status();
    SpeculativeConfig speculative = Draft(draft);
    absl::Status status = CheckDraftModelFiles(&speculative, *config, max_len, tokenizer);
    if (status.ok()) return "OK";
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
    return std::string(status.message());
  }

  static std::string* small_;
  static std::string* large_;
  static Tokenizer* small_tokenizer_;
};

std::string* DraftModelFilesTest::small_ = nullptr;
std::string* DraftModelFilesTest::large_ = nullptr;
Tokenizer* DraftModelFilesTest::small_tokenizer_ = nullptr;

TEST_F(DraftModelFilesTest, AcceptsADraftOfTheSameVocabulary) {
  EXPECT_EQ(Refusal(*small_, *small_, 64, small_tokenizer_), "OK");
  EXPECT_EQ(Refusal(*small_, *small_, 64, nullptr), "OK");  // No target tokenizer to compare.
  SpeculativeConfig ngram;
  ngram.model = "/nowhere";
  EXPECT_TRUE(CheckDraftModelFiles(&ngram, ModelConfig(), 64, nullptr).ok()) << "not a draft";
  EXPECT_FALSE(ngram.draft_max_len.has_value());
}

TEST_F(DraftModelFilesTest, RefusesInOneLineNamingBothValues) {
  EXPECT_EQ(Refusal(*large_, *small_, 64, small_tokenizer_),
            "--speculative-config: the draft model's vocab_size 300 differs from the target's 256");
  // Same config vocabulary, other tokenizer: the target's is the small one.
  EXPECT_EQ(Refusal(*large_, *large_, 64, small_tokenizer_),
            "--speculative-config: the draft model's tokenizer has 300 tokens, the target's 256");
  // Sharded at the target's tensor-parallel size, it must split as a target
  // would (two heads: over two ranks, not four).
  const ModelConfig target = *LoadModelConfig(*small_);
  SpeculativeConfig draft = Draft(*small_);
  EXPECT_TRUE(CheckDraftModelFiles(&draft, target, 64, nullptr, 2).ok());
  EXPECT_EQ(CheckDraftModelFiles(&draft, target, 64, nullptr, 4).message(),
            "--speculative-config: draft model: cannot split the model over 4 tensor-parallel "
            "ranks: num_attention_heads (2) is not divisible by 4");
  const std::string missing = Refusal(*small_ + "/nothing", *small_, 64, nullptr);
  EXPECT_EQ(missing.rfind("--speculative-config: draft model: ", 0), 0u) << missing;
  EXPECT_EQ(missing.find('\n'), std::string::npos) << missing;
}

// vLLM's draft max_model_len: the draft's positions, at most the target's.
TEST_F(DraftModelFilesTest, StartsADraftOfFewerPositions) {
  const ModelConfig target = *LoadModelConfig(*small_);
  const int positions = target.max_position_embeddings;
  for (const auto& [max_len, expected] :
       {std::pair{positions + 1, positions}, std::pair{8 * positions, positions},
        std::pair{positions, positions}, std::pair{positions - 1, positions - 1}}) {
    SpeculativeConfig draft = Draft(*small_);
    EXPECT_TRUE(CheckDraftModelFiles(&draft, target, max_len, small_tokenizer_).ok()) << max_len;
    EXPECT_EQ(draft.draft_max_len, expected) << max_len;
  }
}

// vLLM's max_model_len key: the draft's max_model_len when it is within the
// draft's positions and --max-model-len, refused in one line otherwise.
TEST_F(DraftModelFilesTest, MaxModelLenKeyBoundsTheDraft) {
  const ModelConfig target = *LoadModelConfig(*small_);
  const int positions = target.max_position_embeddings;
  SpeculativeConfig draft = Draft(*small_);
  draft.max_model_len = 16;
  EXPECT_TRUE(CheckDraftModelFiles(&draft, target, positions, small_tokenizer_).ok());
  EXPECT_EQ(draft.draft_max_len, 16);
  draft.max_model_len = positions + 1;
  EXPECT_EQ(CheckDraftModelFiles(&draft, target, 8 * positions, small_tokenizer_).message(),
            absl::StrCat("--speculative-config: max_model_len ", positions + 1,
                         " is above the draft model's max_position_embeddings ", positions));
  draft.max_model_len = 17;
  EXPECT_EQ(CheckDraftModelFiles(&draft, target, 16, small_tokenizer_).message(),
            "--speculative-config: max_model_len 17 is above --max-model-len 16");
}

TEST_F(DraftModelFilesTest, ChecksAnEagleHeadsSizesAndFc) {
  const std::string heads = pagoda::testing::TempPath("pagoda_draft_files_eagle");
  const std::string command =
      absl::StrCat(pagoda::testing::PythonBinary(), " tests/reference/eagle_reference.py variants",
                   " --source ", *small_, " --vocab-source ", *large_, " --out ", heads);
  ASSERT_EQ(std::system(command.c_str()), 0) << command;
  const ModelConfig target = *LoadModelConfig(*small_);
  auto refusal = [&](const std::string& name, int max_len, int draft_size = 1) -> std::string {
    SpeculativeConfig eagle = Draft(heads + "/" + name + "/model");
    eagle.method = SpeculativeMethod::kEagle;
    absl::Status status =
        CheckDraftModelFiles(&eagle, target, max_len, small_tokenizer_, draft_size);
    return status.ok() ? "OK" : std::string(status.message());
  };
  const int hidden = target.hidden_size;
  EXPECT_EQ(refusal("good", 64), "OK");
  // Sharded at the target's size, its layer must split as a draft's.
  EXPECT_EQ(refusal("good", 64, 2), "OK");
  EXPECT_EQ(refusal("good", 64, 4),
            "--speculative-config: EAGLE head: cannot split the model over 4 tensor-parallel "
            "ranks: num_attention_heads (2) is not divisible by 4");
  EXPECT_EQ(refusal("no_fc", 64),
            "--speculative-config: the EAGLE head has no fc.weight (an EAGLE-1/2 head: "
            "fc.weight, layers.0.*)");
  EXPECT_EQ(refusal("fc_shape", 64),
            absl::StrCat("--speculative-config: the EAGLE head's fc.weight is [", hidden, ", ",
                         hidden, "], expected [", hidden, ", ", 2 * hidden, "]"));
  EXPECT_EQ(refusal("other_vocab", 64),
            "--speculative-config: the EAGLE head's vocab_size 300 differs from the target's 256");
  // Fewer positions than --max-model-len: raised to it, as vLLM does, not
  // lowered (a draft model's are: StartsADraftOfFewerPositions).
  const int positions = LoadModelConfig(heads + "/good/model")->max_position_embeddings;
  EXPECT_EQ(refusal("good", positions + 1), "OK");
  EXPECT_EQ(refusal("good", 64 * positions), "OK");
  // vLLM's max_model_len key: any length up to --max-model-len, then the
  // head's bound; none without it.
  SpeculativeConfig keyed = Draft(heads + "/good/model");
  keyed.method = SpeculativeMethod::kEagle;
  EXPECT_TRUE(CheckDraftModelFiles(&keyed, target, 64, small_tokenizer_).ok());
  EXPECT_FALSE(keyed.draft_max_len.has_value());
  keyed.max_model_len = 4 * positions;
  EXPECT_TRUE(CheckDraftModelFiles(&keyed, target, 4 * positions, small_tokenizer_).ok());
  EXPECT_EQ(keyed.draft_max_len, 4 * positions);
  EXPECT_EQ(CheckDraftModelFiles(&keyed, target, 64, small_tokenizer_).message(),
            absl::StrCat("--speculative-config: max_model_len ", 4 * positions,
                         " is above --max-model-len 64"));
  std::filesystem::remove_all(heads);
}

// The variants' heads name layers 0 and 1 of the target (and the default
// ids, of a 2-layer target, do not fit it).
ModelConfig TwoLayerTarget(const std::string& dir) {
  ModelConfig target = *LoadModelConfig(dir);
  target.num_hidden_layers = 2;
  return target;
}

std::string Eagle3Refusal(const std::string& head, const ModelConfig& target,
                          int draft_tensor_parallel_size = 1) {
  SpeculativeConfig eagle3;
  eagle3.method = SpeculativeMethod::kEagle3;
  eagle3.model = head;
  eagle3.num_speculative_tokens = 4;
  absl::Status status =
      CheckDraftModelFiles(&eagle3, target, 64, nullptr, draft_tensor_parallel_size);
  if (status.ok()) return "OK";
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  return std::string(status.message());
}

TEST_F(DraftModelFilesTest, ChecksAnEagle3HeadsFcAndDraftVocabularyTensors) {
  const std::string heads = pagoda::testing::TempPath("pagoda_draft_files_eagle3");
  const std::string command =
      absl::StrCat(pagoda::testing::PythonBinary(), " tests/reference/eagle3_reference.py variants",
                   " --source ", *small_, " --target-vocab 256 --out ", heads);
  ASSERT_EQ(std::system(command.c_str()), 0) << command;
  const ModelConfig target = TwoLayerTarget(*small_);
  auto refusal = [&](const std::string& name) {
    return Eagle3Refusal(heads + "/" + name + "/model", target);
  };
  const int hidden = target.hidden_size;
  EXPECT_EQ(refusal("good"), "OK");
  EXPECT_EQ(refusal("two_layers"), "OK");
  EXPECT_EQ(refusal("no_aux"), "OK");  // No fc: use_aux_hidden_state false.
  EXPECT_EQ(refusal("fc_shape"),
            absl::StrCat("--speculative-config: the EAGLE head's fc.weight is [", hidden, ", ",
                         2 * hidden, "], expected [", hidden, ", ", 3 * hidden, "]"));
  EXPECT_EQ(refusal("no_fc"),
            "--speculative-config: the EAGLE head has no fc.weight (an EAGLE-3 head: fc.weight, "
            "midlayer.*, norm.weight, lm_head.weight, optionally d2t)");
  EXPECT_EQ(refusal("no_d2t"), "OK");  // Draft id d is target id d, as in vLLM.
  // What the worker refuses at load is refused at start, in its words.
  EXPECT_TRUE(absl::StartsWith(refusal("d2t_range"),
                               "--speculative-config: EAGLE-3 head: d2t maps draft id 39 to "))
      << refusal("d2t_range");
  EXPECT_EQ(refusal("default_layers"),
            "--speculative-config: EAGLE-3 head: eagle_aux_hidden_state_layer_ids [2, 1, -1] are "
            "not all layers of the target's 2");
  // The same head as the target's own 1-layer model would name layer 1 of 1.
  EXPECT_EQ(Eagle3Refusal(heads + "/good/model", *LoadModelConfig(*small_)),
            "--speculative-config: EAGLE-3 head: eagle_aux_hidden_state_layer_ids [1, 0, 1] are "
            "not all layers of the target's 1");
  std::filesystem::remove_all(heads);
}

// A copy of the EAGLE-3 head `good` whose config.json has `patch` merged in.
std::string PatchedHead(const std::string& good, const std::string& out,
                        const nlohmann::json& patch) {
  std::filesystem::create_directories(out);
  std::filesystem::copy(
      good, out,
      std::filesystem::copy_options::recursive | std::filesystem::copy_options::overwrite_existing);
  std::ifstream in(good + "/config.json");
  nlohmann::json config = nlohmann::json::parse(in);
  config.merge_patch(patch);
  std::ofstream(out + "/config.json") << config.dump();
  return out;
}

// An EAGLE-3 head's draft vocabulary (draft_vocab_size, its lm_head and its
// split) and target_hidden_size, refused at start in one line each.
TEST_F(DraftModelFilesTest, ChecksAnEagle3HeadsDraftVocabularyAtStart) {
  const std::string dir = pagoda::testing::TempPath("pagoda_draft_files_eagle3_vocab");
  const std::string good = dir + "/good";
  const std::string command =
      absl::StrCat(pagoda::testing::PythonBinary(), " tests/reference/eagle3_reference.py make",
                   " --source ", *small_, " --target-vocab 256 --out ", good);
  ASSERT_EQ(std::system(command.c_str()), 0) << command;
  const ModelConfig target = TwoLayerTarget(*small_);
  const int hidden = target.hidden_size;
  auto refusal = [&](const std::string& name, const nlohmann::json& patch, int size = 1) {
    return Eagle3Refusal(PatchedHead(good, dir + "/" + name, patch), target, size);
  };
  // 40 draft ids: padded to 64, split over 2 ranks.
  EXPECT_EQ(Eagle3Refusal(good, target), "OK");
  EXPECT_EQ(Eagle3Refusal(good, target, 2), "OK");
  // A head of 8 positions under --max-model-len 64: raised, not refused.
  EXPECT_EQ(
      Eagle3Refusal(PatchedHead(good, dir + "/short", {{"max_position_embeddings", 8}}), target),
      "OK");
  EXPECT_EQ(refusal("over", {{"draft_vocab_size", 300}}),
            "--speculative-config: EAGLE-3 head: draft_vocab_size 300 exceeds vocab_size 256");
  EXPECT_EQ(refusal("lm_head", {{"draft_vocab_size", 48}}),
            absl::StrCat("--speculative-config: the EAGLE-3 head's lm_head.weight is [40, ", hidden,
                         "], expected [48, ", hidden, "] ([draft_vocab_size, hidden_size])"));
  // Absent: the whole vocabulary, which its lm_head does not span.
  EXPECT_EQ(refusal("absent", {{"draft_vocab_size", nullptr}}),
            absl::StrCat("--speculative-config: the EAGLE-3 head's lm_head.weight is [40, ", hidden,
                         "], expected [256, ", hidden, "] ([draft_vocab_size, hidden_size])"));
  EXPECT_EQ(refusal("zero", {{"draft_vocab_size", 0}}),
            "--speculative-config: EAGLE-3 head: draft_vocab_size 0 is out of range");
  EXPECT_EQ(refusal("text", {{"draft_vocab_size", "40"}}),
            "--speculative-config: EAGLE-3 head: draft_vocab_size is not an integer");
  EXPECT_EQ(refusal("target_hidden", {{"target_hidden_size", 2 * hidden}}),
            absl::StrCat("--speculative-config: EAGLE-3 head: target_hidden_size ", 2 * hidden,
                         " differs from the target's hidden_size ", hidden));
  // Over three ranks: a head and target of 384 ids (padded to 384) and six
  // heads split, but 40 draft ids pad to 64, which 3 does not divide (vLLM's
  // ParallelLMHead over draft_vocab_size asserts the same at load).
  ModelConfig wide = target;
  wide.vocab_size = 384;
  const nlohmann::json six_heads = {{"vocab_size", 384},
                                    {"num_attention_heads", 6},
                                    {"num_key_value_heads", 6},
                                    {"head_dim", 8},
                                    {"intermediate_size", 96}};
  const std::string split = PatchedHead(good, dir + "/split", six_heads);
  EXPECT_EQ(Eagle3Refusal(split, wide, 1), "OK");  // Whole on one rank.
  EXPECT_EQ(Eagle3Refusal(split, wide, 3),
            "--speculative-config: EAGLE-3 head: cannot split the vocabulary over 3 "
            "tensor-parallel ranks: draft_vocab_size 40 (padded to 64, a multiple of 64) is not "
            "divisible by 3");
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace pagoda::scheduler
