// libFuzzer target: raw bytes from a client, through the server's request parser (with the server's
// limits) and the pure handler, as many requests as the bytes hold (keep-alive / pipelining).
// Invariants checked: every answer is a well-formed response with a Content-Length; a parse error gets
// an answer exactly when the server would send one; nothing throws and nothing crashes.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <sstream>

#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/write.hpp>  // operator<< for messages

#include "rendezvous/handler.h"

namespace {

namespace http = boost::beast::http;
using namespace hvd::rendezvous;

// A fresh state per input, so every crash reproduces from its input alone.
std::unique_ptr<KvState> freshState() {
  ServerOptions options;
  options.max_key_bytes = 256;
  options.max_value_bytes = 4096;  // small, so the fuzzer reaches the limits
  options.token = "fuzz";
  auto state = std::make_unique<KvState>(options);
  state->setScopeSizes({{"global", 2}, {"local_h", 1}});
  return state;
}

void check(const Response& res) {
  std::ostringstream out;
  out << res;
  const std::string wire = out.str();
  if (wire.rfind("HTTP/1.", 0) != 0 || wire.find("\r\nContent-Length: ") == std::string::npos) std::abort();
  if (res.result_int() < 200 || res.result_int() > 599) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  boost::beast::flat_buffer buffer;
  buffer.commit(boost::asio::buffer_copy(buffer.prepare(size), boost::asio::buffer(data, size)));
  auto state = freshState();
  KvState& kv = *state;
  for (int requests = 0; requests < 64 && buffer.size() > 0; ++requests) {
    http::request_parser<http::string_body> parser;
    applyLimits(parser, kv.options());
    parser.eager(true);
    boost::system::error_code ec;
    while (!parser.is_done()) {
      const size_t used = parser.put(buffer.data(), ec);
      buffer.consume(used);
      if (ec == http::error::need_more) {
        // The client sent no more: the server would wait, then answer 408 or close.
        ec = http::error::partial_message;
        break;
      }
      if (ec) break;
      if (used == 0) break;
    }
    if (ec) {
      const unsigned version = parser.is_header_done() ? parser.get().version() : 11;
      if (auto answer = parseErrorResponse(ec, kv.options(), version)) check(*answer);
      return 0;  // the server closes the connection after a parse error
    }
    if (!parser.is_done()) return 0;
    Request req = parser.release();
    Outcome outcome = handle(req, kv, /*allow_wait=*/false);
    if (!outcome.response) std::abort();  // without waiting, every request is answered at once
    check(*outcome.response);
    // The first pass had no token (401); again with it, to reach the routes behind the token check.
    req.set("X-Hvd-Token", "fuzz");
    Outcome authorized = handle(req, kv, false);
    if (!authorized.response) std::abort();
    check(*authorized.response);
    if (!authorized.response->keep_alive()) return 0;
  }
  return 0;
}
