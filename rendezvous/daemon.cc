#include "rendezvous/daemon.h"

#include <algorithm>
#include <charconv>
#include <iostream>
#include <thread>

#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/program_options.hpp>

#include "rendezvous/error.h"
#include "rendezvous/server.h"
#include "rendezvous/token.h"

namespace hvd::rendezvous {

namespace po = boost::program_options;

namespace {

constexpr const char* kUsage =
    R"(Usage: hvd-rendezvous [--bind ADDR] [--port P] (--token-file F | --no-token | --trust-local-peers) [options]

The hvdrun rendezvous server as a daemon, for workers started by other tools (srun, mpirun, scripts).
It prints one line when ready:   hvd-rendezvous listening on ADDR:PORT
and serves until SIGINT or SIGTERM.

Workers find it through the environment:
  HOROVOD_GLOO_RENDEZVOUS_ADDR=ADDR  HOROVOD_GLOO_RENDEZVOUS_PORT=PORT
  HVD_RENDEZVOUS_TOKEN=<contents of F>   (not needed with --no-token, nor from this user's own local
                                          processes with --trust-local-peers)

Exit codes: 0 stopped by SIGINT/SIGTERM; 1 cannot listen on ADDR:PORT (or another failure);
            2 bad command line.

Example:
  head -c 32 /dev/urandom | xxd -p -c 64 > /tmp/job.token
  hvd-rendezvous --bind 10.0.0.1 --port 29500 --token-file /tmp/job.token --scope-size global=64

)";

struct DaemonOptions {
  ServerOptions server;
  std::map<std::string, int> scope_sizes;
  unsigned threads = 2;
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
      "read-timeout-ms", po::value(&read_timeout), "a request must arrive whole within this (default 10000)");
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
  if (vm.count("token-file") && vm.count("no-token")) {
    throw UsageError("--token-file and --no-token exclude each other");
  }
  if (vm.count("trust-local-peers") && vm.count("no-token")) {
    throw UsageError(
        "--trust-local-peers and --no-token exclude each other (--no-token already accepts everyone)");
  }
  out.server.trust_local_peers = vm.count("trust-local-peers") > 0;
  if (vm.count("token-file")) {
    out.server.token = readTokenFile(token_file);
  } else if (out.server.trust_local_peers) {
    // A secret nobody is given: only this user's local processes, which need none, can use the server.
    out.server.token = generateToken();
  } else if (!vm.count("no-token")) {
    throw UsageError(detail::concat("a token is required: give --token-file FILE (workers read it from ",
                                    kTokenEnv, "), --trust-local-peers or --no-token"));
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

}  // namespace

int daemonMain(int argc, char** argv) {
  std::optional<DaemonOptions> options;
  try {
    options = parse(argc, argv);
  } catch (const UsageError& e) {
    std::cerr << "hvd-rendezvous: " << e.what() << " (see --help)\n";
    return kDaemonExitUsage;
  }
  if (!options) return kDaemonExitOk;
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
    std::cout << "hvd-rendezvous listening on " << (v6 ? "[" : "") << address << (v6 ? "]" : "") << ":"
              << server.port() << std::endl;
    std::vector<std::thread> threads;
    for (unsigned i = 1; i < options->threads; ++i) threads.emplace_back([&] { ioc.run(); });
    ioc.run();
    for (auto& t : threads) t.join();
    return kDaemonExitOk;
  } catch (const std::exception& e) {
    std::cerr << "hvd-rendezvous: " << e.what() << "\n";
    return kDaemonExitFailure;
  }
}

}  // namespace hvd::rendezvous
