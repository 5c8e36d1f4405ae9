// What the tests of local-peer trust share: the options of a server that trusts this user's local
// processes without its token, and the peers such a server tells apart, as it would see them.
#pragma once

#include <string>

#include "rendezvous/server.h"

namespace hvd::rendezvous::testing {

// A server that demands `token` from everyone but this user's processes on this machine.
inline ServerOptions trustingLocalPeers(std::string token) {
  ServerOptions o;
  o.token = std::move(token);
  o.trust_local_peers = true;
  return o;
}

// A process of this user (uid 1000) on 127.0.0.1.
inline PeerInfo sameUserPeer() {
  PeerInfo p;
  p.address = "127.0.0.1";
  p.port = 40000;
  p.loopback = true;
  p.uid = 1000;
  p.same_user = true;
  return p;
}

// A process of another user (nobody) on 127.0.0.1.
inline PeerInfo otherUserPeer() {
  PeerInfo p = sameUserPeer();
  p.uid = 65534;
  p.same_user = false;
  return p;
}

}  // namespace hvd::rendezvous::testing
