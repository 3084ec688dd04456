#include "worker/comm/gloo_mesh.h"

#include <netinet/in.h>

#include <algorithm>
#include <cstring>
#include <exception>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gloo/transport/tcp/address.h"
#include "gloo/transport/tcp/device.h"

namespace pagoda::worker::comm {
namespace {

using Clock = std::chrono::steady_clock;

// A gloo::Context over pairs this file made: the base class keeps device
// and transport context protected, for its subclasses to fill in.
class PairedContext final : public gloo::Context {
 public:
  PairedContext(int rank, int size, std::shared_ptr<gloo::transport::Device> device,
                std::shared_ptr<gloo::transport::Context> transport)
      : gloo::Context(rank, size) {
    device_ = std::move(device);
    transportContext_ = std::move(transport);
  }
};

// Gloo's own rule (tcp::Pair::connect): the side whose address compares
// larger connects, the other waits for it. Only the order of our connects
// depends on this; Gloo decides the roles itself.
bool ConnectsToPeer(const gloo::transport::tcp::Address& self,
                    const gloo::transport::tcp::Address& peer) {
  const sockaddr_storage& a = self.getSockaddr();
  const sockaddr_storage& b = peer.getSockaddr();
  if (a.ss_family != AF_INET || b.ss_family != AF_INET) return false;
  const auto* sa = reinterpret_cast<const sockaddr_in*>(&a);
  const auto* sb = reinterpret_cast<const sockaddr_in*>(&b);
  int order = std::memcmp(&sa->sin_addr, &sb->sin_addr, sizeof(in_addr));
  if (order == 0) order = sa->sin_port - sb->sin_port;
  return order > 0;
}

// Rank `peer`'s address for this rank's pair, out of the list it posted
// (one address per rank but its own, in rank order).
absl::StatusOr<std::vector<char>> PeerAddress(const std::string& posted, int rank, int peer,
                                              int world_size, size_t address_bytes) {
  if (posted.size() != address_bytes * static_cast<size_t>(world_size - 1)) {
    return absl::DataLossError(absl::StrCat("rank ", peer, " posted ", posted.size(),
                                            " bytes of Gloo addresses, not ",
                                            address_bytes * (world_size - 1)));
  }
  const size_t index = static_cast<size_t>(rank < peer ? rank : rank - 1);
  const char* begin = posted.data() + index * address_bytes;
  return std::vector<char>(begin, begin + address_bytes);
}

absl::Status PostAddresses(gloo::Context& context, RendezvousStoreClient& store) {
  std::string mine;
  for (int peer = 0; peer < context.size; ++peer) {
    if (peer == context.rank) continue;
    std::vector<char> bytes = context.getPair(peer)->address().bytes();
    mine.append(bytes.data(), bytes.size());
  }
  return store.Set(absl::StrCat("addr", context.rank), mine);
}

}  // namespace

absl::StatusOr<std::shared_ptr<gloo::Context>> OpenGlooPairs(
    int rank, int world_size, const std::string& listen_host,
    std::chrono::milliseconds connect_timeout) {
  try {
    gloo::transport::tcp::attr attr;
    attr.hostname = listen_host;
    std::shared_ptr<gloo::transport::Device> device = gloo::transport::tcp::CreateDevice(attr);
    std::shared_ptr<gloo::transport::Context> transport = device->createContext(rank, world_size);
    transport->setTimeout(std::max(connect_timeout / 5, std::chrono::milliseconds(1)));
    for (int peer = 0; peer < world_size; ++peer) {
      if (peer == rank) continue;
      transport->createPair(peer)->setLocalRank(0);
    }
    return std::make_shared<PairedContext>(rank, world_size, std::move(device),
                                           std::move(transport));
  } catch (const std::exception& e) {
    return absl::UnavailableError(
        absl::StrCat("rank ", rank, " could not open its Gloo pairs: ", e.what()));
  }
}

absl::Status ConnectGlooPairs(gloo::Context& context, RendezvousStoreClient& store,
                              Clock::time_point deadline) {
  if (context.size == 1) return absl::OkStatus();  // No pair to connect.
  if (absl::Status posted = PostAddresses(context, store); !posted.ok()) return posted;
  const int rank = context.rank;
  const size_t address_bytes = context.getPair(rank == 0 ? 1 : 0)->address().bytes().size();
  std::vector<std::vector<char>> peers(static_cast<size_t>(context.size));
  std::vector<bool> connecting(static_cast<size_t>(context.size), false);
  for (int peer = 0; peer < context.size; ++peer) {
    if (peer == rank) continue;
    absl::StatusOr<std::string> posted = store.GetUntil(absl::StrCat("addr", peer), deadline);
    if (!posted.ok()) return posted.status();
    absl::StatusOr<std::vector<char>> address =
        PeerAddress(*posted, rank, peer, context.size, address_bytes);
    if (!address.ok()) return address.status();
    const gloo::transport::tcp::Address self(context.getPair(peer)->address().bytes());
    connecting[static_cast<size_t>(peer)] =
        ConnectsToPeer(self, gloo::transport::tcp::Address(*address));
    peers[static_cast<size_t>(peer)] = *std::move(address);
  }
  try {
    // Connecting sides first: each closes a listener nobody needs any more.
    for (bool connects : {true, false}) {
      for (int peer = 0; peer < context.size; ++peer) {
        if (peer == rank || connecting[static_cast<size_t>(peer)] != connects) continue;
        context.getPair(peer)->connect(peers[static_cast<size_t>(peer)]);
      }
    }
  } catch (const std::exception& e) {
    return absl::UnavailableError(
        absl::StrCat("rank ", rank, " could not connect its Gloo pairs: ", e.what()));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<TryAbortWatch>> TryAbortWatch::Start(
    const RendezvousAddress& address, std::chrono::milliseconds connect_timeout,
    Clock::time_point until, std::function<void()> on_abort) {
  absl::StatusOr<std::unique_ptr<RendezvousStoreClient>> store =
      RendezvousStoreClient::Connect(address, connect_timeout);
  if (!store.ok()) return store.status();
  std::unique_ptr<TryAbortWatch> watch(new TryAbortWatch(*std::move(store)));
  TryAbortWatch* raw = watch.get();
  watch->thread_ = std::thread([raw, until, on_abort = std::move(on_abort)] {
    // Ends when the key is set, at `until`, or when Stop() interrupts it.
    if (raw->store_->GetUntil(kTryAbortKey, until).ok()) {
      raw->fired_ = true;
      on_abort();
    }
  });
  return watch;
}

void TryAbortWatch::Stop() {
  if (!thread_.joinable()) return;
  store_->Interrupt();
  thread_.join();
}

}  // namespace pagoda::worker::comm
