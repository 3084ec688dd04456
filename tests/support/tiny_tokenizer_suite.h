#ifndef PAGODA_TESTS_SUPPORT_TINY_TOKENIZER_SUITE_H_
#define PAGODA_TESTS_SUPPORT_TINY_TOKENIZER_SUITE_H_

#include <filesystem>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/support/tiny_model.h"
#include "text/tokenizer.h"

namespace pagoda::testing {

// A gtest fixture whose suite shares one tokenizer of a tiny model
// (MakeTinyTokenizer with `kVocabSize` pieces), made once per suite in a
// temporary directory that the suite removes.
template <int kVocabSize>
class TinyTokenizerSuite : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new std::string(TempPath(absl::StrCat("pagoda_tokenizer_", kVocabSize)));
    absl::StatusOr<std::unique_ptr<Tokenizer>> tokenizer = MakeTinyTokenizer(*dir_, kVocabSize);
    ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
    tokenizer_ = tokenizer->release();
  }
  static void TearDownTestSuite() {
    delete tokenizer_;
    tokenizer_ = nullptr;
    std::filesystem::remove_all(*dir_);
    delete dir_;
  }

  static inline std::string* dir_ = nullptr;
  static inline Tokenizer* tokenizer_ = nullptr;
};

}  // namespace pagoda::testing

#endif  // PAGODA_TESTS_SUPPORT_TINY_TOKENIZER_SUITE_H_
