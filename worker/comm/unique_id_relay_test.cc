// Rank 0's unique id reaches every rank through the rendezvous store; a rank
// whose rank 0 never publishes gives up at its timeout; bad sizes are refused.
#include "worker/comm/unique_id_relay.h"

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "wire/rendezvous_store_server.h"
#include "wire/worker_secret.h"

namespace pagoda::worker::comm {

using ::pagoda::wire::RendezvousStoreServer;
namespace {

class UniqueIdRelayTest : public ::testing::Test {
 protected:
  void SetUp() override {
    RendezvousStoreServer::Options options;
    options.secret = GenerateWorkerSecret().value();
    auto server = RendezvousStoreServer::Start(options);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
    address_ = RendezvousAddress{"127.0.0.1", server_->port(), options.secret, "launch7"};
  }

  std::unique_ptr<RendezvousStoreServer> server_;
  RendezvousAddress address_;
};

TEST_F(UniqueIdRelayTest, EveryRankGetsRankZerosId) {
  const std::string made(128, '\x5a');
  int created = 0;
  std::vector<absl::StatusOr<std::string>> ids(4, absl::UnknownError("not run"));
  std::vector<std::thread> ranks;
  // The other ranks ask before rank 0 has published: they wait for it.
  for (int rank = 3; rank >= 0; --rank) {
    ranks.emplace_back([&, rank] {
      if (rank == 0) std::this_thread::sleep_for(std::chrono::milliseconds(200));
      ids[rank] = ShareUniqueId(address_, rank, std::chrono::seconds(10), made.size(),
                                [&]() -> absl::StatusOr<std::string> {
                                  ++created;
                                  return made;
                                });
    });
  }
  for (std::thread& rank : ranks) rank.join();
  EXPECT_EQ(created, 1);  // Only rank 0 creates.
  for (int rank = 0; rank < 4; ++rank) {
    ASSERT_TRUE(ids[rank].ok()) << "rank " << rank << ": " << ids[rank].status();
    EXPECT_EQ(*ids[rank], made) << "rank " << rank;
  }
}

TEST_F(UniqueIdRelayTest, NoPublisherTimesOutAndBadSizesAreRefused) {
  const auto start = std::chrono::steady_clock::now();
  auto waited =
      ShareUniqueId(address_, 1, std::chrono::milliseconds(500), 128,
                    []() -> absl::StatusOr<std::string> { return std::string(128, 'x'); });
  EXPECT_EQ(waited.status().code(), absl::StatusCode::kDeadlineExceeded) << waited.status();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));

  auto short_id =
      ShareUniqueId(address_, 0, std::chrono::seconds(2), 128,
                    []() -> absl::StatusOr<std::string> { return std::string(7, 'x'); });
  EXPECT_EQ(short_id.status().code(), absl::StatusCode::kInvalidArgument);
  auto failed =
      ShareUniqueId(address_, 0, std::chrono::seconds(2), 128,
                    []() -> absl::StatusOr<std::string> { return absl::InternalError("no GPU"); });
  EXPECT_EQ(failed.status().code(), absl::StatusCode::kInternal);

  RendezvousAddress wrong = address_;
  wrong.secret = std::string(32, 'w');
  auto refused = ShareUniqueId(wrong, 1, std::chrono::seconds(2), 128,
                               []() -> absl::StatusOr<std::string> { return std::string(); });
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kPermissionDenied) << refused.status();
}

}  // namespace
}  // namespace pagoda::worker::comm
