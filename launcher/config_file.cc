#include "launcher/config_file.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <vector>

#include "launcher/usage.h"

namespace hvd::launcher {

namespace {

size_t editDistance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = up;
    }
  }
  return row[b.size()];
}

// The candidate closest to word, when it is close enough to be a likely typo.
std::optional<std::string> closest(const std::string& word, const std::vector<std::string>& candidates) {
  std::optional<std::string> best;
  size_t best_distance = std::max<size_t>(2, word.size() / 3) + 1;
  for (const auto& c : candidates) {
    if (const size_t d = editDistance(word, c); d < best_distance) {
      best = c;
      best_distance = d;
    }
  }
  return best;
}

// The config file's `elastic` section (hvdrun's own: horovodrun's config file cannot set elastic options):
// YAML key -> the flag it stands for when the flag is not given.
const std::vector<std::pair<const char*, const char*>> kElasticYaml = {
    {"min_np", "min-np"},
    {"max_np", "max-np"},
    {"slots_per_host", "slots-per-host"},
    {"host_discovery_script", "host-discovery-script"},
    {"elastic_timeout", "elastic-timeout"},
    {"reset_limit", "reset-limit"},
    {"blacklist_cooldown_range", "blacklist-cooldown-range"},  // [MIN, MAX]
};

// horovodrun's config format knows `controller` and the sections and keys of kTunables; it ignores
// anything else, so a typo silently leaves a default. Here an unknown key is a usage error naming it,
// with the closest known key when there is one.
void checkConfigKeys(const YAML::Node& root, const std::string& file) {
  if (!root.IsMap()) return;
  std::vector<std::string> sections = {"controller"};
  std::vector<std::string> qualified;  // section.key
  for (const auto& t : kTunables) {
    if (!t.section) continue;
    if (std::find(sections.begin(), sections.end(), t.section) == sections.end())
      sections.push_back(t.section);
    qualified.push_back(std::string(t.section) + "." + t.yaml);
  }
  sections.push_back("elastic");
  for (const auto& [yaml, flag] : kElasticYaml) qualified.push_back(std::string("elastic.") + yaml);
  const auto suggestion = [](const std::optional<std::string>& s) {
    return s ? " (did you mean " + *s + "?)" : std::string();
  };
  for (const auto& entry : root) {
    const std::string section = entry.first.as<std::string>("");
    if (std::find(sections.begin(), sections.end(), section) == sections.end()) {
      // A tunable's key written at the top level is the likeliest mistake: suggest it with its section
      // (every section that has the closest key: stall_check.enabled and autotune.enabled mean different
      // things).
      std::optional<std::string> near = closest(section, sections);
      if (!near) {
        std::vector<std::string> bare;
        for (const auto& q : qualified) bare.push_back(q.substr(q.find('.') + 1));
        if (const auto key = closest(section, bare)) {
          for (const auto& q : qualified) {
            if (q.substr(q.find('.') + 1) == *key) near = near ? *near + " or " + q : q;
          }
        }
      }
      throw UsageError(
          detail::concat("config file ", file, ": unknown key '", section, "'", suggestion(near)));
    }
    if (section == "controller") continue;
    const YAML::Node& keys = entry.second;
    usageCheck(keys.IsMap() || keys.IsNull(), "config file ", file, ": '", section,
               "' must be a mapping of settings, got '", keys.IsScalar() ? keys.Scalar() : "a list", "'");
    if (keys.IsNull()) continue;
    std::vector<std::string> own;  // this section's keys
    for (const auto& q : qualified) {
      if (q.compare(0, section.size() + 1, section + ".") == 0) own.push_back(q.substr(section.size() + 1));
    }
    for (const auto& kv : keys) {
      const std::string key = kv.first.as<std::string>("");
      if (std::find(own.begin(), own.end(), key) != own.end()) continue;
      std::optional<std::string> near = closest(key, own);
      if (!near) {  // perhaps a key of another section
        for (const auto& q : qualified) {
          if (q.substr(q.find('.') + 1) == key) near = q;
        }
      }
      throw UsageError(
          detail::concat("config file ", file, ": unknown key '", section, ".", key, "'", suggestion(near)));
    }
  }
}

}  // namespace

YAML::Node loadConfig(const std::string& path) {
  try {
    YAML::Node root = YAML::LoadFile(path);
    usageCheck(root.IsMap() || root.IsNull(), "config file ", path, ": expected a mapping at the top level");
    checkConfigKeys(root, path);
    return root;
  } catch (const YAML::BadFile&) {
    throw UsageError(detail::concat("cannot read config file \"", path, "\": ", errnoText(errno)));
  } catch (const YAML::Exception& e) {
    throw UsageError(
        detail::concat("config file ", path, ":", e.mark.line + 1, ":", e.mark.column + 1, ": ", e.msg));
  }
}

void checkController(const YAML::Node& config, const std::string& config_path, bool gloo_flag) {
  if (config["controller"]) {
    std::string controller = config["controller"].as<std::string>("");
    for (auto& c : controller) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    usageCheck(controller == "gloo" || controller == "mpi", config_path,
               ": No such controller supported: ", config["controller"].as<std::string>(""));
    usageCheck(controller == "gloo" || gloo_flag, config_path,
               ": controller: mpi is not supported: hvdrun launches Gloo jobs only");
  }
}

std::optional<std::string> yamlValue(const YAML::Node& root, const Tunable& t, const std::string& file) {
  if (!t.section || !root[t.section] || !root[t.section][t.yaml]) return std::nullopt;
  const YAML::Node node = root[t.section][t.yaml];
  const std::string where = detail::concat(file, ": ", t.section, ".", t.yaml);
  usageCheck(node.IsScalar(), where, ": expected a single value");
  if (t.kind == TunableKind::kBool) {
    bool b = false;
    usageCheck(YAML::convert<bool>::decode(node, b), where, ": expected true or false, got '", node.Scalar(),
               "'");
    return (b != t.yaml_inverted) ? "1" : "0";
  }
  return node.Scalar();
}

void addElasticSettings(const YAML::Node& config, const std::string& config_path,
                        std::map<std::string, std::string>& last) {
  for (const auto& [yaml, flag] : kElasticYaml) {
    const YAML::Node node = config["elastic"][yaml];
    const bool long_given = last.count(flag) > 0 ||
                            (std::string(flag) == "min-np" && last.count("min-num-proc")) ||
                            (std::string(flag) == "max-np" && last.count("max-num-proc"));
    if (!node || long_given) continue;
    const std::string where = detail::concat("config file ", config_path, ": elastic.", yaml);
    if (std::string(flag) == "blacklist-cooldown-range") {
      usageCheck(node.IsSequence() && node.size() == 2 && node[0].IsScalar() && node[1].IsScalar(), where,
                 ": expected [MIN, MAX], got '", YAML::Dump(node), "'");
      last[flag] = node[0].Scalar() + " " + node[1].Scalar();
    } else {
      usageCheck(node.IsScalar(), where, ": expected a single value");
      last[flag] = node.Scalar();
    }
  }
}

}  // namespace hvd::launcher
