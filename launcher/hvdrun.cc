#include "launcher/hvdrun.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "base/error.h"
#include "base/parent_death.h"
#include "launcher/cli.h"
#include "launcher/elastic.h"
#include "launcher/host_plan.h"
#include "launcher/job.h"
#include "launcher/launcher.h"
#include "launcher/slurm/launcher.h"
#include "launcher/usage.h"

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

// Whether the hosts are a Slurm allocation's (no -H or hostfile given inside one).
bool fromAllocation(const HvdrunOptions& o, const Environment& env) {
  return !o.hosts && !o.hostfile && findEnv(env, "SLURM_JOB_NODELIST");
}

// "the Slurm allocation 42 (SLURM_JOB_NODELIST=node[1-2], SLURM_TASKS_PER_NODE=2(x2))"
std::string describeAllocation(const Environment& env) {
  const auto* id = findEnv(env, "SLURM_JOB_ID");
  const auto* nodes = findEnv(env, "SLURM_JOB_NODELIST");
  const auto* tasks = findEnv(env, "SLURM_TASKS_PER_NODE");
  return detail::concat("the Slurm allocation", id ? " " + *id : "", " (SLURM_JOB_NODELIST=", nodes ? *nodes : "",
                        ", SLURM_TASKS_PER_NODE=", tasks ? *tasks : "(unset: 1 per node)", ")");
}

// --launcher auto made concrete, and the checks every kind needs before anything starts.
void resolveLauncher(HvdrunOptions& o, const std::vector<HostSpec>& hosts, const Environment& env) {
  const bool any_remote = std::any_of(hosts.begin(), hosts.end(), [](const HostSpec& h) { return !isLocalHost(h.name); });
  if (o.launcher == LauncherKind::kAuto && fromAllocation(o, env) && any_remote) o.launcher = LauncherKind::kSlurm;
  if (o.launcher == LauncherKind::kLocal) {
    for (const auto& h : hosts) {
      usageCheck(isLocalHost(h.name), "argument --launcher local: host '", h.name,
                 "' is not this machine (choose --launcher ssh or slurm)");
    }
  }
  if (o.launcher == LauncherKind::kSlurm) {
    const auto srun = slurm::SlurmOptions::fromEnvironment().srun;
    usageCheck(findExecutable(srun, env).has_value(), "'", srun, "' not found in PATH: ",
               fromAllocation(o, env) ? "inside " + describeAllocation(env) + ", " : std::string(),
               "the Slurm launcher starts hvd-proxy on each node with srun (or choose --launcher ssh)");
  }
}

// With --verbose or --dry-run: where the hosts came from and what starts the ranks.
std::string describeHosts(const HvdrunOptions& o, const std::vector<HostSpec>& hosts, const Environment& env) {
  std::string list;
  for (const auto& h : hosts) list += (list.empty() ? "" : ",") + h.name + ":" + std::to_string(h.slots);
  return detail::concat("hvdrun: ", o.num_proc, " ranks on ", list, fromAllocation(o, env) ? " from " + describeAllocation(env) : "",
                        "; launcher ", toString(o.launcher), "\n");
}

}  // namespace

int hvdrunMain(int argc, char** argv) {
  try {
    applyParentDeathSignal();  // first: before the environment is read and anything could be left running
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
      return runElasticJob(options, hosts, env).exitCode();
    }
    const auto hosts = hostsFor(options, env);
    if (options.num_proc == 0) {  // inside Slurm without -np: the allocation's task count
      for (const auto& h : hosts) options.num_proc += h.slots;
      // SLURM_NTASKS is what was asked for; SLURM_TASKS_PER_NODE may round it up (--ntasks=3 with
      // --ntasks-per-node=2 says 2(x2)).
      if (const auto* ntasks = findEnv(env, "SLURM_NTASKS"); ntasks && fromAllocation(options, env)) {
        const int n = std::atoi(ntasks->c_str());
        usageCheck(n >= 1 && std::to_string(n) == *ntasks, "SLURM_NTASKS: invalid task count \"", *ntasks, "\"");
        options.num_proc = std::min(options.num_proc, n);
      }
    }
    std::vector<Placement> plan;
    try {
      plan = assignRanks(hosts, options.num_proc);
    } catch (const UsageError& e) {
      if (!fromAllocation(options, env)) throw;
      throw UsageError(detail::concat(e.what(), " in ", describeAllocation(env)));
    }
    resolveLauncher(options, hosts, env);
    // After every usage check: a usage error stays the only line on stderr.
    for (const auto& w : cli.warnings) std::fprintf(stderr, "hvdrun: warning: %s\n", w.c_str());
    // On stderr: a dry run's stdout stays one line per rank.
    if (options.dry_run || options.verbose) std::fputs(describeHosts(options, hosts, env).c_str(), stderr);
    if (options.dry_run) {
      std::fputs(describePlan(plan, options, env).c_str(), stdout);
      return 0;
    }
    return runJob(options, plan, env).exitCode();
  } catch (const UsageError& e) {
    std::fprintf(stderr, "hvdrun: error: %s\n%s\n", e.what(), usageHint().c_str());
    return kUsageExitCode;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "hvdrun: error: %s\n", e.what());
    return kErrorExitCode;
  }
}

}  // namespace hvd::launcher
