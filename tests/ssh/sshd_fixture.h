// Real sshd servers for the ssh tests, without touching the user's ~/.ssh (sshd -D with its own host key,
// config and authorized_keys in a temporary directory; /run/sshd must exist; StrictModes off because the
// directory is under /tmp).
//
//   SshHome   a temporary directory with a user key, an empty known_hosts and ssh config; removed at the end.
//   Sshd      one /usr/sbin/sshd -D on address:port (optionally inside a network namespace) with its own
//             host key; stopped (SIGTERM, then SIGKILL) when destroyed.
//   NetnsLab  N "hosts": network namespaces joined by a bridge in a hub namespace; a launcher namespace
//             (10.99.0.1/24) for hvdrun, host i at 10.99.0.(i+2), each reached through its own "eth0" and
//             running its own sshd on port 22. Nothing is added to the machine's own namespace. Namespaces
//             are deleted when destroyed (RAII, also when a test fails). NetnsLab::unavailable() says why it
//             cannot run here.
//   LabHvdrun hvdrun started inside a NetnsLab's launcher namespace.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace hvd::test {

// Runs `command` with /bin/sh, returns stdout; throws std::runtime_error naming the command and its
// output when it exits non-zero.
std::string sh(const std::string& command);

// Starts argv (argv[0] an absolute path) with this process's environment except HOME, which becomes
// `home` (the test's keys and known_hosts), and SSH_AUTH_SOCK, which is dropped (no agent). stdin is
// /dev/null; stdout and stderr go to the file `out`. Returns the pid; throws std::runtime_error naming
// the program when it cannot be started.
pid_t spawnWithHome(const std::vector<std::string>& argv, const std::string& home, const std::string& out);

// The raw /proc/<pid>/cmdline (arguments separated by NULs), or nullopt when the process has gone.
std::optional<std::string> readCommandLine(pid_t pid);

// A fresh directory under /tmp, removed with everything in it on destruction.
class TempDir {
 public:
  explicit TempDir(const std::string& prefix = "hvd-ssh-test");
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// $dir/.ssh with id_ed25519 (+ .pub), an authorized_keys for servers, known_hosts and config files.
class SshHome {
 public:
  SshHome();
  const std::string& home() const { return dir_.path(); }
  std::string sshDir() const { return home() + "/.ssh"; }
  std::string userKey() const { return sshDir() + "/id_ed25519"; }
  std::string authorizedKeys() const { return sshDir() + "/authorized_keys"; }
  std::string knownHosts() const { return sshDir() + "/known_hosts"; }
  std::string config() const { return sshDir() + "/config"; }
  // A fresh key pair that no server accepts; returns the private key path.
  std::string makeOtherKey(const std::string& name);

 private:
  TempDir dir_;
};

class Sshd {
 public:
  // Writes a host key and sshd_config under `dir` and starts sshd; waits until it accepts connections.
  Sshd(const std::string& dir, const std::string& authorized_keys, const std::string& address, uint16_t port,
       std::optional<std::string> netns = std::nullopt);
  ~Sshd();
  Sshd(const Sshd&) = delete;
  Sshd& operator=(const Sshd&) = delete;

  uint16_t port() const { return port_; }
  const std::string& address() const { return address_; }
  // "ssh-ed25519 AAAA..." (type and key, as in known_hosts)
  std::string hostKey() const;
  // OpenSSH's fingerprint of the host key: "SHA256:..."
  std::string fingerprint() const;
  // The known_hosts line for this server ("[addr]:port type key", or "addr type key" on port 22).
  std::string knownHostsLine() const;
  // Replaces the host key with a new one and restarts sshd (a reinstalled host).
  void regenerateHostKey();

 private:
  void start();
  void stop();
  std::string dir_, authorized_keys_, address_;
  uint16_t port_;
  std::optional<std::string> netns_;
  pid_t pid_ = -1;
};

// A TCP port on 127.0.0.1 that was free a moment ago.
uint16_t freeLoopbackPort();

class NetnsLab {
 public:
  // Empty when the lab can run here; otherwise why not (shown in the SKIPPED line).
  static std::string unavailable();

  NetnsLab(int hosts, const SshHome& home);
  ~NetnsLab();
  NetnsLab(const NetnsLab&) = delete;
  NetnsLab& operator=(const NetnsLab&) = delete;

  const std::string& launcherNamespace() const { return launcher_ns_; }
  const std::string& hostNamespace(int i) const { return host_ns_[i]; }
  std::string hostAddress(int i) const { return "10.99.0." + std::to_string(i + 2); }
  static std::string launcherAddress() { return "10.99.0.1"; }
  int hosts() const { return static_cast<int>(host_ns_.size()); }
  // Process ids of every process inside host namespace i, except its sshd listener.
  std::vector<pid_t> processesIn(int i) const;
  // Command lines (NUL replaced by space) of processesIn(i).
  std::vector<std::string> commandLinesIn(int i) const;
  // Takes host i off the network (its link goes down): a dropped network, as seen from both sides.
  void cutHost(int i);

 private:
  void cleanup();
  TempDir dir_;
  std::string hub_ns_;  // holds the bridge
  std::string launcher_ns_;
  std::vector<std::string> host_ns_;
  std::vector<std::unique_ptr<Sshd>> sshds_;
};

// $HVD_BUILD_DIR/hvdrun started inside the lab's launcher namespace with the test's HOME (keys,
// known_hosts) and no ssh-agent; stdout and stderr go to the file `out`. Killed (SIGKILL) if still running
// when destroyed. Throws std::runtime_error when HVD_BUILD_DIR is not set.
class LabHvdrun {
 public:
  LabHvdrun(const NetnsLab& lab, const SshHome& home, const std::vector<std::string>& args, const std::string& out);
  ~LabHvdrun();
  LabHvdrun(const LabHvdrun&) = delete;
  LabHvdrun& operator=(const LabHvdrun&) = delete;

  // Exit status (shell convention: 128 + signal), or -1 if still running after `limit`.
  int wait(std::chrono::milliseconds limit);
  void kill9();
  std::string output() const;  // everything written to `out` so far

 private:
  std::string out_;
  pid_t pid_ = -1;
};

// Prints the standard skip line; tests registered with SKIP_RETURN_CODE 77 then exit(77).
[[noreturn]] void skipTest(const std::string& why);

}  // namespace hvd::test
