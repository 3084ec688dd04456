#ifndef PAGODA_COMMON_HUMAN_READABLE_INT_H_
#define PAGODA_COMMON_HUMAN_READABLE_INT_H_

// vLLM's human_readable_int (vllm/utils/argparse_utils.py), which its
// --max-model-len, --max-num-batched-tokens and JSON flags' keys take:
// "1k" = 1000, "1K" = 1024, "25.6k" = 25600 (decimals only with the
// decimal suffixes k, m, g, t; K, M, G, T are powers of 1024).

#include <cstdint>
#include <optional>

#include "absl/strings/string_view.h"

namespace pagoda {

// The integer `text` spells with a suffix; nullopt for anything else (a
// plain number included: its reader takes it as it is) or past int64.
std::optional<int64_t> HumanReadableInteger(absl::string_view text);

}  // namespace pagoda

#endif  // PAGODA_COMMON_HUMAN_READABLE_INT_H_
