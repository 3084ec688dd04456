#include "scheduler/engine/sampling_deltas.h"

#include <algorithm>
#include <bit>
#include <utility>

#include "common/sampling_limits.h"
#include "glog/logging.h"

namespace pagoda::scheduler {
namespace {

namespace wv1 = ::pagoda::worker::v1;

// The fields SameSamplingOptions compares: SamplingOptions' count when it
// was written.
constexpr int kComparedSamplingFields = 18;

bool SameFloatBits(float a, float b) {
  return std::bit_cast<uint32_t>(a) == std::bit_cast<uint32_t>(b);
}

template <typename T>
bool SameRepeated(const google::protobuf::RepeatedField<T>& a,
                  const google::protobuf::RepeatedField<T>& b) {
  if constexpr (std::is_same_v<T, float>) {
    return std::equal(a.begin(), a.end(), b.begin(), b.end(), SameFloatBits);
  } else {
    return std::equal(a.begin(), a.end(), b.begin(), b.end());
  }
}

}  // namespace

bool SameSamplingOptions(const wv1::SamplingOptions& a, const wv1::SamplingOptions& b) {
  return SameSamplingOptionsBesidesBans(a, b) &&
         SameRepeated(a.banned_token_ids(), b.banned_token_ids());
}

bool SameSamplingOptionsBesidesBans(const wv1::SamplingOptions& a,
                                    const wv1::SamplingOptions& b) {
  return SameFloatBits(a.temperature(), b.temperature()) && a.top_k() == b.top_k() &&
         SameFloatBits(a.top_p(), b.top_p()) && a.seed() == b.seed() &&
         a.num_logprobs() == b.num_logprobs() &&
         SameFloatBits(a.presence_penalty(), b.presence_penalty()) &&
         SameFloatBits(a.frequency_penalty(), b.frequency_penalty()) &&
         SameFloatBits(a.repetition_penalty(), b.repetition_penalty()) &&
         SameFloatBits(a.min_p(), b.min_p()) &&
         SameRepeated(a.logit_bias_token_ids(), b.logit_bias_token_ids()) &&
         SameRepeated(a.logit_bias_values(), b.logit_bias_values()) &&
         SameRepeated(a.allowed_token_ids(), b.allowed_token_ids()) &&
         SameRepeated(a.prompt_token_ids(), b.prompt_token_ids()) &&
         SameRepeated(a.output_token_ids(), b.output_token_ids()) &&
         SameRepeated(a.output_token_counts(), b.output_token_counts()) &&
         a.token_mask() == b.token_mask() && a.processed_logprobs() == b.processed_logprobs();
}

SamplingDeltas::SamplingDeltas() {
  // A field SameSamplingOptions does not compare would let a row repeat
  // options that differ in it: refuse to run rather than send wrong ones.
  CHECK_EQ(Options::descriptor()->field_count(), kComparedSamplingFields)
      << "SamplingOptions changed: make SameSamplingOptions compare every field";
}

void SamplingDeltas::Recycle(PlanOptions* plan) {
  for (PlanOptions::Row& row : plan->rows) {
    if (row.options != nullptr) spare_.push_back(std::move(row.options));
  }
  plan->rows.clear();
  plan->index.clear();
}

void SamplingDeltas::BeginPlan(int64_t step_id) {
  // The plan begun before this one is what the workers will hold.
  extends_previous_ = current_step_.has_value() && *current_step_ == step_id - 1;
  std::swap(previous_, current_);
  Recycle(&current_);
  if (!extends_previous_) Recycle(&previous_);
  next_previous_row_ = 0;
  current_step_ = step_id;
}

SamplingDeltas::PlanOptions::Row* SamplingDeltas::PreviousRow(int64_t seq_id) {
  std::vector<PlanOptions::Row>& rows = previous_.rows;
  size_t row = next_previous_row_;
  if (row >= rows.size() || rows[row].seq_id != seq_id) {
    if (previous_.index.empty()) {
      previous_.index.reserve(rows.size());
      for (size_t i = 0; i < rows.size(); ++i)
        previous_.index[rows[i].seq_id] = static_cast<int>(i);
    }
    auto it = previous_.index.find(seq_id);
    if (it == previous_.index.end()) return nullptr;
    row = static_cast<size_t>(it->second);
  }
  next_previous_row_ = row + 1;
  return &rows[row];
}

std::unique_ptr<SamplingDeltas::Options> SamplingDeltas::KeepCopy(const Options& options) {
  if (spare_.empty()) return std::make_unique<Options>(options);
  std::unique_ptr<Options> kept = std::move(spare_.back());
  spare_.pop_back();
  *kept = options;
  return kept;
}

bool SamplingDeltas::Unchanged(int64_t seq_id, const Options& options) {
  PlanOptions::Row& recorded = current_.rows.emplace_back();
  recorded.seq_id = seq_id;
  // Penalty counts grow every step: GrowsPenaltyRow sends those rows.
  if (options.output_token_ids_size() > 0) return false;
  PlanOptions::Row* previous = extends_previous_ ? PreviousRow(seq_id) : nullptr;
  if (previous != nullptr && previous->options != nullptr && previous->counted_outputs < 0 &&
      SameSamplingOptions(*previous->options, options)) {
    recorded.options = std::move(previous->options);  // No copy in the usual case.
    return true;
  }
  recorded.options = KeepCopy(options);
  return false;
}

bool SamplingDeltas::GrowsPenaltyRow(int64_t seq_id, const Options& light,
                                     const PenaltySource& source,
                                     int* counted_before) {
  PlanOptions::Row& recorded = current_.rows.emplace_back();
  recorded.seq_id = seq_id;
  recorded.counted_outputs = source.counted_outputs;
  recorded.prompt_tokens = source.prompt_tokens;
  PlanOptions::Row* previous = extends_previous_ ? PreviousRow(seq_id) : nullptr;
  const bool grows =
      previous != nullptr && previous->options != nullptr && previous->counted_outputs >= 0 &&
      previous->prompt_tokens == source.prompt_tokens &&
      previous->counted_outputs <= recorded.counted_outputs &&
      recorded.counted_outputs - previous->counted_outputs <= kMaxAppendedOutputTokens &&
      SameSamplingOptionsBesidesBans(*previous->options, light);
  if (!grows) {
    recorded.options = KeepCopy(light);
    return false;
  }
  recorded.options = std::move(previous->options);  // Same but for the bans, unread.
  *counted_before = previous->counted_outputs;
  return true;
}

void SamplingDeltas::Reset() {
  Recycle(&previous_);
  Recycle(&current_);
  next_previous_row_ = 0;
  current_step_.reset();
  extends_previous_ = false;
}

}  // namespace pagoda::scheduler
