#include "common/tls_credentials.h"

#include <fstream>
#include <sstream>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/private_file.h"

namespace pagoda {
namespace {

absl::StatusOr<std::string> ReadPem(const std::string& path, const std::string& flag) {
  std::ifstream file(path, std::ios::binary);
  std::stringstream contents;
  contents << file.rdbuf();
  if (!file.good() || contents.str().empty()) {
    return absl::InvalidArgumentError(absl::StrCat(flag, ": cannot read '", path, "'"));
  }
  return contents.str();
}

// A private key: readable by its owner alone (common/private_file.h), as
// the worker secret. PEM keys are a few KiB; the bound only keeps a wrong
// path (a device, a huge file) from being read whole.
absl::StatusOr<std::string> ReadKey(const std::string& path, const std::string& flag) {
  constexpr size_t kMaxKeyFileBytes = 1 << 20;
  absl::StatusOr<std::string> key = ReadPrivateFile(path, flag + " file", kMaxKeyFileBytes);
  if (key.ok() && key->empty()) {
    return absl::InvalidArgumentError(absl::StrCat(flag, ": '", path, "' is empty"));
  }
  return key;
}

absl::Status CheckPair(const TlsFiles& files, const std::string& prefix) {
  if (files.certfile.empty() != files.keyfile.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(prefix, "ssl-certfile and ", prefix, "ssl-keyfile go together"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeServerCredentials(
    const TlsFiles& files, const std::string& prefix) {
  if (!files.given()) return grpc::InsecureServerCredentials();
  if (absl::Status pair = CheckPair(files, prefix); !pair.ok()) return pair;
  if (files.certfile.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(prefix, "ssl-ca-certs needs ", prefix,
                                                   "ssl-certfile and ", prefix, "ssl-keyfile"));
  }
  absl::StatusOr<std::string> cert = ReadPem(files.certfile, prefix + "ssl-certfile");
  if (!cert.ok()) return cert.status();
  absl::StatusOr<std::string> key = ReadKey(files.keyfile, prefix + "ssl-keyfile");
  if (!key.ok()) return key.status();
  grpc::SslServerCredentialsOptions ssl;
  ssl.pem_key_cert_pairs.push_back({*key, *cert});
  if (!files.ca_certs.empty()) {
    absl::StatusOr<std::string> ca = ReadPem(files.ca_certs, prefix + "ssl-ca-certs");
    if (!ca.ok()) return ca.status();
    ssl.pem_root_certs = *ca;
    ssl.client_certificate_request = GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY;
  }
  return grpc::SslServerCredentials(ssl);
}

absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> MakeChannelCredentials(
    const TlsFiles& files, const std::string& prefix) {
  if (!files.given()) return grpc::InsecureChannelCredentials();
  if (absl::Status pair = CheckPair(files, prefix); !pair.ok()) return pair;
  grpc::SslCredentialsOptions ssl;
  if (!files.ca_certs.empty()) {
    absl::StatusOr<std::string> ca = ReadPem(files.ca_certs, prefix + "ssl-ca-certs");
    if (!ca.ok()) return ca.status();
    ssl.pem_root_certs = *ca;
  }
  if (!files.certfile.empty()) {
    absl::StatusOr<std::string> cert = ReadPem(files.certfile, prefix + "ssl-certfile");
    if (!cert.ok()) return cert.status();
    absl::StatusOr<std::string> key = ReadKey(files.keyfile, prefix + "ssl-keyfile");
    if (!key.ok()) return key.status();
    ssl.pem_cert_chain = *cert;
    ssl.pem_private_key = *key;
  }
  return grpc::SslCredentials(ssl);
}

}  // namespace pagoda
