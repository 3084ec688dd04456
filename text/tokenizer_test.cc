#include "text/tokenizer.h"

#include <cstdlib>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_join.h"
#include "gtest/gtest.h"
#include "pagoda/v1/generation.pb.h"
#include "tests/support/safetensors_writer.h"
#include "text/sentencepiece_adapter.h"
#include "text/sentencepiece_decode_table.h"

namespace pagoda {
namespace {

using ::pagoda::testing::MakeTempDir;
using ::pagoda::testing::WriteFile;

class TokenizerTest : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = MakeTempDir("pagoda_tokenizer_"); }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string dir_;
};

// Trains a small BPE model with the sentencepiece CLI on a corpus written
// here (`spaces`: some words then follow two or three spaces, or a tab), with
// `flags` for spm_train, and installs it as `dir`/tokenizer.model.
void TrainTinyModel(const std::string& dir, const std::string& flags = "--vocab_size=100",
                    bool spaces = false) {
  const std::vector<std::string> words = {"the",    "quick",    "brown",  "fox",    "jumps",
                                          "over",   "lazy",     "dog",    "paged",  "attention",
                                          "serves", "requests", "blocks", "values", "keys"};
  std::string corpus;
  uint32_t state = 7;
  for (int line = 0; line < 200; ++line) {
    for (int word = 0; word < 12; ++word) {
      state = state * 1664525u + 1013904223u;
      corpus += words[(state >> 16) % words.size()];
      const char* gaps[] = {"  ", "   ", "\t"};
      corpus += word == 11 ? "\n" : spaces && state % 5 == 0 ? gaps[(state >> 8) % 3] : " ";
    }
  }
  ASSERT_TRUE(WriteFile(dir + "/corpus.txt", corpus).ok());
  const std::string command = "spm_train --input=" + dir + "/corpus.txt --model_prefix=" + dir +
                              "/spm " + flags +
                              " --model_type=bpe --num_threads=1 "
                              "--minloglevel=2 > " +
                              dir + "/spm_train.log 2>&1";
  ASSERT_EQ(std::system(command.c_str()), 0) << "spm_train failed; see " << dir << "/spm_train.log";
  std::filesystem::rename(dir + "/spm.model", dir + "/tokenizer.model");
}

TEST_F(TokenizerTest, AbsentModelGivesNull) {
  auto tokenizer = Tokenizer::Load(dir_);
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  EXPECT_EQ(*tokenizer, nullptr);
}

TEST_F(TokenizerTest, GarbageModelIsAnError) {
  ASSERT_TRUE(WriteFile(dir_ + "/tokenizer.model", "this is not a protobuf \x01\x02\xff").ok());
  auto tokenizer = Tokenizer::Load(dir_);
  ASSERT_FALSE(tokenizer.ok());
  EXPECT_NE(tokenizer.status().message().find("tokenizer.model"), std::string::npos)
      << tokenizer.status();
}

TEST_F(TokenizerTest, TrainedModelRoundTrips) {
  TrainTinyModel(dir_);
  auto tokenizer = Tokenizer::Load(dir_);
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  ASSERT_NE(*tokenizer, nullptr);
  EXPECT_EQ((*tokenizer)->vocab_size(), 100);

  for (const std::string text : {"the quick brown fox", "paged attention serves requests",
                                 "lazy dog jumps over blocks of keys and values"}) {
    SCOPED_TRACE(text);
    auto ids = (*tokenizer)->Encode(text);
    ASSERT_TRUE(ids.ok()) << ids.status();
    ASSERT_FALSE(ids->empty());
    // Subword merges make the ids fewer than the characters.
    EXPECT_LT(ids->size(), text.size());
    EXPECT_NE(ids->front(), 1) << "Encode must not add BOS";
    for (int id : *ids) {
      EXPECT_GE(id, 0);
      EXPECT_LT(id, 100);
    }
    auto decoded = (*tokenizer)->Decode(*ids);
    ASSERT_TRUE(decoded.ok()) << decoded.status();
    EXPECT_EQ(*decoded, text);
  }
  auto empty = (*tokenizer)->Encode("");
  ASSERT_TRUE(empty.ok());
  EXPECT_TRUE(empty->empty());
}

// gRPC's libprotobuf and the protobuf copy inside libsentencepiece must both
// work in one process (the server's situation): the shim keeps them apart.
TEST_F(TokenizerTest, WorksBesideGrpcProtobuf) {
  TrainTinyModel(dir_);
  auto tokenizer = Tokenizer::Load(dir_);
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  ASSERT_NE(*tokenizer, nullptr);
  const std::string text = "quick brown dog serves keys";
  auto ids = (*tokenizer)->Encode(text);
  ASSERT_TRUE(ids.ok()) << ids.status();

  pagoda::v1::GenerateRequest request;
  request.set_request_id("r1");
  for (int id : *ids) request.add_prompt_token_ids(id);
  pagoda::v1::GenerateRequest parsed;
  ASSERT_TRUE(parsed.ParseFromString(request.SerializeAsString()));
  const std::vector<int> round_tripped(parsed.prompt_token_ids().begin(),
                                       parsed.prompt_token_ids().end());
  EXPECT_EQ(round_tripped, *ids);
  auto decoded = (*tokenizer)->Decode(round_tripped);
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_EQ(*decoded, text);
}

// Decode takes the piece table (SentencePieceDecodeTable) where it can and
// the library elsewhere: over random windows of every kind of piece (byte,
// control, unknown, whitespace) it must give the library's text, whatever
// the normalizer does with spaces.
TEST_F(TokenizerTest, DecodeMatchesTheLibraryOverRandomWindows) {
  const std::vector<std::string> trainings = {
      "--vocab_size=100",
      "--vocab_size=400 --byte_fallback=true",
      "--vocab_size=120 --remove_extra_whitespaces=false",
      "--vocab_size=120 --add_dummy_prefix=false",
      "--vocab_size=120 --add_dummy_prefix=false --remove_extra_whitespaces=false",
      "--vocab_size=120 --treat_whitespace_as_suffix=true",
      "--vocab_size=400 --byte_fallback=true --remove_extra_whitespaces=false",
  };
  int model = 0;
  for (const std::string& flags : trainings) {
    SCOPED_TRACE(flags);
    const std::string dir = dir_ + "/m" + std::to_string(model++);
    std::filesystem::create_directories(dir);
    TrainTinyModel(dir, flags, /*spaces=*/true);
    auto tokenizer = Tokenizer::Load(dir);
    ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
    ASSERT_NE(*tokenizer, nullptr);
    SentencePieceAdapter library;
    ASSERT_EQ(library.Load(dir + "/tokenizer.model"), "");
    const int size = library.piece_size();
    std::mt19937 rng(model);
    for (int window = 0; window < 3000; ++window) {
      std::vector<int> ids(1 + rng() % 8);
      for (int& id : ids) id = static_cast<int>(rng() % size);
      std::string expected;
      ASSERT_EQ(library.Decode(ids, &expected), "");
      auto decoded = (*tokenizer)->Decode(ids);
      ASSERT_TRUE(decoded.ok()) << decoded.status();
      ASSERT_EQ(*decoded, expected) << "ids " << absl::StrJoin(ids, ",");
    }
    // And the table is there to be used: a sentence's ids decode from it.
    const auto table = SentencePieceDecodeTable::Build(library);
    ASSERT_TRUE(table.has_value());
    auto ids = (*tokenizer)->Encode("the quick brown fox jumps");
    ASSERT_TRUE(ids.ok());
    std::string text;
    EXPECT_TRUE(table->TryDecode(*ids, &text));
    std::string expected;
    ASSERT_EQ(library.Decode(*ids, &expected), "");
    EXPECT_EQ(text, expected);
  }
}

TEST_F(TokenizerTest, DecodeRejectsIdsOutsideTheVocabulary) {
  TrainTinyModel(dir_);
  auto tokenizer = Tokenizer::Load(dir_);
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  ASSERT_NE(*tokenizer, nullptr);
  for (int bad : {-1, 100, 1 << 30}) {
    auto decoded = (*tokenizer)->Decode({3, bad});
    ASSERT_FALSE(decoded.ok()) << bad;
    EXPECT_NE(decoded.status().message().find(std::to_string(bad)), std::string::npos);
  }
}

}  // namespace
}  // namespace pagoda
