#include "scheduler/api/grpc_request_metrics.h"

#include <array>
#include <chrono>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/synchronization/mutex.h"
#include "google/protobuf/descriptor.h"
#include "grpcpp/impl/server_builder_option.h"
#include "grpcpp/impl/server_builder_plugin.h"
#include "grpcpp/impl/server_initializer.h"
#include "grpcpp/support/server_interceptor.h"
#include "prometheus/counter.h"
#include "prometheus/family.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"
#include "scheduler/api/request_duration_buckets.h"

namespace pagoda::scheduler {

namespace {

using Clock = std::chrono::steady_clock;
using grpc::experimental::InterceptionHookPoints;

// The label of every method the server does not serve.
constexpr char kOtherMethod[] = "other";

// grpc++ serves grpc.health.v1.Health from its own (upb) messages, which
// protobuf's generated pool does not hold, and registers it only as the
// server starts (after the plugins have read the service list): its methods
// are named here.
constexpr std::array<const char*, 2> kHealthMethods = {"grpc.health.v1.Health/Check",
                                                       "grpc.health.v1.Health/Watch"};

}  // namespace

std::string GrpcCodeName(grpc::StatusCode code) {
  // gRPC's codes and names are Abseil's, number for number (both are
  // google.rpc.Code).
  if (code < grpc::StatusCode::OK || code > grpc::StatusCode::UNAUTHENTICATED) return "UNKNOWN";
  return absl::StatusCodeToString(static_cast<absl::StatusCode>(code));
}

// The instruments and the served methods, shared by the interceptors and the
// plugin (which gRPC owns and may destroy after GrpcRequestMetrics).
struct GrpcRequestMetrics::State {
  explicit State(std::shared_ptr<prometheus::Registry> registry_in)
      : registry(std::move(registry_in)),
        requests(prometheus::BuildCounter()
                     .Name("pagoda_grpc_requests_total")
                     .Help("gRPC calls answered, by method and status code")
                     .Register(*registry)),
        durations(prometheus::BuildHistogram()
                      .Name("pagoda_grpc_request_duration_seconds")
                      .Help("gRPC call time, arrival to status sent")
                      .Register(*registry)) {
    absl::MutexLock lock(&mu);
    for (const char* method : kHealthMethods) served_methods.insert(method);
  }

  // Every method of `services` (full names, as the server registered them)
  // that protobuf's generated pool describes.
  void LearnServices(const std::vector<std::string>& services) {
    const google::protobuf::DescriptorPool* pool =
        google::protobuf::DescriptorPool::generated_pool();
    absl::MutexLock lock(&mu);
    for (const std::string& name : services) {
      const google::protobuf::ServiceDescriptor* service = pool->FindServiceByName(name);
      if (service == nullptr) continue;  // Its calls count as `other`.
      for (int i = 0; i < service->method_count(); ++i) {
        served_methods.insert(absl::StrCat(name, "/", service->method(i)->name()));
      }
    }
  }

  // `path` is gRPC's "/package.Service/Method".
  void Record(absl::string_view path, grpc::StatusCode code, double seconds) {
    absl::ConsumePrefix(&path, "/");
    prometheus::Counter* counter;
    prometheus::Histogram* histogram;
    {
      absl::MutexLock lock(&mu);
      const std::string method(served_methods.contains(path) ? path : kOtherMethod);
      auto [count, new_count] = counters.try_emplace(std::make_pair(method, code), nullptr);
      if (new_count) {
        count->second = &requests.Add({{"method", method}, {"code", GrpcCodeName(code)}});
      }
      auto [time, new_time] = histograms.try_emplace(method, nullptr);
      if (new_time) {
        time->second = &durations.Add({{"method", method}}, RequestDurationBucketsSeconds());
      }
      counter = count->second;
      histogram = time->second;
    }
    counter->Increment();
    histogram->Observe(seconds);
  }

  // Kept alive for the families it owns: gRPC may destroy the last
  // interceptor after the server's metrics are gone.
  const std::shared_ptr<prometheus::Registry> registry;
  prometheus::Family<prometheus::Counter>& requests;
  prometheus::Family<prometheus::Histogram>& durations;
  absl::Mutex mu;
  absl::flat_hash_set<std::string> served_methods ABSL_GUARDED_BY(mu);
  absl::flat_hash_map<std::pair<std::string, grpc::StatusCode>, prometheus::Counter*> counters
      ABSL_GUARDED_BY(mu);
  absl::flat_hash_map<std::string, prometheus::Histogram*> histograms ABSL_GUARDED_BY(mu);
};

namespace {

// One call's recorder: gRPC creates it when the call arrives and destroys
// it with the call.
class CallRecorder final : public grpc::experimental::Interceptor {
 public:
  CallRecorder(std::shared_ptr<GrpcRequestMetrics::State> state, const char* method)
      : state_(std::move(state)), method_(method == nullptr ? "" : method) {}

  // A call whose status never went out (the server was shut down under
  // it) still counts, as CANCELLED.
  ~CallRecorder() override {
    if (!recorded_) Record(grpc::StatusCode::CANCELLED);
  }

  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(InterceptionHookPoints::PRE_SEND_STATUS)) {
      Record(methods->GetSendStatus().error_code());
    }
    methods->Proceed();
  }

 private:
  void Record(grpc::StatusCode code) {
    recorded_ = true;
    state_->Record(method_, code, std::chrono::duration<double>(Clock::now() - start_).count());
  }

  const std::shared_ptr<GrpcRequestMetrics::State> state_;
  const std::string method_;
  const Clock::time_point start_ = Clock::now();
  // Written by the status's interception (a call sends one status) and read
  // by the destructor, which runs after every interception.
  bool recorded_ = false;
};

class RecorderFactory final : public grpc::experimental::ServerInterceptorFactoryInterface {
 public:
  explicit RecorderFactory(std::shared_ptr<GrpcRequestMetrics::State> state)
      : state_(std::move(state)) {}

  grpc::experimental::Interceptor* CreateServerInterceptor(
      grpc::experimental::ServerRpcInfo* info) override {
    return new CallRecorder(state_, info->method());
  }

 private:
  const std::shared_ptr<GrpcRequestMetrics::State> state_;
};

// Reads the registered services' names once they are all registered and
// before the server starts (gRPC hands them to plugins only).
class ServiceListPlugin final : public grpc::ServerBuilderPlugin {
 public:
  explicit ServiceListPlugin(std::shared_ptr<GrpcRequestMetrics::State> state)
      : state_(std::move(state)) {}

  std::string name() override { return "pagoda_grpc_request_metrics"; }
  void InitServer(grpc::ServerInitializer* initializer) override {
    state_->LearnServices(*initializer->GetServiceList());
  }
  void Finish(grpc::ServerInitializer*) override {}
  void ChangeArguments(const std::string&, void*) override {}

 private:
  const std::shared_ptr<GrpcRequestMetrics::State> state_;
};

// A builder takes a plugin of its own through an option.
class ServiceListOption final : public grpc::ServerBuilderOption {
 public:
  explicit ServiceListOption(std::shared_ptr<GrpcRequestMetrics::State> state)
      : state_(std::move(state)) {}

  void UpdateArguments(grpc::ChannelArguments*) override {}
  void UpdatePlugins(std::vector<std::unique_ptr<grpc::ServerBuilderPlugin>>* plugins) override {
    plugins->push_back(std::make_unique<ServiceListPlugin>(state_));
  }

 private:
  const std::shared_ptr<GrpcRequestMetrics::State> state_;
};

}  // namespace

GrpcRequestMetrics::GrpcRequestMetrics(std::shared_ptr<prometheus::Registry> registry)
    : state_(std::make_shared<State>(std::move(registry))) {}

GrpcRequestMetrics::~GrpcRequestMetrics() = default;

void GrpcRequestMetrics::Attach(grpc::ServerBuilder& builder) {
  std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>> factories;
  factories.push_back(std::make_unique<RecorderFactory>(state_));
  builder.experimental().SetInterceptorCreators(std::move(factories));
  builder.SetOption(std::make_unique<ServiceListOption>(state_));
}

}  // namespace pagoda::scheduler
