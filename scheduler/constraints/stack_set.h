#ifndef PAGODA_SCHEDULER_CONSTRAINTS_STACK_SET_H_
#define PAGODA_SCHEDULER_CONSTRAINTS_STACK_SET_H_

// The parser of an Automaton: after some bytes, the set of stacks the
// grammar may be in. A stack is a top state (one with byte edges) over a
// chain of return states (frames). Frames live in a FrameArena shared by
// every stack of one parser and are hash-consed, so equal stacks have equal
// ids and a set never holds one stack twice; the arena can be rolled back to
// an earlier size, which is how a token's bytes are tried and undone.
//
// Not thread-safe: one arena per parser (matcher or precompute).

#include <cstdint>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "scheduler/constraints/automaton.h"

namespace pagoda::constraints {

// The most stacks a StackSet keeps open, and stack visits one closure or
// step may make. An ambiguous grammar can keep exponentially many parses
// open (the constraint fuzzer's `term ::= [0-9]+ | . expr` grew past 35,000
// stacks and 19 GB within 800 bytes); the test suites' grammars keep at
// most 4. A step that would open more leaves the set dead: the bytes are
// refused, as bytes outside the grammar are.
inline constexpr size_t kMaxOpenStacks = 1024;
inline constexpr size_t kMaxStackVisits = 8 * kMaxOpenStacks;

// Below every stack of a matcher: popping it completes the whole grammar.
inline constexpr int32_t kRootFrame = -1;
// Below the stack a state's token classes are precomputed from: popping it
// leaves the state's rule for a caller the precompute does not know.
inline constexpr int32_t kOutsideFrame = -2;

struct Frame {
  int32_t return_state;
  int32_t parent;  // A frame id, kRootFrame or kOutsideFrame.
};

// One stack: `state` on top of frame `parent`.
struct StackTop {
  int32_t state;
  int32_t parent;
  bool operator==(const StackTop& other) const {
    return state == other.state && parent == other.parent;
  }
};

struct StackSet {
  std::vector<StackTop> tops;  // Each top state has byte edges.
  bool complete = false;       // The grammar may end here (kRootFrame popped).
  bool left_rule = false;      // kOutsideFrame popped: the state's rule ended.
  bool Dead() const { return tops.empty() && !complete && !left_rule; }
  void Clear() {
    tops.clear();
    complete = false;
    left_rule = false;
  }
};

class FrameArena {
 public:
  // The frame (return_state, parent), made if new.
  int32_t Push(int32_t return_state, int32_t parent);
  const Frame& at(int32_t id) const { return frames_[id]; }
  int32_t size() const { return static_cast<int32_t>(frames_.size()); }
  // Forgets the frames made after the arena had `size` of them.
  void Truncate(int32_t size);
  // Keeps only the frames `set` uses, renumbering its tops' parents.
  void Compact(StackSet* set);

 private:
  static uint64_t Key(int32_t return_state, int32_t parent) {
    return (uint64_t{static_cast<uint32_t>(return_state)} << 32) | static_cast<uint32_t>(parent);
  }
  std::vector<Frame> frames_;
  absl::flat_hash_map<uint64_t, int32_t> index_;
};

// Steps a StackSet through bytes. Holds scratch space only.
class StackStepper {
 public:
  explicit StackStepper(const Automaton& automaton) : automaton_(automaton) {}

  // `out` = every stack reached from `state` over `parent` before reading a
  // byte: calls entered, complete rules left (their frames popped); dead
  // past kMaxOpenStacks.
  void Close(int32_t state, int32_t parent, FrameArena& arena, StackSet* out);
  // `out` = the stacks after reading `byte` from `in`, dead past
  // kMaxOpenStacks. Returns !out->Dead().
  bool Advance(const StackSet& in, uint8_t byte, FrameArena& arena, StackSet* out);

  const Automaton& automaton() const { return automaton_; }
  // Whether the last Close or Advance went past kMaxOpenStacks.
  bool too_many() const { return too_many_; }

 private:
  void CloseInto(int32_t state, int32_t parent, FrameArena& arena, StackSet* out);
  bool Visit(StackTop top);
  // Past kMaxOpenStacks or kMaxStackVisits: `out` dead.
  bool TooMany(StackSet* out) const;

  const Automaton& automaton_;
  std::vector<StackTop> work_;
  std::vector<StackTop> visited_;
  absl::flat_hash_set<uint64_t> visited_large_;
  bool too_many_ = false;  // This closure or step went past the bounds.
};

}  // namespace pagoda::constraints

#endif  // PAGODA_SCHEDULER_CONSTRAINTS_STACK_SET_H_
