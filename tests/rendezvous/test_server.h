// A rendezvous Server on an ephemeral loopback port, its io_context running on background threads for the
// lifetime of the object. Shared by the rendezvous tests.
#pragma once

#include <memory>
#include <thread>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <catch2/catch.hpp>

#include "base/error.h"
#include "rendezvous/http_store.h"
#include "rendezvous/server.h"

namespace hvd::rendezvous::testing {

class ServerThread {
 public:
  explicit ServerThread(ServerOptions options = {}, int threads = 2)
      : server_(std::make_unique<Server>(ioc_, std::move(options))) {
    for (int i = 0; i < threads; ++i) threads_.emplace_back([this] { ioc_.run(); });
  }
  ~ServerThread() {
    server_->stop();
    ioc_.stop();
    for (auto& t : threads_) t.join();
  }

  Server& server() { return *server_; }
  uint16_t port() const { return server_->port(); }

  StoreOptions storeOptions() const {
    StoreOptions o;
    o.host = "127.0.0.1";
    o.port = server_->port();
    return o;
  }

 private:
  boost::asio::io_context ioc_;
  std::unique_ptr<Server> server_;
  std::vector<std::thread> threads_;
};

// A ServerThread with `options` bound to ::1, or null (and a warning saying why) where this machine has no
// IPv6 loopback.
inline std::unique_ptr<ServerThread> ipv6LoopbackServer(ServerOptions options) {
  options.bind_address = "::1";
  try {
    return std::make_unique<ServerThread>(std::move(options));
  } catch (const hvd::NetworkError& e) {
    WARN("no IPv6 loopback here: " << e.what());
    return nullptr;
  }
}

}  // namespace hvd::rendezvous::testing
