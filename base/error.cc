#include "base/error.h"

#include <cstring>

namespace hvd {

namespace detail {

void throwInternal(const char* file, int line, const char* cond, const std::string& msg) {
  throw Error(concat("internal error (a bug in hvd, please report it): ", msg, " [", cond, " at ", file, ":",
                     line, "]"));
}

}  // namespace detail

std::string errnoText(int err) {
  char buf[256];
  // GNU strerror_r may return a static string instead of filling buf.
  const char* text = strerror_r(err, buf, sizeof(buf));
  return detail::concat(text, " (errno ", err, ")");
}

}  // namespace hvd
