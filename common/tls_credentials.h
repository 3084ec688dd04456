#ifndef PAGODA_COMMON_TLS_CREDENTIALS_H_
#define PAGODA_COMMON_TLS_CREDENTIALS_H_

// gRPC server and client credentials from the --ssl-* (and --worker-ssl-*)
// PEM files, with the files' presence and modes checked first.

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/security/server_credentials.h"

namespace pagoda {

// PEM file paths, as vLLM's --ssl-* flags name them. Empty = not given.
struct TlsFiles {
  std::string certfile;  // Own certificate chain.
  std::string keyfile;   // Its private key.
  std::string ca_certs;  // Peers must present a certificate this CA signed.

  // Whether any file is given: TLS is asked for (the factories below check
  // the rest); plaintext otherwise.
  bool given() const { return !certfile.empty() || !keyfile.empty() || !ca_certs.empty(); }
};

// Server side: plaintext when no file is given; TLS with certfile + keyfile;
// mutual TLS (client certificates required and verified) with ca_certs too.
// INVALID_ARGUMENT (naming `flag_prefix` + "ssl-...") for half-given or
// unreadable files, and for a keyfile others may access or its group write
// (common/private_file.h: the rule of the worker secret file).
absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeServerCredentials(
    const TlsFiles& files, const std::string& flag_prefix = "--");

// Client side: plaintext when no file is given; TLS trusting ca_certs (the
// system roots if empty) with certfile + keyfile as the client certificate
// when given (both or neither), the keyfile private as above.
absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> MakeChannelCredentials(
    const TlsFiles& files, const std::string& flag_prefix = "--");

}  // namespace pagoda

#endif  // PAGODA_COMMON_TLS_CREDENTIALS_H_
