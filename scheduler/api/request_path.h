// The one request path of every front door (pagoda.v1 gRPC, vLLM's engine
// gRPC, OpenAI HTTP): the API key, validation on the process's one
// tokenizer pool, submission to the engine, and the ends a front door asks
// of the engine (a stop string, a client gone). The front doors only
// translate their wire formats into it and back; a rule written here holds
// for all three.
#ifndef PAGODA_SCHEDULER_API_REQUEST_PATH_H_
#define PAGODA_SCHEDULER_API_REQUEST_PATH_H_

#include <functional>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "pagoda/v1/generation.pb.h"
#include "scheduler/api/call_tracker.h"
#include "scheduler/api/lora_adapters.h"
#include "scheduler/api/request_log.h"
#include "scheduler/api/request_output.h"
#include "scheduler/api/request_validation.h"
#include "scheduler/api/validation_pool.h"
#include "scheduler/engine/engine.h"
#include "text/tokenizer.h"

namespace pagoda::scheduler {

struct RequestPathOptions {
  // When set, every request must carry "Bearer <api_key>" (as vLLM's
  // --api-key); each front door says where (gRPC metadata, HTTP header).
  std::string api_key;
  // Threads that tokenize text prompts and render chat templates for every
  // front door, and how many such requests may wait for them before more
  // are refused RESOURCE_EXHAUSTED (pagoda-server: --max-queued-requests,
  // so the pool never refuses a request the engine's queue would take).
  int tokenizer_threads = 2;
  int max_pending_tokenizations = 256;
  // The served LoRA adapters (--enable-lora; docs/lora.md), null without:
  // a request naming an adapter is then NOT_FOUND. Must outlive the path.
  LoraAdapters* lora_adapters = nullptr;
  // vLLM's request log (off by default).
  RequestLogOptions request_log;
};

// Why a front door ends its own request before the engine does.
enum class EarlyEnd {
  kStopStrings,  // Stop strings ended every sequence: the engine records "stop".
  kClientGone,   // The client left, cancelled or stopped reading: "abort".
};

// Thread-safe. The engine, validator and tokenizer must outlive the path,
// and the path every front door that uses it.
class RequestPath {
 public:
  // `tokenizer` may be null (token-id prompts only).
  RequestPath(Engine* engine, RequestValidator* validator, const Tokenizer* tokenizer,
              RequestPathOptions options);
  RequestPath(const RequestPath&) = delete;
  RequestPath& operator=(const RequestPath&) = delete;

  // The API key rule: true when no key is configured or `authorization`
  // (the header or metadata value, "" if absent) is "Bearer <api_key>".
  bool Authorized(absl::string_view authorization) const;
  const std::string& api_key() const { return options_.api_key; }

  // Runs `work` (which validates a request and goes on with it): on the
  // tokenizer pool when `needs_tokenizer` (text to tokenize or render),
  // else right here. RESOURCE_EXHAUSTED, with `work` dropped unrun, when the
  // pool is full. `pending` (may be null) counts the work from now until it
  // and what it holds are gone, so that a front door can wait for its own
  // work before it goes (WaitUntilIdle).
  absl::Status RunValidation(bool needs_tokenizer, CallTracker* pending,
                             std::function<void()> work);
  absl::StatusOr<ValidatedRequest> Validate(const pagoda::v1::GenerateRequest& request) {
    return validator_->Validate(request);
  }

  // The output builder of a validated request: its stop strings, its n,
  // the detokenizer.
  RequestOutput MakeOutput(const ValidatedRequest& request) const;
  // Hands `request` (its prompt moved out) to the engine, which reports to
  // `sink`; the engine's refusal otherwise. The one place an adapter name
  // is resolved: acquired in the registry (NOT_FOUND when not served) and
  // handed to the engine by id, which releases it when the request ends;
  // released here when the engine refuses the request.
  absl::Status Submit(ValidatedRequest& request, std::shared_ptr<RequestSink> sink);
  // Ends the request `request_id` that `sink` was submitted with; ignored
  // when the engine never took that sink.
  void EndEarly(const std::string& request_id, const RequestSink* sink, EarlyEnd why);
  // After a delta: when stop strings have just ended every sequence of
  // `output`, ends the request (EndEarly, kStopStrings) and returns true.
  bool EndIfStopped(RequestOutput& output, const std::string& request_id, const RequestSink* sink);

  Engine* engine() const { return engine_; }
  const Tokenizer* tokenizer() const { return tokenizer_; }
  const ModelLimits& limits() const { return validator_->limits(); }
  // Null without --enable-lora.
  LoraAdapters* lora_adapters() const { return options_.lora_adapters; }

 private:
  // 0 for "" (the base model), else the adapter's id, acquired.
  absl::StatusOr<int> AcquireAdapter(const std::string& lora_name);

  const RequestPathOptions options_;
  Engine* const engine_;
  RequestValidator* const validator_;
  const Tokenizer* const tokenizer_;
  // Last: joined (running what it accepted) before the rest goes.
  ValidationPool pool_;
};

}  // namespace pagoda::scheduler

#endif  // PAGODA_SCHEDULER_API_REQUEST_PATH_H_
