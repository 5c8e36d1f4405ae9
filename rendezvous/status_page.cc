#include "rendezvous/status_page.h"

#include <algorithm>
#include <cctype>
#include <chrono>
#include <optional>
#include <stdexcept>

#include "base/error.h"
#include "rendezvous/status_html.h"
#include "rendezvous/token.h"

namespace hvd::rendezvous {

namespace http = boost::beast::http;

namespace {

int64_t unixNow() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// ---------------------------------------------------------------------------------------------------------
// Requests and access

enum class Access { kFull, kOverview };

struct Judgement {
  Access access = Access::kOverview;
  std::optional<std::string> refusal;  // a wrong credential: the 403's message
  bool credential = false;             // some credential was presented
};

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

bool equalsIgnoreCase(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) == std::tolower(static_cast<unsigned char>(y));
         });
}

Judgement judge(const Request& req, const ServerOptions& options, const PeerInfo& peer) {
  Judgement j;
  if (!options.token) {
    j.access = Access::kFull;
    return j;
  }
  const std::string& token = *options.token;
  bool right = false;
  if (auto it = req.find(kTokenHeader); it != req.end()) {
    j.credential = true;
    if (tokensEqual(std::string_view(it->value().data(), it->value().size()), token)) {
      right = true;
    } else {
      j.refusal = std::string("wrong ") + kTokenHeader;
    }
  }
  if (auto it = req.find(http::field::authorization); it != req.end()) {
    const std::string_view value = trim(std::string_view(it->value().data(), it->value().size()));
    const auto space = value.find(' ');
    // Other schemes (a proxy's Basic credentials) are not ours: ignored.
    if (space != std::string_view::npos && equalsIgnoreCase(value.substr(0, space), "Bearer")) {
      j.credential = true;
      if (tokensEqual(trim(value.substr(space + 1)), token)) {
        right = true;
      } else if (!j.refusal) {
        j.refusal = "wrong token in Authorization: Bearer";
      }
    }
  }
  bool cookie_wrong = false;
  const auto cookies = req.equal_range(http::field::cookie);
  for (auto field = cookies.first; field != cookies.second; ++field) {
    std::string_view rest(field->value().data(), field->value().size());
    while (!rest.empty()) {
      const auto semi = rest.find(';');
      const std::string_view pair = trim(rest.substr(0, semi));
      rest = semi == std::string_view::npos ? std::string_view() : rest.substr(semi + 1);
      const auto eq = pair.find('=');
      if (eq == std::string_view::npos || trim(pair.substr(0, eq)) != kTokenCookie) continue;
      j.credential = true;
      const auto value = percentDecode(trim(pair.substr(eq + 1)));
      if (value && tokensEqual(*value, token)) {
        right = true;
      } else {
        cookie_wrong = true;
      }
    }
  }
  if (j.refusal) return j;
  if (right || peer.same_user) {
    // A stale cookie (an earlier job on this port) does not lock this user out of their own job.
    j.access = Access::kFull;
    return j;
  }
  if (cookie_wrong) {
    j.refusal = std::string("the ") + kTokenCookie +
                " cookie holds a wrong token (set for another job on this port?): open /?token=TOKEN with this "
                "job's token";
  }
  return j;
}

void setCommonHeaders(Response& res, const Request& req) {
  res.set(http::field::server, "hvd-rendezvous");
  res.set(http::field::cache_control, "no-store");
  res.set("X-Content-Type-Options", "nosniff");
  res.set("Referrer-Policy", "no-referrer");
  res.keep_alive(req.keep_alive());
}

Response makeResponse(const Request& req, http::status status, std::string body, const char* content_type) {
  Response res{status, req.version()};
  setCommonHeaders(res, req);
  res.set(http::field::content_type, content_type);
  res.body() = std::move(body);
  res.prepare_payload();
  if (req.method() == http::verb::head) res.body().clear();  // Content-Length stays the GET's
  return res;
}

// One line, naming what was wrong.
Response textError(const Request& req, http::status status, const std::string& message) {
  return makeResponse(req, status, "status port: " + message + "\n", "text/plain; charset=utf-8");
}

// A request target for a message: at most 200 bytes, valid UTF-8, no control characters.
std::string quoteTarget(std::string_view target) {
  std::string shown = validUtf8(target.substr(0, 200));
  for (char& c : shown) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = '?';
  }
  return "'" + shown + (target.size() > 200 ? "...'" : "'");
}

// The token query parameter of "/?...", decoded; nullopt when absent. Throws std::invalid_argument for a
// malformed %-escape.
std::optional<std::string> tokenParameter(std::string_view query) {
  std::optional<std::string> token;
  while (!query.empty()) {
    const auto amp = query.find('&');
    const std::string_view pair = query.substr(0, amp);
    query = amp == std::string_view::npos ? std::string_view() : query.substr(amp + 1);
    const auto eq = pair.find('=');
    if (pair.substr(0, eq) != "token") continue;
    std::string raw(eq == std::string_view::npos ? std::string_view() : pair.substr(eq + 1));
    std::replace(raw.begin(), raw.end(), '+', ' ');
    auto decoded = percentDecode(raw);
    if (!decoded) throw std::invalid_argument("malformed %-escape in the token parameter");
    token = std::move(*decoded);
  }
  return token;
}

}  // namespace

Response handleStatus(const Request& req, const Monitor& monitor, const ServerOptions& options,
                      const PeerInfo& peer) {
  const std::string_view target(req.target().data(), req.target().size());
  if (req.method() != http::verb::get && req.method() != http::verb::head) {
    Response res = textError(req, http::status::method_not_allowed,
                             "method '" + validUtf8(std::string_view(req.method_string().data(),
                                                                     req.method_string().size())) +
                                 "' not allowed; use GET or HEAD");
    res.set(http::field::allow, "GET, HEAD");
    return res;
  }
  if (target.size() > kMaxStatusTargetBytes) {
    return textError(req, http::status::uri_too_long,
                     detail::concat("request target of ", target.size(), " bytes exceeds the limit of ",
                                    kMaxStatusTargetBytes, " bytes"));
  }
  const auto q = target.find('?');
  const std::string_view path = target.substr(0, q);
  const std::string_view query = q == std::string_view::npos ? std::string_view() : target.substr(q + 1);
  if (path != "/" && path != "/status.json" && path != "/metrics") {
    return textError(req, http::status::not_found,
                     "no page " + quoteTarget(path) + "; there are /, /status.json and /metrics");
  }

  if (path == "/") {
    std::optional<std::string> token;
    try {
      token = tokenParameter(query);
    } catch (const std::invalid_argument& e) {
      return textError(req, http::status::bad_request, e.what());
    }
    if (token) {
      if (options.token && !tokensEqual(*token, *options.token)) {
        return textError(req, http::status::forbidden, "wrong token in /?token=");
      }
      Response res = makeResponse(req, http::status::see_other, "see /\n", "text/plain; charset=utf-8");
      res.set(http::field::location, "/");
      if (options.token) {
        res.set(http::field::set_cookie, detail::concat(kTokenCookie, "=", percentEncode(*token),
                                                        "; Path=/; HttpOnly; SameSite=Strict"));
      }
      return res;
    }
  }

  const Judgement judgement = judge(req, options, peer);
  if (judgement.refusal) return textError(req, http::status::forbidden, *judgement.refusal);
  const bool full = judgement.access == Access::kFull;
  const JobSnapshot snapshot = monitor.snapshot();
  const int64_t now = unixNow();

  if (path == "/metrics") {
    if (!full) {
      Response res = textError(req, http::status::unauthorized,
                               std::string("/metrics needs the job token (") + kTokenHeader +
                                   " or Authorization: Bearer) or a loopback connection of this server's user");
      res.set(http::field::www_authenticate, "Bearer realm=\"hvd\"");
      return res;
    }
    return makeResponse(req, http::status::ok, prometheusText(snapshot), "text/plain; version=0.0.4; charset=utf-8");
  }
  if (path == "/status.json") {
    return makeResponse(req, http::status::ok,
                        statusJson(snapshot, full, now).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) +
                            "\n",
                        "application/json");
  }
  Response res = makeResponse(req, http::status::ok, pageHtml(snapshot, full, now), "text/html; charset=utf-8");
  res.set("Content-Security-Policy", kContentSecurityPolicy);
  return res;
}

}  // namespace hvd::rendezvous
