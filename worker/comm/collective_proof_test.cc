// The proof NCCL groups run (ProveGroupSecret): its tag, its argument checks,
// and whole groups of threads exchanging through memory, honest or with an
// impostor. The CPU ranks' per-connection proof (tcp_mesh.h), with a racer,
// is in tcp_bootstrap_race_test.cc.
#include "worker/comm/collective_proof.h"

#include <condition_variable>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "gtest/gtest.h"

namespace pagoda::worker::comm {
namespace {

const std::string kSecret(32, 's');
const std::string kNonces(2 * kProofNonceBytes, 'n');

TEST(ProofTagTest, IsHmacSha256OfEveryField) {
  const std::string tag = ProofTag(kSecret, "group1", 2, 0, kNonces);
  ASSERT_EQ(tag.size(), kProofTagBytes);
  EXPECT_EQ(tag, ProofTag(kSecret, "group1", 2, 0, kNonces));
  EXPECT_NE(tag, ProofTag(std::string(32, 't'), "group1", 2, 0, kNonces));
  EXPECT_NE(tag, ProofTag(kSecret, "group2", 2, 0, kNonces));
  EXPECT_NE(tag, ProofTag(kSecret, "group1", 3, 0, kNonces));
  EXPECT_NE(tag, ProofTag(kSecret, "group1", 2, 1, kNonces));
  std::string other_nonces = kNonces;
  other_nonces.back() = 'm';
  EXPECT_NE(tag, ProofTag(kSecret, "group1", 2, 0, other_nonces));
  // Fields are length-prefixed: moving a byte from one field to the next
  // changes the tag.
  EXPECT_NE(ProofTag(kSecret, "group1n", 2, 0, kNonces.substr(1)),
            ProofTag(kSecret, "group1", 2, 0, kNonces));
}

TEST(ProveGroupSecretTest, RefusesBadArgumentsWithoutGathering) {
  int gathers = 0;
  GatherBytes counting = [&gathers](char*, size_t) {
    ++gathers;
    return absl::OkStatus();
  };
  EXPECT_EQ(ProveGroupSecret(2, 2, kSecret, "g", counting).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ProveGroupSecret(0, 0, kSecret, "g", counting).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ProveGroupSecret(0, 2, "short", "g", counting).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(gathers, 0);
  // One rank has no peer to convince.
  EXPECT_TRUE(ProveGroupSecret(0, 1, kSecret, "g", counting).ok());
  EXPECT_EQ(gathers, 0);
}

TEST(ProveGroupSecretTest, SilentPeerFailsTheProof) {
  // A gather that brings nothing from the peer leaves its tag all zeros.
  GatherBytes nothing_arrives = [](char*, size_t) { return absl::OkStatus(); };
  absl::Status status = ProveGroupSecret(0, 2, kSecret, "g", nothing_arrives);
  EXPECT_EQ(status.code(), absl::StatusCode::kPermissionDenied) << status;
  GatherBytes broken = [](char*, size_t) { return absl::UnavailableError("peer gone"); };
  EXPECT_EQ(ProveGroupSecret(0, 2, kSecret, "g", broken).code(), absl::StatusCode::kUnavailable);
}

// An all-gather of bytes among threads: each call copies its part in, waits
// for every rank's, and copies all parts out (one round at a time).
class MemoryGather {
 public:
  explicit MemoryGather(int world) : world_(world) {}

  GatherBytes For(int rank) {
    return [this, rank](char* all, size_t part_bytes) {
      std::unique_lock<std::mutex> lock(mu_);
      // The previous round's readers must all have left first.
      changed_.wait(lock, [&] { return leaving_ == 0; });
      parts_.resize(part_bytes * world_);
      std::memcpy(parts_.data() + part_bytes * rank, all + part_bytes * rank, part_bytes);
      const int round = round_;
      if (++arrived_ == world_) {
        arrived_ = 0;
        leaving_ = world_;
        ++round_;
        changed_.notify_all();
      }
      changed_.wait(lock, [&] { return round_ != round; });
      std::memcpy(all, parts_.data(), part_bytes * world_);
      if (--leaving_ == 0) changed_.notify_all();
      return absl::OkStatus();
    };
  }

 private:
  const int world_;
  std::mutex mu_;
  std::condition_variable changed_;
  int round_ = 0;
  int arrived_ = 0;
  int leaving_ = 0;
  std::vector<char> parts_;
};

std::vector<absl::Status> RunGroup(const std::vector<std::string>& secrets) {
  const int world = static_cast<int>(secrets.size());
  MemoryGather gather(world);
  std::vector<absl::Status> statuses(world);
  std::vector<std::thread> ranks;
  for (int r = 0; r < world; ++r) {
    ranks.emplace_back(
        [&, r] { statuses[r] = ProveGroupSecret(r, world, secrets[r], "group", gather.For(r)); });
  }
  for (std::thread& rank : ranks) rank.join();
  return statuses;
}

TEST(ProveGroupSecretTest, HonestRanksProveItToEachOther) {
  for (const absl::Status& status : RunGroup({kSecret, kSecret, kSecret, kSecret})) {
    EXPECT_TRUE(status.ok()) << status;
  }
}

TEST(ProveGroupSecretTest, EveryHonestRankNamesTheImpostor) {
  const std::vector<absl::Status> statuses =
      RunGroup({kSecret, kSecret, std::string(32, 'w'), kSecret});
  for (int r : {0, 1, 3}) {
    EXPECT_EQ(statuses[r].code(), absl::StatusCode::kPermissionDenied) << statuses[r];
    EXPECT_TRUE(absl::StrContains(statuses[r].message(), "rank 2")) << statuses[r];
  }
  EXPECT_FALSE(statuses[2].ok());
}

}  // namespace
}  // namespace pagoda::worker::comm
