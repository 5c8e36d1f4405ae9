#include "rendezvous/request_target.h"

#include <charconv>

namespace hvd::rendezvous {

std::optional<int64_t> parseInt(std::string_view text) {
  int64_t value = 0;
  if (text.empty()) return std::nullopt;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size()) return std::nullopt;
  return value;
}

std::variant<RequestTarget, std::string> parseTarget(std::string_view target) {
  if (target.empty() || target[0] != '/') return std::string("request target must start with '/'");
  std::string_view path = target;
  std::string_view query;
  if (auto q = target.find('?'); q != std::string_view::npos) {
    path = target.substr(0, q);
    query = target.substr(q + 1);
  }
  path.remove_prefix(1);
  const auto slash = path.find('/');
  if (slash == std::string_view::npos) return std::string("path must be /<scope>/<key>");
  if (path.find('/', slash + 1) != std::string_view::npos) {
    return std::string("path must be /<scope>/<key>, with exactly two segments (escape '/' in a key as %2F)");
  }
  RequestTarget out;
  auto scope = percentDecode(path.substr(0, slash));
  auto key = percentDecode(path.substr(slash + 1));
  if (!scope || !key) return std::string("malformed %-escape in path");
  if (scope->empty() || key->empty()) return std::string("scope and key must not be empty");
  out.scope = std::move(*scope);
  out.key = std::move(*key);
  while (!query.empty()) {
    auto amp = query.find('&');
    std::string_view item = query.substr(0, amp);
    query = amp == std::string_view::npos ? std::string_view() : query.substr(amp + 1);
    if (item.empty()) continue;
    auto eq = item.find('=');
    if (eq == std::string_view::npos) return "query parameter '" + std::string(item) + "' has no value";
    out.query.emplace(std::string(item.substr(0, eq)), std::string(item.substr(eq + 1)));
  }
  return out;
}

std::optional<std::string> percentDecode(std::string_view text) {
  auto hex = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] != '%') {
      out += text[i];
      continue;
    }
    if (i + 2 >= text.size()) return std::nullopt;
    const int hi = hex(text[i + 1]);
    const int lo = hex(text[i + 2]);
    if (hi < 0 || lo < 0) return std::nullopt;
    out += static_cast<char>(hi * 16 + lo);
    i += 2;
  }
  return out;
}

std::string percentEncode(std::string_view text) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  out.reserve(text.size());
  for (unsigned char c : text) {
    if ((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '.' ||
        c == ':' || c == '~' || c == '-') {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  return out;
}

}  // namespace hvd::rendezvous
