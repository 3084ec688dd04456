#include "scheduler/constraints/stack_set.h"

#include <algorithm>

namespace pagoda::constraints {
namespace {

// Past this many distinct stacks in one step, visits are tracked in a hash
// set rather than by a linear scan.
constexpr size_t kLinearVisitLimit = 32;

}  // namespace

int32_t FrameArena::Push(int32_t return_state, int32_t parent) {
  auto [it, inserted] = index_.try_emplace(Key(return_state, parent), size());
  if (inserted) frames_.push_back(Frame{return_state, parent});
  return it->second;
}

void FrameArena::Truncate(int32_t size) {
  for (int32_t id = size; id < this->size(); ++id) {
    index_.erase(Key(frames_[id].return_state, frames_[id].parent));
  }
  frames_.resize(size);
}

void FrameArena::Compact(StackSet* set) {
  std::vector<uint8_t> live(frames_.size(), 0);
  for (const StackTop& top : set->tops) {
    for (int32_t f = top.parent; f >= 0 && !live[f]; f = frames_[f].parent) live[f] = 1;
  }
  // A frame's parent is always older than the frame, so one pass in id
  // order renumbers parents before their children.
  std::vector<int32_t> renumber(frames_.size(), -1);
  std::vector<Frame> kept;
  index_.clear();
  for (size_t id = 0; id < frames_.size(); ++id) {
    if (!live[id]) continue;
    Frame frame = frames_[id];
    if (frame.parent >= 0) frame.parent = renumber[frame.parent];
    renumber[id] = static_cast<int32_t>(kept.size());
    index_.emplace(Key(frame.return_state, frame.parent), renumber[id]);
    kept.push_back(frame);
  }
  frames_ = std::move(kept);
  for (StackTop& top : set->tops) {
    if (top.parent >= 0) top.parent = renumber[top.parent];
  }
}

bool StackStepper::Visit(StackTop top) {
  if (visited_.size() < kLinearVisitLimit) {
    if (std::find(visited_.begin(), visited_.end(), top) != visited_.end()) return false;
    visited_.push_back(top);
    if (visited_.size() == kLinearVisitLimit) {
      for (const StackTop& seen : visited_) {
        visited_large_.insert((uint64_t{static_cast<uint32_t>(seen.state)} << 32) |
                              static_cast<uint32_t>(seen.parent));
      }
    }
    return true;
  }
  return visited_large_
      .insert((uint64_t{static_cast<uint32_t>(top.state)} << 32) |
              static_cast<uint32_t>(top.parent))
      .second;
}

void StackStepper::CloseInto(int32_t state, int32_t parent, FrameArena& arena, StackSet* out) {
  work_.clear();
  work_.push_back(StackTop{state, parent});
  while (!work_.empty()) {
    const StackTop top = work_.back();
    work_.pop_back();
    if (!Visit(top)) continue;
    if (out->tops.size() >= kMaxOpenStacks || visited_large_.size() >= kMaxStackVisits) {
      too_many_ = true;
      return;
    }
    if (automaton_.HasByteEdges(top.state)) out->tops.push_back(top);
    for (const CallEdge& call : automaton_.Calls(top.state)) {
      const int32_t frame = arena.Push(call.return_state, top.parent);
      work_.push_back(StackTop{automaton_.Start(call.rule), frame});
    }
    if (!automaton_.IsFinal(top.state)) continue;
    if (top.parent == kRootFrame) {
      out->complete = true;
    } else if (top.parent == kOutsideFrame) {
      out->left_rule = true;
    } else {
      const Frame& frame = arena.at(top.parent);
      work_.push_back(StackTop{frame.return_state, frame.parent});
    }
  }
}

bool StackStepper::TooMany(StackSet* out) const {
  if (!too_many_) return false;
  out->Clear();
  return true;
}

void StackStepper::Close(int32_t state, int32_t parent, FrameArena& arena, StackSet* out) {
  out->Clear();
  visited_.clear();
  visited_large_.clear();
  too_many_ = false;
  CloseInto(state, parent, arena, out);
  TooMany(out);
}

bool StackStepper::Advance(const StackSet& in, uint8_t byte, FrameArena& arena, StackSet* out) {
  out->Clear();
  // The common case, a single stack moving inside its rule, needs no closure.
  if (in.tops.size() == 1) {
    const StackTop top = in.tops[0];
    const int32_t next = automaton_.Next(top.state, byte);
    if (next < 0) return false;
    if (automaton_.Calls(next).empty() && !automaton_.IsFinal(next)) {
      out->tops.push_back(StackTop{next, top.parent});
      return true;
    }
  }
  visited_.clear();
  if (!visited_large_.empty()) visited_large_.clear();
  too_many_ = false;
  for (size_t i = 0; i < in.tops.size() && !too_many_; ++i) {
    const int32_t next = automaton_.Next(in.tops[i].state, byte);
    if (next >= 0) CloseInto(next, in.tops[i].parent, arena, out);
  }
  return !TooMany(out) && !out->Dead();
}

}  // namespace pagoda::constraints
