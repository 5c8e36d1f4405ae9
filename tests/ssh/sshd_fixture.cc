#include "tests/ssh/sshd_fixture.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <arpa/inet.h>
#include <dirent.h>
#include <array>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <stdexcept>
#include <thread>

extern char** environ;

namespace hvd::test {

namespace fs = std::filesystem;

std::string sh(const std::string& command) {
  FILE* p = ::popen((command + " 2>&1").c_str(), "r");
  if (!p) throw std::runtime_error("popen failed for: " + command);
  std::string out;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), p)) > 0) out.append(buf.data(), n);
  const int status = ::pclose(p);
  if (status != 0)
    throw std::runtime_error("command failed (" + std::to_string(status) + "): " + command + "\n" + out);
  return out;
}

namespace {

std::string trim(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

void writeFile(const std::string& path, const std::string& text) {
  std::ofstream out(path);
  out << text;
  if (!out) throw std::runtime_error("cannot write " + path);
}

bool canConnect(const std::string& address, uint16_t port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(port);
  ::inet_pton(AF_INET, address.c_str(), &sa.sin_addr);
  const bool ok = ::connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) == 0;
  ::close(fd);
  return ok;
}

}  // namespace

TempDir::TempDir(const std::string& prefix) {
  std::string templ = "/tmp/" + prefix + "-XXXXXX";
  if (!::mkdtemp(templ.data())) throw std::runtime_error("mkdtemp failed for " + templ);
  path_ = templ;
}

TempDir::~TempDir() {
  std::error_code ec;
  fs::remove_all(path_, ec);
}

SshHome::SshHome() : dir_("hvd-ssh-home") {
  fs::create_directories(sshDir());
  ::chmod(sshDir().c_str(), 0700);
  sh("ssh-keygen -q -t ed25519 -N '' -C hvd-test -f " + userKey());
  fs::copy_file(userKey() + ".pub", authorizedKeys());
  writeFile(knownHosts(), "");
  writeFile(config(), "");
}

std::string SshHome::makeOtherKey(const std::string& name) {
  const std::string path = sshDir() + "/" + name;
  sh("ssh-keygen -q -t ed25519 -N '' -C other -f " + path);
  return path;
}

uint16_t freeLoopbackPort() {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa);
  socklen_t len = sizeof sa;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&sa), &len);
  ::close(fd);
  return ntohs(sa.sin_port);
}

Sshd::Sshd(const std::string& dir, const std::string& authorized_keys, const std::string& address,
           uint16_t port, std::optional<std::string> netns)
    : dir_(dir), authorized_keys_(authorized_keys), address_(address), port_(port), netns_(std::move(netns)) {
  fs::create_directories(dir_);
  ::mkdir("/run/sshd", 0755);  // sshd: "Missing privilege separation directory" otherwise
  ::chmod("/run/sshd", 0755);
  sh("ssh-keygen -q -t ed25519 -N '' -f " + dir_ + "/ssh_host_ed25519_key");
  std::ostringstream cfg;
  cfg << "Port " << port_ << "\n"
      << "ListenAddress " << address_ << "\n"
      << "HostKey " << dir_ << "/ssh_host_ed25519_key\n"
      << "PidFile " << dir_ << "/sshd.pid\n"
      << "AuthorizedKeysFile " << authorized_keys_ << "\n"
      << "PasswordAuthentication no\nKbdInteractiveAuthentication no\nPermitRootLogin prohibit-password\n"
      << "UsePAM no\nStrictModes no\nUseDNS no\n"
      // Remote shells skip the account's ~/.bashrc (bash reads it when started by sshd at SHLVL 0 only): the
      // tests run as root, and a root ~/.bashrc that runs `pyenv rehash` takes a lock file; a worker a test
      // kills while its shell is still starting leaves that lock behind, and every later login of every
      // test then waits 60 s for it. The tests are about hvdrun, not about this machine's dotfiles.
      << "SetEnv SHLVL=1\n";
  writeFile(dir_ + "/sshd_config", cfg.str());
  start();
}

Sshd::~Sshd() { stop(); }

void Sshd::start() {
  sh("/usr/sbin/sshd -t -f " + dir_ + "/sshd_config");
  std::vector<std::string> args;
  if (netns_) args = {"/usr/sbin/ip", "netns", "exec", *netns_};
  for (const char* a : {"/usr/sbin/sshd", "-D", "-e", "-f"}) args.emplace_back(a);
  args.push_back(dir_ + "/sshd_config");
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 2, (dir_ + "/sshd.log").c_str(), O_WRONLY | O_CREAT | O_APPEND,
                                   0644);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  const int rc = ::posix_spawn(&pid_, argv[0], &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) throw std::runtime_error("cannot start sshd: " + std::string(strerror(rc)));
  for (int i = 0; i < 500; ++i) {
    if (netns_
            ? sh("ip netns exec " + *netns_ + " ss -Hltn 'sport = :" + std::to_string(port_) + "'").size() > 0
            : canConnect(address_, port_)) {
      return;
    }
    int status = 0;
    if (::waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      std::ifstream log(dir_ + "/sshd.log");
      std::stringstream text;
      text << log.rdbuf();
      throw std::runtime_error("sshd exited at start: " + text.str());
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  throw std::runtime_error("sshd did not listen on " + address_ + ":" + std::to_string(port_));
}

void Sshd::stop() {
  if (pid_ <= 0) return;
  ::kill(pid_, SIGTERM);
  for (int i = 0; i < 200; ++i) {
    int status = 0;
    if (::waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ::kill(pid_, SIGKILL);
  ::waitpid(pid_, nullptr, 0);
  pid_ = -1;
}

std::string Sshd::hostKey() const {
  std::ifstream in(dir_ + "/ssh_host_ed25519_key.pub");
  std::string type, key;
  in >> type >> key;
  return type + " " + key;
}

std::string Sshd::fingerprint() const {
  // "256 SHA256:xxxx comment (ED25519)"
  std::istringstream words(sh("ssh-keygen -l -E sha256 -f " + dir_ + "/ssh_host_ed25519_key.pub"));
  std::string bits, fp;
  words >> bits >> fp;
  return fp;
}

std::string Sshd::knownHostsLine() const {
  const std::string name = port_ == 22 ? address_ : "[" + address_ + "]:" + std::to_string(port_);
  return name + " " + hostKey() + "\n";
}

void Sshd::regenerateHostKey() {
  stop();
  fs::remove(dir_ + "/ssh_host_ed25519_key");
  fs::remove(dir_ + "/ssh_host_ed25519_key.pub");
  sh("ssh-keygen -q -t ed25519 -N '' -f " + dir_ + "/ssh_host_ed25519_key");
  start();
}

// ---------------------------------------------------------------------------------------------------------

namespace {
std::string oneLine(std::string s) {
  s = trim(s);
  for (size_t i = 0; (i = s.find('\n', i)) != std::string::npos;) s.replace(i, 1, "; ");
  return s;
}
}  // namespace

std::string NetnsLab::unavailable() {
  if (::geteuid() != 0) return "not root";
  if (::access("/usr/sbin/sshd", X_OK) != 0) return "/usr/sbin/sshd missing";
  const std::string probe = "hvdprobe" + std::to_string(::getpid());
  try {
    sh("ip netns add " + probe);
  } catch (const std::exception& e) {
    return "ip netns add is not permitted: " + oneLine(e.what());
  }
  try {
    sh("ip netns exec " + probe + " ip link add br0 type bridge");
  } catch (const std::exception& e) {
    sh("ip netns del " + probe);
    return "cannot create a bridge in a namespace: " + oneLine(e.what());
  }
  sh("ip netns del " + probe);
  return "";
}

NetnsLab::NetnsLab(int hosts, const SshHome& home) : dir_("hvd-netns") {
  const std::string tag = std::to_string(::getpid());
  hub_ns_ = "hvdB" + tag;
  launcher_ns_ = "hvdL" + tag;
  try {
    sh("ip netns add " + hub_ns_);
    const std::string B = "ip netns exec " + hub_ns_ + " ";
    sh(B + "ip link add br0 type bridge");
    sh(B + "ip link set br0 up");
    // Every namespace, the launcher's included, reaches the bridge through its own "eth0", so one
    // interface name (HOROVOD_GLOO_IFACE) is valid on every host, as on a real cluster.
    auto attach = [&](const std::string& ns, const std::string& port, const std::string& address) {
      sh("ip netns add " + ns);
      const std::string N = "ip netns exec " + ns + " ";
      sh("ip link add " + port + " netns " + hub_ns_ + " type veth peer name eth0 netns " + ns);
      sh(B + "ip link set " + port + " master br0");
      sh(B + "ip link set " + port + " up");
      sh(N + "ip link set lo up");
      sh(N + "ip addr add " + address + "/24 dev eth0");
      sh(N + "ip link set eth0 up");
    };
    attach(launcher_ns_, "vl", launcherAddress());
    for (int i = 0; i < hosts; ++i) {
      host_ns_.push_back("hvdH" + tag + "_" + std::to_string(i));
      attach(host_ns_.back(), "vh" + std::to_string(i), hostAddress(i));
    }
    for (int i = 0; i < hosts; ++i) {
      sshds_.push_back(std::make_unique<Sshd>(dir_.path() + "/host" + std::to_string(i),
                                              home.authorizedKeys(), hostAddress(i), 22, host_ns_[i]));
      std::ofstream(home.knownHosts(), std::ios::app) << sshds_.back()->knownHostsLine();
    }
  } catch (...) {
    cleanup();
    throw;
  }
}

NetnsLab::~NetnsLab() { cleanup(); }

void NetnsLab::cleanup() {
  sshds_.clear();
  std::vector<std::string> all = host_ns_;
  all.push_back(launcher_ns_);
  all.push_back(hub_ns_);
  for (const auto& ns : all) {
    if (ns.empty()) continue;
    // Whatever still runs in a namespace (a leaked worker, a killed hvdrun's children) goes with it.
    try {
      sh("ip netns pids " + ns + " | xargs -r kill -9; ip netns del " + ns);
    } catch (const std::exception& e) {
      std::cerr << "NetnsLab cleanup: " << e.what() << "\n";
    }
  }
  host_ns_.clear();
  launcher_ns_.clear();
  hub_ns_.clear();
}

std::vector<pid_t> NetnsLab::processesIn(int i) const {
  std::vector<pid_t> out;
  std::istringstream pids(sh("ip netns pids " + host_ns_[i]));
  const std::string sshd_pidfile = dir_.path() + "/host" + std::to_string(i) + "/sshd.pid";
  pid_t listener = -1;
  std::ifstream(sshd_pidfile) >> listener;
  pid_t p;
  while (pids >> p) {
    if (p != listener) out.push_back(p);
  }
  return out;
}

pid_t spawnWithHome(const std::vector<std::string>& argv, const std::string& home, const std::string& out) {
  std::vector<std::string> env;
  for (char** e = environ; *e; ++e) {
    if (std::strncmp(*e, "HOME=", 5) == 0 || std::strncmp(*e, "SSH_AUTH_SOCK=", 14) == 0) continue;
    env.emplace_back(*e);
  }
  env.push_back("HOME=" + home);
  std::vector<std::string> args = argv;
  std::vector<char*> a, e;
  for (auto& s : args) a.push_back(s.data());
  a.push_back(nullptr);
  for (auto& s : env) e.push_back(s.data());
  e.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&actions, 1, out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&actions, 1, 2);
  pid_t pid = -1;
  const int rc = ::posix_spawn(&pid, a[0], &actions, nullptr, a.data(), e.data());
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) throw std::runtime_error("cannot start " + argv.at(0) + ": " + std::strerror(rc));
  return pid;
}

std::optional<std::string> readCommandLine(pid_t pid) {
  const int fd = ::open(("/proc/" + std::to_string(pid) + "/cmdline").c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  std::string text;
  char buf[4096];
  ssize_t n;
  while ((n = ::read(fd, buf, sizeof buf)) > 0) text.append(buf, static_cast<size_t>(n));
  ::close(fd);
  return text;
}

std::vector<std::string> NetnsLab::commandLinesIn(int i) const {
  std::vector<std::string> out;
  for (pid_t p : processesIn(i)) {
    auto cmdline = readCommandLine(p);
    if (!cmdline) continue;  // exited while we looked
    std::string text = std::move(*cmdline);
    for (char& c : text) {
      if (c == '\0') c = ' ';
    }
    if (!text.empty()) out.push_back(text);
  }
  return out;
}

void NetnsLab::cutHost(int i) { sh("ip netns exec " + host_ns_[i] + " ip link set eth0 down"); }

void skipTest(const std::string& why) {
  std::cout << "SKIPPED: " << why << std::endl;
  std::_Exit(77);
}

LabHvdrun::LabHvdrun(const NetnsLab& lab, const SshHome& home, const std::vector<std::string>& args,
                     const std::string& out)
    : out_(out) {
  const char* build = std::getenv("HVD_BUILD_DIR");
  if (!build) throw std::runtime_error("HVD_BUILD_DIR is not set: cannot find hvdrun (run the test through ctest)");
  std::vector<std::string> argv = {"/usr/sbin/ip", "netns", "exec", lab.launcherNamespace(),
                                   std::string(build) + "/hvdrun"};
  argv.insert(argv.end(), args.begin(), args.end());
  pid_ = spawnWithHome(argv, home.home(), out);
}

LabHvdrun::~LabHvdrun() {
  if (pid_ > 0) {
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
  }
}

int LabHvdrun::wait(std::chrono::milliseconds limit) {
  const auto end = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < end) {
    int status = 0;
    if (::waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return -1;
}

void LabHvdrun::kill9() {
  if (pid_ > 0) ::kill(pid_, SIGKILL);
}

std::string LabHvdrun::output() const {
  std::ifstream in(out_);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

}  // namespace hvd::test
