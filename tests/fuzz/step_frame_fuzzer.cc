// A spawned worker's step channel as the worker reads it
// (StepChannelServer): length-prefixed frames (wire/frame_channel.h), each a
// kind byte and a message: a StepPlan, validated and flattened
// (FlattenStepPlan) before any device work, then, if it promises token
// masks, the next frame as its StepMasks, checked and filled in
// (ApplyStepMasks); masks where a plan is due are skipped. Input: the bytes
// the server side writes on the socket; frames are read until the bytes run
// out or the channel is out of step.
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "absl/time/clock.h"
#include "tests/fuzz/fuzz_support.h"
#include "wire/frame_channel.h"
#include "worker/flat_batch.h"

namespace {

using pagoda::fuzz::Check;
using pagoda::worker::BatchLimits;
using pagoda::worker::FlatBatch;

// Larger inputs are cut: the socket buffer must take them whole at once.
constexpr size_t kMaxInputBytes = 64 << 10;

BatchLimits Limits() {
  BatchLimits limits;
  limits.vocab_size = 1000;
  limits.block_size = 16;
  limits.num_gpu_blocks = 64;
  limits.num_cpu_blocks = 32;
  limits.max_positions = 2048;
  return limits;
}

bool InRange(int64_t value, int64_t end) { return value >= 0 && value < end; }

void CheckBatch(const FlatBatch& batch, const BatchLimits& limits) {
  const int tokens = batch.num_tokens();
  Check(batch.positions.size() == static_cast<size_t>(tokens) &&
            batch.slot_mapping.size() == static_cast<size_t>(tokens),
        "a position and a slot per token");
  for (int i = 0; i < tokens; ++i) {
    Check(InRange(batch.input_ids[i], limits.vocab_size), "token id in vocabulary");
    Check(InRange(batch.positions[i], limits.max_positions), "position in the rotary table");
    Check(InRange(batch.slot_mapping[i], int64_t{limits.num_gpu_blocks} * limits.block_size),
          "slot in the cache");
  }
  Check(batch.query_start.size() == static_cast<size_t>(batch.num_seqs()) + 1 &&
            batch.query_start.front() == 0 && batch.query_start.back() == tokens,
        "query_start spans the tokens");
  for (size_t s = 1; s < batch.query_start.size(); ++s) {
    Check(batch.query_start[s] > batch.query_start[s - 1], "each sequence has a token");
  }
  Check(
      batch.block_tables.size() == static_cast<size_t>(batch.num_seqs()) * batch.max_blocks_per_seq,
      "block table rows");
  for (int32_t block : batch.block_tables) Check(InRange(block, limits.num_gpu_blocks), "block");
  for (int s = 0; s < batch.num_seqs(); ++s) {
    Check(batch.context_lens[s] <= limits.max_positions &&
              batch.context_lens[s] <= batch.max_blocks_per_seq * limits.block_size,
          "context fits its block table");
  }
  const size_t rows = batch.num_logits_rows();
  Check(batch.edit_offsets.size() == rows + 1 &&
            batch.edit_offsets.back() == static_cast<int32_t>(batch.edits.size()),
        "an edit range per row");
  for (size_t r = 0; r < rows; ++r) {
    Check(InRange(batch.logits_indices[r], tokens), "logits row is a token");
    Check(batch.edit_offsets[r] <= batch.edit_offsets[r + 1], "edit ranges in order");
  }
  for (const auto& edit : batch.edits) Check(InRange(edit.token_id, limits.vocab_size), "edit id");
  for (const auto& pair : batch.swap_in) {
    Check(InRange(pair.src, limits.num_cpu_blocks) && InRange(pair.dst, limits.num_gpu_blocks),
          "swap_in in range");
  }
  for (const auto& pair : batch.swap_out) {
    Check(InRange(pair.src, limits.num_gpu_blocks) && InRange(pair.dst, limits.num_cpu_blocks),
          "swap_out in range");
  }
  for (const auto& pair : batch.copy) {
    Check(InRange(pair.src, limits.num_gpu_blocks) && InRange(pair.dst, limits.num_gpu_blocks),
          "copy in range");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  size = std::min(size, kMaxInputBytes);
  int fds[2];
  Check(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) == 0, "socketpair");
  int buffer = static_cast<int>(2 * kMaxInputBytes);
  setsockopt(fds[0], SOL_SOCKET, SO_SNDBUF, &buffer, sizeof(buffer));
  setsockopt(fds[1], SOL_SOCKET, SO_RCVBUF, &buffer, sizeof(buffer));
  for (size_t written = 0; written < size;) {
    const ssize_t sent = send(fds[0], data + written, size - written, MSG_NOSIGNAL);
    Check(sent > 0, "the socket takes the whole input");
    written += static_cast<size_t>(sent);
  }
  shutdown(fds[0], SHUT_WR);
  const BatchLimits limits = Limits();
  std::string frame;
  auto next_frame = [&] {
    return pagoda::ReadFrame(fds[1], absl::Now() + absl::Seconds(5), pagoda::kMaxFrameBytes,
                             &frame)
        .ok();
  };
  while (next_frame()) {
    if (!frame.empty() && frame[0] == pagoda::kStepMasksFrame) continue;  // A refused plan's.
    pagoda::worker::v1::StepPlan plan;
    if (frame.empty() || frame[0] != pagoda::kStepPlanFrame ||
        !plan.ParseFromArray(frame.data() + 1, static_cast<int>(frame.size() - 1))) {
      continue;  // Answered INVALID_ARGUMENT; the channel goes on.
    }
    absl::StatusOr<FlatBatch> batch = pagoda::worker::FlattenStepPlan(plan, limits);
    if (!batch.ok()) continue;
    if (batch->awaits_masks()) {
      pagoda::worker::v1::StepMasks masks;
      if (!next_frame() || frame.empty() || frame[0] != pagoda::kStepMasksFrame ||
          !masks.ParseFromArray(frame.data() + 1, static_cast<int>(frame.size() - 1))) {
        break;  // Out of step: the worker ends the channel.
      }
      if (!pagoda::worker::ApplyStepMasks(plan, masks, limits.vocab_size, &*batch).ok()) continue;
    }
    CheckBatch(*batch, limits);
  }
  close(fds[0]);
  close(fds[1]);
  return 0;
}
