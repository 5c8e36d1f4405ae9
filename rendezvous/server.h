// The rendezvous HTTP server: where every worker of a job meets.
//
// Speaks Horovod's key-value protocol (PUT/GET/DELETE /<scope>/<key>, see
// ../shared/reference/horovodrun_spec.md §4), so real Horovod Gloo workers rendezvous through it, plus:
//   - long-poll GET /<scope>/<key>?wait_ms=N   (answers as soon as the key exists, 404 after N ms)
//   - a per-job secret token (header "X-Hvd-Token"), required when ServerOptions::token is set
//   - GET /status  JSON: scopes, keys present, joined ranks, uptime
//
// The server runs on an io_context owned by the caller: hvdrun runs it on the same event loop as its
// output forwarding and child supervision; hvd-rendezvous runs the loop on its own threads.
// Threading: the public methods may be called from any thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <nlohmann/json.hpp>

namespace hvd::rendezvous {

struct ServerOptions {
  static constexpr uint16_t kDefaultPort = 0;  // 0: an ephemeral port, read it back with port()

  // Address to bind. Never all interfaces unless asked: "0.0.0.0" or "::" must be given explicitly.
  std::string bind_address = "127.0.0.1";
  uint16_t port = kDefaultPort;
  // When set, every request except GET /status must carry "X-Hvd-Token: <token>" (else 401/403).
  // Unset: open, as Horovod's server is (for real Horovod workers).
  std::optional<std::string> token;

  size_t max_key_bytes = 1024;                   // scope + key; longer: 413 (or 414)
  size_t max_value_bytes = 64ull << 20;          // PUT body; larger: 413
  size_t max_connections = 16384;                // beyond: new connections are closed at once
  std::chrono::milliseconds read_timeout{10000};  // a request must arrive whole within this
  std::chrono::milliseconds max_wait{60000};      // cap on ?wait_ms=
};

// Live view of who has joined, for --start-timeout messages and GET /status.
struct ScopeStatus {
  int size = -1;                  // -1: ad-hoc scope (size unknown)
  std::vector<std::string> keys;  // keys present
  std::vector<int> joined_ranks;  // ranks that have PUT "rank_<r>" or "<r>" in this scope
  std::vector<int> finished_ranks;  // ranks that have DELETEd their key (finalized the scope)
  // Scopes with a size only: every rank that has joined since setScopeSizes(), including ranks of a
  // scope that has since completed and been cleared. This is what --start-timeout asks about: a
  // snapshot of joined_ranks cannot tell "everyone joined and finished" from "nobody came".
  std::vector<int> ever_joined_ranks;
};

class Server {
 public:
  // Binds and listens at once. Throws NetworkError naming address:port (and errno text) on failure.
  Server(boost::asio::io_context& ioc, ServerOptions options);
  ~Server();  // stop()s
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  uint16_t port() const;
  const std::string& address() const;

  // Clears all data and sets the scope sizes from the host plan: "global" -> size,
  // "local_<host>" -> local_size, "cross_<local_rank>" -> cross_size. Horovod's init(host_alloc_plan).
  void setScopeSizes(const std::map<std::string, int>& sizes);

  std::map<std::string, ScopeStatus> scopes() const;
  nlohmann::json status() const;

  // See KvState::onAllJoined: runs on a thread of the server's io_context.
  void onAllJoined(std::function<void(const std::string& scope)> observer);

  // Stops accepting, closes every connection. Idempotent. Safe to call from any thread.
  void stop();

 private:
  struct Impl;
  std::shared_ptr<Impl> impl_;
};

}  // namespace hvd::rendezvous
