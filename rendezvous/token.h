// The per-job secret that guards the rendezvous server.
//
// hvdrun generates a token per job and hands it to workers ONLY through the environment variable
// HVD_RENDEZVOUS_TOKEN (never a command line: `ps` shows command lines to every user of a host).
// Workers send it in the "X-Hvd-Token" header of every request; the server answers 401 when the header
// is missing and 403 when it is wrong. Launcher, daemon and runtime share these helpers so the variable
// and header names live in one place.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace hvd::rendezvous {

inline constexpr const char* kTokenEnv = "HVD_RENDEZVOUS_TOKEN";
inline constexpr const char* kTokenHeader = "X-Hvd-Token";

// The token from HVD_RENDEZVOUS_TOKEN, or nullopt when the variable is unset or empty (an open server,
// e.g. hvd-rendezvous --no-token).
std::optional<std::string> tokenFromEnvironment();

// 32 random bytes from the kernel's CSPRNG (getrandom), as 64 lowercase hex characters, which are safe
// in an HTTP header and an environment variable. Throws Error naming errno text if the kernel fails.
std::string generateToken();

// Reads a token from a file (hvd-rendezvous --token-file): the first line, with trailing whitespace
// stripped. Throws UsageError naming the path when it cannot be read, is empty, or holds characters not
// allowed in an HTTP header value.
std::string readTokenFile(const std::string& path);

// Compares a presented token with the expected one in time independent of where they differ, so the
// answer time does not leak the token prefix by prefix.
bool tokensEqual(std::string_view presented, std::string_view expected);

}  // namespace hvd::rendezvous
