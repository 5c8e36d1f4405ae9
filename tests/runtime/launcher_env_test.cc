// Workers started by srun, Open MPI or Hydra: the launchers' variables read through a fake getenv (every
// error names the variables and their values), Horovod's numbering from host names, and the exchange of
// host names through a store with ranks as threads.
#include <catch2/catch.hpp>

#include <string>
#include <thread>
#include <unistd.h>

#include "base/error.h"
#include "rendezvous/memory_store.h"
#include "runtime/launcher_env.h"
#include "runtime/options.h"
#include "tests/common/throws.h"
#include "tests/runtime/options_env.h"

using hvd::runtime::HostEntry;
using hvd::runtime::HostNumbers;
using hvd::runtime::Launcher;
using namespace hvd::test;  // Env, parse

namespace {

Env with(Env env, const Env& more) {
  for (const auto& [k, v] : more) env[k] = v;
  return env;
}

const Env kRendezvous = {{"HVD_RENDEZVOUS", "10.0.0.1:29500"}};

// A task of `srun -n 3` (step 4 of job 77), rank 2 on the second node.
const Env kSrunTask = {{"SLURM_JOB_ID", "77"},   {"SLURM_STEP_ID", "4"},  {"SLURM_PROCID", "2"},
                       {"SLURM_NTASKS", "3"},    {"SLURM_LOCALID", "0"},  {"SLURM_NODEID", "1"},
                       {"SLURMD_NODENAME", "n2"}, {"SLURM_STEPID", "4"}};

const Env kOpenMpi = {{"OMPI_COMM_WORLD_RANK", "1"},       {"OMPI_COMM_WORLD_SIZE", "3"},
                      {"OMPI_COMM_WORLD_LOCAL_RANK", "1"}, {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"},
                      {"OMPI_COMM_WORLD_NODE_RANK", "1"},  {"OMPI_MCA_ess_base_jobid", "3815112705"}};

const Env kHydra = {{"PMI_RANK", "1"}, {"PMI_SIZE", "3"}, {"MPI_LOCALRANKID", "1"}, {"MPI_LOCALNRANKS", "2"}};

std::string systemHostName() {
  char name[256] = {};
  REQUIRE(::gethostname(name, sizeof(name) - 1) == 0);
  return name;
}

HostEntry entry(const std::string& host, int local_rank = -1, int local_size = -1, int node = -1) {
  HostEntry e;
  e.host = host;
  e.local_rank = local_rank;
  e.local_size = local_size;
  e.node = node;
  e.local_rank_var = local_rank >= 0 ? "SLURM_LOCALID" : "";
  e.local_size_var = local_size >= 0 ? "OMPI_COMM_WORLD_LOCAL_SIZE" : "";
  e.node_var = node >= 0 ? "SLURM_NODEID" : "";
  return e;
}

// "local_rank/local_size cross_rank/cross_size" of every rank.
std::vector<std::string> numbers(const std::vector<HostEntry>& entries) {
  std::vector<std::string> out;
  for (const HostNumbers& n : hvd::runtime::numberByHost(entries)) {
    out.push_back(std::to_string(n.local_rank) + "/" + std::to_string(n.local_size) + " " +
                  std::to_string(n.cross_rank) + "/" + std::to_string(n.cross_size));
  }
  return out;
}

}  // namespace

TEST_CASE("srun task: rank and size from Slurm, the host from SLURMD_NODENAME", "[launcher_env]") {
  const auto o = parse(with(kSrunTask, kRendezvous));
  REQUIRE(o.launcher.has_value());
  CHECK(o.launcher->launcher == Launcher::kSlurm);
  CHECK(o.rank == 2);
  CHECK(o.size == 3);
  CHECK(o.hostname == "n2");
  // Local and cross numbers come from the host names at init; the launcher's are only checked.
  CHECK(o.local_rank == 0);
  CHECK(o.local_size == 1);
  CHECK(o.launcher->local_rank == 0);
  CHECK(o.launcher->local_size == -1);
  CHECK(o.launcher->node == 1);
  CHECK(o.launcher->job == "77.4");
  CHECK(*o.rendezvous_addr == "10.0.0.1");
  CHECK(o.rendezvous_port == 29500);

  // SLURM_STEPID alone (older Slurm) counts as the step id too; HOROVOD_HOSTNAME names the host first.
  Env old = with(kSrunTask, kRendezvous);
  old.erase("SLURM_STEP_ID");
  CHECK(parse(old).launcher->launcher == Launcher::kSlurm);
  CHECK(parse(with(old, {{"HOROVOD_HOSTNAME", "mine"}})).hostname == "mine");
  // srun -n 1 needs no rendezvous server.
  const auto single = parse({{"SLURM_STEP_ID", "0"}, {"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "1"}});
  CHECK(single.launcher.has_value());
  CHECK(single.size == 1);
  CHECK(!single.rendezvous_addr);
}

TEST_CASE("a batch or salloc shell is no srun task: one process", "[launcher_env]") {
  // What sbatch gives its script: SLURM_PROCID=0 and the allocation's SLURM_NTASKS, no step id, or the
  // batch, extern or interactive step's.
  const Env batch = {{"SLURM_JOB_ID", "77"}, {"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "4"},
                     {"SLURM_LOCALID", "0"}, {"SLURM_NODEID", "0"}, {"SLURMD_NODENAME", "n1"}};
  for (const char* step : {"", "batch", "extern", "interactive", "4294967291", "4294967292", "4294967290"}) {
    INFO(step);
    const auto o = parse(with(batch, {{"SLURM_STEP_ID", step}}));
    CHECK(!o.launcher);
    CHECK(o.rank == 0);
    CHECK(o.size == 1);
    CHECK(o.hostname == "localhost");
  }
  // Even SLURM_PROCID without SLURM_NTASKS is no error there.
  CHECK(!parse({{"SLURM_PROCID", "0"}}).launcher);
}

TEST_CASE("Open MPI and Hydra: rank, size and their local numbers", "[launcher_env]") {
  // Both name rank 1 of 3, local rank 1 of 2.
  for (const auto& [env, launcher] :
       {std::pair{kOpenMpi, Launcher::kOpenMpi}, std::pair{kHydra, Launcher::kPmi}}) {
    INFO(env.begin()->first);
    const auto o = parse(with(env, kRendezvous));
    REQUIRE(o.launcher.has_value());
    CHECK(o.launcher->launcher == launcher);
    CHECK(o.rank == 1);
    CHECK(o.size == 3);
    CHECK(o.launcher->local_rank == 1);
    CHECK(o.launcher->local_size == 2);
    CHECK(o.hostname == systemHostName());
  }
  const auto o = parse(with(kOpenMpi, kRendezvous));
  CHECK(o.launcher->node == -1);  // OMPI_COMM_WORLD_NODE_RANK is a rank on the node, not the node's number
  CHECK(o.launcher->job == "ompi3815112705");

  // Slurm's PMI-2 plugin gives PMI_RANK and PMI_SIZE alone.
  const auto pmi2 = parse(with({{"PMI_RANK", "0"}, {"PMI_SIZE", "2"}}, kRendezvous));
  CHECK(pmi2.launcher->local_rank == -1);
  CHECK(pmi2.size == 2);
}

TEST_CASE("precedence: HOROVOD_RANK, then Open MPI, then PMI, then srun", "[launcher_env]") {
  // hvdrun's workers inherit whatever launched hvdrun.
  const auto hvdrun = parse(with(with(kOpenMpi, kSrunTask),
                                 {{"HOROVOD_RANK", "0"}, {"HOROVOD_SIZE", "2"}, {"HOROVOD_HOSTNAME", "h"},
                                  {"HOROVOD_GLOO_RENDEZVOUS_ADDR", "127.0.0.1"},
                                  {"HOROVOD_GLOO_RENDEZVOUS_PORT", "1234"}, {"HVD_RENDEZVOUS", "other:1"}}));
  CHECK(!hvdrun.launcher);
  CHECK(hvdrun.rank == 0);
  CHECK(hvdrun.size == 2);
  CHECK(hvdrun.hostname == "h");
  // The pair wins over HVD_RENDEZVOUS.
  CHECK(*hvdrun.rendezvous_addr == "127.0.0.1");
  CHECK(hvdrun.rendezvous_port == 1234);

  // mpirun or mpiexec inside an allocation: the workers inherit the step of the proxies srun started (one
  // task per node), which disagrees with the MPI ranks by design.
  const Env proxy_step = {{"SLURM_STEP_ID", "0"}, {"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"}};
  CHECK(parse(with(with(kOpenMpi, proxy_step), kRendezvous)).launcher->launcher == Launcher::kOpenMpi);
  CHECK(parse(with(with(kHydra, proxy_step), kRendezvous)).launcher->launcher == Launcher::kPmi);
  CHECK(parse(with(with(kHydra, proxy_step), kRendezvous)).rank == 1);
  // Open MPI and PMI that agree: Open MPI's.
  CHECK(parse(with(with(kOpenMpi, kHydra), kRendezvous)).launcher->launcher == Launcher::kOpenMpi);
}

TEST_CASE("HVD_RENDEZVOUS: HOST:PORT and [IPV6]:PORT", "[launcher_env]") {
  auto o = parse({{"HVD_RENDEZVOUS", "node-1.cluster:41234"}});
  CHECK(*o.rendezvous_addr == "node-1.cluster");
  CHECK(o.rendezvous_port == 41234);
  o = parse({{"HVD_RENDEZVOUS", "[::1]:29500"}});
  CHECK(*o.rendezvous_addr == "::1");
  CHECK(o.rendezvous_port == 29500);
  // Only a port of the pair: HVD_RENDEZVOUS decides.
  o = parse({{"HVD_RENDEZVOUS", "a:1"}, {"HOROVOD_GLOO_RENDEZVOUS_PORT", "2"}});
  CHECK(*o.rendezvous_addr == "a");
  CHECK(o.rendezvous_port == 1);
}

TEST_CASE("partial or contradictory launcher variables: one line naming them", "[launcher_env]") {
  const std::vector<std::pair<Env, std::string>> cases = {
      // Slurm
      {{{"SLURM_STEP_ID", "0"}, {"SLURM_PROCID", "1"}},
       "srun's variables are incomplete: SLURM_STEP_ID=0, SLURM_PROCID=1 (a task of a job step) but SLURM_NTASKS "
       "is not set"},
      {{{"SLURM_STEPID", "3"}, {"SLURM_NTASKS", "4"}},
       "srun's variables are incomplete: SLURM_STEPID=3, SLURM_NTASKS=4 (a task of a job step) but SLURM_PROCID "
       "is not set"},
      {{{"SLURM_STEP_ID", "0"}},
       "srun's variables are incomplete: SLURM_STEP_ID=0 (a task of a job step) but SLURM_PROCID and SLURM_NTASKS "
       "are not set"},
      {{{"SLURM_STEP_ID", "0"}, {"SLURM_PROCID", "3"}, {"SLURM_NTASKS", "3"}, {"HVD_RENDEZVOUS", "h:1"}},
       "SLURM_PROCID=3 is not below SLURM_NTASKS=3"},
      {{{"SLURM_STEP_ID", "0"}, {"SLURM_PROCID", "one"}, {"SLURM_NTASKS", "3"}},
       "SLURM_PROCID='one' is not an integer"},
      {{{"SLURM_STEP_ID", "next"}, {"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "3"}},
       "SLURM_STEP_ID='next' is not a Slurm step id"},
      {{{"SLURM_STEP_ID", "0"}, {"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "4"}},
       "srun started 4 ranks (SLURM_PROCID=0, SLURM_NTASKS=4) but no rendezvous server is set: start "
       "hvd-rendezvous and give the workers HVD_RENDEZVOUS=HOST:PORT (and HVD_RENDEZVOUS_TOKEN)"},
      // Open MPI
      {{{"OMPI_COMM_WORLD_RANK", "1"}},
       "Open MPI's variables are incomplete: OMPI_COMM_WORLD_RANK=1 but OMPI_COMM_WORLD_SIZE is not set"},
      {{{"OMPI_COMM_WORLD_SIZE", "3"}, {"OMPI_COMM_WORLD_LOCAL_RANK", "0"}, {"OMPI_COMM_WORLD_LOCAL_SIZE", "1"}},
       "Open MPI's variables are incomplete: OMPI_COMM_WORLD_SIZE=3, OMPI_COMM_WORLD_LOCAL_RANK=0, "
       "OMPI_COMM_WORLD_LOCAL_SIZE=1 but OMPI_COMM_WORLD_RANK is not set"},
      {{{"OMPI_COMM_WORLD_RANK", "1"}, {"OMPI_COMM_WORLD_SIZE", "3"}, {"OMPI_COMM_WORLD_LOCAL_RANK", "1"}},
       "Open MPI's variables are incomplete: OMPI_COMM_WORLD_RANK=1, OMPI_COMM_WORLD_SIZE=3, "
       "OMPI_COMM_WORLD_LOCAL_RANK=1 but OMPI_COMM_WORLD_LOCAL_SIZE is not set"},
      {{{"OMPI_COMM_WORLD_RANK", "3"}, {"OMPI_COMM_WORLD_SIZE", "3"}},
       "OMPI_COMM_WORLD_RANK=3 is not below OMPI_COMM_WORLD_SIZE=3"},
      {{{"OMPI_COMM_WORLD_RANK", "0"}, {"OMPI_COMM_WORLD_SIZE", "2"}, {"OMPI_COMM_WORLD_LOCAL_RANK", "2"},
        {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"}},
       "OMPI_COMM_WORLD_LOCAL_RANK=2 is not below OMPI_COMM_WORLD_LOCAL_SIZE=2"},
      {{{"OMPI_COMM_WORLD_RANK", "0"}, {"OMPI_COMM_WORLD_SIZE", "0"}},
       "OMPI_COMM_WORLD_SIZE=0 is out of range [1, 16777216]"},
      {kOpenMpi,
       "Open MPI started 3 ranks (OMPI_COMM_WORLD_RANK=1, OMPI_COMM_WORLD_SIZE=3, OMPI_COMM_WORLD_LOCAL_RANK=1, "
       "OMPI_COMM_WORLD_LOCAL_SIZE=2) but no rendezvous server is set: start hvd-rendezvous and give the "
       "workers HVD_RENDEZVOUS=HOST:PORT"},
      // Hydra
      {{{"PMI_SIZE", "2"}}, "Hydra (PMI)'s variables are incomplete: PMI_SIZE=2 but PMI_RANK is not set"},
      {{{"PMI_RANK", "5"}, {"PMI_SIZE", "2"}}, "PMI_RANK=5 is not below PMI_SIZE=2"},
      {{{"PMI_RANK", "0"}, {"PMI_SIZE", "2"}, {"MPI_LOCALNRANKS", "2"}},
       "Hydra (PMI)'s variables are incomplete: PMI_RANK=0, PMI_SIZE=2, MPI_LOCALNRANKS=2 but MPI_LOCALRANKID is "
       "not set"},
      // Two launchers that disagree.
      {with(kOpenMpi, {{"PMI_RANK", "0"}, {"PMI_SIZE", "2"}, {"HVD_RENDEZVOUS", "h:1"}}),
       "the variables of two launchers disagree: Open MPI's OMPI_COMM_WORLD_RANK=1, OMPI_COMM_WORLD_SIZE=3, "
       "OMPI_COMM_WORLD_LOCAL_RANK=1, OMPI_COMM_WORLD_LOCAL_SIZE=2 but Hydra (PMI)'s PMI_RANK=0, PMI_SIZE=2"},
      {with(kOpenMpi, {{"PMI_RANK", "1"}, {"PMI_SIZE", "4"}}),
       "the variables of two launchers disagree: Open MPI's OMPI_COMM_WORLD_RANK=1, OMPI_COMM_WORLD_SIZE=3, "
       "OMPI_COMM_WORLD_LOCAL_RANK=1, OMPI_COMM_WORLD_LOCAL_SIZE=2 but Hydra (PMI)'s PMI_RANK=1, PMI_SIZE=4"},
      // Half of hvdrun's identity next to a launcher's.
      {with(with(kSrunTask, kRendezvous), {{"HOROVOD_SIZE", "3"}}),
       "HOROVOD_SIZE=3 is set without HOROVOD_RANK while srun started this process (SLURM_PROCID=2, "
       "SLURM_NTASKS=3, SLURM_LOCALID=0, SLURM_NODEID=1): set every HOROVOD_ identity variable or none"},
      {with(with(kSrunTask, kRendezvous), {{"HOROVOD_ELASTIC", "1"}}),
       "HOROVOD_ELASTIC=1 needs hvdrun's elastic driver, but srun started this process (SLURM_PROCID=2, "
       "SLURM_NTASKS=3, SLURM_LOCALID=0, SLURM_NODEID=1)"},
      // The rendezvous variable itself.
      {{{"HVD_RENDEZVOUS", "node1"}}, "HVD_RENDEZVOUS='node1' is not HOST:PORT (no port)"},
      {{{"HVD_RENDEZVOUS", "::1:29500"}},
       "HVD_RENDEZVOUS='::1:29500' is not HOST:PORT (an IPv6 address goes in brackets: [::1]:29500)"},
      {{{"HVD_RENDEZVOUS", "node1:0"}}, "HVD_RENDEZVOUS='node1:0' is not HOST:PORT (the port must be 1..65535)"},
      {{{"HVD_RENDEZVOUS", ":29500"}}, "HVD_RENDEZVOUS=':29500' is not HOST:PORT (no host)"},
  };
  for (const auto& [env, message] : cases) {
    INFO(message);
    hvd::test::requireUsageError(env, message);
    const std::string what = hvd::test::thrownWhat<hvd::UsageError>("no error", [&] { parse(env); });
    CHECK(what.find('\n') == std::string::npos);
  }
}

TEST_CASE("Horovod's numbering from host names, for any layout", "[launcher_env]") {
  // Two hosts of two ranks, numbered host by host (hvdrun's plan): the cross rank is the host's index.
  CHECK(numbers({entry("a"), entry("a"), entry("b"), entry("b")}) ==
        std::vector<std::string>{"0/2 0/2", "1/2 0/2", "0/2 1/2", "1/2 1/2"});
  // Uneven: local rank 1 exists on host a only.
  CHECK(numbers({entry("a"), entry("a"), entry("b")}) == std::vector<std::string>{"0/2 0/2", "1/2 0/1", "0/1 1/2"});
  CHECK(numbers({entry("a"), entry("b"), entry("b"), entry("b")}) ==
        std::vector<std::string>{"0/1 0/2", "0/3 1/2", "1/3 0/1", "2/3 0/1"});
  // Cyclic (srun --distribution=cyclic, mpirun --map-by node): a host's ranks are not consecutive.
  CHECK(numbers({entry("a"), entry("b"), entry("a")}) == std::vector<std::string>{"0/2 0/2", "0/1 1/2", "1/2 0/1"});
  CHECK(numbers({entry("x")}) == std::vector<std::string>{"0/1 0/1"});
  // The launcher's numbers, where they agree, change nothing.
  CHECK(numbers({entry("a", 0, 2, 0), entry("b", 0, 1, 1), entry("a", 1, 2, 0)}) ==
        std::vector<std::string>{"0/2 0/2", "0/1 1/2", "1/2 0/1"});
}

TEST_CASE("the launcher's local numbers and node ids must agree with the host names", "[launcher_env]") {
  const std::vector<std::pair<std::vector<HostEntry>, std::string>> cases = {
      // Two nodes with one host name (a job script exported HOROVOD_HOSTNAME to every task).
      {{entry("vm", 0, -1, 0), entry("vm", 0, -1, 1)},
       "the launcher and the host names disagree: rank 1 has SLURM_LOCALID=0, but host name 'vm' (HOROVOD_HOSTNAME, "
       "else SLURMD_NODENAME, else the system's host name) is shared by rank(s) 0, 1, which makes it local rank 1 "
       "of 2; every host needs a name of its own (HOROVOD_HOSTNAME)"},
      {{entry("vm", 0, 1), entry("vm", 0, 1)},
       "the launcher and the host names disagree: rank 0 has SLURM_LOCALID=0 and OMPI_COMM_WORLD_LOCAL_SIZE=1, but "
       "host name 'vm'"},
      // One node under two names.
      {{entry("a", 0, 2), entry("b", 1, 2)},
       "the launcher and the host names disagree: rank 0 has SLURM_LOCALID=0 and OMPI_COMM_WORLD_LOCAL_SIZE=2, but "
       "host name 'a' (HOROVOD_HOSTNAME, else SLURMD_NODENAME, else the system's host name) is shared by rank(s) 0, "
       "which makes it local rank 0 of 1"},
      {{entry("a", 0, -1, 0), entry("b", 0, -1, 0)},
       "the launcher and the host names disagree: SLURM_NODEID=0 for rank 0 with host name 'a' and rank 1 with host "
       "name 'b'"},
      {{entry("a", 0, -1, 0), entry("a", 1, -1, 1)},
       "the launcher and the host names disagree: host name 'a' (HOROVOD_HOSTNAME, else SLURMD_NODENAME, else the "
       "system's host name) is shared by rank 0 with SLURM_NODEID=0 and rank 1 with SLURM_NODEID=1"},
  };
  for (const auto& [entries, message] : cases) {
    INFO(message);
    REQUIRE_THROWS_AS(hvd::runtime::numberByHost(entries), hvd::UsageError);
    REQUIRE_THROWS_WITH(hvd::runtime::numberByHost(entries), Catch::StartsWith(message));
  }
}

TEST_CASE("exchange of host names: every rank numbered alike, keys removed", "[launcher_env]") {
  auto store = std::make_shared<hvd::rendezvous::MemoryStore>();
  const std::vector<HostEntry> entries = {entry("a", 0, 2), entry("b", 0, 1), entry("a", 1, 2)};
  std::vector<HostNumbers> got(3);
  std::vector<std::thread> ranks;
  for (int r = 0; r < 3; ++r) {
    ranks.emplace_back([&, r] {
      got[r] = hvd::runtime::exchangeHosts(*store, "hvd_hosts.t", r, 3, entries[r], std::chrono::seconds(10));
    });
  }
  for (auto& t : ranks) t.join();
  const auto want = hvd::runtime::numberByHost(entries);
  for (int r = 0; r < 3; ++r) {
    INFO("rank " << r);
    CHECK(got[r].local_rank == want[r].local_rank);
    CHECK(got[r].local_size == want[r].local_size);
    CHECK(got[r].cross_rank == want[r].cross_rank);
    CHECK(got[r].cross_size == want[r].cross_size);
  }
  for (const char* key : {"hvd_hosts.t/0", "hvd_hosts.t/1", "hvd_hosts.t/2", "hvd_hosts.t/hosts", "hvd_hosts.t/read"}) {
    INFO(key);
    CHECK(!store->tryGet(key).has_value());
  }

  // A disagreement found by rank 0 fails every rank with the same message.
  const std::vector<HostEntry> bad = {entry("vm", 0, -1, 0), entry("vm", 0, -1, 1)};
  std::vector<std::string> errors(2);
  ranks.clear();
  for (int r = 0; r < 2; ++r) {
    ranks.emplace_back([&, r] {
      try {
        hvd::runtime::exchangeHosts(*store, "hvd_hosts.u", r, 2, bad[r], std::chrono::seconds(10));
      } catch (const hvd::UsageError& e) {
        errors[r] = e.what();
      }
    });
  }
  for (auto& t : ranks) t.join();
  CHECK_THAT(errors[0], Catch::StartsWith("the launcher and the host names disagree: rank 1 has SLURM_LOCALID=0"));
  CHECK(errors[1] == errors[0]);

  // A rank that never comes: rank 1 waits for rank 0's table and names it.
  REQUIRE_THROWS_AS(hvd::runtime::exchangeHosts(*store, "hvd_hosts.v", 1, 2, entry("a"), std::chrono::milliseconds(50)),
                    hvd::RendezvousTimeout);
  REQUIRE_THROWS_WITH(
      hvd::runtime::exchangeHosts(*store, "hvd_hosts.w", 1, 2, entry("a"), std::chrono::milliseconds(50)),
      Catch::StartsWith("init: rank 0 did not publish the job's host names within 50 ms"));
  REQUIRE_THROWS_WITH(
      hvd::runtime::exchangeHosts(*store, "hvd_hosts.x", 0, 3, entry("a"), std::chrono::milliseconds(50)),
      Catch::StartsWith("init: rank 0 waited for every rank's host name: "));
}
