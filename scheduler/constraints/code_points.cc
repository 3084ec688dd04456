#include "scheduler/constraints/code_points.h"

#include <algorithm>

#include "absl/strings/str_format.h"

namespace pagoda::constraints {
namespace {

constexpr uint32_t kSurrogateLo = 0xD800;
constexpr uint32_t kSurrogateHi = 0xDFFF;

int EncodedLength(uint32_t c) { return c < 0x80 ? 1 : c < 0x800 ? 2 : c < 0x10000 ? 3 : 4; }

// Appends to `out` byte-range sequences covering exactly the encodings of
// [lo, hi]: split where the encoded length changes, then where the
// continuation bytes stop spanning their whole range, so that each piece is
// a product of byte ranges.
void SplitRange(uint32_t lo, uint32_t hi, std::vector<std::vector<std::pair<uint8_t, uint8_t>>>* out) {
  for (uint32_t boundary : {0x7Fu, 0x7FFu, 0xFFFFu}) {
    if (lo <= boundary && boundary < hi) {
      SplitRange(lo, boundary, out);
      SplitRange(boundary + 1, hi, out);
      return;
    }
  }
  const int n = EncodedLength(lo);
  for (int i = 1; i < n; ++i) {
    const uint32_t m = (1u << (6 * i)) - 1;
    if ((lo & ~m) == (hi & ~m)) continue;
    if ((lo & m) != 0) {
      SplitRange(lo, lo | m, out);
      SplitRange((lo | m) + 1, hi, out);
      return;
    }
    if ((hi & m) != m) {
      SplitRange(lo, (hi & ~m) - 1, out);
      SplitRange(hi & ~m, hi, out);
      return;
    }
  }
  std::string a, b;
  AppendUtf8(lo, &a);
  AppendUtf8(hi, &b);
  std::vector<std::pair<uint8_t, uint8_t>> sequence;
  for (size_t i = 0; i < a.size(); ++i) {
    sequence.emplace_back(static_cast<uint8_t>(a[i]), static_cast<uint8_t>(b[i]));
  }
  out->push_back(std::move(sequence));
}

// The escape JsonStringClass writes for `c`, or "" if it needs none.
std::string JsonEscapeOf(uint32_t c) {
  switch (c) {
    case '"': return "\\\"";
    case '\\': return "\\\\";
    case '\b': return "\\b";
    case '\f': return "\\f";
    case '\n': return "\\n";
    case '\r': return "\\r";
    case '\t': return "\\t";
  }
  if (c < 0x20) return absl::StrFormat("\\u%04x", c);
  return "";
}

}  // namespace

CodePointSet CodePointSet::All() {
  CodePointSet s;
  s.Add(0, kSurrogateLo - 1);
  s.Add(kSurrogateHi + 1, kMaxCodePoint);
  return s;
}

void CodePointSet::Add(uint32_t lo, uint32_t hi) {
  if (lo > hi) return;
  ranges_.emplace_back(lo, hi);
  std::sort(ranges_.begin(), ranges_.end());
  std::vector<std::pair<uint32_t, uint32_t>> merged;
  for (const auto& range : ranges_) {
    if (!merged.empty() && range.first <= merged.back().second + 1) {
      merged.back().second = std::max(merged.back().second, range.second);
    } else {
      merged.push_back(range);
    }
  }
  ranges_ = std::move(merged);
}

void CodePointSet::Add(const CodePointSet& other) {
  for (const auto& [lo, hi] : other.ranges_) Add(lo, hi);
}

bool CodePointSet::Contains(uint32_t c) const {
  for (const auto& [lo, hi] : ranges_) {
    if (lo <= c && c <= hi) return true;
  }
  return false;
}

CodePointSet CodePointSet::Complement() const {
  CodePointSet out;
  uint32_t next = 0;
  for (const auto& [lo, hi] : ranges_) {
    if (lo > next) out.ranges_.emplace_back(next, lo - 1);
    next = hi + 1;
  }
  if (next <= kMaxCodePoint) out.ranges_.emplace_back(next, kMaxCodePoint);
  return out.Intersect(All());
}

CodePointSet CodePointSet::Intersect(const CodePointSet& other) const {
  CodePointSet out;
  size_t i = 0, j = 0;
  while (i < ranges_.size() && j < other.ranges_.size()) {
    const uint32_t lo = std::max(ranges_[i].first, other.ranges_[j].first);
    const uint32_t hi = std::min(ranges_[i].second, other.ranges_[j].second);
    if (lo <= hi) out.ranges_.emplace_back(lo, hi);
    if (ranges_[i].second < other.ranges_[j].second) {
      ++i;
    } else {
      ++j;
    }
  }
  return out;
}

void AppendUtf8(uint32_t c, std::string* out) {
  if (c < 0x80) {
    out->push_back(static_cast<char>(c));
  } else if (c < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (c >> 6)));
    out->push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else if (c < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (c >> 12)));
    out->push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (c >> 18)));
    out->push_back(static_cast<char>(0x80 | ((c >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (c & 0x3F)));
  }
}

ExprId Utf8Class(GrammarBuilder& g, const CodePointSet& set) {
  std::vector<std::vector<std::pair<uint8_t, uint8_t>>> sequences;
  const CodePointSet valid = set.Intersect(CodePointSet::All());
  for (const auto& [lo, hi] : valid.ranges()) {
    SplitRange(lo, hi, &sequences);
  }
  std::vector<ExprId> alternatives;
  for (const auto& sequence : sequences) {
    std::vector<ExprId> bytes;
    for (const auto& [lo, hi] : sequence) bytes.push_back(g.Bytes(ByteSet::Range(lo, hi)));
    alternatives.push_back(g.Sequence(std::move(bytes)));
  }
  return g.Choice(std::move(alternatives));
}

ExprId JsonStringClass(GrammarBuilder& g, const CodePointSet& set) {
  CodePointSet escaped = CodePointSet::Range(0, 0x1F);
  escaped.Add('"', '"');
  escaped.Add('\\', '\\');
  std::vector<ExprId> alternatives = {Utf8Class(g, set.Minus(escaped))};
  const CodePointSet special = set.Intersect(escaped);
  for (const auto& [lo, hi] : special.ranges()) {
    for (uint32_t c = lo; c <= hi; ++c) alternatives.push_back(g.Literal(JsonEscapeOf(c)));
  }
  return g.Choice(std::move(alternatives));
}

std::string JsonEscape(const std::string& text) {
  std::string out;
  for (char c : text) {
    const std::string escape = JsonEscapeOf(static_cast<uint8_t>(c));
    if (escape.empty()) {
      out.push_back(c);
    } else {
      out += escape;
    }
  }
  return out;
}

}  // namespace pagoda::constraints
