#ifndef PAGODA_WIRE_RENDEZVOUS_PROTOCOL_H_
#define PAGODA_WIRE_RENDEZVOUS_PROTOCOL_H_

// The rendezvous store's wire format, shared by its server (in pagoda-server)
// and its client (in the workers), every length bounded.

#include <chrono>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

// Wire format of the rendezvous store (RendezvousStoreServer <->
// RendezvousStoreClient). The store is reachable by any local process, so the
// format is strict and every length is bounded before anything is allocated:
//
//   request:  magic "PGR1" | op u8 | key_len u16 BE | value_len u32 BE | key | value
//   response: status u8 | value_len u32 BE | value
//
// The first request of a connection must be kHello carrying the shared secret
// as its value; anything else, a wrong secret, a bad magic, an unknown op or
// a length over the bounds closes the connection. Keys are printable ASCII.
//
// kGet answers at once (kNotFound for a missing key); kWait holds its answer
// until the key is set or the wait its value names has passed (the value is
// the wait in milliseconds, u32 BE, at most kMaxWaitMillis), so a waiting
// rank learns of a key the moment it is set instead of at its next poll.
namespace pagoda::wire::rendezvous {

inline constexpr char kMagic[4] = {'P', 'G', 'R', '1'};
inline constexpr size_t kRequestHeaderBytes = 4 + 1 + 2 + 4;
inline constexpr size_t kResponseHeaderBytes = 1 + 4;
inline constexpr size_t kMaxKeyBytes = 256;
inline constexpr size_t kMaxValueBytes = size_t{1} << 20;

enum class Op : uint8_t { kHello = 1, kSet = 2, kGet = 3, kWait = 4 };
inline constexpr size_t kWaitValueBytes = 4;
inline constexpr uint32_t kMaxWaitMillis = 1000;

// kWait's value for a wait of `millis` (capped at kMaxWaitMillis), and back:
// INVALID_ARGUMENT for a value that is not kWaitValueBytes long.
std::string EncodeWaitMillis(uint32_t millis);
absl::StatusOr<uint32_t> DecodeWaitMillis(const std::string& value);
enum class Reply : uint8_t {
  kOk = 0,
  kNotFound = 1,
  kBadRequest = 2,
  kUnauthenticated = 3,
  kStoreFull = 4,
};

struct Request {
  Op op = Op::kHello;
  std::string key;
  std::string value;
};

// Encodes a request; the caller keeps key and value within the bounds.
std::string EncodeRequest(const Request& request);
std::string EncodeResponse(Reply reply, const std::string& value);

// Decodes a request header; INVALID_ARGUMENT on bad magic, unknown op, key or
// value over the bounds, or a key with a byte outside printable ASCII (checked
// by ValidateKey once the key is read).
struct RequestHeader {
  Op op;
  size_t key_bytes;
  size_t value_bytes;
};
absl::StatusOr<RequestHeader> DecodeRequestHeader(const unsigned char* header);
absl::Status ValidateKey(const std::string& key);

// Blocking socket I/O with a deadline (poll based). DEADLINE_EXCEEDED when
// the deadline passes, UNAVAILABLE when the peer closes or errs.
// The TCP mesh (worker/comm/tcp_mesh.h) uses them for its handshake too.
using Deadline = std::chrono::steady_clock::time_point;
// Waits until `fd` is ready for `events` (or failed: the next call says how).
absl::Status WaitReady(int fd, short events, Deadline deadline);
absl::Status WriteAll(int fd, const void* data, size_t size, Deadline deadline);
absl::Status ReadAll(int fd, void* data, size_t size, Deadline deadline);


}  // namespace pagoda::wire::rendezvous

#endif  // PAGODA_WIRE_RENDEZVOUS_PROTOCOL_H_
