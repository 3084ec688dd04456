#include "scheduler/kv/block_manager.h"

#include <algorithm>
#include <optional>

#include "absl/container/flat_hash_set.h"
#include "absl/hash/hash.h"
#include "absl/strings/str_cat.h"
#include "glog/logging.h"

namespace pagoda::scheduler {
namespace {

bool SameTokens(const KvSequence& a, const KvSequence& b) {
  if (a.length() != b.length()) return false;
  for (int i = 0; i < a.length(); ++i) {
    if (a.token_at(i) != b.token_at(i)) return false;
  }
  return true;
}

// Index of an earlier sequence in `seqs` with the same tokens as seqs[i], or
// -1. Such sequences share their blocks at allocation.
int FindTwin(absl::Span<const KvSequence* const> seqs, int i) {
  for (int j = 0; j < i; ++j) {
    if (SameTokens(*seqs[j], *seqs[i])) return j;
  }
  return -1;
}

// Token ids of logical block `index` of seq (full or not).
std::vector<int32_t> BlockTokens(const KvSequence& seq, int index, int block_size) {
  std::vector<int32_t> tokens;
  const int end = std::min(seq.length(), (index + 1) * block_size);
  for (int i = index * block_size; i < end; ++i) tokens.push_back(seq.token_at(i));
  return tokens;
}

// The parent hash of a sequence's first block: 0 for the base model, a
// value of the adapter's own for an adapter's sequence, so the chain of
// every block differs and a prefix cached for one is never reused for
// another (the same prompt under another adapter has other K/V).
uint64_t RootHash(const KvSequence& seq) {
  if (seq.lora_id() == 0) return 0;
  const uint64_t root = absl::HashOf(uint64_t{0x4c6f5241}, seq.lora_id());  // "LoRA".
  return root != 0 ? root : 1;
}

}  // namespace

uint64_t DefaultBlockHash(uint64_t parent_hash, absl::Span<const int32_t> tokens) {
  return absl::HashOf(parent_hash, tokens);
}

BlockManager::BlockManager(int block_size, int num_gpu_blocks, int num_cpu_blocks, double watermark,
                           bool enable_prefix_caching, BlockHasher hasher)
    : block_size_(block_size),
      watermark_blocks_(static_cast<int>(watermark * num_gpu_blocks)),
      enable_prefix_caching_(enable_prefix_caching),
      hasher_(hasher),
      gpu_(num_gpu_blocks),
      cpu_(num_cpu_blocks) {
  CHECK_GT(block_size, 0);
  CHECK_GE(watermark, 0.0);
  CHECK_LT(watermark, 1.0);
}

AllocStatus BlockManager::CheckFits(int needed) const {
  if (gpu_.num_total() - needed < watermark_blocks_) return AllocStatus::kNever;
  if (gpu_.num_free() - needed >= watermark_blocks_) return AllocStatus::kOk;
  return AllocStatus::kLater;
}

int BlockManager::BlocksForPrompts(absl::Span<const KvSequence* const> seqs) const {
  int needed = 0;
  for (int i = 0; i < static_cast<int>(seqs.size()); ++i) {
    if (FindTwin(seqs, i) < 0) needed += BlocksForTokens(seqs[i]->length());
  }
  return needed;
}

absl::Status BlockManager::Allocate(const KvSequenceGroup& group) {
  const auto seqs = group.SequencesIn(KvPhase::kWaiting);
  for (const KvSequence* seq : seqs) {
    CHECK(!tables_.contains(seq->seq_id())) << "sequence " << seq->seq_id() << " has blocks";
  }
  const int needed = BlocksForPrompts(seqs);
  if (needed > gpu_.num_free()) {
    return absl::ResourceExhaustedError(
        absl::StrCat("prompt needs ", needed, " blocks, ", gpu_.num_free(), " free"));
  }
  for (int i = 0; i < static_cast<int>(seqs.size()); ++i) {
    const int twin = FindTwin(seqs, i);
    if (twin >= 0) {
      Fork(*seqs[twin], *seqs[i]);  // The same tokens: it shares the twin's blocks.
    } else {
      tables_[seqs[i]->seq_id()] =
          AllocateTable(*seqs[i], /*reuse_cached=*/!group.SkipsPrefixCache());
    }
  }
  return absl::OkStatus();
}

BlockTable BlockManager::AllocateTable(const KvSequence& seq, bool reuse_cached) {
  BlockTable table;
  if (enable_prefix_caching_ && reuse_cached) {
    // The last token is always computed, so only blocks before it can hit.
    const int max_hits = (seq.length() - 1) / block_size_;
    uint64_t parent = RootHash(seq);
    for (int b = 0; b < max_hits; ++b) {
      const std::vector<int32_t> tokens = BlockTokens(seq, b, block_size_);
      const uint64_t hash = hasher_(parent, tokens);
      const std::optional<int> hit = gpu_.AllocateCached(hash, tokens);
      if (!hit.has_value()) break;
      table.blocks.push_back(*hit);
      table.hashes.push_back(hash);
      parent = hash;
    }
    if (recompute_last_cached_block_ && !table.blocks.empty()) {
      gpu_.Release(table.blocks.back());  // Stays cached; a fresh block replaces it.
      table.blocks.pop_back();
      table.hashes.pop_back();
    }
    table.num_cached_tokens = static_cast<int>(table.blocks.size()) * block_size_;
    prefix_cache_queries_ += seq.length();
    prefix_cache_hits_ += table.num_cached_tokens;
  }
  while (static_cast<int>(table.blocks.size()) < BlocksForTokens(seq.length())) {
    table.blocks.push_back(*gpu_.Allocate());  // The caller checked the free count.
  }
  return table;
}

void BlockManager::CommitComputedBlocks(const KvSequence& seq) {
  if (!enable_prefix_caching_) return;
  auto it = tables_.find(seq.seq_id());
  if (it == tables_.end() || !it->second.on_gpu) return;
  BlockTable& table = it->second;
  const int first_new = static_cast<int>(table.hashes.size());
  const int full_blocks = std::min(seq.num_computed_tokens(), seq.length()) / block_size_;
  for (int b = first_new; b < full_blocks && b < static_cast<int>(table.blocks.size()); ++b) {
    const uint64_t parent = b == 0 ? RootHash(seq) : table.hashes[b - 1];
    table.hashes.push_back(hasher_(parent, BlockTokens(seq, b, block_size_)));
  }
  RegisterHashes(seq, table, first_new);
}

void BlockManager::ResetPrefixCache() {
  gpu_.ForgetCachedContents();
  for (auto& [seq_id, table] : tables_) table.hashes.clear();
}

void BlockManager::RegisterHashes(const KvSequence& seq, const BlockTable& table, int from) {
  bool in_run = false;  // Whether the last block started or joined a BlockStored.
  for (int b = from; b < static_cast<int>(table.hashes.size()); ++b) {
    const std::vector<int32_t> tokens = BlockTokens(seq, b, block_size_);
    const std::optional<uint64_t> parent =
        b == 0 ? std::nullopt : std::optional<uint64_t>(table.hashes[b - 1]);
    // Fails harmlessly when another block already caches these tokens.
    if (!gpu_.SetHash(table.blocks[b], table.hashes[b], tokens, parent, seq.lora_id())) {
      in_run = false;
      continue;
    }
    if (!kv_events_enabled_) continue;
    if (!in_run) kv_events_.AddStored(parent, block_size_, seq.lora_id());
    kv_events_.AppendStoredBlock(table.hashes[b], tokens);
    in_run = true;
  }
}

void BlockManager::EnableKvEvents() {
  if (!enable_prefix_caching_ || kv_events_enabled_) return;
  kv_events_enabled_ = true;
  gpu_.set_event_log(&kv_events_);
}

KvEventBatch BlockManager::CachedBlocksAsEvents() const {
  KvEventBatch batch;
  batch.AddCleared();
  gpu_.AppendCachedBlocks(block_size_, batch);
  return batch;
}

BlockManager::Growth BlockManager::GrowthOf(const KvSequence& seq,
                                            const std::vector<int>& blocks) const {
  // Called for every running sequence at every step: each virtual call once,
  // and no division on the usual path.
  const int held = static_cast<int>(blocks.size());
  const int capacity = held * block_size_;
  const int length = seq.length();
  const int slots = length + seq.num_lookahead_slots();
  Growth growth;
  if (slots > capacity) growth.new_blocks = BlocksForTokens(slots) - held;
  const int token_slot = length - 1;
  if (token_slot < capacity) {
    // Usually the last held block; a division only past lookahead slots.
    growth.token_block = token_slot >= capacity - block_size_ ? held - 1 : token_slot / block_size_;
    growth.copy_on_write = gpu_.ref_count(blocks[growth.token_block]) > 1;
  }
  return growth;
}

int BlockManager::BlocksToAppendSlots(const KvSequenceGroup& group) const {
  int may_need = 0;
  for (const KvSequence* seq : group.SequencesIn(KvPhase::kRunning)) {
    auto it = tables_.find(seq->seq_id());
    if (it == tables_.end() || !it->second.on_gpu) continue;  // AppendSlots will refuse.
    const Growth growth = GrowthOf(*seq, it->second.blocks);
    may_need += growth.new_blocks + (growth.copy_on_write ? 1 : 0);
  }
  return may_need;
}

absl::StatusOr<std::optional<BlockMove>> BlockManager::AppendSlots(const KvSequence& seq) {
  auto it = tables_.find(seq.seq_id());
  CHECK(it != tables_.end() && it->second.on_gpu) << "sequence " << seq.seq_id() << " not on GPU";
  std::vector<int>& blocks = it->second.blocks;
  const Growth growth = GrowthOf(seq, blocks);
  const int needed = growth.new_blocks + (growth.copy_on_write ? 1 : 0);
  if (needed == 0) return std::nullopt;  // Most decodes: the token fits its own block.
  if (needed > gpu_.num_free()) return absl::ResourceExhaustedError("no free KV block");
  for (int b = 0; b < growth.new_blocks; ++b) blocks.push_back(*gpu_.Allocate());
  if (!growth.copy_on_write) return std::nullopt;
  // The token lands in a block other sequences still read: copy on write.
  const int shared = blocks[growth.token_block];
  const int copy = *gpu_.Allocate();
  gpu_.Release(shared);
  blocks[growth.token_block] = copy;
  return BlockMove{shared, copy};
}

void BlockManager::TrimToLength(const KvSequence& seq) {
  auto it = tables_.find(seq.seq_id());
  if (it == tables_.end() || !it->second.on_gpu) return;
  std::vector<int>& blocks = it->second.blocks;
  const int keep = BlocksForTokens(seq.length());
  while (static_cast<int>(blocks.size()) > keep) {
    gpu_.Release(blocks.back());
    blocks.pop_back();
  }
  // Hashes cover full computed blocks, all within the length.
  DCHECK_LE(static_cast<int>(it->second.hashes.size()), keep);
}

void BlockManager::Fork(const KvSequence& parent, const KvSequence& child) {
  auto it = tables_.find(parent.seq_id());
  CHECK(it != tables_.end()) << "parent sequence " << parent.seq_id() << " has no blocks";
  CHECK(!tables_.contains(child.seq_id())) << "child sequence " << child.seq_id() << " has blocks";
  BlockTable table = it->second;
  BlockPool& pool = table.on_gpu ? gpu_ : cpu_;
  for (int block : table.blocks) pool.AddReference(block);
  tables_[child.seq_id()] = std::move(table);
}

void BlockManager::Free(int64_t seq_id) {
  auto it = tables_.find(seq_id);
  if (it == tables_.end()) return;
  BlockPool& pool = it->second.on_gpu ? gpu_ : cpu_;
  const std::vector<int>& blocks = it->second.blocks;
  for (auto block = blocks.rbegin(); block != blocks.rend(); ++block) pool.Release(*block);
  tables_.erase(it);
}

int BlockManager::CountDistinctBlocks(absl::Span<const KvSequence* const> seqs) const {
  absl::flat_hash_set<int> blocks;
  for (const KvSequence* seq : seqs) {
    auto it = tables_.find(seq->seq_id());
    if (it != tables_.end()) blocks.insert(it->second.blocks.begin(), it->second.blocks.end());
  }
  return static_cast<int>(blocks.size());
}

AllocStatus BlockManager::CanSwapIn(const KvSequenceGroup& group) const {
  const auto seqs = group.SequencesIn(KvPhase::kSwapped);
  // One spare block per sequence for the token it appends right after.
  return CheckFits(CountDistinctBlocks(seqs) + static_cast<int>(seqs.size()));
}

bool BlockManager::CanSwapOut(const KvSequenceGroup& group) const {
  return CountDistinctBlocks(group.SequencesIn(KvPhase::kRunning)) <= cpu_.num_free();
}

absl::StatusOr<std::vector<BlockMove>> BlockManager::Move(absl::Span<const KvSequence* const> seqs,
                                                          bool to_gpu) {
  for (const KvSequence* seq : seqs) {
    auto it = tables_.find(seq->seq_id());
    CHECK(it != tables_.end() && it->second.on_gpu != to_gpu) << "sequence " << seq->seq_id();
  }
  BlockPool& from = to_gpu ? cpu_ : gpu_;
  BlockPool& to = to_gpu ? gpu_ : cpu_;
  if (CountDistinctBlocks(seqs) > to.num_free()) {
    return absl::ResourceExhaustedError(
        absl::StrCat("not enough free ", to_gpu ? "GPU" : "CPU", " blocks to swap"));
  }
  // A block shared by several sequences moves once; each reference to it
  // becomes a reference to its copy, so ref counts carry over.
  absl::flat_hash_map<int, int> moved;
  std::vector<BlockMove> moves;
  for (const KvSequence* seq : seqs) {
    BlockTable& table = tables_.at(seq->seq_id());
    for (int& block : table.blocks) {
      auto [it, inserted] = moved.try_emplace(block, -1);
      if (inserted) {
        it->second = *to.Allocate();  // Checked above.
        moves.push_back(BlockMove{block, it->second});
      } else {
        to.AddReference(it->second);
      }
      from.Release(block);
      block = it->second;
    }
    table.on_gpu = to_gpu;
    // The GPU copies of computed full blocks can serve prefix hits again.
    if (to_gpu && enable_prefix_caching_) RegisterHashes(*seq, table, 0);
  }
  return moves;
}

const BlockTable* BlockManager::FindBlockTable(int64_t seq_id) const {
  auto it = tables_.find(seq_id);
  return it == tables_.end() ? nullptr : &it->second;
}

const std::vector<int>& BlockManager::GetBlockTable(int64_t seq_id) const {
  static const std::vector<int>* const kEmpty = new std::vector<int>();
  const BlockTable* table = FindBlockTable(seq_id);
  return table == nullptr ? *kEmpty : table->blocks;
}

}  // namespace pagoda::scheduler
