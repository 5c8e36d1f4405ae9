// Sockets around the pure handler (handler.h): a Listener and one Session per connection, in the shape of
// Boost.Beast's async server example, with deadlines and limits on every read.
//
// Threading: the acceptor lives on its own strand, every session on its own strand, so the io_context may
// run on any number of threads. Sessions share only the KvState (one mutex) and the session registry
// (used by stop()).
#include "rendezvous/server.h"

#include <arpa/inet.h>
#include <linux/inet_diag.h>
#include <linux/netlink.h>
#include <linux/sock_diag.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <tuple>
#include <unordered_map>

#include <boost/asio/dispatch.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/beast/core/bind_handler.hpp>
#include <boost/beast/core/error.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/serializer.hpp>

#include "base/error.h"
#include "base/unique_fd.h"
#include "rendezvous/handler.h"
#include "rendezvous/http_io.h"
#include "rendezvous/status_page.h"

namespace hvd::rendezvous {

namespace {

class Session;

// Pause before accepting again after an accept error (e.g. EMFILE), so the loop does not spin.
constexpr std::chrono::milliseconds kAcceptRetryDelay{50};

std::string formatEndpoint(const net::ip::address& address, uint16_t port) {
  if (address.is_v6()) return detail::concat("[", address.to_string(), "]:", port);
  return detail::concat(address.to_string(), ":", port);
}

// IPv4-mapped IPv6 (a dual-stack listener's view of an IPv4 client) as the IPv4 address it is.
net::ip::address unmapped(const net::ip::address& address) {
  if (address.is_v6() && address.to_v6().is_v4_mapped()) {
    return net::ip::make_address_v4(net::ip::v4_mapped, address.to_v6());
  }
  return address;
}

// Read buffer capacity a connection keeps between requests (larger ones are released when empty).
constexpr size_t kKeptReadBuffer = 16 * 1024;

// Longest request target quoted in a TokenlessRejection (messages stay one short line).
constexpr size_t kQuotedTargetBytes = 200;

// How long the kernel may take to answer a socket-diagnostics query before the connection counts as
// "owner unknown". The answer is local and normally takes microseconds.
constexpr std::chrono::milliseconds kSockDiagTimeout{1000};

// Copies an address into inet_diag's 4 x 32-bit field (network byte order, as the kernel keeps it).
void putAddress(const net::ip::address& address, __be32 (&out)[4]) {
  std::memset(out, 0, sizeof out);
  if (address.is_v4()) {
    const auto bytes = address.to_v4().to_bytes();
    std::memcpy(out, bytes.data(), bytes.size());
  } else {
    const auto bytes = address.to_v6().to_bytes();
    std::memcpy(out, bytes.data(), bytes.size());
  }
}

// Whether inet_diag's address field (of a socket of `family`) holds `address`. An AF_INET6 socket
// connected to an IPv4-mapped address answers an AF_INET query with the mapped form.
bool sameAddress(uint8_t family, const __be32 (&field)[4], const net::ip::address& address) {
  __be32 expected[4];
  if (family == AF_INET6 && address.is_v4()) {
    putAddress(net::ip::make_address_v6(net::ip::v4_mapped, address.to_v4()), expected);
  } else {
    putAddress(address, expected);
  }
  return std::memcmp(field, expected, family == AF_INET ? 4 : sizeof expected) == 0;
}

// A response body that is a shared, immutable string: the answer to a multi-key fetch, which every waiter
// of the same key list sends from one buffer (Beast's string_body would copy it per response).
struct SharedStringBody {
  using value_type = std::shared_ptr<const std::string>;

  static std::uint64_t size(const value_type& body) { return body ? body->size() : 0; }

  class writer {
   public:
    using const_buffers_type = net::const_buffer;
    template <bool isRequest, class Fields>
    writer(const http::header<isRequest, Fields>&, const value_type& body) : body_(body) {}
    void init(error_code& ec) { ec = {}; }
    boost::optional<std::pair<const_buffers_type, bool>> get(error_code& ec) {
      ec = {};
      if (sent_ || !body_ || body_->empty()) return boost::none;
      sent_ = true;
      return {{net::const_buffer(body_->data(), body_->size()), false}};
    }

   private:
    value_type body_;  // a copy of the pointer: the writer must not depend on where Beast keeps the body
    bool sent_ = false;
  };
};

}  // namespace

std::string normalizeAddress(const std::string& address) {
  error_code ec;
  const auto parsed = net::ip::make_address(address, ec);
  return ec ? address : unmapped(parsed).to_string();
}

uint32_t peerSocketOwner(const std::string& local_address, uint16_t local_port,
                         const std::string& peer_address, uint16_t peer_port) {
  error_code ec;
  const auto local = unmapped(net::ip::make_address(local_address, ec));
  if (ec) throw NetworkError(detail::concat("socket owner: invalid local address '", local_address, "'"));
  const auto peer = unmapped(net::ip::make_address(peer_address, ec));
  if (ec) throw NetworkError(detail::concat("socket owner: invalid peer address '", peer_address, "'"));
  if (local.is_v4() != peer.is_v4()) {
    throw NetworkError(
        detail::concat("socket owner: address families differ (", local_address, ", ", peer_address, ")"));
  }
  const auto fail = [](const char* step, int err) {
    throw NetworkError(detail::concat("socket owner: NETLINK_SOCK_DIAG ", step, ": ", std::strerror(err),
                                      " (errno ", err, ")"));
  };
  UniqueFd fd(::socket(AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC, NETLINK_SOCK_DIAG));
  if (fd.get() < 0) fail("socket", errno);
  timeval tv{};
  tv.tv_sec = kSockDiagTimeout.count() / 1000;
  tv.tv_usec = (kSockDiagTimeout.count() % 1000) * 1000;
  ::setsockopt(fd.get(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);

  // The socket at the other end sends from (peer, peer_port) to (local, local_port): its 4-tuple is ours
  // reversed. An exact lookup (no NLM_F_DUMP) answers with that one socket or an error.
  struct {
    nlmsghdr header;
    inet_diag_req_v2 request;
  } message{};
  constexpr uint32_t kSequence = 1;
  message.header.nlmsg_len = sizeof message;
  message.header.nlmsg_type = SOCK_DIAG_BY_FAMILY;
  message.header.nlmsg_flags = NLM_F_REQUEST;
  message.header.nlmsg_seq = kSequence;
  message.request.sdiag_family = peer.is_v4() ? AF_INET : AF_INET6;
  message.request.sdiag_protocol = IPPROTO_TCP;
  message.request.idiag_states = ~0u;
  message.request.id.idiag_sport = htons(peer_port);
  message.request.id.idiag_dport = htons(local_port);
  putAddress(peer, message.request.id.idiag_src);
  putAddress(local, message.request.id.idiag_dst);
  message.request.id.idiag_cookie[0] = INET_DIAG_NOCOOKIE;
  message.request.id.idiag_cookie[1] = INET_DIAG_NOCOOKIE;
  sockaddr_nl kernel{};
  kernel.nl_family = AF_NETLINK;
  if (::sendto(fd.get(), &message, sizeof message, 0, reinterpret_cast<sockaddr*>(&kernel), sizeof kernel) <
      0) {
    fail("send", errno);
  }

  alignas(nlmsghdr) std::array<char, 8192> buffer;
  while (true) {
    sockaddr_nl from{};
    socklen_t from_len = sizeof from;
    const ssize_t n =
        ::recvfrom(fd.get(), buffer.data(), buffer.size(), 0, reinterpret_cast<sockaddr*>(&from), &from_len);
    if (n < 0) {
      if (errno == EINTR) continue;
      fail("receive", errno == EAGAIN ? ETIMEDOUT : errno);
    }
    if (from.nl_pid != 0) continue;  // only the kernel answers; ignore anything else
    int length = static_cast<int>(n);
    for (auto* h = reinterpret_cast<nlmsghdr*>(buffer.data()); NLMSG_OK(h, length);
         h = NLMSG_NEXT(h, length)) {
      if (h->nlmsg_seq != kSequence) continue;
      if (h->nlmsg_type == NLMSG_ERROR) {
        const auto* error = static_cast<const nlmsgerr*>(NLMSG_DATA(h));
        fail("lookup", error->error ? -error->error : ENOENT);
      }
      if (h->nlmsg_type != SOCK_DIAG_BY_FAMILY || h->nlmsg_len < NLMSG_LENGTH(sizeof(inet_diag_msg)))
        continue;
      const auto* answer = static_cast<const inet_diag_msg*>(NLMSG_DATA(h));
      // The kernel falls back to a listening socket when no connection matches; only the exact
      // connection counts, never a listener or a TIME_WAIT remnant (whose uid reads as 0).
      const bool exact = answer->id.idiag_sport == message.request.id.idiag_sport &&
                         answer->id.idiag_dport == message.request.id.idiag_dport &&
                         sameAddress(answer->idiag_family, answer->id.idiag_src, peer) &&
                         sameAddress(answer->idiag_family, answer->id.idiag_dst, local);
      if (!exact || answer->idiag_state == TCP_LISTEN || answer->idiag_state == TCP_TIME_WAIT) {
        fail("lookup", ENOENT);
      }
      return answer->idiag_uid;
    }
  }
}

// Everything the acceptor and the sessions share. Sessions hold it by shared_ptr, so it outlives the
// Server object until the last connection is gone.
struct ServerCore : std::enable_shared_from_this<ServerCore> {
  ServerCore(net::io_context& ioc, ServerOptions options)
      : ioc(ioc),
        state(std::move(options)),
        acceptor_strand(net::make_strand(ioc)),
        acceptor(acceptor_strand),
        status_acceptor(acceptor_strand) {}

  void listen();
  void accept(bool status);
  void onAccept(bool status, error_code ec, tcp::socket socket);
  void stop();

  net::io_context& ioc;
  KvState state;
  net::strand<net::io_context::executor_type> acceptor_strand;
  tcp::acceptor acceptor;
  tcp::acceptor status_acceptor;  // open only with ServerOptions::status_port
  std::string address;  // the bound address, as given (resolved) e.g. "127.0.0.1" or "::1"
  uint16_t port = 0;
  std::string status_address;
  std::optional<uint16_t> status_port;
  std::atomic<bool> stopped{false};

  std::mutex sessions_mutex;
  std::unordered_map<Session*, std::weak_ptr<Session>> sessions;

  std::mutex observer_mutex;
  std::function<void(const TokenlessRejection&)> tokenless_observer;

  void reportTokenless(const TokenlessRejection& rejection) {
    std::function<void(const TokenlessRejection&)> observer;
    {
      std::lock_guard<std::mutex> lock(observer_mutex);
      observer = tokenless_observer;
    }
    if (observer) observer(rejection);
  }
};

struct Server::Impl : ServerCore {
  using ServerCore::ServerCore;
};

namespace {

class Session : public std::enable_shared_from_this<Session> {
 public:
  // status: a connection to the status port (status_page.h), which never long-polls.
  Session(tcp::socket socket, std::shared_ptr<ServerCore> server, bool status)
      : server_(std::move(server)),
        status_(status),
        stream_(std::move(socket)),
        read_timer_(stream_.get_executor()),
        wait_timer_(stream_.get_executor()) {
    server_->state.connectionOpened();
  }
  ~Session() {
    server_->state.connectionClosed();
    std::lock_guard<std::mutex> lock(server_->sessions_mutex);
    server_->sessions.erase(this);
  }

  void start() {
    net::dispatch(stream_.get_executor(), [self = shared_from_this()] {
      self->learnPeer();
      self->read();
    });
  }

  // From any thread: closes the connection on the session's strand.
  void close() { net::post(stream_.get_executor(), beast::bind_front_handler(&Session::doClose, shared_from_this())); }

 private:
  const ServerOptions& options() const { return server_->state.options(); }

  // What every request of this connection is judged by, found once: the peer's address and, where a
  // request without the token could be accepted (loopback, a server that has a token and trusts local
  // peers), the owner of the peer's socket.
  void learnPeer() {
    error_code ec;
    const auto remote = stream_.socket().remote_endpoint(ec);
    if (ec) return;  // already gone: PeerInfo{} is trusted for nothing
    const auto address = unmapped(remote.address());
    peer_.address = address.to_string();
    peer_.port = remote.port();
    peer_.loopback = address.is_loopback();
    // The status port applies the same-user rule whenever there is a token (its page is this user's view).
    if (!peer_.loopback || !options().token || !(options().trust_local_peers || status_)) return;
    const auto local = stream_.socket().local_endpoint(ec);
    if (ec) return;
    try {
      peer_.uid = peerSocketOwner(local.address().to_string(), local.port(), peer_.address, peer_.port);
      peer_.same_user = *peer_.uid == static_cast<uint32_t>(::geteuid());
    } catch (const NetworkError& e) {
      peer_.owner_error = e.what();
    }
  }

  void read() {
    if (closed_) return;
    parser_.emplace();
    applyLimits(*parser_, options());
    // The whole request must arrive within read_timeout: a client that trickles bytes (slowloris) or
    // idles on a keep-alive connection is cut off. Our own timer rather than tcp_stream's expiry, which
    // closes the socket: a half-received request deserves a 408 first.
    stream_.expires_never();
    read_timed_out_ = false;
    read_timer_.expires_after(options().read_timeout);
    read_timer_.async_wait([self = shared_from_this()](error_code ec) {
      if (ec || self->closed_) return;
      self->read_timed_out_ = true;
      error_code ignored;
      self->stream_.socket().cancel(ignored);
    });
    http::async_read(stream_, buffer_, *parser_, beast::bind_front_handler(&Session::onRead, shared_from_this()));
  }

  void onRead(error_code ec, size_t) {
    read_timer_.cancel();
    if (closed_) return;
    if (ec) {
      const unsigned version = parser_->is_header_done() ? parser_->get().version() : 11;
      if (read_timed_out_) {
        // A request that had begun gets Horovod's 408; an idle keep-alive connection just closes.
        if (parser_->got_some() || buffer_.size() > 0) {
          sendError(http::status::request_timeout,
                    detail::concat("request not received whole within ", options().read_timeout.count(), " ms"),
                    version);
        } else {
          doClose();
        }
      } else if (auto answer = parseErrorResponse(ec, options(), version)) {
        send(std::move(*answer));
      } else {
        doClose();  // end of stream, reset, abort: nobody to answer
      }
      return;
    }
    request_ = parser_->release();
    // A large request (a multi-key wait's key list) leaves a large read buffer behind; with thousands of
    // connections that is most of the server's memory, so give it back when it is empty.
    if (buffer_.size() == 0 && buffer_.capacity() > kKeptReadBuffer) buffer_.shrink_to_fit();
    request_read_ = KvState::Clock::now();
    wait_deadline_.reset();
    wait_progress_ = 0;
    wait_set_.reset();
    process(true);
  }

  void process(bool allow_wait) {
    if (status_) {
      Response answer;
      try {
        answer = handleStatus(request_, server_->state.monitor(), options(), peer_);
      } catch (const std::exception& e) {
        answer = errorResponse(http::status::internal_server_error, std::string("internal error: ") + e.what(),
                               request_.version());
      }
      send(std::move(answer));
      return;
    }
    Outcome outcome;
    try {
      outcome = handleTakingBody(request_, server_->state, peer_, allow_wait, wait_progress_, wait_set_);
    } catch (const std::exception& e) {
      // A bug in the handler must cost one request, never the server every worker depends on.
      send(errorResponse(http::status::internal_server_error, std::string("internal error: ") + e.what(),
                         request_.version()));
      return;
    }
    if (outcome.token_missing && outcome.response) reportTokenless(outcome.response->result_int());
    if (outcome.response) {
      std::optional<double> seconds;  // nullopt: the request waited for a key
      if (!wait_deadline_) seconds = std::chrono::duration<double>(KvState::Clock::now() - request_read_).count();
      server_->state.monitor().request(std::string(request_.method_string()), outcome.response->result_int(),
                                       seconds);
      if (outcome.shared_body) {
        // The request (a multi-key fetch's key list, ~6 bytes per key) is answered: with thousands of
        // connections its body would otherwise stay until each one's next request.
        std::string().swap(request_.body());
        sendShared(std::move(*outcome.response), std::move(outcome.shared_body));
      } else {
        send(std::move(*outcome.response));
      }
      return;
    }
    // Long poll: park until the key is stored or the wait is over. No read is pending meanwhile: a
    // client that disconnects is noticed when the wait ends (bounded by ServerOptions::max_wait).
    if (!wait_deadline_) wait_deadline_ = KvState::Clock::now() + outcome.wait_for;
    wait_progress_ = outcome.wait_progress;
    wait_set_ = std::move(outcome.wait_set);
    if (wait_set_ && !request_.body().empty()) {
      // The keys are parsed: a parked request need not keep its body (thousands park at once).
      std::string().swap(request_.body());
    }
    std::weak_ptr<Session> weak = weak_from_this();
    auto id = server_->state.addWaiter(outcome.wait_scope, outcome.wait_key, [weak] {
      if (auto self = weak.lock()) {
        net::post(self->stream_.get_executor(), [self] { self->wait_timer_.cancel(); });
      }
    });
    if (!id) {  // stored between handle() and addWaiter()
      process(allow_wait);
      return;
    }
    waiter_id_ = id;
    stream_.expires_never();
    wait_timer_.expires_at(*wait_deadline_);
    wait_timer_.async_wait(beast::bind_front_handler(&Session::onWaitDone, shared_from_this()));
  }

  void onWaitDone(error_code) {
    if (waiter_id_) server_->state.cancelWaiter(*waiter_id_);
    waiter_id_.reset();
    if (closed_) return;
    process(KvState::Clock::now() < *wait_deadline_);
  }

  void reportTokenless(unsigned status) {
    TokenlessRejection rejection;
    rejection.peer = peer_;
    rejection.status = status;
    const std::string_view target(request_.target().data(),
                                  std::min<size_t>(request_.target().size(), kQuotedTargetBytes));
    rejection.request_line = detail::concat(request_.method_string(), " ", target,
                                            request_.target().size() > kQuotedTargetBytes ? "..." : "");
    try {
      server_->reportTokenless(rejection);
    } catch (const std::exception&) {
      // The observer's failure must not cost the connection its answer.
    }
  }

  void sendError(http::status status, const std::string& message, unsigned version) {
    send(errorResponse(status, message, version));
  }

  void send(Response response) {
    response_ = std::move(response);
    const bool close = response_.need_eof();
    serializer_.emplace(response_);
    beginWrite(*serializer_, close);
  }

  // A response whose body is shared with other responses (Outcome::shared_body); the header already
  // carries its Content-Length.
  void sendShared(Response response, std::shared_ptr<const std::string> body) {
    shared_response_.emplace(std::move(response.base()), std::move(body));
    const bool close = shared_response_->need_eof();
    shared_serializer_.emplace(*shared_response_);
    beginWrite(*shared_serializer_, close);
  }

  template <class Serializer>
  void beginWrite(Serializer& serializer, bool close) {
    write_deadline_ = std::chrono::steady_clock::now() + std::max(options().read_timeout, options().max_wait);
    writeSome(serializer, close);
  }

  // Writes the serialized response a piece at a time, each piece (what the socket takes) within
  // read_timeout: a client that stops reading is cut off, one that reads slowly is not (thousands of
  // ranks receiving large answers at once drain them at a fraction of the loopback's speed each). The
  // whole answer must go within the longer of read_timeout and max_wait (write_deadline_), so a client
  // that reads a byte now and then cannot hold its answer forever.
  template <class Serializer>
  void writeSome(Serializer& serializer, bool close) {
    stream_.expires_at(std::min(std::chrono::steady_clock::now() + options().read_timeout, write_deadline_));
    http::async_write_some(stream_, serializer,
                           [self = shared_from_this(), &serializer, close](error_code ec, size_t) {
                             if (!ec && !serializer.is_done()) return self->writeSome(serializer, close);
                             self->serializer_.reset();
                             self->shared_serializer_.reset();
                             self->shared_response_.reset();
                             if (ec || close) {
                               self->doClose();
                             } else {
                               self->read();
                             }
                           });
  }

  void doClose() {
    if (closed_) return;
    closed_ = true;
    read_timer_.cancel();
    wait_timer_.cancel();
    error_code ignored;
    stream_.socket().shutdown(tcp::socket::shutdown_send, ignored);
    stream_.socket().close(ignored);
  }

  std::shared_ptr<ServerCore> server_;
  const bool status_;
  beast::tcp_stream stream_;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  Request request_;
  KvState::Clock::time_point request_read_;
  Response response_;
  std::optional<http::response<SharedStringBody>> shared_response_;
  std::optional<http::response_serializer<http::string_body>> serializer_;
  std::optional<http::response_serializer<SharedStringBody>> shared_serializer_;
  std::chrono::steady_clock::time_point write_deadline_;
  net::steady_timer read_timer_;
  bool read_timed_out_ = false;
  net::steady_timer wait_timer_;
  std::optional<uint64_t> waiter_id_;
  std::optional<KvState::Clock::time_point> wait_deadline_;
  size_t wait_progress_ = 0;
  std::shared_ptr<const WaitSet> wait_set_;
  PeerInfo peer_;
  bool closed_ = false;
};

net::ip::address resolveBindAddress(net::io_context& ioc, const std::string& host, uint16_t port) {
  error_code ec;
  auto address = net::ip::make_address(host, ec);
  if (!ec) return address;
  tcp::resolver resolver(ioc);
  auto results = resolver.resolve(host, std::to_string(port), ec);
  if (ec || results.empty()) {
    throw NetworkError(detail::concat("cannot listen on ", host, ":", port, ": cannot resolve '", host,
                                      "': ", ec ? ec.message() : "no addresses"));
  }
  return results.begin()->endpoint().address();
}

}  // namespace

namespace {

// Opens, binds and listens; returns the bound address and port. Throws NetworkError naming address:port.
std::pair<std::string, uint16_t> bindAcceptor(net::io_context& ioc, tcp::acceptor& acceptor, const std::string& host,
                                              uint16_t port) {
  const auto ip = resolveBindAddress(ioc, host, port);
  const tcp::endpoint endpoint(ip, port);
  const std::string where = formatEndpoint(ip, port);
  error_code ec;
  auto fail = [&](const char* what) {
    throw NetworkError(detail::concat("cannot listen on ", where, ": ", what, ": ", ec.message(), " (errno ",
                                      ec.value(), ")"));
  };
  acceptor.open(endpoint.protocol(), ec);
  if (ec) fail("socket");
  // SO_REUSEADDR: a restarted daemon can bind while old connections sit in TIME_WAIT; on Linux it does
  // not allow two listeners on one port, so "port in use" is still reported.
  acceptor.set_option(net::socket_base::reuse_address(true), ec);
  if (ec) fail("setsockopt(SO_REUSEADDR)");
  acceptor.bind(endpoint, ec);
  if (ec) fail("bind");
  // The kernel's maximum backlog: thousands of workers connect at once (Horovod's 5 is a known cause of
  // failures at scale).
  acceptor.listen(net::socket_base::max_listen_connections, ec);
  if (ec) fail("listen");
  return {ip.to_string(), acceptor.local_endpoint().port()};
}

}  // namespace

void ServerCore::listen() {
  const ServerOptions& o = state.options();
  std::tie(address, port) = bindAcceptor(ioc, acceptor, o.bind_address, o.port);
  if (o.status_port) {
    try {
      std::tie(status_address, status_port) = bindAcceptor(ioc, status_acceptor, o.status_bind_address, *o.status_port);
    } catch (const NetworkError& e) {
      throw NetworkError(std::string("status port: ") + e.what());
    }
  }
}

void ServerCore::accept(bool status) {
  (status ? status_acceptor : acceptor)
      .async_accept(net::make_strand(ioc), beast::bind_front_handler(&ServerCore::onAccept, shared_from_this(), status));
}

void ServerCore::onAccept(bool status, error_code ec, tcp::socket socket) {
  if (stopped || !(status ? status_acceptor : acceptor).is_open()) return;
  if (ec) {
    // EMFILE and friends: the connection stays in the backlog; try again shortly.
    auto timer = std::make_shared<net::steady_timer>(acceptor_strand, kAcceptRetryDelay);
    timer->async_wait([self = shared_from_this(), timer, status](error_code wait_ec) {
      if (!wait_ec && !self->stopped) self->accept(status);
    });
    return;
  }
  if (state.connections() >= state.options().max_connections) {
    // A clear answer instead of a silent reset; the socket is fresh, so this tiny write cannot block.
    static const std::string kBusy =
        "HTTP/1.1 503 Service Unavailable\r\nContent-Length: 44\r\nConnection: close\r\n\r\n"
        "rendezvous server: too many open connections";
    error_code ignored;
    socket.non_blocking(true, ignored);
    socket.write_some(net::buffer(kBusy), ignored);
    socket.shutdown(tcp::socket::shutdown_send, ignored);
    socket.close(ignored);
  } else {
    auto session = std::make_shared<Session>(std::move(socket), shared_from_this(), status);
    {
      std::lock_guard<std::mutex> lock(sessions_mutex);
      sessions.emplace(session.get(), session);
    }
    session->start();
  }
  accept(status);
}

void ServerCore::stop() {
  if (stopped.exchange(true)) return;
  // Refuse new connections before returning: the close below runs later on the acceptor's strand
  // (closing here would race a pending async_accept on another thread, and waiting for the strand
  // would deadlock a caller on a single-threaded loop). shutdown() of the listening descriptor is a
  // kernel operation that leaves Asio's object untouched: new connects are refused at once.
  ::shutdown(acceptor.native_handle(), SHUT_RDWR);
  if (status_acceptor.is_open()) ::shutdown(status_acceptor.native_handle(), SHUT_RDWR);
  net::post(acceptor_strand, [self = shared_from_this()] {
    error_code ignored;
    self->acceptor.close(ignored);
    self->status_acceptor.close(ignored);
  });
  std::vector<std::shared_ptr<Session>> live;
  {
    std::lock_guard<std::mutex> lock(sessions_mutex);
    for (auto& [raw, weak] : sessions) {
      if (auto session = weak.lock()) live.push_back(std::move(session));
    }
  }
  for (auto& session : live) session->close();
}

Server::Server(net::io_context& ioc, ServerOptions options)
    : impl_(std::make_shared<Impl>(ioc, std::move(options))) {
  impl_->listen();
  net::post(impl_->acceptor_strand, [impl = impl_] {
    if (impl->stopped) return;
    impl->accept(false);
    if (impl->status_port) impl->accept(true);
  });
}

Server::~Server() { stop(); }

uint16_t Server::port() const { return impl_->port; }
const std::string& Server::address() const { return impl_->address; }
std::optional<uint16_t> Server::statusPort() const { return impl_->status_port; }
const std::string& Server::statusAddress() const { return impl_->status_address; }
Monitor& Server::monitor() { return impl_->state.monitor(); }
void Server::setScopeSizes(const std::map<std::string, int>& sizes) { impl_->state.setScopeSizes(sizes); }
std::map<std::string, ScopeStatus> Server::scopes() const { return impl_->state.scopes(); }
nlohmann::json Server::status() const { return impl_->state.status(); }
void Server::beginRound(ElasticRound round) { impl_->state.beginRound(std::move(round)); }
void Server::markStarted(const std::string& slot, uint64_t round) { impl_->state.markStarted(slot, round); }
std::optional<uint64_t> Server::lastRound(const std::string& slot) const { return impl_->state.lastRound(slot); }
void Server::onRoundRequest(std::function<void(const std::string& slot, uint64_t after)> observer) {
  impl_->state.onRoundRequest(std::move(observer));
}
void Server::onAllJoined(std::function<void(const std::string& scope)> observer) {
  impl_->state.onAllJoined(std::move(observer));
}
void Server::onTokenlessRejection(std::function<void(const TokenlessRejection&)> observer) {
  std::lock_guard<std::mutex> lock(impl_->observer_mutex);
  impl_->tokenless_observer = std::move(observer);
}
void Server::stop() { impl_->stop(); }

}  // namespace hvd::rendezvous
