#ifndef PAGODA_SCHEDULER_CONSTRAINTS_BYTE_SET_H_
#define PAGODA_SCHEDULER_CONSTRAINTS_BYTE_SET_H_

// A set of byte values: the terminal of every grammar this room compiles
// (grammars are over UTF-8 bytes, so a token's bytes are matched as they
// are, whatever characters they split).

#include <array>
#include <bit>
#include <cstdint>
#include <utility>

namespace pagoda::constraints {

class ByteSet {
 public:
  constexpr ByteSet() = default;
  static ByteSet Of(uint8_t b) {
    ByteSet s;
    s.Add(b);
    return s;
  }
  static ByteSet Range(uint8_t lo, uint8_t hi) {
    ByteSet s;
    s.AddRange(lo, hi);
    return s;
  }
  static ByteSet All() { return Range(0, 255); }

  void Add(uint8_t b) { words_[b >> 6] |= uint64_t{1} << (b & 63); }
  void AddRange(uint8_t lo, uint8_t hi) {
    for (int b = lo; b <= hi; ++b) Add(static_cast<uint8_t>(b));
  }
  void Remove(uint8_t b) { words_[b >> 6] &= ~(uint64_t{1} << (b & 63)); }
  bool Has(uint8_t b) const { return (words_[b >> 6] >> (b & 63)) & 1; }
  // The smallest byte in the set; 256 when it is empty.
  int Lowest() const {
    for (int i = 0; i < 4; ++i) {
      if (words_[i] != 0) return i * 64 + std::countr_zero(words_[i]);
    }
    return 256;
  }
  // Calls `visit(byte)` for each byte in the set, in increasing order.
  template <typename Visit>
  void ForEach(Visit visit) const {
    for (int i = 0; i < 4; ++i) {
      for (uint64_t bits = words_[i]; bits != 0; bits &= bits - 1) {
        visit(static_cast<uint8_t>(i * 64 + std::countr_zero(bits)));
      }
    }
  }
  bool Empty() const { return (words_[0] | words_[1] | words_[2] | words_[3]) == 0; }
  ByteSet& operator|=(const ByteSet& other) {
    for (int i = 0; i < 4; ++i) words_[i] |= other.words_[i];
    return *this;
  }
  ByteSet operator&(const ByteSet& other) const {
    ByteSet s;
    for (int i = 0; i < 4; ++i) s.words_[i] = words_[i] & other.words_[i];
    return s;
  }
  ByteSet operator~() const {
    ByteSet s;
    for (int i = 0; i < 4; ++i) s.words_[i] = ~words_[i];
    return s;
  }
  bool operator==(const ByteSet& other) const { return words_ == other.words_; }
  template <typename H>
  friend H AbslHashValue(H h, const ByteSet& set) {
    return H::combine(std::move(h), set.words_);
  }

 private:
  std::array<uint64_t, 4> words_{};
};

}  // namespace pagoda::constraints

#endif  // PAGODA_SCHEDULER_CONSTRAINTS_BYTE_SET_H_
