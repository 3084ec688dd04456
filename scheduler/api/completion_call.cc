#include "scheduler/api/completion_call.h"

#include <algorithm>
#include <optional>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "boost/asio/dispatch.hpp"
#include "boost/asio/post.hpp"
#include "nlohmann/json.hpp"
#include "scheduler/api/http_json_reply.h"
#include "scheduler/api/request_output.h"

namespace pagoda::scheduler {

using nlohmann::json;

namespace {

// Counts one completion call in the routes' CallTracker while alive.
class InFlightCall {
 public:
  explicit InFlightCall(CallTracker* calls) : calls_(calls) { calls_->Begin(); }
  ~InFlightCall() { calls_->End(); }
  InFlightCall(const InFlightCall&) = delete;
  InFlightCall& operator=(const InFlightCall&) = delete;

 private:
  CallTracker* const calls_;
};

// One completion call: one engine request per prompt, answered as one
// response (JSON or SSE) whose choices are numbered prompt by prompt as
// vLLM does (prompt p, sample k, copy j -> index (p * n + k) * copies + j).
// Lives on its exchange's strand: every method runs there.
class CompletionCall : public HttpCall, public std::enable_shared_from_this<CompletionCall> {
 public:
  CompletionCall(RequestPath* path, std::string model, PreparedCompletion prepared,
                 std::shared_ptr<HttpExchange> exchange, CallTracker* calls)
      : path_(path),
        tokenizer_(path->tokenizer()),
        model_(std::move(model)),
        request_(std::move(prepared.request)),
        echo_(std::move(prepared.echo)),
        exchange_(std::move(exchange)),
        in_flight_(calls),
        created_(absl::ToUnixSeconds(absl::Now())) {
    validated_ = std::move(prepared.validated);
  }

  // Submits every prompt; on a refusal aborts those already submitted and
  // answers the error.
  void Start();
  void OnDelta(size_t part, const RequestDelta& delta);
  void OnFinish(size_t part, const absl::Status& status);
  void OnClientGone() override { AbortAll(); }

 private:
  // What the engine sends goes to the strand; nothing else on its thread.
  // Deltas queue here and one post carries all that arrived before the
  // strand took them: under load (the loop behind the engine) a request
  // costs one wake-up per burst rather than one per token. The first
  // delivery (the first token, or a whole answer) goes straight to the
  // loop's queue; later ones go through the loop's background lane, so
  // that running streams never hold back another request's first token.
  class Sink : public RequestSink, public std::enable_shared_from_this<Sink> {
   public:
    // `eager`: deliver each delta as it comes (a stream, or stop strings
    // that must end the request early); otherwise the deltas wait for the
    // end, and a whole response costs the loop one wake-up.
    Sink(HttpExchange& exchange, std::weak_ptr<CompletionCall> call, size_t part, bool eager)
        : executor_(exchange.executor()),
          background_(&exchange.background()),
          call_(std::move(call)),
          part_(part),
          eager_(eager) {}
    void OnDelta(const RequestDelta& delta) override {
      absl::MutexLock lock(&mu_);
      deltas_.push_back(delta);
      if (eager_) ScheduleLocked();
    }
    void OnFinish(const absl::Status& status) override {
      absl::MutexLock lock(&mu_);
      final_status_ = status;
      ScheduleLocked();
    }

   private:
    void ScheduleLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      if (scheduled_) return;
      scheduled_ = true;
      if (!delivered_) {
        delivered_ = true;
        boost::asio::post(executor_, [self = shared_from_this()] { self->Deliver(); });
        return;
      }
      background_->Post([self = shared_from_this()] {
        boost::asio::dispatch(self->executor_, [self] { self->Deliver(); });
      });
    }
    // On the strand: hands the queued deltas (then the end) to the call.
    void Deliver() {
      std::vector<RequestDelta> deltas;
      std::optional<absl::Status> final_status;
      {
        absl::MutexLock lock(&mu_);
        deltas.swap(deltas_);
        final_status = final_status_;  // After every delta: the engine sends it last.
        scheduled_ = false;
      }
      std::shared_ptr<CompletionCall> call = call_.lock();
      if (call == nullptr) return;
      call->exchange_->HoldWrites();  // The burst leaves in one write.
      for (const RequestDelta& delta : deltas) call->OnDelta(part_, delta);
      if (final_status.has_value()) call->OnFinish(part_, *final_status);
      call->exchange_->ReleaseWrites();
    }

    const boost::asio::any_io_executor executor_;
    BackgroundLane* const background_;  // Lives as long as executor_'s loop.
    const std::weak_ptr<CompletionCall> call_;
    const size_t part_;
    const bool eager_;
    absl::Mutex mu_;
    std::vector<RequestDelta> deltas_ ABSL_GUARDED_BY(mu_);
    std::optional<absl::Status> final_status_ ABSL_GUARDED_BY(mu_);
    bool scheduled_ ABSL_GUARDED_BY(mu_) = false;
    bool delivered_ ABSL_GUARDED_BY(mu_) = false;  // The first delivery was scheduled.
  };

  struct Part {
    std::string request_id;
    std::shared_ptr<Sink> sink;
    std::unique_ptr<RequestOutput> output;
    int prompt_tokens = 0;
    std::vector<int32_t> prompt_token_ids;  // With echo and logprobs, or return_token_ids.
    // return_token_ids in a stream: which choices (by sample; chat: the
    // response) have had their first chunk, which carries the prompt's ids.
    std::vector<bool> prompt_ids_sent;
    int completion_tokens = 0;              // Engine tokens (copies not counted).
    // Under a reasoning parser: each sample's thinking tokens.
    std::vector<ReasoningTokenCounter> reasoning_tokens;
    std::vector<ChoiceStream> streams;
    bool finished = false;
  };

  // return_token_ids: the prompt's ids on the first chunk of each choice of
  // `part` (chat: of the response) in `chunk`, before it is renumbered.
  void MarkFirstChunks(Part& part, json* chunk) const;
  int SamplesPerPrompt() const { return std::max(1, request_.generate.sampling().n()); }
  // `choices` of part `part` renumbered, each repeated `copies` times.
  json Renumber(size_t part, const json& choices) const;
  int PromptTokens() const;
  int CompletionTokens() const;
  // Under a reasoning parser: the thinking tokens of every choice; else none.
  std::optional<int> ReasoningTokens() const;
  // The usage so far; `final` adds the cached prompt tokens.
  json Usage(bool final) const;
  // With --enable-prompt-tokens-details: the prompts' tokens the prefix
  // cache held, summed over the request's prompts; else none.
  std::optional<int> CachedTokens() const;
  void AbortAll();
  void Fail(const absl::Status& status);
  void FinishWhole();
  void FinishStream();

  RequestPath* const path_;
  const Tokenizer* const tokenizer_;
  const std::string model_;
  const OpenAiRequest request_;
  const std::vector<std::string> echo_;
  std::vector<ValidatedRequest> validated_;
  const std::shared_ptr<HttpExchange> exchange_;
  InFlightCall in_flight_;
  const int64_t created_;
  std::vector<Part> parts_;
  size_t finished_parts_ = 0;
  bool ended_ = false;  // The response (or the failure) has been sent.
};

json CompletionCall::Renumber(size_t part, const json& choices) const {
  json out = json::array();
  for (const json& choice : choices) {
    const int sample = choice.value("index", 0);
    for (int copy = 0; copy < request_.copies; ++copy) {
      json renumbered = choice;
      renumbered["index"] =
          (static_cast<int>(part) * SamplesPerPrompt() + sample) * request_.copies + copy;
      out.push_back(std::move(renumbered));
    }
  }
  return out;
}

void CompletionCall::MarkFirstChunks(Part& part, json* chunk) const {
  part.prompt_ids_sent.resize(std::max(1, SamplesPerPrompt()), false);
  std::vector<bool> first;
  if (request_.chat) {
    first.push_back(!part.prompt_ids_sent[0]);
    part.prompt_ids_sent[0] = true;
  } else {
    for (const json& choice : (*chunk)["choices"]) {
      const size_t sample =
          std::min<size_t>(choice.value("index", 0), part.prompt_ids_sent.size() - 1);
      first.push_back(!part.prompt_ids_sent[sample]);
      part.prompt_ids_sent[sample] = true;
    }
  }
  AddPromptTokenIds(request_, part.prompt_token_ids, first, chunk);
}

int CompletionCall::PromptTokens() const {
  int total = 0;
  for (const Part& part : parts_) total += part.prompt_tokens;
  return total;
}

int CompletionCall::CompletionTokens() const {
  int total = 0;
  for (const Part& part : parts_) total += part.completion_tokens;
  return total * request_.copies;  // vLLM generates (and counts) each copy.
}

std::optional<int> CompletionCall::ReasoningTokens() const {
  if (!request_.reasoning.has_value()) return std::nullopt;
  int total = 0;
  for (const Part& part : parts_) {
    for (const ReasoningTokenCounter& counter : part.reasoning_tokens) total += counter.count();
  }
  return total * request_.copies;
}

json CompletionCall::Usage(bool final) const {
  return OpenAiUsage(PromptTokens(), CompletionTokens(), final ? CachedTokens() : std::nullopt,
                     ReasoningTokens());
}

std::optional<int> CompletionCall::CachedTokens() const {
  if (!request_.prompt_tokens_details) return std::nullopt;
  int total = 0;
  for (const Part& part : parts_) {
    if (part.output != nullptr) total += part.output->whole().cached_prompt_token_count();
  }
  return total;
}

void CompletionCall::Start() {
  parts_.resize(validated_.size());
  for (size_t i = 0; i < validated_.size(); ++i) {
    Part& part = parts_[i];
    part.request_id = validated_[i].request_id;
    part.prompt_tokens = static_cast<int>(validated_[i].prompt_token_ids.size());
    if ((request_.echo && request_.top_logprobs >= 0) || request_.return_token_ids) {
      part.prompt_token_ids = validated_[i].prompt_token_ids;
    }
    part.output = std::make_unique<RequestOutput>(path_->MakeOutput(validated_[i]));
    part.sink = std::make_shared<Sink>(*exchange_, weak_from_this(), i,
                                       request_.stream || !validated_[i].stop_strings.empty());
  }
  for (size_t i = 0; i < validated_.size(); ++i) {
    absl::Status accepted = path_->Submit(validated_[i], parts_[i].sink);
    if (!accepted.ok()) {
      // Those submitted before are aborted; their sinks' posts find nobody.
      parts_.resize(i);
      AbortAll();
      ended_ = true;
      RespondError(*exchange_, accepted);
      return;
    }
  }
  validated_.clear();
  if (!request_.stream) return;
  exchange_->StartEventStream();
  // vLLM's echo: a first chunk of each choice with its prompt's text.
  for (size_t p = 0; request_.echo && p < echo_.size(); ++p) {
    json choices = json::array();
    for (int sample = 0; sample < SamplesPerPrompt(); ++sample) {
      choices.push_back({{"index", sample},
                         {"text", echo_[p]},
                         {"logprobs", nullptr},
                         {"finish_reason", nullptr}});
    }
    exchange_->SendEvent(SseEvent({{"id", absl::StrCat("cmpl-", parts_[0].request_id)},
                                   {"object", "text_completion"},
                                   {"created", created_},
                                   {"model", model_},
                                   {"choices", Renumber(p, choices)}}));
  }
}

void CompletionCall::AbortAll() {
  for (Part& part : parts_) {
    if (!part.finished) path_->EndEarly(part.request_id, part.sink.get(), EarlyEnd::kClientGone);
  }
}

void CompletionCall::Fail(const absl::Status& status) {
  ended_ = true;
  AbortAll();
  if (request_.stream) {
    exchange_->SendEvent(SseEvent(MakeOpenAiError(status)) + "data: [DONE]\n\n");
    exchange_->EndEventStream();
  } else {
    RespondError(*exchange_, status);
  }
}

void CompletionCall::OnDelta(size_t index, const RequestDelta& delta) {
  if (ended_ || index >= parts_.size()) return;
  Part& part = parts_[index];
  const pagoda::v1::GenerateResponse message = part.output->AddDelta(delta);
  for (const auto& output : message.outputs()) {
    part.completion_tokens += output.token_ids_size();
    if (!request_.reasoning.has_value() || request_.reasoning_ended_in_prompt) continue;
    if (part.reasoning_tokens.size() <= static_cast<size_t>(output.index())) {
      part.reasoning_tokens.resize(output.index() + 1);
    }
    part.reasoning_tokens[output.index()].Add(*request_.reasoning, output.token_ids());
  }
  // Stop strings ended every sequence: free the blocks now.
  path_->EndIfStopped(*part.output, part.request_id, part.sink.get());
  if (!request_.stream) return;
  json chunk = MakeOpenAiChunk(request_, message, model_, created_, tokenizer_, &part.streams);
  if (chunk.is_null()) return;
  if (request_.return_token_ids) MarkFirstChunks(part, &chunk);
  chunk["id"] = absl::StrCat(request_.chat ? "chatcmpl-" : "cmpl-", parts_[0].request_id);
  chunk["choices"] = Renumber(index, chunk["choices"]);
  if (request_.include_usage && request_.continuous_usage_stats) {
    chunk["usage"] = Usage(/*final=*/false);
  }
  // A client too slow to take its stream is dropped (the exchange closes
  // the connection and calls OnClientGone).
  exchange_->SendEvent(SseEvent(chunk));
}

void CompletionCall::OnFinish(size_t index, const absl::Status& engine_status) {
  if (ended_ || index >= parts_.size() || parts_[index].finished) return;
  Part& part = parts_[index];
  part.finished = true;
  ++finished_parts_;
  const absl::Status status = part.output->FinalStatus(engine_status);
  if (!status.ok()) return Fail(status);
  if (finished_parts_ < parts_.size()) return;
  ended_ = true;
  if (request_.stream) {
    FinishStream();
  } else {
    FinishWhole();
  }
}

void CompletionCall::FinishStream() {
  std::string tail;
  if (request_.include_usage) {
    tail = SseEvent(MakeOpenAiUsageChunk(request_, parts_[0].request_id, Usage(/*final=*/true),
                                         model_, created_));
  }
  tail += "data: [DONE]\n\n";
  exchange_->SendEvent(tail);
  exchange_->EndEventStream();
}

void CompletionCall::FinishWhole() {
  json response;
  json choices = json::array();
  for (size_t p = 0; p < parts_.size(); ++p) {
    json one =
        MakeOpenAiResponse(request_, parts_[p].output->whole(), model_, created_, tokenizer_);
    AddPromptTokenIds(request_, parts_[p].prompt_token_ids,
                      std::vector<bool>(one["choices"].size() + 1, true), &one);
    if (p == 0) response = one;
    for (json& choice : Renumber(p, one["choices"])) {
      if (request_.echo && p < echo_.size()) {
        choice["text"] = echo_[p] + choice["text"].get<std::string>();
        PrependPromptLogprobs(request_, parts_[p].prompt_token_ids, parts_[p].output->whole(),
                              tokenizer_, &choice["logprobs"]);
      }
      choices.push_back(std::move(choice));
    }
  }
  response["choices"] = std::move(choices);
  response["usage"] = Usage(/*final=*/true);
  exchange_->Respond(200, kJsonContentType, DumpJson(response));
}

}  // namespace

void StartCompletionCall(RequestPath* path, std::string model, PreparedCompletion prepared,
                         std::shared_ptr<HttpExchange> exchange, CallTracker* calls) {
  auto call = std::make_shared<CompletionCall>(path, std::move(model), std::move(prepared),
                                               exchange, calls);
  exchange->Attach(call);
  call->Start();
}

}  // namespace pagoda::scheduler
