#include "tests/support/listener_racer.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <fstream>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace pagoda::testing {
namespace {

// Inodes of the sockets `pid` holds (its /proc/<pid>/fd links).
void AddSocketInodes(pid_t pid, std::set<std::string>& inodes) {
  const std::string fd_dir = absl::StrCat("/proc/", pid, "/fd");
  DIR* dir = opendir(fd_dir.c_str());
  if (dir == nullptr) return;
  char target[256];
  while (dirent* entry = readdir(dir)) {
    const std::string link = absl::StrCat(fd_dir, "/", entry->d_name);
    const ssize_t n = readlink(link.c_str(), target, sizeof(target) - 1);
    if (n <= 0) continue;
    const std::string text(target, static_cast<size_t>(n));
    if (absl::StartsWith(text, "socket:[")) inodes.insert(text.substr(8, text.size() - 9));
  }
  closedir(dir);
}

struct Listener {
  std::string inode;
  int port = 0;
};

// IPv4 sockets in LISTEN state (st 0A in /proc/net/tcp) among `inodes`.
std::vector<Listener> ListenersAmong(const std::set<std::string>& inodes) {
  std::vector<Listener> listeners;
  std::ifstream table("/proc/self/net/tcp");
  std::string line;
  std::getline(table, line);  // Header.
  while (std::getline(table, line)) {
    std::istringstream fields(line);
    std::string slot, local, remote, state, queues, timer, retransmits, uid, timeout, inode;
    fields >> slot >> local >> remote >> state >> queues >> timer >> retransmits >> uid >>
        timeout >> inode;
    if (state != "0A" || inodes.count(inode) == 0) continue;
    listeners.push_back({inode, std::stoi(local.substr(local.find(':') + 1), nullptr, 16)});
  }
  return listeners;
}

bool ConnectSendAndClose(int port, const std::string& payload) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(port));
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  const bool connected = connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0;
  if (connected) {
    (void)!send(fd, payload.data(), payload.size(), MSG_NOSIGNAL);
  }
  close(fd);
  return connected;
}

}  // namespace

std::vector<std::string> ListenerRacer::HostilePayloads() {
  const uint64_t gloo_header[6] = {48 + 8, /*SEND_UNBOUND_BUFFER*/ 1, /*slot*/ 12345, 0, 8, 0};
  std::string hello = "PGDMESH1";
  hello += std::string("\x01\0\0\0\0\0\0\0", 8);  // From rank 1 to rank 0.
  hello += std::string(64, '\0');                 // Nonce and tag.
  return {std::string(64, '\0'),
          std::string(reinterpret_cast<const char*>(gloo_header), sizeof(gloo_header)), hello};
}

ListenerRacer::ListenerRacer(std::function<std::vector<pid_t>()> targets,
                             std::set<int> spared_ports)
    : targets_(std::move(targets)), spared_ports_(std::move(spared_ports)) {
  thread_ = std::thread([this] { Run(); });
}

ListenerRacer::~ListenerRacer() {
  stop_ = true;
  thread_.join();
}

void ListenerRacer::Run() {
  const std::vector<std::string> payloads = HostilePayloads();
  std::set<std::string> seen;
  while (!stop_.load()) {
    std::set<std::string> inodes;
    for (pid_t pid : targets_()) AddSocketInodes(pid, inodes);
    for (const Listener& listener : ListenersAmong(inodes)) {
      if (spared_ports_.count(listener.port) > 0 || !seen.insert(listener.inode).second) continue;
      const std::string& payload = payloads[connections_.load() % payloads.size()];
      if (ConnectSendAndClose(listener.port, payload)) connections_.fetch_add(1);
    }
  }
}

}  // namespace pagoda::testing
