// --config-file: horovodrun's YAML parameters file (yaml-cpp), plus hvdrun's own `elastic` section.
//
// The file holds `controller` (gloo; mpi only with --gloo), the sections and keys of the tunables table
// (launcher/cli_options.h: params, autotune, timeline, stall_check, library_options, logging) and
// `elastic` (min_np, max_np, slots_per_host, host_discovery_script, elastic_timeout, reset_limit,
// blacklist_cooldown_range). A value from the file counts only where neither the flag nor the environment
// sets it; launcher/cli_validate.h applies that precedence. horovodrun ignores keys it does not know, so a
// typo silently leaves a default: here an unknown key is an error naming the closest known one.
// Errors: UsageError naming the file (and the key, or line:column of a YAML syntax error).
// Threading: plain functions, no shared state.
#pragma once

#include <map>
#include <optional>
#include <string>

#include <yaml-cpp/yaml.h>

#include "launcher/cli_options.h"

namespace hvd::launcher {

// Reads the file at `path`: a mapping (or empty) whose keys are all known.
YAML::Node loadConfig(const std::string& path);

// The file's `controller`, where it has one, must be gloo, or mpi with --gloo given (`gloo_flag`).
void checkController(const YAML::Node& config, const std::string& config_path, bool gloo_flag);

// The value the file gives tunable `t`, as text ("1"/"0" for booleans); nullopt where it gives none.
std::optional<std::string> yamlValue(const YAML::Node& root, const Tunable& t, const std::string& file);

// Adds the values of `config`'s `elastic` section (a mapping) to `last` (canonical flag key -> value) for
// the flags the command line did not give; blacklist_cooldown_range [MIN, MAX] becomes "MIN MAX".
void addElasticSettings(const YAML::Node& config, const std::string& config_path,
                        std::map<std::string, std::string>& last);

}  // namespace hvd::launcher
