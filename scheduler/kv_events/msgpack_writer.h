#ifndef PAGODA_SCHEDULER_KV_EVENTS_MSGPACK_WRITER_H_
#define PAGODA_SCHEDULER_KV_EVENTS_MSGPACK_WRITER_H_

// MsgpackWriter: the small MessagePack encoder KV event batches are written
// with.

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

namespace pagoda::scheduler {

// The few MessagePack types a KV event batch uses (msgpack.org's spec:
// nil, unsigned and signed ints, float64, str, array), appended to a byte
// string, each in its smallest form as msgpack encoders write them. Written
// here because Debian 12's msgpack-c/cxx development packages depend on
// Boost 1.74, which cannot be installed beside the libboost1.81-dev the HTTP
// server needs; the tests decode the output with python3-msgpack.
class MsgpackWriter {
 public:
  void Nil() { out_.push_back('\xc0'); }
  void Uint(uint64_t value) {
    if (value < 0x80) {
      out_.push_back(static_cast<char>(value));
    } else if (value <= 0xff) {
      out_.push_back('\xcc');
      BigEndian(value, 1);
    } else if (value <= 0xffff) {
      out_.push_back('\xcd');
      BigEndian(value, 2);
    } else if (value <= 0xffffffffULL) {
      out_.push_back('\xce');
      BigEndian(value, 4);
    } else {
      out_.push_back('\xcf');
      BigEndian(value, 8);
    }
  }
  void Int(int64_t value) {
    if (value >= 0) return Uint(static_cast<uint64_t>(value));
    if (value >= -32) {
      out_.push_back(static_cast<char>(value));  // Negative fixint.
    } else if (value >= INT8_MIN) {
      out_.push_back('\xd0');
      BigEndian(static_cast<uint64_t>(value), 1);
    } else if (value >= INT16_MIN) {
      out_.push_back('\xd1');
      BigEndian(static_cast<uint64_t>(value), 2);
    } else if (value >= INT32_MIN) {
      out_.push_back('\xd2');
      BigEndian(static_cast<uint64_t>(value), 4);
    } else {
      out_.push_back('\xd3');
      BigEndian(static_cast<uint64_t>(value), 8);
    }
  }
  void Float64(double value) {
    uint64_t bits;
    std::memcpy(&bits, &value, sizeof(bits));
    out_.push_back('\xcb');
    BigEndian(bits, 8);
  }
  void Str(std::string_view text) {
    const uint64_t n = text.size();
    if (n < 32) {
      out_.push_back(static_cast<char>(0xa0 | n));
    } else if (n <= 0xff) {
      out_.push_back('\xd9');
      BigEndian(n, 1);
    } else if (n <= 0xffff) {
      out_.push_back('\xda');
      BigEndian(n, 2);
    } else {
      out_.push_back('\xdb');
      BigEndian(n, 4);
    }
    out_.append(text);
  }
  // Starts an array of `n` elements; the caller writes them next.
  void Array(uint64_t n) {
    if (n < 16) {
      out_.push_back(static_cast<char>(0x90 | n));
    } else if (n <= 0xffff) {
      out_.push_back('\xdc');
      BigEndian(n, 2);
    } else {
      out_.push_back('\xdd');
      BigEndian(n, 4);
    }
  }

  const std::string& bytes() const { return out_; }
  std::string Take() { return std::move(out_); }

 private:
  void BigEndian(uint64_t value, int n) {
    for (int i = n - 1; i >= 0; --i) out_.push_back(static_cast<char>((value >> (8 * i)) & 0xff));
  }
  std::string out_;
};

}  // namespace pagoda::scheduler

#endif  // PAGODA_SCHEDULER_KV_EVENTS_MSGPACK_WRITER_H_
