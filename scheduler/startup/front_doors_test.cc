#include "scheduler/startup/front_doors.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace pagoda::scheduler {
namespace {

// A listening socket on 127.0.0.1 at a port the OS picked.
class Listener {
 public:
  Listener() {
    fd_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in address = {};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(bind(fd_, reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0);
    EXPECT_EQ(listen(fd_, 1), 0);
    socklen_t size = sizeof(address);
    getsockname(fd_, reinterpret_cast<sockaddr*>(&address), &size);
    port_ = ntohs(address.sin_port);
  }
  ~Listener() { Close(); }
  void Close() {
    if (fd_ >= 0) close(fd_);
    fd_ = -1;
  }
  int port() const { return port_; }

 private:
  int fd_ = -1;
  int port_ = 0;
};

TEST(CheckPortFreeTest, ABusyPortIsOneLineSayingInUse) {
  Listener listener;
  const absl::Status status = CheckPortFree("http-port", "127.0.0.1", listener.port());
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(status.message(), absl::StrCat("--http-port ", listener.port(),
                                           ": 127.0.0.1:", listener.port(), " is in use"));
  listener.Close();
  EXPECT_TRUE(CheckPortFree("http-port", "127.0.0.1", listener.port()).ok());
}

TEST(CheckPortFreeTest, PortsTheOsPicksAreAlwaysFree) {
  EXPECT_TRUE(CheckPortFree("port", "127.0.0.1", 0).ok());
  EXPECT_TRUE(CheckPortFree("metrics-port", "127.0.0.1", -1).ok());
}

TEST(CheckPortFreeTest, EveryFrontDoorPortIsChecked) {
  Listener listener;
  FrontDoorOptions door;
  door.port = 0;
  door.metrics_host = "127.0.0.1";
  door.metrics_port = listener.port();
  EXPECT_TRUE(absl::StartsWith(CheckFrontDoorPortsFree(door).message(), "--metrics-port "));
  door.metrics_port = 0;
  door.http_port = listener.port();
  EXPECT_TRUE(absl::StartsWith(CheckFrontDoorPortsFree(door).message(), "--http-port "));
  door.http_port = 0;
  door.port = listener.port();
  EXPECT_TRUE(absl::StartsWith(CheckFrontDoorPortsFree(door).message(), "--port "));
}

}  // namespace
}  // namespace pagoda::scheduler
