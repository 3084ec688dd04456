#include "scheduler/api/request_path.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "glog/logging.h"
#include "scheduler/api/api_key.h"

namespace pagoda::scheduler {

RequestPath::RequestPath(Engine* engine, RequestValidator* validator, const Tokenizer* tokenizer,
                         RequestPathOptions options)
    : options_(std::move(options)),
      engine_(engine),
      validator_(validator),
      tokenizer_(tokenizer),
      pool_(std::max(1, options_.tokenizer_threads),
            std::max(1, options_.max_pending_tokenizations)) {}

bool RequestPath::Authorized(absl::string_view authorization) const {
  return BearerKeyMatches(options_.api_key, authorization);
}

absl::Status RequestPath::RunValidation(bool needs_tokenizer, CallTracker* pending,
                                        std::function<void()> work) {
  if (!needs_tokenizer) {
    work();
    return absl::OkStatus();
  }
  if (pending != nullptr) pending->Begin();
  const bool accepted = pool_.TrySubmit([pending, work = std::move(work)]() mutable {
    {
      // What the work holds goes before the front door may.
      std::function<void()> run = std::move(work);
      run();
    }
    if (pending != nullptr) pending->End();
  });
  if (accepted) return absl::OkStatus();
  if (pending != nullptr) pending->End();
  return absl::ResourceExhaustedError("too many requests are waiting to be tokenized; retry later");
}

RequestOutput RequestPath::MakeOutput(const ValidatedRequest& request) const {
  OutputOptions options;
  options.stop_strings = request.stop_strings;
  options.include_stop_str_in_output = request.include_stop_str_in_output;
  options.num_sequences = request.sampling.n;
  options.log_outputs = options_.request_log.outputs;
  options.max_log_len = options_.request_log.max_log_len;
  return RequestOutput(request.request_id, static_cast<int>(request.prompt_token_ids.size()),
                       tokenizer_, std::move(options));
}

absl::StatusOr<int> RequestPath::AcquireAdapter(const std::string& lora_name) {
  if (lora_name.empty()) return 0;
  if (options_.lora_adapters == nullptr) {
    return absl::NotFoundError(absl::StrCat("lora_name: the LoRA adapter \"", lora_name,
                                            "\" is not loaded; this server serves no adapters "
                                            "(pagoda-server --enable-lora)"));
  }
  absl::StatusOr<int> id = options_.lora_adapters->registry()->Acquire(lora_name);
  if (!id.ok()) return absl::NotFoundError(absl::StrCat("lora_name: ", id.status().message()));
  return id;
}

absl::Status RequestPath::Submit(ValidatedRequest& request, std::shared_ptr<RequestSink> sink) {
  absl::StatusOr<int> lora_id = AcquireAdapter(request.lora_name);
  if (!lora_id.ok()) return lora_id.status();
  if (options_.request_log.requests) LOG(INFO) << ReceivedRequestLine(request);
  if (options_.request_log.details) {
    LOG(INFO) << RequestDetailsLine(request, tokenizer_, options_.request_log.max_log_len);
  }
  EngineRequest out;
  out.lora_id = *lora_id;
  out.request_id = request.request_id;
  out.prompt_token_ids = std::move(request.prompt_token_ids);
  out.sampling = request.sampling;
  out.stopping = std::move(request.stopping);
  out.arrival_time = absl::Now();
  out.priority = request.priority;
  out.sink = std::move(sink);
  absl::Status accepted = engine_->AddRequest(std::move(out));
  if (!accepted.ok() && *lora_id != 0) options_.lora_adapters->registry()->Release(*lora_id);
  return accepted;
}

void RequestPath::EndEarly(const std::string& request_id, const RequestSink* sink, EarlyEnd why) {
  engine_->AbortRequest(request_id, sink,
                        why == EarlyEnd::kStopStrings ? Engine::AbortCause::kStopString
                                                      : Engine::AbortCause::kCancelled);
}

bool RequestPath::EndIfStopped(RequestOutput& output, const std::string& request_id,
                               const RequestSink* sink) {
  if (!output.TakeStopAbort()) return false;
  EndEarly(request_id, sink, EarlyEnd::kStopStrings);
  return true;
}

}  // namespace pagoda::scheduler
