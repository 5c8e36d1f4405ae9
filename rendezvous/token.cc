#include "rendezvous/token.h"

#include <sys/random.h>

#include <cerrno>
#include <cstdlib>
#include <fstream>

#include "base/error.h"

namespace hvd::rendezvous {

std::optional<std::string> tokenFromEnvironment() {
  const char* value = std::getenv(kTokenEnv);
  if (value == nullptr || *value == '\0') return std::nullopt;
  return std::string(value);
}

std::string generateToken() {
  unsigned char raw[32];
  size_t got = 0;
  while (got < sizeof(raw)) {
    ssize_t n = getrandom(raw + got, sizeof(raw) - got, 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      throw Error(detail::concat("cannot generate a rendezvous token: getrandom: ", errnoText(errno)));
    }
    got += static_cast<size_t>(n);
  }
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(2 * sizeof(raw));
  for (unsigned char c : raw) {
    out += kHex[c >> 4];
    out += kHex[c & 15];
  }
  return out;
}

std::string readTokenFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw UsageError(detail::concat("cannot read token file '", path, "': ", errnoText(errno)));
  std::string line;
  std::getline(in, line);
  while (!line.empty() && (line.back() == '\r' || line.back() == ' ' || line.back() == '\t')) line.pop_back();
  if (line.empty()) throw UsageError(detail::concat("token file '", path, "' is empty"));
  for (unsigned char c : line) {
    // Visible ASCII only: the token travels in an HTTP header and an environment variable.
    if (c < 0x21 || c > 0x7e) {
      throw UsageError(detail::concat("token file '", path,
                                      "' holds a character not allowed in a token (byte ", int(c),
                                      "); use printable ASCII without spaces"));
    }
  }
  return line;
}

bool tokensEqual(std::string_view presented, std::string_view expected) {
  unsigned char diff = presented.size() == expected.size() ? 0 : 1;
  for (size_t i = 0; i < expected.size(); ++i) {
    const char p = i < presented.size() ? presented[i] : '\0';
    diff |= static_cast<unsigned char>(p ^ expected[i]);
  }
  return diff == 0;
}

}  // namespace hvd::rendezvous
