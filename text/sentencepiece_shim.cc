// The only code that touches libsentencepiece, built as its own shared
// library and loaded by sentencepiece_adapter.cc with dlopen(RTLD_DEEPBIND).
//
// Why: Debian's libsentencepiece.so carries its own copy of protobuf 3.14 and
// exports those symbols. In a process that also links libprotobuf 3.21 (every
// gRPC binary: pagoda-server) one copy interposes on the other and the
// process crashes or aborts ("compiled against version 3.14.0"). Loaded with
// RTLD_LOCAL | RTLD_DEEPBIND, sentencepiece binds to its own protobuf and the
// rest of the process never sees it.
//
// A plain C interface, so nothing C++-ABI-sensitive crosses the boundary.
// Strings and arrays returned are malloc'd; the caller frees them with free().
// No Abseil header may be included (sentencepiece declares its own absl).

#include <sentencepiece_processor.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

char* CopyString(const std::string& text) {
  char* out = static_cast<char*>(std::malloc(text.size() + 1));
  std::memcpy(out, text.data(), text.size());
  out[text.size()] = '\0';
  return out;
}

sentencepiece::SentencePieceProcessor* Processor(void* handle) {
  return static_cast<sentencepiece::SentencePieceProcessor*>(handle);
}

}  // namespace

extern "C" {

__attribute__((visibility("default"))) void* pagoda_spm_create() {
  return new sentencepiece::SentencePieceProcessor();
}

__attribute__((visibility("default"))) void pagoda_spm_destroy(void* handle) {
  delete Processor(handle);
}

// Each returns NULL on success, else a malloc'd error message.
__attribute__((visibility("default"))) char* pagoda_spm_load(void* handle, const char* path) {
  const auto status = Processor(handle)->Load(path);
  return status.ok() ? nullptr : CopyString(status.ToString());
}

__attribute__((visibility("default"))) char* pagoda_spm_encode(void* handle, const char* text,
                                                               size_t text_size, int** ids,
                                                               size_t* num_ids) {
  std::vector<int> out;
  const auto status = Processor(handle)->Encode(std::string(text, text_size), &out);
  if (!status.ok()) return CopyString(status.ToString());
  *num_ids = out.size();
  *ids = static_cast<int*>(std::malloc(sizeof(int) * (out.empty() ? 1 : out.size())));
  if (!out.empty()) std::memcpy(*ids, out.data(), sizeof(int) * out.size());
  return nullptr;
}

__attribute__((visibility("default"))) char* pagoda_spm_decode(void* handle, const int* ids,
                                                               size_t num_ids, char** text,
                                                               size_t* text_size) {
  std::string out;
  const auto status = Processor(handle)->Decode(std::vector<int>(ids, ids + num_ids), &out);
  if (!status.ok()) return CopyString(status.ToString());
  *text_size = out.size();
  *text = CopyString(out);
  return nullptr;
}

__attribute__((visibility("default"))) int pagoda_spm_piece_size(void* handle) {
  return Processor(handle)->GetPieceSize();
}

// Piece `id` (malloc'd, NUL-terminated) and its kind: 0 normal, 1 control,
// unknown or unused, 2 a byte piece (<0xXX>).
__attribute__((visibility("default"))) char* pagoda_spm_piece(void* handle, int id, int* kind) {
  sentencepiece::SentencePieceProcessor* processor = Processor(handle);
  *kind = processor->IsByte(id) ? 2
          : processor->IsControl(id) || processor->IsUnknown(id) || processor->IsUnused(id) ? 1
                                                                                           : 0;
  return CopyString(processor->IdToPiece(id));
}

}  // extern "C"
