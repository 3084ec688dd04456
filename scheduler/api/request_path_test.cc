// The three front doors (pagoda.v1 gRPC, vLLM's engine gRPC, OpenAI HTTP)
// over the one request path: the same request is refused with the same
// message and the same mapped status through each, accepted alike, and the
// pool and the API key are one rule for all (issue 43: the doors had
// drifted apart).
#include "scheduler/api/request_path.h"

#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/synchronization/notification.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "scheduler/api/api_key.h"
#include "scheduler/api/grpc_status.h"
#include "scheduler/api/openai_protocol.h"
#include "scheduler/api/openai_routes.h"
#include "scheduler/api/vllm_engine_convert.h"

namespace pagoda::scheduler {
namespace {

constexpr int kVocab = 100;
constexpr int kMaxModelLen = 64;

// One request as each door's wire carries it, with `edit` applied to each.
struct ThreeDoors {
  pagoda::v1::GenerateRequest grpc;
  vllm_api::GenerateRequest vllm;
  nlohmann::json http;
};

ThreeDoors BaseRequest() {
  ThreeDoors doors;
  doors.http = {{"prompt", {1, 2, 3}}, {"temperature", 1}, {"max_tokens", 16}, {"seed", 5}};
  for (int id : {1, 2, 3}) {
    doors.grpc.add_prompt_token_ids(id);
    doors.vllm.mutable_tokenized()->add_input_ids(id);
  }
  doors.grpc.mutable_sampling()->set_temperature(1);
  doors.grpc.mutable_sampling()->set_seed(5);
  doors.grpc.mutable_stopping()->set_max_tokens(16);
  doors.vllm.mutable_sampling_params()->set_temperature(1);
  doors.vllm.mutable_sampling_params()->set_seed(5);
  doors.vllm.mutable_sampling_params()->set_max_tokens(16);
  return doors;
}

// What each door's validation answers, and the status its wire maps it to.
struct Outcome {
  absl::StatusOr<ValidatedRequest> validated;
  int wire_status;  // gRPC code, or HTTP status.
};

struct ThreeOutcomes {
  Outcome grpc, vllm, http;
};

ThreeOutcomes ValidateThroughEachDoor(RequestValidator& validator, const ThreeDoors& doors) {
  auto grpc_code = [](const absl::Status& status) {
    return static_cast<int>(ToGrpcStatus(status).error_code());
  };
  ThreeOutcomes out{{validator.Validate(doors.grpc), 0},
                    {absl::InternalError("unset"), 0},
                    {absl::InternalError("unset"), 0}};
  out.grpc.wire_status = grpc_code(out.grpc.validated.status());
  absl::StatusOr<VllmRequestPlan> plan = TranslateVllmRequest(doors.vllm, kMaxModelLen);
  out.vllm.validated = plan.ok() ? validator.Validate(plan->request) : plan.status();
  out.vllm.wire_status = grpc_code(out.vllm.validated.status());
  absl::StatusOr<OpenAiRequest> parsed = ParseOpenAiRequest(doors.http, false, kMaxModelLen);
  out.http.validated = parsed.ok() ? validator.Validate(parsed->generate) : parsed.status();
  out.http.wire_status = HttpStatusOf(out.http.validated.status());
  return out;
}

TEST(OneValidationTest, ThreeDoorsRefuseTheSameRequestWithOneMessageAndStatus) {
  RequestValidator validator({kVocab, kMaxModelLen, 1}, nullptr, 7);
  struct Case {
    const char* what;
    void (*edit)(ThreeDoors&);
  } cases[] = {
      {"temperature -1",
       [](ThreeDoors& d) {
         d.grpc.mutable_sampling()->set_temperature(-1);
         d.vllm.mutable_sampling_params()->set_temperature(-1);
         d.http["temperature"] = -1;
       }},
      {"top_p 1.5",
       [](ThreeDoors& d) {
         d.grpc.mutable_sampling()->set_top_p(1.5f);
         d.vllm.mutable_sampling_params()->set_top_p(1.5f);
         d.http["top_p"] = 1.5;
       }},
      {"min_tokens over max_tokens",
       [](ThreeDoors& d) {
         d.grpc.mutable_stopping()->set_min_tokens(20);
         d.vllm.mutable_sampling_params()->set_min_tokens(20);
         d.http["min_tokens"] = 20;
       }},
      {"token id outside the vocabulary",
       [](ThreeDoors& d) {
         d.grpc.set_prompt_token_ids(1, kVocab);
         d.vllm.mutable_tokenized()->set_input_ids(1, kVocab);
         d.http["prompt"] = {1, kVocab, 3};
       }},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    ThreeDoors doors = BaseRequest();
    c.edit(doors);
    const ThreeOutcomes out = ValidateThroughEachDoor(validator, doors);
    ASSERT_FALSE(out.grpc.validated.ok());
    EXPECT_EQ(out.vllm.validated.status(), out.grpc.validated.status());
    EXPECT_EQ(out.http.validated.status(), out.grpc.validated.status());
    EXPECT_EQ(out.grpc.wire_status, static_cast<int>(grpc::StatusCode::INVALID_ARGUMENT));
    EXPECT_EQ(out.vllm.wire_status, static_cast<int>(grpc::StatusCode::INVALID_ARGUMENT));
    EXPECT_EQ(out.http.wire_status, 400);
  }
}

TEST(OneValidationTest, ThreeDoorsAcceptTheSameRequestAlike) {
  RequestValidator validator({kVocab, kMaxModelLen, 1}, nullptr, 7);
  ThreeDoors doors = BaseRequest();
  doors.grpc.mutable_sampling()->set_top_p(0.5f);
  doors.vllm.mutable_sampling_params()->set_top_p(0.5f);
  doors.http["top_p"] = 0.5;
  const ThreeOutcomes out = ValidateThroughEachDoor(validator, doors);
  for (const Outcome* door : {&out.grpc, &out.vllm, &out.http}) {
    ASSERT_TRUE(door->validated.ok()) << door->validated.status();
    EXPECT_EQ(door->validated->prompt_token_ids, std::vector<int32_t>({1, 2, 3}));
    EXPECT_EQ(door->validated->sampling.temperature, 1.0f);
    EXPECT_EQ(door->validated->sampling.top_p, 0.5f);
    EXPECT_EQ(door->validated->sampling.n, 1);
    EXPECT_EQ(door->validated->sampling.seed, 5u);
    EXPECT_EQ(door->validated->stopping.max_tokens, 16);
  }
}

TEST(RequestPathTest, AFullPoolIsOneRefusalMappedAlikeByEveryDoor) {
  RequestValidator validator({kVocab, kMaxModelLen, 1}, nullptr, 7);
  RequestPathOptions options;
  options.tokenizer_threads = 1;
  options.max_pending_tokenizations = 1;
  RequestPath path(/*engine=*/nullptr, &validator, nullptr, options);
  CallTracker pending;
  absl::Notification running, release;
  ASSERT_TRUE(path.RunValidation(true, &pending,
                                 [&] {
                                   running.Notify();
                                   release.WaitForNotification();
                                 })
                  .ok());
  running.WaitForNotification();  // The one thread is busy from now on.
  ASSERT_TRUE(path.RunValidation(true, &pending, [] {}).ok());  // Waits.
  bool ran = false;
  const absl::Status full = path.RunValidation(true, &pending, [&] { ran = true; });
  EXPECT_EQ(full.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(full.message(), "too many requests are waiting to be tokenized; retry later");
  EXPECT_EQ(ToGrpcStatus(full).error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_EQ(HttpStatusOf(full), 429);
  // Work without text to tokenize runs here, full pool or not.
  bool inline_ran = false;
  EXPECT_TRUE(path.RunValidation(false, &pending, [&] { inline_ran = true; }).ok());
  EXPECT_TRUE(inline_ran);
  EXPECT_FALSE(pending.WaitUntilIdle(absl::ZeroDuration()));
  release.Notify();
  EXPECT_TRUE(pending.WaitUntilIdle(absl::Seconds(30)));
  EXPECT_FALSE(ran);
}

TEST(RequestPathTest, OneApiKeyRuleForGrpcAndHttp) {
  RequestValidator validator({kVocab, kMaxModelLen, 1}, nullptr, 7);
  RequestPathOptions options;
  options.api_key = "k3y";
  RequestPath path(nullptr, &validator, nullptr, options);
  for (const char* sent : {"Bearer k3y", "Bearer k3", "Bearer k3yy", "k3y", "", "bearer k3y"}) {
    SCOPED_TRACE(sent);
    const bool grpc = path.Authorized(sent);
    EXPECT_EQ(grpc, std::string(sent) == "Bearer k3y");
    EXPECT_EQ(OpenAiRoutes::Authorized(path.api_key(), "/v1/completions", sent), grpc);
    // vLLM's key guards /v1 only.
    EXPECT_TRUE(OpenAiRoutes::Authorized(path.api_key(), "/health", sent));
  }
  RequestPath open(nullptr, &validator, nullptr, RequestPathOptions{});
  EXPECT_TRUE(open.Authorized(""));
  EXPECT_TRUE(OpenAiRoutes::Authorized(open.api_key(), "/v1/completions", ""));
}

// The adapter a request names is resolved once, in Submit, for every door:
// an unknown one is NOT_FOUND (gRPC NOT_FOUND, HTTP 404), a malformed one
// INVALID_ARGUMENT in validation, and a request the engine refuses gives
// its adapter back (else the adapter could never be unloaded).
TEST(RequestPathTest, SubmitAcquiresTheAdapterAndReleasesItWhenTheEngineRefuses) {
  RequestValidator validator({kVocab, kMaxModelLen, 1}, nullptr, 7);
  pagoda::v1::GenerateRequest bad = BaseRequest().grpc;
  bad.set_lora_name("a b");
  EXPECT_EQ(validator.Validate(bad).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StartsWith(validator.Validate(bad).status().message(), "lora_name: "));

  lora::LoraRegistry registry;
  ASSERT_TRUE(registry.Add({"sql", "/adapters/sql", ""}).ok());
  LoraAdaptersOptions adapter_options;
  adapter_options.registry = &registry;
  LoraAdapters adapters(adapter_options);
  EngineConfig config;
  config.async_scheduling = false;
  config.lora_registry = &registry;
  config.max_loras = 1;
  Engine engine(config, /*workers=*/nullptr, /*observer=*/nullptr);
  engine.StopAccepting();  // Every request is refused from here.
  RequestPathOptions options;
  options.lora_adapters = &adapters;
  RequestPath path(&engine, &validator, nullptr, options);
  RequestPath no_lora(&engine, &validator, nullptr, RequestPathOptions{});
  auto submit = [&](RequestPath& on, const std::string& adapter) {
    pagoda::v1::GenerateRequest request = BaseRequest().grpc;
    request.set_lora_name(adapter);
    absl::StatusOr<ValidatedRequest> validated = validator.Validate(request);
    EXPECT_TRUE(validated.ok()) << validated.status();
    return on.Submit(*validated, nullptr);
  };
  for (RequestPath* on : {&path, &no_lora}) {
    const absl::Status unknown = submit(*on, on == &path ? "chat" : "sql");
    EXPECT_EQ(unknown.code(), absl::StatusCode::kNotFound) << unknown;
    EXPECT_TRUE(absl::StartsWith(unknown.message(), "lora_name: ")) << unknown;
    EXPECT_EQ(ToGrpcStatus(unknown).error_code(), grpc::StatusCode::NOT_FOUND);
    EXPECT_EQ(HttpStatusOf(unknown), 404);
  }
  EXPECT_EQ(submit(path, "sql").code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(registry.Find("sql")->requests, 0);
  EXPECT_TRUE(registry.Remove("sql").ok());
}

}  // namespace
}  // namespace pagoda::scheduler
