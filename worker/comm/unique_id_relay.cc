#include "worker/comm/unique_id_relay.h"

#include "absl/strings/str_cat.h"

namespace pagoda::worker::comm {
namespace {

constexpr char kUniqueIdKey[] = "unique_id";

absl::Status CheckSize(const std::string& id, size_t id_bytes, const char* who) {
  if (id.size() == id_bytes) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat(who, " unique id has ", id.size(), " bytes, expected ", id_bytes));
}

}  // namespace

absl::StatusOr<std::string> ShareUniqueId(
    const RendezvousAddress& rendezvous, int rank, std::chrono::milliseconds timeout,
    size_t id_bytes, const std::function<absl::StatusOr<std::string>()>& create) {
  if (rank < 0) return absl::InvalidArgumentError(absl::StrCat("rank ", rank, " is negative"));
  auto store = RendezvousStoreClient::Connect(rendezvous, timeout);
  if (!store.ok()) return store.status();
  if (rank == 0) {
    absl::StatusOr<std::string> id = create();
    if (!id.ok()) return id.status();
    if (absl::Status size = CheckSize(*id, id_bytes, "the created"); !size.ok()) return size;
    if (absl::Status set = (*store)->Set(kUniqueIdKey, *id); !set.ok()) return set;
    return id;
  }
  absl::StatusOr<std::string> id = (*store)->Get(kUniqueIdKey);
  if (!id.ok()) return id.status();
  // A store holding a wrong-sized value was written by something else.
  if (absl::Status size = CheckSize(*id, id_bytes, "the relayed"); !size.ok()) return size;
  return id;
}

}  // namespace pagoda::worker::comm
