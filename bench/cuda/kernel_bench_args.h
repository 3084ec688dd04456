#ifndef PAGODA_BENCH_CUDA_KERNEL_BENCH_ARGS_H_
#define PAGODA_BENCH_CUDA_KERNEL_BENCH_ARGS_H_

// The CUDA kernel benchmarks' command lines (bench_paged_attention,
// bench_cache_ops, bench_fp8_linear, bench_int4_linear): a few integer
// flags. Not Abseil flags as the other benchmarks' (bench/common/
// bench_flags.h): these programs are also built by scripts/gpu_check/ on the
// GPU machine's image, which has no Abseil. Header-only, C++17 (nvcc's
// dialect there).

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <initializer_list>

namespace pagoda::bench {

// An integer flag: --NAME N or --NAME=N, or the N-th bare value.
struct IntArg {
  const char* name;
  int* value;  // Holds the default; set when given.
  int low, high;
};

// Sets each of `args` from the command line: by name, or by position in
// their order (the older form `bench_cache_ops 8 1024`). -h/--help prints
// `usage` and exits 0; an unknown flag, a value that is not an integer in
// its range, or a value too many prints one line and exits 1.
inline void ParseKernelBenchArgs(int argc, char** argv, const char* usage,
                                 std::initializer_list<IntArg> args) {
  size_t position = 0;
  for (int i = 1; i < argc; ++i) {
    const char* arg = argv[i];
    if (std::strcmp(arg, "-h") == 0 || std::strcmp(arg, "--help") == 0) {
      std::printf("usage: %s\n", usage);
      std::exit(0);
    }
    const IntArg* target = position < args.size() ? args.begin() + position : nullptr;
    const char* text = arg;
    if (std::strncmp(arg, "--", 2) == 0) {
      target = nullptr;
      for (const IntArg& candidate : args) {
        const size_t length = std::strlen(candidate.name);
        if (std::strncmp(arg + 2, candidate.name, length) != 0) continue;
        if (arg[2 + length] == '=') text = arg + 3 + length;
        if (arg[2 + length] == '\0' && i + 1 < argc) text = argv[++i];
        if (text != arg) target = &candidate;
      }
    } else {
      ++position;
    }
    char* end = nullptr;
    const long number = target == nullptr ? 0 : std::strtol(text, &end, 10);
    if (target == nullptr || *text == '\0' || *end != '\0' || number < target->low ||
        number > target->high) {
      const bool separate = text == argv[i] && arg != argv[i];  // --NAME VALUE
      std::fprintf(stderr, "%s: unknown or bad argument '%s%s%s' (usage: %s)\n", argv[0], arg,
                   separate ? " " : "", separate ? text : "", usage);
      std::exit(1);
    }
    *target->value = static_cast<int>(number);
  }
}

}  // namespace pagoda::bench

#endif  // PAGODA_BENCH_CUDA_KERNEL_BENCH_ARGS_H_
