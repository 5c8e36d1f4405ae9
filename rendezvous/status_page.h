// The status port: what a person (a browser) or a monitoring system (Prometheus) sees of a running job.
// Pure: a request, the job's Monitor and what the server knows of the connection in, a response out.
//
// Routes (GET and HEAD only; anything else 405, unknown paths 404, malformed requests 400):
//   /                 the HTML page: no external assets, refreshes itself from /status.json
//   /status.json      the snapshot as JSON
//   /metrics          Prometheus' text format (version 0.0.4)
//   /?token=T         sets the token cookie and redirects to / (a link for browsers that are not trusted)
//
// Access: the overview (job name, uptime, ranks by state) is open to anyone who can reach the port. The rest
// (per-rank rows, output lines, waits, /metrics) needs the job token (ServerOptions::token) in X-Hvd-Token,
// "Authorization: Bearer", or the hvd_token cookie, or a loopback connection from a process of the server's
// own user (PeerInfo::same_user: a browser of this user on this machine, or an ssh tunnel this user opened).
// A server without a token shows everything. A wrong token is 403.
#pragma once

#include "rendezvous/handler.h"
#include "rendezvous/monitor.h"
#include "rendezvous/server.h"

namespace hvd::rendezvous {

Response handleStatus(const Request& request, const Monitor& monitor, const ServerOptions& options,
                      const PeerInfo& peer);

}  // namespace hvd::rendezvous
