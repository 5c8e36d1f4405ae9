// The request target of the rendezvous protocol (handler.h): "/<scope>/<key>[?query]" split into its
// %-decoded segments and its query parameters, the %XX escapes both ways, and the decimal integers that
// query values, path segments and counters hold.
//
// Pure functions of their arguments, safe from any thread. Malformed input is reported in the result
// (nullopt, or a message for a 400 answer), never thrown.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <variant>

namespace hvd::rendezvous {

// The decimal integer that is the whole of text (digits, an optional leading '-'); nullopt for anything
// else, an empty text, or a number outside int64_t.
std::optional<int64_t> parseInt(std::string_view text);

// A parsed "/<scope>/<key>[?query]" target.
struct RequestTarget {
  std::string scope;
  std::string key;
  std::map<std::string, std::string> query;
};

// Returns the target, or an error message for a 400.
std::variant<RequestTarget, std::string> parseTarget(std::string_view target);

// Decodes %XX escapes; nullopt for a malformed escape. Exposed for the client's tests.
std::optional<std::string> percentDecode(std::string_view text);
// Escapes every byte outside [A-Za-z0-9_.:~-] as %XX (so '/' in a key survives a path segment).
std::string percentEncode(std::string_view text);

}  // namespace hvd::rendezvous
