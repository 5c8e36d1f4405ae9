#include "launcher/hvdrun.h"

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "launcher/cli.h"
#include "launcher/host_plan.h"
#include "launcher/elastic.h"
#include "launcher/job.h"
#include "rendezvous/error.h"

namespace hvd::launcher {

namespace {

constexpr int kUsageExitCode = 2;  // argparse's code for usage errors
constexpr int kErrorExitCode = 1;

// Where the ranks run: -H, --hostfile, a Slurm allocation, or np slots on localhost (horovodrun's order).
std::vector<HostSpec> hostsFor(const HvdrunOptions& o, const Environment& env) {
  if (o.hosts) return parseHostList(*o.hosts, o.slots_per_host.value_or(1));
  if (o.hostfile) return parseHostfile(*o.hostfile);
  if (const auto* nodelist = findEnv(env, "SLURM_JOB_NODELIST")) {
    const auto* tasks = findEnv(env, "SLURM_TASKS_PER_NODE");
    return slurmHosts(*nodelist, tasks ? *tasks : "");
  }
  return {HostSpec{"localhost", std::nullopt, o.num_proc}};
}

}  // namespace

int hvdrunMain(int argc, char** argv) {
  try {
    const Environment env = currentEnvironment();
    CliResult cli = parseCommandLine(std::vector<std::string>(argv + 1, argv + argc), env);
    if (cli.action == CliResult::Action::kPrintAndExit) {
      std::fputs(cli.text.c_str(), stdout);
      return 0;
    }
    HvdrunOptions& options = cli.options;
    if (options.elastic) {
      for (const auto& w : cli.warnings) std::fprintf(stderr, "hvdrun: warning: %s\n", w.c_str());
      // The hosts come from the discovery script, else from -H / --hostfile / the allocation (fixed).
      const auto hosts = options.elastic->discovery_script ? std::vector<HostSpec>{} : hostsFor(options, env);
      if (options.num_proc == 0) {  // inside Slurm without -np
        if (hosts.empty()) throw UsageError("-np is required with --host-discovery-script");
        for (const auto& h : hosts) options.num_proc += h.slots;
        if (options.elastic->min_np == 0) options.elastic->min_np = options.num_proc;
      }
      if (options.dry_run) {
        if (hosts.empty()) {
          std::printf("elastic job: hosts from '%s', starting at -np %d\n", options.elastic->discovery_script->c_str(),
                      options.num_proc);
        } else {
          // The first round takes every slot up to --max-np once -np are there.
          int first = 0;
          for (const auto& h : hosts) first += h.slots;
          first = std::min(first, options.elastic->max_np.value_or(first));
          std::printf("elastic job: first round of %d ranks (each worker also gets HOROVOD_ELASTIC=1, "
                      "HVD_ELASTIC_ROUND and HOROVOD_ELASTIC_TIMEOUT)\n", std::max(first, options.num_proc));
          std::fputs(describePlan(assignRanks(hosts, std::max(first, options.num_proc)), options, env).c_str(), stdout);
        }
        return 0;
      }
      ElasticJob job(std::move(options), hosts, env);
      return job.run().exitCode();
    }
    const auto hosts = hostsFor(options, env);
    if (options.num_proc == 0) {  // inside Slurm without -np: every task of the allocation
      for (const auto& h : hosts) options.num_proc += h.slots;
    }
    auto plan = assignRanks(hosts, options.num_proc);
    // After every usage check: a usage error stays the only line on stderr.
    for (const auto& w : cli.warnings) std::fprintf(stderr, "hvdrun: warning: %s\n", w.c_str());
    if (options.dry_run) {
      std::fputs(describePlan(plan, options, env).c_str(), stdout);
      return 0;
    }
    Job job(std::move(options), std::move(plan), env);
    return job.run().exitCode();
  } catch (const UsageError& e) {
    std::fprintf(stderr, "hvdrun: error: %s\n%s\n", e.what(), usageHint().c_str());
    return kUsageExitCode;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "hvdrun: error: %s\n", e.what());
    return kErrorExitCode;
  }
}

}  // namespace hvd::launcher
