#include "tests/fakes/collecting_sink.h"

#include <utility>

#include "gtest/gtest.h"
#include "scheduler/engine/output_processor.h"

namespace pagoda::scheduler::testing {

void CollectingSink::OnDelta(const RequestDelta& delta) {
  std::function<void(int)> hook;
  int num_tokens;
  {
    absl::MutexLock lock(&mu_);
    for (const RequestDelta::SeqDelta& seq : delta.seqs) {
      SequenceOutput& output = sequences_[seq.index];
      for (const GeneratedToken& token : seq.new_tokens) {
        tokens_.push_back(token.token_id);
        output.tokens.push_back(token);
      }
      output.status = seq.status;
      last_status_ = seq.status;
    }
    ++num_deltas_;
    num_tokens = static_cast<int>(tokens_.size());
    hook = on_delta_;
  }
  if (hook) hook(num_tokens);
}

void CollectingSink::OnFinish(const absl::Status& status) {
  std::function<void()> hook;
  {
    absl::MutexLock lock(&mu_);
    EXPECT_FALSE(finished_.HasBeenNotified()) << "OnFinish called twice";
    status_ = status;
    hook = on_finish_;
  }
  if (hook) hook();
  finished_.Notify();
}

void CollectingSink::set_on_finish(std::function<void()> hook) {
  absl::MutexLock lock(&mu_);
  on_finish_ = std::move(hook);
}

void CollectingSink::set_on_delta(std::function<void(int num_tokens)> hook) {
  absl::MutexLock lock(&mu_);
  on_delta_ = std::move(hook);
}

bool CollectingSink::WaitFinished(absl::Duration timeout) {
  return finished_.WaitForNotificationWithTimeout(timeout);
}

std::vector<int32_t> CollectingSink::tokens() {
  absl::MutexLock lock(&mu_);
  return tokens_;
}

std::map<int, CollectingSink::SequenceOutput> CollectingSink::sequences() {
  absl::MutexLock lock(&mu_);
  return sequences_;
}

absl::Status CollectingSink::status() {
  absl::MutexLock lock(&mu_);
  return status_;
}

SequenceStatus CollectingSink::last_status() {
  absl::MutexLock lock(&mu_);
  return last_status_;
}

int CollectingSink::num_deltas() {
  absl::MutexLock lock(&mu_);
  return num_deltas_;
}

}  // namespace pagoda::scheduler::testing
