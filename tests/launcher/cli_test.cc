// hvdrun's command line: argparse-compatible spellings, precedence, tuning variables, and a table of bad
// inputs run through the real binary (one-line message naming the token, exit code 2).
#include <unistd.h>

#include <fstream>

#include <catch2/catch.hpp>

#include "launcher/cli.h"
#include "base/error.h"
#include "tests/launcher/process.h"

using namespace hvd::launcher;
using hvd::launcher::test::runProcess;

namespace {

HvdrunOptions parse(const std::vector<std::string>& args, const Environment& env = {}) {
  const CliResult r = parseCommandLine(args, env);
  REQUIRE(r.action == CliResult::Action::kRun);
  return r.options;
}

std::string envOf(const HvdrunOptions& o, const std::string& name) {
  for (const auto& [k, v] : o.worker_env) {
    if (k == name) return v;
  }
  return "<unset>";
}

std::string writeTemp(const std::string& dir, const std::string& name, const std::string& text) {
  const std::string path = dir + "/" + name;
  std::ofstream(path) << text;
  return path;
}

using Cmd = std::vector<std::string>;

}  // namespace

TEST_CASE("horovodrun spellings of -np and the command split", "[cli]") {
  for (const Cmd& args :
       {Cmd{"-np", "4", "t"}, Cmd{"-np=4", "t"}, Cmd{"--num-proc", "4", "t"}, Cmd{"--num-proc=4", "t"},
        Cmd{"--num-p", "4", "t"}, Cmd{"-np", "2", "-np", "4", "t"}}) {
    INFO(args.front());
    const auto o = parse(args);
    CHECK(o.num_proc == 4);
    CHECK(o.command == Cmd{"t"});
  }
  // The command starts at the first non-option; everything after it is the command's, flags included.
  CHECK(parse({"-np", "2", "python", "train.py", "--verbose", "-H", "x"}).command ==
        Cmd{"python", "train.py", "--verbose", "-H", "x"});
  CHECK(parse({"-np", "2", "--", "python", "x.py"}).command == Cmd{"python", "x.py"});  // one "--" stripped
  CHECK(parse({"-np", "2", "--", "--", "x"}).command == Cmd{"--", "x"});
  // horovodrun runs `env` for an empty command; hvdrun refuses (see "every bad input").
  CHECK_THROWS_AS(parseCommandLine({"-np", "2"}, {}), hvd::UsageError);
  CHECK(parse({"-np", "2", "--verbose", "t"}).verbose);
  CHECK(parse({"-np", "2", "--verb", "t"}).verbose);  // unambiguous prefix
}

TEST_CASE("host, ssh and output flags", "[cli]") {
  auto o = parse({"-np", "2", "-H", "a:1,b:1", "-p", "2222", "-i", "/dev/null", "t"});
  CHECK(*o.hosts == "a:1,b:1");
  CHECK(*o.ssh.port == 2222);
  CHECK(*o.ssh.identity_file == "/dev/null");
  CHECK(*parse({"-np", "2", "--hosts=a:2", "t"}).hosts == "a:2");
  CHECK(*parse({"-np", "2", "-p2222", "t"}).ssh.port == 2222);
  CHECK(*parse({"-np", "2", "-hostfile", "f", "t"}).hostfile == "f");
  CHECK(*parse({"-np", "2", "--hostfile=f", "t"}).hostfile == "f");
  CHECK(*parse({"-np", "2", "--slots", "4", "t"}).slots_per_host == 4);  // prefix of --slots-per-host
  CHECK(parse({"-np", "2", "-prefix-timestamp", "t"}).prefix_timestamp);
  CHECK(parse({"-np", "2", "--prefix-output-with-timestamp", "t"}).prefix_timestamp);
  CHECK_FALSE(parse({"-np", "2", "--no-tag-output", "t"}).tag_output);
  CHECK(*parse({"-np", "2", "--output-filename", "logs", "t"}).output_filename == "logs");
  CHECK(parse({"-np", "2", "--gloo", "--dry-run", "t"}).dry_run);
  CHECK(parse({"-np", "2", "--network-interface", "eth0", "--network-interface", "eth1,eth0",
               "--network-interfaces", "ib0", "t"})
            .network_interfaces == Cmd{"eth0", "eth1", "ib0"});
  const auto ssh =
      parse({"-np", "2", "--ssh-known-hosts", "strict", "--ssh-force", "--ssh-connect-timeout", "3", "t"});
  CHECK(ssh.ssh.known_hosts == KnownHostsPolicy::kStrict);
  CHECK(ssh.ssh.force_ssh);
  CHECK(ssh.ssh.connect_timeout == std::chrono::seconds(3));
  CHECK_FALSE(ssh.ssh.proxy.has_value());  // unset: HVD_SSH_PROXY, then auto (launcher/ssh)
  CHECK(*parse({"-np", "2", "--ssh-proxy", "auto", "t"}).ssh.proxy);
  CHECK_FALSE(*parse({"-np", "2", "--ssh-proxy=never", "t"}).ssh.proxy);
}

TEST_CASE("start timeout: flag > HOROVOD_START_TIMEOUT > default", "[cli]") {
  CHECK(parse({"-np", "1", "t"}).start_timeout == std::chrono::seconds(30));
  CHECK_FALSE(parse({"-np", "1", "t"}).start_timeout_explicit);
  CHECK(parse({"-np", "1", "t"}, {{"HOROVOD_START_TIMEOUT", "7"}}).start_timeout == std::chrono::seconds(7));
  CHECK(parse({"-np", "1", "--start-timeout", "3", "t"}, {{"HOROVOD_START_TIMEOUT", "7"}}).start_timeout ==
        std::chrono::seconds(3));
  CHECK(parse({"-np", "1", "--start-timeout", "3", "t"}).start_timeout_explicit);
}

TEST_CASE("rendezvous token: --no-rendezvous-token > HVD_NO_RENDEZVOUS_TOKEN > on", "[cli]") {
  CHECK(parse({"-np", "1", "t"}).rendezvous_token);
  CHECK_FALSE(parse({"-np", "1", "--no-rendezvous-token", "t"}).rendezvous_token);
  CHECK_FALSE(parse({"-np", "1", "--no-rendezvous", "t"}).rendezvous_token);  // unambiguous prefix
  CHECK_FALSE(parse({"-np", "1", "t"}, {{"HVD_NO_RENDEZVOUS_TOKEN", "1"}}).rendezvous_token);
  CHECK(parse({"-np", "1", "t"}, {{"HVD_NO_RENDEZVOUS_TOKEN", "0"}}).rendezvous_token);
  CHECK(parse({"-np", "1", "t"}, {{"HVD_NO_RENDEZVOUS_TOKEN", ""}}).rendezvous_token);
  CHECK_FALSE(
      parse({"-np", "1", "--no-rendezvous-token", "t"}, {{"HVD_NO_RENDEZVOUS_TOKEN", "0"}}).rendezvous_token);
  // After the command it is the command's argument.
  const auto o = parse({"-np", "1", "t", "--no-rendezvous-token"});
  CHECK(o.rendezvous_token);
  CHECK(o.command == Cmd{"t", "--no-rendezvous-token"});
  CHECK_THROWS_WITH(parse({"-np", "1", "t"}, {{"HVD_NO_RENDEZVOUS_TOKEN", "yes"}}),
                    Catch::Contains("HVD_NO_RENDEZVOUS_TOKEN must be 1 (no token) or 0, got 'yes'"));
  CHECK_THROWS_WITH(parse({"-np", "1", "--no-rendezvous-token=1", "t"}),
                    Catch::Contains("--no-rendezvous-token") && Catch::Contains("'1'"));
}

TEST_CASE("horovod compatibility package: --horovod-compat > HVD_HOROVOD_COMPAT > off", "[cli]") {
  CHECK_FALSE(parse({"-np", "1", "t"}).horovod_compat);
  CHECK(parse({"-np", "1", "--horovod-compat", "t"}).horovod_compat);
  CHECK(parse({"-np", "1", "t"}, {{"HVD_HOROVOD_COMPAT", "1"}}).horovod_compat);
  CHECK_FALSE(parse({"-np", "1", "t"}, {{"HVD_HOROVOD_COMPAT", "0"}}).horovod_compat);
  CHECK(parse({"-np", "1", "--horovod-compat", "t"}, {{"HVD_HOROVOD_COMPAT", "0"}}).horovod_compat);
  CHECK_THROWS_WITH(parse({"-np", "1", "t"}, {{"HVD_HOROVOD_COMPAT", "on"}}),
                    Catch::Contains("HVD_HOROVOD_COMPAT must be 1 (on) or 0, got 'on'"));
}

TEST_CASE("tuning flags become worker variables", "[cli]") {
  const auto o = parse({"-np",
                        "1",
                        "--fusion-threshold-mb",
                        "32",
                        "--cycle-time-ms",
                        "1",
                        "--cache-capacity",
                        "0",
                        "--hierarchical-allreduce",
                        "--no-torus-allreduce",
                        "--timeline-filename",
                        "tl.json",
                        "--timeline-mark-cycles",
                        "--no-stall-check",
                        "--stall-check-warning-time-seconds",
                        "90",
                        "--log-level",
                        "debug",
                        "--log-without-timestamp",
                        "--gloo-timeout-seconds",
                        "60",
                        "--tcp",
                        "--thread-affinity",
                        "2",
                        "--num-nccl-streams",
                        "2",
                        "t"});
  CHECK(envOf(o, "HOROVOD_FUSION_THRESHOLD") == "33554432");
  CHECK(envOf(o, "HOROVOD_CYCLE_TIME") == "1.0");
  CHECK(envOf(o, "HOROVOD_CACHE_CAPACITY") == "0");
  CHECK(envOf(o, "HOROVOD_HIERARCHICAL_ALLREDUCE") == "1");
  CHECK(envOf(o, "HOROVOD_HIERARCHICAL_ALLGATHER") == "<unset>");
  CHECK(envOf(o, "HOROVOD_TORUS_ALLREDUCE") == "0");
  CHECK(envOf(o, "HOROVOD_TIMELINE") == "tl.json");
  CHECK(envOf(o, "HOROVOD_TIMELINE_MARK_CYCLES") == "1");
  CHECK(envOf(o, "HOROVOD_STALL_CHECK_DISABLE") == "1");
  CHECK(envOf(o, "HOROVOD_STALL_CHECK_TIME_SECONDS") == "90");
  CHECK(envOf(o, "HOROVOD_LOG_LEVEL") == "DEBUG");
  CHECK(envOf(o, "HOROVOD_LOG_HIDE_TIME") == "1");
  CHECK(envOf(o, "HOROVOD_GLOO_TIMEOUT_SECONDS") == "60");
  CHECK(envOf(o, "NCCL_IB_DISABLE") == "1");
  CHECK(envOf(o, "HOROVOD_THREAD_AFFINITY") == "2");
  CHECK(envOf(o, "HOROVOD_NUM_NCCL_STREAMS") == "2");
  CHECK(envOf(parse({"-np", "1", "--cycle-time-ms", "0.5", "t"}), "HOROVOD_CYCLE_TIME") == "0.5");
  // The later of a flag pair wins.
  // The shared-memory switch: off by flag or config key, the later flag wins, on by default (unset).
  CHECK(envOf(parse({"-np", "1", "--no-shared-memory", "t"}), "HVD_SHARED_MEMORY") == "0");
  CHECK(envOf(parse({"-np", "1", "--no-shared-memory", "--shared-memory", "t"}), "HVD_SHARED_MEMORY") == "1");
  CHECK(envOf(parse({"-np", "1", "--hierarchical-allreduce", "--no-hierarchical-allreduce", "t"}),
              "HOROVOD_HIERARCHICAL_ALLREDUCE") == "0");
  // Autotune variables only with autotune on; mark-cycles only with a timeline file.
  CHECK(envOf(parse({"-np", "1", "--autotune-warmup-samples", "5", "t"}),
              "HOROVOD_AUTOTUNE_WARMUP_SAMPLES") == "<unset>");
  const auto at = parse({"-np", "1", "--autotune", "--autotune-warmup-samples", "5",
                         "--autotune-gaussian-process-noise", "0.25", "--autotune-log-file", "at.csv", "t"});
  CHECK(envOf(at, "HOROVOD_AUTOTUNE") == "1");
  CHECK(envOf(at, "HOROVOD_AUTOTUNE_WARMUP_SAMPLES") == "5");
  CHECK(envOf(at, "HOROVOD_AUTOTUNE_GAUSSIAN_PROCESS_NOISE") == "0.25");
  CHECK(envOf(at, "HOROVOD_AUTOTUNE_LOG") == "at.csv");
  CHECK(envOf(parse({"-np", "1", "--timeline-mark-cycles", "t"}), "HOROVOD_TIMELINE_MARK_CYCLES") ==
        "<unset>");
}

TEST_CASE("config file: flag > environment > config file > default", "[cli]") {
  const auto tmp = test::tempDir();
  const std::string& dir = tmp.path();
  const std::string cfg = writeTemp(dir, "hvd.yaml", R"(
controller: gloo
params:
  fusion_threshold_mb: 16
  cycle_time_ms: 10
  cache_capacity: 2048
  hierarchical_allreduce: true
autotune:
  enabled: true
  warmup_samples: 4
timeline:
  filename: tl.json
  mark_cycles: false
stall_check:
  enabled: false
  warning_time_seconds: 120
library_options:
  gloo_timeout_seconds: 45
logging:
  level: warning
  with_timestamp: false
)");
  const auto o = parse({"-np", "1", "--config-file", cfg, "--cycle-time-ms", "2", "t"},
                       {{"HOROVOD_CACHE_CAPACITY", "7"}});
  CHECK(envOf(o, "HOROVOD_CYCLE_TIME") == "2.0");          // flag beats the file
  CHECK(envOf(o, "HOROVOD_CACHE_CAPACITY") == "<unset>");  // hvdrun's environment (inherited) beats the file
  CHECK(envOf(o, "HOROVOD_FUSION_THRESHOLD") == "16777216");
  CHECK(envOf(o, "HOROVOD_HIERARCHICAL_ALLREDUCE") == "1");
  CHECK(envOf(o, "HOROVOD_AUTOTUNE") == "1");
  CHECK(envOf(o, "HOROVOD_AUTOTUNE_WARMUP_SAMPLES") == "4");
  CHECK(envOf(o, "HOROVOD_TIMELINE") == "tl.json");
  CHECK(envOf(o, "HOROVOD_TIMELINE_MARK_CYCLES") == "0");
  CHECK(envOf(o, "HOROVOD_STALL_CHECK_DISABLE") == "1");
  CHECK(envOf(o, "HOROVOD_STALL_CHECK_TIME_SECONDS") == "120");
  CHECK(envOf(o, "HOROVOD_GLOO_TIMEOUT_SECONDS") == "45");
  CHECK(envOf(o, "HOROVOD_LOG_LEVEL") == "WARNING");
  CHECK(envOf(o, "HOROVOD_LOG_HIDE_TIME") == "1");
  // A flag written before --config-file still wins (horovodrun's help text claims otherwise; its code
  // agrees).
  CHECK(envOf(parse({"-np", "1", "--fusion-threshold-mb", "1", "--config-file", cfg, "t"}),
              "HOROVOD_FUSION_THRESHOLD") == "1048576");
}

TEST_CASE("the config file's elastic section stands in for the elastic flags; a flag wins", "[cli][elastic]") {
  const auto tmp = test::tempDir();
  const std::string& dir = tmp.path();
  const std::string cfg = dir + "/elastic.yaml";
  std::ofstream(cfg) << R"(elastic:
  min_np: 2
  max_np: 8
  slots_per_host: 4
  elastic_timeout: 30
  reset_limit: 3
  blacklist_cooldown_range: [5, 60]
)";
  const auto o = parse({"-np", "4", "--config-file", cfg, "--max-np", "6", "t"});
  REQUIRE(o.elastic);
  CHECK(o.elastic->min_np == 2);
  CHECK(o.elastic->max_np == 6);  // the flag
  CHECK(o.slots_per_host == 4);
  CHECK(o.elastic->timeout == std::chrono::seconds(30));
  CHECK(o.elastic->reset_limit == 3);
  CHECK(o.elastic->cooldown == std::make_pair(5, 60));
  std::ofstream(dir + "/bad.yaml") << "elastic:\n  min_np: 1\n  blacklist_cooldown_range: 5\n";
  CHECK_THROWS_WITH(parse({"-np", "4", "--config-file", dir + "/bad.yaml", "t"}),
                    Catch::Contains("config file " + dir + "/bad.yaml: elastic.blacklist_cooldown_range: expected "
                                    "[MIN, MAX], got '5'"));
  std::ofstream(dir + "/typo.yaml") << "elastic:\n  min_nps: 1\n";
  CHECK_THROWS_WITH(parse({"-np", "4", "--config-file", dir + "/typo.yaml", "t"}),
                    Catch::Contains("unknown key 'elastic.min_nps' (did you mean min_np?)"));
}

TEST_CASE("-x forwards or sets variables", "[cli]") {
  const auto o = parse({"-np", "1", "-x", "A=1", "-x", "B", "-x", "C=x=y", "-xD=", "t"}, {{"B", "from env"}});
  CHECK(envOf(o, "A") == "1");
  CHECK(envOf(o, "B") == "from env");
  CHECK(envOf(o, "C") == "x=y");
  CHECK(envOf(o, "D") == "");
  CHECK(envOf(parse({"-np", "1", "-x", "A=1", "-x", "A=2", "t"}), "A") == "2");
}

TEST_CASE("help, version and check-build print and exit 0", "[cli]") {
  const auto help = runProcess({test::hvdrunPath(), "--help"});
  CHECK(help.exit_code == 0);
  CHECK_THAT(help.out, Catch::Contains("usage: hvdrun") && Catch::Contains("Examples:") &&
                           Catch::Contains("--fusion-threshold-mb") && Catch::Contains("Exit status") &&
                           Catch::Contains("--no-rendezvous-token") &&
                           Catch::Contains("HVD_NO_RENDEZVOUS_TOKEN"));
  const auto version = runProcess({test::hvdrunPath(), "-v"});
  CHECK(version.exit_code == 0);
  CHECK_THAT(version.out, Catch::StartsWith("hvdrun "));
  const auto cb = runProcess({test::hvdrunPath(), "-cb"});
  CHECK(cb.exit_code == 0);
  CHECK_THAT(cb.out, Catch::Contains("[X] Gloo"));
}

TEST_CASE("every bad input: one line naming the token, exit code 2", "[cli]") {
  const auto tmp = test::tempDir();
  const std::string& dir = tmp.path();
  const std::string bad_hostfile = writeTemp(dir, "hosts.txt", "# hosts\nnode1 slots=2\nnode2 slots=two\n");
  const std::string bad_attr = writeTemp(dir, "attr.txt", "node1 cpus=2\n");
  const std::string bad_yaml = writeTemp(dir, "bad.yaml", "params: [unclosed\n");
  const std::string neg_yaml = writeTemp(dir, "neg.yaml", "params:\n  fusion_threshold_mb: -5\n");
  const std::string mpi_yaml = writeTemp(dir, "mpi.yaml", "controller: mpi\n");
  const std::string odd_yaml = writeTemp(dir, "odd.yaml", "controller: nccl\n");
  const std::string type_yaml = writeTemp(dir, "type.yaml", "params:\n  hierarchical_allreduce: maybe\n");
  const std::string typo_yaml = writeTemp(dir, "typo.yaml", "params: {fusion_threshold_mbb: 3}\n");
  const std::string far_yaml = writeTemp(dir, "far.yaml", "params: {compression: fp16}\n");
  const std::string moved_yaml = writeTemp(dir, "moved.yaml", "library_options: {fusion_threshold_mb: 3}\n");
  const std::string section_yaml = writeTemp(dir, "section.yaml", "parms: {fusion_threshold_mb: 3}\n");
  const std::string top_yaml = writeTemp(dir, "top.yaml", "fusion_threshold_mb: 3\n");
  const std::string scalar_yaml = writeTemp(dir, "scalar.yaml", "timeline: tl.json\n");
  const std::string quirk_yaml = writeTemp(dir, "quirk.yaml", "logging: {hide_timestamp: true}\n");
  const std::string enabled_yaml = writeTemp(dir, "enabled.yaml", "enabled: true\n");
  struct Case {
    Cmd args;
    std::string message;
    std::vector<std::string> env = {};
  };
  const std::vector<Case> cases = {
      {{}, "the following arguments are required: -np/--num-proc"},
      {{"-np"}, "argument -np/--num-proc: expected one argument"},
      {{"-np", "x", "true"}, "argument -np/--num-proc: invalid int value: 'x'"},
      {{"-np", "0", "true"}, "argument -np/--num-proc: must be at least 1, got 0"},
      {{"-np", "99999999999", "true"}, "invalid int value: '99999999999'"},
      {{"-np2", "true"}, "unrecognized arguments: -np2"},
      {{"-np", "2", "--launcher", "srun", "true"},
       "argument --launcher: invalid choice: 'srun' (choose from 'auto', 'local', 'ssh', 'slurm', 'agent')"},
      {{"-np", "2", "--launcher", "slurm", "--ssh-force", "true"},
       "argument --ssh-force: not allowed with --launcher slurm"},
      {{"-np", "2", "--min-np", "1", "--launcher", "slurm", "true"},
       "argument --launcher slurm: not allowed with an elastic job"},
      {{"-np", "2", "-H", "otherhost:2", "--launcher", "local", "true"},
       "argument --launcher local: host 'otherhost' is not this machine"},
      {{"--bogus", "-np", "1", "true"}, "unrecognized arguments: --bogus"},
      {{"-np", "1", "--hier", "true"}, "ambiguous option: --hier could match"},
      {{"-np", "1", "--verbose=1", "true"}, "argument --verbose: ignored explicit argument '1'"},
      {{"-np", "1", "-H"}, "argument -H/--hosts: expected one argument"},
      {{"-np", "1", "-H", "a:1", "-hostfile", "f", "true"},
       "argument -hostfile/--hostfile: not allowed with argument -H/--hosts"},
      {{"--mpi", "-np", "1", "true"}, "--mpi is not supported"},
      {{"--jsrun", "-np", "1", "true"}, "--jsrun is not supported"},
      {{"-np", "1", "--mpi-args=-x", "true"}, "--mpi-args is not supported"},
      {{"-np", "1", "--host-discovery-script", "/nonexistent/d.sh --all", "true"},
       "argument --host-discovery-script: '/nonexistent/d.sh' is not an executable file"},
      {{"-np", "1", "--host-discovery-script", "hvd-no-such-discovery", "true"},
       "argument --host-discovery-script: 'hvd-no-such-discovery' is not an executable file in PATH"},
      {{"-np", "1", "-H", "a:1", "--host-discovery-script", "true", "true"},
       "argument --host-discovery-script: not allowed with -H/--hosts (the script lists the hosts)"},
      {{"-np", "2", "--min-np", "0", "true"}, "argument --min-np: must be at least 1, got 0"},
      {{"-np", "2", "--min-num-proc", "3", "true"}, "argument --min-num-proc: 3 is more than -np 2"},
      {{"-np", "2", "--min-np", "1", "--max-np", "1", "true"}, "argument --max-np: 1 is less than -np 2"},
      {{"-np", "2", "--min-np", "x", "true"}, "argument --min-np: invalid int value: 'x'"},
      {{"-np", "2", "--min-np", "1", "--elastic-timeout", "0", "true"},
       "argument --elastic-timeout: must be > 0"},
      {{"-np", "2", "--min-np", "1", "--reset-limit", "-1", "true"},
       "argument --reset-limit: must be >= 0, got -1"},
      {{"-np", "2", "--min-np", "1", "--blacklist-cooldown-range", "5", "x", "true"},
       "argument --blacklist-cooldown-range: invalid int value: 'x'"},
      {{"-np", "2", "--min-np", "1", "--blacklist-cooldown-range", "5", "--verbose", "true"},
       "argument --blacklist-cooldown-range: expected 2 arguments"},
      {{"-np", "2", "--min-np", "1", "--blacklist-cooldown-range=5", "9", "true"},
       "argument --blacklist-cooldown-range: expected 2 arguments"},
      {{"-np", "2", "--min-np", "1", "--blacklist-cooldown-range", "9", "5", "true"},
       "need 1 <= MIN <= MAX <= 3600 seconds, got 9 5"},
      {{"-np", "2", "--min-np", "1", "--blacklist-cooldown-range", "0", "5", "true"}, "got 0 5"},
      {{"-np", "2", "--min-np", "1", "--blacklist-cooldown-range", "1", "3601", "true"}, "got 1 3601"},
      {{"-np", "2", "--host-discovery-script", "", "true"}, "argument --host-discovery-script: empty path"},
      {{"-np", "2", "-H", "a:x", "true"}, "-H \"a:x\": invalid slot count \"x\" for host \"a\""},
      {{"-np", "2", "-H", "a b:2", "true"}, "invalid host name \"a b\""},
      {{"-np", "2", "-H", "[fe80::1", "true"}, "unterminated '[' in host \"[fe80::1\""},
      {{"-np", "2", "-H", "a:1,,b:1", "true"}, "empty host entry 2"},
      {{"-np", "2", "-H", "fe80::1:2", "true"}, "IPv6 addresses go in brackets"},
      {{"-np", "4", "-H", "localhost:2", "true"},
       "Requested more processes (4) than there are available slots (2)"},
      {{"-np", "1", "-hostfile", bad_hostfile, "true"},
       bad_hostfile + ":3: invalid value \"two\" in \"slots=two\""},
      {{"-np", "1", "-hostfile", bad_attr, "true"}, bad_attr + ":1: unknown attribute \"cpus=2\""},
      {{"-np", "1", "-hostfile", dir + "/missing", "true"}, "cannot read hostfile \"" + dir + "/missing\""},
      {{"-np", "1", "--fusion-threshold-mb", "-1", "true"}, "fusion_threshold_mb=-1 must be >= 0"},
      {{"-np", "1", "--cycle-time-ms", "abc", "true"},
       "argument --cycle-time-ms: invalid float value: 'abc'"},
      {{"-np", "1", "--cycle-time-ms", "-2.5", "true"}, "cycle_time_ms=-2.5 must be >= 0"},
      {{"-np", "1", "--autotune-gaussian-process-noise", "1.5", "true"},
       "autotune_gaussian_process_noise=1.5 must be in [0, 1]"},
      {{"-np", "1", "--stall-check-warning-time-seconds", "-3", "true"},
       "stall_check_warning_time_seconds=-3 must be >= 0"},
      {{"-np", "1", "--log-level", "LOUD", "true"}, "argument --log-level: invalid choice: 'LOUD'"},
      {{"-np", "1", "-x", "1BAD=2", "true"}, "argument -x/--env: invalid variable name '1BAD'"},
      {{"-np", "1", "-x", "HOROVOD_RANK=3", "true"}, "HOROVOD_RANK is set by hvdrun for each worker"},
      {{"-np", "1", "-x", "HVD_TEST_SURELY_UNSET", "true"},
       "HVD_TEST_SURELY_UNSET is not set in hvdrun's environment"},
      {{"-np", "1", "-p", "70000", "true"}, "argument -p/--ssh-port: invalid port 70000"},
      {{"-np", "1", "-i", dir + "/nokey", "true"},
       "argument -i/--ssh-identity-file: cannot read \"" + dir + "/nokey\""},
      {{"-np", "1", "--start-timeout", "0", "true"}, "argument --start-timeout: must be > 0, got 0"},
      {{"-np", "1", "true"},
       "HOROVOD_START_TIMEOUT must be a positive number of seconds, got 'soon'",
       {"HOROVOD_START_TIMEOUT=soon"}},
      {{"-np", "1", "--ssh-known-hosts", "maybe", "true"},
       "argument --ssh-known-hosts: invalid choice: 'maybe'"},
      {{"-np", "1", "true"},
       "HVD_NO_RENDEZVOUS_TOKEN must be 1 (no token) or 0, got 'true'",
       {"HVD_NO_RENDEZVOUS_TOKEN=true"}},
      {{"-np", "1", "--no-rendezvous-token=yes", "true"},
       "argument --no-rendezvous-token: ignored explicit argument 'yes'"},
      {{"-np", "1", "--ssh-proxy", "sometimes", "true"},
       "argument --ssh-proxy: invalid choice: 'sometimes' (choose from 'auto', 'never')"},
      {{"-np", "1", "--bind-to", "socket", "true"},
       "argument --bind-to: invalid choice: 'socket' (choose from 'none', 'core')"},
      {{"-np", "1", "--bind-to", "core", "--ssh-proxy", "never", "true"},
       "argument --bind-to core: not allowed with --ssh-proxy never (hvd-proxy binds the ranks of a remote "
       "host)"},
      {{"-np", "1", "--output-filename=", "true"}, "argument --output-filename: empty directory name"},
      {{"-np", "1", "--network-interface", "nonexistent0", "true"}, "no interface \"nonexistent0\""},
      {{"-np", "1", "--config-file", bad_yaml, "true"}, "config file " + bad_yaml + ":"},
      {{"-np", "1", "--config-file", neg_yaml, "true"}, neg_yaml + ": fusion_threshold_mb=-5 must be >= 0"},
      {{"-np", "1", "--config-file", mpi_yaml, "true"}, "controller: mpi is not supported"},
      {{"-np", "1", "--config-file", odd_yaml, "true"}, "No such controller supported: nccl"},
      {{"-np", "1", "--config-file", type_yaml, "true"},
       "params.hierarchical_allreduce: expected true or false, got 'maybe'"},
      {{"-np", "1", "--config-file", typo_yaml, "true"},
       "config file " + typo_yaml +
           ": unknown key 'params.fusion_threshold_mbb' (did you mean fusion_threshold_mb?)"},
      {{"-np", "1", "--config-file", far_yaml, "true"},
       "config file " + far_yaml + ": unknown key 'params.compression'"},
      {{"-np", "1", "--config-file", moved_yaml, "true"},
       "unknown key 'library_options.fusion_threshold_mb' (did you mean params.fusion_threshold_mb?)"},
      {{"-np", "1", "--config-file", section_yaml, "true"}, "unknown key 'parms' (did you mean params?)"},
      {{"-np", "1", "--config-file", top_yaml, "true"},
       "unknown key 'fusion_threshold_mb' (did you mean params.fusion_threshold_mb?)"},
      {{"-np", "1", "--config-file", scalar_yaml, "true"},
       "config file " + scalar_yaml + ": 'timeline' must be a mapping of settings, got 'tl.json'"},
      {{"-np", "1", "--config-file", enabled_yaml, "true"},
       "unknown key 'enabled' (did you mean autotune.enabled or stall_check.enabled?)"},
      // horovodrun's own test file uses hide_timestamp, which horovodrun silently ignores.
      {{"-np", "1", "--config-file", quirk_yaml, "true"},
       "unknown key 'logging.hide_timestamp' (did you mean with_timestamp?)"},
      {{"-np", "2"},
       "no command to run: put the program and its arguments after the options, as in hvdrun -np 2 python "
       "train.py"},
      {{"-np", "2", "-H", "localhost:2", "--verbose"}, "no command to run"},
      {{"-np", "1", "--config-file", dir + "/none.yaml", "true"},
       "cannot read config file \"" + dir + "/none.yaml\""},
      {{"true"}, "SLURM_JOB_NODELIST: unterminated '[' in \"node[1-\"", {"SLURM_JOB_NODELIST=node[1-"}},
      {{"true"},
       "SLURM_TASKS_PER_NODE \"2\" describes 1 nodes but SLURM_JOB_NODELIST \"n[1-2]\" has 2",
       {"SLURM_JOB_NODELIST=n[1-2]", "SLURM_TASKS_PER_NODE=2"}},
  };
  REQUIRE(cases.size() >= 30);
  for (const auto& c : cases) {
    Cmd argv{test::hvdrunPath()};
    argv.insert(argv.end(), c.args.begin(), c.args.end());
    std::string joined;
    for (const auto& a : c.args) joined += a + " ";
    INFO("hvdrun " << joined);
    const auto r = runProcess(argv, c.env, "", std::chrono::milliseconds(20000));
    CHECK(r.exit_code == 2);
    CHECK(r.out.empty());
    const std::string first_line = r.err.substr(0, r.err.find('\n'));
    CHECK_THAT(first_line, Catch::StartsWith("hvdrun: error: ") && Catch::Contains(c.message));
    // The message and the --help hint: two lines, nothing else.
    CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 2);
  }
}

TEST_CASE("a missing command is refused before any worker starts or prints", "[cli]") {
  const auto r = runProcess({test::hvdrunPath(), "-np", "2", "-H", "localhost:2"}, {}, "",
                            std::chrono::milliseconds(20000));
  CHECK(r.exit_code == 2);
  CHECK(r.out.empty());
  CHECK_THAT(r.err, Catch::StartsWith("hvdrun: error: no command to run: "));
  CHECK_THAT(r.err, !Catch::Contains("HVD_RENDEZVOUS_TOKEN") && !Catch::Contains("HOROVOD_RANK"));
}

TEST_CASE("settings libhvd does not act on are passed on with a one-line warning", "[cli]") {
  const auto tmp = test::tempDir();
  const std::string& dir = tmp.path();
  const std::string cfg = writeTemp(dir, "hvd.yaml",
                                    "params: {hierarchical_allreduce: true, hierarchical_allgather: true, "
                                    "torus_allreduce: true}\n"
                                    "library_options: {num_nccl_streams: 2}\n");
  const CliResult parsed = parseCommandLine({"-np", "1", "--autotune", "--config-file", cfg, "t"}, {});
  // (hierarchical_allreduce, hierarchical_allgather and autotune are acted on: no warning for them.)
  CHECK(parsed.warnings == std::vector<std::string>{
                               cfg + ": params.torus_allreduce: libhvd has no torus allreduce; "
                                     "HOROVOD_TORUS_ALLREDUCE=1 is passed on for Horovod's own workers",
                               cfg + ": library_options.num_nccl_streams: libhvd does not use NCCL; "
                                     "HOROVOD_NUM_NCCL_STREAMS=2 is passed on for Horovod's own workers"});
  CHECK(envOf(parsed.options, "HOROVOD_AUTOTUNE") == "1");
  // Off, or set in hvdrun's own environment (the user chose the variable itself): no warning.
  CHECK(parseCommandLine({"-np", "1", "--no-torus-allreduce", "t"}, {}).warnings.empty());
  CHECK(parseCommandLine({"-np", "1", "t"}, {{"HOROVOD_AUTOTUNE", "1"}}).warnings.empty());
  // A number is a setting even when it is 0 (thread affinity 0 is core 0).
  CHECK(parseCommandLine({"-np", "1", "--thread-affinity", "0", "t"}, {}).warnings ==
        std::vector<std::string>{"--thread-affinity: libhvd does not pin its background thread; "
                                 "HOROVOD_THREAD_AFFINITY=0 is passed on for Horovod's own workers"});
  // Warnings wait for every usage check: a usage error stays the only line.
  const auto both = runProcess({test::hvdrunPath(), "-np", "3", "-H", "localhost:2", "--torus-allreduce", "true"}, {},
                               "", std::chrono::milliseconds(20000));
  CHECK(both.exit_code == 2);
  CHECK_THAT(both.err, Catch::StartsWith("hvdrun: error: Requested more processes (3)"));
  // The real binary prints them on stderr and runs the job.
  const auto r = runProcess({test::hvdrunPath(), "-np", "1", "--summary", "none", "--torus-allreduce", "true"}, {}, "",
                            std::chrono::milliseconds(20000));
  CHECK(r.exit_code == 0);
  CHECK(r.err ==
        "hvdrun: warning: --torus-allreduce: libhvd has no torus allreduce; HOROVOD_TORUS_ALLREDUCE=1 is passed on "
        "for Horovod's own workers\n");
}
