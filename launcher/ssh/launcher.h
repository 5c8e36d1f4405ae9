// The ssh transport: hvd::launcher::Launcher over libssh2.
//
// How hvdrun uses it (launcher/launcher.h describes the interface):
//
//   auto ssh = hvd::launcher::ssh::makeLauncher(io, options.ssh);   // SshOptions from the command line
//   ssh->preflight(remote_hosts);        // connects to every host in parallel; throws LaunchError with
//                                        // one line per failing host; nothing has started yet
//   auto net = hvd::launcher::chooseNetwork(remote_hosts, interfaces);   // launcher/network.h; route to
//                                        // resolveTarget(host, options.ssh).hostname (ssh config HostName)
//   ssh->checkRendezvousReachable(remote_hosts, net.bind_address, port);   // a TCP connect from every host,
//                                        // made by the host's hvd-proxy, whose channel then stays open
//   for each remote rank: workers.push_back(ssh->start(spec, events));   // events on `io`
//   io.run();
//
// Which hosts: those for which hvd::launcher::isLocalHost(name) is false, or all of them when
// SshOptions::force_ssh is set. preflight and checkRendezvousReachable block (they run their own private
// event loop; call them before io.run(), not from a handler); start() never blocks.
//
// Connections: preflight's connections are kept and reused by start(). Each host gets one channel that
// runs hvd-proxy (ProxyOptions below), which starts all of that host's workers. Without a proxy, each
// worker has its own channel; one connection carries up to kMaxChannelsPerConnection of them (sshd's
// MaxSessions defaults to 10); more workers on one host open more connections, at most
// kMaxConcurrentHandshakesPerHost at a time (sshd's MaxStartups).
//
// Per host, in this order: HostSpec::user, else ~/.ssh/config User, else the local user; SshOptions::port
// (-p), else config Port, else 22; config HostName; keys: ssh-agent, SshOptions::identity_file (-i), config
// IdentityFile, and only when neither is given ~/.ssh/id_{ed25519,ecdsa,rsa}. Known hosts:
// SshOptions::known_hosts_file, else ~/.ssh/known_hosts, policy SshOptions::known_hosts.
#pragma once

#include <boost/asio/io_context.hpp>
#include <memory>

#include "launcher/launcher.h"
#include "launcher/options.h"
#include "launcher/ssh/session.h"

namespace hvd::launcher::ssh {

inline constexpr size_t kMaxChannelsPerConnection = 8;
// sshd drops new connections at random once MaxStartups (default 10:30:100) unauthenticated ones are
// pending; a burst of 32 handshakes to one host would lose some. Stay well below the threshold.
inline constexpr size_t kMaxConcurrentHandshakesPerHost = 4;

// hvd-proxy (launcher/ssh/proxy.h): one remote process per host starts all of that host's ranks over ONE
// exec channel, which also carries the reachability check. Without it, every rank has a channel of its
// own (launcher/ssh/remote.h) and the check one more: on hosts whose login shell is slow to start
// (~/.bashrc), a 32-rank job on 8 hosts pays 40 shell starts instead of 8.
struct ProxyOptions {
  // false: one channel per rank everywhere (HVD_SSH_PROXY=never).
  bool enabled = true;
  // Absolute path of hvd-proxy on the remote hosts; empty: next to the running executable (a shared
  // file system or the same install prefix everywhere, as MPICH's hydra_pmi_proxy). A host where it is
  // missing falls back to one channel per rank, with a one-line note on stderr.
  std::string path;
  // Where rank 0's forwarded stdin is read from (the job: hvdrun's stdin).
  int stdin_fd = 0;

  // HVD_SSH_PROXY=auto|never (default auto; anything else is a UsageError naming the value) and
  // HVD_SSH_PROXY_PATH (default: empty, see `path`).
  static ProxyOptions fromEnvironment();
};

// The remote program to start: `proxy.path`, or hvd-proxy next to /proc/self/exe.
std::string proxyPath(const ProxyOptions& proxy);

// With ProxyOptions::fromEnvironment(), overridden by SshOptions::proxy (--ssh-proxy); throws UsageError for
// a bad HVD_SSH_PROXY*.
std::unique_ptr<Launcher> makeLauncher(boost::asio::io_context& io, const SshOptions& options);
std::unique_ptr<Launcher> makeLauncher(boost::asio::io_context& io, const SshOptions& options,
                                       const ProxyOptions& proxy);

// Where `host` is reached and as whom, after ~/.ssh/config (SshOptions::config_file) and the flags.
// Throws UsageError for a malformed config file (file:line).
Target resolveTarget(const HostSpec& host, const SshOptions& options);

}  // namespace hvd::launcher::ssh
