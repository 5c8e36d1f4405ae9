// Validation of hvdrun's parsed flags: every value checked, with argparse's messages, and every setting
// resolved into HvdrunOptions with the precedence flag > environment > config file > default.
//
// Reads the --config-file (launcher/config_file.h) and the files and programs some flags name
// (--ssh-identity-file, --host-discovery-script), nothing else. Errors: UsageError with a one-line message
// naming the offending flag, variable or config key; the first error found ends the check.
// Threading: plain functions, no shared state.
#pragma once

#include <map>
#include <string>
#include <vector>

#include <boost/program_options.hpp>

#include "launcher/cli.h"

namespace hvd::launcher {

// The command line as Boost.Program_options parsed it, by canonical key (launcher/cli_options.h).
struct ParsedFlags {
  std::map<std::string, std::string> last;                   // single-valued options: the last value
  std::map<std::string, std::vector<std::string>> repeated;  // kRepeatable options: every value, in order
  std::map<std::string, bool> switches;                      // kSwitches settings: the later flag's value
};

// Checks `flags` against `env` and fills result.options (with `command`, the user's program and its
// arguments) and result.warnings. `flags.last` gains the config file's elastic settings.
void validateFlags(const boost::program_options::options_description& desc, ParsedFlags& flags,
                   const std::vector<std::string>& command, const Environment& env, CliResult& result);

}  // namespace hvd::launcher
