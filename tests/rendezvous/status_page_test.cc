// The status port through the pure handler (handleStatus): a Monitor fed by hand as a launcher, workers and
// the rendezvous server would feed it; access rules for every path and kind of credential; hostile worker
// output escaped in HTML, JSON and metrics; the Prometheus text; 4xx answers for bad requests.
#include <catch2/catch.hpp>

#include <regex>
#include <set>
#include <sstream>

#include "rendezvous/status_page.h"
#include "rendezvous/token.h"
#include "tests/rendezvous/local_peers.h"

using namespace hvd::rendezvous;
using namespace hvd::rendezvous::testing;
using hvd::Monitor;
using hvd::RankReport;
namespace http = boost::beast::http;

namespace {

const std::string kToken = "0123456789abcdef0123456789abcdef";

struct Headers {
  std::vector<std::pair<std::string, std::string>> fields;
};

Request request(http::verb method, const std::string& target, const Headers& headers = {}) {
  Request req{method, target, 11};
  req.set(http::field::host, "127.0.0.1");
  for (const auto& [name, value] : headers.fields) req.insert(name, value);
  return req;
}

Response get(const Monitor& monitor, const ServerOptions& options, const std::string& target,
             const Headers& headers = {}, const PeerInfo& peer = {}, http::verb method = http::verb::get) {
  return handleStatus(request(method, target, headers), monitor, options, peer);
}

ServerOptions withToken() {
  ServerOptions o;
  o.token = kToken;
  return o;
}

const std::string kHostileLine = "<script>alert(1)</script>\"><img src=x onerror=alert(2)>&amp;\x1b[31m";
const std::string kBadUtf8Line = std::string("bytes \xff\xfe and \xc0\xaf end");

// The report of `rank` of the job below, on `host`, with the pid its launcher gave it.
RankReport reportOf(int rank, const std::string& host) {
  RankReport r;
  r.rank = rank;
  r.size = 4;
  r.host = host;
  r.pid = 1000 + rank;
  return r;
}

// A job of 4 ranks: 0 running (rank 0: its report lists a wait for rank 1), 1 running and stuck with hostile
// output, 2 killed by SIGKILL, 3 exited 0.
void feed(Monitor& m) {
  m.setSize(4);
  m.workerStarted(0, 0, "node-a", 1000);
  m.workerStarted(1, 1, "node-\"b\"\\\n<i>", 1001);
  m.workerStarted(2, 2, "node-c", 1002);
  m.workerStarted(3, 3, "node-d", 1003);
  for (int rank : {0, 1}) m.workerJoined(rank, std::nullopt);
  RankReport r0 = reportOf(0, "node-a");
  r0.collectives["allreduce"] = {12, 4096};
  r0.collectives["broadcast"] = {2, 64};
  r0.rss_bytes = 5 << 20;
  r0.peak_rss_bytes = 6 << 20;
  r0.waits.push_back({"grad.<3>", "allreduce", 0, {0, 2, 3}, {1}, 12.5});
  r0.stall_warnings = 3;
  m.report(r0);
  RankReport r1 = reportOf(1, "node-\"b\"\\\n<i>");
  r1.collectives["allreduce"] = {11, 3000};
  m.report(r1);
  m.workerOutput(1, kHostileLine);
  m.workerOutput(1, kBadUtf8Line);
  m.workerOutput(0, "step 12 loss 0.25");
  m.workerExited(2, std::nullopt, 9, "killed", std::nullopt);
  m.workerExited(3, 0, std::nullopt, "", 7u << 20);
  m.request("PUT", 200, 0.0002);
  m.request("PUT", 200, 0.003);
  m.request("GET", 404, 0.5);
  m.request("GET", 200, std::nullopt);
}

bool fullPage(const Response& r) {
  return r.body().find("<body data-access=\"full\"") != std::string::npos &&
         r.body().find("<tr class=\"worker") != std::string::npos;
}
bool overviewPage(const Response& r) {
  return r.body().find("<body data-access=\"overview\"") != std::string::npos &&
         r.body().find("<tr class=\"worker") == std::string::npos &&
         r.body().find("id=\"access-note\"") != std::string::npos && r.body().find("node-a") == std::string::npos &&
         r.body().find("grad.") == std::string::npos && r.body().find("step 12") == std::string::npos;
}
nlohmann::json json(const Response& r) { return nlohmann::json::parse(r.body()); }

// Every path with one set of headers and one peer: "full", "overview", or the status code of a refusal.
struct Outcomes {
  std::string page, json, metrics;
};
std::string classify(const Response& r, const std::string& path) {
  if (r.result_int() != 200) return std::to_string(r.result_int());
  if (path == "/") return fullPage(r) ? "full" : overviewPage(r) ? "overview" : "?";
  if (path == "/status.json") {
    auto j = json(r);
    if (j.at("access") == "full" && j.contains("workers")) return "full";
    if (j.at("access") == "overview" && !j.contains("workers") && !j.contains("waits") && !j.contains("history"))
      return "overview";
    return "?";
  }
  return r.body().find("hvd_collectives_total{") != std::string::npos ? "full" : "?";
}
Outcomes outcomes(const Monitor& m, const ServerOptions& o, const Headers& h, const PeerInfo& p) {
  return {classify(get(m, o, "/", h, p), "/"), classify(get(m, o, "/status.json", h, p), "/status.json"),
          classify(get(m, o, "/metrics", h, p), "/metrics")};
}

// Lines of the Prometheus text: sample name with labels -> value; checks HELP/TYPE lines on the way.
std::map<std::string, std::string> samples(const std::string& text, std::set<std::string>* families = nullptr) {
  std::map<std::string, std::string> out;
  std::istringstream in(text);
  std::string line;
  std::string help, type;
  while (std::getline(in, line)) {
    if (line.rfind("# HELP ", 0) == 0) {
      help = line.substr(7, line.find(' ', 7) - 7);
      continue;
    }
    if (line.rfind("# TYPE ", 0) == 0) {
      type = line.substr(7, line.find(' ', 7) - 7);
      REQUIRE(type == help);
      if (families) {
        INFO(type);
        CHECK(families->insert(type).second);  // each family once
      }
      continue;
    }
    REQUIRE(!line.empty());
    const auto space = line.rfind(' ');
    const std::string series = line.substr(0, space);
    const std::string name = series.substr(0, series.find('{'));
    INFO(line);
    // The sample belongs to the family announced last (a histogram's _bucket, _sum, _count included).
    CHECK((name == type || name == type + "_bucket" || name == type + "_sum" || name == type + "_count"));
    CHECK(out.emplace(series, line.substr(space + 1)).second);
  }
  return out;
}

}  // namespace

TEST_CASE("status page: access by path, credential and peer", "[status]") {
  Monitor m("train.py --epochs 3", 4);
  feed(m);
  const ServerOptions open;
  const ServerOptions guarded = withToken();
  const PeerInfo remote{};  // an unknown peer: not trusted
  const auto expect = [](const Outcomes& got, const std::string& page, const std::string& js, const std::string& metrics) {
    CHECK(got.page == page);
    CHECK(got.json == js);
    CHECK(got.metrics == metrics);
  };

  SECTION("a server without a token shows everything to anyone") {
    expect(outcomes(m, open, {}, remote), "full", "full", "full");
    expect(outcomes(m, open, {{{"X-Hvd-Token", "anything"}}}, remote), "full", "full", "full");
  }
  SECTION("no credential from another user or host: the overview; /metrics 401") {
    expect(outcomes(m, guarded, {}, remote), "overview", "overview", "401");
    expect(outcomes(m, guarded, {}, otherUserPeer()), "overview", "overview", "401");
    auto metrics = get(m, guarded, "/metrics", {}, otherUserPeer());
    CHECK(metrics[http::field::www_authenticate] == "Bearer realm=\"hvd\"");
    auto overview = json(get(m, guarded, "/status.json", {}, remote));
    CHECK(overview.at("name") == "train.py --epochs 3");
    CHECK(overview.at("size") == 4);
    CHECK(overview.at("counts") == nlohmann::json({{"starting", 0}, {"joined", 0}, {"running", 2}, {"exited", 2}}));
    const std::string page = get(m, guarded, "/", {}, remote).body();
    CHECK(page.find("data-state=\"running\" data-count=\"2\"") != std::string::npos);
    CHECK(page.find("/?token=TOKEN") != std::string::npos);  // says how to get in
  }
  SECTION("this user's loopback connection: everything, without a token") {
    expect(outcomes(m, guarded, {}, sameUserPeer()), "full", "full", "full");
  }
  SECTION("X-Hvd-Token: right is everything, wrong is 403 on every path, even for this user") {
    expect(outcomes(m, guarded, {{{"X-Hvd-Token", kToken}}}, remote), "full", "full", "full");
    expect(outcomes(m, guarded, {{{"X-Hvd-Token", kToken + "0"}}}, remote), "403", "403", "403");
    expect(outcomes(m, guarded, {{{"X-Hvd-Token", ""}}}, sameUserPeer()), "403", "403", "403");
    CHECK(get(m, guarded, "/", {{{"X-Hvd-Token", "nope"}}}, remote).body() == "status port: wrong X-Hvd-Token\n");
  }
  SECTION("Authorization: Bearer, any case of the scheme; other schemes are not ours") {
    expect(outcomes(m, guarded, {{{"Authorization", "Bearer " + kToken}}}, remote), "full", "full", "full");
    expect(outcomes(m, guarded, {{{"Authorization", "bearer  " + kToken + " "}}}, remote), "full", "full", "full");
    expect(outcomes(m, guarded, {{{"Authorization", "Bearer wrong"}}}, remote), "403", "403", "403");
    expect(outcomes(m, guarded, {{{"Authorization", "Basic dXNlcjpwdw=="}}}, remote), "overview", "overview", "401");
  }
  SECTION("the hvd_token cookie: right is everything; wrong is 403 for others, ignored for this user") {
    expect(outcomes(m, guarded, {{{"Cookie", "theme=dark; hvd_token=" + kToken}}}, remote), "full", "full", "full");
    expect(outcomes(m, guarded, {{{"Cookie", "hvd_token=stale"}}}, remote), "403", "403", "403");
    expect(outcomes(m, guarded, {{{"Cookie", "hvd_token=stale"}}}, otherUserPeer()), "403", "403", "403");
    expect(outcomes(m, guarded, {{{"Cookie", "hvd_token=stale"}}}, sameUserPeer()), "full", "full", "full");
    CHECK(get(m, guarded, "/", {{{"Cookie", "hvd_token=stale"}}}, remote).body().find("/?token=TOKEN") !=
          std::string::npos);
    // Two Cookie fields (as HTTP/2 proxies send them): the one holding ours counts.
    expect(outcomes(m, guarded, {{{"Cookie", "a=1"}, {"Cookie", "hvd_token=" + kToken}}}, remote), "full", "full",
           "full");
  }
  SECTION("/?token=T sets the cookie and redirects; the cookie it sets lets in") {
    auto r = get(m, guarded, "/?token=" + kToken, {}, remote);
    CHECK(r.result_int() == 303);
    CHECK(r[http::field::location] == "/");
    const std::string cookie(r[http::field::set_cookie]);
    CHECK(cookie == "hvd_token=" + kToken + "; Path=/; HttpOnly; SameSite=Strict");
    const std::string pair = cookie.substr(0, cookie.find(';'));
    expect(outcomes(m, guarded, {{{"Cookie", pair}}}, remote), "full", "full", "full");

    CHECK(get(m, guarded, "/?token=wrong", {}, remote).result_int() == 403);
    CHECK(get(m, guarded, "/?token=", {}, sameUserPeer()).result_int() == 403);
    CHECK(get(m, guarded, "/?x=1&token=%zz", {}, remote).result_int() == 400);
    CHECK(get(m, guarded, "/?x=1", {}, remote).result_int() == 200);  // other parameters are ignored
  }
  SECTION("a token with characters a cookie cannot hold survives the cookie, %-escaped") {
    ServerOptions odd;
    odd.token = "a;b=c,d%e\"f";
    auto r = get(m, odd, "/?token=" + percentEncode(*odd.token), {}, remote);
    REQUIRE(r.result_int() == 303);
    const std::string cookie(r[http::field::set_cookie]);
    const std::string pair = cookie.substr(0, cookie.find(';'));
    CHECK(pair == "hvd_token=" + percentEncode(*odd.token));
    CHECK(pair.find_first_of(",\"; ") == std::string::npos);
    expect(outcomes(m, odd, {{{"Cookie", pair}}}, remote), "full", "full", "full");
  }
  SECTION("a server without a token redirects /?token= without a cookie") {
    auto r = get(m, open, "/?token=whatever", {}, remote);
    CHECK(r.result_int() == 303);
    CHECK(r.find(http::field::set_cookie) == r.end());
  }
}

TEST_CASE("status page: the server-rendered page shows every worker, the stuck one and the exited ones", "[status]") {
  Monitor m("train.py", 4);
  feed(m);
  auto r = get(m, withToken(), "/", {}, sameUserPeer());
  REQUIRE(r.result_int() == 200);
  const std::string& page = r.body();
  CHECK(r[http::field::content_type] == "text/html; charset=utf-8");
  CHECK(r["Content-Security-Policy"].find("default-src 'none'") != std::string::npos);
  CHECK(r[http::field::cache_control] == "no-store");

  // One row per worker with its hooks.
  std::regex row_re("<tr class=\"([^\"]*)\" data-id=\"(\\d+)\" data-rank=\"(\\d+)\" data-state=\"(\\w+)\" "
                    "data-stuck=\"(true|false)\"( data-exit-code=\"(-?\\d+)\")?( data-signal=\"(\\d+)\")?>");
  std::map<int, std::smatch> rows;
  for (auto it = std::sregex_iterator(page.begin(), page.end(), row_re); it != std::sregex_iterator(); ++it) {
    rows[std::stoi((*it)[3])] = *it;
  }
  REQUIRE(rows.size() == 4);
  CHECK(rows[0][1] == "worker");
  CHECK(rows[0][4] == "running");
  CHECK(rows[0][5] == "false");
  CHECK(rows[1][1] == "worker stuck");
  CHECK(rows[1][4] == "running");
  CHECK(rows[1][5] == "true");
  CHECK(rows[2][1] == "worker failed");
  CHECK(rows[2][4] == "exited");
  CHECK(rows[2][9] == "9");
  CHECK_FALSE(rows[2][6].matched);
  CHECK(rows[3][4] == "exited");
  CHECK(rows[3][7] == "0");
  CHECK_FALSE(rows[3][8].matched);
  CHECK(page.find("<span class=\"state-text\">killed by SIGKILL (9)</span>") != std::string::npos);
  CHECK(page.find("<span class=\"state-text\">exited 0</span>") != std::string::npos);
  // What the stuck rank holds up, and the wait itself.
  CHECK(page.find("<div class=\"holdup\">allreduce &#39;grad.&lt;3&gt;&#39; waits for this rank for 12 s</div>") !=
        std::string::npos);
  CHECK(page.find("<div id=\"waits\" data-count=\"1\">") != std::string::npos);
  CHECK(page.find("<td class=\"submitted\">0, 2, 3</td><td class=\"missing\">1</td>") != std::string::npos);
  // Counters and the chart.
  CHECK(page.find("<td class=\"collectives\" data-count=\"14\">14<div class=\"ops\">allreduce 12 · broadcast 2</div>") !=
        std::string::npos);
  CHECK(page.find("<td class=\"bytes\" data-bytes=\"4160\">4.1 KiB</td>") != std::string::npos);
  CHECK(page.find("<svg id=\"chart\"") != std::string::npos);
  // The two reports fall into one second or two: the chart has a point per second either way.
  const auto history = m.snapshot().history;
  REQUIRE(!history.empty());
  double bytes = 0, ops = 0, max_bytes = 0, max_ops = 0;
  for (const auto& p : history) {
    bytes += p.allreduce_bytes_per_s;
    ops += p.collectives_per_s;
    max_bytes = std::max(max_bytes, p.allreduce_bytes_per_s);
    max_ops = std::max(max_ops, p.collectives_per_s);
  }
  CHECK(bytes == 7096);
  CHECK(ops == 25);
  CHECK(page.find("id=\"chart-allreduce\" data-n=\"" + std::to_string(history.size()) + "\" data-max=\"" +
                  std::to_string(static_cast<int>(max_bytes)) + "\"") != std::string::npos);
  CHECK(page.find("id=\"chart-collectives\" data-n=\"" + std::to_string(history.size()) + "\" data-max=\"" +
                  std::to_string(static_cast<int>(max_ops)) + "\"") != std::string::npos);
  CHECK(page.find("<span class=\"count\" data-state=\"stuck\" data-count=\"1\">1 stuck</span>") != std::string::npos);
  // No external assets: nothing refers to another origin, and the only script is inline.
  std::string addresses = page;
  for (size_t at; (at = addresses.find("http://www.w3.org/2000/svg")) != std::string::npos;) addresses.erase(at, 26);
  CHECK(addresses.find("://") == std::string::npos);  // no URL but the SVG namespace
  CHECK(page.find("src=\"") == std::string::npos);
  CHECK(page.find("<link rel=\"icon\" href=\"data:,\">") != std::string::npos);  // and no favicon request
  CHECK(page.find("@import") == std::string::npos);
  CHECK(page.find("url(") == std::string::npos);
}

TEST_CASE("status page: hostile worker output is escaped in HTML, JSON and metrics", "[status]") {
  Monitor m("job <b>&\"'", 4);
  feed(m);
  const auto r = get(m, {}, "/", {}, {});
  const std::string& page = r.body();
  // Exactly one <script> element (ours), and none of the worker's markup survives as markup.
  size_t scripts = 0;
  for (size_t at = page.find("<script"); at != std::string::npos; at = page.find("<script", at + 1)) ++scripts;
  CHECK(scripts == 1);
  CHECK(page.find("<img") == std::string::npos);
  CHECK(page.find("<i>") == std::string::npos);
  CHECK(page.find("<b>") == std::string::npos);
  CHECK(page.find("<div class=\"line\">&lt;script&gt;alert(1)&lt;/script&gt;&quot;&gt;&lt;img src=x "
                  "onerror=alert(2)&gt;&amp;amp;\xEF\xBF\xBD[31m</div>") != std::string::npos);
  CHECK(page.find("<div class=\"line\">bytes \xEF\xBF\xBD\xEF\xBF\xBD and \xEF\xBF\xBD\xEF\xBF\xBD end</div>") !=
        std::string::npos);
  CHECK(page.find("<td class=\"host\">node-&quot;b&quot;\\\xEF\xBF\xBD&lt;i&gt;</td>") != std::string::npos);
  CHECK(page.find("<title>hvd · job &lt;b&gt;&amp;&quot;&#39;</title>") != std::string::npos);
  CHECK(page.find("data-name=\"grad.&lt;3&gt;\"") != std::string::npos);
  CHECK(validUtf8(page) == page);

  // JSON: strict parsers accept it; the lines come back as sent, invalid bytes as U+FFFD.
  const auto j = json(get(m, {}, "/status.json", {}, {}));
  const auto& w1 = j.at("workers").at(1);
  CHECK(w1.at("tail").at(0) == kHostileLine);
  CHECK(w1.at("tail").at(1) == "bytes \xEF\xBF\xBD\xEF\xBF\xBD and \xEF\xBF\xBD\xEF\xBF\xBD end");
  CHECK(w1.at("host") == "node-\"b\"\\\n<i>");

  // Metrics: label values escaped per the text format.
  const std::string metrics = get(m, {}, "/metrics", {}, {}).body();
  CHECK(metrics.find("hvd_worker_up{rank=\"1\",worker=\"1\",host=\"node-\\\"b\\\"\\\\\\n<i>\"} 1\n") !=
        std::string::npos);
  CHECK(validUtf8(metrics) == metrics);
}

TEST_CASE("status page: invalid UTF-8 is replaced, valid UTF-8 kept", "[status]") {
  const std::string fffd = "\xEF\xBF\xBD";
  CHECK(validUtf8("plain ascii") == "plain ascii");
  CHECK(validUtf8("\xC3\xA9\xE2\x82\xAC\xF0\x9F\x98\x80") == "\xC3\xA9\xE2\x82\xAC\xF0\x9F\x98\x80");  // é € 😀
  CHECK(validUtf8("\xC0\xAF") == fffd + fffd);                      // overlong '/'
  CHECK(validUtf8("\xE0\x80\xAF") == fffd + fffd + fffd);           // overlong, 3 bytes
  CHECK(validUtf8("\xED\xA0\x80") == fffd + fffd + fffd);           // a surrogate
  CHECK(validUtf8("\xF4\x90\x80\x80") == fffd + fffd + fffd + fffd);  // past U+10FFFF
  CHECK(validUtf8("ab\xE2\x82") == "ab" + fffd + fffd);             // truncated
  CHECK(validUtf8(std::string("a\0b", 3)) == std::string("a\0b", 3));
  CHECK(htmlEscape(std::string("a\0b\tc\x7f", 6)) == "a" + fffd + "b\tc" + fffd);
}

TEST_CASE("status page: Prometheus text, value by value", "[status]") {
  Monitor m("train.py", 4);
  feed(m);
  auto r = get(m, withToken(), "/metrics", {{{"X-Hvd-Token", kToken}}}, {});
  REQUIRE(r.result_int() == 200);
  CHECK(r[http::field::content_type] == "text/plain; version=0.0.4; charset=utf-8");
  CHECK(r.body().back() == '\n');
  std::set<std::string> families;
  const auto s = samples(r.body(), &families);
  const std::map<std::string, std::string> expected = {
      {"hvd_job_size", "4"},
      {"hvd_workers{state=\"starting\"}", "0"},
      {"hvd_workers{state=\"joined\"}", "0"},
      {"hvd_workers{state=\"running\"}", "2"},
      {"hvd_workers{state=\"exited\"}", "2"},
      {"hvd_worker_up{rank=\"0\",worker=\"0\",host=\"node-a\"}", "1"},
      {"hvd_worker_up{rank=\"2\",worker=\"2\",host=\"node-c\"}", "0"},
      {"hvd_worker_up{rank=\"3\",worker=\"3\",host=\"node-d\"}", "0"},
      {"hvd_worker_exit_code{rank=\"3\",worker=\"3\"}", "0"},
      {"hvd_worker_exit_signal{rank=\"2\",worker=\"2\"}", "9"},
      {"hvd_worker_stuck{rank=\"0\",worker=\"0\"}", "0"},
      {"hvd_worker_stuck{rank=\"1\",worker=\"1\"}", "1"},
      {"hvd_worker_stuck{rank=\"2\",worker=\"2\"}", "0"},
      {"hvd_worker_rss_bytes{rank=\"0\",worker=\"0\"}", "5242880"},
      {"hvd_worker_peak_rss_bytes{rank=\"0\",worker=\"0\"}", "6291456"},
      {"hvd_worker_peak_rss_bytes{rank=\"3\",worker=\"3\"}", "7340032"},
      {"hvd_worker_restarts_total", "0"},
      {"hvd_collectives_total{rank=\"0\",worker=\"0\",op=\"allreduce\"}", "12"},
      {"hvd_collectives_total{rank=\"0\",worker=\"0\",op=\"broadcast\"}", "2"},
      {"hvd_collectives_total{rank=\"1\",worker=\"1\",op=\"allreduce\"}", "11"},
      {"hvd_collective_bytes_total{rank=\"0\",worker=\"0\",op=\"allreduce\"}", "4096"},
      {"hvd_collective_bytes_total{rank=\"0\",worker=\"0\",op=\"broadcast\"}", "64"},
      {"hvd_collective_bytes_total{rank=\"1\",worker=\"1\",op=\"allreduce\"}", "3000"},
      {"hvd_collective_waits", "1"},
      {"hvd_stalled_workers", "1"},
      {"hvd_stall_warnings_total", "3"},
      {"hvd_elastic_rounds_total", "0"},
      {"hvd_rendezvous_requests_total{method=\"PUT\",code=\"200\"}", "2"},
      {"hvd_rendezvous_requests_total{method=\"GET\",code=\"404\"}", "1"},
      {"hvd_rendezvous_requests_total{method=\"GET\",code=\"200\"}", "1"},
      {"hvd_rendezvous_request_duration_seconds_bucket{le=\"0.0001\"}", "0"},
      {"hvd_rendezvous_request_duration_seconds_bucket{le=\"0.00025\"}", "1"},
      {"hvd_rendezvous_request_duration_seconds_bucket{le=\"0.0025\"}", "1"},
      {"hvd_rendezvous_request_duration_seconds_bucket{le=\"0.005\"}", "2"},
      {"hvd_rendezvous_request_duration_seconds_bucket{le=\"0.1\"}", "2"},
      {"hvd_rendezvous_request_duration_seconds_bucket{le=\"1\"}", "3"},
      {"hvd_rendezvous_request_duration_seconds_bucket{le=\"+Inf\"}", "3"},
      {"hvd_rendezvous_request_duration_seconds_count", "3"},
      {"hvd_rendezvous_long_polls_total", "1"},
  };
  for (const auto& [series, value] : expected) {
    INFO(series);
    REQUIRE(s.count(series));
    CHECK(s.at(series) == value);
  }
  CHECK(std::stod(s.at("hvd_rendezvous_request_duration_seconds_sum")) == Approx(0.5032));
  CHECK(std::stod(s.at("hvd_collective_wait_seconds")) >= 12.5);
  CHECK(std::stod(s.at("hvd_job_uptime_seconds")) >= 0);
  CHECK_FALSE(s.count("hvd_elastic_round"));  // not elastic: the family without a sample
  CHECK(s.count("hvd_worker_exit_code{rank=\"2\",worker=\"2\"}") == 0);  // killed: a signal, no code
  for (const char* family :
       {"hvd_workers", "hvd_worker_up", "hvd_worker_exit_code", "hvd_worker_exit_signal", "hvd_worker_peak_rss_bytes",
        "hvd_rendezvous_requests_total", "hvd_rendezvous_request_duration_seconds", "hvd_rendezvous_long_polls_total",
        "hvd_collectives_total", "hvd_collective_bytes_total", "hvd_stalled_workers", "hvd_stall_warnings_total",
        "hvd_collective_wait_seconds", "hvd_worker_restarts_total", "hvd_elastic_round", "hvd_elastic_rounds_total"}) {
    INFO(family);
    CHECK(families.count(family));
  }
  CHECK(r.body().find("# TYPE hvd_rendezvous_request_duration_seconds histogram\n") != std::string::npos);
  CHECK(r.body().find("# TYPE hvd_collectives_total counter\n") != std::string::npos);

  SECTION("an elastic round has its sample") {
    m.roundBegan(7);
    const auto elastic = samples(get(m, {}, "/metrics").body());
    CHECK(elastic.at("hvd_elastic_round") == "7");
    CHECK(elastic.at("hvd_elastic_rounds_total") == "1");
  }
}

TEST_CASE("status page: bad requests get 4xx with a one-line body naming what was wrong", "[status]") {
  Monitor m;
  const ServerOptions o = withToken();
  for (auto method : {http::verb::post, http::verb::put, http::verb::delete_, http::verb::options}) {
    auto r = get(m, o, "/", {}, sameUserPeer(), method);
    INFO(r.body());
    CHECK(r.result_int() == 405);
    CHECK(r[http::field::allow] == "GET, HEAD");
    CHECK(r.body() == "status port: method '" + std::string(http::to_string(method)) + "' not allowed; use GET or HEAD\n");
  }
  auto missing = get(m, o, "/secrets?token=x", {}, sameUserPeer());
  CHECK(missing.result_int() == 404);
  CHECK(missing.body() == "status port: no page '/secrets'; there are /, /status.json and /metrics\n");
  auto control = get(m, o, "/a\x01" "b", {}, sameUserPeer());
  CHECK(control.result_int() == 404);
  CHECK(control.body() == "status port: no page '/a?b'; there are /, /status.json and /metrics\n");
  auto long_target = get(m, o, "/" + std::string(kMaxStatusTargetBytes, 'x'), {}, sameUserPeer());
  CHECK(long_target.result_int() == 414);
  CHECK(long_target.body() == "status port: request target of 2049 bytes exceeds the limit of 2048 bytes\n");
  auto bad_escape = get(m, o, "/?token=%g1", {}, sameUserPeer());
  CHECK(bad_escape.result_int() == 400);
  CHECK(bad_escape.body() == "status port: malformed %-escape in the token parameter\n");
  for (const auto& r : {missing, long_target, bad_escape}) {
    CHECK(r[http::field::content_type] == "text/plain; charset=utf-8");
    CHECK(std::count(r.body().begin(), r.body().end(), '\n') == 1);
  }

  SECTION("HEAD: the GET's headers, no body") {
    for (const char* path : {"/", "/status.json", "/metrics"}) {
      INFO(path);
      auto g = get(m, o, path, {}, sameUserPeer());
      auto h = get(m, o, path, {}, sameUserPeer(), http::verb::head);
      CHECK(h.result_int() == 200);
      CHECK(h.body().empty());
      CHECK(h[http::field::content_type] == g[http::field::content_type]);
      // The page's uptime text may differ by a digit between the two; the length is what HEAD promises.
      CHECK(std::stoul(std::string(h[http::field::content_length])) > 0);
    }
  }
}
