// The rendezvous HTTP server: where every worker of a job meets.
//
// Speaks Horovod's key-value protocol (PUT/GET/DELETE /<scope>/<key>, the protocol of Horovod's
// RendezvousServer), so real Horovod Gloo workers rendezvous through it, plus:
//   - long-poll GET /<scope>/<key>?wait_ms=N   (answers as soon as the key exists, 404 after N ms)
//   - a per-job secret token (header "X-Hvd-Token"), required when ServerOptions::token is set, except
//     from this user's own local processes when ServerOptions::trust_local_peers is set (see PeerInfo)
//   - GET /status  JSON: scopes, keys present, joined ranks, uptime
//
// The server runs on an io_context owned by the caller: hvdrun runs it on the same event loop as its
// output forwarding and child supervision; hvd-rendezvous runs the loop on its own threads.
// Threading: the public methods may be called from any thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <nlohmann/json.hpp>

#include "base/job_monitor.h"
#include "rendezvous/round.h"

namespace hvd::rendezvous {

struct ServerOptions {
  static constexpr uint16_t kDefaultPort = 0;  // 0: an ephemeral port, read it back with port()

  // Address to bind. Never all interfaces unless asked: "0.0.0.0" or "::" must be given explicitly.
  std::string bind_address = "127.0.0.1";
  uint16_t port = kDefaultPort;
  // When set, every request except GET /status must carry "X-Hvd-Token: <token>" (else 401/403).
  // Unset: open, as Horovod's server is (for real Horovod workers).
  std::optional<std::string> token;
  // With a token: also accept requests WITHOUT the header on a loopback connection whose other end is a
  // socket of this process's own effective uid (found once per connection with NETLINK_SOCK_DIAG), so
  // unmodified Horovod workers of a local job need no token. Any other request without the header gets
  // 403 instead of 401. A wrong token is 403 either way. hvdrun sets this when every host is this machine.
  bool trust_local_peers = false;

  size_t max_key_bytes = 1024;                   // scope + key; longer: 413 (or 414)
  size_t max_value_bytes = 64ull << 20;          // PUT body; larger: 413
  size_t max_connections = 16384;                // beyond: new connections are closed at once
  std::chrono::milliseconds read_timeout{10000};  // a request must arrive whole within this
  std::chrono::milliseconds max_wait{60000};      // cap on ?wait_ms=

  // The status port (status_page.h): the job's HTML page, JSON and Prometheus metrics on a second
  // listener. nullopt: none; 0: an ephemeral port (read it back with statusPort()).
  std::optional<uint16_t> status_port;
  std::string status_bind_address = "127.0.0.1";
  std::string job_name = "hvd-rendezvous";  // shown on the status page
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

// What the server learnt about a connection when it accepted it: once per connection, never per request.
// Passed to handle() with every request of that connection.
struct PeerInfo {
  std::string address;  // the peer's IP address ("127.0.0.1", "::1"; IPv4-mapped IPv6 as IPv4); "" unknown
  uint16_t port = 0;
  bool loopback = false;  // the peer address is 127.0.0.0/8 or ::1
  // Owner of the peer's socket (inet_diag's idiag_uid), asked only for loopback connections of a server
  // with trust_local_peers and a token. nullopt: not asked, or the query failed (owner_error says why).
  std::optional<uint32_t> uid;
  std::string owner_error;
  // Loopback, and uid is the server's own effective uid: a request without the token is accepted when
  // ServerOptions::trust_local_peers is set.
  bool same_user = false;
};

// A request the server refused because it carried no token (401, or 403 from a server that trusts local
// peers): what hvdrun needs to tell the user that Horovod's own workers cannot send the token.
struct TokenlessRejection {
  PeerInfo peer;
  unsigned status = 0;       // 401 or 403
  std::string request_line;  // "GET /global/0", for messages
};

// Address text as PeerInfo holds it: IPv4-mapped IPv6 ("::ffff:10.0.0.1") as IPv4, everything else as
// Boost.Asio prints it. Returns the input unchanged when it is not an IP address.
std::string normalizeAddress(const std::string& address);

// Owner uid of the socket at the other end of a TCP connection on this machine, from the kernel's
// socket diagnostics (NETLINK_SOCK_DIAG, inet_diag_req_v2 with the connection's 4-tuple reversed).
// `local` and `peer` are this end's and the other end's addresses and ports. Throws NetworkError naming
// the step and errno text when the kernel cannot answer (no such connection, inet_diag not available).
uint32_t peerSocketOwner(const std::string& local_address, uint16_t local_port,
                         const std::string& peer_address, uint16_t peer_port);

class Server {
 public:
  // Binds and listens at once. Throws NetworkError naming address:port (and errno text) on failure.
  Server(boost::asio::io_context& ioc, ServerOptions options);
  ~Server();  // stop()s
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  uint16_t port() const;
  const std::string& address() const;
  // The status listener's port and address (ServerOptions::status_port); nullopt without one.
  std::optional<uint16_t> statusPort() const;
  const std::string& statusAddress() const;

  // The job's live view: the launcher tells it about processes, workers and the server feed it themselves.
  Monitor& monitor();

  // Clears all data and sets the scope sizes from the host plan: "global" -> size,
  // "local_<host>" -> local_size, "cross_<local_rank>" -> cross_size. Horovod's init(host_alloc_plan).
  void setScopeSizes(const std::map<std::string, int>& sizes);

  std::map<std::string, ScopeStatus> scopes() const;
  nlohmann::json status() const;

  // Elastic jobs: see KvState::beginRound, markStarted and onRoundRequest (the observer runs on a thread
  // of the server's io_context).
  void beginRound(ElasticRound round);
  void markStarted(const std::string& slot, uint64_t round);
  std::optional<uint64_t> lastRound(const std::string& slot) const;
  void onRoundRequest(std::function<void(const std::string& slot, uint64_t after)> observer);

  // See KvState::onAllJoined: runs on a thread of the server's io_context.
  void onAllJoined(std::function<void(const std::string& scope)> observer);

  // Called, on a thread of the server's io_context, for every request refused for carrying no token (the
  // refusal is sent whatever the observer does). May be set or replaced at any time.
  void onTokenlessRejection(std::function<void(const TokenlessRejection&)> observer);

  // Stops accepting, closes every connection. Idempotent. Safe to call from any thread.
  void stop();

 private:
  struct Impl;
  std::shared_ptr<Impl> impl_;
};

}  // namespace hvd::rendezvous
