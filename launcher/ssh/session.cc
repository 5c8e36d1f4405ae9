#include "launcher/ssh/session.h"

#include <libssh2.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <mutex>
#include <sstream>

#include "launcher/ssh/remote.h"
#include "base/error.h"

namespace hvd::launcher::ssh {

namespace asio = boost::asio;
using asio::ip::tcp;

namespace {

void initLibssh2() {
  static std::once_flag once;
  std::call_once(once, [] {
    const int rc = libssh2_init(0);
    if (rc != 0) throw LaunchError("libssh2_init failed with code " + std::to_string(rc));
  });
}

std::string base64NoPad(const unsigned char* data, size_t n) {
  static const char* kAlphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  for (size_t i = 0; i < n; i += 3) {
    uint32_t v = uint32_t(data[i]) << 16;
    if (i + 1 < n) v |= uint32_t(data[i + 1]) << 8;
    if (i + 2 < n) v |= data[i + 2];
    out += kAlphabet[(v >> 18) & 63];
    out += kAlphabet[(v >> 12) & 63];
    if (i + 1 < n) out += kAlphabet[(v >> 6) & 63];
    if (i + 2 < n) out += kAlphabet[v & 63];
  }
  return out;
}

struct KeyType {
  int hostkey_type;  // LIBSSH2_HOSTKEY_TYPE_*, as the server's key reports it
  const char* name;  // its name in known_hosts
  int knownhost_mask;
};

constexpr KeyType kKeyTypes[] = {
    {LIBSSH2_HOSTKEY_TYPE_RSA, "ssh-rsa", LIBSSH2_KNOWNHOST_KEY_SSHRSA},
    {LIBSSH2_HOSTKEY_TYPE_DSS, "ssh-dss", LIBSSH2_KNOWNHOST_KEY_SSHDSS},
    {LIBSSH2_HOSTKEY_TYPE_ECDSA_256, "ecdsa-sha2-nistp256", LIBSSH2_KNOWNHOST_KEY_ECDSA_256},
    {LIBSSH2_HOSTKEY_TYPE_ECDSA_384, "ecdsa-sha2-nistp384", LIBSSH2_KNOWNHOST_KEY_ECDSA_384},
    {LIBSSH2_HOSTKEY_TYPE_ECDSA_521, "ecdsa-sha2-nistp521", LIBSSH2_KNOWNHOST_KEY_ECDSA_521},
    {LIBSSH2_HOSTKEY_TYPE_ED25519, "ssh-ed25519", LIBSSH2_KNOWNHOST_KEY_ED25519},
};

KeyType keyType(int hostkey_type) {
  for (const KeyType& type : kKeyTypes) {
    if (type.hostkey_type == hostkey_type) return type;
  }
  return {hostkey_type, "unknown", LIBSSH2_KNOWNHOST_KEY_UNKNOWN};
}

// known_hosts spelling of a host: "host" on port 22, "[host]:port" otherwise.
std::string knownHostsName(const std::string& host, uint16_t port) {
  return port == 22 ? host : "[" + host + "]:" + std::to_string(port);
}

// Host key algorithms, OpenSSH's order, with the types known_hosts already holds for this host first,
// so a host with several keys is checked against the one we know (not reported as unknown).
std::string hostKeyPreference(const std::string& known_hosts_file, const std::string& name) {
  static const std::vector<std::string> kDefault = {"ssh-ed25519",
                                                    "ecdsa-sha2-nistp256",
                                                    "ecdsa-sha2-nistp384",
                                                    "ecdsa-sha2-nistp521",
                                                    "rsa-sha2-512",
                                                    "rsa-sha2-256",
                                                    "ssh-rsa"};
  std::vector<std::string> known;
  std::ifstream in(known_hosts_file);
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream words(line);
    std::string hosts, type;
    if (!(words >> hosts >> type) || hosts.empty() || hosts[0] == '#' || hosts[0] == '@') continue;
    std::istringstream names(hosts);
    std::string one;
    bool match = false;
    while (std::getline(names, one, ',')) match = match || one == name;
    if (!match) continue;
    if (type == "ssh-rsa") {
      known.push_back("rsa-sha2-512");
      known.push_back("rsa-sha2-256");
    }
    known.push_back(type);
  }
  std::string out;
  auto add = [&](const std::string& t) {
    if (("," + out + ",").find("," + t + ",") != std::string::npos) return;
    out += (out.empty() ? "" : ",") + t;
  };
  for (const auto& t : known) {
    if (std::find(kDefault.begin(), kDefault.end(), t) != kDefault.end()) add(t);
  }
  for (const auto& t : kDefault) add(t);
  return out;
}

bool isSessionError(int rc) {
  switch (rc) {
    case LIBSSH2_ERROR_SOCKET_SEND:
    case LIBSSH2_ERROR_SOCKET_RECV:
    case LIBSSH2_ERROR_SOCKET_DISCONNECT:
    case LIBSSH2_ERROR_SOCKET_TIMEOUT:
    case LIBSSH2_ERROR_TIMEOUT:
    case LIBSSH2_ERROR_DECRYPT:
    case LIBSSH2_ERROR_PROTO:
    case LIBSSH2_ERROR_KEX_FAILURE:
    case LIBSSH2_ERROR_BAD_USE:
    case LIBSSH2_ERROR_ALLOC:
      return true;
    default:
      return false;
  }
}

int signalNumber(const std::string& name) {
  static const std::pair<const char*, int> kSignals[] = {
      {"ABRT", SIGABRT}, {"ALRM", SIGALRM}, {"FPE", SIGFPE},   {"HUP", SIGHUP},   {"ILL", SIGILL},
      {"INT", SIGINT},   {"KILL", SIGKILL}, {"PIPE", SIGPIPE}, {"QUIT", SIGQUIT}, {"SEGV", SIGSEGV},
      {"TERM", SIGTERM}, {"USR1", SIGUSR1}, {"USR2", SIGUSR2}, {"BUS", SIGBUS},   {"TRAP", SIGTRAP},
      {"SYS", SIGSYS},   {"XCPU", SIGXCPU}, {"XFSZ", SIGXFSZ}};
  for (const auto& [n, s] : kSignals) {
    if (name == n) return s;
  }
  return 0;
}

// Shared between a connect coroutine and its deadline timer's handler, which may outlive the frame.
struct Deadline {
  bool expired = false;
  std::string phase = "connecting";
};

}  // namespace

std::string Target::describe() const {
  std::string out = user + "@" + (hostname.find(':') != std::string::npos ? "[" + hostname + "]" : hostname) +
                    ":" + std::to_string(port);
  if (alias != hostname) out += " (" + alias + ")";
  return out;
}

// ---------------------------------------------------------------------------------------------------------
// Channel

void Channel::write(std::string_view bytes) {
  if (state_ == State::kDone || close_stdin_) return;
  out_.append(bytes);
  if (auto s = session_.lock()) s->schedule();
}

void Channel::closeStdin() {
  if (state_ == State::kDone) return;
  close_stdin_ = true;
  if (auto s = session_.lock()) s->schedule();
}

// ---------------------------------------------------------------------------------------------------------
// Session: connecting

Session::Session(asio::any_io_executor executor, Target target)
    : socket_(executor), target_(std::move(target)) {}

Session::~Session() {
  *alive_ = false;
  for (auto& ch : channels_) {
    ch->state_ = Channel::State::kDone;
    ch->handler_ = nullptr;
  }
  if (session_) {
    // A polite disconnect if the socket takes it at once; then make every further send fail immediately
    // (a dead network must not block the destructor) and free. Closing the connection is also what ends
    // the remote workers: their watchdogs see EOF.
    libssh2_session_disconnect(session_, "hvdrun done");
    boost::system::error_code ignored;
    socket_.shutdown(tcp::socket::shutdown_both, ignored);
    libssh2_session_set_blocking(session_, 1);
    libssh2_session_free(session_);
  }
}

std::string Session::lastError() const {
  char* msg = nullptr;
  int len = 0;
  libssh2_session_last_error(session_, &msg, &len, 0);
  return msg && len > 0 ? std::string(msg, static_cast<size_t>(len)) : std::string("unknown libssh2 error");
}

void Session::fail(const std::string& cause) const {
  throw LaunchError("ssh " + target_.describe() + ": " + cause);
}

asio::awaitable<void> Session::waitSocket() {
  const int dir = libssh2_session_block_directions(session_);
  if (dir & LIBSSH2_SESSION_BLOCK_OUTBOUND) {
    co_await socket_.async_wait(tcp::socket::wait_write, asio::use_awaitable);
  } else {
    co_await socket_.async_wait(tcp::socket::wait_read, asio::use_awaitable);
  }
}

asio::awaitable<std::shared_ptr<Session>> Session::connect(Target target, ConnectOptions options) {
  initLibssh2();
  auto executor = co_await asio::this_coro::executor;
  std::shared_ptr<Session> self(new Session(executor, std::move(target)));
  auto deadline = std::make_shared<Deadline>();
  asio::steady_timer timer(executor);
  timer.expires_after(options.timeout);
  std::weak_ptr<Session> weak = self;
  timer.async_wait([deadline, weak](const boost::system::error_code& ec) {
    if (ec) return;
    deadline->expired = true;
    if (auto s = weak.lock()) {
      boost::system::error_code ignored;
      s->socket_.close(ignored);  // every pending wait fails with operation_aborted
    }
  });
  const auto seconds = std::chrono::duration<double>(options.timeout).count();
  auto timedOut = [&] {
    std::ostringstream msg;
    msg << "timed out after " << seconds << "s (" << deadline->phase << ")";
    return msg.str();
  };

  try {
    tcp::resolver resolver(executor);
    boost::system::error_code ec;
    deadline->phase = "resolving";
    auto endpoints =
        co_await resolver.async_resolve(self->target_.hostname, std::to_string(self->target_.port),
                                        asio::redirect_error(asio::use_awaitable, ec));
    if (deadline->expired) self->fail(timedOut());
    if (ec) self->fail("cannot resolve host name '" + self->target_.hostname + "': " + ec.message());
    deadline->phase = "connecting";
    co_await asio::async_connect(self->socket_, endpoints, asio::redirect_error(asio::use_awaitable, ec));
    if (deadline->expired) self->fail(timedOut());
    if (ec == asio::error::connection_refused)
      self->fail("connection refused (is sshd running on port " + std::to_string(self->target_.port) + "?)");
    if (ec == asio::error::host_unreachable || ec == asio::error::network_unreachable) {
      self->fail("unreachable (" + ec.message() + ")");
    }
    if (ec) self->fail("cannot connect: " + ec.message());
    self->socket_.set_option(tcp::no_delay(true));
    // A silently dead network (no FIN, no RST): the heartbeats hvdrun writes every second stay
    // unacknowledged, and the kernel aborts the connection after kDeadConnection instead of retrying
    // for ~15 minutes; the workers on that host are then reported lost.
    const unsigned user_timeout_ms = static_cast<unsigned>(kDeadConnection.count());
    ::setsockopt(self->socket_.native_handle(), IPPROTO_TCP, TCP_USER_TIMEOUT, &user_timeout_ms,
                 sizeof user_timeout_ms);
    deadline->phase = "ssh handshake";
    co_await self->handshake(options);
    deadline->phase = "checking the host key";
    self->checkHostKey(options);
    deadline->phase = "authenticating";
    co_await self->authenticate(options);
  } catch (const boost::system::system_error& e) {
    if (deadline->expired) self->fail(timedOut());
    self->fail(deadline->phase + " failed: " + e.code().message());
  } catch (const LaunchError&) {
    if (deadline->expired) self->fail(timedOut());
    throw;
  }
  timer.cancel();
  co_return self;
}

asio::awaitable<void> Session::handshake(const ConnectOptions& options) {
  session_ = libssh2_session_init();
  if (!session_) fail("cannot create a libssh2 session");
  libssh2_session_set_blocking(session_, 0);
  const std::string prefs =
      hostKeyPreference(options.known_hosts_file, knownHostsName(target_.hostname, target_.port));
  libssh2_session_method_pref(session_, LIBSSH2_METHOD_HOSTKEY, prefs.c_str());
  for (;;) {
    const int rc = libssh2_session_handshake(session_, socket_.native_handle());
    if (rc == 0) break;
    if (rc != LIBSSH2_ERROR_EAGAIN) {
      fail("ssh handshake failed: " + lastError() +
           (rc == LIBSSH2_ERROR_SOCKET_DISCONNECT || rc == LIBSSH2_ERROR_SOCKET_RECV
                ? " (the server closed the connection: not an ssh server, or sshd's MaxStartups throttling)"
                : ""));
    }
    co_await waitSocket();
  }
}

void Session::checkHostKey(const ConnectOptions& options) {
  if (options.known_hosts == KnownHostsPolicy::kOff) return;
  size_t key_len = 0;
  int key_type = 0;
  const char* key = libssh2_session_hostkey(session_, &key_len, &key_type);
  if (!key) fail("the server sent no host key: " + lastError());
  const KeyType type = keyType(key_type);
  const auto* hash =
      reinterpret_cast<const unsigned char*>(libssh2_hostkey_hash(session_, LIBSSH2_HOSTKEY_HASH_SHA256));
  const std::string fingerprint =
      std::string(type.name) + " SHA256:" + (hash ? base64NoPad(hash, 32) : std::string("?"));
  const std::string name = knownHostsName(target_.hostname, target_.port);
  const std::string& file = options.known_hosts_file;

  LIBSSH2_KNOWNHOSTS* known = libssh2_knownhost_init(session_);
  if (!known) fail("cannot allocate the known_hosts table");
  struct Free {
    LIBSSH2_KNOWNHOSTS* k;
    ~Free() { libssh2_knownhost_free(k); }
  } free_known{known};
  // Line by line: libssh2_knownhost_readfile stops at the first line it cannot parse (a key type it does
  // not know, @cert-authority), which would hide every later entry.
  {
    std::ifstream in(file);
    std::string line;
    while (std::getline(in, line)) {
      if (line.empty() || line[0] == '#') continue;
      libssh2_knownhost_readline(known, line.c_str(), line.size(), LIBSSH2_KNOWNHOST_FILE_OPENSSH);
    }
  }
  libssh2_knownhost* found = nullptr;
  const int check = libssh2_knownhost_checkp(
      known, target_.hostname.c_str(), target_.port, key, key_len,
      LIBSSH2_KNOWNHOST_TYPE_PLAIN | LIBSSH2_KNOWNHOST_KEYENC_RAW | type.knownhost_mask, &found);
  switch (check) {
    case LIBSSH2_KNOWNHOST_CHECK_MATCH:
      return;
    case LIBSSH2_KNOWNHOST_CHECK_MISMATCH:
      fail("host key mismatch: the server presents " + fingerprint + " but " + file + " holds a different " +
           type.name + " key for " + name +
           " (possible man-in-the-middle; if the host was reinstalled, remove the old key with: ssh-keygen "
           "-R '" +
           name + "' -f " + file + ")");
    case LIBSSH2_KNOWNHOST_CHECK_NOTFOUND:
      break;
    default:
      fail("cannot check the host key against " + file + ": " + lastError());
  }
  if (options.known_hosts == KnownHostsPolicy::kStrict) {
    fail("unknown host key " + fingerprint + ": " + name + " is not in " + file +
         " and host key checking is strict (add it, e.g. ssh-keyscan -p " + std::to_string(target_.port) +
         " " + target_.hostname + " >> " + file + ")");
  }
  libssh2_knownhost* added = nullptr;
  const std::string comment = "added by hvdrun";
  if (libssh2_knownhost_addc(
          known, name.c_str(), nullptr, key, key_len, comment.c_str(), comment.size(),
          LIBSSH2_KNOWNHOST_TYPE_PLAIN | LIBSSH2_KNOWNHOST_KEYENC_RAW | type.knownhost_mask, &added) != 0) {
    fail("cannot record the host key: " + lastError());
  }
  std::vector<char> line(8192);
  size_t line_len = 0;
  if (libssh2_knownhost_writeline(known, added, line.data(), line.size(), &line_len,
                                  LIBSSH2_KNOWNHOST_FILE_OPENSSH) != 0) {
    fail("cannot format the host key line: " + lastError());
  }
  // Append, never rewrite: the file may hold lines libssh2 cannot parse, and they must survive.
  std::error_code fs_ec;
  std::filesystem::create_directories(std::filesystem::path(file).parent_path(), fs_ec);
  std::ofstream out(file, std::ios::app);
  out.write(line.data(), static_cast<std::streamsize>(line_len));
  if (!out) fail("cannot append the new host key to " + file + ": " + errnoText(errno));
  out.close();
  ::chmod(file.c_str(), 0600);
  std::cerr << "hvdrun: added host key " << fingerprint << " for " << name << " to " << file << "\n";
}

asio::awaitable<void> Session::authenticate(const ConnectOptions& options) {
  const std::string& user = target_.user;
  const char* methods = nullptr;
  for (;;) {
    methods = libssh2_userauth_list(session_, user.c_str(), static_cast<unsigned>(user.size()));
    if (methods || libssh2_userauth_authenticated(session_)) break;
    if (libssh2_session_last_errno(session_) != LIBSSH2_ERROR_EAGAIN) {
      fail("authentication failed for user " + user + ": cannot list methods: " + lastError());
    }
    co_await waitSocket();
  }
  if (!methods) co_return;  // the server accepted "none"
  const std::string allowed = methods;
  if (("," + allowed + ",").find(",publickey,") == std::string::npos) {
    fail("authentication failed for user " + user + ": the server allows only " + allowed +
         ", hvdrun uses public keys (ssh-agent, -i, ~/.ssh/id_*)");
  }
  std::vector<std::string> tried;

  const char* agent_sock = std::getenv("SSH_AUTH_SOCK");
  if (options.use_agent && agent_sock && *agent_sock) {
    LIBSSH2_AGENT* agent = libssh2_agent_init(session_);
    struct Free {
      LIBSSH2_AGENT* a;
      ~Free() {
        if (a) {
          libssh2_agent_disconnect(a);
          libssh2_agent_free(a);
        }
      }
    } free_agent{agent};
    if (!agent || libssh2_agent_connect(agent) != 0) {
      tried.push_back(std::string("ssh-agent (cannot connect to ") + agent_sock + ")");
    } else if (libssh2_agent_list_identities(agent) != 0) {
      tried.push_back("ssh-agent (cannot list keys)");
    } else {
      int offered = 0;
      libssh2_agent_publickey* identity = nullptr;
      libssh2_agent_publickey* prev = nullptr;
      while (libssh2_agent_get_identity(agent, &identity, prev) == 0) {
        prev = identity;
        ++offered;
        int rc;
        while ((rc = libssh2_agent_userauth(agent, user.c_str(), identity)) == LIBSSH2_ERROR_EAGAIN) {
          co_await waitSocket();
        }
        if (rc == 0) co_return;
      }
      tried.push_back("ssh-agent (" + std::to_string(offered) + " key" + (offered == 1 ? "" : "s") +
                      " rejected)");
    }
  } else {
    tried.push_back("ssh-agent (not running)");
  }

  std::vector<std::string> files = target_.identity_files;
  const bool defaults = files.empty();
  if (defaults) {
    for (const char* name : {"id_ed25519", "id_ecdsa", "id_rsa"})
      files.push_back(options.home + "/.ssh/" + name);
  }
  for (const auto& file : files) {
    if (::access(file.c_str(), F_OK) != 0) {
      if (!defaults) tried.push_back(file + " (missing)");
      continue;
    }
    int rc;
    while ((rc = libssh2_userauth_publickey_fromfile_ex(session_, user.c_str(),
                                                        static_cast<unsigned>(user.size()), nullptr,
                                                        file.c_str(), nullptr)) == LIBSSH2_ERROR_EAGAIN) {
      co_await waitSocket();
    }
    if (rc == 0) co_return;
    if (rc == LIBSSH2_ERROR_FILE)
      tried.push_back(file + " (unreadable or passphrase-protected; use ssh-agent)");
    else if (isSessionError(rc))
      fail("connection lost while authenticating: " + lastError());
    else
      tried.push_back(file + " (rejected)");
  }
  if (defaults && tried.size() == 1)
    tried.push_back("no key in " + options.home + "/.ssh/id_{ed25519,ecdsa,rsa}");
  std::string list;
  for (const auto& t : tried) list += (list.empty() ? "" : ", ") + t;
  fail("authentication failed for user " + user + " (tried: " + list + ")");
}

// ---------------------------------------------------------------------------------------------------------
// Session: channels and the pump

size_t Session::openChannels() const {
  size_t n = 0;
  for (const auto& ch : channels_) n += ch->state_ != Channel::State::kDone;
  return n;
}

void Session::rebind(asio::io_context& io) {
  boost::system::error_code ec;
  const bool v6 = socket_.local_endpoint(ec).address().is_v6();
  const int fd = socket_.release();
  socket_ = tcp::socket(io, v6 ? tcp::v6() : tcp::v4(), fd);
  // Waits pending on the old loop never complete; forget them and their timer.
  *alive_ = false;
  alive_ = std::make_shared<bool>(true);
  read_armed_ = write_armed_ = heartbeat_armed_ = scheduled_ = false;
  heartbeat_timer_.reset();
  // Whatever arrived meanwhile is read, and the waits and the heartbeat are armed, on the new loop.
  if (!channels_.empty()) schedule();
}

std::shared_ptr<Channel> Session::exec(std::string command, std::string input, ChannelHandler* handler) {
  auto ch = std::make_shared<Channel>();
  ch->session_ = weak_from_this();
  ch->handler_ = handler;
  ch->command_ = std::move(command);
  ch->out_ = std::move(input);
  channels_.push_back(ch);
  if (!error_.empty()) {
    finish(*ch, ChannelEnd{{}, {}, {}, error_});
  } else {
    schedule();
  }
  return ch;
}

void Session::schedule() {
  if (scheduled_) return;
  scheduled_ = true;
  asio::post(socket_.get_executor(), [weak = weak_from_this(), alive = alive_] {
    auto self = weak.lock();
    if (!self || !*alive) return;
    self->scheduled_ = false;
    self->service();
  });
}

void Session::finish(Channel& ch, ChannelEnd end) {
  if (ch.channel_) {
    // Best effort, non-blocking; an EAGAIN here leaves libssh2 to free it with the session.
    if (libssh2_channel_free(ch.channel_) == 0) ch.channel_ = nullptr;
  }
  ch.state_ = Channel::State::kDone;
  if (blocked_channel_ == &ch) blocked_channel_ = nullptr;
  if (auto* h = std::exchange(ch.handler_, nullptr)) h->onEnd(end);
}

void Session::breakSession(const std::string& why) {
  if (error_.empty()) error_ = "connection to " + target_.describe() + " lost: " + why;
  blocked_channel_ = nullptr;
  // Copy: handlers may start new channels (they fail at once on a broken session).
  auto channels = channels_;
  for (auto& ch : channels) {
    if (ch->state_ != Channel::State::kDone) {
      ch->channel_ = nullptr;  // freed with the session; libssh2 cannot talk over this connection anymore
      finish(*ch, ChannelEnd{{}, {}, {}, error_});
    }
  }
}

int Session::run(Channel& ch, Op op) {
  char buf[32768];
  switch (op) {
    case Op::kOpen: {
      ch.channel_ = libssh2_channel_open_session(session_);
      return ch.channel_ ? 0 : libssh2_session_last_errno(session_);
    }
    case Op::kExec:
      return libssh2_channel_exec(ch.channel_, ch.command_.c_str());
    case Op::kWrite: {
      const auto n = libssh2_channel_write(ch.channel_, ch.out_.data(), ch.out_.size());
      if (n > 0) ch.out_.erase(0, static_cast<size_t>(n));
      return static_cast<int>(n);
    }
    case Op::kEof:
      return libssh2_channel_send_eof(ch.channel_);
    case Op::kRead:
    case Op::kReadStderr: {
      const int stream_id = op == Op::kRead ? 0 : SSH_EXTENDED_DATA_STDERR;
      const auto n = libssh2_channel_read_ex(ch.channel_, stream_id, buf, sizeof buf);
      if (n > 0 && ch.handler_) {
        ch.handler_->onData(op == Op::kRead ? Stream::kStdout : Stream::kStderr,
                            std::string_view(buf, static_cast<size_t>(n)));
      }
      return static_cast<int>(n);
    }
    case Op::kWaitClosed:
      return libssh2_channel_wait_closed(ch.channel_);
    case Op::kFree: {
      const int rc = libssh2_channel_free(ch.channel_);
      if (rc == 0) ch.channel_ = nullptr;
      return rc;
    }
  }
  return LIBSSH2_ERROR_INVAL;
}

bool Session::step(Channel& ch) {
  using State = Channel::State;
  // Runs one libssh2 call; on EAGAIN with the outbound direction blocked, libssh2 holds a half-sent
  // packet and only the same call may continue it: remember which.
  bool again = false;
  auto call = [&](Op op) -> int {
    const int rc = run(ch, op);
    again = rc == LIBSSH2_ERROR_EAGAIN;
    if (again && (libssh2_session_block_directions(session_) & LIBSSH2_SESSION_BLOCK_OUTBOUND)) {
      blocked_channel_ = &ch;
      blocked_op_ = op;
    } else if (blocked_channel_ == &ch && blocked_op_ == op) {
      blocked_channel_ = nullptr;
    }
    return rc;
  };
  auto failed = [&](int rc, const char* what) {
    if (isSessionError(rc)) {
      breakSession(lastError());
    } else {
      finish(ch,
             ChannelEnd{
                 {}, {}, {}, std::string(what) + " on " + target_.describe() + " failed: " + lastError()});
    }
    return true;
  };

  // One call that, once done, moves the channel to `next`.
  auto advance = [&](Op op, const char* what, State next) {
    const int rc = call(op);
    if (again) return false;
    if (rc != 0) return failed(rc, what);
    ch.state_ = next;
    return true;
  };

  switch (ch.state_) {
    case State::kOpening:
      return advance(Op::kOpen, "opening a channel", State::kExec);
    case State::kExec:
      return advance(Op::kExec, "starting the remote command", State::kRunning);
    case State::kRunning: {
      // Writes before reads, except that a call libssh2 left half-done goes first.
      std::vector<Op> ops = {Op::kWrite, Op::kEof, Op::kRead, Op::kReadStderr};
      if (blocked_channel_ == &ch)
        std::rotate(ops.begin(), std::find(ops.begin(), ops.end(), blocked_op_), ops.end());
      bool progress = false;
      for (Op op : ops) {
        if (op == Op::kWrite && ch.out_.empty()) continue;
        if (op == Op::kEof && (!ch.out_.empty() || !ch.close_stdin_ || ch.stdin_closed_)) continue;
        int rc;
        do {
          rc = call(op);
          progress |= rc > 0 || (op == Op::kEof && rc == 0);
          if (op == Op::kEof && rc == 0) ch.stdin_closed_ = true;
        } while (rc > 0 && (op == Op::kRead || op == Op::kReadStderr));
        if (blocked_channel_ == &ch) return progress;
        if (rc < 0 && !again) return failed(rc, "talking to the remote command");
      }
      if (libssh2_channel_eof(ch.channel_)) {
        ch.state_ = State::kDraining;
        progress = true;
      }
      return progress;
    }
    case State::kDraining: {
      const int rc = call(Op::kWaitClosed);
      if (again) return false;
      if (rc != 0) return failed(rc, "waiting for the remote command to end");
      ChannelEnd end;
      char* signame = nullptr;
      size_t signame_len = 0;
      libssh2_channel_get_exit_signal(ch.channel_, &signame, &signame_len, nullptr, nullptr, nullptr,
                                      nullptr);
      if (signame) {
        end.signal_name.assign(signame, signame_len);
        end.exit_signal = signalNumber(end.signal_name);
        libssh2_free(session_, signame);
      } else {
        end.exit_code = libssh2_channel_get_exit_status(ch.channel_);
      }
      ch.state_ = State::kClosing;
      // Report now: freeing the channel is bookkeeping the job need not wait for.
      if (auto* h = std::exchange(ch.handler_, nullptr)) h->onEnd(end);
      return true;
    }
    case State::kClosing: {
      const int rc = call(Op::kFree);
      if (again) return false;
      ch.channel_ = nullptr;
      ch.state_ = State::kDone;
      if (rc != 0 && isSessionError(rc)) breakSession(lastError());
      return true;
    }
    case State::kDone:
      return false;
  }
  return false;
}

void Session::service() {
  for (bool progress = true; progress && error_.empty();) {
    progress = false;
    if (blocked_channel_) {
      // Only the call libssh2 left half-done may run; if the socket still cannot take it, wait.
      progress = step(*blocked_channel_);
      if (blocked_channel_) break;
      continue;
    }
    auto channels = channels_;  // a handler may add channels while we iterate
    for (auto& ch : channels) {
      if (ch->state_ == Channel::State::kDone) continue;
      progress |= step(*ch);
      if (blocked_channel_ || !error_.empty()) break;
    }
  }
  channels_.remove_if([](const auto& ch) { return ch->state_ == Channel::State::kDone; });
  armWaits();
}

void Session::armWaits() {
  if (!error_.empty() || channels_.empty()) return;
  if (!read_armed_) armSocketWait(tcp::socket::wait_read, &Session::read_armed_);
  if (!write_armed_ && (libssh2_session_block_directions(session_) & LIBSSH2_SESSION_BLOCK_OUTBOUND)) {
    armSocketWait(tcp::socket::wait_write, &Session::write_armed_);
  }
  bool want_heartbeat = false;
  for (const auto& ch : channels_)
    want_heartbeat |= !ch->heartbeat_.empty() && ch->state_ == Channel::State::kRunning;
  if (want_heartbeat && !heartbeat_armed_) {
    if (!heartbeat_timer_) heartbeat_timer_ = std::make_unique<asio::steady_timer>(socket_.get_executor());
    heartbeat_armed_ = true;
    heartbeat_timer_->expires_after(kHeartbeatInterval);
    auto weak = weak_from_this();
    heartbeat_timer_->async_wait([weak, alive = alive_](const boost::system::error_code& ec) {
      auto self = weak.lock();
      if (!self || !*alive || ec) return;
      self->heartbeat_armed_ = false;
      self->onHeartbeat();
    });
  }
}

void Session::armSocketWait(tcp::socket::wait_type wait, bool Session::*armed) {
  this->*armed = true;
  auto weak = weak_from_this();
  socket_.async_wait(wait, [weak, alive = alive_, armed](const boost::system::error_code& ec) {
    auto self = weak.lock();
    if (!self || !*alive) return;
    (*self).*armed = false;
    if (ec) {
      self->breakSession(ec.message());
      return;
    }
    self->service();
  });
}

void Session::onHeartbeat() {
  for (auto& ch : channels_) {
    if (!ch->heartbeat_.empty() && ch->state_ == Channel::State::kRunning && !ch->close_stdin_)
      ch->out_ += ch->heartbeat_;
  }
  service();
}

}  // namespace hvd::launcher::ssh
