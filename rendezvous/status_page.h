// The status port: what a person (a browser) or a monitoring system (Prometheus) sees of a running job.
// Pure: a request, the job's Monitor and what the server knows of the connection in, a response out.
// docs/status.md describes the page, the JSON schema and every metric for users.
// status_page.cc routes requests and checks access; status_html.cc, status_json.cc and status_metrics.cc
// render the page, the JSON and the metrics (with status_text.h's shared formatting).
//
// Routes (GET and HEAD only; anything else 405 with "Allow: GET, HEAD"; unknown paths 404; a target over
// kMaxStatusTargetBytes 414; a malformed query 400; every error a one-line text/plain body naming what was
// wrong):
//   /                 the HTML page: no external assets (inline CSS and JS; the Content-Security-Policy
//                     forbids fetching anything but /status.json from this origin); rendered whole by the
//                     server, then refreshed by its script from /status.json every second
//   /?token=T         with the job token: sets the cookie hvd_token (HttpOnly, SameSite=Strict, Path=/) and
//                     answers 303 to /; a wrong T is 403; a server without a token just redirects
//   /status.json      the snapshot as JSON (statusJson below)
//   /metrics          Prometheus' text format 0.0.4 (prometheusText below)
// Query parameters other than token are ignored (scrapers add their own).
//
// Access: the overview (job name, uptime, ranks planned, workers by state) is open to anyone who can reach
// the port. The rest (per-worker rows, output lines, waits, history, /metrics) needs one of
//   - the job token (ServerOptions::token) in X-Hvd-Token, in "Authorization: Bearer T", or in the
//     hvd_token cookie that /?token=T sets;
//   - a loopback connection from a process of the server's own user (PeerInfo::same_user: a browser of
//     this user on this machine, or an ssh tunnel this user opened, whose connection comes from the
//     user's own sshd process).
// A server without a token shows everything to everyone. A wrong token in X-Hvd-Token or Authorization
// is 403 on every path. A wrong hvd_token cookie (a job that ran before on the same port) is ignored for
// this user's own connections and 403 for others. Without access: / shows the overview and says how to
// get in, /status.json holds the overview only ("access": "overview"), /metrics is 401 (no credential;
// WWW-Authenticate: Bearer) or 403 (a wrong one). Tokens are compared in constant time (tokensEqual).
//
// Escaping: everything that comes from workers (host names, output lines, tensor names, op names) is
// untrusted. In HTML it is escaped, with invalid UTF-8 and control characters replaced by U+FFFD; the
// page's script inserts text only as text nodes. In JSON invalid UTF-8 is replaced by U+FFFD. In metrics,
// label values are escaped per the text format (\\, \", \n) with invalid UTF-8 replaced.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "base/job_monitor.h"
#include "rendezvous/handler.h"
#include "rendezvous/server.h"

namespace hvd::rendezvous {

// Longest request target the status port answers (longer: 414). Well below the parser's header limit
// (applyLimits), so a long target gets this answer rather than the parser's 431.
inline constexpr size_t kMaxStatusTargetBytes = 2048;

// The cookie /?token=T sets (its value %-escaped as percentEncode does).
inline constexpr const char* kTokenCookie = "hvd_token";

Response handleStatus(const Request& request, const Monitor& monitor, const ServerOptions& options,
                      const PeerInfo& peer);

// /status.json's document for a snapshot taken at now_unix_s (system clock, seconds): the overview only
// when `full` is false. Dump it with nlohmann::json::error_handler_t::replace (hosts and lines may hold
// invalid UTF-8). Schema: docs/status.md.
nlohmann::json statusJson(const JobSnapshot& snapshot, bool full, int64_t now_unix_s);

// /metrics' body for a snapshot: every family with its HELP and TYPE lines, in the order docs/status.md
// lists them.
std::string prometheusText(const JobSnapshot& snapshot);

// `text` with every invalid UTF-8 sequence (overlong forms, surrogates, code points past U+10FFFF,
// truncated or stray bytes) replaced by U+FFFD. Exposed for the tests.
std::string validUtf8(std::string_view text);

// `text` safe for HTML text and double- or single-quoted attributes: validUtf8, C0 controls other than tab
// and DEL replaced by U+FFFD, and & < > " ' as character references.
std::string htmlEscape(std::string_view text);

}  // namespace hvd::rendezvous
