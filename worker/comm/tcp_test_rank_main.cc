// One rank of the multi-process TCP communicator tests (tcp_communicator_test.cc).
//
//   pagoda_tcp_test_rank SCENARIO RANK WORLD PORT TIMEOUT_MS
//
// The rendezvous secret comes in PAGODA_TEST_RENDEZVOUS_SECRET (environment,
// not argv, which other users can read). The rank checks its own results and
// exits 0 on success, 1 with a message on stderr otherwise. Scenarios:
//   collectives  all-reduce and all-gather over every dtype and odd counts
//   die          the last rank kills itself after joining; the others must
//                see a failed all-reduce well within the timeout
//   hang         the last rank joins and then stays away; the others must
//                see DEADLINE_EXCEEDED after about the timeout
//   abort        the last rank stays away; rank 0 aborts itself from another
//                thread while waiting; everyone must fail fast
//   bench        rank 0 prints the median all-reduce time for decode- and
//                prefill-sized f32 buffers
//
//   pagoda_tcp_test_rank launch SCENARIO WORLD TIMEOUT_MS
//
// starts a rendezvous store and WORLD ranks of this binary on loopback, and
// exits 0 when every rank did, e.g. `launch bench 4 30000` for figures.
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "common/dtype.h"
#include "worker/comm/tcp_communicator.h"
#include "worker/comm/rank_group_for_test.h"

namespace pagoda::worker::comm {
namespace {

using Clock = std::chrono::steady_clock;

int Fail(const std::string& message) {
  std::fprintf(stderr, "%s\n", message.c_str());
  return 1;
}

// Deterministic inputs every rank can recompute for every other rank; small
// integers plus a fraction exact in bf16 so the expected sum is well defined.
float InputValue(int rank, size_t index) {
  return static_cast<float>((static_cast<int>(index * 7 + rank * 13) % 31) - 15) *
         (rank % 2 == 0 ? 0.5f : 0.375f);
}

std::vector<uint8_t> Encode(DType dtype, const std::vector<float>& values) {
  std::vector<uint8_t> bytes(values.size() * DTypeSize(dtype));
  for (size_t i = 0; i < values.size(); ++i) {
    if (dtype == DType::kF32) {
      std::memcpy(bytes.data() + 4 * i, &values[i], 4);
    } else {
      uint16_t bits = dtype == DType::kF16 ? FloatToHalf(values[i]) : FloatToBFloat16(values[i]);
      std::memcpy(bytes.data() + 2 * i, &bits, 2);
    }
  }
  return bytes;
}

std::vector<float> Decode(DType dtype, const std::vector<uint8_t>& bytes, size_t count) {
  std::vector<float> values(count);
  ConvertToFloat(dtype, bytes.data(), count, values.data());
  return values;
}

int CheckAllReduce(CollectiveCommunicator& comm, DType dtype, size_t count) {
  const int world = comm.world_size();
  std::vector<float> mine(count);
  for (size_t i = 0; i < count; ++i) mine[i] = InputValue(comm.rank(), i);
  std::vector<uint8_t> data = Encode(dtype, mine);
  absl::Status status = comm.AllReduceSum(data.data(), count, dtype);
  if (!status.ok()) return Fail("AllReduceSum: " + status.ToString());
  std::vector<float> got = Decode(dtype, data, count);
  for (size_t i = 0; i < count; ++i) {
    float exact_f32 = 0;  // The plain sum, in rank order, in f32.
    double exact = 0;
    for (int r = 0; r < world; ++r) {
      // Each rank's input as the dtype holds it.
      float input = Decode(dtype, Encode(dtype, {InputValue(r, i)}), 1)[0];
      exact_f32 += input;
      exact += input;
    }
    bool ok = dtype == DType::kF32
                  ? got[i] == exact_f32
                  : std::fabs(got[i] - exact) <=
                        std::fabs(exact) * (dtype == DType::kBF16 ? 0x1p-8 : 0x1p-11);
    if (!ok) {
      return Fail("AllReduceSum " + std::string(DTypeName(dtype)) + " count " +
                  std::to_string(count) + " index " + std::to_string(i) + ": got " +
                  std::to_string(got[i]) + " want " + std::to_string(exact));
    }
  }
  return 0;
}

int CheckAllGather(CollectiveCommunicator& comm, DType dtype, size_t count) {
  const int world = comm.world_size();
  std::vector<float> all(count * world, -1000.0f);  // Others' parts start as garbage.
  for (size_t i = 0; i < count; ++i) all[comm.rank() * count + i] = InputValue(comm.rank(), i);
  std::vector<uint8_t> data = Encode(dtype, all);
  absl::Status status = comm.AllGather(data.data(), count, dtype);
  if (!status.ok()) return Fail("AllGather: " + status.ToString());
  std::vector<uint8_t> want_all;
  for (int r = 0; r < world; ++r) {
    std::vector<float> part(count);
    for (size_t i = 0; i < count; ++i) part[i] = InputValue(r, i);
    std::vector<uint8_t> bytes = Encode(dtype, part);
    want_all.insert(want_all.end(), bytes.begin(), bytes.end());
  }
  if (data != want_all) {
    return Fail("AllGather " + std::string(DTypeName(dtype)) + " count " + std::to_string(count) +
                ": parts out of order or wrong");
  }
  return 0;
}

int RunCollectives(CollectiveCommunicator& comm) {
  for (DType dtype : {DType::kF32, DType::kBF16, DType::kF16}) {
    for (size_t count : {size_t{1}, size_t{3}, size_t{8}, size_t{13}, size_t{1000}, size_t{4099}}) {
      if (int rc = CheckAllReduce(comm, dtype, count); rc != 0) return rc;
      if (int rc = CheckAllGather(comm, dtype, count); rc != 0) return rc;
    }
  }
  // A zero count is a no-op that keeps the group usable.
  if (absl::Status s = comm.AllReduceSum(nullptr, 0, DType::kF32); !s.ok()) {
    return Fail("AllReduceSum of 0 elements: " + s.ToString());
  }
  return CheckAllReduce(comm, DType::kF32, 5);
}

// The survivors' side of die/hang/abort: one all-reduce that must fail with
// one of `codes`, within `limit`.
int ExpectFailure(CollectiveCommunicator& comm, std::vector<absl::StatusCode> codes,
                  std::chrono::milliseconds limit) {
  std::vector<float> data(64, 1.0f);
  auto start = Clock::now();
  absl::Status status = comm.AllReduceSum(data.data(), data.size(), DType::kF32);
  auto took = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start);
  std::fprintf(stderr, "rank %d: %s after %lld ms\n", comm.rank(), status.ToString().c_str(),
               static_cast<long long>(took.count()));
  bool expected_code = false;
  for (absl::StatusCode code : codes) expected_code |= status.code() == code;
  if (!expected_code) return Fail("unexpected status " + status.ToString());
  if (took > limit) return Fail("failure took " + std::to_string(took.count()) + " ms");
  // Sticky: the next collective fails at once.
  start = Clock::now();
  absl::Status again = comm.AllReduceSum(data.data(), data.size(), DType::kF32);
  if (again.ok() || Clock::now() - start > std::chrono::milliseconds(100)) {
    return Fail("a collective after a failure did not fail at once");
  }
  return 0;
}

// Median wall time of an all-reduce of `count` f32 on this rank.
double MedianAllReduceMicros(CollectiveCommunicator& comm, size_t count, int repeats) {
  std::vector<float> data(count, 1.0f);
  std::vector<double> micros;
  for (int i = 0; i < repeats; ++i) {
    auto start = Clock::now();
    if (!comm.AllReduceSum(data.data(), count, DType::kF32).ok()) return -1;
    micros.push_back(std::chrono::duration<double, std::micro>(Clock::now() - start).count());
  }
  std::sort(micros.begin(), micros.end());
  return micros[micros.size() / 2];
}

int RunBench(CollectiveCommunicator& comm) {
  // hidden 1024 x 1 token (decode), x 16 (batched decode), x 512 (prefill).
  for (size_t tokens : {size_t{1}, size_t{16}, size_t{512}}) {
    const size_t count = tokens * 1024;
    double median = MedianAllReduceMicros(comm, count, tokens == 512 ? 50 : 500);
    if (median < 0) return Fail("all-reduce failed during the benchmark");
    if (comm.rank() == 0) {
      std::printf("world %d  all-reduce %zu f32 (%zu tokens x 1024)  median %.1f us\n",
                  comm.world_size(), count, tokens, median);
    }
  }
  return 0;
}

int Run(const std::string& scenario, const TcpCollectiveOptions& options) {
  absl::StatusOr<std::unique_ptr<CollectiveCommunicator>> comm = CreateTcpCommunicator(options);
  if (!comm.ok()) return Fail("join: " + comm.status().ToString());
  const bool last = options.rank == options.world_size - 1;
  const auto timeout = options.timeout;
  if (scenario == "collectives") return RunCollectives(**comm);
  if (scenario == "bench") return RunBench(**comm);
  // One good collective first, so every rank has finished joining before a
  // rank misbehaves.
  if (int rc = CheckAllReduce(**comm, DType::kF32, 5); rc != 0) return rc;
  if (scenario == "die") {
    // Die only once the others are past the check and waiting in the next
    // collective: dying with their check data unread would reset the
    // connections under the check itself (a different, earlier failure).
    if (last) {
      std::this_thread::sleep_for(std::chrono::milliseconds(500));
      raise(SIGKILL);
    }
    return ExpectFailure(**comm, {absl::StatusCode::kUnavailable}, timeout / 2);
  }
  if (scenario == "hang") {
    if (last) {
      std::this_thread::sleep_for(timeout * 3);
      return 0;
    }
    return ExpectFailure(
        **comm, {absl::StatusCode::kDeadlineExceeded, absl::StatusCode::kUnavailable}, timeout * 2);
  }
  if (scenario == "abort") {
    // Timeout 30 s: anything that fails well before it failed by the abort.
    if (last) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1500));
      return ExpectFailure(**comm, {absl::StatusCode::kUnavailable, absl::StatusCode::kAborted},
                           std::chrono::milliseconds(3000));
    }
    std::thread aborter;
    if (options.rank == 0) {
      aborter = std::thread([&comm] {
        std::this_thread::sleep_for(std::chrono::milliseconds(300));
        (*comm)->Abort();
      });
    }
    int rc = ExpectFailure(**comm,
                           options.rank == 0
                               ? std::vector<absl::StatusCode>{absl::StatusCode::kAborted}
                               : std::vector<absl::StatusCode>{absl::StatusCode::kUnavailable},
                           std::chrono::milliseconds(3000));
    if (aborter.joinable()) aborter.join();
    return rc;
  }
  return Fail("unknown scenario " + scenario);
}

// The launcher: a store, then WORLD ranks of this same binary.
int Launch(const char* self, const std::string& scenario, int world, const std::string& timeout) {
  auto run = RunRankGroup(
      world,
      [&](int rank, int port) {
        return std::vector<std::string>{
            self,   scenario, std::to_string(rank), std::to_string(world), std::to_string(port),
            timeout};
      },
      std::chrono::hours(1));
  if (!run.ok()) return Fail(run.status().ToString());
  for (const RankOutcome& rank : run->ranks) {
    if (!rank.succeeded()) return 1;
  }
  return 0;
}

}  // namespace
}  // namespace pagoda::worker::comm

int main(int argc, char** argv) {
  if (argc == 5 && std::string(argv[1]) == "launch") {
    return pagoda::worker::comm::Launch("/proc/self/exe", argv[2], std::atoi(argv[3]), argv[4]);
  }
  if (argc != 6) {
    std::fprintf(stderr, "usage: %s SCENARIO RANK WORLD PORT TIMEOUT_MS\n", argv[0]);
    return 2;
  }
  const char* secret = std::getenv(pagoda::worker::comm::kTestRendezvousSecretEnv);
  pagoda::worker::comm::TcpCollectiveOptions options;
  options.rank = std::atoi(argv[2]);
  options.world_size = std::atoi(argv[3]);
  options.rendezvous = {"127.0.0.1", std::atoi(argv[4]), secret == nullptr ? "" : secret, "test"};
  options.timeout = std::chrono::milliseconds(std::atoi(argv[5]));
  options.group_secret = options.rendezvous.secret;
  return pagoda::worker::comm::Run(argv[1], options);
}
