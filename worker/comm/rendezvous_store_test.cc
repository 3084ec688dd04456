#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <thread>

#include "gtest/gtest.h"
#include "wire/rendezvous_protocol.h"
#include "wire/rendezvous_store_server.h"
#include "worker/comm/rendezvous_store_client.h"
#include "wire/worker_secret.h"

namespace pagoda::worker::comm {

using ::pagoda::wire::RendezvousStoreServer;
namespace {

using std::chrono::milliseconds;

class RendezvousStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    options_.secret = GenerateWorkerSecret().value();
    options_.max_connections = 4;
    auto server = RendezvousStoreServer::Start(options_);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
  }

  RendezvousAddress Address(const std::string& prefix = "group") const {
    return {"127.0.0.1", server_->port(), options_.secret, prefix};
  }

  // A raw connection, for sending hand-made frames.
  int RawConnect() const {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_port = htons(static_cast<uint16_t>(server_->port()));
    inet_pton(AF_INET, "127.0.0.1", &address.sin_addr);
    EXPECT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0);
    return fd;
  }

  // Sends `bytes` and reports whether the server then closed the connection
  // (reading whatever reply came first).
  bool ServerClosesAfter(int fd, const std::string& bytes) const {
    send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL);
    char buffer[256];
    timeval tv{5, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    bool closed = false;
    while (true) {
      ssize_t n = recv(fd, buffer, sizeof(buffer), 0);
      if (n > 0) continue;
      closed = n == 0 || errno == ECONNRESET;  // Not a 5 s timeout.
      break;
    }
    close(fd);
    return closed;
  }

  std::string Hello() const {
    return rendezvous::EncodeRequest({rendezvous::Op::kHello, "", options_.secret});
  }

  RendezvousStoreServer::Options options_;
  std::unique_ptr<RendezvousStoreServer> server_;
};

TEST_F(RendezvousStoreTest, SetThenGetAcrossClientsAndPrefixes) {
  auto writer = RendezvousStoreClient::Connect(Address(), milliseconds(2000));
  auto reader = RendezvousStoreClient::Connect(Address(), milliseconds(2000));
  auto other_group = RendezvousStoreClient::Connect(Address("other"), milliseconds(300));
  ASSERT_TRUE(writer.ok() && reader.ok() && other_group.ok());
  std::thread late_set([&] {
    std::this_thread::sleep_for(milliseconds(100));
    ASSERT_TRUE((*writer)->Set("rank_0", std::string("\0\x01\xff", 3)).ok());
  });
  auto value = (*reader)->Get("rank_0");  // Waits for the late set.
  late_set.join();
  ASSERT_TRUE(value.ok()) << value.status();
  EXPECT_EQ(*value, std::string("\0\x01\xff", 3));
  EXPECT_EQ((*other_group)->Get("rank_0").status().code(), absl::StatusCode::kDeadlineExceeded);
}

// The store answers a waiting Get the moment the key is set (kWait), not at
// a next poll; a wait past its bound ends with NOT_FOUND, which the client
// turns into DEADLINE_EXCEEDED at its own deadline.
TEST_F(RendezvousStoreTest, WaitingGetIsAnsweredWhenTheKeyIsSet) {
  auto writer = RendezvousStoreClient::Connect(Address(), milliseconds(2000));
  auto reader = RendezvousStoreClient::Connect(Address(), milliseconds(2000));
  ASSERT_TRUE(writer.ok() && reader.ok());
  std::chrono::steady_clock::time_point set_at;
  std::thread late_set([&] {
    std::this_thread::sleep_for(milliseconds(150));
    set_at = std::chrono::steady_clock::now();
    ASSERT_TRUE((*writer)->Set("late", "v").ok());
  });
  auto value = (*reader)->GetUntil("late", std::chrono::steady_clock::now() + milliseconds(5000));
  const auto answered = std::chrono::steady_clock::now();
  late_set.join();
  ASSERT_TRUE(value.ok()) << value.status();
  // A poll doubling up to 50 ms would answer up to 50 ms late; a waiting
  // store answers within a scheduler tick (generous: the machine is shared).
  EXPECT_LT(answered - set_at, milliseconds(40));

  const auto start = std::chrono::steady_clock::now();
  // Longer than one wait (kMaxWaitMillis): the client asks again.
  EXPECT_EQ((*reader)->GetUntil("never", start + milliseconds(1100)).status().code(),
            absl::StatusCode::kDeadlineExceeded);
  EXPECT_GE(std::chrono::steady_clock::now() - start, milliseconds(1100));
  EXPECT_LT(std::chrono::steady_clock::now() - start, milliseconds(3000));
}

TEST_F(RendezvousStoreTest, InterruptEndsAWaitAtOnce) {
  auto waiter = RendezvousStoreClient::Connect(Address(), milliseconds(2000));
  ASSERT_TRUE(waiter.ok());
  const auto start = std::chrono::steady_clock::now();
  std::thread interrupter([&] {
    std::this_thread::sleep_for(milliseconds(100));
    (*waiter)->Interrupt();
  });
  auto value = (*waiter)->GetUntil("never", start + milliseconds(10000));
  interrupter.join();
  EXPECT_EQ(value.status().code(), absl::StatusCode::kUnavailable) << value.status();
  EXPECT_LT(std::chrono::steady_clock::now() - start, milliseconds(2000));
  EXPECT_FALSE((*waiter)->Set("k", "v").ok());
}

TEST_F(RendezvousStoreTest, WrongSecretIsRefused) {
  RendezvousAddress address = Address();
  address.secret = std::string(64, 'a');
  EXPECT_EQ(RendezvousStoreClient::Connect(address, milliseconds(2000)).status().code(),
            absl::StatusCode::kPermissionDenied);
  address.secret = "short";
  EXPECT_EQ(RendezvousStoreClient::Connect(address, milliseconds(2000)).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(RendezvousStoreTest, MalformedFramesCloseTheConnection) {
  std::string get = rendezvous::EncodeRequest({rendezvous::Op::kGet, "g/k", ""});
  // A request before the hello.
  EXPECT_TRUE(ServerClosesAfter(RawConnect(), get));
  // Bad magic.
  std::string bad_magic = Hello();
  bad_magic[0] = 'X';
  EXPECT_TRUE(ServerClosesAfter(RawConnect(), bad_magic));
  // Unknown op after a good hello.
  std::string unknown_op = get;
  unknown_op[4] = 9;
  EXPECT_TRUE(ServerClosesAfter(RawConnect(), Hello() + unknown_op));
  // Key longer than the bound: refused from the header, body never read.
  std::string long_key = rendezvous::EncodeRequest(
      {rendezvous::Op::kSet, std::string(rendezvous::kMaxKeyBytes + 1, 'k'), "v"});
  EXPECT_TRUE(ServerClosesAfter(RawConnect(), Hello() + long_key.substr(0, 11)));
  // Value length over the bound (a 4 GiB claim).
  std::string huge_value = rendezvous::EncodeRequest({rendezvous::Op::kSet, "g/k", ""});
  huge_value[7] = huge_value[8] = huge_value[9] = huge_value[10] = '\xff';
  EXPECT_TRUE(ServerClosesAfter(RawConnect(), Hello() + huge_value));
  // A key with a control byte.
  EXPECT_TRUE(ServerClosesAfter(
      RawConnect(), Hello() + rendezvous::EncodeRequest({rendezvous::Op::kSet, "g/\n", "v"})));
  // An empty key.
  EXPECT_TRUE(ServerClosesAfter(
      RawConnect(), Hello() + rendezvous::EncodeRequest({rendezvous::Op::kSet, "", "v"})));
  // A second hello.
  EXPECT_TRUE(ServerClosesAfter(RawConnect(), Hello() + Hello()));
  // A wait whose value is not a 4-byte duration.
  EXPECT_TRUE(ServerClosesAfter(
      RawConnect(), Hello() + rendezvous::EncodeRequest({rendezvous::Op::kWait, "g/k", "12"})));
  // Wait for the server threads to count them all.
  for (int i = 0; i < 100 && server_->rejected_connections() < 9; ++i) {
    std::this_thread::sleep_for(milliseconds(10));
  }
  EXPECT_EQ(server_->rejected_connections(), 9);
  // The store still serves well-formed clients.
  auto client = RendezvousStoreClient::Connect(Address(), milliseconds(2000));
  ASSERT_TRUE(client.ok());
  EXPECT_TRUE((*client)->Set("k", "v").ok());
}

TEST_F(RendezvousStoreTest, StoreAndConnectionsAreBounded) {
  auto client = RendezvousStoreClient::Connect(Address(), milliseconds(2000));
  ASSERT_TRUE(client.ok());
  const std::string megabyte(rendezvous::kMaxValueBytes, 'v');
  absl::Status status;
  int stored = 0;
  for (; stored < 32 && status.ok(); ++stored) {
    status = (*client)->Set("big" + std::to_string(stored), megabyte);
  }
  EXPECT_EQ(status.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_LE(static_cast<size_t>(stored - 1) * megabyte.size(),
            RendezvousStoreServer::kMaxStoreBytes);
  EXPECT_EQ((*client)->Set("k", std::string(rendezvous::kMaxValueBytes + 1, 'v')).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ((*client)->Set(std::string(300, 'k'), "v").code(), absl::StatusCode::kInvalidArgument);

  // max_connections = 4: the client above and 3 idle raw ones fill it.
  int idle[3] = {RawConnect(), RawConnect(), RawConnect()};
  std::this_thread::sleep_for(milliseconds(300));
  EXPECT_EQ(RendezvousStoreClient::Connect(Address(), milliseconds(1000)).status().code(),
            absl::StatusCode::kResourceExhausted);
  for (int fd : idle) close(fd);
}

TEST_F(RendezvousStoreTest, SilentConnectionIsDroppedBeforeAuthenticating) {
  auto start = std::chrono::steady_clock::now();
  EXPECT_TRUE(ServerClosesAfter(RawConnect(), ""));
  EXPECT_LT(std::chrono::steady_clock::now() - start, milliseconds(4000));
}

TEST(RendezvousStoreServerTest, RefusesBadOptions) {
  RendezvousStoreServer::Options options;
  options.secret = "too short";
  EXPECT_EQ(RendezvousStoreServer::Start(options).status().code(),
            absl::StatusCode::kInvalidArgument);
  options.secret = std::string(32, 's');
  options.host = "not-an-ip";
  EXPECT_EQ(RendezvousStoreServer::Start(options).status().code(),
            absl::StatusCode::kInvalidArgument);
  options.host = "127.0.0.1";
  for (int port : {-1, 65536, 99999}) {
    options.port = port;
    EXPECT_EQ(RendezvousStoreServer::Start(options).status().code(),
              absl::StatusCode::kInvalidArgument)
        << port;
  }
}

}  // namespace
}  // namespace pagoda::worker::comm
