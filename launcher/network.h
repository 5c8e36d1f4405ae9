// Choosing the rendezvous address and the workers' network interface (HOROVOD_GLOO_IFACE).
//
// horovodrun: all hosts local -> the interfaces holding 127.0.0.1 (normally "lo"); --network-interface
// given -> those; otherwise a ring probe by interface name over task servers. hvdrun replaces the ring
// probe with the kernel's routing decision: the local address that routes to the first remote host, and
// the interface holding it (the ssh launcher then verifies every host can reach that address).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "launcher/launcher.h"

namespace hvd::launcher {

struct NetworkPlan {
  std::string bind_address;             // where the rendezvous server listens
  std::vector<std::string> interfaces;  // HOROVOD_GLOO_IFACE = first, NCCL_SOCKET_IFNAME = all joined by ','
};

// `remote_hosts`: the hosts not started on this machine (empty for a local job). `requested`: the
// --network-interface names. `others_may_join`: hosts not known yet may join (an elastic job's discovery
// script): with `requested`, the server listens on the first one's address even while every host is local. Throws UsageError naming an interface that does not exist or has no IPv4
// address, LaunchError naming the host when no route to it exists.
NetworkPlan chooseNetwork(const std::vector<HostSpec>& remote_hosts, const std::vector<std::string>& requested,
                          bool others_may_join = false);

}  // namespace hvd::launcher
