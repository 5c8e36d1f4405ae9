// Option structs the command line fills and the launchers read.
//
// Plain data with in-class defaults. The precedence flag > environment > config file > default
// is applied in exactly one place, launcher/cli.cc; everything downstream reads these structs only.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "base/enum_names.h"

namespace hvd::launcher {

// How host keys are checked against known_hosts.
enum class KnownHostsPolicy {
  kStrict,     // unknown or changed key: refuse
  kAcceptNew,  // unknown key: add it; changed key: refuse, showing the fingerprint (default)
  kOff,        // no check (tests only)
};

// Everything the ssh transport needs from the command line. Filled by launcher/cli.cc, consumed by
// hvd::launcher::ssh::makeLauncher (launcher/ssh/launcher.h).
struct SshOptions {
  static constexpr std::chrono::milliseconds kDefaultConnectTimeout{10000};  // horovodrun: ConnectTimeout=10

  std::optional<uint16_t> port;                                 // -p/--ssh-port; unset: ~/.ssh/config or 22
  std::optional<std::string> identity_file;                     // -i/--ssh-identity-file
  KnownHostsPolicy known_hosts = KnownHostsPolicy::kAcceptNew;  // --ssh-known-hosts=strict|accept-new|off
  std::optional<std::string> known_hosts_file;                  // unset: ~/.ssh/known_hosts
  std::optional<std::string> config_file;                       // unset: ~/.ssh/config
  // Start even hosts that are this machine through ssh (tests run a real sshd on loopback).
  bool force_ssh = false;                                              // --ssh-force
  // --ssh-proxy=auto|never: one hvd-proxy per host (launcher/ssh/proxy.h) or one channel per rank.
  // Unset: HVD_SSH_PROXY, then auto.
  std::optional<bool> proxy;
  std::chrono::milliseconds connect_timeout = kDefaultConnectTimeout;  // --ssh-connect-timeout SECONDS
};

// Which transport starts the ranks (--launcher).
enum class LauncherKind {
  kAuto,   // srun inside a Slurm allocation whose nodes are the job's hosts, unless they are all this
           // machine; otherwise this machine's hosts by fork/exec and the others over ssh
  kLocal,  // fork/exec; every host must be this machine
  kSsh,    // ssh for every host, this machine's too (--ssh-force)
  kSlurm,  // one srun step starting hvd-proxy on every host (launcher/slurm/launcher.h)
  kAgent,  // a program of the user's starts hvd-proxy for each rank (--launcher-agent; launcher/agent/launcher.h)
};

// --launcher's spellings, for parsing the flag and printing a kind.
inline constexpr EnumName<LauncherKind> kLauncherKindNames[] = {{LauncherKind::kAuto, "auto"},
                                                                {LauncherKind::kLocal, "local"},
                                                                {LauncherKind::kSsh, "ssh"},
                                                                {LauncherKind::kSlurm, "slurm"},
                                                                {LauncherKind::kAgent, "agent"}};
static_assert(namesEvery(kLauncherKindNames, LauncherKind::kAuto, LauncherKind::kAgent));

inline const char* toString(LauncherKind kind) { return nameOf(kLauncherKindNames, kind, "?"); }

}  // namespace hvd::launcher
