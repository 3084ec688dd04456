#ifndef PAGODA_WORKER_SECRET_AUTH_PROCESSOR_H_
#define PAGODA_WORKER_SECRET_AUTH_PROCESSOR_H_

// SecretAuthProcessor: the server's secret checked in gRPC's transport, before
// a call's message is read.

#include "grpcpp/security/auth_metadata_processor.h"
#include "worker/worker_service.h"

namespace pagoda::worker {

// Checks the server's secret (WorkerService::HasSecret) from a call's metadata
// in gRPC's transport, before the call's message is read: a caller without
// it is refused UNAUTHENTICATED for the cost of its headers, however large a
// message it sends after them. Health checks (grpc.health.v1.Health) pass
// without the secret, as Kubernetes probes send none.
//
// gRPC runs such processors only on secure server credentials (TLS, or
// local credentials on a unix socket); on plaintext TCP the handlers' own
// check (after the message) is all there is. Thread-safe, non-blocking.
class SecretAuthProcessor final : public grpc::AuthMetadataProcessor {
 public:
  // `service` must outlive the gRPC server this processor is installed in.
  explicit SecretAuthProcessor(const WorkerService* service) : service_(service) {}

  bool IsBlocking() const override { return false; }
  grpc::Status Process(const InputMetadata& auth_metadata, grpc::AuthContext* context,
                       OutputMetadata* consumed_auth_metadata,
                       OutputMetadata* response_metadata) override;

 private:
  const WorkerService* const service_;
};

}  // namespace pagoda::worker

#endif  // PAGODA_WORKER_SECRET_AUTH_PROCESSOR_H_
