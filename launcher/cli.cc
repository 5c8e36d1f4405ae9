#include "launcher/cli.h"

#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <map>
#include <set>

#include <boost/program_options.hpp>

#include "hvd/config.h"
#include "launcher/cli_options.h"
#include "launcher/cli_validate.h"
#include "launcher/usage.h"
#include "rendezvous/token.h"

extern char** environ;

namespace hvd::launcher {

namespace po = boost::program_options;

Environment currentEnvironment() {
  Environment env;
  for (char** it = environ; it && *it; ++it) {
    const std::string entry = *it;
    const auto eq = entry.find('=');
    if (eq == std::string::npos || eq == 0) continue;
    env.emplace_back(entry.substr(0, eq), entry.substr(eq + 1));
  }
  return env;
}

const std::string* findEnv(const Environment& env, const std::string& name) {
  for (const auto& [key, value] : env) {
    if (key == name) return &value;
  }
  return nullptr;
}

bool isReservedVariable(const std::string& name) {
  static const std::set<std::string> kReserved = {"HOROVOD_HOSTNAME",
                                                  "HOROVOD_RANK",
                                                  "HOROVOD_SIZE",
                                                  "HOROVOD_LOCAL_RANK",
                                                  "HOROVOD_LOCAL_SIZE",
                                                  "HOROVOD_CROSS_RANK",
                                                  "HOROVOD_CROSS_SIZE",
                                                  "HOROVOD_CONTROLLER",
                                                  "HOROVOD_CPU_OPERATIONS",
                                                  "HOROVOD_GLOO_IFACE",
                                                  "NCCL_SOCKET_IFNAME",
                                                  "HOROVOD_GLOO_RENDEZVOUS_ADDR",
                                                  "HOROVOD_GLOO_RENDEZVOUS_PORT",
                                                  rendezvous::kTokenEnv};
  return kReserved.count(name) > 0;
}

std::string usageHint() { return "Try 'hvdrun --help' for the flags and examples."; }

namespace {

// ---------------------------------------------------------------------------------------------------------
// argparse-compatible tokenizer: finds where the command starts and rewrites every option into the
// canonical "--key" / "--key=value" form for Boost.Program_options.

struct Tokenized {
  std::vector<std::string> canonical;
  std::vector<std::string> command;
};

bool looksNegativeNumber(const std::string& t) {
  if (t.size() < 2 || t[0] != '-') return false;
  double ignored = 0;
  const auto [end, ec] = std::from_chars(t.data() + 1, t.data() + t.size(), ignored);
  return ec == std::errc() && end == t.data() + t.size();
}

bool takesValue(const po::options_description& desc, const std::string& key) {
  return desc.find(key, false).semantic()->max_tokens() > 0;
}

// Resolves "--name" (exact, else unique prefix among long names) to a canonical key.
std::string resolveLong(const po::options_description& desc, const std::string& name,
                        const std::string& token) {
  if (desc.find_nothrow(name, false) && name.size() > 1) return name;
  std::vector<std::string> matches;
  for (const auto& d : desc.options()) {
    const auto [names, count] = d->long_names();
    for (size_t i = 0; i < count; ++i) {
      if (names[i].size() > 1 && names[i].compare(0, name.size(), name) == 0) matches.push_back(names[i]);
    }
  }
  usageCheck(!matches.empty(), "unrecognized arguments: ", token);
  if (matches.size() > 1) {
    std::string list;
    for (const auto& m : matches) list += (list.empty() ? "--" : ", --") + m;
    throw UsageError(detail::concat("ambiguous option: --", name, " could match ", list));
  }
  return matches.front();
}

Tokenized tokenize(const po::options_description& desc, const std::vector<std::string>& args) {
  Tokenized out;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& t = args[i];
    if (t == "--") {
      out.command.assign(args.begin() + i + 1, args.end());
      return out;
    }
    if (t.size() < 2 || t[0] != '-' || looksNegativeNumber(t)) {
      out.command.assign(args.begin() + i, args.end());
      return out;
    }
    const bool dashdash = t[1] == '-';
    const auto eq = t.find('=');
    const std::string name =
        t.substr(dashdash ? 2 : 1, eq == std::string::npos ? std::string::npos : eq - (dashdash ? 2 : 1));
    std::optional<std::string> value;
    if (eq != std::string::npos) value = t.substr(eq + 1);
    std::string key;
    if (dashdash) {
      usageCheck(!name.empty(), "unrecognized arguments: ", t);
      key = resolveLong(desc, name, t);
    } else if (const auto alias = kSingleDashLong.find(name); alias != kSingleDashLong.end()) {
      key = alias->second;
    } else if (const auto* d = desc.find_nothrow("-" + t.substr(1, 1), false, false, false);
               d && name.size() == 1) {
      key = d->long_name();  // "-x", "-p", "-x=VALUE"
    } else if (d && d->semantic()->max_tokens() > 0) {
      key = d->long_name();  // "-p2222", "-xNAME=V": a short option with its value attached
      value = t.substr(2);
    } else {
      // argparse also takes unambiguous prefixes of the single-dash long options ("-host" for -hostfile).
      std::vector<std::string> matches;
      for (const auto& [alias, target] : kSingleDashLong) {
        if (alias.compare(0, name.size(), name) == 0) matches.push_back(target);
      }
      usageCheck(matches.size() == 1, matches.empty() ? "unrecognized arguments: " : "ambiguous option: ", t);
      key = matches.front();
    }
    if (key == "blacklist-cooldown-range") {
      // argparse's nargs=2: exactly two following words, never the "=value" form.
      auto isValue = [&](size_t j) {
        return j < args.size() && (args[j].empty() || args[j][0] != '-' || looksNegativeNumber(args[j]));
      };
      usageCheck(!value && isValue(i + 1) && isValue(i + 2), "argument ", displayName(desc, key),
                 ": expected 2 arguments");
      out.canonical.push_back("--" + key + "=" + args[i + 1] + " " + args[i + 2]);
      i += 2;
      continue;
    }
    if (key == "summary" && !value && i + 1 < args.size() && args[i + 1] == "json") {
      // "--summary json FILE": the format and the file as two words.
      usageCheck(i + 2 < args.size() && !args[i + 2].empty() && args[i + 2][0] != '-', "argument ",
                 displayName(desc, key), ": json needs a FILE: --summary json FILE");
      out.canonical.push_back("--summary=json " + args[i + 2]);
      i += 2;
      continue;
    }
    if (takesValue(desc, key)) {
      if (!value) {
        usageCheck(i + 1 < args.size() &&
                       (args[i + 1].empty() || args[i + 1][0] != '-' || looksNegativeNumber(args[i + 1])),
                   "argument ", displayName(desc, key), ": expected one argument");
        value = args[++i];
      }
      if (value->empty()) {
        out.canonical.insert(out.canonical.end(), {"--" + key, ""});  // Boost rejects "--key="
      } else {
        out.canonical.push_back("--" + key + "=" + *value);
      }
    } else {
      usageCheck(!value, "argument ", displayName(desc, key), ": ignored explicit argument '",
                 value.value_or(""), "'");
      out.canonical.push_back("--" + key);
    }
  }
  return out;
}

}  // namespace

// `program` as the shell finds it: a path with '/' as it is, else the first match in the PATH of `env`.
std::optional<std::string> findExecutable(const std::string& program, const Environment& env) {
  if (program.find('/') != std::string::npos) {
    if (::access(program.c_str(), X_OK) == 0) return program;
    return std::nullopt;
  }
  const auto* path = findEnv(env, "PATH");
  const std::string dirs = path ? *path : "/usr/local/bin:/usr/bin:/bin";
  for (size_t start = 0; start <= dirs.size();) {
    const size_t end = std::min(dirs.find(':', start), dirs.size());
    const std::string dir = end > start ? dirs.substr(start, end - start) : ".";
    const std::string candidate = dir + "/" + program;
    if (::access(candidate.c_str(), X_OK) == 0) return candidate;
    start = end + 1;
  }
  return std::nullopt;
}

CliResult parseCommandLine(const std::vector<std::string>& args, const Environment& env) {
  const po::options_description desc = makeDescription();
  const Tokenized tokens = tokenize(desc, args);

  po::parsed_options parsed(&desc);
  try {
    parsed = po::command_line_parser(tokens.canonical)
                 .options(desc)
                 .style(po::command_line_style::allow_long | po::command_line_style::long_allow_adjacent |
                        po::command_line_style::long_allow_next)
                 .run();
  } catch (const po::error& e) {
    throw UsageError(e.what());
  }

  // Last value of each single-valued option, every value of repeatable ones, in command-line order.
  std::map<std::string, std::string> last;
  std::map<std::string, std::vector<std::string>> repeated;
  std::map<std::string, bool> switches;
  for (const auto& opt : parsed.options) {
    const std::string& key = opt.string_key;
    const std::string value = opt.value.empty() ? "" : opt.value.front();
    if (kRepeatable.count(key)) {
      repeated[key].push_back(value);
    } else if (const auto sw = kSwitches.find(key); sw != kSwitches.end()) {
      switches[sw->second.first] = sw->second.second;
    } else {
      last[key] = value;
    }
  }
  const auto given = [&](const char* key) { return last.count(key) > 0; };

  CliResult result;
  if (given("help")) {
    result.action = CliResult::Action::kPrintAndExit;
    result.text = helpText(desc);
    return result;
  }
  if (given("version")) {
    result.action = CliResult::Action::kPrintAndExit;
    result.text = std::string("hvdrun ") + HVD_VERSION_STRING + " (horovodrun-compatible launcher, Gloo)\n";
    return result;
  }
  for (const char* rejected : {"mpi", "jsrun"}) {
    usageCheck(!given(rejected), "--", rejected,
               " is not supported: hvdrun launches Gloo jobs only (use --gloo)");
  }
  for (const char* rejected : {"mpi-args", "binding-args"}) {
    usageCheck(!given(rejected), "--", rejected, " is not supported: hvdrun does not launch through MPI");
  }
  if (given("check-build")) {
    result.action = CliResult::Action::kPrintAndExit;
    result.text =
        std::string("hvdrun v") + HVD_VERSION_STRING +
        ":\n\nAvailable Frameworks:\n    [ ] TensorFlow\n    [ ] PyTorch\n    [ ] MXNet\n\n"
        "Available Controllers:\n    [ ] MPI\n    [X] Gloo\n\n"
        "Available Tensor Operations:\n    [ ] NCCL\n    [ ] DDL\n    [ ] CCL\n    [ ] MPI\n    [X] Gloo\n";
    return result;
  }

  ParsedFlags flags{std::move(last), std::move(repeated), std::move(switches)};
  validateFlags(desc, flags, tokens.command, env, result);
  return result;
}

}  // namespace hvd::launcher
