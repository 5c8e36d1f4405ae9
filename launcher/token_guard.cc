#include "launcher/token_guard.h"

#include <netdb.h>
#include <sys/socket.h>

#include <memory>

#include "launcher/launcher.h"
#include "base/error.h"

namespace hvd::launcher {

namespace {

// "10.0.0.2" and "fe80::1%eth0" -> comparable text: no scope, IPv4-mapped as IPv4.
std::string comparable(const std::string& address) {
  return rendezvous::normalizeAddress(address.substr(0, address.find('%')));
}

std::string endpointText(const rendezvous::PeerInfo& peer) {
  const bool v6 = peer.address.find(':') != std::string::npos;
  return detail::concat(v6 ? "[" : "", peer.address, v6 ? "]" : "", ":", peer.port);
}

}  // namespace

TokenlessVerdict judgeTokenlessRequest(const rendezvous::TokenlessRejection& rejection,
                                       const std::set<std::string>& job_addresses, bool local_peers_trusted) {
  const rendezvous::PeerInfo& peer = rejection.peer;
  const std::string refused = detail::concat("the rendezvous server refused a request without a token (",
                                             rejection.request_line, ") from ", endpointText(peer));
  TokenlessVerdict verdict;
  if (local_peers_trusted) {
    // A local job: this user's own processes were served; this one is not theirs (or could not be told).
    std::string who = "a connection that is not over loopback";
    if (peer.uid) {
      who = detail::concat("a process of another user (uid ", *peer.uid, ")");
    } else if (peer.loopback) {
      who = "a process whose owner could not be determined (" + peer.owner_error + ")";
    }
    verdict.message = detail::concat(refused, ", ", who,
                                     ": without the job's token, hvdrun serves only its own user's processes "
                                     "on this machine; the job goes "
                                     "on. If Horovod's own workers run as another user, add ",
                                     kNoTokenFlag, " (further such requests are not reported)");
    return verdict;
  }
  if (job_addresses.count(comparable(peer.address))) {
    verdict.stop_job = true;
    verdict.message = detail::concat(
        refused,
        ", a host of this job: Horovod's own workers cannot send hvdrun's per-job token and abort after 3 "
        "tries; to run them on several hosts add ",
        kNoTokenFlag, " (then anyone who can reach the rendezvous port can read and write the job's keys); ",
        "stopping the job");
    return verdict;
  }
  verdict.message = detail::concat(refused,
                                   ", which is not a host of this job, so the job goes on. If Horovod's own "
                                   "workers run there, they cannot "
                                   "send hvdrun's per-job token: add ",
                                   kNoTokenFlag, " (further such requests are not reported)");
  return verdict;
}

std::set<std::string> jobHostAddresses(const std::vector<std::string>& remote_hosts, bool has_local_ranks) {
  std::set<std::string> out;
  if (has_local_ranks) {
    for (const auto& address : interfaceAddresses()) out.insert(comparable(address));
    out.insert("127.0.0.1");
    out.insert("::1");
  }
  for (const auto& host : remote_hosts) {
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* res = nullptr;
    if (::getaddrinfo(host.c_str(), nullptr, &hints, &res) != 0) continue;
    std::unique_ptr<addrinfo, decltype(&::freeaddrinfo)> guard(res, &::freeaddrinfo);
    for (addrinfo* it = res; it; it = it->ai_next) {
      char buf[NI_MAXHOST] = {};
      if (::getnameinfo(it->ai_addr, it->ai_addrlen, buf, sizeof buf, nullptr, 0, NI_NUMERICHOST) == 0) {
        out.insert(comparable(buf));
      }
    }
  }
  return out;
}

}  // namespace hvd::launcher
