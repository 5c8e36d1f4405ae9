#include "rendezvous/value_list.h"

#include <cstring>
#include <unordered_map>

#include "base/error.h"

namespace hvd::rendezvous {

namespace {

// Unsigned LEB128: 7 bits a byte, low first, the high bit set on all but the last.
size_t leb128Bytes(uint64_t n) {
  size_t k = 1;
  while (n >>= 7) ++k;
  return k;
}

char* putLeb128(char* out, uint64_t n) {
  do {
    const auto low = static_cast<unsigned char>(n & 0x7f);
    n >>= 7;
    *out++ = static_cast<char>(n ? (low | 0x80) : low);
  } while (n);
  return out;
}

void appendLeb128(std::string& out, uint64_t n) {
  char bytes[10];
  out.append(bytes, putLeb128(bytes, n));
}

std::optional<uint64_t> readLeb128(std::string_view body, size_t& at) {
  uint64_t n = 0;
  for (int shift = 0;; shift += 7) {
    if (at == body.size() || shift > 56) return std::nullopt;
    const auto byte = static_cast<unsigned char>(body[at++]);
    n |= static_cast<uint64_t>(byte & 0x7f) << shift;
    if (!(byte & 0x80)) return n;
  }
}

}  // namespace

void appendValue(std::string& out, std::string_view value) {
  appendLeb128(out, value.size());
  out.append(value);
}

void appendValueOrRef(std::string& out, std::string_view value, std::optional<uint32_t> back) {
  if (back) {
    HVD_INTERNAL_ASSERT(*back >= 1, "a value cannot refer to itself");
    appendLeb128(out, (uint64_t{*back - 1} << 1) | 1);
  } else {
    appendLeb128(out, uint64_t{value.size()} << 1);
    out.append(value);
  }
}

std::optional<std::vector<std::string_view>> splitValues(std::string_view body, bool refs) {
  std::vector<std::string_view> out;
  size_t at = 0;
  while (at < body.size()) {
    auto n = readLeb128(body, at);
    if (!n) return std::nullopt;
    if (refs && (*n & 1)) {
      const uint64_t back = (*n >> 1) + 1;
      if (back > out.size()) return std::nullopt;  // only an earlier value can be referred to
      out.push_back(out[out.size() - back]);
      continue;
    }
    if (refs) *n >>= 1;
    if (*n > body.size() - at) return std::nullopt;
    out.push_back(body.substr(at, *n));
    at += *n;
  }
  return out;
}

std::string encodePacked(const std::vector<std::string_view>& values, ValueRange range) {
  size_t bytes = 0;
  for (const std::string_view value : values) {
    const size_t size = range.of(value).size();
    bytes += leb128Bytes(size) + size;
  }
  std::string body(bytes, '\0');
  char* out = body.data();
  for (const std::string_view value : values) {
    const std::string_view part = range.of(value);
    out = putLeb128(out, part.size());
    if (part.size() <= 8) {
      for (const char c : part) *out++ = c;
    } else {
      std::memcpy(out, part.data(), part.size());
      out += part.size();
    }
  }
  HVD_INTERNAL_ASSERT(out == body.data() + body.size(), "values answer of ", body.size(), " bytes filled to ",
                      out - body.data());
  return body;
}

std::vector<std::string> encodePackedWindow(const std::vector<std::string_view>& values, uint64_t first,
                                            uint64_t length, size_t count) {
  static_assert(kBatchedSliceBytes < 128, "a slice's length must be one LEB128 byte");
  const auto slice = [&](std::string_view value, size_t i) {
    return ValueRange{first + i * length, length}.of(value);
  };
  std::vector<size_t> bytes(count, 0);
  for (const std::string_view value : values) {
    for (size_t i = 0; i < count; ++i) bytes[i] += 1 + slice(value, i).size();
  }
  std::vector<std::string> answers(count);
  std::vector<char*> out(count);
  for (size_t i = 0; i < count; ++i) {
    answers[i].assign(bytes[i], '\0');
    out[i] = answers[i].data();
  }
  for (const std::string_view value : values) {
    for (size_t i = 0; i < count; ++i) {
      const std::string_view part = slice(value, i);
      *out[i]++ = static_cast<char>(part.size());
      for (const char c : part) *out[i]++ = c;
    }
  }
  for (size_t i = 0; i < count; ++i) {
    HVD_INTERNAL_ASSERT(out[i] == answers[i].data() + answers[i].size(), "windowed answer ", i, " of ",
                        answers[i].size(), " bytes filled to ", out[i] - answers[i].data());
  }
  return answers;
}

std::string encodeWithRefs(const std::vector<std::string_view>& values, ValueRange range) {
  std::string body;
  std::unordered_map<std::string_view, uint32_t> last;  // where each distinct slice was last seen
  last.reserve(values.size());
  for (uint32_t i = 0; i < values.size(); ++i) {
    const auto [at, added] = last.emplace(range.of(values[i]), i);
    appendValueOrRef(body, at->first, added ? std::nullopt : std::optional<uint32_t>(i - at->second));
    at->second = i;
  }
  return body;
}

}  // namespace hvd::rendezvous
