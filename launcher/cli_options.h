// hvdrun's flag table: the Boost.Program_options descriptions of horovodrun's flags (names, arity, help
// text), the spellings argparse accepts besides them, and the tuning settings each flag, environment
// variable and config-file key stands for.
//
// The canonical key of an option is its first long name ("num-proc" for -np/--num-proc); everything after
// the tokenizer (launcher/cli.cc) speaks in canonical keys. The tables are constants, read from any
// thread; nothing here throws except what Boost.Program_options throws for an unknown key.
// Used by the command-line parser only (launcher/cli.h is the public entry point).
#pragma once

#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <boost/program_options.hpp>

namespace hvd::launcher {

// horovodrun's single-dash long spellings ("-np") -> canonical key.
extern const std::map<std::string, std::string> kSingleDashLong;

// Options that collect every occurrence; all other valued options keep the last one (argparse).
extern const std::set<std::string> kRepeatable;

// Switch flags (the kBool tunables, their "off" flags and old spellings): the later one on the command line
// wins. Key: flag -> (setting, value).
extern const std::map<std::string, std::pair<std::string, bool>> kSwitches;

// Every option hvdrun knows, grouped as --help shows them.
boost::program_options::options_description makeDescription();

// "-np/--num-proc" as argparse names an option in messages.
std::string displayName(const boost::program_options::options_description& desc, const std::string& key);

// --help: usage line, examples, the option groups of `desc` and the exit statuses.
std::string helpText(const boost::program_options::options_description& desc);

// ---------------------------------------------------------------------------------------------------------
// Tuning settings: flag > environment > config file > default, in this one table.

enum class TunableKind { kInt, kFloat, kBool, kString, kLogLevel };

struct Tunable {
  const char* key;                // canonical flag key (a switch: its "on" flag and its setting in kSwitches)
  const char* env;                // worker variable
  const char* section = nullptr;  // YAML section, nullptr: not settable from the file
  const char* yaml = nullptr;     // YAML key
  TunableKind kind;
  bool yaml_inverted = false;  // YAML value is the complement (stall_check.enabled, logging.with_timestamp)
  bool non_negative = false;
  double scale = 1;            // fusion-threshold-mb: MiB -> bytes
  const char* gate = nullptr;  // written only when this switch is on (autotune, timeline filename)
  // --help: a valued option's VALUE name; the note after "ENV" ("ENV=1" for a switch); a switch's "off" flag
  // (ENV=0) and its note.
  const char* value_name = "ARG";
  const char* note = "";
  const char* off = nullptr;
  const char* off_note = "";
};

// Every tunable, in the order --help lists them and the workers' environment receives them.
extern const std::vector<Tunable> kTunables;

}  // namespace hvd::launcher
