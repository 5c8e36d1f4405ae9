// What hvdrun does when its rendezvous server refuses a request that carried no token.
//
// hvdrun gives its workers a per-job token; Horovod's own workers cannot send it. On a local job the server
// serves them anyway (ServerOptions::trust_local_peers: loopback connections from hvdrun's own user). On a
// job with other hosts it cannot, so a Horovod worker there is refused and, left alone, retries three
// times half a second apart and aborts. hvdrun explains that in one line instead, naming the peer and the
// option that helps (--no-rendezvous-token), and decides whether to end the job:
//   - the peer is an address of one of the job's hosts: end the job at once (exit 1). Our own workers
//     always send the token, so a tokenless request from a job host is almost surely a Horovod worker
//     that is about to abort anyway.
//   - anything else (a stranger on the network, another user's process on a local job): print once and go
//     on. Ending the job there would let anyone who can reach the port kill jobs with one request.
#pragma once

#include <set>
#include <string>
#include <vector>

#include "rendezvous/server.h"

namespace hvd::launcher {

// The command-line option that turns the token off, as messages name it.
inline constexpr const char* kNoTokenFlag = "--no-rendezvous-token";

struct TokenlessVerdict {
  bool stop_job = false;  // end the job now (hvdrun then exits 1)
  std::string message;    // one line, without the "hvdrun: error: " prefix and without a newline
};

// `rejection`: what the server reported. `job_addresses`: from jobHostAddresses(). `local_peers_trusted`:
// the server had ServerOptions::trust_local_peers (a local job).
TokenlessVerdict judgeTokenlessRequest(const rendezvous::TokenlessRejection& rejection,
                                       const std::set<std::string>& job_addresses, bool local_peers_trusted);

// The IP addresses a worker of the job connects from: every address each of `remote_hosts` (names or
// literals, as the launcher reaches them) resolves to and, when some rank runs on this machine, every
// address of this machine. Numeric text without IPv6 scope ("%eth0"), IPv4-mapped IPv6 as IPv4. A name
// that does not resolve adds nothing. May block on name resolution.
std::set<std::string> jobHostAddresses(const std::vector<std::string>& remote_hosts, bool has_local_ranks);

}  // namespace hvd::launcher
