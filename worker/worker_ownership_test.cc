#include "worker/worker_ownership.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "absl/time/time.h"
#include "wire/worker_owner.h"

namespace pagoda::worker {
namespace {

using ::testing::HasSubstr;

const std::string kFirst(32, 'a');
const std::string kSecond(32, 'b');
const absl::Time kStart = absl::FromUnixSeconds(1000);

TEST(WorkerOwnershipTest, TheFirstLoadBindsAndAnotherServerIsRefused) {
  WorkerOwnership ownership(absl::Seconds(30));
  EXPECT_TRUE(ownership.Check(kSecond, kStart).ok()) << "nobody owns a fresh worker";
  ASSERT_TRUE(ownership.Claim(kFirst, kStart).ok());
  const absl::Status refused = ownership.Claim(kSecond, kStart + absl::Seconds(1));
  EXPECT_EQ(refused.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(refused.message(), HasSubstr("serves another server (owner aaaaaaaa..."));
  EXPECT_EQ(ownership.Check(kSecond, kStart + absl::Seconds(2)).code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(ownership.Check(kFirst, kStart + absl::Seconds(2)).ok());
  EXPECT_TRUE(ownership.Claim(kFirst, kStart + absl::Seconds(3)).ok()) << "the owner reloads";
}

TEST(WorkerOwnershipTest, TheOwnersCallsKeepItAndItsSilenceLetsGo) {
  WorkerOwnership ownership(absl::Seconds(30));
  ASSERT_TRUE(ownership.Claim(kFirst, kStart).ok());
  // Heartbeats every 20 s: never 30 s silent, so never taken.
  for (int i = 1; i <= 5; ++i) {
    ASSERT_TRUE(ownership.Check(kFirst, kStart + absl::Seconds(20 * i)).ok());
    EXPECT_FALSE(ownership.Claim(kSecond, kStart + absl::Seconds(20 * i + 10)).ok());
  }
  // 31 s of silence: another server may take over, and the old one is out.
  const absl::Time later = kStart + absl::Seconds(100 + 31);
  EXPECT_TRUE(ownership.Claim(kSecond, later).ok());
  EXPECT_EQ(ownership.Check(kFirst, later).code(), absl::StatusCode::kFailedPrecondition);
}

TEST(WorkerOwnershipTest, OnlyTheOwnersShutdownReleases) {
  WorkerOwnership ownership(absl::Seconds(30));
  ASSERT_TRUE(ownership.Claim(kFirst, kStart).ok());
  ownership.Release(kSecond);
  EXPECT_FALSE(ownership.Claim(kSecond, kStart).ok());
  ownership.Release(kFirst);
  EXPECT_TRUE(ownership.Claim(kSecond, kStart).ok());
}

TEST(WorkerOwnershipTest, MalformedIdsAreInvalidArguments) {
  WorkerOwnership ownership(absl::Seconds(30));
  for (const std::string& id :
       {std::string(), std::string(31, 'a'), std::string(33, 'a'), std::string(32, 'A'),
        std::string(31, 'a') + "\n", std::string(32, 'g')}) {
    EXPECT_EQ(ownership.Claim(id, kStart).code(), absl::StatusCode::kInvalidArgument) << id;
    EXPECT_EQ(ownership.Check(id, kStart).code(), absl::StatusCode::kInvalidArgument) << id;
  }
}

TEST(WorkerOwnerIdTest, GeneratedIdsAreValidAndDistinct) {
  auto first = wire::GenerateWorkerOwnerId();
  auto second = wire::GenerateWorkerOwnerId();
  ASSERT_TRUE(first.ok() && second.ok());
  EXPECT_TRUE(wire::ValidateWorkerOwnerId(*first).ok()) << *first;
  EXPECT_NE(*first, *second);
}

}  // namespace
}  // namespace pagoda::worker
