#include "common/safetensors.h"

#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/support/safetensors_writer.h"

namespace pagoda {
namespace {

using Json = nlohmann::json;
using ::pagoda::testing::BF16Bytes;
using ::pagoda::testing::F16Bytes;
using ::pagoda::testing::F32Bytes;
using ::pagoda::testing::MakeTempDir;
using ::pagoda::testing::NamedTensor;
using ::pagoda::testing::WriteFile;
using ::pagoda::testing::WriteSafetensors;

// Values exactly representable in f16 and bf16, so every dtype reads back exactly.
const std::vector<float> kValues = {0.0f, 1.0f, -2.5f, 0.125f, 1024.0f, -0.0078125f};

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream contents;
  contents << in.rdbuf();
  return contents.str();
}

// Builds a raw safetensors file from a header JSON text and data bytes.
std::string RawFile(const std::string& header, const std::string& data) {
  std::string file(8, '\0');
  const uint64_t length = header.size();
  for (int i = 0; i < 8; ++i) file[i] = static_cast<char>((length >> (8 * i)) & 0xff);
  return file + header + data;
}

class SafetensorsTest : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = MakeTempDir("pagoda_safetensors_"); }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::string Path(const std::string& name) const { return dir_ + "/" + name; }

  // Writes `contents` as model.safetensors and expects Open to fail with a
  // message naming the file and containing `expected`.
  void ExpectCorrupt(const std::string& contents, const std::string& expected) {
    ASSERT_TRUE(WriteFile(Path("model.safetensors"), contents).ok());
    auto store = WeightStore::Open(dir_);
    ASSERT_FALSE(store.ok()) << "expected error containing: " << expected;
    const std::string message(store.status().message());
    EXPECT_NE(message.find("model.safetensors"), std::string::npos) << message;
    EXPECT_NE(message.find(expected), std::string::npos) << message;
  }

  std::string dir_;
};

TEST_F(SafetensorsTest, SingleFileReadsEveryDTypeExactly) {
  ASSERT_TRUE(WriteSafetensors(Path("model.safetensors"),
                               {{"a.f32", DType::kF32, {2, 3}, F32Bytes(kValues)},
                                {"b.f16", DType::kF16, {6}, F16Bytes(kValues)},
                                {"c.bf16", DType::kBF16, {3, 2}, BF16Bytes(kValues)},
                                {"d.empty", DType::kF32, {0, 4}, ""}})
                  .ok());
  auto store = WeightStore::Open(dir_);
  ASSERT_TRUE(store.ok()) << store.status();
  EXPECT_EQ((*store)->Names(), std::vector<std::string>({"a.f32", "b.f16", "c.bf16", "d.empty"}));
  EXPECT_TRUE((*store)->Has("b.f16"));
  EXPECT_FALSE((*store)->Has("missing"));

  auto a = (*store)->GetF32("a.f32", {2, 3});
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(*a, kValues);
  auto b = (*store)->GetF32("b.f16", {6});
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(*b, kValues);
  auto c = (*store)->GetF32("c.bf16", {3, 2});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(*c, kValues);
  auto d = (*store)->GetF32("d.empty", {0, 4});
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_TRUE(d->empty());

  auto view = (*store)->Get("b.f16");
  ASSERT_TRUE(view.ok());
  EXPECT_EQ(view->dtype, DType::kF16);
  EXPECT_EQ(view->shape, std::vector<int64_t>({6}));
  EXPECT_EQ(view->nbytes, 12u);
  EXPECT_EQ(view->num_elements(), 6);
  EXPECT_EQ(std::memcmp(view->data, F16Bytes(kValues).data(), 12), 0);
}

TEST_F(SafetensorsTest, MissingTensorAndWrongShapeAreNamed) {
  ASSERT_TRUE(
      WriteSafetensors(Path("model.safetensors"), {{"w", DType::kF32, {2, 3}, F32Bytes(kValues)}})
          .ok());
  auto store = WeightStore::Open(dir_);
  ASSERT_TRUE(store.ok()) << store.status();
  auto missing = (*store)->Get("nope");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("nope"), std::string::npos);
  auto wrong = (*store)->GetF32("w", {3, 2});
  ASSERT_FALSE(wrong.ok());
  EXPECT_EQ(wrong.status().code(), absl::StatusCode::kInvalidArgument);
  const std::string message(wrong.status().message());
  EXPECT_NE(message.find("\"w\""), std::string::npos) << message;
  EXPECT_NE(message.find("[3, 2]"), std::string::npos) << message;
  EXPECT_NE(message.find("[2, 3]"), std::string::npos) << message;
}

TEST_F(SafetensorsTest, ShardedModelFollowsIndex) {
  ASSERT_TRUE(WriteSafetensors(Path("model-00001-of-00002.safetensors"),
                               {{"x", DType::kBF16, {6}, BF16Bytes(kValues)},
                                {"y", DType::kF32, {1}, F32Bytes({7.0f})}})
                  .ok());
  ASSERT_TRUE(WriteSafetensors(Path("model-00002-of-00002.safetensors"),
                               {{"z", DType::kF16, {2, 3}, F16Bytes(kValues)}})
                  .ok());
  Json index = {{"metadata", {{"total_size", 40}}},
                {"weight_map",
                 {{"x", "model-00001-of-00002.safetensors"},
                  {"y", "model-00001-of-00002.safetensors"},
                  {"z", "model-00002-of-00002.safetensors"}}}};
  ASSERT_TRUE(WriteFile(Path("model.safetensors.index.json"), index.dump()).ok());
  auto store = WeightStore::Open(dir_);
  ASSERT_TRUE(store.ok()) << store.status();
  EXPECT_EQ((*store)->Names(), std::vector<std::string>({"x", "y", "z"}));
  EXPECT_EQ(*(*store)->GetF32("x", {6}), kValues);
  EXPECT_EQ(*(*store)->GetF32("y", {1}), std::vector<float>({7.0f}));
  EXPECT_EQ(*(*store)->GetF32("z", {2, 3}), kValues);
}

TEST_F(SafetensorsTest, ShardedErrors) {
  ASSERT_TRUE(
      WriteSafetensors(Path("shard1.safetensors"), {{"x", DType::kF32, {1}, F32Bytes({1.0f})}})
          .ok());
  // A tensor listed in the index but absent from its shard.
  Json index = {{"weight_map", {{"x", "shard1.safetensors"}, {"ghost", "shard1.safetensors"}}}};
  ASSERT_TRUE(WriteFile(Path("model.safetensors.index.json"), index.dump()).ok());
  auto store = WeightStore::Open(dir_);
  ASSERT_FALSE(store.ok());
  EXPECT_NE(store.status().message().find("ghost"), std::string::npos) << store.status();
  EXPECT_NE(store.status().message().find("shard1.safetensors"), std::string::npos);

  // A shard file that does not exist.
  index = {{"weight_map", {{"x", "shard1.safetensors"}, {"w", "shard2.safetensors"}}}};
  ASSERT_TRUE(WriteFile(Path("model.safetensors.index.json"), index.dump()).ok());
  store = WeightStore::Open(dir_);
  ASSERT_FALSE(store.ok());
  EXPECT_NE(store.status().message().find("shard2.safetensors"), std::string::npos)
      << store.status();

  // A bad index: not JSON, no weight_map, a non-string shard, a path outside the dir.
  for (const std::string& text : {std::string("{"), std::string("{\"metadata\": {}}"),
                                  Json{{"weight_map", {{"x", 3}}}}.dump(),
                                  Json{{"weight_map", {{"x", "../shard1.safetensors"}}}}.dump(),
                                  Json{{"weight_map", Json::object()}}.dump()}) {
    SCOPED_TRACE(text);
    ASSERT_TRUE(WriteFile(Path("model.safetensors.index.json"), text).ok());
    store = WeightStore::Open(dir_);
    ASSERT_FALSE(store.ok());
    EXPECT_NE(store.status().message().find("model.safetensors.index.json"), std::string::npos)
        << store.status();
  }
}

TEST_F(SafetensorsTest, MissingDirectoryOrFile) {
  auto store = WeightStore::Open(dir_ + "/nowhere");
  EXPECT_EQ(store.status().code(), absl::StatusCode::kNotFound);
  store = WeightStore::Open(dir_);
  EXPECT_EQ(store.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(store.status().message().find("model.safetensors"), std::string::npos);
}

TEST_F(SafetensorsTest, CorruptFilesAreRejected) {
  const std::string data = F32Bytes({1.0f, 2.0f});  // 8 bytes.
  auto header = [](const Json& entries) { return entries.dump(); };
  auto entry = [](const std::string& dtype, std::vector<int64_t> shape, uint64_t begin,
                  uint64_t end) {
    return Json{{"dtype", dtype}, {"shape", shape}, {"data_offsets", {begin, end}}};
  };

  ExpectCorrupt("", "shorter than");
  ExpectCorrupt(std::string("\x05\x00\x00", 3), "shorter than");
  // Header length larger than the file, including a huge one that would overflow.
  ExpectCorrupt(RawFile("{}", "").replace(0, 1, "\x40"), "header length");
  ExpectCorrupt(std::string("\xff\xff\xff\xff\xff\xff\xff\xff", 8) + "{}", "header length");
  ExpectCorrupt(RawFile("{\"a\": ", data), "not valid JSON");
  ExpectCorrupt(RawFile("[1, 2]", data), "JSON object");
  ExpectCorrupt(RawFile(header({{"w", entry("C64", {1}, 0, 8)}}), data), "C64");
  // Integer tensors (quantized checkpoints) are sized by their own width.
  ExpectCorrupt(RawFile(header({{"w", entry("I32", {3}, 0, 8)}}), data), "needs 12");
  ExpectCorrupt(RawFile(header({{"w", entry("F32", {1}, 4, 0)}}), data), "before begin");
  ExpectCorrupt(RawFile(header({{"w", entry("F32", {4}, 0, 16)}}), data), "beyond");
  ExpectCorrupt(RawFile(header({{"w", entry("F32", {3}, 0, 8)}}), data), "needs 12");
  ExpectCorrupt(RawFile(header({{"w", entry("F16", {3}, 0, 8)}}), data), "needs 6");
  ExpectCorrupt(RawFile(header({{"w", entry("F32", {1LL << 40, 1LL << 40}, 0, 8)}}), data),
                "larger than the file");
  ExpectCorrupt(RawFile(header({{"w", entry("F32", {-1}, 0, 8)}}), data), "shape");
  ExpectCorrupt(
      RawFile(header({{"a", entry("F32", {2}, 0, 8)}, {"b", entry("F32", {1}, 4, 8)}}), data),
      "overlap");
  ExpectCorrupt(RawFile(header({{"w", {{"dtype", "F32"}, {"shape", {2}}}}}), data), "data_offsets");
  ExpectCorrupt(RawFile(header({{"w", {{"shape", {2}}, {"data_offsets", {0, 8}}}}}), data),
                "dtype");
  ExpectCorrupt(RawFile(header({{"w", 5}}), data), "\"w\"");
  ExpectCorrupt(
      RawFile(header({{"w", {{"dtype", "F32"}, {"shape", {2}}, {"data_offsets", {-1, 7}}}}}), data),
      "data_offsets");
}

TEST_F(SafetensorsTest, TruncatingAValidFileNeverCrashes) {
  ASSERT_TRUE(
      WriteSafetensors(Path("model.safetensors"), {{"a", DType::kF32, {2, 3}, F32Bytes(kValues)},
                                                   {"b", DType::kBF16, {6}, BF16Bytes(kValues)}})
          .ok());
  const std::string whole = ReadAll(Path("model.safetensors"));
  for (size_t length = 0; length < whole.size(); ++length) {
    ASSERT_TRUE(WriteFile(Path("model.safetensors"), whole.substr(0, length)).ok());
    auto store = WeightStore::Open(dir_);
    EXPECT_FALSE(store.ok()) << "truncated to " << length;
  }
}

// Overwrites each header byte with values that break JSON, digits and
// quoting. Open may fail or succeed, but whatever it accepts must be readable
// in full without leaving its mapping (run under ASan to prove it).
TEST_F(SafetensorsTest, CorruptedHeaderBytesNeverReadOutOfBounds) {
  ASSERT_TRUE(
      WriteSafetensors(Path("model.safetensors"), {{"a", DType::kF32, {2, 3}, F32Bytes(kValues)},
                                                   {"b", DType::kF16, {6}, F16Bytes(kValues)}})
          .ok());
  const std::string whole = ReadAll(Path("model.safetensors"));
  uint64_t header_bytes = 0;
  for (int i = 7; i >= 0; --i) header_bytes = (header_bytes << 8) | uint8_t(whole[i]);
  int accepted = 0;
  for (size_t position = 0; position < 8 + header_bytes; ++position) {
    for (char replacement : {'9', '0', '"', '}', '-', 'x', '\xff'}) {
      std::string corrupt = whole;
      corrupt[position] = replacement;
      ASSERT_TRUE(WriteFile(Path("model.safetensors"), corrupt).ok());
      auto store = WeightStore::Open(dir_);
      if (!store.ok()) continue;
      ++accepted;
      for (const std::string& name : (*store)->Names()) {
        auto view = (*store)->Get(name);
        ASSERT_TRUE(view.ok());
        auto values = (*store)->GetF32(name, view->shape);
        ASSERT_TRUE(values.ok()) << values.status();
        EXPECT_EQ(values->size() * DTypeSize(view->dtype), view->nbytes);
      }
    }
  }
  EXPECT_GT(accepted, 0);  // Some edits (e.g. inside a name) leave a valid file.
}

TEST_F(SafetensorsTest, MetadataIsIgnoredAndGapsAreAllowed) {
  const std::string data = F32Bytes({1.0f, 2.0f, 3.0f});
  Json header = {{"__metadata__", {{"format", "pt"}}},
                 {"w", {{"dtype", "F32"}, {"shape", {1}}, {"data_offsets", {8, 12}}}}};
  ASSERT_TRUE(WriteFile(Path("model.safetensors"), RawFile(header.dump(), data)).ok());
  auto store = WeightStore::Open(dir_);
  ASSERT_TRUE(store.ok()) << store.status();
  EXPECT_EQ((*store)->Names(), std::vector<std::string>({"w"}));
  EXPECT_EQ(*(*store)->GetF32("w", {1}), std::vector<float>({3.0f}));
}

// Quantized checkpoints' integer tensors (codes, zero points, group
// indices) open with their own widths; the float readers refuse them.
TEST_F(SafetensorsTest, IntegerTensorsOpenAndFloatReadersRefuseThem) {
  const std::string data(8 + 4 + 2, '\x01');
  Json header = {{"q", {{"dtype", "I32"}, {"shape", {2}}, {"data_offsets", {0, 8}}}},
                 {"z", {{"dtype", "I8"}, {"shape", {2, 2}}, {"data_offsets", {8, 12}}}},
                 {"u", {{"dtype", "U8"}, {"shape", {2}}, {"data_offsets", {12, 14}}}}};
  // Padded with spaces to 8 bytes, as safetensors writes it: the data starts
  // aligned.
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  ASSERT_TRUE(WriteFile(Path("model.safetensors"), RawFile(text, data)).ok());
  auto store = WeightStore::Open(dir_);
  ASSERT_TRUE(store.ok()) << store.status();
  auto q = (*store)->Get("q");
  ASSERT_TRUE(q.ok()) << q.status();
  EXPECT_EQ(q->integer, IntegerType::kI32);
  EXPECT_EQ(q->nbytes, 8u);
  EXPECT_EQ(static_cast<const int32_t*>(q->data)[1], 0x01010101);
  EXPECT_EQ((*store)->Get("z")->integer, IntegerType::kI8);
  EXPECT_EQ((*store)->Get("u")->integer, IntegerType::kU8);
  auto as_float = (*store)->GetF32("q", {2});
  ASSERT_FALSE(as_float.ok());
  EXPECT_EQ(as_float.status().message(), "weight \"q\" is I32, expected a float tensor");
}

// An integer tensor off its width's alignment would be read through a
// misaligned pointer: refused at open, naming it.
TEST_F(SafetensorsTest, MisalignedIntegerTensorsAreRefused) {
  const std::string data(1 + 8, '\x01');
  Json header = {{"u", {{"dtype", "U8"}, {"shape", {1}}, {"data_offsets", {0, 1}}}},
                 {"q", {{"dtype", "I32"}, {"shape", {2}}, {"data_offsets", {1, 9}}}}};
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  ASSERT_TRUE(WriteFile(Path("model.safetensors"), RawFile(text, data)).ok());
  auto store = WeightStore::Open(dir_);
  ASSERT_FALSE(store.ok());
  EXPECT_TRUE(absl::StrContains(store.status().message(), "tensor \"q\": starts at byte "))
      << store.status();
  EXPECT_TRUE(absl::StrContains(store.status().message(), "not aligned to its 4-byte elements"));
}

}  // namespace
}  // namespace pagoda
