#include "text/sentencepiece_adapter.h"

#include <dlfcn.h>
#include <limits.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <mutex>

namespace pagoda {
namespace {

constexpr char kShimName[] = "libpagoda_sentencepiece_shim.so";

// RTLD_DEEPBIND is what keeps libsentencepiece's embedded protobuf apart from
// gRPC's: without it the tokenizer crashes in any process that also links
// libprotobuf (checked). Sanitizer runtimes refuse DEEPBIND, so the tokenizer
// cannot run under ASan/TSan; they fail loudly at dlopen rather than crash.
constexpr int kDlopenFlags = RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND;

// The shim's C interface (sentencepiece_shim.cc).
struct ShimApi {
  void* (*create)();
  void (*destroy)(void*);
  char* (*load)(void*, const char*);
  char* (*encode)(void*, const char*, size_t, int**, size_t*);
  char* (*decode)(void*, const int*, size_t, char**, size_t*);
  int (*piece_size)(void*);
  char* (*piece)(void*, int, int*);
  std::string error;  // Why the shim could not be loaded; empty if it was.
};

std::vector<std::string> ShimCandidates() {
  std::vector<std::string> candidates;
  if (const char* env = std::getenv("PAGODA_SENTENCEPIECE_SHIM"); env != nullptr && *env) {
    candidates.push_back(env);
  }
  char buffer[PATH_MAX];
  const ssize_t n = readlink("/proc/self/exe", buffer, sizeof(buffer) - 1);
  if (n > 0) {
    const std::filesystem::path dir = std::filesystem::path(std::string(buffer, n)).parent_path();
    candidates.push_back((dir / kShimName).string());
    candidates.push_back((dir.parent_path() / "lib" / kShimName).string());
  }
#ifdef PAGODA_SENTENCEPIECE_SHIM_PATH
  candidates.push_back(PAGODA_SENTENCEPIECE_SHIM_PATH);
#endif
  return candidates;
}

const ShimApi& Shim() {
  static const ShimApi* api = [] {
    auto* out = new ShimApi{};
    void* handle = nullptr;
    std::string tried;
    for (const std::string& path : ShimCandidates()) {
      std::error_code error;
      if (!std::filesystem::exists(path, error)) {
        tried += " " + path;
        continue;
      }
      handle = dlopen(path.c_str(), kDlopenFlags);
      if (handle != nullptr) break;
      tried += " " + path + " (" + dlerror() + ")";
    }
    if (handle == nullptr) {
      out->error = std::string("cannot load ") + kShimName + "; tried:" + tried;
      return out;
    }
    out->create = reinterpret_cast<void* (*)()>(dlsym(handle, "pagoda_spm_create"));
    out->destroy = reinterpret_cast<void (*)(void*)>(dlsym(handle, "pagoda_spm_destroy"));
    out->load = reinterpret_cast<char* (*)(void*, const char*)>(dlsym(handle, "pagoda_spm_load"));
    out->encode = reinterpret_cast<char* (*)(void*, const char*, size_t, int**, size_t*)>(
        dlsym(handle, "pagoda_spm_encode"));
    out->decode = reinterpret_cast<char* (*)(void*, const int*, size_t, char**, size_t*)>(
        dlsym(handle, "pagoda_spm_decode"));
    out->piece_size = reinterpret_cast<int (*)(void*)>(dlsym(handle, "pagoda_spm_piece_size"));
    out->piece = reinterpret_cast<char* (*)(void*, int, int*)>(dlsym(handle, "pagoda_spm_piece"));
    if (!out->create || !out->destroy || !out->load || !out->encode || !out->decode ||
        !out->piece_size || !out->piece) {
      out->error = std::string(kShimName) + " lacks a pagoda_spm_* function";
    }
    return out;
  }();
  return *api;
}

// Takes ownership of a malloc'd error from the shim.
std::string TakeError(char* error) {
  if (error == nullptr) return std::string();
  std::string out(error);
  std::free(error);
  return out.empty() ? "unknown sentencepiece error" : out;
}

}  // namespace

SentencePieceAdapter::SentencePieceAdapter() = default;

SentencePieceAdapter::~SentencePieceAdapter() {
  if (processor_ != nullptr) Shim().destroy(processor_);
}

std::string SentencePieceAdapter::Load(const std::string& path) {
  const ShimApi& shim = Shim();
  if (!shim.error.empty()) return shim.error;
  if (processor_ == nullptr) processor_ = shim.create();
  return TakeError(shim.load(processor_, path.c_str()));
}

std::string SentencePieceAdapter::Encode(const std::string& text, std::vector<int>* ids) const {
  if (processor_ == nullptr) return "sentencepiece model not loaded";
  int* out = nullptr;
  size_t size = 0;
  std::string error = TakeError(Shim().encode(processor_, text.data(), text.size(), &out, &size));
  if (error.empty()) ids->assign(out, out + size);
  std::free(out);
  return error;
}

std::string SentencePieceAdapter::Decode(const std::vector<int>& ids, std::string* text) const {
  if (processor_ == nullptr) return "sentencepiece model not loaded";
  char* out = nullptr;
  size_t size = 0;
  std::string error = TakeError(Shim().decode(processor_, ids.data(), ids.size(), &out, &size));
  if (error.empty()) text->assign(out, size);
  std::free(out);
  return error;
}

std::string SentencePieceAdapter::Piece(int id, int* kind) const {
  char* piece = Shim().piece(processor_, id, kind);
  std::string out(piece);
  std::free(piece);
  return out;
}

int SentencePieceAdapter::piece_size() const {
  return processor_ == nullptr ? 0 : Shim().piece_size(processor_);
}

}  // namespace pagoda
