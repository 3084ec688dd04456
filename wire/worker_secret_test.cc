#include <sys/stat.h>
#include "wire/worker_secret.h"

#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <string>

#include "gtest/gtest.h"

namespace pagoda {
namespace {

TEST(WorkerSecretTest, GeneratedSecretsAreLongHexAndDiffer) {
  absl::StatusOr<std::string> first = GenerateWorkerSecret();
  absl::StatusOr<std::string> second = GenerateWorkerSecret();
  ASSERT_TRUE(first.ok() && second.ok());
  EXPECT_EQ(first->size(), 64u);
  EXPECT_EQ(first->find_first_not_of("0123456789abcdef"), std::string::npos);
  EXPECT_NE(*first, *second);
}

TEST(WorkerSecretTest, ReadsFromAPipeAndClosesIt) {
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  const std::string secret = "0123456789abcdef0123\n";
  ASSERT_EQ(write(fds[1], secret.data(), secret.size()), static_cast<ssize_t>(secret.size()));
  close(fds[1]);
  absl::StatusOr<std::string> read_back = ReadWorkerSecretFromFd(fds[0]);
  ASSERT_TRUE(read_back.ok()) << read_back.status();
  EXPECT_EQ(*read_back, "0123456789abcdef0123");  // Newline dropped.
  EXPECT_EQ(close(fds[0]), -1);                   // Already closed.
}

TEST(WorkerSecretTest, ShortOrMissingSecretsAreRefused) {
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  ASSERT_EQ(write(fds[1], "short", 5), 5);
  close(fds[1]);
  EXPECT_EQ(ReadWorkerSecretFromFd(fds[0]).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ReadWorkerSecretFile("/nonexistent/secret").status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(WorkerSecretTest, ReadsAFile) {
  const std::string path = ::testing::TempDir() + "/worker_secret_test_secret";
  std::ofstream(path) << "  a-secret-long-enough-1234  \n";
  chmod(path.c_str(), 0644);
  absl::StatusOr<std::string> refused = ReadWorkerSecretFile(path);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(refused.status().message().find("chmod 600"), std::string::npos) << refused.status();
  chmod(path.c_str(), 0660);
  EXPECT_FALSE(ReadWorkerSecretFile(path).ok());
  chmod(path.c_str(), 0604);
  EXPECT_FALSE(ReadWorkerSecretFile(path).ok());
  chmod(path.c_str(), 0440);  // A Kubernetes Secret under an fsGroup.
  EXPECT_TRUE(ReadWorkerSecretFile(path).ok());
  chmod(path.c_str(), 0600);
  absl::StatusOr<std::string> secret = ReadWorkerSecretFile(path);
  ASSERT_TRUE(secret.ok()) << secret.status();
  EXPECT_EQ(*secret, "a-secret-long-enough-1234");
  std::remove(path.c_str());
}

TEST(WorkerSecretTest, ComparisonNeedsEveryByte) {
  EXPECT_TRUE(ConstantTimeEquals("0123456789abcdef", "0123456789abcdef"));
  EXPECT_FALSE(ConstantTimeEquals("0123456789abcdef", "0123456789abcdeF"));
  EXPECT_FALSE(ConstantTimeEquals("0123456789abcdef", "0123456789abcde"));
  EXPECT_FALSE(ConstantTimeEquals("0123456789abcdef", ""));
}

}  // namespace
}  // namespace pagoda
