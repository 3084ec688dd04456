#include "bench/common/bench_flags.h"

#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include "absl/flags/flag.h"
#include "gtest/gtest.h"

ABSL_FLAG(int, bench_test_threads, 2, "test flag");
ABSL_FLAG(std::string, bench_test_weights, "cold", "test flag");
ABSL_FLAG(pagoda::bench::PositiveIntList, bench_test_rows, (pagoda::bench::PositiveIntList{{1, 8}}),
          "test flag");

namespace pagoda::bench {
namespace {

const ProgramInfo kProgram{"bench_test", "bench_test [flags]"};

// Parses `args` (argv[0] first) as a benchmark whose positions are threads,
// weights and rows. Once a process: Abseil's usage message is set once, so
// every test parses in a child (EXPECT_EXIT).
void Parse(std::vector<std::string> args) {
  std::vector<char*> argv;
  for (std::string& arg : args) argv.push_back(arg.data());
  ParseBenchCommandLine(static_cast<int>(argv.size()), argv.data(), kProgram,
                        {"bench_test_threads", "bench_test_weights", "bench_test_rows"});
}

TEST(PositiveIntListFlagTest, ReadsListsAndRefusesBadText) {
  PositiveIntList list;
  std::string error;
  ASSERT_TRUE(AbslParseFlag("4,1,16", &list, &error));
  EXPECT_EQ(list.values, (std::vector<int>{4, 1, 16}));
  EXPECT_EQ(AbslUnparseFlag(list), "4,1,16");
  for (const char* bad : {"", "1,,2", "0", "-3", "2,x", "1.5"}) {
    EXPECT_FALSE(AbslParseFlag(bad, &list, &error)) << bad;
    EXPECT_EQ(list.values, (std::vector<int>{4, 1, 16})) << bad;  // Left as it was.
  }
}

// Parses `args`, then exits 0 if the flags hold `threads`, `weights` and
// `rows`, else 2 (in a child: EXPECT_EXIT).
[[noreturn]] void ParseThenExitIfRead(std::vector<std::string> args, int threads,
                                      const std::string& weights, const std::vector<int>& rows) {
  Parse(std::move(args));
  const bool read = absl::GetFlag(FLAGS_bench_test_threads) == threads &&
                    absl::GetFlag(FLAGS_bench_test_weights) == weights &&
                    absl::GetFlag(FLAGS_bench_test_rows).values == rows;
  std::exit(read ? 0 : 2);
}

TEST(ParseBenchCommandLineDeathTest, PositionsSetTheirFlagsInOrder) {
  EXPECT_EXIT(ParseThenExitIfRead({"bench_test", "--bench-test-rows=3", "7", "hot"}, 7, "hot", {3}),
              testing::ExitedWithCode(0), "");
  EXPECT_EXIT(ParseThenExitIfRead({"bench_test", "5", "cold", "2,4"}, 5, "cold", {2, 4}),
              testing::ExitedWithCode(0), "");
  // Named flags alone, dashed or not, and the defaults.
  EXPECT_EXIT(ParseThenExitIfRead({"bench_test", "--bench_test_threads", "9"}, 9, "cold", {1, 8}),
              testing::ExitedWithCode(0), "");
}

TEST(ParseBenchCommandLineDeathTest, RefusesExtraPositionsBadValuesAndUnknownFlags) {
  EXPECT_EXIT(Parse({"bench_test", "1", "hot", "8", "extra"}), testing::ExitedWithCode(1),
              "bench_test: unexpected argument 'extra'");
  EXPECT_EXIT(Parse({"bench_test", "two"}), testing::ExitedWithCode(1),
              "bench_test: argument 1 \\(--bench-test-threads\\): Illegal value 'two'");
  EXPECT_EXIT(Parse({"bench_test", "1", "hot", "8,0"}), testing::ExitedWithCode(1),
              "argument 3 \\(--bench-test-rows\\): .*expected a comma-separated list of "
              "positive integers");
  EXPECT_EXIT(Parse({"bench_test", "--bench-test-rows", "1,-2"}), testing::ExitedWithCode(1),
              "Illegal value '1,-2' specified for flag 'bench_test_rows'");
  EXPECT_EXIT(Parse({"bench_test", "--no-such-flag", "1"}), testing::ExitedWithCode(1),
              "Unknown command line flag 'no-such-flag'");
}

TEST(BenchFlagChecksTest, SayWhatIsWrongInOneLine) {
  EXPECT_TRUE(OneOf("weights", "hot", {"cold", "hot"}).ok());
  EXPECT_EQ(OneOf("weights", "warm", {"cold", "hot"}).message(),
            "--weights warm is not cold or hot");
  EXPECT_EQ(OneOf("format", "2", {"4", "8", "w8a8"}).message(), "--format 2 is not 4, 8 or w8a8");
  EXPECT_EQ(Required("model", "").message(), "--model is required");
  EXPECT_TRUE(Required("model", "/tmp/m").ok());
  EXPECT_TRUE(Threads(1).ok());
  EXPECT_FALSE(Threads(0).ok());
  EXPECT_EXIT(CheckFlags("bench_test", {absl::OkStatus(), Required("model", ""), Threads(0)}),
              testing::ExitedWithCode(1), "bench_test: --model is required");
}

}  // namespace
}  // namespace pagoda::bench
