#include "launcher/cli_validate.h"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <set>
#include <sstream>

#include "launcher/cli_options.h"
#include "launcher/config_file.h"
#include "launcher/usage.h"

namespace hvd::launcher {

namespace po = boost::program_options;

namespace {

// ---------------------------------------------------------------------------------------------------------
// Typed values with argparse-style messages.

int toInt(const po::options_description& desc, const std::string& key, const std::string& text) {
  long long v = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  usageCheck(!text.empty() && ec == std::errc() && end == text.data() + text.size() && v >= INT32_MIN &&
                 v <= INT32_MAX,
             "argument ", displayName(desc, key), ": invalid int value: '", text, "'");
  return static_cast<int>(v);
}

double toFloat(const po::options_description& desc, const std::string& key, const std::string& text) {
  double v = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  usageCheck(!text.empty() && ec == std::errc() && end == text.data() + text.size() && std::isfinite(v),
             "argument ", displayName(desc, key), ": invalid float value: '", text, "'");
  return v;
}

// Python's str(float): "1.0", "0.5", "1e-05" is not needed for the values that occur here.
std::string pythonFloat(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  // Shortest representation that round-trips.
  for (int precision = 1; precision <= 17; ++precision) {
    std::snprintf(buf, sizeof buf, "%.*g", precision, v);
    if (std::strtod(buf, nullptr) == v) break;
  }
  std::string s = buf;
  if (s.find_first_of(".en") == std::string::npos) s += ".0";
  return s;
}

// Tunables that libhvd does not act on (key, why). Horovod's own workers under hvdrun do.
const std::vector<std::pair<std::string, std::string>> kIgnoredByLibhvd = {
    {"torus-allreduce", "libhvd has no torus allreduce"},
    {"mpi-threads-disable", "libhvd does not use MPI"},
    {"num-nccl-streams", "libhvd does not use NCCL"},
    {"tcp", "libhvd does not use NCCL"},
    {"thread-affinity", "libhvd does not pin its background thread"},
};

// The canonical text of a tunable's value (what the worker variable holds), validated.
std::string convertTunable(const po::options_description& desc, const Tunable& t, const std::string& text,
                           const std::string& origin) {
  std::string name = t.key;  // horovodrun names the setting with underscores in these messages
  std::replace(name.begin(), name.end(), '-', '_');
  switch (t.kind) {
    case TunableKind::kInt: {
      const int v = toInt(desc, t.key, text);
      usageCheck(!t.non_negative || v >= 0, origin, name, "=", v, " must be >= 0");
      return std::to_string(static_cast<long long>(v * t.scale));
    }
    case TunableKind::kFloat: {
      const double v = toFloat(desc, t.key, text);
      usageCheck(!t.non_negative || v >= 0, origin, name, "=", text, " must be >= 0");
      if (name == "autotune_gaussian_process_noise") {
        usageCheck(v >= 0 && v <= 1, origin, name, "=", text, " must be in [0, 1]");
      }
      return pythonFloat(v);
    }
    case TunableKind::kBool:
      return text;  // already "1" / "0"
    case TunableKind::kString:
      return text;
    case TunableKind::kLogLevel: {
      static const std::set<std::string> kLevels = {"TRACE", "DEBUG", "INFO", "WARNING", "ERROR", "FATAL"};
      std::string upper = text;
      for (auto& c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
      usageCheck(kLevels.count(upper) > 0, origin, "argument --log-level: invalid choice: '", text,
                 "' (choose from 'TRACE', 'DEBUG', 'INFO', 'WARNING', 'ERROR', 'FATAL')");
      return upper;
    }
  }
  return text;
}

std::chrono::seconds toSeconds(const po::options_description& desc, const std::string& key,
                               const std::string& text, bool allow_zero) {
  const int v = toInt(desc, key, text);
  usageCheck(v > 0 || (allow_zero && v == 0), "argument ", displayName(desc, key), ": must be ",
             allow_zero ? ">= 0" : "> 0", ", got ", v);
  return std::chrono::seconds(v);
}

// One of hvdrun's own on/off settings: the flag's value when given, else NAME in hvdrun's environment (1 or
// 0; anything else is a usage error naming it), else fallback. one_means says what 1 turns on.
bool hvdSwitch(std::optional<bool> flag, const Environment& env, const char* name, const char* one_means,
               bool fallback) {
  if (flag) return *flag;
  const auto* v = findEnv(env, name);
  if (!v || v->empty()) return fallback;
  usageCheck(*v == "0" || *v == "1", name, " must be 1 (", one_means, ") or 0, got '", *v, "'");
  return *v == "1";
}

bool isEnvName(const std::string& name) {
  if (name.empty() || std::isdigit(static_cast<unsigned char>(name[0]))) return false;
  for (unsigned char c : name) {
    if (!std::isalnum(c) && c != '_') return false;
  }
  return true;
}

// The elastic flags: checked whatever the mode; without --min-np or a discovery script they are ignored.
void parseElastic(const po::options_description& desc, std::map<std::string, std::string>& last,
                  const Environment& env, const YAML::Node& config, const std::string& config_path,
                  HvdrunOptions& o, std::vector<std::string>& warnings) {
  // The config file's elastic section stands in for the flags that are not given (a flag always wins).
  if (config && config["elastic"] && config["elastic"].IsMap()) {
    addElasticSettings(config, config_path, last);
    if (!o.slots_per_host && last.count("slots-per-host")) {
      o.slots_per_host = toInt(desc, "slots-per-host", last["slots-per-host"]);
      usageCheck(*o.slots_per_host >= 0, "argument --slots-per-host: must be >= 0, got ", *o.slots_per_host);
    }
  }
  const auto given = [&](const char* key) { return last.count(key) > 0; };
  // The long and the short spelling share one setting, as in horovodrun.
  const char* min_key = given("min-num-proc") ? "min-num-proc" : "min-np";
  const char* max_key = given("max-num-proc") ? "max-num-proc" : "max-np";
  HvdrunOptions::Elastic e;
  e.min_np = o.num_proc;
  if (given(min_key)) {
    e.min_np = toInt(desc, min_key, last[min_key]);
    usageCheck(e.min_np >= 1, "argument --", min_key, ": must be at least 1, got ", e.min_np);
    usageCheck(o.num_proc == 0 || e.min_np <= o.num_proc, "argument --", min_key, ": ", e.min_np,
               " is more than -np ", o.num_proc,
               " (-np is the size the job starts at, --min-np the size it may shrink to)");
  }
  if (given(max_key)) {
    const int max_np = toInt(desc, max_key, last[max_key]);
    usageCheck(max_np >= std::max(o.num_proc, 1), "argument --", max_key, ": ", max_np, " is less than -np ",
               o.num_proc);
    e.max_np = max_np;
  }
  if (given("host-discovery-script")) {
    const std::string& script = last["host-discovery-script"];
    usageCheck(!script.empty(), "argument --host-discovery-script: empty path");
    // It runs through /bin/sh, so it may carry arguments; its program must be there to run.
    const std::string program = script.substr(0, script.find_first_of(" \t"));
    usageCheck(findExecutable(program, env).has_value(), "argument --host-discovery-script: '", program,
               "' is not an executable file", program.find('/') == std::string::npos ? " in PATH" : "");
    e.discovery_script = script;
  }
  if (given("elastic-timeout")) {
    e.timeout = toSeconds(desc, "elastic-timeout", last["elastic-timeout"], false);
  } else if (const auto* v = findEnv(env, "HOROVOD_ELASTIC_TIMEOUT"); v && !v->empty()) {
    long long seconds = 0;
    const auto [end, ec] = std::from_chars(v->data(), v->data() + v->size(), seconds);
    usageCheck(ec == std::errc() && end == v->data() + v->size() && seconds > 0 && seconds <= INT32_MAX,
               "HOROVOD_ELASTIC_TIMEOUT must be a positive number of seconds, got '", *v, "'");
    e.timeout = std::chrono::seconds(seconds);
  }
  if (given("reset-limit")) {
    e.reset_limit = toInt(desc, "reset-limit", last["reset-limit"]);
    usageCheck(*e.reset_limit >= 0, "argument --reset-limit: must be >= 0, got ", *e.reset_limit);
  }
  if (given("blacklist-cooldown-range")) {
    const std::string& text = last["blacklist-cooldown-range"];
    const auto space = text.find(' ');
    const int lo = toInt(desc, "blacklist-cooldown-range", text.substr(0, space));
    const int hi = toInt(desc, "blacklist-cooldown-range", text.substr(space + 1));
    usageCheck(lo >= 1 && hi <= 3600 && lo <= hi,
               "argument --blacklist-cooldown-range: need 1 <= MIN <= MAX <= ", "3600 seconds, got ", lo, " ",
               hi);
    e.cooldown = std::make_pair(lo, hi);
  }
  if (given(min_key) || e.discovery_script) {
    usageCheck(!(e.discovery_script && (o.hosts || o.hostfile)),
               "argument --host-discovery-script: not allowed with ", o.hosts ? "-H/--hosts" : "--hostfile",
               " (the script lists the hosts)");
    o.elastic = e;
    return;
  }
  // horovodrun runs such a job as a static one and ignores these; say so.
  for (const char* only :
       {"max-np", "max-num-proc", "elastic-timeout", "reset-limit", "blacklist-cooldown-range"}) {
    if (given(only)) {
      warnings.push_back(detail::concat("--", only,
                                        " is ignored: it applies to elastic jobs only (with --min-np ",
                                        "or --host-discovery-script)"));
    }
  }
}

}  // namespace

void validateFlags(const po::options_description& desc, ParsedFlags& flags,
                   const std::vector<std::string>& command, const Environment& env, CliResult& result) {
  std::map<std::string, std::string>& last = flags.last;
  std::map<std::string, std::vector<std::string>>& repeated = flags.repeated;
  const std::map<std::string, bool>& switches = flags.switches;
  const auto given = [&](const char* key) { return last.count(key) > 0; };

  HvdrunOptions& o = result.options;
  usageCheck(!(given("hosts") && given("hostfile")),
             "argument -hostfile/--hostfile: not allowed with argument -H/--hosts");
  const bool in_slurm = findEnv(env, "SLURM_JOB_NODELIST") && !given("hosts") && !given("hostfile");
  usageCheck(given("num-proc") || in_slurm, "the following arguments are required: -np/--num-proc");
  // horovodrun runs `env` when the command is missing: every rank prints its environment, the job's
  // secret included. Nobody wants that; a forgotten program is a usage error here.
  usageCheck(!command.empty(),
             "no command to run: put the program and its arguments after the options, as in "
             "hvdrun -np 2 python train.py");
  if (given("num-proc")) {
    o.num_proc = toInt(desc, "num-proc", last["num-proc"]);
    usageCheck(o.num_proc >= 1, "argument -np/--num-proc: must be at least 1, got ", o.num_proc);
  }
  if (given("hosts")) o.hosts = last["hosts"];
  if (given("hostfile")) o.hostfile = last["hostfile"];
  if (given("slots-per-host")) {
    o.slots_per_host = toInt(desc, "slots-per-host", last["slots-per-host"]);
    usageCheck(*o.slots_per_host >= 0, "argument --slots-per-host: must be >= 0, got ", *o.slots_per_host);
  }

  // SSH.
  if (given("ssh-port")) {
    const int port = toInt(desc, "ssh-port", last["ssh-port"]);
    usageCheck(port >= 1 && port <= 65535, "argument -p/--ssh-port: invalid port ", port, " (1 to 65535)");
    o.ssh.port = static_cast<uint16_t>(port);
  }
  if (given("ssh-identity-file")) {
    const std::string& file = last["ssh-identity-file"];
    usageCheck(::access(file.c_str(), R_OK) == 0, "argument -i/--ssh-identity-file: cannot read \"", file,
               "\": ", errnoText(errno));
    o.ssh.identity_file = file;
  }
  if (given("ssh-known-hosts")) {
    const std::string& policy = last["ssh-known-hosts"];
    if (policy == "strict") {
      o.ssh.known_hosts = KnownHostsPolicy::kStrict;
    } else if (policy == "accept-new") {
      o.ssh.known_hosts = KnownHostsPolicy::kAcceptNew;
    } else {
      usageCheck(policy == "off", "argument --ssh-known-hosts: invalid choice: '", policy,
                 "' (choose from 'strict', 'accept-new', 'off')");
      o.ssh.known_hosts = KnownHostsPolicy::kOff;
    }
  }
  if (given("ssh-connect-timeout")) {
    o.ssh.connect_timeout = toSeconds(desc, "ssh-connect-timeout", last["ssh-connect-timeout"], false);
  }
  o.ssh.force_ssh = given("ssh-force");
  if (given("launcher")) {
    const std::string& kind = last["launcher"];
    const std::optional<LauncherKind> parsed = valueOf(kLauncherKindNames, kind);
    usageCheck(parsed.has_value(), "argument --launcher: invalid choice: '", kind, "' (choose from ",
               choices(kLauncherKindNames), ")");
    o.launcher = *parsed;
    usageCheck(!o.ssh.force_ssh || o.launcher == LauncherKind::kSsh || o.launcher == LauncherKind::kAuto,
               "argument --ssh-force: not allowed with --launcher ", kind);
  }
  if (given("launcher-agent")) {
    o.launcher_agent = last["launcher-agent"];
    usageCheck(o.launcher_agent.find_first_not_of(" \t") != std::string::npos, "argument --launcher-agent: '",
               o.launcher_agent, "' names no program");
    usageCheck(o.launcher == LauncherKind::kAuto || o.launcher == LauncherKind::kAgent,
               "argument --launcher-agent: not allowed with --launcher ", toString(o.launcher));
    usageCheck(!o.ssh.force_ssh, "argument --launcher-agent: not allowed with --ssh-force");
    o.launcher = LauncherKind::kAgent;
  }
  usageCheck(o.launcher != LauncherKind::kAgent || !o.launcher_agent.empty(),
             "argument --launcher agent: needs --launcher-agent \"PROGRAM ARGS\" (the program that starts "
             "hvd-proxy on a host)");
  if (o.ssh.force_ssh) o.launcher = LauncherKind::kSsh;
  if (o.launcher == LauncherKind::kSsh) o.ssh.force_ssh = true;
  if (given("ssh-proxy")) {
    const std::string& mode = last["ssh-proxy"];
    usageCheck(mode == "auto" || mode == "never", "argument --ssh-proxy: invalid choice: '", mode,
               "' (choose from 'auto', 'never')");
    o.ssh.proxy = mode == "auto";
  }
  if (given("bind-to")) {
    const std::string& unit = last["bind-to"];
    usageCheck(unit == "none" || unit == "core", "argument --bind-to: invalid choice: '", unit,
               "' (choose from 'none', 'core')");
    o.bind_to_core = unit == "core";
    // Remote ranks are bound by hvd-proxy; started by ssh alone they could not be.
    usageCheck(!o.bind_to_core || o.ssh.proxy.value_or(true),
               "argument --bind-to core: not allowed with --ssh-proxy never "
               "(hvd-proxy binds the ranks of a remote host)");
  }

  // Timeouts: flag > HOROVOD_START_TIMEOUT > default.
  if (given("start-timeout")) {
    o.start_timeout = toSeconds(desc, "start-timeout", last["start-timeout"], false);
    o.start_timeout_explicit = true;
  } else if (const auto* v = findEnv(env, "HOROVOD_START_TIMEOUT")) {
    int seconds = 0;
    const auto [end, ec] = std::from_chars(v->data(), v->data() + v->size(), seconds);
    usageCheck(ec == std::errc() && end == v->data() + v->size() && seconds > 0,
               "HOROVOD_START_TIMEOUT must be a positive number of seconds, got '", *v, "'");
    o.start_timeout = std::chrono::seconds(seconds);
    o.start_timeout_explicit = true;
  }
  if (given("termination-grace-seconds")) {
    o.grace_period = toSeconds(desc, "termination-grace-seconds", last["termination-grace-seconds"], true);
  }

  // Network interfaces: union in the order given (horovodrun keeps a set; hvdrun keeps the order, so the
  // first one is HOROVOD_GLOO_IFACE deterministically).
  for (const char* key : {"network-interface", "network-interfaces"}) {
    for (const auto& list : repeated[key]) {
      std::stringstream in(list);
      std::string nic;
      while (std::getline(in, nic, ',')) {
        usageCheck(!nic.empty(), "argument --", key, ": empty interface name in '", list, "'");
        if (std::find(o.network_interfaces.begin(), o.network_interfaces.end(), nic) ==
            o.network_interfaces.end()) {
          o.network_interfaces.push_back(nic);
        }
      }
    }
  }

  if (given("output-filename")) {
    o.output_filename = last["output-filename"];
    usageCheck(!o.output_filename->empty(), "argument --output-filename: empty directory name");
  }
  o.prefix_timestamp = given("prefix-output-with-timestamp");
  o.tag_output = !given("no-tag-output");
  o.verbose = given("verbose");
  o.dry_run = given("dry-run");
  if (given("status-port")) {
    const int port = toInt(desc, "status-port", last["status-port"]);
    usageCheck(port >= 0 && port <= 65535, "argument --status-port: ", port, " is not a port (0-65535)");
    o.status_port = static_cast<uint16_t>(port);
  }
  if (given("status-address")) {
    o.status_address = last["status-address"];
    usageCheck(!o.status_address.empty(), "argument --status-address: empty address");
    usageCheck(o.status_port.has_value(), "argument --status-address: needs --status-port");
  }
  if (given("summary")) {
    const std::string& text = last["summary"];
    if (text == "table") {
      o.summary_table = true;
    } else if (text == "none") {
      o.summary_table = false;
    } else if (text.rfind("json ", 0) == 0 && text.size() > 5) {
      o.summary_json = text.substr(5);
    } else {
      usageCheck(false, "argument --summary: invalid choice '", text,
                 "' (choose from table, none, json FILE)");
    }
  }
  o.disable_cache = given("disable-cache");
  // Rendezvous token: flag > HVD_NO_RENDEZVOUS_TOKEN > on.
  o.rendezvous_token = !hvdSwitch(given("no-rendezvous-token") ? std::optional(true) : std::nullopt, env,
                                  "HVD_NO_RENDEZVOUS_TOKEN", "no token", false);
  // Horovod compatibility package: flag > HVD_HOROVOD_COMPAT > off.
  o.horovod_compat = hvdSwitch(given("horovod-compat") ? std::optional(true) : std::nullopt, env,
                               "HVD_HOROVOD_COMPAT", "on", false);
  // Workers' malloc thresholds: flag > HVD_MALLOC_TUNING > on.
  o.malloc_tuning = hvdSwitch(given("no-malloc-tuning") ? std::optional(false) : std::nullopt, env,
                              "HVD_MALLOC_TUNING", "on", true);

  // Tuning: flag > environment > config file > default (the worker's own default: nothing is set).
  YAML::Node config;
  std::string config_path;
  if (given("config-file")) {
    config_path = last["config-file"];
    config = loadConfig(config_path);
    checkController(config, config_path, given("gloo"));
  }
  std::map<std::string, std::string> resolved;  // key -> worker value ("" never stored)
  std::map<std::string, std::string> asked_by;  // key -> the flag or config entry that set it
  for (const auto& t : kTunables) {
    std::optional<std::string> text;
    std::string origin;
    if (t.kind == TunableKind::kBool) {
      if (const auto sw = switches.find(t.key); sw != switches.end()) text = sw->second ? "1" : "0";
    } else if (given(t.key)) {
      text = last[t.key];
    }
    if (text) asked_by[t.key] = std::string("--") + t.key;
    if (!text && findEnv(env, t.env)) {
      resolved[t.key] = *findEnv(env, t.env);  // inherited by the workers as is
      continue;
    }
    if (!text && config) {
      text = yamlValue(config, t, config_path);
      origin = config_path + ": ";
      if (text) asked_by[t.key] = detail::concat(config_path, ": ", t.section, ".", t.yaml);
    }
    if (text) resolved[t.key] = convertTunable(desc, t, *text, origin);
  }
  // Settings Horovod's own workers act on and libhvd does not: passed on, with a warning, so that nobody
  // believes they took effect in an hvd worker.
  for (const auto& [key, why] : kIgnoredByLibhvd) {
    const auto it = resolved.find(key);
    const auto by = asked_by.find(key);
    const auto t =
        std::find_if(kTunables.begin(), kTunables.end(), [&](const Tunable& x) { return key == x.key; });
    if (it == resolved.end() || by == asked_by.end() || (t->kind == TunableKind::kBool && it->second == "0"))
      continue;
    result.warnings.push_back(detail::concat(by->second, ": ", why, "; ", t->env, "=", it->second,
                                             " is passed on for Horovod's own workers"));
  }
  for (const auto& t : kTunables) {
    const auto it = resolved.find(t.key);
    if (it == resolved.end() || (findEnv(env, t.env) && *findEnv(env, t.env) == it->second)) continue;
    if (t.gate) {
      const auto gate = resolved.find(t.gate);
      if (gate == resolved.end() || gate->second.empty() || gate->second == "0") continue;
    }
    o.worker_env.emplace_back(t.env, it->second);
  }

  // -x NAME[=VALUE].
  for (const auto& item : repeated["env"]) {
    const auto eq = item.find('=');
    const std::string name = item.substr(0, eq);
    usageCheck(isEnvName(name), "argument -x/--env: invalid variable name '", name, "' in '", item, "'");
    usageCheck(
        !isReservedVariable(name), "argument -x/--env: ", name,
        " is set by hvdrun for each worker and cannot be overridden",
        name == "HOROVOD_GLOO_IFACE" || name == "NCCL_SOCKET_IFNAME" ? " (use --network-interface)" : "");
    std::string value;
    if (eq != std::string::npos) {
      value = item.substr(eq + 1);
    } else {
      const auto* inherited = findEnv(env, name);
      usageCheck(inherited != nullptr, "argument -x/--env: ", name, " is not set in hvdrun's environment");
      value = *inherited;
    }
    const auto existing = std::find_if(o.worker_env.begin(), o.worker_env.end(),
                                       [&](const auto& kv) { return kv.first == name; });
    if (existing != o.worker_env.end()) {
      existing->second = value;
    } else {
      o.worker_env.emplace_back(name, value);
    }
  }

  parseElastic(desc, last, env, config, config_path, o, result.warnings);
  // The srun step is made once, over the first hosts; an elastic job adds hosts later.
  usageCheck(
      !o.elastic || o.launcher != LauncherKind::kSlurm,
      "argument --launcher slurm: not allowed with an elastic job (--min-np or --host-discovery-script); "
      "its hosts start over ssh or locally");

  o.command = command;
}

}  // namespace hvd::launcher
