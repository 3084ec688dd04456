#include "worker/step_mask_mailbox.h"

#include <thread>

#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace pagoda::worker {
namespace {

namespace v1 = ::pagoda::worker::v1;

v1::StepMasks MasksOf(int64_t step_id) {
  v1::StepMasks masks;
  masks.set_step_id(step_id);
  masks.add_rows()->set_seq_id(step_id * 10);
  return masks;
}

absl::Time Soon() { return absl::Now() + absl::Seconds(10); }

TEST(StepMaskMailboxTest, AStepWaitsForMasksThatComeLateAndTakesMasksThatCameEarly) {
  StepMaskMailbox mailbox;
  mailbox.Begin(4);
  const absl::Time start = absl::Now();
  std::thread sender([&] {
    absl::SleepFor(absl::Milliseconds(100));
    mailbox.Deliver(MasksOf(4));
  });
  absl::StatusOr<v1::StepMasks> late = mailbox.Await(Soon());
  sender.join();
  ASSERT_TRUE(late.ok()) << late.status();
  EXPECT_EQ(late->rows(0).seq_id(), 40);
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(100));
  mailbox.End();

  // The masks' call may overtake the step's: they wait for it.
  mailbox.Deliver(MasksOf(5));
  mailbox.Begin(5);
  absl::StatusOr<v1::StepMasks> early = mailbox.Await(Soon());
  ASSERT_TRUE(early.ok()) << early.status();
  EXPECT_EQ(early->step_id(), 5);
  mailbox.End();
}

TEST(StepMaskMailboxTest, AnotherStepsMasksRefuseTheStepAndLeftoversAreDropped) {
  StepMaskMailbox mailbox;
  // Step 1's plan was refused before it waited: its masks stay unused.
  mailbox.Begin(1);
  mailbox.End();
  mailbox.Deliver(MasksOf(1));
  mailbox.Begin(2);  // Drops them.
  EXPECT_EQ(mailbox.Await(absl::Now() + absl::Milliseconds(20)).status().code(),
            absl::StatusCode::kDeadlineExceeded);
  // Another step's masks, during the step: they refuse it.
  mailbox.Deliver(MasksOf(7));
  EXPECT_EQ(mailbox.Await(Soon()).status().code(), absl::StatusCode::kInvalidArgument);
  mailbox.End();

  // Masks of a later step, come before the step: refused when it begins.
  mailbox.Deliver(MasksOf(9));
  mailbox.Begin(3);
  EXPECT_EQ(mailbox.Await(Soon()).status().code(), absl::StatusCode::kInvalidArgument);
  mailbox.End();
}

TEST(StepMaskMailboxTest, CancelEndsTheWait) {
  StepMaskMailbox mailbox;
  mailbox.Begin(1);
  std::thread canceller([&] {
    absl::SleepFor(absl::Milliseconds(20));
    mailbox.Cancel();
  });
  EXPECT_EQ(mailbox.Await(Soon()).status().code(), absl::StatusCode::kCancelled);
  canceller.join();
  mailbox.End();
  mailbox.Begin(2);  // A new step is not cancelled.
  mailbox.Deliver(MasksOf(2));
  EXPECT_TRUE(mailbox.Await(Soon()).ok());
  mailbox.End();
}

}  // namespace
}  // namespace pagoda::worker
