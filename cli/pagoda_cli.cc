// pagoda-cli: talks to a pagoda-server.
//
//   pagoda-cli [--server 127.0.0.1:50051] generate (--prompt TEXT | --token-ids 1,2,3)
//              [--max-tokens N] [--temperature T] [--top-k K] [--top-p P] [--seed S]
//              [--ignore-eos] [--stream]
//   pagoda-cli [--server ...] info
//
// generate prints the text (for a --prompt) or the token ids (for --token-ids),
// the same with or without --stream, then "finish_reason: ...", "token_ids: ..."
// and, with --logprobs N, one "logprob: ..." line per token. On an error it
// prints the gRPC status name and message ("error UNAVAILABLE: ...") and
// exits 1.

#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <iterator>
#include <memory>
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
#include "common/tls_credentials.h"
#include "grpcpp/grpcpp.h"
#include "pagoda/v1/generation.grpc.pb.h"

ABSL_FLAG(std::string, server, "127.0.0.1:50051", "pagoda-server address (host:port).");
ABSL_FLAG(std::string, prompt, "", "Text prompt (the model needs a tokenizer).");
ABSL_FLAG(std::string, token_ids, "", "Comma-separated prompt token ids.");
ABSL_FLAG(std::string, request_id, "", "Request id; empty = the server assigns one.");
ABSL_FLAG(int, max_tokens, 0, "Tokens to generate; 0 = the server's default (16).");
ABSL_FLAG(int, min_tokens, 0, "Tokens to generate before EOS may stop the sequence.");
ABSL_FLAG(double, temperature, 0, "0 = greedy.");
ABSL_FLAG(int, top_k, 0, "0 = off.");
ABSL_FLAG(double, top_p, 0, "0 = 1 (off).");
ABSL_FLAG(uint64_t, seed, 0, "0 = the server picks one.");
ABSL_FLAG(int, logprobs, 0, "Top logprobs per token, 0..20.");
ABSL_FLAG(bool, ignore_eos, false, "Keep generating past EOS.");
ABSL_FLAG(std::vector<std::string>, stop, {},
          "Stop strings, comma-separated: the text ends before the first one generated "
          "(the model needs a tokenizer).");
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

bool BuildRequest(pagoda::v1::GenerateRequest& request) {
  request.set_request_id(absl::GetFlag(FLAGS_request_id));
  request.set_prompt(absl::GetFlag(FLAGS_prompt));
  for (absl::string_view part :
       absl::StrSplit(absl::GetFlag(FLAGS_token_ids), ',', absl::SkipWhitespace())) {
    int id;
    if (!absl::SimpleAtoi(part, &id)) {
      std::cerr << "pagoda-cli: --token-ids: '" << part << "' is not an integer" << std::endl;
      return false;
    }
    request.add_prompt_token_ids(id);
  }
  pagoda::v1::SamplingParams* sampling = request.mutable_sampling();
  sampling->set_temperature(static_cast<float>(absl::GetFlag(FLAGS_temperature)));
  sampling->set_top_k(absl::GetFlag(FLAGS_top_k));
  sampling->set_top_p(static_cast<float>(absl::GetFlag(FLAGS_top_p)));
  sampling->set_seed(absl::GetFlag(FLAGS_seed));
  pagoda::v1::StoppingCriteria* stopping = request.mutable_stopping();
  stopping->set_max_tokens(absl::GetFlag(FLAGS_max_tokens));
  stopping->set_min_tokens(absl::GetFlag(FLAGS_min_tokens));
  stopping->set_ignore_eos(absl::GetFlag(FLAGS_ignore_eos));
  for (const std::string& stop : absl::GetFlag(FLAGS_stop)) stopping->add_stop(stop);
  request.set_logprobs(absl::GetFlag(FLAGS_logprobs));
  return true;
}

// One sequence's output as it accumulates over stream messages.
struct Collected {
  std::vector<int32_t> ids;
  std::vector<pagoda::v1::TokenLogprobs> logprobs;
  pagoda::v1::FinishReason reason = pagoda::v1::FINISH_REASON_UNSPECIFIED;
};

// A text prompt prints text; a token-id prompt prints ids, streamed or not.
// Mixing the two would print ids for byte-fallback pieces whose text the
// server holds back until they complete a UTF-8 character.
void PrintDelta(const pagoda::v1::SequenceOutput& output, Collected& collected) {
  const bool print_text = !absl::GetFlag(FLAGS_prompt).empty();
  if (print_text) std::cout << output.text();
  for (int32_t id : output.token_ids()) {
    if (!print_text) std::cout << (collected.ids.empty() ? "" : " ") << id;
    collected.ids.push_back(id);
  }
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

int Generate(Generation::Stub& stub) {
  pagoda::v1::GenerateRequest request;
  if (!BuildRequest(request)) return 2;
  grpc::ClientContext context;
  SetDeadline(context);
  if (!absl::GetFlag(FLAGS_stream)) {
    pagoda::v1::GenerateResponse response;
    grpc::Status status = stub.Generate(&context, request, &response);
    if (!status.ok()) return Fail(status);
    for (const pagoda::v1::SequenceOutput& output : response.outputs()) {
      Collected collected;
      PrintDelta(output, collected);
      PrintSummary(collected);
    }
    return 0;
  }
  std::unique_ptr<grpc::ClientReader<pagoda::v1::GenerateResponse>> reader =
      stub.GenerateStream(&context, request);
  pagoda::v1::GenerateResponse message;
  Collected collected;
  while (reader->Read(&message)) {
    for (const pagoda::v1::SequenceOutput& output : message.outputs()) {
      PrintDelta(output, collected);
    }
    std::cout.flush();
  }
  grpc::Status status = reader->Finish();
  if (!status.ok()) return Fail(status);
  PrintSummary(collected);
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

}  // namespace

int main(int argc, char** argv) {
  std::vector<char*> positional = pagoda::ParsePagodaCommandLine(
      argc, argv,
      {"pagoda-cli",
       "pagoda-cli [--server HOST:PORT] generate (--prompt TEXT | --token-ids 1,2,3) [options] "
       "| info"});
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
  std::cerr << "pagoda-cli: unknown command '" << command << "'; use generate or info" << std::endl;
  return 2;
}
