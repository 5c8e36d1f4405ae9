// Requests without the token, judged by who owns the other end of the connection: real loopback sockets,
// real client processes, one of them running as another user (setpriv --reuid nobody). Horovod's own
// workers send no token; a server that trusts local peers must serve them when they run as the server's
// user, and refuse the same bytes from anyone else. Exits 77 (SKIPPED) when not root: changing uid needs it.
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <vector>

#include "base/error.h"
#include "rendezvous/token.h"
#include "tests/common/files.h"
#include "tests/rendezvous/local_peers.h"
#include "tests/rendezvous/raw_client.h"
#include "tests/rendezvous/test_server.h"

using namespace hvd::rendezvous;
using namespace hvd::rendezvous::testing;

namespace {

constexpr uint32_t kNobody = 65534;

// Exactly what Horovod's C++ worker client (HTTPRequest) sends: HTTP/1.1, Host without port,
// Content-Length always, no token.
std::string horovodRequest(const std::string& method, const std::string& path, const std::string& body = {}) {
  return method + " " + path +
         " HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
}

std::string withToken(const std::string& request, const std::string& token) {
  const auto end = request.find("\r\n");
  return request.substr(0, end + 2) + kTokenHeader + ": " + token + request.substr(end);
}

// The test's scratch directory, readable and searchable by everyone (the other user's client runs
// from it): a copy of the client binary and the request files.
class Scratch {
 public:
  Scratch() {
    dir_ = hvd::test::makeTempDir("/tmp/hvd_peer_uid.");
    ::chmod(dir_.c_str(), 0755);
    const char* build = std::getenv("HVD_BUILD_DIR");
    REQUIRE(build);
    client_ = dir_ + "/rendezvous_raw_request";
    std::filesystem::copy_file(std::string(build) + "/tests/rendezvous/rendezvous_raw_request", client_);
    ::chmod(client_.c_str(), 0755);
  }
  ~Scratch() {
    std::error_code ignored;
    std::filesystem::remove_all(dir_, ignored);
  }

  // Runs the client as this user (uid nullopt) or, through setpriv, as nobody; returns the status code
  // it printed, 0 when none.
  int send(const std::string& address, uint16_t port, const std::string& request, bool as_nobody) {
    const std::string file = dir_ + "/request." + std::to_string(next_++);
    {
      std::ofstream out(file, std::ios::binary);
      out << request;
    }
    ::chmod(file.c_str(), 0644);
    std::string command = as_nobody ? "setpriv --reuid nobody --regid nogroup --clear-groups " : "";
    command += client_ + " " + address + " " + std::to_string(port) + " --status-only < " + file + " 2>&1";
    FILE* pipe = ::popen(command.c_str(), "r");
    REQUIRE(pipe);
    std::string output;
    char buf[256];
    while (size_t n = std::fread(buf, 1, sizeof buf, pipe)) output.append(buf, n);
    const int rc = ::pclose(pipe);
    INFO(command << " -> " << output);
    REQUIRE(WIFEXITED(rc));
    REQUIRE(WEXITSTATUS(rc) == 0);
    return std::atoi(output.c_str());
  }

 private:
  std::string dir_;
  std::string client_;
  int next_ = 0;
};

// Collects what Server::onTokenlessRejection reports.
struct Rejections {
  std::mutex mutex;
  std::vector<TokenlessRejection> seen;
  void attach(Server& server) {
    server.onTokenlessRejection([this](const TokenlessRejection& r) {
      std::lock_guard<std::mutex> lock(mutex);
      seen.push_back(r);
    });
  }
  std::vector<TokenlessRejection> take() {
    std::lock_guard<std::mutex> lock(mutex);
    return std::move(seen);
  }
};

struct RootCheck {
  RootCheck() {
    if (::geteuid() != 0) {
      std::printf(
          "SKIPPED: not root; running a client as another user (setpriv --reuid nobody) needs root\n");
      std::exit(77);
    }
  }
} root_check;

}  // namespace

TEST_CASE("peer uid: a trusting server serves Horovod's tokenless bytes from its own user only",
          "[peer_uid]") {
  const ServerOptions options = trustingLocalPeers(generateToken());
  ServerThread server(options);
  server.server().setScopeSizes({{"global", 2}});
  Rejections rejections;
  rejections.attach(server.server());
  Scratch scratch;
  const uint16_t port = server.port();

  // This user, from another process: Horovod's PUT, GET, and HTTP/1.0 forms.
  CHECK(scratch.send("127.0.0.1", port, horovodRequest("PUT", "/global/0", std::string("ab\0cd", 5)),
                     false) == 200);
  CHECK(scratch.send("127.0.0.1", port, horovodRequest("GET", "/global/0"), false) == 200);
  CHECK(scratch.send("127.0.0.1", port, "GET /global/0 HTTP/1.0\r\n\r\n", false) == 200);
  CHECK(scratch.send("127.0.0.1", port, "PUT /global/1 HTTP/1.0\r\nContent-Length: 2\r\n\r\nv1", false) ==
        200);
  CHECK(scratch.send("127.0.0.1", port, horovodRequest("GET", "/global/2"), false) == 404);
  CHECK(rejections.take().empty());

  // Another user, the same bytes: 403, nothing stored or read.
  CHECK(scratch.send("127.0.0.1", port, horovodRequest("GET", "/global/0"), true) == 403);
  CHECK(scratch.send("127.0.0.1", port, "GET /global/0 HTTP/1.0\r\n\r\n", true) == 403);
  CHECK(scratch.send("127.0.0.1", port, horovodRequest("PUT", "/global/9", "evil"), true) == 403);
  CHECK(scratch.send("127.0.0.1", port, horovodRequest("DELETE", "/global/0"), true) == 403);
  CHECK(scratch.send("127.0.0.1", port, horovodRequest("GET", "/global/9"), false) == 404);
  CHECK(scratch.send("127.0.0.1", port, horovodRequest("GET", "/global/0"), false) == 200);  // not finalized
  const auto seen = rejections.take();
  REQUIRE(seen.size() == 4);
  for (const auto& r : seen) {
    CHECK(r.status == 403);
    CHECK(r.peer.address == "127.0.0.1");
    CHECK(r.peer.loopback);
    CHECK(r.peer.uid == std::optional<uint32_t>(kNobody));
    CHECK_FALSE(r.peer.same_user);
  }
  CHECK(seen[0].request_line == "GET /global/0");
  CHECK(seen[2].request_line == "PUT /global/9");

  // The token still works for everyone; a wrong one is 403 for everyone.
  for (bool as_nobody : {false, true}) {
    CHECK(scratch.send("127.0.0.1", port, withToken(horovodRequest("GET", "/global/0"), *options.token),
                       as_nobody) == 200);
    CHECK(scratch.send("127.0.0.1", port, withToken(horovodRequest("GET", "/global/0"), "wrong"),
                       as_nobody) == 403);
  }
  CHECK(rejections.take().empty());  // wrong tokens are not "missing token" reports
}

TEST_CASE("peer uid: a server that does not trust local peers wants the token from everyone", "[peer_uid]") {
  ServerOptions options;
  options.token = generateToken();
  ServerThread server(options);
  Rejections rejections;
  rejections.attach(server.server());
  Scratch scratch;
  for (bool as_nobody : {false, true}) {
    CHECK(scratch.send("127.0.0.1", server.port(), horovodRequest("GET", "/global/0"), as_nobody) == 401);
    CHECK(scratch.send("127.0.0.1", server.port(),
                       withToken(horovodRequest("PUT", "/global/0", "v"), *options.token), as_nobody) == 200);
    CHECK(scratch.send("127.0.0.1", server.port(), withToken(horovodRequest("GET", "/global/0"), "wrong"),
                       as_nobody) == 403);
  }
  const auto seen = rejections.take();
  REQUIRE(seen.size() == 2);
  for (const auto& r : seen) {
    CHECK(r.status == 401);
    CHECK(r.peer.loopback);
    CHECK_FALSE(r.peer.uid.has_value());  // not asked: nothing depends on it
  }
}

TEST_CASE("peer uid: IPv6 loopback is judged the same way", "[peer_uid]") {
  const auto server = ipv6LoopbackServer(trustingLocalPeers(generateToken()));
  if (!server) return;
  Scratch scratch;
  CHECK(scratch.send("::1", server->port(), horovodRequest("PUT", "/global/0", "v6"), false) == 200);
  CHECK(scratch.send("::1", server->port(), horovodRequest("GET", "/global/0"), true) == 403);
  CHECK(scratch.send("::1", server->port(), horovodRequest("GET", "/global/0"), false) == 200);
}
