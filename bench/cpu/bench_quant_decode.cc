// Decode through the CPU quantized Linears (worker/cpu/quant_linear.h:
// weight-only int4/int8; worker/cpu/w8a8_linear.h: W8A8 int8 with per-token
// int8 inputs, FP8 E4M3 weights with per-token FP8 inputs) on the projections of a
// Llama-3.2-1B-shaped model (16 layers: q/k/v, o, gate/up, down; hidden 2048, intermediate 8192, 32
// query and 8 KV heads of 64), random codes, group size 128: the time of one token (and of a batch
// of 8) through every projection, against
//   - its read floor: the packed codes plus the scales and offsets it reads,
//     over the read bandwidth measured in the same run (machine_floor.h);
//   - the same shapes as bf16 dense weights through Backend::Linear;
//   - for the weight-only formats, both ways of taking the inputs
//     (quant_linear.h's WeightOnlyActivations: int8 per group, the default,
//     and f32), over the same codes; for W8A8, both layouts of the codes
//     (w8a8_linear.h's W8A8Layout: tiles where the CPU has VNNI, rows);
//   - with --level, at that SIMD level, the int8 codes' three
//     layouts over the same codes (quant_tile_kernels.h's Int8Layout): the
//     tiles with the CPU's best VNNI (at avx2: AVX-VNNI's 256-bit vpdpbusd),
//     the AVX2 tiles with vpmaddubsw + vpmaddwd (a CPU without VNNI), and
//     the row layout (that level's path before the AVX2 tiles).
// The variants' passes alternate (one pass of each in turn, `iterations`
// times) so that a shared machine's load falls on all of them alike.
// The weights (about 550 MB at int4) are far larger than the last-level
// cache, so every step streams them from memory.
//
// Usage: bench_quant_decode [--threads 2] [--format 4] [--layers 16] [--iterations 10]
//                           [--level avx2|avx512|best] [--batches 1,8]
// or by position, in that order: bench_quant_decode 2 4 16 3 avx2 1,8,64
//   format: 4 or 8 (weight-only int4 / int8, group 128), w8a8 or fp8
//   (one byte a weight, one scale a channel); level: avx2, avx512 or best
//   (given: the three layouts of the int8 codes at it); batches: token rows
//   a pass (e.g. 1,8,64: a 64-token prompt too).

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/flags/flag.h"
#include "bench/common/bench_flags.h"
#include "bench/cpu/machine_floor.h"
#include "common/flag_checks.h"
#include "worker/cpu/cpu_backend.h"
#include "worker/cpu/quant_linear.h"
#include "worker/cpu/simd.h"
#include "worker/cpu/thread_pool.h"
#include "worker/cpu/w8a8_linear.h"
#include "worker/linear.h"
#include "worker/quant/quantized_weight.h"

ABSL_FLAG(int, threads, 2, "Threads of the pool the Linears run on.");
ABSL_FLAG(std::string, format, "4",
          "4 or 8 (weight-only int4 / int8, group 128), w8a8 or fp8 (one byte a weight, one "
          "scale a channel).");
ABSL_FLAG(int, layers, 16, "Llama-3.2-1B-shaped layers (1..64).");
ABSL_FLAG(int, iterations, 10, "Alternated passes of every variant (1..1000).");
ABSL_FLAG(std::string, level, "",
          "avx2, avx512 or best: also time the int8 codes' three layouts at that SIMD level.");
ABSL_FLAG(pagoda::bench::PositiveIntList, batches, (pagoda::bench::PositiveIntList{{1, 8}}),
          "Token rows a pass, comma separated, each 1..512 (e.g. 1,8,64: a 64-token prompt too).");

namespace pagoda::worker {
namespace {

struct Projection {
  int64_t out;
  int64_t in;
};

// q/k/v stacked, o, gate/up stacked, down.
constexpr Projection kLayer[] = {
    {2048 + 2 * 512, 2048}, {2048, 2048}, {2 * 8192, 2048}, {2048, 8192}};
constexpr int64_t kGroupSize = 128;

uint64_t Next(uint64_t& state) {
  state ^= state << 13;
  state ^= state >> 7;
  state ^= state << 17;
  return state;
}

QuantizedWeight RandomWeight(const Projection& p, int bits, uint64_t& state) {
  QuantizedWeight w = SizedWeight("bench", bits, p.out, p.in, p.in / kGroupSize);
  for (uint8_t& code : w.codes) code = static_cast<uint8_t>(Next(state) & ((1u << bits) - 1));
  for (size_t k = 0; k < w.scales.size(); ++k) {
    w.scales[k] = 0.001f * static_cast<float>(1 + Next(state) % 16);
    w.zeros[k] = static_cast<float>(1 << (bits - 1));
  }
  for (int64_t i = 0; i < p.in; ++i) w.group_of_input[i] = static_cast<int32_t>(i / kGroupSize);
  return w;
}

// One byte a weight, one scale a channel: W8A8 int8 (codes = value + 128)
// or FP8 E4M3 codes (no NaN), inputs quantized per token.
QuantizedWeight RandomByteWeight(const Projection& p, bool fp8, uint64_t& state) {
  QuantizedWeight w = SizedWeight("bench", 8, p.out, p.in, 1);
  w.code_type = fp8 ? CodeType::kFloat8E4M3 : CodeType::kUnsignedInt;
  w.input_quant = fp8 ? InputQuant::kFp8PerToken : InputQuant::kInt8PerToken;
  for (uint8_t& code : w.codes) {
    code = static_cast<uint8_t>(Next(state));
    if (fp8 && IsFp8E4M3Nan(code)) code = 0;
  }
  for (size_t k = 0; k < w.scales.size(); ++k) {
    w.scales[k] = 0.001f * static_cast<float>(1 + Next(state) % 16);
    w.zeros[k] = fp8 ? 0.0f : 128.0f;
  }
  return w;
}

double ThreadSeconds() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

// Seconds of the best of the passes of `rows` tokens through every Linear: wall time, the calling
// thread's CPU time (all of the work on one thread, so a busy shared machine's lost time shows as
// their gap), and the sum over the Linears of each one's best wall time: on a loaded machine a
// whole pass (dozens of projections) is rarely left alone, one projection (a few ms) often is, so
// that sum is the pass's time when not preempted. The weights still stream from memory in every
// pass: they are larger than the last-level cache and read in the same order each time.
struct Variant {
  explicit Variant(std::string variant_name) : name(std::move(variant_name)) {}
  std::string name;
  std::vector<std::unique_ptr<Linear>> linears;
  double wall = 1e30;
  double cpu = 1e30;
  std::vector<double> each;  // Each Linear's best.
  double SumOfBest() const {
    double sum = 0;
    for (double seconds : each) sum += seconds;
    return sum;
  }
};

// One pass of `rows` token rows through every Linear of `v`, kept if best.
// The inputs vary (a smooth ramp), so int8 quantization sees real ranges.
void Pass(Variant& v, int rows) {
  static std::vector<float> x;
  if (x.size() < static_cast<size_t>(rows) * 16384) {
    x.resize(static_cast<size_t>(rows) * 16384);
    for (size_t i = 0; i < x.size(); ++i) x[i] = 0.01f * ((i * 37) % 101) - 0.5f;
  }
  std::vector<float> y(static_cast<size_t>(rows) * 16384);
  v.each.resize(v.linears.size(), 1e30);
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  const double cpu_start = ThreadSeconds();
  auto last = start;
  for (size_t k = 0; k < v.linears.size(); ++k) {
    v.linears[k]->Forward(x.data(), rows, y.data());
    const auto now = Clock::now();
    v.each[k] = std::min(v.each[k], std::chrono::duration<double>(now - last).count());
    last = now;
  }
  v.wall = std::min(v.wall, std::chrono::duration<double>(last - start).count());
  v.cpu = std::min(v.cpu, ThreadSeconds() - cpu_start);
}

constexpr const char* kProgram = "bench_quant_decode";

// --level's SimdLevel (BestSimdLevel when it is best or not given); exits
// unless this machine runs it.
SimdLevel LevelFlag() {
  const std::string name = absl::GetFlag(FLAGS_level);
  if (name.empty() || name == "best") return BestSimdLevel();
  const std::vector<SimdLevel> supported = SupportedSimdLevels();
  const auto it = std::find_if(supported.begin(), supported.end(),
                               [&](SimdLevel l) { return SimdLevelName(l) == name; });
  bench::CheckFlags(
      kProgram,
      {it != supported.end() ? absl::OkStatus()
                             : absl::InvalidArgumentError("--level " + name + " not run here")});
  return *it;
}

int Main(int argc, char** argv) {
  bench::ParseBenchCommandLine(
      argc, argv,
      {kProgram,
       "bench_quant_decode [--threads N] [--format 4|8|w8a8|fp8] [--layers N] "
       "[--iterations N] [--level avx2|avx512|best] [--batches 1,8], or those by "
       "position"},
      {"threads", "format", "layers", "iterations", "level", "batches"});
  const int threads = absl::GetFlag(FLAGS_threads);
  const std::string format = absl::GetFlag(FLAGS_format);
  const int layers = absl::GetFlag(FLAGS_layers);
  const int iterations = absl::GetFlag(FLAGS_iterations);
  const std::vector<int> batches = absl::GetFlag(FLAGS_batches).values;
  bench::CheckFlags(
      kProgram,
      {bench::Threads(threads), bench::OneOf("format", format, {"4", "8", "w8a8", "fp8"}),
       flag_check::Range("layers", layers, 1, 64),
       flag_check::Range("iterations", iterations, 1, 1000),
       flag_check::Range("batches", *std::max_element(batches.begin(), batches.end()), 1, 512)});
  const bool byte_format = format == "w8a8" || format == "fp8";
  const int bits = format == "4" ? 4 : 8;
  const std::string name = byte_format ? format : "int" + format;
  // With a level named: the int8 codes in each Int8Layout at that level.
  const bool layouts = !absl::GetFlag(FLAGS_level).empty() && format != "fp8";
  const SimdLevel level = LevelFlag();
  std::printf("simd %s, %d threads, %s, %d layers, %s\n", std::string(SimdLevelName(level)).c_str(),
              threads, name.c_str(), layers, byte_format ? "scales per channel" : "group 128");

  ThreadPool pool(threads);
  std::vector<Variant> variants;
  const std::string int8_name = byte_format ? name : name + " int8 inputs";
  variants.emplace_back(int8_name);
  if (layouts) {
    variants.emplace_back(int8_name + " tiles no vnni");
    variants.emplace_back(int8_name + " rows");
  } else if (format == "w8a8") {
    // W8A8's row layout (the one before the tiles).
    variants.emplace_back(name + " rows");
  }
  if (!byte_format) variants.emplace_back(name + " f32 inputs");
  const std::vector<Int8Layout> int8_layouts =
      layouts
          ? std::vector<Int8Layout>{Int8Layout::kBest, Int8Layout::kTilesNoVnni, Int8Layout::kRows}
      : format == "w8a8" ? std::vector<Int8Layout>{Int8Layout::kBest, Int8Layout::kRows}
                         : std::vector<Int8Layout>{Int8Layout::kBest};
  uint64_t state = 0x9E3779B97F4A7C15ull;
  size_t quantized_bytes = 0;
  for (int l = 0; l < layers; ++l) {
    for (const Projection& p : kLayer) {
      if (byte_format) {
        const QuantizedWeight w = RandomByteWeight(p, format == "fp8", state);
        for (size_t k = 0; k < int8_layouts.size(); ++k) {
          variants[k].linears.push_back(CreateCpuW8A8Linear(w, &pool, level, int8_layouts[k]));
        }
      } else {
        const QuantizedWeight w = RandomWeight(p, bits, state);
        for (size_t k = 0; k < int8_layouts.size(); ++k) {
          variants[k].linears.push_back(
              CreateCpuQuantLinear(w, &pool, level, WeightOnlyActivations::kInt8, int8_layouts[k]));
        }
        variants[int8_layouts.size()].linears.push_back(
            CreateCpuQuantLinear(w, &pool, level, WeightOnlyActivations::kFloat32));
      }
      quantized_bytes += variants[0].linears.back()->weight_bytes();
    }
  }
  auto backend = CreateCpuBackend(threads);
  Variant dense{"bf16"};
  size_t dense_bytes = 0;
  for (int l = 0; l < layers; ++l) {
    for (const Projection& p : kLayer) {
      auto buffer = backend->Allocate(DType::kBF16, static_cast<size_t>(p.out * p.in));
      auto* halves = static_cast<uint16_t*>(buffer->raw());
      for (int64_t k = 0; k < p.out * p.in; ++k) halves[k] = 0x3C00 | (Next(state) & 0x3F);
      dense_bytes += buffer->nbytes();
      dense.linears.push_back(std::make_unique<DenseLinear>(backend.get(), std::move(buffer), p.out,
                                                            p.in, nullptr, DType::kF32));
    }
  }
  variants.push_back(std::move(dense));
  const ReadBandwidth bandwidth = MeasureReadBandwidth(threads);
  const double floor_ms = quantized_bytes / (bandwidth.best() * 1e9) * 1e3;
  std::printf("read bandwidth %.1f GB/s (huge pages %.1f, small %.1f)\n", bandwidth.best(),
              bandwidth.huge_pages_gbs, bandwidth.small_pages_gbs);
  std::printf("%s weights %.1f MB (codes and scales); bf16 weights %.1f MB\n", name.c_str(),
              quantized_bytes / 1e6, dense_bytes / 1e6);
  // *_sum: each projection's best, summed (see Pass). Optimistic: a
  // projection's best pass may find some of its weights still in a large
  // last-level cache; the whole-pass columns are the figures. Ratios are to
  // the first variant (the default). GB/s: the quantized weights' bytes
  // (codes and scales) over the wall time.
  std::printf("%-6s %-30s %9s %9s %9s %9s %11s %10s %11s %9s %7s\n", "batch", "variant", "wall_ms",
              "cpu_ms", "sum_ms", "floor_ms", "floor/wall", "floor/sum", "wall/first", "tokens/s",
              "GB/s");
  for (int rows : batches) {
    for (Variant& v : variants) {
      v.wall = v.cpu = 1e30;
      v.each.clear();
    }
    for (int it = 0; it < iterations; ++it) {
      for (Variant& v : variants) Pass(v, rows);
    }
    for (const Variant& v : variants) {
      std::printf("%-6d %-30s %9.2f %9.2f %9.2f %9.2f %10.0f%% %9.0f%% %10.2fx %9.1f %7.1f\n", rows,
                  v.name.c_str(), v.wall * 1e3, v.cpu * 1e3, v.SumOfBest() * 1e3, floor_ms,
                  100.0 * floor_ms / (v.wall * 1e3), 100.0 * floor_ms / (v.SumOfBest() * 1e3),
                  v.wall / variants[0].wall, rows / v.wall, quantized_bytes / v.wall / 1e9);
    }
  }
  return 0;
}

}  // namespace
}  // namespace pagoda::worker

int main(int argc, char** argv) { return pagoda::worker::Main(argc, argv); }
