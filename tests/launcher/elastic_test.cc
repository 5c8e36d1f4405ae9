// Elastic jobs: the round planner, and black-box runs of the real hvdrun driving small shell workers
// (restart on a healthy host, blacklisting, discovery changes and failures, --min-np and --reset-limit,
// teardown). Training through re-formations is tested with real libhvd workers in elastic_train_test.
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <set>
#include <regex>
#include <thread>

#include <catch2/catch.hpp>

#include "launcher/elastic_plan.h"
#include "tests/launcher/process.h"

using namespace hvd::launcher;
using namespace hvd::launcher::test;
using Cmd = std::vector<std::string>;
using namespace std::chrono_literals;

namespace {

HostSpec host(const std::string& name, int slots) {
  HostSpec h;
  h.name = name;
  h.slots = slots;
  return h;
}

// "host:local_rank=rank/size l<local_rank>/<local_size> x<cross_rank>/<cross_size>;" per placement.
std::string describe(const std::vector<Placement>& plan) {
  std::string out;
  for (const auto& p : plan) {
    out += p.host.name + ":" + std::to_string(p.local_rank) + "=" + std::to_string(p.rank) + "/" +
           std::to_string(p.size) + " l" + std::to_string(p.local_rank) + "/" + std::to_string(p.local_size) + " x" +
           std::to_string(p.cross_rank) + "/" + std::to_string(p.cross_size) + ";";
  }
  return out;
}

}  // namespace

std::string describe(const std::vector<ElasticPlace>& plan) {
  std::vector<Placement> places;
  for (const auto& e : plan) {
    places.push_back(e.place);
    CHECK(e.slot == slotName(e.place.host.name, e.index));
  }
  return describe(places);
}

std::set<std::string> all(const std::vector<std::string>& slots) { return {slots.begin(), slots.end()}; }

TEST_CASE("elastic rounds: slots host by host up to --max-np, survivors first", "[elastic][plan]") {
  const std::vector<HostSpec> hosts = {host("a", 2), host("b", 2), host("c", 1)};
  CHECK(offeredSlots(hosts, std::nullopt) == std::vector<std::string>{"a:0", "a:1", "b:0", "b:1", "c:0"});
  CHECK(offeredSlots(hosts, 3) == std::vector<std::string>{"a:0", "a:1", "b:0"});
  // First round: host order, local ranks 0..n-1; cross ranks over hosts with that local rank.
  auto first = planElasticRound(hosts, {}, all(offeredSlots(hosts, std::nullopt)), std::nullopt);
  CHECK(describe(first) == "a:0=0/5 l0/2 x0/3;a:1=1/5 l1/2 x0/2;b:0=2/5 l0/2 x1/3;b:1=3/5 l1/2 x1/2;c:0=4/5 l0/1 x2/3;");
  // --max-np 3 leaves b's second slot and c idle, even when they are ready.
  CHECK(describe(planElasticRound(hosts, {}, all(offeredSlots(hosts, std::nullopt)), 3)) ==
        "a:0=0/3 l0/2 x0/2;a:1=1/3 l1/2 x0/1;b:0=2/3 l0/1 x1/2;");
  // a:0 died: the round goes on without it. a:1 is its host's only member, so its local rank is 0.
  auto without = planElasticRound(hosts, {"a:1", "b:0", "b:1", "c:0"}, {}, std::nullopt);
  CHECK(describe(without) == "a:0=0/4 l0/1 x0/3;b:0=1/4 l0/2 x1/3;b:1=2/4 l1/2 x0/1;c:0=3/4 l0/1 x2/3;");
  CHECK(without[0].slot == "a:1");
  CHECK(without[0].index == 1);
  // Its replacement is ready: the survivors keep their order and come first (rank 0 holds the state), the
  // new process comes last; a's slots have their indexes as local ranks again.
  auto again = planElasticRound(hosts, {"a:1", "b:0", "b:1", "c:0"}, {"a:0"}, std::nullopt);
  CHECK(describe(again) == "a:1=0/5 l1/2 x0/2;b:0=1/5 l0/2 x1/3;b:1=2/5 l1/2 x1/2;c:0=3/5 l0/1 x2/3;a:0=4/5 l0/2 x0/3;");
  // Host b gone: its slots leave, the others close up.
  auto without_b = planElasticRound({host("a", 2), host("c", 1)}, {"a:0", "a:1", "b:0", "b:1", "c:0"}, {}, std::nullopt);
  CHECK(describe(without_b) == "a:0=0/3 l0/2 x0/2;a:1=1/3 l1/2 x0/1;c:0=2/3 l0/1 x1/2;");
  // A survivor whose slot is no longer offered (its host shrank) is left out; slots nobody holds are not
  // members.
  CHECK(planElasticRound({host("a", 1)}, {"a:1", "a:0"}, {}, std::nullopt).size() == 1);
  CHECK(planElasticRound({host("a", 3)}, {}, {}, std::nullopt).empty());
  CHECK(planElasticRound({}, {"a:0"}, {"a:1"}, std::nullopt).empty());
}

TEST_CASE("elastic blacklist cooldown: MIN, 2 MIN, 4 MIN ... capped at MAX", "[elastic][plan]") {
  CHECK(blacklistCooldown(1, {10, 100}) == 10s);
  CHECK(blacklistCooldown(2, {10, 100}) == 20s);
  CHECK(blacklistCooldown(4, {10, 100}) == 80s);
  CHECK(blacklistCooldown(5, {10, 100}) == 100s);
  CHECK(blacklistCooldown(1000, {10, 3600}) == 3600s);
}

namespace {

Completed hvdrun(Cmd args, const std::vector<std::string>& env = {}, std::chrono::milliseconds timeout = 60000ms) {
  args.insert(args.begin(), hvdrunPath());
  return runProcess(args, env, "", timeout);
}

void writeFile(const std::string& path, const std::string& text) {
  std::ofstream(path) << text;
}

// A discovery script printing the file `hosts` (rewritten by the test while the job runs).
std::string discoveryScript(const std::string& dir, const std::string& body = "cat \"$(dirname \"$0\")/hosts\"") {
  const std::string path = dir + "/discover.sh";
  writeFile(path, "#!/bin/sh\n" + body + "\n");
  ::chmod(path.c_str(), 0755);
  return path;
}

// Polls the file until it contains `text`.
bool waitForText(const std::string& path, const std::string& text, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (readFile(path).find(text) != std::string::npos) return true;
    std::this_thread::sleep_for(50ms);
  }
  return false;
}

// Shell for a worker that asks for its place the way libhvd does when it is started on standby (outside a
// round): GET /rank_and_size/<slot>?round=N until a round takes it in; then HOROVOD_RANK, HOROVOD_SIZE and
// HVD_ELASTIC_ROUND are the round's. $RAW is the raw-bytes client (tests/rendezvous/raw_request.cc).
const char* const kJoinIfStandby = R"SH(
if [ -n "${HVD_ELASTIC_STANDBY:-}" ]; then
  r=$HVD_ELASTIC_ROUND
  while :; do
    a=$(printf 'GET /rank_and_size/%s:%s?round=%s HTTP/1.1\r\nHost: x\r\nX-Hvd-Token: %s\r\n\r\n' \
      "$HOROVOD_HOSTNAME" "$HOROVOD_LOCAL_RANK" "$r" "${HVD_RENDEZVOUS_TOKEN:-}" |
      "$RAW" "$HOROVOD_GLOO_RENDEZVOUS_ADDR" "$HOROVOD_GLOO_RENDEZVOUS_PORT") || exit 20
    body=$(printf '%s\n' "$a" | tail -n 1)
    round=$(printf '%s\n' "$a" | tr -d '\r' | sed -n 's/^X-Hvd-Round: //p')
    case $body in
      -1,*) r=$round ;;
      [0-9]*) break ;;
      *) sleep 0.1 ;;
    esac
  done
  HOROVOD_RANK=${body%%,*}; rest=${body#*,}; HOROVOD_SIZE=${rest%%,*}; HVD_ELASTIC_ROUND=$round
fi
)SH";

std::string rawRequest() {
  const char* path = std::getenv("HVD_TEST_RAW_REQUEST");  // set by tests/launcher/CMakeLists.txt
  REQUIRE(path != nullptr);
  return "RAW=" + std::string(path);
}

size_t count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (auto pos = text.find(what); pos != std::string::npos; pos = text.find(what, pos + 1)) ++n;
  return n;
}

}  // namespace


TEST_CASE("elastic: a worker that fails on a healthy host is started again there, and the job goes on",
          "[elastic][job]") {
  const std::string marker = uniqueMarker();
  // Round 1: the process of slot localhost:0 (rank 0) fails. Round 2 goes on with the survivor (slot
  // localhost:1, now rank 0 of 1) while a new process for localhost:0 starts on standby; once it asks for
  // its place, round 3 takes it in as rank 1.
  const auto r = hvdrun({"-np", "2", "--min-np", "1", "-H", "localhost:2", "sh", "-c",
                         std::string(kJoinIfStandby) +
                             "echo \"slot $HOROVOD_HOSTNAME:$HOROVOD_LOCAL_RANK rank $HOROVOD_RANK of $HOROVOD_SIZE "
                             "round $HVD_ELASTIC_ROUND elastic $HOROVOD_ELASTIC timeout $HOROVOD_ELASTIC_TIMEOUT\"; "
                             "if [ $HVD_ELASTIC_ROUND = 1 ] && [ $HOROVOD_RANK = 0 ]; then exit 7; fi; sleep 2"},
                        {marker, rawRequest()});
  INFO(r.out << r.err);
  CHECK(r.exit_code == 0);
  CHECK_THAT(r.out, Catch::Contains("[0]<stdout>:slot localhost:0 rank 0 of 2 round 1 elastic 1 timeout 630"));
  CHECK_THAT(r.out, Catch::Contains("[1]<stdout>:slot localhost:1 rank 1 of 2 round 1"));
  CHECK_THAT(r.err, Catch::Contains("hvdrun: rank 0 (slot localhost:0, worker 0) on localhost failed with exit code 7; "
                                    "re-forming the job"));
  CHECK_THAT(r.err, Catch::Contains("hvdrun: elastic round 2: 1 ranks on localhost:1\n"));
  CHECK_THAT(r.err, Catch::Contains("hvdrun: elastic round 3: 2 ranks on localhost:2\n"));
  CHECK_THAT(r.out, Catch::Contains("[2]<stdout>:slot localhost:0 rank 1 of 2 round 3"));
  CHECK_THAT(r.err, !Catch::Contains("blacklist"));
  CHECK(processesWithEnv(marker).empty());
}

TEST_CASE("elastic: at --min-np = -np, a lost worker's replacement brings the job back to its size", "[elastic][job]") {
  // Without the replacement the job is below --min-np: the survivor waits for it, and the round that takes
  // it in is a new round although its slots are the old ones.
  const auto r = hvdrun({"-np", "2", "-H", "localhost:2", "--min-np", "2", "sh", "-c",
                         std::string(kJoinIfStandby) +
                             "echo \"rank $HOROVOD_RANK of $HOROVOD_SIZE round $HVD_ELASTIC_ROUND\"; "
                             "if [ $HVD_ELASTIC_ROUND = 1 ] && [ $HOROVOD_RANK = 1 ]; then exit 3; fi; sleep 2"},
                        {rawRequest()});
  INFO(r.out << r.err);
  CHECK(r.exit_code == 0);
  CHECK_THAT(r.err, Catch::Contains("hvdrun: only 1 processes are ready, fewer than --min-np 2"));
  CHECK_THAT(r.err, Catch::Contains("hvdrun: elastic round 2: 2 ranks on localhost:2"));
  CHECK_THAT(r.out, Catch::Contains("[2]<stdout>:rank 1 of 2 round 2"));
}

TEST_CASE("elastic: members asking for a new round re-form the job, although nobody is gone", "[elastic][job]") {
  // What workers do after a collective failed without a lost process (a timeout, a reset connection).
  const auto r = hvdrun({"-np", "2", "--min-np", "1", "-H", "localhost:2", "sh", "-c",
                         "a=$(printf 'GET /rank_and_size/%s:%s?round=1 HTTP/1.1\\r\\nHost: x\\r\\nX-Hvd-Token: %s\\r\\n\\r\\n' "
                         "\"$HOROVOD_HOSTNAME\" \"$HOROVOD_LOCAL_RANK\" \"$HVD_RENDEZVOUS_TOKEN\" | "
                         "\"$RAW\" \"$HOROVOD_GLOO_RENDEZVOUS_ADDR\" \"$HOROVOD_GLOO_RENDEZVOUS_PORT\"); "
                         "echo \"answer $(printf '%s\\n' \"$a\" | tail -n 1)\""},
                        {rawRequest()});
  INFO(r.out << r.err);
  CHECK(r.exit_code == 0);
  CHECK_THAT(r.err, Catch::Contains("hvdrun: elastic round 2: 2 ranks on localhost:2"));
  CHECK_THAT(r.out, Catch::Contains("<stdout>:answer 0,2,0,2,0,1"));
  CHECK_THAT(r.out, Catch::Contains("<stdout>:answer 1,2,1,2,0,1"));
}

TEST_CASE("elastic: a host whose workers keep failing is blacklisted, and the job goes on without it",
          "[elastic][job]") {
  // localhost and 127.0.0.1 are two names of this machine: two hosts to the driver.
  const auto r = hvdrun({"-np", "2", "--min-np", "1", "-H", "localhost:1,127.0.0.1:1", "sh", "-c",
                         "if [ $HOROVOD_HOSTNAME = 127.0.0.1 ]; then exit 5; fi; sleep 3; "
                         "echo \"done at round $HVD_ELASTIC_ROUND\""});
  INFO(r.out << r.err);
  CHECK(r.exit_code == 0);
  // The member fails in round 1, then the two standby processes started in its place.
  CHECK(count(r.err, "on 127.0.0.1 failed with exit code 5; re-forming the job") == 1);
  CHECK(count(r.err, "hvdrun: the standby process of slot 127.0.0.1:0 (worker ") == 2);
  CHECK_THAT(r.err, Catch::Contains("hvdrun: blacklisting host 127.0.0.1 for the rest of the job: 3 worker failures "
                                    "within 60 s"));
  CHECK_THAT(r.err, Catch::Contains("hvdrun: elastic round 2: 1 ranks on localhost:1"));
  CHECK_THAT(r.err, !Catch::Contains("elastic round 3"));
  CHECK_THAT(r.out, Catch::Contains("[0]<stdout>:done at round 1"));
}

TEST_CASE("elastic: with a cooldown range, a blacklisted host comes back", "[elastic][job]") {
  const auto tmp = tempDir();
  const std::string& dir = tmp.path();
  // The host fails three times, then works: after its 1 s cooldown it is used again.
  const auto r = hvdrun({"-np", "2", "--min-np", "1", "-H", "localhost:1,127.0.0.1:1", "--blacklist-cooldown-range",
                         "1", "2", "sh", "-c",
                         "if [ $HOROVOD_HOSTNAME = 127.0.0.1 ]; then n=$(ls " + dir +
                             " | wc -l); touch " + dir + "/f$$; [ $n -ge 3 ] || exit 5; echo back; exit 0; fi; sleep 5"});
  INFO(r.out << r.err);
  CHECK(r.exit_code == 0);
  CHECK_THAT(r.err, Catch::Contains("hvdrun: blacklisting host 127.0.0.1 for 1 s (--blacklist-cooldown-range)"));
  CHECK_THAT(r.err, Catch::Contains("hvdrun: host 127.0.0.1 is usable again after its cooldown"));
  CHECK_THAT(r.out, Catch::Contains("<stdout>:back"));
}

TEST_CASE("elastic: every worker of a round failing ends the job with the worker's code", "[elastic][job]") {
  const auto r = hvdrun({"-np", "2", "--min-np", "1", "-H", "localhost:2", "sh", "-c", "exit 4"});
  INFO(r.err);
  CHECK(r.exit_code == 4);
  // The two exits may be further apart than the driver's settle time: then round 2 began with the second.
  CHECK(std::regex_search(r.err, std::regex("hvdrun: error: every worker of elastic round [12] failed \\(lost: rank")));
}

TEST_CASE("elastic: --reset-limit ends the job when it would re-form once more", "[elastic][job]") {
  // Slot 1 fails at once (round 2 goes on without it), slot 2 a second later: a third round is one
  // re-formation too many. Standby processes never ask for a place here.
  const auto r = hvdrun({"-np", "3", "--min-np", "1", "--reset-limit", "1", "-H", "localhost:3", "sh", "-c",
                         "if [ -z \"${HVD_ELASTIC_STANDBY:-}\" ]; then case $HOROVOD_LOCAL_RANK in 1) exit 3;; 2) sleep 1; "
                         "exit 3;; esac; fi; sleep 10"});
  INFO(r.err);
  CHECK(r.exit_code == 1);
  CHECK_THAT(r.err, Catch::Contains("hvdrun: elastic round 2: 2 ranks on localhost:2"));
  CHECK_THAT(r.err, Catch::Contains("hvdrun: error: the job would re-form a 2nd time, past --reset-limit 1 (lost: "
                                    "rank 1 (slot localhost:1, worker 1) on localhost: exit code 3; rank 1 (slot "
                                    "localhost:2, worker 2) on localhost: exit code 3)"));
  CHECK(r.elapsed < 8s);  // not the survivor's 10 s
}

TEST_CASE("elastic: the discovery script adds and removes hosts; --max-np caps the job", "[elastic][job][discovery]") {
  const auto tmp = tempDir();
  const std::string& dir = tmp.path();
  writeFile(dir + "/hosts", "localhost:1\n");
  const std::string script = discoveryScript(dir);
  const std::string marker = uniqueMarker();
  const auto started = startProcess({hvdrunPath(), "-np", "1", "--max-np", "2", "--host-discovery-script", script,
                                     "sh", "-c",
                                     std::string(kJoinIfStandby) +
                                         "echo \"$HOROVOD_HOSTNAME rank $HOROVOD_RANK of $HOROVOD_SIZE round "
                                         "$HVD_ELASTIC_ROUND\"; sleep 30"},
                                    dir, {marker, rawRequest()});
  REQUIRE(waitForText(dir + "/out.txt", "localhost rank 0 of 1 round 1", 10s));
  // Two more hosts: one is taken (--max-np 2), in the order of the output.
  writeFile(dir + "/hosts", "localhost:1\n127.0.0.1:1\n127.0.0.2:1\n");
  REQUIRE(waitForText(dir + "/out.txt", "127.0.0.1 rank 1 of 2 round 2", 10s));
  // 127.0.0.1 leaves: its worker is stopped, localhost goes on alone (round 3), and 127.0.0.2's process
  // joins once it is ready (round 4).
  writeFile(dir + "/hosts", "localhost:1\n127.0.0.2:1\n");
  REQUIRE(waitForText(dir + "/err.txt", "hvdrun: elastic round 3: 1 ranks on localhost:1\n", 10s));
  REQUIRE(waitForText(dir + "/err.txt", "hvdrun: elastic round 4: 2 ranks on localhost:1, 127.0.0.2:1", 10s));
  REQUIRE(waitForText(dir + "/out.txt", "127.0.0.2 rank 1 of 2 round 4", 10s));
  ::kill(started.pid, SIGTERM);
  CHECK(waitProcess(started.pid, 20000ms) == 128 + SIGTERM);
  CHECK(waitUntilGone(marker, 5000ms).empty());
}

TEST_CASE("elastic: a discovery script that fails, prints garbage or hangs is reported once, and the job goes on",
          "[elastic][job][discovery]") {
  const auto tmp = tempDir();
  const std::string& dir = tmp.path();
  // Call 1 lists the host; later calls fail, then print garbage, then hang, then work again.
  const std::string script = discoveryScript(dir, R"(d=$(dirname "$0"); n=$(cat "$d/n" 2>/dev/null || echo 0)
echo $((n + 1)) > "$d/n"
if [ $n -eq 0 ]; then echo localhost:1; exit 0; fi
if [ $n -le 2 ]; then echo "no hosts today" >&2; exit 3; fi
if [ $n -le 4 ]; then echo "this is: not a host"; exit 0; fi
if [ $n -le 5 ]; then sleep 30; fi
echo localhost:1)");
  const auto r = hvdrun({"-np", "1", "--host-discovery-script", script, "sh", "-c",
                         "until n=$(cat " + dir + "/n); [ \"${n:-0}\" -ge 8 ]; do sleep 0.2; done; echo finished"},
                        {"HVD_DISCOVERY_TIMEOUT_SECONDS=1"});
  INFO(r.out << r.err);
  CHECK(r.exit_code == 0);
  CHECK_THAT(r.out, Catch::Contains("[0]<stdout>:finished"));
  CHECK_THAT(r.err, Catch::Contains("no hosts today"));  // the script's stderr is passed on
  CHECK(count(r.err, "' ended with exit code 3; keeping the hosts known so far and retrying every 1 s") == 1);
  CHECK(count(r.err, "printed what is not a host list: discovery output line 1") == 1);
  CHECK(count(r.err, "did not finish within 1 s (HVD_DISCOVERY_TIMEOUT_SECONDS) and was killed") == 1);
  CHECK(count(r.err, "hvdrun: host discovery script works again") == 1);
  CHECK_THAT(r.err, !Catch::Contains("elastic round 2"));
}

TEST_CASE("elastic: fewer than --min-np slots for longer than --elastic-timeout fails the job, naming what was lost",
          "[elastic][job][discovery]") {
  const auto tmp = tempDir();
  const std::string& dir = tmp.path();
  writeFile(dir + "/hosts", "localhost:1\n127.0.0.1:1\n");
  const std::string script = discoveryScript(dir);
  const auto started =
      startProcess({hvdrunPath(), "-np", "2", "--min-np", "2", "--elastic-timeout", "2", "--host-discovery-script",
                    script, "sh", "-c", "echo up; sleep 30"},
                   dir);
  REQUIRE(waitForText(dir + "/out.txt", "[1]<stdout>:up", 10s));
  writeFile(dir + "/hosts", "localhost:1\n");
  CHECK(waitProcess(started.pid, 20000ms) == 1);
  const std::string err = readFile(dir + "/err.txt");
  INFO(err);
  CHECK_THAT(err, Catch::Contains("hvdrun: only 1 processes are ready, fewer than --min-np 2; waiting up to 2 s "
                                  "(--elastic-timeout) for more"));
  CHECK_THAT(err, Catch::Contains("hvdrun: error: fewer than --min-np 2 processes were ready for 2 s (--elastic-timeout)"));
}

TEST_CASE("elastic: a job whose hosts never come fails after --elastic-timeout, saying what it found",
          "[elastic][job][discovery]") {
  const auto tmp = tempDir();
  const std::string& dir = tmp.path();
  writeFile(dir + "/hosts", "localhost:1\n");
  const auto r = hvdrun({"-np", "3", "--elastic-timeout", "1", "--host-discovery-script", discoveryScript(dir), "true"});
  CHECK(r.exit_code == 1);
  CHECK_THAT(r.err, Catch::Contains("hvdrun: error: fewer than -np 3 slots became available within 1 s "
                                    "(--elastic-timeout); hosts found: localhost:1"));
}

TEST_CASE("elastic: SIGKILL of hvdrun while the job re-forms leaves no process behind", "[elastic][job][signals]") {
  const auto tmp = tempDir();
  const std::string& dir = tmp.path();
  const std::string marker = uniqueMarker();
  // Slot 1 fails after 0.3 s, and so do the processes started in its place: the job re-forms and starts
  // processes all the time.
  const auto started = startProcess({hvdrunPath(), "-np", "3", "--min-np", "1", "-H", "localhost:3", "sh", "-c",
                                     "if [ $HOROVOD_LOCAL_RANK = 1 ]; then sleep 0.3; exit 1; fi; sleep 60"},
                                    dir, {marker});
  REQUIRE(waitForText(dir + "/err.txt", "elastic round 2", 10s));
  REQUIRE(waitForText(dir + "/err.txt", "the standby process of slot localhost:1", 10s));
  ::kill(started.pid, SIGKILL);
  waitProcess(started.pid, 5000ms);
  CHECK(waitUntilGone(marker, 5000ms).empty());
}

TEST_CASE("elastic: --dry-run shows the first round, every slot up to --max-np", "[elastic][job]") {
  const auto r = hvdrun({"-np", "2", "--min-np", "1", "--max-np", "3", "-H", "localhost:4", "--dry-run", "true"});
  CHECK(r.exit_code == 0);
  CHECK_THAT(r.out, Catch::StartsWith("elastic job: first round of 3 ranks"));
  CHECK(count(r.out, "\nrank ") == 3);
  CHECK(count(r.out, "HOROVOD_SIZE=3") == 3);
}
