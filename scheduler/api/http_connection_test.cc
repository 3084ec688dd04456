#include "scheduler/api/http_connection.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include "gtest/gtest.h"

namespace pagoda::scheduler {
namespace {

int LocalPort(int fd, bool peer) {
  sockaddr_in address{};
  socklen_t length = sizeof(address);
  auto* raw = reinterpret_cast<sockaddr*>(&address);
  EXPECT_EQ(peer ? getpeername(fd, raw, &length) : getsockname(fd, raw, &length), 0);
  return ntohs(address.sin_port);
}

// A loopback connection: the listening socket, the client's end and the
// server's (accepted) end.
class HttpConnectionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    listener_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ASSERT_EQ(bind(listener_, reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0);
    ASSERT_EQ(listen(listener_, 4), 0);
    server_port_ = LocalPort(listener_, false);
    address.sin_port = htons(server_port_);
    client_ = socket(AF_INET, SOCK_STREAM, 0);
    ASSERT_EQ(connect(client_, reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0);
    accepted_ = accept(listener_, nullptr, nullptr);
    ASSERT_GE(accepted_, 0);
    client_port_ = LocalPort(client_, false);
  }
  void TearDown() override {
    for (int fd : {listener_, client_, accepted_}) {
      if (fd >= 0) close(fd);
    }
  }

  int listener_ = -1, client_ = -1, accepted_ = -1;
  int server_port_ = 0, client_port_ = 0;
};

TEST_F(HttpConnectionTest, FindsTheServersEndByAddresses) {
  EXPECT_TRUE(HttpConnection::Find(server_port_, "127.0.0.1", client_port_).found());
  EXPECT_FALSE(HttpConnection::Find(server_port_, "127.0.0.1", client_port_ + 1).found());
  EXPECT_FALSE(HttpConnection::Find(server_port_, "10.0.0.1", client_port_).found());
  // The client's own end is on another local port.
  EXPECT_EQ(LocalPort(client_, true), server_port_);
  EXPECT_EQ(HttpConnection::AllOnPort(server_port_).size(), 1u);
}

TEST_F(HttpConnectionTest, SeesThePeerCloseWithoutReading) {
  HttpConnection connection = HttpConnection::Find(server_port_, "127.0.0.1", client_port_);
  ASSERT_TRUE(connection.found());
  EXPECT_FALSE(connection.PeerClosed());
  // Pipelined bytes mean the client is there; the peek leaves them unread.
  ASSERT_EQ(write(client_, "GET", 3), 3);
  usleep(20000);
  EXPECT_FALSE(connection.PeerClosed());
  char buffer[3];
  EXPECT_EQ(read(accepted_, buffer, 3), 3);
  close(client_);
  client_ = -1;
  usleep(20000);
  EXPECT_TRUE(connection.PeerClosed());
}

TEST_F(HttpConnectionTest, ShutDownEndsTheConnectionForTheClient) {
  for (const HttpConnection& connection : HttpConnection::AllOnPort(server_port_)) {
    connection.ShutDown();
  }
  char byte;
  EXPECT_EQ(read(client_, &byte, 1), 0);  // End of stream.
}

TEST_F(HttpConnectionTest, NotFoundIsNeverClosed) {
  HttpConnection none = HttpConnection::Find(1, "127.0.0.1", 1);
  EXPECT_FALSE(none.found());
  EXPECT_FALSE(none.PeerClosed());
  none.ShutDown();  // Does nothing.
}

}  // namespace
}  // namespace pagoda::scheduler
