// What clients send to the server, from bytes to a validated request:
// - the bodies of the OpenAI-compatible HTTP routes, by the steps
//   OpenAiRoutes::Prepare, Tokenize and Detokenize take (JSON parse,
//   ParseOpenAiRequest / ParseTokenizeRequest / ParseDetokenizeRequest, the
//   chat template, the tokenizer and RequestValidator);
// - a gRPC GenerateRequest's bytes, parsed and validated as the Frontend does.
// Input: a route byte (completions, chat, tokenize, detokenize, gRPC
// Generate), then the body.
#include <memory>
#include <string>
#include <vector>

#include "common/protobuf_log.h"
#include "nlohmann/json.hpp"
#include "scheduler/api/json_body.h"
#include "scheduler/api/openai_protocol.h"
#include "scheduler/api/request_validation.h"
#include "tests/fuzz/fuzz_support.h"
#include "text/chat_template.h"
#include "text/hf_tokenizer.h"

namespace {

using nlohmann::json;
using pagoda::fuzz::Check;
namespace api = pagoda::scheduler;

constexpr int kMaxModelLen = 512;
constexpr char kLlama3Template[] =
    "{{- bos_token }}{%- for message in messages %}"
    "{%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) and message['role'] != "
    "'system' %}{{- raise_exception('roles must alternate user/assistant') }}{%- endif %}"
    "{{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' + "
    "message['content'] | trim + '<|eot_id|>' }}{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' "
    "}}{%- endif %}";

struct Fixture {
  std::unique_ptr<pagoda::HfTokenizer> tokenizer;
  std::unique_ptr<pagoda::text::ChatTemplate> chat;
  std::unique_ptr<api::RequestValidator> validator;
};

const Fixture& GetFixture() {
  static const Fixture* fixture = [] {
    // As in the server: a string that is not UTF-8 is a line in the log at
    // most once a second, not once a message.
    pagoda::LimitProtobufLogging();
    auto* made = new Fixture;
    made->tokenizer = *pagoda::HfTokenizer::FromJson(pagoda::fuzz::ByteLevelTokenizerJson());
    made->chat =
        *pagoda::text::ChatTemplate::FromSource(kLlama3Template, "<|begin_of_text|>", "<|eot_id|>");
    api::ModelLimits limits;
    limits.vocab_size = made->tokenizer->vocab_size();
    limits.max_model_len = kMaxModelLen;
    limits.bos_token_id = pagoda::fuzz::kFixtureBosId;
    made->validator = std::make_unique<api::RequestValidator>(limits, made->tokenizer.get(), 1);
    return made;
  }();
  return *fixture;
}

void CheckValidated(const api::ValidatedRequest& request) {
  Check(!request.prompt_token_ids.empty(), "a validated prompt has tokens");
  Check(static_cast<int>(request.prompt_token_ids.size()) <= kMaxModelLen, "prompt fits");
  for (int32_t id : request.prompt_token_ids) {
    Check(id >= 0 && id < pagoda::fuzz::kFixtureVocab, "prompt id in vocabulary");
  }
}

// OpenAiRoutes::Prepare's steps.
void Completion(const json& body, bool chat) {
  const Fixture& fixture = GetFixture();
  absl::StatusOr<api::OpenAiRequest> parsed = api::ParseOpenAiRequest(body, chat, kMaxModelLen);
  if (!parsed.ok()) return;
  if (chat) {
    absl::StatusOr<std::string> prompt =
        fixture.chat->Render(parsed->messages, parsed->add_generation_prompt);
    if (!prompt.ok()) return;
    absl::StatusOr<std::vector<int>> ids = fixture.tokenizer->Encode(*prompt);
    if (!ids.ok()) return;
    for (int id : *ids) parsed->generate.add_prompt_token_ids(id);
  }
  const size_t num_prompts = std::max<size_t>(1, parsed->prompts.size());
  for (size_t i = 0; i < num_prompts; ++i) {
    const pagoda::v1::GenerateRequest one = api::PromptRequest(*parsed, i);
    absl::StatusOr<api::ValidatedRequest> validated = fixture.validator->Validate(one);
    if (!validated.ok()) return;
    CheckValidated(*validated);
    if (parsed->echo && one.prompt_token_ids_size() > 0) {
      fixture.tokenizer
          ->Decode(std::vector<int>(one.prompt_token_ids().begin(), one.prompt_token_ids().end()))
          .IgnoreError();
    }
  }
}

// OpenAiRoutes::Tokenize's steps.
void Tokenize(const json& body) {
  const Fixture& fixture = GetFixture();
  absl::StatusOr<api::TokenizeRequest> request = api::ParseTokenizeRequest(body, /*ordered=*/nullptr);
  if (!request.ok()) return;
  if (static_cast<int64_t>(request->prompt.size()) >
      api::MaxPromptBytes(fixture.validator->limits())) {
    return;
  }
  std::string text = request->prompt;
  if (request->chat) {
    absl::StatusOr<std::string> rendered =
        fixture.chat->Render(request->messages, request->add_generation_prompt);
    if (!rendered.ok()) return;
    text = *std::move(rendered);
  }
  fixture.tokenizer->Encode(text).IgnoreError();
}

// OpenAiRoutes::Detokenize's steps.
void Detokenize(const json& body) {
  const Fixture& fixture = GetFixture();
  std::string model;
  absl::StatusOr<std::vector<int>> ids =
      api::ParseDetokenizeRequest(body, fixture.tokenizer->vocab_size(), &model);
  if (!ids.ok()) return;
  for (int id : *ids) Check(id >= 0 && id < fixture.tokenizer->vocab_size(), "id in vocabulary");
  fixture.tokenizer->Decode(*ids).IgnoreError();
}

// Frontend::Generate's steps: the message is parsed (the server refused
// bigger ones unread), then validated.
void GrpcGenerate(std::string_view bytes) {
  const Fixture& fixture = GetFixture();
  if (static_cast<int64_t>(bytes.size()) > api::MaxRequestBytes(fixture.validator->limits())) {
    return;
  }
  pagoda::v1::GenerateRequest request;
  if (!request.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) return;
  absl::StatusOr<api::ValidatedRequest> validated = fixture.validator->Validate(request);
  if (validated.ok()) CheckValidated(*validated);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string_view text = pagoda::fuzz::AsText(data + 1, size - 1);
  if (data[0] % 5 == 4) {
    GrpcGenerate(text);
    return 0;
  }
  // The routes parse as this does, and answer 400 before anything else.
  const absl::StatusOr<json> parsed = api::ParseJsonBody({text.data(), text.size()});
  if (!parsed.ok()) return 0;
  const json& body = *parsed;
  switch (data[0] % 5) {
    case 0:
      Completion(body, /*chat=*/false);
      break;
    case 1:
      Completion(body, /*chat=*/true);
      break;
    case 2:
      Tokenize(body);
      break;
    default:
      Detokenize(body);
      break;
  }
  // Every error is answered with this body.
  api::MakeOpenAiError(absl::InvalidArgumentError(std::string(text.substr(0, 64))))
      .dump(-1, ' ', false, json::error_handler_t::replace);
  return 0;
}
