#include "scheduler/lora/lora_slot_policy.h"

#include <deque>
#include <map>
#include <random>
#include <set>

#include "gtest/gtest.h"

namespace pagoda::lora {
namespace {

std::vector<LoraCandidate> Waiting(std::vector<int> adapters) {
  std::vector<LoraCandidate> candidates;
  for (int adapter : adapters) candidates.push_back({adapter, false});
  return candidates;
}

TEST(LoraSlotPolicyTest, FillsFreeSlotsThenKeepsResidentOnes) {
  std::vector<LoraSlotState> slots(2);
  LoraSlotPlan plan = PlanLoraSlots(slots, Waiting({7, 0, 9, 7}), {}, 1);
  EXPECT_EQ(plan.slot_of, (std::vector<int>{1, 0, 2, 1}));
  EXPECT_EQ(plan.loads, (std::vector<std::pair<int, int>>{{1, 7}, {2, 9}}));
  plan = PlanLoraSlots(plan.slots, Waiting({9, 7}), {}, 2);
  EXPECT_EQ(plan.slot_of, (std::vector<int>{2, 1}));
  EXPECT_TRUE(plan.loads.empty());
}

TEST(LoraSlotPolicyTest, EvictsTheLeastRecentlyUsedAdapterNotInTheStep) {
  std::vector<LoraSlotState> slots = {{7, 5}, {9, 3}, {4, 8}};
  LoraSlotPlan plan = PlanLoraSlots(slots, Waiting({4, 11}), {}, 10);
  EXPECT_EQ(plan.slot_of, (std::vector<int>{3, 2}));  // 9 (used at 3) goes.
  EXPECT_EQ(plan.loads, (std::vector<std::pair<int, int>>{{2, 11}}));
  // The in-flight step's adapters are kept even when least recently used.
  plan = PlanLoraSlots(slots, Waiting({11}), {9}, 10);
  EXPECT_EQ(plan.loads, (std::vector<std::pair<int, int>>{{1, 11}}));
}

TEST(LoraSlotPolicyTest, NeverMoreDistinctAdaptersThanSlots) {
  std::vector<LoraSlotState> slots(2);
  LoraSlotPlan plan = PlanLoraSlots(slots, Waiting({1, 2, 3, 1, 0, 2}), {}, 1);
  // 3 waits; the 1 and 2 behind it wait too (no overtaking); the base runs.
  EXPECT_EQ(plan.slot_of, (std::vector<int>{1, 2, -1, -1, 0, -1}));
  // Running requests are not held back by a deferred waiting one.
  std::vector<LoraCandidate> mixed = {{1, true}, {2, true}, {3, false}, {0, false}, {1, false}};
  plan = PlanLoraSlots(std::vector<LoraSlotState>(2), mixed, {}, 1);
  EXPECT_EQ(plan.slot_of, (std::vector<int>{1, 2, -1, 0, -1}));
}

// Random steps: every plan keeps the invariants the worker relies on.
TEST(LoraSlotPolicyTest, RandomPlansKeepTheInvariants) {
  std::mt19937 rng(11);
  for (int trial = 0; trial < 300; ++trial) {
    const int num_slots = 1 + trial % 4;
    std::vector<LoraSlotState> slots(num_slots);
    absl::flat_hash_set<int> in_flight;
    for (int64_t step = 1; step <= 20; ++step) {
      std::vector<LoraCandidate> candidates;
      const int count = rng() % 10;
      for (int i = 0; i < count; ++i) candidates.push_back({int(rng() % 7), rng() % 2 == 0});
      const LoraSlotPlan plan = PlanLoraSlots(slots, candidates, in_flight, step);
      std::set<int> distinct;
      for (size_t i = 0; i < candidates.size(); ++i) {
        const int slot = plan.slot_of[i];
        if (candidates[i].adapter_id == 0) {
          ASSERT_EQ(slot, 0);
        } else if (slot > 0) {
          ASSERT_EQ(plan.slots[slot - 1].adapter_id, candidates[i].adapter_id);
          distinct.insert(candidates[i].adapter_id);
        }
      }
      ASSERT_LE(distinct.size(), static_cast<size_t>(num_slots));
      for (int s = 0; s < num_slots; ++s) {  // In-flight adapters stay put.
        if (in_flight.contains(slots[s].adapter_id)) {
          ASSERT_EQ(plan.slots[s].adapter_id, slots[s].adapter_id);
        }
      }
      for (auto [slot, adapter] : plan.loads) ASSERT_EQ(plan.slots[slot - 1].adapter_id, adapter);
      slots = plan.slots;
      in_flight = absl::flat_hash_set<int>(distinct.begin(), distinct.end());
    }
  }
}

// Two slots, two adapters kept busy by a steady stream of new requests, and
// one request for a third adapter: it must get a slot once the requests
// admitted before it finish, although its rivals' queues never empty.
TEST(LoraSlotPolicyTest, AWaitingAdapterIsNotStarved) {
  struct Request {
    int adapter;
    int steps_left;
  };
  std::vector<LoraSlotState> slots(2);
  std::vector<Request> running;
  std::deque<Request> waiting = {{1, 4}, {2, 4}, {3, 4}};
  constexpr int kRequestSteps = 4;
  int admitted_step = -1;
  for (int64_t step = 1; step <= 100 && admitted_step < 0; ++step) {
    waiting.push_back({static_cast<int>(1 + step % 2), kRequestSteps});  // New 1s and 2s.
    std::vector<LoraCandidate> candidates;
    for (const Request& r : running) candidates.push_back({r.adapter, true});
    for (const Request& r : waiting) candidates.push_back({r.adapter, false});
    const LoraSlotPlan plan = PlanLoraSlots(slots, candidates, {}, step);
    slots = plan.slots;
    std::deque<Request> still_waiting;
    const size_t num_running = running.size();
    for (size_t i = num_running; i < candidates.size(); ++i) {
      const Request& r = waiting[i - num_running];
      if (plan.slot_of[i] < 0) {
        still_waiting.push_back(r);
      } else {
        if (r.adapter == 3) admitted_step = static_cast<int>(step);
        running.push_back(r);
      }
    }
    waiting = std::move(still_waiting);
    std::vector<Request> next;
    for (Request r : running) {
      if (--r.steps_left > 0) next.push_back(r);
    }
    running = std::move(next);
  }
  // Admitted once the requests ahead of it (4 steps each) drain.
  ASSERT_GT(admitted_step, 0) << "adapter 3 never got a slot";
  EXPECT_LE(admitted_step, 1 + kRequestSteps + 1);
}

}  // namespace
}  // namespace pagoda::lora
