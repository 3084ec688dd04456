#ifndef PAGODA_TEXT_SENTENCEPIECE_ADAPTER_H_
#define PAGODA_TEXT_SENTENCEPIECE_ADAPTER_H_

// A thin wrapper over sentencepiece::SentencePieceProcessor whose header uses
// only the standard library. The processor itself lives in the shared library
// libpagoda_sentencepiece_shim.so (sentencepiece_shim.cc), loaded with
// dlopen(RTLD_LOCAL | RTLD_DEEPBIND): Debian's libsentencepiece embeds its own
// protobuf, which must not meet gRPC's libprotobuf in one symbol namespace.
// The shim is looked up in $PAGODA_SENTENCEPIECE_SHIM, next to the running
// executable, in ../lib from it, and at the path the build put it.
// Errors are returned as message strings.

#include <string>
#include <vector>

namespace pagoda {

// Thread-safe for const calls after a successful Load.
class SentencePieceAdapter {
 public:
  SentencePieceAdapter();
  ~SentencePieceAdapter();
  SentencePieceAdapter(const SentencePieceAdapter&) = delete;
  SentencePieceAdapter& operator=(const SentencePieceAdapter&) = delete;

  // Returns an empty string on success, else the error message.
  std::string Load(const std::string& path);
  std::string Encode(const std::string& text, std::vector<int>* ids) const;
  // REQUIRES: every id in [0, piece_size()).
  std::string Decode(const std::vector<int>& ids, std::string* text) const;
  int piece_size() const;
  // Piece `id` as the model spells it; `kind` 0 for a normal piece, 1 for a
  // control, unknown or unused one, 2 for a byte piece. REQUIRES: id in
  // [0, piece_size()).
  std::string Piece(int id, int* kind) const;

 private:
  void* processor_ = nullptr;  // Owned; created by the shim.
};

}  // namespace pagoda

#endif  // PAGODA_TEXT_SENTENCEPIECE_ADAPTER_H_
