#include "common/tensor_slice.h"

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/support/safetensors_writer.h"

namespace pagoda {
namespace {

using ::pagoda::testing::BF16Bytes;
using ::pagoda::testing::F16Bytes;
using ::pagoda::testing::F32Bytes;
using ::pagoda::testing::MakeTempDir;
using ::pagoda::testing::NamedTensor;
using ::pagoda::testing::WriteSafetensors;

// Element (r, c) of a [rows, cols] test tensor: small integers and halves,
// exact in every dtype, distinct per position.
float Element(int64_t r, int64_t c) { return static_cast<float>(r * 16 + c) * 0.5f; }

std::vector<float> Matrix(int64_t rows, int64_t cols) {
  std::vector<float> values;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) values.push_back(Element(r, c));
  }
  return values;
}

std::string Bytes(DType dtype, const std::vector<float>& values) {
  switch (dtype) {
    case DType::kF16:
      return F16Bytes(values);
    case DType::kBF16:
      return BF16Bytes(values);
    case DType::kFp8E4M3:  // KV-cache-only: never a checkpoint tensor's dtype.
    case DType::kFp8E5M2:
    case DType::kF32:
      break;
  }
  return F32Bytes(values);
}

class TensorSliceTest : public ::testing::TestWithParam<DType> {
 protected:
  static constexpr int64_t kRows = 5, kCols = 7;  // Odd on purpose.
  void SetUp() override {
    dir_ = MakeTempDir("pagoda_tensor_slice_");
    const DType dtype = GetParam();
    std::vector<float> bias(kCols);
    for (int64_t c = 0; c < kCols; ++c) bias[c] = Element(0, c);
    ASSERT_TRUE(WriteSafetensors(
                    dir_ + "/model.safetensors",
                    {NamedTensor{"w", dtype, {kRows, kCols}, Bytes(dtype, Matrix(kRows, kCols))},
                     NamedTensor{"b", dtype, {kCols}, Bytes(dtype, bias)},
                     NamedTensor{"t", dtype, {1, 1, 2}, Bytes(dtype, {1, 2})}})
                    .ok());
    auto store = WeightStore::Open(dir_);
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = std::move(*store);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::string dir_;
  std::unique_ptr<WeightStore> store_;
};

TEST_P(TensorSliceTest, RowsOfAMatrix) {
  for (auto [begin, end] : {std::pair<int64_t, int64_t>{0, 1}, {1, 4}, {4, 5}, {0, 5}}) {
    auto view = SliceRows(*store_, "w", {kRows, kCols}, begin, end);
    ASSERT_TRUE(view.ok()) << view.status();
    EXPECT_EQ(view->shape, (std::vector<int64_t>{end - begin, kCols}));
    EXPECT_EQ(view->dtype, GetParam());
    EXPECT_EQ(view->nbytes, static_cast<size_t>((end - begin) * kCols) * DTypeSize(GetParam()));
    auto values = SliceRowsF32(*store_, "w", {kRows, kCols}, begin, end);
    ASSERT_TRUE(values.ok());
    ASSERT_EQ(values->size(), static_cast<size_t>((end - begin) * kCols));
    for (int64_t r = begin; r < end; ++r) {
      for (int64_t c = 0; c < kCols; ++c) {
        EXPECT_EQ((*values)[(r - begin) * kCols + c], Element(r, c)) << r << "," << c;
      }
    }
  }
}

TEST_P(TensorSliceTest, ColumnsOfAMatrix) {
  for (auto [begin, end] : {std::pair<int64_t, int64_t>{0, 1}, {2, 5}, {6, 7}, {0, 7}}) {
    auto owned = SliceColumns(*store_, "w", {kRows, kCols}, begin, end);
    ASSERT_TRUE(owned.ok()) << owned.status();
    EXPECT_EQ(owned->shape, (std::vector<int64_t>{kRows, end - begin}));
    EXPECT_EQ(owned->bytes.size(),
              static_cast<size_t>(kRows * (end - begin)) * DTypeSize(GetParam()));
    auto values = SliceColumnsF32(*store_, "w", {kRows, kCols}, begin, end);
    ASSERT_TRUE(values.ok());
    const int64_t width = end - begin;
    for (int64_t r = 0; r < kRows; ++r) {
      for (int64_t c = begin; c < end; ++c) {
        EXPECT_EQ((*values)[r * width + (c - begin)], Element(r, c)) << r << "," << c;
      }
    }
  }
}

TEST_P(TensorSliceTest, RangeOfABias) {
  auto values = SliceRowsF32(*store_, "b", {kCols}, 3, 7);
  ASSERT_TRUE(values.ok()) << values.status();
  EXPECT_EQ(*values,
            (std::vector<float>{Element(0, 3), Element(0, 4), Element(0, 5), Element(0, 6)}));
}

TEST_P(TensorSliceTest, RefusesBadShapesAndRanges) {
  auto code = [](const auto& result) { return result.status().code(); };
  const auto kInvalid = absl::StatusCode::kInvalidArgument;
  EXPECT_EQ(code(SliceRows(*store_, "w", {kCols, kRows}, 0, 1)), kInvalid);  // Wrong shape.
  EXPECT_EQ(code(SliceRows(*store_, "w", {kRows, kCols}, 2, 2)), kInvalid);  // Empty.
  EXPECT_EQ(code(SliceRows(*store_, "w", {kRows, kCols}, 3, 2)), kInvalid);  // Reversed.
  EXPECT_EQ(code(SliceRows(*store_, "w", {kRows, kCols}, -1, 2)), kInvalid);
  EXPECT_EQ(code(SliceRows(*store_, "w", {kRows, kCols}, 0, kRows + 1)), kInvalid);
  EXPECT_EQ(code(SliceColumns(*store_, "w", {kRows, kCols}, 0, kCols + 1)), kInvalid);
  EXPECT_EQ(code(SliceColumns(*store_, "b", {kCols}, 0, 1)), kInvalid);  // 1-D has no columns.
  EXPECT_EQ(code(SliceRows(*store_, "t", {1, 1, 2}, 0, 1)), kInvalid);   // 3-D.
  EXPECT_EQ(code(SliceRows(*store_, "missing", {kRows, kCols}, 0, 1)), absl::StatusCode::kNotFound);
  // The message names the tensor, the range and the extent.
  std::string message(SliceRows(*store_, "w", {kRows, kCols}, 4, 9).status().message());
  EXPECT_NE(message.find("\"w\""), std::string::npos) << message;
  EXPECT_NE(message.find("[4, 9)"), std::string::npos) << message;
  EXPECT_NE(message.find("[0, 5)"), std::string::npos) << message;
}

INSTANTIATE_TEST_SUITE_P(AllDTypes, TensorSliceTest,
                         ::testing::Values(DType::kF32, DType::kF16, DType::kBF16));

// Resident bytes of this process's mappings of `path`, from /proc/self/smaps.
int64_t ResidentBytesOf(const std::string& path) {
  std::ifstream smaps("/proc/self/smaps");
  std::string line;
  bool in_mapping = false;
  int64_t total_kib = 0;
  while (std::getline(smaps, line)) {
    if (!line.empty() && std::isxdigit(static_cast<unsigned char>(line[0])) &&
        line.find('-') != std::string::npos && line.find(' ') != std::string::npos) {
      in_mapping = line.size() >= path.size() &&
                   line.compare(line.size() - path.size(), path.size(), path) == 0;
    } else if (in_mapping && line.rfind("Rss:", 0) == 0) {
      std::istringstream fields(line.substr(4));
      int64_t kib = 0;
      fields >> kib;
      total_kib += kib;
    }
  }
  return total_kib * 1024;
}

// The point of slicing: a rank that reads a quarter of the rows of a 64 MiB
// tensor has about a quarter of it resident, not all of it. The slack allows
// for the kernel mapping whole page-cache folios (up to a few MiB) around the
// edges of the range.
TEST(TensorSliceResidencyTest, ReadingRowsFaultsInOnlyThoseRows) {
  const std::string dir = MakeTempDir("pagoda_tensor_slice_rss_");
  constexpr int64_t kRows = 4096, kCols = 4096;
  const std::string path = dir + "/model.safetensors";
  ASSERT_TRUE(
      WriteSafetensors(path, {NamedTensor{"big",
                                          DType::kF32,
                                          {kRows, kCols},
                                          F32Bytes(std::vector<float>(kRows * kCols, 1.0f))}})
          .ok());
  auto store = WeightStore::Open(dir);
  ASSERT_TRUE(store.ok()) << store.status();
  const std::string canonical = std::filesystem::canonical(path).string();
  auto quarter = SliceRowsF32(**store, "big", {kRows, kCols}, kRows / 4, kRows / 2);
  ASSERT_TRUE(quarter.ok());
  const int64_t whole = kRows * kCols * 4;
  const int64_t resident = ResidentBytesOf(canonical);
  EXPECT_GE(resident, whole / 4);  // The rows read are resident...
  EXPECT_LT(resident, whole / 4 + whole / 8) << "resident " << resident << " of " << whole;
  store->reset();
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace pagoda
