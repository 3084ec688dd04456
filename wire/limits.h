#ifndef PAGODA_WIRE_LIMITS_H_
#define PAGODA_WIRE_LIMITS_H_

// Limits the server and its workers must agree on. Each side checks them on
// what it receives, so they are stated here, once, for both.

namespace pagoda::wire {

// Ranks in one tensor-parallel group: the server refuses a larger
// --tensor-parallel-size, a worker a larger LoadModel world_size, and every
// communicator a larger group.
inline constexpr int kMaxWorldSize = 64;

// Most tokens and sequences one step may hold: a worker reserves its
// workspace from max_num_batched_tokens and max_num_seqs at load, so this
// bounds what a hostile LoadModel request can make a worker allocate; the
// server refuses a larger --max-num-batched-tokens or --max-num-seqs before
// it spawns a worker.
inline constexpr int kMaxWorkspaceTokens = 1 << 20;

// The largest gRPC message between the server and a worker, either way (a
// step plan of a full batch, or a LoadModel with every option), and the
// largest frame on a spawned worker's step channel.
inline constexpr int kMaxWorkerMessageBytes = 256 << 20;
// The range of `pagoda-worker --max-message-bytes`, the worker's own receive
// limit: at most kMaxWorkerMessageBytes (what the server sends at most), at
// least enough for a LoadModel and a small batch's step.
inline constexpr int kMinWorkerReceiveLimitBytes = 1 << 20;

}  // namespace pagoda::wire

#endif  // PAGODA_WIRE_LIMITS_H_
