#include "scheduler/startup/front_doors.h"

#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <iostream>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"

namespace pagoda::scheduler {
namespace {

// Chat completions through `chat_template`, or none when it is null; each
// message's content in `format`.
ChatRenderer ChatRendererOf(const text::ChatTemplate* chat_template,
                            text::ChatContentFormat format) {
  if (chat_template == nullptr) return ChatRenderer();
  return [chat_template, format](const std::vector<text::ChatMessage>& messages,
                                 bool add_generation_prompt, bool continue_final_message,
                                 const nlohmann::ordered_json& tools,
                                 const nlohmann::ordered_json& variables) {
    return chat_template->Render(messages, add_generation_prompt, tools, variables, format,
                                 continue_final_message);
  };
}

// True when binding `address` fails with EADDRINUSE. SO_REUSEADDR as the
// servers set it, so a port in TIME_WAIT after a restart reads as free.
bool AddressInUse(const addrinfo& address) {
  const int fd = socket(address.ai_family, address.ai_socktype, address.ai_protocol);
  if (fd < 0) return false;
  const int on = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof(on));
  const bool in_use = bind(fd, address.ai_addr, address.ai_addrlen) != 0 && errno == EADDRINUSE;
  close(fd);
  return in_use;
}

}  // namespace

absl::Status CheckPortFree(absl::string_view flag, const std::string& host, int port) {
  if (port <= 0) return absl::OkStatus();
  addrinfo hints = {};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* addresses = nullptr;
  const std::string service = std::to_string(port);
  // A host that does not resolve is the server's own to report.
  if (getaddrinfo(host.empty() ? nullptr : host.c_str(), service.c_str(), &hints, &addresses) !=
      0) {
    return absl::OkStatus();
  }
  bool in_use = false;
  for (const addrinfo* a = addresses; a != nullptr && !in_use; a = a->ai_next) {
    in_use = AddressInUse(*a);
  }
  freeaddrinfo(addresses);
  if (!in_use) return absl::OkStatus();
  return absl::UnavailableError(
      absl::StrCat("--", flag, " ", port, ": ", host, ":", port, " is in use"));
}

absl::Status CheckFrontDoorPortsFree(const FrontDoorOptions& door) {
  if (absl::Status status = CheckPortFree("port", door.host, door.port); !status.ok()) {
    return status;
  }
  if (absl::Status status = CheckPortFree("http-port", door.host, door.http_port); !status.ok()) {
    return status;
  }
  return CheckPortFree("metrics-port", door.metrics_host, door.metrics_port);
}

absl::StatusOr<std::unique_ptr<ServerMetrics>> StartMetrics(const FrontDoorOptions& door,
                                                            const std::string& model_name) {
  if (door.metrics_port == 0) return nullptr;
  const int port = door.metrics_port < 0 ? 0 : door.metrics_port;  // -1: the OS picks (tests).
  absl::StatusOr<std::unique_ptr<ServerMetrics>> metrics =
      ServerMetrics::Start(door.metrics_host, port, model_name, door.vllm_metric_names);
  if (!metrics.ok()) return metrics.status();
  std::cout << "PAGODA_METRICS_LISTENING " << (*metrics)->port() << std::endl;
  return metrics;
}

absl::StatusOr<std::unique_ptr<FrontendServer>> StartGrpcFrontend(
    const FrontDoorOptions& door, const ModelLimits& limits, GenerationService* service,
    VllmEngineService* vllm_service, ServerMetrics* metrics, Engine* engine) {
  FrontendOptions options;
  options.host = door.host;
  options.port = door.port;
  options.max_request_bytes = MaxRequestBytes(limits);
  options.ssl_certfile = door.ssl_certfile;
  options.ssl_keyfile = door.ssl_keyfile;
  options.ssl_ca_certs = door.ssl_ca_certs;
  if (vllm_service != nullptr) options.extra_services.push_back(vllm_service);
  if (metrics != nullptr) options.metrics_registry = metrics->registry();
  return FrontendServer::Start(options, service, engine);
}

absl::StatusOr<std::unique_ptr<HttpServer>> StartHttpFrontend(
    const ServerConfig& config, const std::string& model_name, const ModelFiles& model,
    int max_model_len, ServerMetrics* metrics, RequestPath* path) {
  const FrontDoorOptions& door = config.front_door;
  if (door.http_port == 0) return nullptr;
  HttpServerOptions options;
  options.host = door.host;
  options.port = door.http_port < 0 ? 0 : door.http_port;  // -1: the OS picks (tests).
  options.model_name = model_name;
  const std::vector<std::string> names = ServedModelNames(config.model);
  options.model_aliases.assign(names.begin() + 1, names.end());
  options.max_model_len = max_model_len;
  options.tool_call_parser = config.model.tool_call_parser;
  absl::StatusOr<std::optional<ReasoningMarkers>> reasoning =
      FindReasoningMarkers(config.model.reasoning_parser, path->tokenizer());
  if (!reasoning.ok()) return reasoning.status();
  options.reasoning = *reasoning;
  options.enable_prompt_tokens_details = door.enable_prompt_tokens_details;
  options.enable_force_include_usage = door.enable_force_include_usage;
  options.enable_server_load_tracking = door.enable_server_load_tracking;
  options.return_tokens_as_token_ids = door.return_tokens_as_token_ids;
  options.response_role = door.response_role;
  options.max_connections = door.http_max_connections;
  options.io_threads = door.http_io_threads;
  if (metrics != nullptr) options.metrics_registry = metrics->registry();
  absl::StatusOr<std::unique_ptr<HttpServer>> http = HttpServer::Start(
      options, path, ChatRendererOf(model.chat_template.get(), model.chat_content_format));
  if (!http.ok()) return http.status();
  std::cout << "PAGODA_HTTP_LISTENING " << (*http)->port() << std::endl;
  return http;
}

}  // namespace pagoda::scheduler
