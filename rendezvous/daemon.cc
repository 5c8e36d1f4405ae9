#include "rendezvous/daemon.h"

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <charconv>
#include <climits>
#include <cstdio>
#include <fcntl.h>
#include <iostream>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/program_options.hpp>

#include "base/error.h"
#include "base/parent_death.h"
#include "rendezvous/server.h"
#include "rendezvous/token.h"

namespace hvd::rendezvous {

namespace po = boost::program_options;

namespace {

constexpr const char* kUsage =
    R"usage(Usage: hvd-rendezvous [--bind ADDR] [--port P] (--token-file F | --no-token | --trust-local-peers) [options]
       hvd-rendezvous --detach [--bind ADDR] [--port P] [--token-file F | ...] [options]

The hvdrun rendezvous server as a daemon, for workers started by other tools (srun, mpirun, scripts).
It prints one line when ready:   hvd-rendezvous listening on ADDR:PORT
and serves until SIGINT or SIGTERM. With --status-port it also serves the job's status page (workers as
their reports arrive, waits, throughput; /status.json, /metrics) and prints a second line:
                                 hvd-rendezvous status page on http://ADDR:PORT/

Workers find it through the environment:
  HVD_RENDEZVOUS=HOST:PORT               (or HOROVOD_GLOO_RENDEZVOUS_ADDR=HOST HOROVOD_GLOO_RENDEZVOUS_PORT=PORT)
  HVD_RENDEZVOUS_TOKEN=<contents of F>   (not needed with --no-token, nor from this user's own local
                                          processes with --trust-local-peers)

--detach (for job scripts): starts the server in the background and returns once it listens, printing
shell lines for eval:  export HVD_RENDEZVOUS='HOST:PORT'  export HVD_RENDEZVOUS_TOKEN='...'
export HVD_RENDEZVOUS_PID=N  (without a token option it makes up a token). HOST is the bind address, or
this machine's host name when bound to every interface (0.0.0.0, ::).

HVD_PARENT_DEATH_SIGNAL=SIG:PID in its own environment (set by hvd's Python drivers): it ends with the
thread that started it (SIG then), or at once when PID ended before it could set that; removed at start.

Exit codes: 0 stopped by SIGINT/SIGTERM (--detach: the server listens); 1 cannot listen on ADDR:PORT,
            cannot write the address file, or another failure; 2 bad command line or HVD_PARENT_DEATH_SIGNAL.

Examples:
  eval "$(hvd-rendezvous --detach --bind 0.0.0.0)"; srun ./train; kill $HVD_RENDEZVOUS_PID
  head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' > /tmp/job.token
  hvd-rendezvous --bind 10.0.0.1 --port 29500 --token-file /tmp/job.token --address-file /tmp/job.addr

)usage";

struct DaemonOptions {
  ServerOptions server;
  std::map<std::string, int> scope_sizes;
  unsigned threads = 2;
  std::string address_file;  // "" : none
  bool detach = false;
  bool token_for_workers = false;  // the token workers need (not --trust-local-peers' secret for nobody)
};

int parsePositive(const std::string& text, const std::string& what) {
  int value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size() || value <= 0) {
    throw UsageError(detail::concat("invalid ", what, " '", text, "': expected a positive integer"));
  }
  return value;
}

// Returns nullopt when --help was printed.
std::optional<DaemonOptions> parse(int argc, char** argv) {
  po::options_description desc("Options");
  std::string port_text = "0";
  std::string bind = "127.0.0.1";
  std::string token_file;
  std::vector<std::string> scope_sizes;
  std::string threads_text = "2";
  std::string max_connections = std::to_string(ServerOptions{}.max_connections);
  std::string read_timeout = std::to_string(ServerOptions{}.read_timeout.count());
  std::string address_file;
  std::string status_port_text;
  std::string status_address = "127.0.0.1";
  desc.add_options()("help,h", "print this help and exit")(
      "bind", po::value(&bind), "address to listen on (default 127.0.0.1; 0.0.0.0 or :: for all interfaces)")(
      "port", po::value(&port_text), "TCP port (default 0: an ephemeral port, printed when ready)")(
      "token-file", po::value(&token_file),
      "file whose first line is the job token; workers send it (HVD_RENDEZVOUS_TOKEN)")(
      "no-token", "accept requests without a token from anyone (for Horovod's own workers on other hosts)")(
      "trust-local-peers",
      "also accept requests without the token on loopback connections from processes of this daemon's own "
      "user (Horovod's own workers on this machine); without --token-file only those are served")(
      "scope-size", po::value(&scope_sizes)->composing(),
      "SCOPE=N: scope whose N members each DELETE their key when done (Horovod's finalize), e.g. global=64; "
      "repeatable")("threads", po::value(&threads_text), "threads serving requests (default 2)")(
      "max-connections", po::value(&max_connections), "open connections at most (default 16384)")(
      "read-timeout-ms", po::value(&read_timeout), "a request must arrive whole within this (default 10000)")(
      "address-file", po::value(&address_file),
      "once listening, write HOST:PORT and a newline to this file (whole: written aside, then renamed); "
      "removed when the daemon stops")(
      "status-port", po::value(&status_port_text),
      "serve the status page (HTML, /status.json, /metrics) on this TCP port (0: an ephemeral port, printed "
      "when ready); workers appear as their reports arrive")(
      "status-address", po::value(&status_address),
      "address the status port listens on (default 127.0.0.1; reach it through an ssh tunnel)")(
      "detach",
      "serve in the background: return once listening, printing export lines for a shell's eval "
      "(HVD_RENDEZVOUS, HVD_RENDEZVOUS_TOKEN, HVD_RENDEZVOUS_PID); makes up a token when no token option is given");
  po::variables_map vm;
  try {
    po::store(po::command_line_parser(argc, argv).options(desc).run(), vm);
    po::notify(vm);
  } catch (const po::error& e) {
    throw UsageError(e.what());
  }
  if (vm.count("help")) {
    std::cout << kUsage << "\n" << desc;
    return std::nullopt;
  }
  DaemonOptions out;
  out.server.bind_address = bind;
  int port = -1;
  auto [end, ec] = std::from_chars(port_text.data(), port_text.data() + port_text.size(), port);
  if (ec != std::errc() || end != port_text.data() + port_text.size() || port < 0 || port > 65535) {
    throw UsageError(detail::concat("invalid --port '", port_text, "': expected 0..65535 (0: an ephemeral port)"));
  }
  out.server.port = static_cast<uint16_t>(port);
  if (vm.count("status-port")) {
    int status_port = -1;
    auto [s_end, s_ec] = std::from_chars(status_port_text.data(), status_port_text.data() + status_port_text.size(),
                                         status_port);
    if (s_ec != std::errc() || s_end != status_port_text.data() + status_port_text.size() || status_port < 0 ||
        status_port > 65535) {
      throw UsageError(detail::concat("invalid --status-port '", status_port_text,
                                      "': expected 0..65535 (0: an ephemeral port)"));
    }
    out.server.status_port = static_cast<uint16_t>(status_port);
  } else if (vm.count("status-address")) {
    throw UsageError(detail::concat("--status-address '", status_address, "' needs --status-port"));
  }
  if (status_address.empty()) throw UsageError("invalid --status-address '': expected an address");
  out.server.status_bind_address = status_address;
  if (vm.count("token-file") && vm.count("no-token")) {
    throw UsageError("--token-file and --no-token exclude each other");
  }
  if (vm.count("trust-local-peers") && vm.count("no-token")) {
    throw UsageError(
        "--trust-local-peers and --no-token exclude each other (--no-token already accepts everyone)");
  }
  out.server.trust_local_peers = vm.count("trust-local-peers") > 0;
  out.detach = vm.count("detach") > 0;
  if (vm.count("address-file")) {
    if (address_file.empty()) throw UsageError("invalid --address-file '': expected a file name");
    out.address_file = address_file;
  }
  if (vm.count("token-file")) {
    out.server.token = readTokenFile(token_file);
    out.token_for_workers = true;
  } else if (out.server.trust_local_peers) {
    // A secret nobody is given: only this user's local processes, which need none, can use the server.
    out.server.token = generateToken();
  } else if (out.detach && !vm.count("no-token")) {
    // Printed for the script to export: the workers get it from there.
    out.server.token = generateToken();
    out.token_for_workers = true;
  } else if (!vm.count("no-token")) {
    throw UsageError(detail::concat("a token is required: give --token-file FILE (workers read it from ",
                                    kTokenEnv, "), --trust-local-peers, --no-token, or --detach (which makes "
                                    "one up and prints it)"));
  }
  for (const auto& item : scope_sizes) {
    const auto eq = item.rfind('=');
    if (eq == std::string::npos || eq == 0) {
      throw UsageError(detail::concat("invalid --scope-size '", item, "': expected SCOPE=N"));
    }
    out.scope_sizes[item.substr(0, eq)] = parsePositive(item.substr(eq + 1), "--scope-size '" + item + "' size");
  }
  out.threads = static_cast<unsigned>(std::min(parsePositive(threads_text, "--threads"), 64));
  out.server.max_connections = static_cast<size_t>(parsePositive(max_connections, "--max-connections"));
  out.server.read_timeout = std::chrono::milliseconds(parsePositive(read_timeout, "--read-timeout-ms"));
  return out;
}

// The address workers are given: the bound one, or this machine's host name for a wildcard bind (0.0.0.0
// and :: are no address to connect to from another host). IPv6 literals in brackets.
std::string advertisedAddress(const std::string& bound, uint16_t port) {
  std::string host = bound;
  if (bound == "0.0.0.0" || bound == "::") {
    char name[HOST_NAME_MAX + 1] = {};
    if (::gethostname(name, sizeof(name) - 1) != 0 || !name[0]) {
      throw NetworkError(detail::concat("bound to ", bound, " but cannot read this machine's host name to give "
                                        "workers (", errnoText(errno), "): use --bind with an address"));
    }
    host = name;
  }
  const bool v6 = host.find(':') != std::string::npos;
  return detail::concat(v6 ? "[" : "", host, v6 ? "]" : "", ":", port);
}

// Writes `text` to `path` whole: into a file beside it, then renamed over it, so a script that waits for
// the file never reads half of it.
void writeWhole(const std::string& path, const std::string& text) {
  const std::string tmp = detail::concat(path, ".tmp.", ::getpid());
  std::FILE* f = std::fopen(tmp.c_str(), "w");
  if (!f) throw Error(detail::concat("cannot write --address-file '", path, "': ", errnoText(errno)));
  const bool written = std::fwrite(text.data(), 1, text.size(), f) == text.size();
  const int write_errno = errno;
  if (std::fclose(f) != 0 || !written) {
    const int err = written ? errno : write_errno;
    ::unlink(tmp.c_str());
    throw Error(detail::concat("cannot write --address-file '", path, "': ", errnoText(err)));
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    throw Error(detail::concat("cannot write --address-file '", path, "': ", errnoText(err)));
  }
}

// A value for a POSIX shell, in single quotes.
std::string shellQuote(const std::string& v) {
  std::string out = "'";
  for (char c : v) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

// --detach, in the parent: waits for the server process to say it listens (the export lines on the pipe)
// and prints them, or for it to fail, and returns the exit code.
int waitForDetached(pid_t child, int ready_fd) {
  std::string lines;
  char buf[1024];
  for (;;) {
    const ssize_t n = ::read(ready_fd, buf, sizeof(buf));
    if (n > 0) {
      lines.append(buf, static_cast<size_t>(n));
    } else if (n == 0 || errno != EINTR) {
      break;
    }
  }
  ::close(ready_fd);
  if (!lines.empty()) {
    std::cout << lines << std::flush;
    return kDaemonExitOk;
  }
  // The server process failed before it listened; it has said why on stderr.
  int status = 0;
  while (::waitpid(child, &status, 0) < 0 && errno == EINTR) {
  }
  if (WIFEXITED(status) && WEXITSTATUS(status) != kDaemonExitOk) return WEXITSTATUS(status);
  std::cerr << "hvd-rendezvous: the server process ended before it listened\n";
  return kDaemonExitFailure;
}

}  // namespace

int daemonMain(int argc, char** argv) {
  std::optional<DaemonOptions> options;
  try {
    applyParentDeathSignal();
    options = parse(argc, argv);
  } catch (const UsageError& e) {
    std::cerr << "hvd-rendezvous: " << e.what() << " (see --help)\n";
    return kDaemonExitUsage;
  } catch (const Error& e) {
    std::cerr << "hvd-rendezvous: " << e.what() << "\n";
    return kDaemonExitFailure;
  }
  if (!options) return kDaemonExitOk;
  int ready_fd = -1;  // --detach: where the server process says that it listens
  if (options->detach) {
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC) != 0) {
      std::cerr << "hvd-rendezvous: cannot create a pipe for --detach: " << errnoText(errno) << "\n";
      return kDaemonExitFailure;
    }
    std::cout.flush();
    const pid_t child = ::fork();
    if (child < 0) {
      std::cerr << "hvd-rendezvous: cannot fork for --detach: " << errnoText(errno) << "\n";
      return kDaemonExitFailure;
    }
    if (child > 0) {
      ::close(fds[1]);
      return waitForDetached(child, fds[0]);
    }
    ::close(fds[0]);
    ready_fd = fds[1];
    // A write to the pipe after the starting process died must fail, not kill the server.
    ::signal(SIGPIPE, SIG_IGN);
    // The caller captures stdout ($(...)) until every writer closes it: the server keeps none of it, nor
    // stdin. stderr stays for the messages of a failure.
    const int null = ::open("/dev/null", O_RDWR | O_CLOEXEC);
    if (null >= 0) {
      ::dup2(null, 0);
      ::dup2(null, 1);
      ::close(null);
    }
  }
  bool address_file_written = false;
  try {
    boost::asio::io_context ioc(static_cast<int>(options->threads));
    Server server(ioc, options->server);
    if (!options->scope_sizes.empty()) server.setScopeSizes(options->scope_sizes);
    boost::asio::signal_set signals(ioc, SIGINT, SIGTERM);
    signals.async_wait([&](const boost::system::error_code& ec, int) {
      if (ec) return;
      server.stop();
      ioc.stop();
    });
    const std::string& address = server.address();
    const bool v6 = address.find(':') != std::string::npos;
    if (!options->detach) {
      std::cout << "hvd-rendezvous listening on " << (v6 ? "[" : "") << address << (v6 ? "]" : "") << ":"
                << server.port() << std::endl;
    }
    if (const auto status_port = server.statusPort()) {
      // Where the page is: on stdout beside the listening line, or on stderr with --detach (whose stdout is
      // the export lines a shell evals).
      const std::string& status_address = server.statusAddress();
      const bool status_v6 = status_address.find(':') != std::string::npos;
      const std::string line = detail::concat("hvd-rendezvous status page on http://", status_v6 ? "[" : "",
                                              status_address, status_v6 ? "]" : "", ":", *status_port, "/");
      (options->detach ? std::cerr : std::cout) << line << std::endl;
    }
    const std::string advertised = advertisedAddress(address, server.port());
    if (!options->address_file.empty()) {
      writeWhole(options->address_file, advertised + "\n");
      address_file_written = true;
    }
    if (ready_fd >= 0) {
      std::string lines = "export HVD_RENDEZVOUS=" + shellQuote(advertised) + "\n";
      if (options->token_for_workers) {
        lines += detail::concat("export ", kTokenEnv, "=", shellQuote(*options->server.token), "\n");
      }
      lines += detail::concat("export HVD_RENDEZVOUS_PID=", ::getpid(), "\n");
      const bool sent = ::write(ready_fd, lines.data(), lines.size()) == static_cast<ssize_t>(lines.size());
      ::close(ready_fd);
      ready_fd = -1;
      if (!sent) throw Error("--detach: the starting process is gone");
    }
    std::vector<std::thread> threads;
    for (unsigned i = 1; i < options->threads; ++i) threads.emplace_back([&] { ioc.run(); });
    ioc.run();
    for (auto& t : threads) t.join();
    if (address_file_written) ::unlink(options->address_file.c_str());
    return kDaemonExitOk;
  } catch (const std::exception& e) {
    if (address_file_written) ::unlink(options->address_file.c_str());
    std::cerr << "hvd-rendezvous: " << e.what() << "\n";
    return kDaemonExitFailure;
  }
}

}  // namespace hvd::rendezvous
