// The OpenAI request body's parts, read field by field: the typed readers
// every part uses (a field absent or null gives its fallback; a field of
// the wrong type or out of its wire range is INVALID_ARGUMENT naming it),
// the wire bounds, and the part parsers ParseOpenAiRequest and the
// /tokenize body share. Internal to the openai_* files.
#ifndef PAGODA_SCHEDULER_API_OPENAI_BODY_PARTS_H_
#define PAGODA_SCHEDULER_API_OPENAI_BODY_PARTS_H_

#include <cstddef>
#include <cstdint>
#include <limits>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"
#include "pagoda/v1/generation.pb.h"
#include "scheduler/api/openai_protocol.h"

namespace pagoda::scheduler::openai_body {

using nlohmann::json;

// Above this many prompt token ids or messages a body is refused before any
// work: the validator bounds the prompt again by max_model_len.
inline constexpr size_t kMaxPromptTokenIds = 1 << 20;
// The sampling fields' wire range here is what the proto's float holds: their
// meaning's range is the request validator's, the same for every front door
// (temperature 5 is accepted over HTTP as over gRPC, as vLLM does).
inline constexpr double kFloatMax = std::numeric_limits<float>::max();
inline constexpr size_t kMaxMessages = 4096;
inline constexpr size_t kMaxChatTemplateKwargs = 32;
inline constexpr size_t kMaxDocuments = 256;  // vLLM's documents (RAG), each an object of strings.
// Most prompts in one completions body: each becomes an engine request.
inline constexpr size_t kMaxPrompts = 1024;

bool Present(const json& body, const char* key);
absl::StatusOr<double> Number(const json& body, const char* key, double fallback, double low,
                              double high);
absl::StatusOr<int64_t> Integer(const json& body, const char* key, int64_t fallback, int64_t low,
                                int64_t high);
// A boolean field; absent or null gives `fallback`. (json::value with a
// bool default throws on a field of another type, or null, and an exception
// out of a route ends the server: every boolean is read through here.)
absl::StatusOr<bool> Boolean(const json& body, const char* key, bool fallback);

// Chat (openai_chat_parse.cc): messages, with their tool fields kept for the
// template in the client's key order (`ordered`: the body parsed keeping
// key order, or null); vLLM's chat_template_kwargs (with its
// reasoning_effort and documents fields as more variables); tools and
// tool_choice.
absl::Status ParseMessages(const json& body, const nlohmann::ordered_json* ordered,
                           OpenAiRequest* out);
absl::Status ParseChatTemplateKwargs(const json& body, const nlohmann::ordered_json* ordered,
                                     nlohmann::ordered_json* out);
absl::Status ParseToolChoice(const json& body, const nlohmann::ordered_json* ordered,
                             OpenAiRequest* out);

// Structured outputs (openai_structured_outputs.cc): response_format or
// structured_outputs as the request's constraint.
absl::Status ParseConstraint(const json& body, const nlohmann::ordered_json* ordered,
                             pagoda::v1::GenerateRequest* out);

// Sampling, logprobs, priority, stopping and streaming
// (openai_sampling_parse.cc).
absl::Status ParseSampling(const json& body, const SamplingDefaults& defaults, OpenAiRequest* out);
absl::Status ParseLogprobs(const json& body, OpenAiRequest* out);
absl::Status ParsePriority(const json& body, OpenAiRequest* out);
absl::Status ParseStopping(const json& body, int default_max_tokens, OpenAiRequest* out);
absl::Status ParseStreaming(const json& body, OpenAiRequest* out);

}  // namespace pagoda::scheduler::openai_body

#endif  // PAGODA_SCHEDULER_API_OPENAI_BODY_PARTS_H_
