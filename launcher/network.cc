#include "launcher/network.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <memory>

#include "launcher/usage.h"

namespace hvd::launcher {

namespace {

struct Ipv4 {
  std::string iface;
  std::string address;
};

std::vector<Ipv4> ipv4Addresses() {
  std::vector<Ipv4> out;
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) != 0) return out;
  for (ifaddrs* it = list; it; it = it->ifa_next) {
    if (!it->ifa_addr || it->ifa_addr->sa_family != AF_INET) continue;
    char buf[INET_ADDRSTRLEN] = {};
    ::inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(it->ifa_addr)->sin_addr, buf, sizeof buf);
    out.push_back({it->ifa_name, buf});
  }
  ::freeifaddrs(list);
  return out;
}

// The local IPv4 address the kernel would use to reach `host` (a connected UDP socket sends nothing).
std::string routedAddressTo(const HostSpec& host) {
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* res = nullptr;
  const int rc = ::getaddrinfo(host.name.c_str(), "9", &hints, &res);
  if (rc != 0) {
    throw LaunchError(
        detail::concat("host ", host.name, ": cannot resolve an IPv4 address: ", ::gai_strerror(rc)));
  }
  std::unique_ptr<addrinfo, decltype(&::freeaddrinfo)> guard(res, &::freeaddrinfo);
  const int fd = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) throw LaunchError("cannot create a socket: " + errnoText(errno));
  sockaddr_in local{};
  socklen_t len = sizeof local;
  const bool ok = ::connect(fd, res->ai_addr, res->ai_addrlen) == 0 &&
                  ::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len) == 0;
  const int err = errno;
  ::close(fd);
  if (!ok) throw LaunchError(detail::concat("host ", host.name, ": no route: ", errnoText(err)));
  char buf[INET_ADDRSTRLEN] = {};
  ::inet_ntop(AF_INET, &local.sin_addr, buf, sizeof buf);
  return buf;
}

}  // namespace

NetworkPlan chooseNetwork(const std::vector<HostSpec>& remote_hosts, const std::vector<std::string>& requested,
                          bool others_may_join) {
  const auto addresses = ipv4Addresses();
  NetworkPlan plan;
  if (!requested.empty()) {
    for (const auto& nic : requested) {
      bool found = false;
      for (const auto& a : addresses) {
        if (a.iface != nic) continue;
        if (!found && plan.bind_address.empty()) plan.bind_address = a.address;
        found = true;
      }
      usageCheck(found, "--network-interface: no interface \"", nic, "\" with an IPv4 address on this host");
    }
    plan.interfaces = requested;
    // Every worker is here (and stays here): lo always works.
    if (remote_hosts.empty() && !others_may_join) plan.bind_address = "127.0.0.1";
    return plan;
  }
  plan.bind_address = remote_hosts.empty() ? "127.0.0.1" : routedAddressTo(remote_hosts.front());
  for (const auto& a : addresses) {
    if (a.address == plan.bind_address) {
      plan.interfaces.push_back(a.iface);
      break;
    }
  }
  if (plan.interfaces.empty()) plan.interfaces.push_back("lo");  // no getifaddrs (containers): the usual name
  return plan;
}

}  // namespace hvd::launcher
