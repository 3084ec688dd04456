// The proof's tag and argument checks. The proof over real connections, with
// honest ranks, an impostor and a racer, is in gloo_bootstrap_race_test.cc.
#include "worker/comm/collective_proof.h"

#include <string>

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

}  // namespace
}  // namespace pagoda::worker::comm
