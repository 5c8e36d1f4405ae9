// Black-box runs of the real hvdrun binary with small shell workers: environment, output forwarding,
// failure propagation, signals, start timeout, and the process tree after hvdrun exits by any path.
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include <regex>
#include <sstream>
#include <thread>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "launcher/cpu_binding.h"
#include "tests/launcher/process.h"

using namespace hvd::launcher::test;
using Cmd = std::vector<std::string>;
using namespace std::chrono_literals;

namespace {

Completed hvdrun(Cmd args, const std::vector<std::string>& env = {}, const std::string& input = "") {
  args.insert(args.begin(), hvdrunPath());
  return runProcess(args, env, input, 60000ms);
}

std::vector<std::string> lines(const std::string& text) {
  std::vector<std::string> out;
  std::stringstream in(text);
  std::string line;
  while (std::getline(in, line)) out.push_back(line);
  return out;
}

std::string joinWorker() {
  const char* path = std::getenv("HVD_TEST_JOIN_WORKER");  // set by tests/launcher/CMakeLists.txt
  REQUIRE(path != nullptr);
  return path;
}

std::string rawRequest() {
  const char* path = std::getenv("HVD_TEST_RAW_REQUEST");  // set by tests/launcher/CMakeLists.txt
  REQUIRE(path != nullptr);
  return path;
}

// A worker that rendezvous the way Horovod's own workers do: Horovod's exact request bytes (HTTP/1.1,
// Host, Content-Length, a new connection per request) and no token, whatever HVD_RENDEZVOUS_TOKEN says.
// Each rank PUTs /global/<rank>, polls until every rank's key is there, then DELETEs its key (finalize).
// $RAW is the raw-bytes client (tests/rendezvous/raw_request.cc).
const char* const kTokenlessWorker = R"SH(
req() {
  printf '%s %s HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: %s\r\n\r\n%s' "$1" "$2" "${#3}" "$3" |
    "$RAW" "$HOROVOD_GLOO_RENDEZVOUS_ADDR" "$HOROVOD_GLOO_RENDEZVOUS_PORT" --status-only
}
s=$(req PUT /global/$HOROVOD_RANK addr$HOROVOD_RANK); [ "$s" = 200 ] || { echo "PUT answered $s"; exit 10; }
r=0
while [ $r -lt $HOROVOD_SIZE ]; do
  tries=0
  until [ "$(req GET /global/$r '')" = 200 ]; do
    tries=$((tries + 1)); [ $tries -lt 1000 ] || { echo "key $r never came"; exit 11; }; sleep 0.01
  done
  r=$((r + 1))
done
s=$(req DELETE /global/$HOROVOD_RANK ''); [ "$s" = 200 ] || { echo "DELETE answered $s"; exit 12; }
[ -n "${HVD_RENDEZVOUS_TOKEN:-}" ] && token=set || token=unset
echo "rendezvous without a token: done (token $token)"
)SH";

// "0,1,4": CPUs as Python's ','.join prints them.
std::string commaList(const std::vector<int>& cpus) {
  std::string text;
  for (int cpu : cpus) {
    if (!text.empty()) text.push_back(',');
    text.append(std::to_string(cpu));
  }
  return text;
}

// Waits until `count` processes carry `marker`.
bool waitForProcesses(const std::string& marker, size_t count, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (processesWithEnv(marker).size() >= count) return true;
    std::this_thread::sleep_for(20ms);
  }
  return false;
}

}  // namespace

TEST_CASE("workers get horovodrun's environment, the token only through it", "[job]") {
  const auto r =
      hvdrun({"-np", "2", "-H", "localhost:2", "-x", "EXTRA=a b", "--fusion-threshold-mb", "2", "sh", "-c",
              "env | grep -E '^(HOROVOD_|HVD_|PYTHONUNBUFFERED|NCCL_SOCKET|EXTRA)' | sort; "
              "tr '\\0' ' ' </proc/$$/cmdline; echo"},
             {"HOROVOD_RANK=99", "HOROVOD_SIZE=99", "HVD_RENDEZVOUS_TOKEN=outer"});
  REQUIRE(r.exit_code == 0);
  for (const std::string rank : {"0", "1"}) {
    const std::string tag = "[" + rank + "]<stdout>:";
    for (const std::string& expected : std::vector<std::string>{
             "HOROVOD_HOSTNAME=localhost", "HOROVOD_RANK=" + rank, "HOROVOD_SIZE=2",
             "HOROVOD_LOCAL_RANK=" + rank, "HOROVOD_LOCAL_SIZE=2", "HOROVOD_CROSS_RANK=0",
             "HOROVOD_CROSS_SIZE=1", "HOROVOD_CONTROLLER=gloo", "HOROVOD_CPU_OPERATIONS=gloo",
             "HOROVOD_GLOO_RENDEZVOUS_ADDR=127.0.0.1", "HOROVOD_GLOO_IFACE=lo", "NCCL_SOCKET_IFNAME=lo",
             "PYTHONUNBUFFERED=1", "EXTRA=a b", "HOROVOD_FUSION_THRESHOLD=2097152"}) {
      CHECK_THAT(r.out, Catch::Contains(tag + expected + "\n"));
    }
    CHECK(std::regex_search(r.out,
                            std::regex("\\[" + rank + "\\]<stdout>:HOROVOD_GLOO_RENDEZVOUS_PORT=[0-9]+\n")));
  }
  std::smatch token;
  REQUIRE(std::regex_search(r.out, token, std::regex("HVD_RENDEZVOUS_TOKEN=([0-9a-f]{64})\n")));
  CHECK_THAT(r.out, !Catch::Contains("outer"));  // the enclosing job's token and ranks are not inherited
  // The enclosing job's rank and size, by name: a bare "=99" also matches the fresh token when it starts with
  // 99 (one job in 256).
  CHECK_THAT(r.out, !Catch::Contains("HOROVOD_RANK=99"));
  CHECK_THAT(r.out, !Catch::Contains("HOROVOD_SIZE=99"));
  for (const auto& line : lines(r.out)) {
    if (line.find("sh -c") != std::string::npos) CHECK(line.find(token[1].str()) == std::string::npos);
  }
}

TEST_CASE("workers keep the memory they free mapped, unless told otherwise", "[job][env]") {
  const char* worker = std::getenv("HVD_TEST_HEAP_WORKER");  // set by tests/launcher/CMakeLists.txt
  REQUIRE(worker != nullptr);
  const auto faults = [](const Completed& r) {
    std::smatch m;
    REQUIRE(std::regex_search(r.out, m, std::regex("faults after round 1: ([0-9]+)")));
    return std::stol(m[1]);
  };
  const std::string show = "echo \"tunables=[$GLIBC_TUNABLES]\"; exec " + std::string(worker);
  // hvdrun with no malloc setting of the caller's own, then exactly the variables of env.
  const auto hvdrun = [](Cmd args, const std::vector<std::string>& env = {}) {
    Cmd argv{"/usr/bin/env", "-u", "GLIBC_TUNABLES", "-u", "MALLOC_MMAP_THRESHOLD_", "-u", "MALLOC_TRIM_THRESHOLD_",
             "-u", "HVD_MALLOC_TUNING"};
    argv.insert(argv.end(), env.begin(), env.end());
    argv.push_back(hvdrunPath());
    argv.insert(argv.end(), args.begin(), args.end());
    return runProcess(argv, {}, "", 60000ms);
  };
  // Rounds 2-5 write 4 x 72 MiB = 73728 pages: given back to the kernel, every one faults again.
  const auto tuned = hvdrun({"-np", "1", "sh", "-c", show});
  REQUIRE(tuned.exit_code == 0);
  CHECK_THAT(tuned.out, Catch::Contains("tunables=[glibc.malloc.mmap_threshold=33554432:"
                                        "glibc.malloc.trim_threshold=1073741824]"));
  CHECK(faults(tuned) < 2000);
  for (const auto& off : {hvdrun({"-np", "1", "--no-malloc-tuning", "sh", "-c", show}),
                          hvdrun({"-np", "1", "sh", "-c", show}, {"HVD_MALLOC_TUNING=0"})}) {
    REQUIRE(off.exit_code == 0);
    CHECK_THAT(off.out, Catch::Contains("tunables=[]"));
    CHECK(faults(off) > 60000);
  }
  // The worker's own choice is left as it is, from hvdrun's environment or -x.
  const auto own = hvdrun({"-np", "1", "-x", "GLIBC_TUNABLES=glibc.malloc.trim_threshold=0", "sh", "-c", show});
  REQUIRE(own.exit_code == 0);
  CHECK_THAT(own.out, Catch::Contains("tunables=[glibc.malloc.trim_threshold=0]"));
  const auto added = hvdrun({"-np", "1", "sh", "-c", show}, {"GLIBC_TUNABLES=glibc.malloc.arena_max=2"});
  REQUIRE(added.exit_code == 0);
  CHECK_THAT(added.out, Catch::Contains("tunables=[glibc.malloc.arena_max=2:glibc.malloc.mmap_threshold="));
  const auto bad = hvdrun({"-np", "1", "true"}, {"HVD_MALLOC_TUNING=yes"});
  CHECK(bad.exit_code == 2);
  CHECK_THAT(bad.err, Catch::Contains("HVD_MALLOC_TUNING must be 1 (on) or 0, got 'yes'"));
  // --dry-run shows what the workers will get, decided from hvdrun's real environment.
  const auto dry = hvdrun({"-np", "1", "--dry-run", "true"}, {"GLIBC_TUNABLES=glibc.malloc.arena_max=2"});
  REQUIRE(dry.exit_code == 0);
  CHECK_THAT(dry.out, Catch::Contains(" GLIBC_TUNABLES=glibc.malloc.arena_max=2:glibc.malloc.mmap_threshold="
                                      "33554432:glibc.malloc.trim_threshold=1073741824 true"));
  const auto own_dry = hvdrun({"-np", "1", "--dry-run", "true"}, {"MALLOC_TRIM_THRESHOLD_=0"});
  REQUIRE(own_dry.exit_code == 0);
  CHECK_THAT(own_dry.out, !Catch::Contains("GLIBC_TUNABLES"));
  const auto off_dry = hvdrun({"-np", "1", "--dry-run", "--no-malloc-tuning", "true"});
  REQUIRE(off_dry.exit_code == 0);
  CHECK_THAT(off_dry.out, !Catch::Contains("GLIBC_TUNABLES"));
}

TEST_CASE("output: tags, \\r segments, missing final newline, raw bytes", "[job][output]") {
  const auto r = hvdrun({"-np", "1", "--summary", "none", "sh", "-c", "printf 'a\\rb\\nc'; printf '\\377\\376x\\n' >&2"});
  REQUIRE(r.exit_code == 0);
  CHECK(r.out == "[0]<stdout>:a\r[0]<stdout>:b\n[0]<stdout>:c\n");
  CHECK(r.err == "[0]<stderr>:\xff\xfex\n");

  const auto untagged = hvdrun({"-np", "2", "--no-tag-output", "sh", "-c", "echo r$HOROVOD_RANK"});
  CHECK((untagged.out == "r0\nr1\n" || untagged.out == "r1\nr0\n"));

  const auto stamped = hvdrun({"-np", "1", "-prefix-timestamp", "echo", "hi"});
  CHECK(std::regex_match(
      stamped.out,
      std::regex("[A-Z][a-z]{2} [A-Z][a-z]{2} [ 0-9][0-9] [0-9:]{8} [0-9]{4}\\[0\\]<stdout>:hi\n")));
}

TEST_CASE("output of many ranks under load never mixes lines", "[job][output]") {
  // 4 ranks x 4000 lines of ~300 bytes, written as fast as `yes` can.
  const auto r = hvdrun({"-np", "4", "--summary", "none", "sh", "-c",
                         "yes \"r$HOROVOD_RANK-$(printf '%0300d' 0)-end\" | head -n 4000; "
                         "yes \"e$HOROVOD_RANK\" | head -n 1000 >&2"});
  REQUIRE(r.exit_code == 0);
  const std::regex line_re("\\[([0-3])\\]<stdout>:r([0-3])-0{300}-end");
  std::map<std::string, int> counts;
  for (const auto& line : lines(r.out)) {
    std::smatch m;
    REQUIRE(std::regex_match(line, m, line_re));
    REQUIRE(m[1] == m[2]);
    ++counts[m[1]];
  }
  CHECK(counts == std::map<std::string, int>{{"0", 4000}, {"1", 4000}, {"2", 4000}, {"3", 4000}});
  int err_lines = 0;
  for (const auto& line : lines(r.err)) {
    std::smatch m;
    REQUIRE(std::regex_match(line, m, std::regex("\\[([0-3])\\]<stderr>:e([0-3])")));
    REQUIRE(m[1] == m[2]);
    ++err_lines;
  }
  CHECK(err_lines == 4000);
}

TEST_CASE("--output-filename writes DIR/rank.N/stdout and stderr", "[job][output]") {
  const auto tmp = tempDir();
  const std::string& dir = tmp.path();
  const auto r = hvdrun({"-np", "2", "--output-filename", dir + "/logs", "sh", "-c",
                         "echo out$HOROVOD_RANK; echo err$HOROVOD_RANK >&2"});
  REQUIRE(r.exit_code == 0);
  CHECK(readFile(dir + "/logs/rank.0/stdout") == "[0]<stdout>:out0\n");
  CHECK(readFile(dir + "/logs/rank.1/stderr") == "[1]<stderr>:err1\n");
  CHECK_THAT(r.out, Catch::Contains("[1]<stdout>:out1\n"));  // tee'd to the console too

  const auto single =
      hvdrun({"-np", "1", "--output-filename", dir + "/one", "echo", "x"});  // horovodrun: crash
  REQUIRE(single.exit_code == 0);
  CHECK(readFile(dir + "/one/rank.0/stdout") == "[0]<stdout>:x\n");

  const auto eleven = hvdrun({"-np", "11", "--output-filename", dir + "/eleven", "true"});
  REQUIRE(eleven.exit_code == 0);
  CHECK(access((dir + "/eleven/rank.00/stdout").c_str(), F_OK) == 0);
  CHECK(access((dir + "/eleven/rank.10/stderr").c_str(), F_OK) == 0);
}

TEST_CASE("stdin goes to rank 0 only", "[job]") {
  const auto r = hvdrun({"-np", "2", "sh", "-c", "cat; echo done$HOROVOD_RANK"}, {}, "hello\n");
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.out, Catch::Contains("[0]<stdout>:hello\n"));
  CHECK_THAT(r.out, !Catch::Contains("[1]<stdout>:hello"));
  CHECK_THAT(r.out, Catch::Contains("[1]<stdout>:done1\n"));
}

TEST_CASE("each worker leads its own process group and session", "[job]") {
  const auto r = hvdrun({"-np", "2", "sh", "-c", "echo $$ $(cut -d' ' -f5,6 /proc/$$/stat)"});
  REQUIRE(r.exit_code == 0);
  for (const auto& line : lines(r.out)) {
    std::smatch m;
    REQUIRE(std::regex_match(line, m, std::regex("\\[[01]\\]<stdout>:([0-9]+) ([0-9]+) ([0-9]+)")));
    CHECK(m[1] == m[2]);  // pgrp
    CHECK(m[1] == m[3]);  // session
  }
}

TEST_CASE("first failure: banner, the others stopped, the worker's exit code", "[job][failure]") {
  const std::string marker = uniqueMarker();
  const auto r =
      hvdrun({"-np", "3", "sh", "-c", "if [ $HOROVOD_RANK = 1 ]; then exit 3; fi; sleep 60"}, {marker});
  CHECK(r.exit_code == 3);
  CHECK_THAT(r.err, Catch::Contains("BAD TERMINATION OF RANK 1 ON HOST localhost") &&
                        Catch::Contains("EXIT STATUS: exit code 3"));
  // Rank 2 may not have been started yet when rank 1 failed: the start loop stops at the first failure.
  CHECK(std::regex_search(r.err, std::regex("TERMINATING THE REMAINING [12] WORKERS")));
  CHECK(r.elapsed < 30s);  // not the workers' 60 s
  CHECK(processesWithEnv(marker).empty());
}

TEST_CASE("a worker killed by signal N gives 128+N", "[job][failure]") {
  const auto r =
      hvdrun({"-np", "2", "sh", "-c", "if [ $HOROVOD_RANK = 0 ]; then kill -SEGV $$; fi; sleep 60"});
  CHECK(r.exit_code == 128 + SIGSEGV);
  CHECK_THAT(r.err, Catch::Contains("BAD TERMINATION OF RANK 0") && Catch::Contains("KILLED BY signal 11"));
}

TEST_CASE("a command that cannot be executed: 127 and a message naming it", "[job][failure]") {
  const auto r = hvdrun({"-np", "2", "/nonexistent/cmd", "arg"});
  CHECK(r.exit_code == 127);
  // Whichever rank fails first; the other may be stopped before it gets as far as exec.
  CHECK(std::regex_search(
      r.err, std::regex("hvdrun: rank [01]: cannot execute '/nonexistent/cmd': No such file or directory")));
  CHECK_THAT(r.err, !Catch::Contains("received SIG"));  // hvdrun itself got no signal
}

TEST_CASE("the command is looked up in the worker's PATH (-x PATH=...), as mpirun does", "[job][env]") {
  const hvd::test::TempDir tmp("/tmp/hvd-path-test-");
  const std::string& dir = tmp.path();
  auto write = [&](const std::string& name, const std::string& text, mode_t mode) {
    const std::string path = dir + "/" + name;
    FILE* f = std::fopen(path.c_str(), "w");
    REQUIRE(f != nullptr);
    std::fputs(text.c_str(), f);
    std::fclose(f);
    REQUIRE(::chmod(path.c_str(), mode) == 0);
  };
  write("hvd-only-here", "#!/bin/sh\necho \"found rank $HOROVOD_RANK args [$*]\"\n", 0755);
  write("hvd-no-shebang", "echo plain script $1\n", 0755);  // execvp runs these under /bin/sh
  write("hvd-not-executable", "#!/bin/sh\necho never\n", 0644);
  const std::string path = "PATH=" + dir + ":/usr/bin:/bin";

  const auto found = hvdrun({"-np", "2", "-x", path, "hvd-only-here", "a b"});
  CHECK(found.exit_code == 0);
  CHECK_THAT(found.out, Catch::Contains("[0]<stdout>:found rank 0 args [a b]"));
  CHECK_THAT(found.out, Catch::Contains("[1]<stdout>:found rank 1 args [a b]"));

  const auto script = hvdrun({"-np", "1", "-x", path, "hvd-no-shebang", "x"});
  CHECK(script.exit_code == 0);
  CHECK_THAT(script.out, Catch::Contains("[0]<stdout>:plain script x"));

  // Not in hvdrun's own PATH: without -x PATH the lookup fails, naming the command.
  const auto missing = hvdrun({"-np", "1", "hvd-only-here"});
  CHECK(missing.exit_code == 127);
  CHECK_THAT(missing.err, Catch::Contains("cannot execute 'hvd-only-here': No such file or directory"));

  const auto denied = hvdrun({"-np", "1", "-x", path, "hvd-not-executable"});
  CHECK(denied.exit_code == 127);
  CHECK_THAT(denied.err, Catch::Contains("cannot execute 'hvd-not-executable': Permission denied"));
  std::system(("rm -rf " + dir).c_str());
}

TEST_CASE("workers ignoring SIGTERM are killed after the grace period", "[job][failure]") {
  const std::string marker = uniqueMarker();
  const auto r = hvdrun({"-np", "2", "--termination-grace-seconds", "1", "sh", "-c",
                         "trap '' TERM; if [ $HOROVOD_RANK = 1 ]; then sleep 0.5; exit 5; fi; "
                         "while :; do sleep 1; done"},
                        {marker});
  CHECK(r.exit_code == 5);
  CHECK(r.elapsed < 20s);
  CHECK(processesWithEnv(marker).empty());
}

TEST_CASE("SIGINT, SIGTERM and SIGHUP to hvdrun are forwarded; exit 128+N; nothing left", "[job][signals]") {
  for (const int sig : {SIGINT, SIGTERM, SIGHUP}) {
    INFO("signal " << sig);
    const std::string marker = uniqueMarker();
    const auto tmp = tempDir();
    const std::string& dir = tmp.path();
    const auto started = startProcess({hvdrunPath(), "-np", "2", "--termination-grace-seconds", "2", "sh",
                                       "-c", "sleep 60; echo not-reached"},
                                      dir, {marker});
    REQUIRE(waitForProcesses(marker, 4, 20s));  // two shells, two sleeps
    ::kill(started.pid, sig);
    CHECK(waitProcess(started.pid, 30s) == 128 + sig);
    CHECK(waitUntilGone(marker, 10s).empty());
    CHECK_THAT(readFile(dir + "/err.txt"), Catch::Contains("hvdrun: received SIG"));
    CHECK_THAT(readFile(dir + "/out.txt"), !Catch::Contains("not-reached"));
  }
}

TEST_CASE("kill -9 of hvdrun: every worker process goes too", "[job][signals]") {
  const std::string marker = uniqueMarker();
  const auto tmp = tempDir();
  const std::string& dir = tmp.path();
  // Each worker is a shell with a child (sleep) and a background grandchild: PDEATHSIG alone would leave
  // the sleeps behind.
  const auto started = startProcess(
      {hvdrunPath(), "-np", "3", "sh", "-c", "sleep 120 & sleep 120; echo not-reached"}, dir, {marker});
  REQUIRE(waitForProcesses(marker, 9, 20s));
  ::kill(started.pid, SIGKILL);
  CHECK(waitProcess(started.pid, 10s) == 128 + SIGKILL);
  CHECK(waitUntilGone(marker, 10s).empty());
}

TEST_CASE("HVD_PARENT_DEATH_SIGNAL: hvdrun sets it on itself and passes nothing on; a bad value is one line",
          "[job][signals][env]") {
  const auto tmp = tempDir();
  const std::string marker = tmp.path() + "/started";
  const std::string variable = "HVD_PARENT_DEATH_SIGNAL=";
  // Asked for by its real parent (this test): the job runs, and no worker sees the variable.
  const auto ok = hvdrun({"-np", "2", "sh", "-c", "echo \"[${HVD_PARENT_DEATH_SIGNAL-unset}]\""},
                         {variable + "15:" + std::to_string(::getpid())});
  INFO(ok.err);
  CHECK(ok.exit_code == 0);
  auto out = lines(ok.out);  // the two ranks' lines in either order
  std::sort(out.begin(), out.end());
  CHECK(out == std::vector<std::string>{"[0]<stdout>:[unset]", "[1]<stdout>:[unset]"});
  // The parent named ended before hvdrun could set the signal: the signal at once, no job.
  const pid_t gone = ::fork();
  REQUIRE(gone >= 0);
  if (gone == 0) ::_exit(0);
  REQUIRE(::waitpid(gone, nullptr, 0) == gone);
  const auto orphan = hvdrun({"-np", "1", "touch", marker}, {variable + "15:" + std::to_string(gone)});
  CHECK(orphan.exit_code == 128 + SIGTERM);
  // A program between the starter (alive) and hvdrun, as a wrapper script that does not exec: the job runs.
  const auto wrapped = runProcess({"sh", "-c", hvdrunPath() + " -np 1 echo ran; echo \"hvdrun exit $?\""},
                                  {variable + "15:" + std::to_string(::getpid())}, "", 60000ms);
  CHECK_THAT(wrapped.out, Catch::Contains("ran\n") && Catch::EndsWith("hvdrun exit 0\n"));
  for (const std::string value : {"abc", "15", "0:5", "65:5", "15:", "15:x", ":5", "15:-3", "15:5:5"}) {
    const auto r = hvdrun({"-np", "1", "touch", marker}, {variable + value});
    INFO(value << ": " << r.err);
    CHECK(r.exit_code == 2);
    CHECK(lines(r.err) == std::vector<std::string>{"hvdrun: error: HVD_PARENT_DEATH_SIGNAL=\"" + value +
                                                       "\": expected <signal number 1-64>:<parent pid>",
                                                   "Try 'hvdrun --help' for the flags and examples."});
  }
  CHECK(::access(marker.c_str(), F_OK) != 0);  // no worker ran
}

TEST_CASE(
    "--bind-to core: each worker's threads on a core of their own; a worker beyond the cores fails, "
    "naming them",
    "[job][bind]") {
  const auto cpus = hvd::launcher::allowedCpus();
  const auto cores = hvd::launcher::coresOf(cpus);  // what hvdrun, started by this process, may use
  REQUIRE(!cores.empty());
  const int np = static_cast<int>(std::min<size_t>(2, cores.size()));
  // A thread the worker starts after exec reports its own mask: it inherited the binding.
  const std::string report =
      "/usr/bin/python3 -c \"import os, threading; t = threading.Thread(target=lambda: "
      "print(','.join(map(str, sorted(os.sched_getaffinity(0)))))); t.start(); t.join()\"";
  const auto bound = hvdrun({"--bind-to", "core", "-np", std::to_string(np), "sh", "-c", report});
  INFO(bound.err);
  REQUIRE(bound.exit_code == 0);
  auto out = lines(bound.out);
  std::sort(out.begin(), out.end());
  std::vector<std::string> want;
  for (int i = 0; i < np; ++i) {
    want.push_back("[" + std::to_string(i) + "]<stdout>:" + commaList(cores[static_cast<size_t>(i)]));
  }
  CHECK(out == want);
  // Without it (and with --bind-to none), a worker keeps every CPU hvdrun has.
  const auto unbound = hvdrun({"--bind-to", "none", "-np", "1", "sh", "-c", report});
  CHECK(unbound.out == "[0]<stdout>:" + commaList(cpus) + "\n");
  // One more worker than the host has cores: that rank fails to start (127), the message naming the cores.
  const int over = static_cast<int>(cores.size());
  const auto beyond = hvdrun({"--bind-to", "core", "-np", std::to_string(over + 1), "true"});
  CHECK(beyond.exit_code == 127);
  CHECK_THAT(beyond.err,
             Catch::Contains("[" + std::to_string(over) + "]<stderr>:hvdrun: rank " + std::to_string(over) +
                             ": --bind-to core: localhost has " + std::to_string(cores.size()) +
                             (cores.size() == 1 ? " core" : " cores") + " for the job's workers (CPUs " +
                             hvd::launcher::cpuList(cpus) + "), too few for worker " +
                             std::to_string(over + 1) + " of that host\n"));
}

TEST_CASE("after a successful job no background child of a worker remains", "[job]") {
  const std::string marker = uniqueMarker();
  const auto r = hvdrun({"-np", "2", "sh", "-c", "sleep 120 >/dev/null 2>&1 & echo started"}, {marker});
  CHECK(r.exit_code == 0);
  CHECK(waitUntilGone(marker, 5s).empty());
}

TEST_CASE("--dry-run prints each rank and starts nothing", "[job]") {
  const auto tmp = tempDir();
  const std::string& dir = tmp.path();
  const auto r = hvdrun(
      {"-np", "3", "-H", "localhost:2,127.0.0.1:1", "--dry-run", "-x", "A=it's", "touch", dir + "/ran"});
  REQUIRE(r.exit_code == 0);
  const auto out = lines(r.out);
  REQUIRE(out.size() == 3);
  CHECK_THAT(out[0], Catch::StartsWith("rank 0 on localhost (local): env ") &&
                         Catch::Contains("HOROVOD_RANK=0 ") && Catch::Contains("HOROVOD_LOCAL_SIZE=2 ") &&
                         Catch::Contains("A='it'\"'\"'s'") &&
                         Catch::Contains("HVD_RENDEZVOUS_TOKEN='<secret>'") &&
                         Catch::EndsWith(" touch " + dir + "/ran"));
  CHECK_THAT(out[2], Catch::StartsWith("rank 2 on 127.0.0.1 (local)") &&
                         Catch::Contains("HOROVOD_CROSS_RANK=1 ") &&
                         Catch::Contains("HOROVOD_HOSTNAME=127.0.0.1 "));
  CHECK(access((dir + "/ran").c_str(), F_OK) != 0);
}

TEST_CASE("--start-timeout names the ranks that did not join the rendezvous", "[job][rendezvous]") {
  const std::string marker = uniqueMarker();
  // Ranks 0 and 2 join (PUT global/rank_<r> with the token), rank 1 does not; all then sleep.
  const auto r =
      hvdrun({"-np", "3", "--start-timeout", "4", "--termination-grace-seconds", "1", joinWorker(), "60"},
             {marker, "HVD_TEST_NO_JOIN=1"});
  CHECK(r.exit_code == 1);
  CHECK_THAT(r.out, Catch::Contains("[0]<stdout>:joined 0") && Catch::Contains("[2]<stdout>:joined 2"));
  CHECK_THAT(r.err, Catch::Contains(
                        "start timeout: rank(s) 1 (on localhost) did not join the rendezvous within 4 s"));
  CHECK(r.elapsed < 30s);
  CHECK(processesWithEnv(marker).empty());

  // Everyone joins: the timeout passes silently (the workers outlive it).
  const auto ok = hvdrun({"-np", "2", "--summary", "none", "--start-timeout", "3", joinWorker(), "5"});
  CHECK(ok.exit_code == 0);
  CHECK(ok.err.empty());
}

TEST_CASE("--verbose reports when every rank has joined the rendezvous, once", "[job][rendezvous]") {
  const auto all = hvdrun({"--verbose", "-np", "3", joinWorker()});
  CHECK(all.exit_code == 0);
  const std::regex line(R"(hvdrun: all 3 ranks joined the rendezvous \d+ ms after hvdrun started\n)");
  CHECK(std::distance(std::sregex_iterator(all.out.begin(), all.out.end(), line), std::sregex_iterator()) == 1);
  // Rank 1 never joins: no such line.
  const auto partial = hvdrun({"--verbose", "-np", "3", joinWorker()}, {"HVD_TEST_NO_JOIN=1"});
  CHECK(partial.exit_code == 0);
  CHECK_THAT(partial.out, !Catch::Contains("ranks joined the rendezvous"));
}

TEST_CASE("a remote host that cannot be reached fails the job before anything starts", "[job]") {
  const auto tmp = tempDir();
  const std::string& dir = tmp.path();
  const auto r = hvdrun(
      {"-np", "2", "-H", "localhost:1,remote-host-that-does-not-resolve.invalid:1", "touch", dir + "/ran"});
  CHECK(r.exit_code == 1);
  CHECK(access((dir + "/ran").c_str(), F_OK) != 0);  // rank 0 (local) was not started either
  CHECK_THAT(r.err, Catch::Contains("remote-host-that-does-not-resolve.invalid"));
}

TEST_CASE("--start-timeout counts ranks whose rendezvous already completed (real libhvd workers)",
          "[job][rendezvous]") {
  const char* worker = std::getenv("HVD_TEST_TRAIN_LINREG");
  if (!worker) {
    WARN("examples/train_linreg not built: skipped");
    return;
  }
  // The global scope is complete (and erased by the server) long before the deadline; the job then keeps
  // running past it and must not be stopped.
  const auto r = hvdrun(
      {"-np", "2", "--start-timeout", "3", "sh", "-c", std::string(worker) + " >/dev/null && sleep 4"});
  CHECK(r.exit_code == 0);
  CHECK_THAT(r.err, !Catch::Contains("start timeout"));
}

TEST_CASE("a closed stdout (hvdrun ... | head) ends the job", "[job][output]") {
  const std::string marker = uniqueMarker();
  const auto r = runProcess({"sh", "-c", hvdrunPath() + " -np 2 yes | head -n 3"}, {marker}, "", 60000ms);
  CHECK(r.exit_code == 0);
  CHECK(lines(r.out).size() == 3);
  CHECK(waitUntilGone(marker, 10s).empty());
}

TEST_CASE("a local job of workers that send no token (as Horovod's do) rendezvous",
          "[job][rendezvous][token]") {
  const auto r =
      hvdrun({"-np", "3", "-H", "localhost:3", "--summary", "none", "sh", "-c", kTokenlessWorker}, {"RAW=" + rawRequest()});
  INFO(r.out << r.err);
  CHECK(r.exit_code == 0);
  for (int rank = 0; rank < 3; ++rank) {
    CHECK_THAT(r.out, Catch::Contains("[" + std::to_string(rank) +
                                      "]<stdout>:rendezvous without a token: done (token set)"));
  }
  CHECK(r.err.empty());  // nothing refused, nothing to explain
}

TEST_CASE("--no-rendezvous-token: workers get no token and tokenless requests are served",
          "[job][rendezvous][token]") {
  for (const auto& [flags, env] : std::vector<std::pair<Cmd, std::vector<std::string>>>{
           {{"--no-rendezvous-token"}, {}}, {{}, {"HVD_NO_RENDEZVOUS_TOKEN=1"}}}) {
    Cmd args = flags;
    args.insert(args.end(), {"-np", "2", "sh", "-c", kTokenlessWorker});
    auto full_env = env;
    full_env.push_back("RAW=" + rawRequest());
    full_env.push_back("HVD_RENDEZVOUS_TOKEN=outer");  // an enclosing job's token is not inherited either
    const auto r = hvdrun(args, full_env);
    INFO(r.out << r.err);
    CHECK(r.exit_code == 0);
    CHECK_THAT(r.out, Catch::Contains("[0]<stdout>:rendezvous without a token: done (token unset)") &&
                          Catch::Contains("[1]<stdout>:rendezvous without a token: done (token unset)"));
  }
  const auto dry = hvdrun({"--no-rendezvous-token", "-np", "1", "--dry-run", "true"});
  CHECK(dry.exit_code == 0);
  CHECK_THAT(dry.out, !Catch::Contains("HVD_RENDEZVOUS_TOKEN"));
  const auto verbose = hvdrun({"--no-rendezvous-token", "--verbose", "-np", "1", "true"});
  CHECK_THAT(verbose.out,
             Catch::Contains("(no token (--no-rendezvous-token): open to anyone who reaches it)"));
}

TEST_CASE("a local job: another user's tokenless request is refused, explained once, and the job goes on",
          "[job][rendezvous][token]") {
  if (::geteuid() != 0) {
    WARN("not root: cannot run a client as another user here (setpriv); case not run");
    return;
  }
  // The client must be executable by nobody: a copy in a directory everyone can search.
  const auto tmp = tempDir();
  const std::string& dir = tmp.path();
  ::chmod(dir.c_str(), 0755);
  const std::string raw = dir + "/rendezvous_raw_request";
  REQUIRE(runProcess({"cp", rawRequest(), raw}).exit_code == 0);
  ::chmod(raw.c_str(), 0755);
  const std::string as_nobody =
      "for i in 1 2; do printf 'GET /global/0 HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 0\r\n\r\n' | "
      "setpriv --reuid nobody --regid nogroup --clear-groups \"$RAW\" \"$HOROVOD_GLOO_RENDEZVOUS_ADDR\" "
      "\"$HOROVOD_GLOO_RENDEZVOUS_PORT\" --status-only | sed 's/^/nobody got /'; done; ";
  const auto r = hvdrun({"-np", "2", "--summary", "none", "sh", "-c", as_nobody + kTokenlessWorker}, {"RAW=" + raw});
  INFO(r.out << r.err);
  CHECK(r.exit_code == 0);
  CHECK_THAT(r.out,
             Catch::Contains("[0]<stdout>:nobody got 403") && Catch::Contains("[1]<stdout>:nobody got 403"));
  CHECK_THAT(r.out, Catch::Contains("[1]<stdout>:rendezvous without a token: done (token set)"));
  // Four refusals, one line.
  const auto err = lines(r.err);
  REQUIRE(err.size() == 1);
  CHECK_THAT(err[0],
             Catch::StartsWith("hvdrun: warning: the rendezvous server refused a request without a token "
                               "(GET /global/0) from 127.0.0.1:") &&
                 Catch::Contains("a process of another user (uid 65534)") &&
                 Catch::Contains("the job goes on") && Catch::Contains("--no-rendezvous-token"));
}

TEST_CASE("the end-of-job summary: a table on stderr and --summary json FILE, for a job with a failing rank",
          "[job][summary]") {
  const auto tmp = tempDir();
  const std::string& dir = tmp.path();
  const std::string json_path = dir + "/summary.json";
  // Rank 1 fails with 3 once every rank runs (hvdrun starts no more ranks after a failure, so failing at
  // once could leave rank 2 unstarted); ranks 0 and 2 are stopped by hvdrun (SIGTERM to their shell).
  const auto r = hvdrun({"-np", "3", "--summary", "json", json_path, "sh", "-c",
                         "touch " + dir + "/started.$HOROVOD_RANK; if [ $HOROVOD_RANK = 1 ]; then "
                         "for i in $(seq 200); do [ $(ls " + dir + " | grep -c '^started') = 3 ] && break; "
                         "sleep 0.05; done; exit 3; fi; exec sleep 30"});
  INFO(r.err);
  REQUIRE(r.exit_code == 3);
  const auto err = lines(r.err);
  // The heading, the column names, one row per rank in rank order, at the very end of stderr.
  REQUIRE(err.size() >= 5);
  const size_t head = err.size() - 5;
  CHECK(std::regex_match(err[head], std::regex("hvdrun: job summary: 3 ranks in [0-9.]+ s, exit code 3, "
                                               "3 ranks did not exit 0")));
  CHECK(std::regex_match(err[head + 1], std::regex(" +rank +host +end +wall s +peak RSS +collectives +bytes")));
  CHECK(std::regex_match(err[head + 2], std::regex(" +0 +localhost +signal 15 \\(Terminated\\) +[0-9.]+ +[0-9.]+ "
                                                   "[KMG]?i?B +- +-")));
  CHECK(std::regex_match(err[head + 3], std::regex(" +1 +localhost +exit 3 +[0-9.]+ +[0-9.]+ [KMG]?i?B +- +-")));
  CHECK(std::regex_match(err[head + 4], std::regex(" +2 +localhost +signal 15 \\(Terminated\\) .*")));

  const auto json = nlohmann::json::parse(readFile(json_path));
  CHECK(json["exit_code"] == 3);
  REQUIRE(json["ranks"].size() == 3);
  for (int rank = 0; rank < 3; ++rank) {
    const auto& row = json["ranks"][rank];
    INFO(row.dump());
    CHECK(row["rank"] == rank);
    CHECK(row["host"] == "localhost");
    CHECK(row["state"] == "exited");
    CHECK(row["pid"].is_number_integer());
    CHECK(row["peak_rss_bytes"].get<uint64_t>() > 100000);  // a shell is at least this big
    CHECK(row["collectives"].is_null());  // a shell sends no reports
  }
  CHECK(json["ranks"][1]["exit_code"] == 3);
  CHECK(json["ranks"][1]["signal"].is_null());
  CHECK(json["ranks"][0]["signal"] == SIGTERM);
  CHECK(json["ranks"][2]["end"] == "signal 15 (Terminated)");

  // --summary none: nothing after the job's own output.
  const auto quiet = hvdrun({"-np", "1", "--summary", "none", "true"});
  CHECK(quiet.exit_code == 0);
  CHECK(quiet.err.empty());
}

TEST_CASE("the summary is printed on Ctrl-C too", "[job][summary][signals]") {
  const std::string marker = uniqueMarker();
  const auto tmp = tempDir();
  const std::string& dir = tmp.path();
  const auto started = startProcess({hvdrunPath(), "-np", "2", "--termination-grace-seconds", "2", "sleep", "60"},
                                    dir, {marker});
  // hvdrun and its guardian (local/guardian.h) carry the marker too: four processes are those and both
  // workers. At fewer, the SIGINT could come between the two workers' starts, and the summary would rightly
  // list one rank.
  REQUIRE(waitForProcesses(marker, 4, 20s));
  ::kill(started.pid, SIGINT);
  CHECK(waitProcess(started.pid, 30s) == 128 + SIGINT);
  const std::string err = readFile(dir + "/err.txt");
  CHECK_THAT(err, Catch::Contains("hvdrun: job summary: 2 ranks in ") && Catch::Contains(", exit code 130"));
  CHECK(std::regex_search(err, std::regex("\n +1 +localhost +signal 2 \\(Interrupt\\) ")));
}

TEST_CASE("--summary and --status-port errors: one line each (and the help hint), before anything starts",
          "[job][summary][cli]") {
  const auto tmp = tempDir();
  const std::string& dir = tmp.path();
  const std::string marker = dir + "/started";
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--summary", "csv"}, "hvdrun: error: argument --summary: invalid choice 'csv' (choose from table, none, json FILE)"},
      {{"--summary", "json", "/nonexistent-dir/s.json"},
       "hvdrun: error: argument --summary: cannot write '/nonexistent-dir/s.json': No such file or directory"},
      {{"--status-port", "70000"}, "hvdrun: error: argument --status-port: 70000 is not a port (0-65535)"},
      {{"--status-port", "http"}, "hvdrun: error: argument --status-port: invalid int value: 'http'"},
      {{"--status-address", "127.0.0.1"}, "hvdrun: error: argument --status-address: needs --status-port"},
  };
  for (const auto& [flags, message] : cases) {
    std::vector<std::string> args = {"-np", "1"};
    args.insert(args.end(), flags.begin(), flags.end());
    args.insert(args.end(), {"touch", marker});
    const auto r = hvdrun(args);
    INFO(r.err);
    CHECK(r.exit_code == 2);
    CHECK(lines(r.err) == std::vector<std::string>{message, "Try 'hvdrun --help' for the flags and examples."});
  }
  // "json" takes the next word as its FILE (two words, as argparse's nargs=2): with nothing after it, an error.
  const auto no_file = hvdrun({"-np", "1", "--summary", "json"});
  CHECK(no_file.exit_code == 2);
  CHECK_THAT(no_file.err, Catch::StartsWith("hvdrun: error: argument --summary: json needs a FILE: --summary json FILE\n"));
  // An address the status port cannot bind: the server's error (exit 1, as for the rendezvous port itself).
  const auto unbindable = hvdrun({"-np", "1", "--status-port", "0", "--status-address", "192.0.2.1", "touch", marker});
  CHECK(unbindable.exit_code == 1);
  CHECK(lines(unbindable.err) ==
        std::vector<std::string>{"hvdrun: error: status port: cannot listen on 192.0.2.1:0: bind: Cannot assign "
                                 "requested address (errno 99)"});
  CHECK(::access(marker.c_str(), F_OK) != 0);  // no worker ran
}

TEST_CASE("the summary counts what real libhvd workers did, from their reports", "[job][summary]") {
  const char* worker = std::getenv("HVD_TEST_TRAIN_LINREG");
  if (!worker) {
    WARN("examples/train_linreg not built: skipped");
    return;
  }
  const auto tmp = tempDir();
  const std::string& dir = tmp.path();
  const auto r = hvdrun({"-np", "3", "--summary", "json", dir + "/s.json", worker});
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  const auto json = nlohmann::json::parse(readFile(dir + "/s.json"));
  REQUIRE(json["ranks"].size() == 3);
  // Every rank runs the same collectives on the same shapes: equal counts and bytes, all non-zero, and the
  // allreduces among them.
  const auto& first = json["ranks"][0];
  REQUIRE(first["collectives"].is_number_integer());
  CHECK(first["collectives"].get<uint64_t>() > 10);
  CHECK(first["bytes"].get<uint64_t>() > 0);
  CHECK(first["by_op"]["allreduce"]["count"].get<uint64_t>() > 0);
  for (const auto& row : json["ranks"]) {
    CHECK(row["collectives"] == first["collectives"]);
    CHECK(row["bytes"] == first["bytes"]);
    CHECK(row["by_op"] == first["by_op"]);
  }
  // The table shows the same count.
  CHECK_THAT(r.err, Catch::Contains(" " + std::to_string(first["collectives"].get<uint64_t>()) + " "));
}
