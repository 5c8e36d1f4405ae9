// Error taxonomy shared by every hvd library, and the two check macros.
//
// Exceptions are classified by origin so callers can react to the cause, not parse text:
//   Error                  base of everything hvd throws
//   ├─ UsageError          bad user input (flags, host specs, hostfiles, environment); hvdrun exits 2
//   ├─ StoreError          the rendezvous store failed (HTTP status, protocol, file I/O)
//   │   └─ RendezvousTimeout   keys still missing when a wait expired (message names them)
//   ├─ NetworkError        sockets: connect, bind, resolve (message names the address and errno text)
//   ├─ BackendError        the collective backend (Gloo) failed: timeout, mismatch
//   │   └─ PeerLostError   a peer process died or became unreachable (EOF or reset on its connection,
//   │                      shared-memory peer gone); elastic jobs re-form on it
//   └─ LaunchError         starting or supervising workers failed (message names host and rank)
//
// This header is the base library's (hvd::base), which every other library links.
// Messages carry the operands (key, host, rank, errno text); HVD_CHECK adds file:line.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

namespace hvd {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class UsageError : public Error {
 public:
  using Error::Error;
};

class StoreError : public Error {
 public:
  using Error::Error;
};

class RendezvousTimeout : public StoreError {
 public:
  using StoreError::StoreError;
};

class NetworkError : public Error {
 public:
  using Error::Error;
};

class BackendError : public Error {
 public:
  using Error::Error;
};

class PeerLostError : public BackendError {
 public:
  using BackendError::BackendError;
};

class LaunchError : public Error {
 public:
  using Error::Error;
};

namespace detail {

// Concatenates anything streamable; used to build messages with their operands.
template <typename... Args>
std::string concat(Args&&... args) {
  std::ostringstream out;
  (out << ... << std::forward<Args>(args));
  return out.str();
}

[[noreturn]] void throwInternal(const char* file, int line, const char* cond, const std::string& msg);

}  // namespace detail

// Returns "<text of errno>" for the current errno; for messages naming a failed syscall.
std::string errnoText(int err);

}  // namespace hvd

// HVD_CHECK(cond, ErrorType, message parts...): validates user or peer input; throws ErrorType with the
// message and the failed condition. Use for anything a caller or another rank can get wrong.
#define HVD_CHECK(cond, ErrorType, ...)                                                               \
  do {                                                                                                \
    if (!(cond)) {                                                                                    \
      throw ErrorType(::hvd::detail::concat(__VA_ARGS__, " [", #cond, " at ", __FILE__, ":", __LINE__, \
                                            "]"));                                                    \
    }                                                                                                 \
  } while (0)

// HVD_CHECK_EQ(a, b, ErrorType, message parts...): like HVD_CHECK, and prints both values.
#define HVD_CHECK_EQ(a, b, ErrorType, ...)                                                           \
  do {                                                                                               \
    const auto& hvd_check_a_ = (a);                                                                  \
    const auto& hvd_check_b_ = (b);                                                                  \
    if (!(hvd_check_a_ == hvd_check_b_)) {                                                           \
      throw ErrorType(::hvd::detail::concat(__VA_ARGS__, " (", #a, "=", hvd_check_a_, " vs ", #b, "=", \
                                            hvd_check_b_, ") [", __FILE__, ":", __LINE__, "]"));      \
    }                                                                                                \
  } while (0)

// HVD_INTERNAL_ASSERT(cond, message parts...): an invariant of our own code; failing it is a bug in hvd.
#define HVD_INTERNAL_ASSERT(cond, ...)                                                         \
  do {                                                                                         \
    if (!(cond)) {                                                                             \
      ::hvd::detail::throwInternal(__FILE__, __LINE__, #cond, ::hvd::detail::concat(__VA_ARGS__)); \
    }                                                                                          \
  } while (0)
