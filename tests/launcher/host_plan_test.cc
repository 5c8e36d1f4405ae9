// Host plans: -H, hostfiles, Slurm node lists, and horovodrun's rank assignment.
#include <catch2/catch.hpp>

#include "launcher/host_plan.h"
#include "base/error.h"
#include "tests/common/throws.h"

using namespace hvd::launcher;

namespace {

std::string hostsText(const std::vector<HostSpec>& hosts) {
  std::string out;
  for (const auto& h : hosts)
    out += (out.empty() ? "" : ",") + displayName(h) + ":" + std::to_string(h.slots);
  return out;
}

}  // namespace

TEST_CASE("-H host lists", "[host_plan]") {
  struct Case {
    std::string spec;
    std::string expected;
  };
  const std::vector<Case> cases = {
      {"localhost:4", "localhost:4"},
      {"a:2,b:4", "a:2,b:4"},
      {" a:2 , b:1 ", "a:2,b:1"},
      {"host1", "host1:1"},  // deviation: slots default to 1
      {"worker-0.example.com:8", "worker-0.example.com:8"},
      {"alice@gpu1:2,bob@gpu2", "alice@gpu1:2,bob@gpu2:1"},
      {"[::1]:2", "[::1]:2"},
      {"[fe80::1]", "[fe80::1]:1"},
      {"u@[2001:db8::5]:3", "u@[2001:db8::5]:3"},
      {"a:0,b:2", "a:0,b:2"},
      {"a:2,b:1,a:1", "a:3,b:1"},  // duplicates merged, first position kept
      {"n\xC3\xB6"
       "de:2",
       "n\xC3\xB6"
       "de:2"},  // Unicode \w as in horovodrun's regex
  };
  for (const auto& c : cases) {
    INFO(c.spec);
    CHECK(hostsText(parseHostList(c.spec)) == c.expected);
  }
  CHECK(hostsText(parseHostList("a,b:3", 4)) == "a:4,b:3");  // --slots-per-host
}

TEST_CASE("bad -H host lists name the token", "[host_plan]") {
  struct Case {
    std::string spec;
    std::string message;
  };
  const std::vector<Case> cases = {
      {"", "empty host entry"},
      {"a:2,,b:2", "empty host entry 2"},
      {"a:2,", "empty host entry 2"},
      {"a:x", "invalid slot count \"x\" for host \"a\""},
      {"a:-1", "invalid slot count \"-1\""},
      {"a:", "invalid slot count \"\""},
      {"a:99999999999", "invalid slot count \"99999999999\""},
      {"a b:2", "invalid host name \"a b\""},
      {"a/b:2", "invalid host name \"a/b\""},
      {"@a:2", "invalid user \"\""},
      {"bad user@a:2", "invalid user \"bad user\""},
      {"fe80::1:2", "IPv6 addresses go in brackets"},
      {"[fe80::1:2", "unterminated '['"},
      {"[nothost]:2", "invalid IPv6 address \"nothost\""},
      {"[::1]x", "unexpected \"x\" after \"]\""},
      {"a@b:2,c@b:2", "listed with two different users"},
  };
  for (const auto& c : cases) {
    INFO(c.spec);
    const std::string what =
        hvd::test::thrownWhat<hvd::UsageError>("no error for " + c.spec, [&] { parseHostList(c.spec); });
    CHECK_THAT(what, Catch::Contains(c.message));
    CHECK_THAT(what, Catch::Contains("-H \"" + c.spec + "\""));
    CHECK(what.find('\n') == std::string::npos);
  }
}

TEST_CASE("hostfiles in horovodrun and Open MPI formats", "[host_plan]") {
  CHECK(hostsText(parseHostfileText("a slots=2\nb slots=4\n", "h")) == "a:2,b:4");
  CHECK(hostsText(parseHostfileText("# cluster\n\na slots=2 max_slots=4  # fast\n  b\n\tc max-slots=3\n",
                                    "h")) == "a:2,b:1,c:1");
  CHECK(hostsText(parseHostfileText("u@[::1] slots=2\nd:3\n", "h")) == "u@[::1]:2,d:3");
  CHECK(hostsText(parseHostfileText("a slots=1\na slots=2\n", "h")) == "a:3");
  CHECK(hostsText(parseHostfileText("a slots=2\r\nb slots=1\r\n", "h")) == "a:2,b:1");

  struct Case {
    std::string text;
    std::string message;
  };
  const std::vector<Case> bad = {
      {"a slots=x\n", "hosts.txt:1: invalid value \"x\" in \"slots=x\""},
      {"a slots=2\nb slot=2\n", "hosts.txt:2: unknown attribute \"slot=2\""},
      {"a\nb cpus=4\n", "hosts.txt:2: unknown attribute \"cpus=4\""},
      {"a slots=4 max_slots=2\n", "hosts.txt:1: max_slots=2 is less than slots=4"},
      {"a slots=1 slots=2\n", "hosts.txt:1: \"slots\" given twice"},
      {"a:2 slots=2\n", "hosts.txt:1: slots given twice"},
      {"# only a comment\n\n", "hosts.txt: no hosts in hostfile"},
      {"\n\na slots=\n", "hosts.txt:3: invalid value \"\""},
      {"x/y slots=1\n", "hosts.txt:1: invalid host name \"x/y\""},
  };
  for (const auto& c : bad) {
    INFO(c.text);
    const std::string what =
        hvd::test::thrownWhat<hvd::UsageError>("no error", [&] { parseHostfileText(c.text, "hosts.txt"); });
    CHECK_THAT(what, Catch::Contains(c.message));
  }
  CHECK_THROWS_WITH(
      parseHostfile("/nonexistent/hosts"),
      Catch::Contains("cannot read hostfile \"/nonexistent/hosts\": No such file or directory"));
}

TEST_CASE("host discovery output in horovodrun's format", "[host_plan][elastic]") {
  CHECK(hostsText(parseDiscoveryOutput("", std::nullopt)).empty());       // no hosts yet
  CHECK(hostsText(parseDiscoveryOutput("\n  \n", std::nullopt)).empty());
  CHECK(hostsText(parseDiscoveryOutput("b:2\na:4\n", std::nullopt)) == "b:2,a:4");  // order of the lines
  CHECK(hostsText(parseDiscoveryOutput("  a:2  \r\nb:1", std::nullopt)) == "a:2,b:1");
  CHECK(hostsText(parseDiscoveryOutput("a:2\nb:1\na:2\n", std::nullopt)) == "a:2,b:1");  // repeats count once
  CHECK(hostsText(parseDiscoveryOutput("a\nb:3", 2)) == "a:2,b:3");  // bare hosts get --slots-per-host
  CHECK(hostsText(parseDiscoveryOutput("[::1]:2\nu@h:1", std::nullopt)) == "[::1]:2,u@h:1");
  CHECK(hostsText(parseDiscoveryOutput("a:0", std::nullopt)) == "a:0");
}

TEST_CASE("bad host discovery output names the line", "[host_plan][elastic]") {
  struct Case {
    std::string output;
    std::optional<int> slots_per_host;
    std::string message;
  };
  const std::vector<Case> cases = {
      {"a:2\nb", std::nullopt, "discovery output line 2 \"b\": no slot count (write host:N, or give --slots-per-host)"},
      {"a:x", std::nullopt, "discovery output line 1 \"a:x\": invalid slot count \"x\""},
      {"a:2\n\na:3", std::nullopt, "discovery output line 3 \"a:3\": host \"a\" is also on line 1 as \"a:2\""},
      {"fe80::1:2", std::nullopt, "IPv6 addresses go in brackets"},
      {"hello world", 1, "invalid host name \"hello world\""},
  };
  for (const auto& c : cases) {
    INFO(c.output);
    const std::string what = hvd::test::thrownWhat<hvd::UsageError>(
        "no error for " + c.output, [&] { parseDiscoveryOutput(c.output, c.slots_per_host); });
    CHECK_THAT(what, Catch::Contains(c.message));
    CHECK(what.find('\n') == std::string::npos);
  }
}

TEST_CASE("Slurm node lists and tasks per node", "[host_plan]") {
  using V = std::vector<std::string>;
  CHECK(expandSlurmNodelist("node01") == V{"node01"});
  CHECK(expandSlurmNodelist("node[01-04,07]") == V{"node01", "node02", "node03", "node04", "node07"});
  CHECK(expandSlurmNodelist("a[1-2],b,c[9-10]") == V{"a1", "a2", "b", "c9", "c10"});
  CHECK(expandSlurmNodelist("r[1-2]-n[1-2]") == V{"r1-n1", "r1-n2", "r2-n1", "r2-n2"});
  CHECK(expandSlurmNodelist("gpu[008-010]") == V{"gpu008", "gpu009", "gpu010"});
  CHECK(expandSlurmTasksPerNode("2(x3),1") == std::vector<int>{2, 2, 2, 1});
  CHECK(expandSlurmTasksPerNode("4") == std::vector<int>{4});
  CHECK(hostsText(slurmHosts("node[1-3]", "2(x2),1")) == "node1:2,node2:2,node3:1");
  CHECK(hostsText(slurmHosts("node[1-2]", "")) == "node1:1,node2:1");

  CHECK_THROWS_WITH(expandSlurmNodelist("node[1-"), Catch::Contains("unterminated '['"));
  CHECK_THROWS_WITH(expandSlurmNodelist("node[3-1]"), Catch::Contains("invalid range \"3-1\""));
  CHECK_THROWS_WITH(expandSlurmNodelist("node[a-b]"), Catch::Contains("invalid range \"a-b\""));
  CHECK_THROWS_WITH(expandSlurmNodelist("a,,b"), Catch::Contains("empty node name"));
  CHECK_THROWS_WITH(expandSlurmTasksPerNode("2(x)"), Catch::Contains("invalid entry \"2(x)\""));
  CHECK_THROWS_WITH(expandSlurmTasksPerNode("x"), Catch::Contains("invalid entry \"x\""));
  CHECK_THROWS_WITH(slurmHosts("n[1-3]", "2(x2)"),
                    Catch::Contains("describes 2 nodes but SLURM_JOB_NODELIST"));
}

TEST_CASE("rank assignment is horovodrun's", "[host_plan]") {
  SECTION("heterogeneous example of the reference, worker-0:1,worker-1:2, np=3") {
    const auto plan = assignRanks(parseHostList("worker-0:1,worker-1:2"), 3);
    REQUIRE(plan.size() == 3);
    // host, rank, local_rank, local_size, cross_rank, cross_size
    const std::vector<std::tuple<std::string, int, int, int, int, int>> expected = {
        {"worker-0", 0, 0, 1, 0, 2},
        {"worker-1", 1, 0, 2, 1, 2},
        {"worker-1", 2, 1, 2, 0, 1},
    };
    for (size_t i = 0; i < plan.size(); ++i) {
      const auto& p = plan[i];
      CHECK(std::make_tuple(p.host.name, p.rank, p.local_rank, p.local_size, p.cross_rank, p.cross_size) ==
            expected[i]);
      CHECK(p.size == 3);
    }
  }
  SECTION("homogeneous 2x2") {
    const auto plan = assignRanks(parseHostList("a:2,b:2"), 4);
    CHECK(plan[2].host.name == "b");
    CHECK(plan[2].local_rank == 0);
    CHECK(plan[2].cross_rank == 1);
    CHECK(plan[3].cross_size == 2);
  }
  SECTION("np below the slots starts np ranks (horovodrun starts one per slot)") {
    const auto plan = assignRanks(parseHostList("a:4,b:4"), 5);
    REQUIRE(plan.size() == 5);
    CHECK(plan[4].host.name == "b");
    CHECK(plan[4].local_size == 1);
    CHECK(plan[0].local_size == 4);
    CHECK(plan[1].cross_size == 1);  // only a has local rank 1
    CHECK(plan[0].cross_size == 2);
  }
  SECTION("hosts with zero slots get no ranks") {
    const auto plan = assignRanks(parseHostList("a:0,b:2"), 2);
    CHECK(plan[0].host.name == "b");
    CHECK(plan[0].cross_size == 1);
  }
  SECTION("scope sizes") {
    const auto sizes = scopeSizes(assignRanks(parseHostList("worker-0:1,worker-1:2"), 3));
    CHECK(sizes ==
          std::map<std::string, int>{
              {"global", 3}, {"local_worker-0", 1}, {"local_worker-1", 2}, {"cross_0", 2}, {"cross_1", 1}});
  }
  CHECK_THROWS_WITH(assignRanks(parseHostList("a:2,b:1"), 4),
                    "Requested more processes (4) than there are available slots (3)");
  CHECK_THROWS_AS(assignRanks(parseHostList("a:2"), 0), hvd::UsageError);
}
