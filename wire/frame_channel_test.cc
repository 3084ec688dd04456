#include "wire/frame_channel.h"

#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <string>
#include <thread>

#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace pagoda {
namespace {

class FrameChannelTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds_), 0); }
  void TearDown() override {
    for (int fd : fds_) {
      if (fd >= 0) close(fd);
    }
  }
  void CloseEnd(int end) {
    close(fds_[end]);
    fds_[end] = -1;
  }
  static absl::Time Soon() { return absl::Now() + absl::Seconds(10); }

  int fds_[2] = {-1, -1};
};

TEST_F(FrameChannelTest, FramesOfEverySizeArriveWholeAndInOrder) {
  // Sizes around the 8-byte header and far past a socket buffer, so both
  // sides wait for the other part of the way.
  const size_t sizes[] = {0, 1, 7, 8, 9, 4096, 3 << 20};
  std::thread writer([&] {
    for (size_t size : sizes) {
      std::string payload(size, '\0');
      for (size_t i = 0; i < size; ++i) payload[i] = static_cast<char>(i * 31 + size);
      ASSERT_TRUE(WriteFrame(fds_[0], payload, Soon()).ok());
    }
  });
  for (size_t size : sizes) {
    std::string got;
    ASSERT_TRUE(ReadFrame(fds_[1], Soon(), kMaxFrameBytes, &got).ok()) << size;
    ASSERT_EQ(got.size(), size);
    for (size_t i = 0; i < size; ++i) {
      ASSERT_EQ(got[i], static_cast<char>(i * 31 + size)) << "size " << size << " byte " << i;
    }
  }
  writer.join();
}

TEST_F(FrameChannelTest, EndOfFileIsUnavailable) {
  CloseEnd(0);
  std::string got;
  EXPECT_EQ(ReadFrame(fds_[1], Soon(), kMaxFrameBytes, &got).code(),
            absl::StatusCode::kUnavailable);
}

TEST_F(FrameChannelTest, PeerClosingInsideAFrameIsUnavailable) {
  // A header promising 100 bytes, then 10 of them.
  const char header[8] = {100, 0, 0, 0, 0, 0, 0, 0};
  ASSERT_EQ(write(fds_[0], header, sizeof(header)), 8);
  ASSERT_EQ(write(fds_[0], "0123456789", 10), 10);
  CloseEnd(0);
  std::string got;
  EXPECT_EQ(ReadFrame(fds_[1], Soon(), kMaxFrameBytes, &got).code(),
            absl::StatusCode::kUnavailable);
}

TEST_F(FrameChannelTest, MemoryFollowsTheBytesThatArriveNotTheLengthPrefix) {
  // A header promising 200 MiB (within the bound), then 10 bytes: the reader
  // holds little more than what arrived, not what the prefix claimed.
  const uint64_t claimed = uint64_t{200} << 20;
  unsigned char header[8];
  for (int i = 0; i < 8; ++i) header[i] = static_cast<unsigned char>(claimed >> (8 * i));
  ASSERT_EQ(write(fds_[0], header, sizeof(header)), 8);
  ASSERT_EQ(write(fds_[0], "0123456789", 10), 10);
  CloseEnd(0);
  std::string got;
  EXPECT_EQ(ReadFrame(fds_[1], Soon(), kMaxFrameBytes, &got).code(),
            absl::StatusCode::kUnavailable);
  EXPECT_LE(got.capacity(), size_t{1} << 20);
}

TEST_F(FrameChannelTest, OversizedLengthIsRefusedBeforeAllocating) {
  ASSERT_TRUE(WriteFrame(fds_[0], std::string(65, 'x'), Soon()).ok());
  std::string got;
  EXPECT_EQ(ReadFrame(fds_[1], Soon(), /*max_bytes=*/64, &got).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(FrameChannelTest, HugeLengthPrefixIsRefused) {
  // A header claiming 2^63 bytes against the default bound.
  const unsigned char header[8] = {0, 0, 0, 0, 0, 0, 0, 0x80};
  ASSERT_EQ(write(fds_[0], header, sizeof(header)), 8);
  std::string got;
  EXPECT_EQ(ReadFrame(fds_[1], Soon(), kMaxFrameBytes, &got).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(FrameChannelTest, ReadWithNothingToReadEndsAtTheDeadline) {
  std::string got;
  const absl::Time start = absl::Now();
  EXPECT_EQ(ReadFrame(fds_[1], start + absl::Milliseconds(50), kMaxFrameBytes, &got).code(),
            absl::StatusCode::kDeadlineExceeded);
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(50));
}

TEST_F(FrameChannelTest, KeepWaitingFalseCancelsTheWait) {
  std::atomic<bool> keep{true};
  std::thread canceller([&] {
    absl::SleepFor(absl::Milliseconds(30));
    keep.store(false);
  });
  std::string got;
  const absl::Status status = ReadFrame(
      fds_[1], Soon(), kMaxFrameBytes, &got, [&] { return keep.load(); }, absl::Milliseconds(5));
  canceller.join();
  EXPECT_EQ(status.code(), absl::StatusCode::kCancelled);
}

TEST_F(FrameChannelTest, WritingToAClosedPeerIsUnavailableNotSigpipe) {
  CloseEnd(1);
  EXPECT_EQ(WriteFrame(fds_[0], "plan", Soon()).code(), absl::StatusCode::kUnavailable);
}

TEST_F(FrameChannelTest, WriteIntoAFullChannelEndsAtTheDeadline) {
  // Nobody reads: the socket buffer fills and the write must not block past
  // its deadline.
  const std::string big(8 << 20, 'x');
  EXPECT_EQ(WriteFrame(fds_[0], big, absl::Now() + absl::Milliseconds(50)).code(),
            absl::StatusCode::kDeadlineExceeded);
}

}  // namespace
}  // namespace pagoda
