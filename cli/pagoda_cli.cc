// pagoda-cli: talks to a pagoda-server.
//
//   pagoda-cli [--server 127.0.0.1:50051] generate (--prompt TEXT | --token-ids 1,2,3)
//              [--max-tokens N] [--temperature T] [--top-k K] [--top-p P] [--seed S]
//              [--n N] [--presence-penalty P] [--logit-bias 5:2.5,9:-100] ... [--stream]
//   pagoda-cli [--server ...] info
//   pagoda-cli [--server ...] [--timeout 2] health
//
// Every field of GenerateRequest has a flag (--help lists them); the
// sampling fields that the model's generation_config.json may default
// (temperature, top_k, top_p, min_p, repetition_penalty) are sent only when
// given. generate prints the text (for a --prompt) or the token ids (for
// --token-ids), the same with or without --stream, then "finish_reason: ...",
// "token_ids: ..." and, with --logprobs N, one "logprob: ..." line per token;
// with several sequences (--n), each is printed whole after a "sequence: I"
// line. health asks grpc.health.v1 of a server or a worker, prints its
// status and exits 0 only when it is SERVING. On an error it prints the gRPC status name and message ("error
// UNAVAILABLE: ...") and exits 1.

#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <iterator>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/flags.h"
#include "common/grpc_health.h"
#include "common/tls_credentials.h"
#include "grpcpp/grpcpp.h"
#include "pagoda/v1/generation.grpc.pb.h"

ABSL_FLAG(std::string, server, "127.0.0.1:50051", "pagoda-server address (host:port).");
ABSL_FLAG(std::string, prompt, "", "Text prompt (the model needs a tokenizer).");
ABSL_FLAG(std::string, token_ids, "", "Comma-separated prompt token ids.");
ABSL_FLAG(std::string, request_id, "", "Request id; empty = the server assigns one.");
ABSL_FLAG(int, max_tokens, 0, "Tokens to generate; 0 = the server's default (16).");
ABSL_FLAG(int, min_tokens, 0, "Tokens to generate before EOS may stop the sequence.");
// Unset: the model's default (generation_config.json), else the comment's.
ABSL_FLAG(std::optional<double>, temperature, std::nullopt, "Unset: the model's, else 0 = greedy.");
ABSL_FLAG(std::optional<int>, top_k, std::nullopt, "Unset: the model's, else 0 = off.");
ABSL_FLAG(std::optional<double>, top_p, std::nullopt, "Unset: the model's, else 1 = off.");
ABSL_FLAG(std::optional<double>, min_p, std::nullopt, "[0, 1]; unset: the model's, else 0 = off.");
ABSL_FLAG(std::optional<double>, repetition_penalty, std::nullopt,
          "[0.01, 2]; unset: the model's, else 1 = off.");
ABSL_FLAG(uint64_t, seed, 0, "0 = the server picks one.");
ABSL_FLAG(int, n, 0, "Sequences to return; 0 = 1.");
ABSL_FLAG(int, best_of, 0, "Sequences to sample, the n best returned; 0 = n.");
ABSL_FLAG(bool, use_beam_search, false, "Beam search of width best_of (else n).");
ABSL_FLAG(double, length_penalty, 0, "Beam search: score = logprob / length^penalty; 0 = 1.");
ABSL_FLAG(bool, early_stopping, false, "Beam search: stop once best_of beams have finished.");
ABSL_FLAG(double, presence_penalty, 0, "[-2, 2], subtracted once from each generated token.");
ABSL_FLAG(double, frequency_penalty, 0, "[-2, 2], x each generated token's count, subtracted.");
ABSL_FLAG(std::vector<std::string>, logit_bias, {},
          "TOKEN:BIAS pairs, comma-separated (bias in [-100, 100]), added to the logits.");
ABSL_FLAG(std::vector<std::string>, allowed_token_ids, {},
          "Comma-separated token ids: only these may be generated.");
ABSL_FLAG(std::vector<std::string>, bad_words, {},
          "Words never generated, comma-separated (the model needs a tokenizer).");
ABSL_FLAG(int, logprobs, 0, "Top logprobs per token, 0..20.");
ABSL_FLAG(int, priority, 0, "Lower runs first under --scheduling-policy priority.");
ABSL_FLAG(bool, ignore_eos, false, "Keep generating past EOS.");
ABSL_FLAG(std::vector<std::string>, stop, {},
          "Stop strings, comma-separated: the text ends before the first one generated "
          "(the model needs a tokenizer).");
ABSL_FLAG(bool, include_stop_str_in_output, false, "Keep the stop string in the text.");
ABSL_FLAG(std::vector<std::string>, stop_token_ids, {},
          "Comma-separated token ids that end a sequence (kept in its tokens).");
ABSL_FLAG(std::string, json_schema, "", "Structured output: a JSON Schema (JSON text).");
ABSL_FLAG(std::string, regex, "", "Structured output: the text fully matches this regex.");
ABSL_FLAG(std::vector<std::string>, choice, {},
          "Structured output: the text is one of these comma-separated strings.");
ABSL_FLAG(std::string, grammar, "", "Structured output: an EBNF / GBNF grammar (rule root).");
ABSL_FLAG(bool, json_object, false, "Structured output: any JSON object.");
ABSL_FLAG(bool, disable_any_whitespace, false, "JSON constraints: no blanks between tokens.");
ABSL_FLAG(bool, stream, false, "Use GenerateStream and print tokens as they come.");
ABSL_FLAG(double, timeout, 600, "Seconds before the call is abandoned.");
ABSL_FLAG(
    std::string, ssl_ca_certs, "",
    "PEM file of the CA that signed the server's certificate: talk TLS (plaintext if empty).");
ABSL_FLAG(std::string, ssl_certfile, "", "Client certificate chain (PEM) for mutual TLS.");
ABSL_FLAG(std::string, ssl_keyfile, "", "Its private key (PEM).");
ABSL_FLAG(std::string, api_key, "",
          "Sent as 'authorization: Bearer KEY' (the server's --api-key); the PAGODA_API_KEY "
          "environment variable is used when empty, since argv is visible to other users.");

namespace {

using pagoda::v1::Generation;

// gRPC's status names, indexed by code (0..16).
constexpr const char* kStatusCodeNames[] = {
    "OK",        "CANCELLED",      "UNKNOWN",           "INVALID_ARGUMENT",   "DEADLINE_EXCEEDED",
    "NOT_FOUND", "ALREADY_EXISTS", "PERMISSION_DENIED", "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION",
    "ABORTED",   "OUT_OF_RANGE",   "UNIMPLEMENTED",     "INTERNAL",           "UNAVAILABLE",
    "DATA_LOSS", "UNAUTHENTICATED"};

const char* StatusCodeName(grpc::StatusCode code) {
  const int index = static_cast<int>(code);
  return index >= 0 && index < static_cast<int>(std::size(kStatusCodeNames))
             ? kStatusCodeNames[index]
             : "UNKNOWN";
}

int Fail(const grpc::Status& status) {
  std::cerr << "pagoda-cli: error " << StatusCodeName(status.error_code()) << ": "
            << status.error_message() << std::endl;
  return 1;
}

// The API key, if any: --api-key, else PAGODA_API_KEY.
std::string ApiKey() {
  std::string key = absl::GetFlag(FLAGS_api_key);
  if (const char* env = std::getenv("PAGODA_API_KEY"); key.empty() && env != nullptr) key = env;
  return key;
}

// Deadline and credentials of every call.
void SetDeadline(grpc::ClientContext& context) {
  if (const std::string key = ApiKey(); !key.empty()) {
    context.AddMetadata("authorization", absl::StrCat("Bearer ", key));
  }
  context.set_deadline(
      std::chrono::system_clock::now() +
      std::chrono::milliseconds(static_cast<int64_t>(absl::GetFlag(FLAGS_timeout) * 1000)));
}

// Appends the comma-separated ids of `flag` to `out`; false (and a message)
// on one that is not an integer.
template <typename Field>
bool ParseIds(const char* flag, const std::vector<std::string>& parts, Field* out) {
  for (const std::string& part : parts) {
    int id;
    if (!absl::SimpleAtoi(part, &id)) {
      std::cerr << "pagoda-cli: --" << flag << ": '" << part << "' is not an integer" << std::endl;
      return false;
    }
    out->Add(id);
  }
  return true;
}

// --logit-bias TOKEN:BIAS,... into the map.
bool ParseLogitBias(google::protobuf::Map<int32_t, float>* out) {
  for (const std::string& pair : absl::GetFlag(FLAGS_logit_bias)) {
    std::vector<std::string> halves = absl::StrSplit(pair, ':');
    int token;
    float bias;
    if (halves.size() != 2 || !absl::SimpleAtoi(halves[0], &token) ||
        !absl::SimpleAtof(halves[1], &bias)) {
      std::cerr << "pagoda-cli: --logit-bias: '" << pair << "' is not TOKEN:BIAS" << std::endl;
      return false;
    }
    (*out)[token] = bias;
  }
  return true;
}

// The optional sampling fields, set only when their flag is.
void SetDefaultableSampling(pagoda::v1::SamplingParams* sampling) {
  if (auto v = absl::GetFlag(FLAGS_temperature)) sampling->set_temperature(*v);
  if (auto v = absl::GetFlag(FLAGS_top_k)) sampling->set_top_k(*v);
  if (auto v = absl::GetFlag(FLAGS_top_p)) sampling->set_top_p(*v);
  if (auto v = absl::GetFlag(FLAGS_min_p)) sampling->set_min_p(*v);
  if (auto v = absl::GetFlag(FLAGS_repetition_penalty)) sampling->set_repetition_penalty(*v);
}

bool BuildSampling(pagoda::v1::SamplingParams* sampling) {
  SetDefaultableSampling(sampling);
  sampling->set_seed(absl::GetFlag(FLAGS_seed));
  sampling->set_n(absl::GetFlag(FLAGS_n));
  sampling->set_best_of(absl::GetFlag(FLAGS_best_of));
  sampling->set_use_beam_search(absl::GetFlag(FLAGS_use_beam_search));
  sampling->set_length_penalty(static_cast<float>(absl::GetFlag(FLAGS_length_penalty)));
  sampling->set_early_stopping(absl::GetFlag(FLAGS_early_stopping));
  sampling->set_presence_penalty(static_cast<float>(absl::GetFlag(FLAGS_presence_penalty)));
  sampling->set_frequency_penalty(static_cast<float>(absl::GetFlag(FLAGS_frequency_penalty)));
  for (const std::string& word : absl::GetFlag(FLAGS_bad_words)) sampling->add_bad_words(word);
  return ParseLogitBias(sampling->mutable_logit_bias()) &&
         ParseIds("allowed-token-ids", absl::GetFlag(FLAGS_allowed_token_ids),
                  sampling->mutable_allowed_token_ids());
}

bool BuildStopping(pagoda::v1::StoppingCriteria* stopping) {
  stopping->set_max_tokens(absl::GetFlag(FLAGS_max_tokens));
  stopping->set_min_tokens(absl::GetFlag(FLAGS_min_tokens));
  stopping->set_ignore_eos(absl::GetFlag(FLAGS_ignore_eos));
  for (const std::string& stop : absl::GetFlag(FLAGS_stop)) stopping->add_stop(stop);
  stopping->set_include_stop_str_in_output(absl::GetFlag(FLAGS_include_stop_str_in_output));
  return ParseIds("stop-token-ids", absl::GetFlag(FLAGS_stop_token_ids),
                  stopping->mutable_stop_token_ids());
}

// The constraint flags: at most one (they fill one oneof).
bool BuildConstraint(pagoda::v1::GenerateRequest& request) {
  int given = 0;
  if (const std::string schema = absl::GetFlag(FLAGS_json_schema); !schema.empty()) {
    request.set_json_schema(schema);
    ++given;
  }
  if (const std::string regex = absl::GetFlag(FLAGS_regex); !regex.empty()) {
    request.set_regex(regex);
    ++given;
  }
  if (const std::vector<std::string> choices = absl::GetFlag(FLAGS_choice); !choices.empty()) {
    request.mutable_choice()->mutable_choices()->Assign(choices.begin(), choices.end());
    ++given;
  }
  if (const std::string grammar = absl::GetFlag(FLAGS_grammar); !grammar.empty()) {
    request.set_grammar(grammar);
    ++given;
  }
  if (absl::GetFlag(FLAGS_json_object)) {
    request.set_json_object(true);
    ++given;
  }
  request.set_disable_any_whitespace(absl::GetFlag(FLAGS_disable_any_whitespace));
  if (given > 1) {
    std::cerr << "pagoda-cli: give at most one of --json-schema, --regex, --choice, --grammar, "
                 "--json-object"
              << std::endl;
    return false;
  }
  return true;
}

bool BuildRequest(pagoda::v1::GenerateRequest& request) {
  request.set_request_id(absl::GetFlag(FLAGS_request_id));
  request.set_prompt(absl::GetFlag(FLAGS_prompt));
  request.set_logprobs(absl::GetFlag(FLAGS_logprobs));
  request.set_priority(absl::GetFlag(FLAGS_priority));
  const std::vector<std::string> ids =
      absl::StrSplit(absl::GetFlag(FLAGS_token_ids), ',', absl::SkipWhitespace());
  return ParseIds("token-ids", ids, request.mutable_prompt_token_ids()) &&
         BuildSampling(request.mutable_sampling()) && BuildStopping(request.mutable_stopping()) &&
         BuildConstraint(request);
}

// One sequence's output as it accumulates over stream messages.
struct Collected {
  std::string text;
  std::vector<int32_t> ids;
  std::vector<pagoda::v1::TokenLogprobs> logprobs;
  pagoda::v1::FinishReason reason = pagoda::v1::FINISH_REASON_UNSPECIFIED;
};

// A text prompt prints text; a token-id prompt prints ids, streamed or not.
// Mixing the two would print ids for byte-fallback pieces whose text the
// server holds back until they complete a UTF-8 character.
bool PrintsText() { return !absl::GetFlag(FLAGS_prompt).empty(); }

void PrintBody(const std::string& text, const std::vector<int32_t>& ids, bool first) {
  if (PrintsText()) {
    std::cout << text;
    return;
  }
  for (size_t i = 0; i < ids.size(); ++i) std::cout << (first && i == 0 ? "" : " ") << ids[i];
}

// Adds a delta to its sequence; prints it at once when `live`.
void Collect(const pagoda::v1::SequenceOutput& output, Collected& collected, bool live) {
  const std::vector<int32_t> ids(output.token_ids().begin(), output.token_ids().end());
  if (live) PrintBody(output.text(), ids, collected.ids.empty());
  collected.text += output.text();
  collected.ids.insert(collected.ids.end(), ids.begin(), ids.end());
  collected.logprobs.insert(collected.logprobs.end(), output.logprobs().begin(),
                            output.logprobs().end());
  if (output.finish_reason() != pagoda::v1::FINISH_REASON_UNSPECIFIED) {
    collected.reason = output.finish_reason();
  }
}

void PrintSummary(const Collected& collected) {
  std::cout << "\nfinish_reason: " << pagoda::v1::FinishReason_Name(collected.reason) << "\n"
            << "token_ids: " << absl::StrJoin(collected.ids, ",") << "\n";
  for (const pagoda::v1::TokenLogprobs& token : collected.logprobs) {
    std::cout << "logprob: " << token.token_id() << " " << token.logprob();
    if (token.top_size() > 0) {
      std::cout << " top:";
      for (const pagoda::v1::TokenLogprob& top : token.top()) {
        std::cout << " " << top.token_id() << "=" << top.logprob();
      }
    }
    std::cout << "\n";
  }
  std::cout.flush();
}

// Every sequence by index; the body too unless it was printed live.
void PrintSequences(const std::map<int, Collected>& sequences, bool printed_live) {
  for (const auto& [index, collected] : sequences) {
    if (sequences.size() > 1) std::cout << "sequence: " << index << "\n";
    if (!printed_live) PrintBody(collected.text, collected.ids, true);
    PrintSummary(collected);
  }
}

int Generate(Generation::Stub& stub) {
  pagoda::v1::GenerateRequest request;
  if (!BuildRequest(request)) return 2;
  grpc::ClientContext context;
  SetDeadline(context);
  std::map<int, Collected> sequences;
  if (!absl::GetFlag(FLAGS_stream)) {
    pagoda::v1::GenerateResponse response;
    grpc::Status status = stub.Generate(&context, request, &response);
    if (!status.ok()) return Fail(status);
    for (const auto& output : response.outputs()) Collect(output, sequences[output.index()], false);
    PrintSequences(sequences, false);
    return 0;
  }
  // Several sequences' deltas interleave: those are printed whole at the end.
  const bool live = request.sampling().n() <= 1;
  std::unique_ptr<grpc::ClientReader<pagoda::v1::GenerateResponse>> reader =
      stub.GenerateStream(&context, request);
  pagoda::v1::GenerateResponse message;
  while (reader->Read(&message)) {
    for (const auto& output : message.outputs()) Collect(output, sequences[output.index()], live);
    std::cout.flush();
  }
  grpc::Status status = reader->Finish();
  if (!status.ok()) return Fail(status);
  PrintSequences(sequences, live);
  return 0;
}

int Info(Generation::Stub& stub) {
  grpc::ClientContext context;
  SetDeadline(context);
  pagoda::v1::ModelInfo info;
  grpc::Status status = stub.GetModelInfo(&context, pagoda::v1::GetModelInfoRequest(), &info);
  if (!status.ok()) return Fail(status);
  std::cout << info.DebugString();
  return 0;
}

// grpc.health.v1 of a server or worker: prints the status and exits 0 only
// when SERVING, so that a container probe can run it against a worker that
// listens on loopback alone.
int Health(const std::shared_ptr<grpc::Channel>& channel) {
  grpc::ClientContext context;
  SetDeadline(context);
  int serving_status = 0;
  const grpc::Status status = pagoda::CheckHealth(channel, context, &serving_status);
  if (!status.ok()) return Fail(status);
  std::cout << pagoda::HealthStatusName(serving_status) << std::endl;
  return serving_status == 1 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  pagoda::ProgramInfo program = {
      "pagoda-cli",
      "pagoda-cli [--server HOST:PORT] generate (--prompt TEXT | --token-ids 1,2,3) [options] "
      "| info | health"};
  program.takes_arguments = true;  // The command.
  std::vector<char*> positional = pagoda::ParsePagodaCommandLine(argc, argv, program);
  if (positional.size() != 2) {
    std::cerr << "usage: " << absl::ProgramUsageMessage() << std::endl;
    return 2;
  }
  absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> credentials =
      pagoda::MakeChannelCredentials(pagoda::TlsFiles{absl::GetFlag(FLAGS_ssl_certfile),
                                                      absl::GetFlag(FLAGS_ssl_keyfile),
                                                      absl::GetFlag(FLAGS_ssl_ca_certs)});
  if (!credentials.ok()) {
    std::cerr << "pagoda-cli: " << credentials.status().message() << std::endl;
    return 2;
  }
  auto channel = grpc::CreateChannel(absl::GetFlag(FLAGS_server), *credentials);
  std::unique_ptr<Generation::Stub> stub = Generation::NewStub(channel);
  const std::string command = positional[1];
  if (command == "generate") return Generate(*stub);
  if (command == "info") return Info(*stub);
  if (command == "health") return Health(channel);
  std::cerr << "pagoda-cli: unknown command '" << command << "'; use generate, info or health"
            << std::endl;
  return 2;
}
