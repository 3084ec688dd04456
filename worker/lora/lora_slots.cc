#include "worker/lora/lora_slots.h"

#include <algorithm>
#include <tuple>
#include <utility>

#include "absl/strings/str_cat.h"
#include "worker/cpu/simd.h"
#include "worker/lora/lora_kernel.h"

namespace pagoda::worker {
namespace {

// The tasks of an Apply: ranges of the grouped rows (group s is
// [group_starts[s], group_starts[s + 1])), each inside one slot's group and
// at most kLoraRowsPerCall long, a group split evenly: every task's rows
// share one pass over their adapter's A and B.
std::vector<std::pair<int64_t, int64_t>> SplitLoraGroups(const std::vector<int>& group_starts) {
  std::vector<std::pair<int64_t, int64_t>> tasks;
  for (size_t s = 0; s + 1 < group_starts.size(); ++s) {
    const int64_t begin = group_starts[s], rows = group_starts[s + 1] - begin;
    const int64_t pieces = (rows + kLoraRowsPerCall - 1) / kLoraRowsPerCall;
    for (int64_t p = 0; p < pieces; ++p) {
      tasks.emplace_back(begin + rows * p / pieces, begin + rows * (p + 1) / pieces);
    }
  }
  return tasks;
}

// `m` ([rows, cols] row-major) transposed.
std::vector<float> Transposed(const std::vector<float>& m, int64_t rows, int64_t cols) {
  std::vector<float> t(m.size());
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) t[c * rows + r] = m[r * cols + c];
  }
  return t;
}

// `rows`' ids in ascending order, with their rows moved along.
LoraSlots::TokenRows SortedTokenRows(const LoraTokenRows& rows, int64_t hidden) {
  std::vector<size_t> order(rows.ids.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(),
            [&](size_t a, size_t b) { return rows.ids[a] < rows.ids[b]; });
  LoraSlots::TokenRows sorted;
  for (size_t i : order) {
    sorted.ids.push_back(rows.ids[i]);
    sorted.rows.insert(sorted.rows.end(), rows.rows.begin() + i * hidden,
                       rows.rows.begin() + (i + 1) * hidden);
  }
  return sorted;
}

// `token`'s replacement row in `rows`; null when it has none.
const float* FindTokenRow(const LoraSlots::TokenRows& rows, int32_t token, int64_t hidden) {
  auto it = std::lower_bound(rows.ids.begin(), rows.ids.end(), token);
  if (it == rows.ids.end() || *it != token) return nullptr;
  return rows.rows.data() + (it - rows.ids.begin()) * hidden;
}

}  // namespace

LoraSlots::LoraSlots(int max_loras, int max_rank, int num_layers,
                     const std::array<LinearShape, kNumLoraModules>& shapes)
    : LoraSlots(max_loras, max_rank, num_layers, shapes, BestSimdKernels()) {}

LoraSlots::LoraSlots(int max_loras, int max_rank, int num_layers,
                     const std::array<LinearShape, kNumLoraModules>& shapes,
                     const SimdKernels& simd)
    : simd_(&simd),
      max_loras_(max_loras),
      max_rank_(max_rank),
      num_layers_(num_layers),
      shapes_(shapes),
      slots_(static_cast<size_t>(max_loras) + 1) {}

size_t LoraSlots::MaxAdapterBytes() const {
  size_t per_layer = 0;
  for (const LinearShape& shape : shapes_) per_layer += static_cast<size_t>(shape.in + shape.out);
  const size_t vocabulary = 2 * static_cast<size_t>(vocabulary_.in + vocabulary_.out);
  const size_t token_rows = 2 * static_cast<size_t>(max_trainable_tokens_) * vocabulary_.in;
  return ((per_layer * num_layers_ + vocabulary) * max_rank_ + token_rows) * sizeof(float);
}

absl::Status LoraSlots::CheckTokenRows(const LoraAdapter& adapter) const {
  for (const auto& [rows, name] : {std::pair{&adapter.embed_token_rows, kLoraEmbedTokens},
                                   std::pair{&adapter.lm_head_token_rows, kLoraLmHead}}) {
    if (!*rows) continue;
    const LoraTokenRows& r = **rows;
    if (r.ids.size() > static_cast<size_t>(max_trainable_tokens_) ||
        r.rows.size() != r.ids.size() * vocabulary_.in) {
      return absl::InvalidArgumentError(absl::StrCat(
          "LoRA ", name, " replaces ", r.ids.size(), " trainable tokens' rows of ",
          r.ids.empty() ? 0 : r.rows.size() / r.ids.size(), " features; this worker takes at most ",
          max_trainable_tokens_, " (--max-lora-trainable-tokens) of ", vocabulary_.in));
    }
    for (int32_t id : r.ids) {
      if (id < 0 || id >= vocabulary_.out) {
        return absl::InvalidArgumentError(absl::StrCat("LoRA ", name, " trainable token id ", id,
                                                       " is outside [0, ", vocabulary_.out, ")"));
      }
    }
  }
  return absl::OkStatus();
}

absl::Status LoraSlots::CheckVocabularyUpdates(const LoraAdapter& adapter) const {
  if (!adapter.embed_tokens && !adapter.lm_head && !adapter.embed_token_rows &&
      !adapter.lm_head_token_rows) {
    return absl::OkStatus();
  }
  if (vocabulary_.out == 0 || device_ != nullptr) {
    return absl::InvalidArgumentError(
        "LoRA on embed_tokens or lm_head (trainable tokens too) runs on the CPU worker only "
        "(docs/lora.md)");
  }
  if (absl::Status s = CheckTokenRows(adapter); !s.ok()) return s;
  // embed_tokens maps a one-hot token to a hidden row: in vocab, out hidden.
  const LinearShape embed{vocabulary_.in, vocabulary_.out};
  for (const auto& [pair, name, expected] :
       {std::tuple{&adapter.embed_tokens, kLoraEmbedTokens, embed},
        std::tuple{&adapter.lm_head, kLoraLmHead, vocabulary_}}) {
    if (!*pair) continue;
    const LoraMatrices& m = **pair;
    if (m.rank < 1 || m.rank > max_rank_ || m.in != expected.in || m.out != expected.out) {
      return absl::InvalidArgumentError(absl::StrCat("LoRA ", name, " of rank ", m.rank, " maps ",
                                                     m.in, " to ", m.out, "; this worker's takes ",
                                                     expected.in, " to ", expected.out,
                                                     " with rank at most ", max_rank_));
    }
  }
  return absl::OkStatus();
}

absl::Status LoraSlots::CheckAdapter(const LoraAdapter& adapter) const {
  if (static_cast<int>(adapter.layers.size()) != num_layers_) {
    return absl::InvalidArgumentError(absl::StrCat("LoRA adapter has ", adapter.layers.size(),
                                                   " layers, the model ", num_layers_));
  }
  for (const auto& layer : adapter.layers) {
    for (LoraModule module : kAllLoraModules) {
      const auto& pair = layer[static_cast<int>(module)];
      if (!pair) continue;
      const LinearShape expected = shapes_[static_cast<int>(module)];
      if (pair->rank < 1 || pair->rank > max_rank_ || pair->in != expected.in ||
          pair->out != expected.out) {
        return absl::InvalidArgumentError(
            absl::StrCat("LoRA ", LoraModuleName(module), " of rank ", pair->rank, " maps ",
                         pair->in, " to ", pair->out, "; this worker's takes ", expected.in, " to ",
                         expected.out, " with rank at most ", max_rank_));
      }
    }
  }
  return CheckVocabularyUpdates(adapter);
}

absl::Status LoraSlots::Load(int slot, const LoraAdapter& adapter) {
  if (slot < 1 || slot > max_loras_) {
    return absl::InvalidArgumentError(
        absl::StrCat("LoRA slot ", slot, " is outside [1, ", max_loras_, "]"));
  }
  Unload(slot);
  if (absl::Status status = CheckAdapter(adapter); !status.ok()) return status;
  auto target = std::make_shared<Slot>();
  target->layers.resize(num_layers_);
  for (int layer = 0; layer < num_layers_; ++layer) {
    for (int m = 0; m < kNumLoraModules; ++m) {
      const auto& pair = adapter.layers[layer][m];
      if (!pair) continue;
      if (device_ != nullptr) {  // The device holds the matrices.
        target->layers[layer][m] = Update{pair->rank, {}, {}};
        continue;
      }
      target->layers[layer][m] = Update{pair->rank, PackLoraA(pair->a.data(), pair->rank, pair->in),
                                        TransposeLoraB(pair->b.data(), pair->rank, pair->out)};
    }
  }
  if (adapter.embed_tokens) {
    const LoraMatrices& m = *adapter.embed_tokens;
    target->embed_tokens = EmbedUpdate{m.rank, Transposed(m.a, m.rank, m.in), m.b};
  }
  if (adapter.lm_head) {
    const LoraMatrices& m = *adapter.lm_head;
    target->lm_head = Update{m.rank, PackLoraA(m.a.data(), m.rank, m.in),
                             TransposeLoraB(m.b.data(), m.rank, m.out)};
  }
  if (adapter.embed_token_rows) {
    target->embed_rows = SortedTokenRows(*adapter.embed_token_rows, vocabulary_.in);
  }
  if (adapter.lm_head_token_rows) {
    target->head_rows = SortedTokenRows(*adapter.lm_head_token_rows, vocabulary_.in);
  }
  target->scale = adapter.scale;
  if (device_ != nullptr) {
    if (absl::Status status = device_->Upload(slot, adapter); !status.ok()) return status;
  }
  absl::MutexLock lock(&mutex_);
  slots_[slot] = std::move(target);
  return absl::OkStatus();
}

void LoraSlots::Unload(int slot) {
  if (slot < 1 || slot > max_loras_) return;
  std::shared_ptr<const Slot> old;
  absl::MutexLock lock(&mutex_);
  old = std::move(slots_[slot]);
  slots_[slot] = nullptr;
}

LoraSlots::View LoraSlots::Snapshot() const {
  View view;
  view.owner_ = this;
  absl::MutexLock lock(&mutex_);
  view.slots_ = slots_;
  return view;
}

int LoraSlots::View::rank(int slot, LoraTarget target) const {
  if (!loaded(slot) || target.layer < 0 ||
      target.layer >= static_cast<int>(slots_[slot]->layers.size())) {
    return 0;
  }
  const auto& update = slots_[slot]->layers[target.layer][static_cast<int>(target.module)];
  return update ? update->rank : 0;
}

absl::Status LoraSlots::View::CheckRowSlots(const int32_t* row_slots, int rows) const {
  const int num_slots = static_cast<int>(slots_.size());
  for (int r = 0; r < rows; ++r) {
    if (row_slots[r] < 0 || row_slots[r] >= num_slots) {
      return absl::InvalidArgumentError(absl::StrCat("row ", r, " names LoRA slot ", row_slots[r],
                                                     ", outside [0, ", num_slots - 1, "]"));
    }
  }
  return absl::OkStatus();
}

absl::Status LoraSlots::View::Apply(const float* x, int rows, const int32_t* row_slots,
                                    LoraTarget target, float* y, int64_t y_stride,
                                    const LoraParallelFor* parallel_for) const {
  if (owner_ == nullptr) return absl::FailedPreconditionError("LoRA view of no slots");
  if (owner_->device_ != nullptr) {
    return absl::FailedPreconditionError("LoRA slots on a device apply through it");
  }
  if (target.layer < 0 || target.layer >= owner_->num_layers_) {
    return absl::InvalidArgumentError(
        absl::StrCat("LoRA layer ", target.layer, " is outside [0, ", owner_->num_layers_, ")"));
  }
  const int module = static_cast<int>(target.module);
  auto update_of = [&](int s) -> const Update* {
    if (slots_[s] == nullptr) return nullptr;
    const auto& update = slots_[s]->layers[target.layer][module];
    return update ? &*update : nullptr;
  };
  return ApplyGrouped(update_of, owner_->shapes_[module], x, rows, row_slots, y, y_stride,
                      parallel_for);
}

absl::Status LoraSlots::View::ApplyLmHead(const float* x, int rows, const int32_t* row_slots,
                                          float* logits, int64_t logits_stride,
                                          const LoraParallelFor* parallel_for) const {
  if (owner_ == nullptr) return absl::FailedPreconditionError("LoRA view of no slots");
  auto update_of = [&](int s) -> const Update* {
    return slots_[s] != nullptr && slots_[s]->lm_head ? &*slots_[s]->lm_head : nullptr;
  };
  if (absl::Status s = ApplyGrouped(update_of, owner_->vocabulary_, x, rows, row_slots, logits,
                                    logits_stride, parallel_for);
      !s.ok()) {
    return s;
  }
  ReplaceTokenLogits(x, rows, row_slots, logits, logits_stride);
  return absl::OkStatus();
}

void LoraSlots::View::ReplaceTokenLogits(const float* x, int rows, const int32_t* row_slots,
                                         float* logits, int64_t logits_stride) const {
  const int64_t hidden = owner_->vocabulary_.in;
  const int64_t stride = logits_stride > 0 ? logits_stride : owner_->vocabulary_.out;
  for (int r = 0; r < rows; ++r) {
    const Slot* slot = slots_[row_slots[r]].get();  // Checked by ApplyGrouped.
    if (slot == nullptr || !slot->head_rows) continue;
    const TokenRows& head = *slot->head_rows;
    for (size_t i = 0; i < head.ids.size(); ++i) {
      const float* w = head.rows.data() + i * hidden;
      float sum = 0;
      for (int64_t h = 0; h < hidden; ++h) sum += x[r * hidden + h] * w[h];
      logits[r * stride + head.ids[i]] = sum;
    }
  }
}

absl::Status LoraSlots::View::ApplyEmbedding(const int32_t* token_ids, int rows,
                                             const int32_t* row_slots, float* y) const {
  if (owner_ == nullptr) return absl::FailedPreconditionError("LoRA view of no slots");
  if (absl::Status s = CheckRowSlots(row_slots, rows); !s.ok()) return s;
  const int64_t vocab = owner_->vocabulary_.out, hidden = owner_->vocabulary_.in;
  for (int r = 0; r < rows; ++r) {
    const Slot* slot = slots_[row_slots[r]].get();
    if (slot == nullptr || (!slot->embed_tokens && !slot->embed_rows)) continue;
    if (token_ids[r] < 0 || token_ids[r] >= vocab) {
      return absl::InvalidArgumentError(
          absl::StrCat("row ", r, " has token id ", token_ids[r], ", outside [0, ", vocab, ")"));
    }
    float* out = y + r * hidden;
    if (const float* row = slot->embed_rows ? FindTokenRow(*slot->embed_rows, token_ids[r], hidden)
                                            : nullptr) {
      std::copy(row, row + hidden, out);  // Replaces the row, LoRA update and all.
      continue;
    }
    if (!slot->embed_tokens) continue;
    const EmbedUpdate& update = *slot->embed_tokens;
    // B (hidden x rank) times token t's column of A, a contiguous row of Aᵀ.
    const float* a = update.a_t.data() + static_cast<int64_t>(token_ids[r]) * update.rank;
    for (int64_t h = 0; h < hidden; ++h) {
      const float* b = update.b.data() + h * update.rank;
      float sum = 0;
      for (int k = 0; k < update.rank; ++k) sum += b[k] * a[k];
      out[h] += slot->scale * sum;
    }
  }
  return absl::OkStatus();
}

absl::Status LoraSlots::View::ApplyGrouped(absl::FunctionRef<const Update*(int)> update_of,
                                           LinearShape shape, const float* x, int rows,
                                           const int32_t* row_slots, float* y, int64_t y_stride,
                                           const LoraParallelFor* parallel_for) const {
  if (absl::Status s = CheckRowSlots(row_slots, rows); !s.ok()) return s;
  const int num_slots = static_cast<int>(slots_.size());
  std::vector<const Update*> by_slot(num_slots);
  for (int s = 0; s < num_slots; ++s) by_slot[s] = update_of(s);
  // The rows to update, grouped by slot (a counting sort), so each
  // adapter's A and B are read once per group while they stay in cache.
  std::vector<int> counts(num_slots + 1, 0);
  for (int r = 0; r < rows; ++r) {
    if (by_slot[row_slots[r]] != nullptr) ++counts[row_slots[r] + 1];
  }
  for (int s = 1; s <= num_slots; ++s) counts[s] += counts[s - 1];
  const int64_t num_updated = counts[num_slots];
  if (num_updated == 0) return absl::OkStatus();
  std::vector<int32_t> grouped(num_updated);
  std::vector<int> next(counts.begin(), counts.end() - 1);
  for (int r = 0; r < rows; ++r) {
    if (by_slot[row_slots[r]] != nullptr) grouped[next[row_slots[r]]++] = r;
  }

  const int64_t stride = y_stride > 0 ? y_stride : shape.out;
  const std::vector<std::pair<int64_t, int64_t>> tasks = SplitLoraGroups(counts);
  auto run_tasks = [&](int64_t first, int64_t last) {
    thread_local LoraScratch scratch;
    for (int64_t t = first; t < last; ++t) {
      const auto [begin, end] = tasks[t];
      const int s = row_slots[grouped[begin]];
      const Update& update = *by_slot[s];
      const LoraKernelWeights weights{
          update.a_panels.data(), update.b_t.data(), update.rank, shape.in, shape.out,
          slots_[s]->scale};
      AddLoraUpdate(*owner_->simd_, weights, x, grouped.data() + begin,
                    static_cast<int>(end - begin), scratch, y, stride);
    }
  };
  if (parallel_for != nullptr && *parallel_for && tasks.size() > 1) {
    (*parallel_for)(static_cast<int64_t>(tasks.size()), 1, run_tasks);
  } else {
    run_tasks(0, static_cast<int64_t>(tasks.size()));
  }
  return absl::OkStatus();
}

}  // namespace pagoda::worker
