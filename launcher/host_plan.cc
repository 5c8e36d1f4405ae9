#include "launcher/host_plan.h"

#include <arpa/inet.h>

#include <algorithm>
#include <cctype>

#include <cerrno>
#include <charconv>
#include <fstream>
#include <sstream>

#include "launcher/usage.h"

namespace hvd::launcher {

namespace {

constexpr int kMaxSlots = 1 << 20;  // far beyond any host; keeps slot sums inside int

std::string trim(const std::string& s) {
  const auto first = s.find_first_not_of(" \t\r\n");
  if (first == std::string::npos) return "";
  const auto last = s.find_last_not_of(" \t\r\n");
  return s.substr(first, last - first + 1);
}

// horovodrun's `[\w.-]+` with Python's Unicode \w: ASCII letters, digits, '_', and every non-ASCII byte
// (UTF-8 sequences of Unicode letters).
bool isNameChar(unsigned char c) { return std::isalnum(c) || c == '_' || c == '.' || c == '-' || c >= 0x80; }

bool isName(const std::string& s) {
  if (s.empty()) return false;
  for (unsigned char c : s) {
    if (!isNameChar(c)) return false;
  }
  return true;
}

// Parses a non-negative decimal count; nullopt when `s` is not one or is out of range.
std::optional<int> parseCount(const std::string& s) {
  if (s.empty() || s.size() > 9) return std::nullopt;
  int value = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), value);
  if (ec != std::errc() || end != s.data() + s.size() || value < 0 || value > kMaxSlots) return std::nullopt;
  return value;
}

// One host item: [user@]host[:slots] or [user@][ipv6][:slots]. `where` says where it came from, for
// messages ("in -H \"...\"", "hosts.txt:3"). Slots default to 1.
// `has_slots` (optional) tells whether ":slots" was written.
HostSpec parseHostItem(const std::string& item, const std::string& where, int default_slots = 1,
                       bool* has_slots_out = nullptr) {
  HostSpec host;
  host.slots = default_slots;
  std::string rest = item;
  if (const auto at = rest.find('@'); at != std::string::npos) {
    const std::string user = rest.substr(0, at);
    usageCheck(isName(user), where, ": invalid user \"", user, "\" in host \"", item, "\"");
    host.user = user;
    rest = rest.substr(at + 1);
  }
  std::string slots_text;
  bool has_slots = false;
  if (!rest.empty() && rest.front() == '[') {
    const auto close = rest.find(']');
    usageCheck(close != std::string::npos, where, ": unterminated '[' in host \"", item, "\"");
    host.name = rest.substr(1, close - 1);
    in6_addr addr{};
    usageCheck(::inet_pton(AF_INET6, host.name.c_str(), &addr) == 1, where, ": invalid IPv6 address \"",
               host.name, "\" in host \"", item, "\"");
    const std::string tail = rest.substr(close + 1);
    if (!tail.empty()) {
      usageCheck(tail.front() == ':', where, ": unexpected \"", tail, "\" after \"]\" in host \"", item,
                 "\" (expected [ipv6]:slots)");
      slots_text = tail.substr(1);
      has_slots = true;
    }
  } else {
    const auto colon = rest.find(':');
    host.name = rest.substr(0, colon);
    if (colon != std::string::npos) {
      slots_text = rest.substr(colon + 1);
      has_slots = true;
      usageCheck(slots_text.find(':') == std::string::npos, where, ": invalid host \"", item,
                 "\" (IPv6 addresses go in brackets: [", rest, "]:slots)");
    }
    usageCheck(isName(host.name), where, ": invalid host name \"", host.name, "\" in \"", item,
               "\" (expected host[:slots], user@host[:slots] or [ipv6][:slots])");
  }
  if (has_slots) {
    const auto slots = parseCount(slots_text);
    usageCheck(slots.has_value(), where, ": invalid slot count \"", slots_text, "\" for host \"", host.name,
               "\" (expected a number from 0 to ", kMaxSlots, ")");
    host.slots = *slots;
  }
  if (has_slots_out) *has_slots_out = has_slots;
  return host;
}

// Adds `host` to `hosts`, merging with an earlier entry of the same name (and user) so each host has one
// local scope; horovodrun keeps duplicates and then gives two ranks the same local_rank on one host.
void addHost(std::vector<HostSpec>& hosts, HostSpec host, const std::string& where) {
  for (auto& existing : hosts) {
    if (existing.name == host.name) {
      usageCheck(existing.user == host.user, where, ": host \"", host.name,
                 "\" is listed with two different users");
      usageCheck(existing.slots + host.slots <= kMaxSlots, where, ": too many slots for host \"", host.name,
                 "\"");
      existing.slots += host.slots;
      return;
    }
  }
  hosts.push_back(std::move(host));
}

std::vector<std::string> cartesian(const std::vector<std::string>& prefixes,
                                   const std::vector<std::string>& parts) {
  std::vector<std::string> out;
  for (const auto& p : prefixes) {
    for (const auto& q : parts) out.push_back(p + q);
  }
  return out;
}

// "01-04,07" -> {"01","02","03","04","07"}, keeping the zero padding of the lower bound.
std::vector<std::string> expandRanges(const std::string& ranges, const std::string& nodelist) {
  std::vector<std::string> out;
  std::stringstream in(ranges);
  std::string part;
  while (std::getline(in, part, ',')) {
    const auto dash = part.find('-');
    const std::string lo_text = part.substr(0, dash);
    const auto lo = parseCount(lo_text);
    usageCheck(lo.has_value(), "SLURM_JOB_NODELIST: invalid range \"", part, "\" in \"", nodelist, "\"");
    if (dash == std::string::npos) {
      out.push_back(lo_text);
      continue;
    }
    const auto hi = parseCount(part.substr(dash + 1));
    usageCheck(hi.has_value() && *hi >= *lo && *hi - *lo < kMaxSlots, "SLURM_JOB_NODELIST: invalid range \"",
               part, "\" in \"", nodelist, "\"");
    for (int i = *lo; i <= *hi; ++i) {
      std::string n = std::to_string(i);
      if (n.size() < lo_text.size()) n.insert(0, lo_text.size() - n.size(), '0');
      out.push_back(n);
    }
  }
  usageCheck(!out.empty(), "SLURM_JOB_NODELIST: empty range \"[]\" in \"", nodelist, "\"");
  return out;
}

}  // namespace

std::vector<HostSpec> parseHostList(const std::string& spec, int default_slots) {
  const std::string where = detail::concat("-H \"", spec, "\"");
  std::vector<HostSpec> hosts;
  std::stringstream in(spec);
  std::string item;
  int count = 0;
  while (std::getline(in, item, ',')) {
    ++count;
    item = trim(item);
    usageCheck(!item.empty(), where, ": empty host entry ", count);
    addHost(hosts, parseHostItem(item, where, default_slots), where);
  }
  usageCheck(!spec.empty() && spec.back() != ',', where, ": empty host entry ", count + 1);
  return hosts;
}

std::vector<HostSpec> parseHostfileText(const std::string& text, const std::string& origin) {
  std::vector<HostSpec> hosts;
  std::stringstream in(text);
  std::string line;
  int number = 0;
  while (std::getline(in, line)) {
    ++number;
    const std::string where = detail::concat(origin, ":", number);
    line = trim(line.substr(0, line.find('#')));
    if (line.empty()) continue;
    std::stringstream tokens(line);
    std::string token;
    tokens >> token;
    bool slots_in_name = false;
    HostSpec host = parseHostItem(token, where, 1, &slots_in_name);
    std::optional<int> slots;
    std::optional<int> max_slots;
    while (tokens >> token) {
      const auto eq = token.find('=');
      const std::string key = token.substr(0, eq);
      usageCheck(eq != std::string::npos && (key == "slots" || key == "max_slots" || key == "max-slots"),
                 where, ": unknown attribute \"", token, "\" (expected slots=N or max_slots=N)");
      const std::string value = token.substr(eq + 1);
      const auto count = parseCount(value);
      usageCheck(count.has_value(), where, ": invalid value \"", value, "\" in \"", token,
                 "\" (expected a number from 0 to ", kMaxSlots, ")");
      auto& target = key == "slots" ? slots : max_slots;
      usageCheck(!target.has_value(), where, ": \"", key, "\" given twice");
      target = count;
    }
    if (slots) {
      usageCheck(!slots_in_name, where, ": slots given twice for host \"", host.name, "\"");
      host.slots = *slots;
    }
    usageCheck(!max_slots || *max_slots >= host.slots, where, ": max_slots=", max_slots.value_or(0),
               " is less than slots=", host.slots, " for host \"", host.name, "\"");
    addHost(hosts, std::move(host), where);
  }
  usageCheck(!hosts.empty(), origin, ": no hosts in hostfile");
  return hosts;
}

std::vector<HostSpec> parseHostfile(const std::string& path) {
  std::ifstream file(path);
  usageCheck(file.good(), "cannot read hostfile \"", path, "\": ", errnoText(errno));
  std::stringstream text;
  text << file.rdbuf();
  return parseHostfileText(text.str(), path);
}

std::vector<HostSpec> parseDiscoveryOutput(const std::string& text, std::optional<int> slots_per_host) {
  std::vector<HostSpec> hosts;
  std::vector<std::pair<int, std::string>> first_line;  // per host in `hosts`: line number and text
  std::stringstream in(text);
  std::string line;
  int number = 0;
  while (std::getline(in, line)) {
    ++number;
    line = trim(line);
    if (line.empty()) continue;
    const std::string where = detail::concat("discovery output line ", number, " \"", line, "\"");
    bool has_slots = false;
    HostSpec host = parseHostItem(line, where, slots_per_host.value_or(0), &has_slots);
    usageCheck(has_slots || slots_per_host, where, ": no slot count (write host:N, or give --slots-per-host)");
    auto same = std::find_if(hosts.begin(), hosts.end(), [&](const HostSpec& h) { return h.name == host.name; });
    if (same == hosts.end()) {
      hosts.push_back(std::move(host));
      first_line.emplace_back(number, line);
      continue;
    }
    const auto& [earlier, earlier_text] = first_line[static_cast<size_t>(same - hosts.begin())];
    usageCheck(same->slots == host.slots && same->user == host.user, where, ": host \"", host.name,
               "\" is also on line ", earlier, " as \"", earlier_text, "\"");
  }
  return hosts;
}

std::vector<std::string> expandSlurmNodelist(const std::string& nodelist) {
  std::vector<std::string> out;
  size_t i = 0;
  while (i < nodelist.size()) {
    // One item: text and [ranges] groups up to a comma outside brackets.
    std::vector<std::string> names{""};
    while (i < nodelist.size() && nodelist[i] != ',') {
      if (nodelist[i] == '[') {
        const auto close = nodelist.find(']', i);
        usageCheck(close != std::string::npos, "SLURM_JOB_NODELIST: unterminated '[' in \"", nodelist, "\"");
        names = cartesian(names, expandRanges(nodelist.substr(i + 1, close - i - 1), nodelist));
        i = close + 1;
      } else {
        usageCheck(isNameChar(static_cast<unsigned char>(nodelist[i])),
                   "SLURM_JOB_NODELIST: unexpected character '", nodelist[i], "' in \"", nodelist, "\"");
        for (auto& n : names) n += nodelist[i];
        ++i;
      }
    }
    usageCheck(!names.front().empty(), "SLURM_JOB_NODELIST: empty node name in \"", nodelist, "\"");
    out.insert(out.end(), names.begin(), names.end());
    ++i;  // the comma
  }
  usageCheck(!out.empty(), "SLURM_JOB_NODELIST is empty");
  return out;
}

std::vector<int> expandSlurmTasksPerNode(const std::string& tasks) {
  std::vector<int> out;
  std::stringstream in(tasks);
  std::string part;
  while (std::getline(in, part, ',')) {
    const auto paren = part.find('(');
    const auto count = parseCount(part.substr(0, paren));
    usageCheck(count.has_value(), "SLURM_TASKS_PER_NODE: invalid entry \"", part, "\" in \"", tasks, "\"");
    int repeat = 1;
    if (paren != std::string::npos) {
      const bool shaped = part.size() > paren + 3 && part.compare(paren, 2, "(x") == 0 && part.back() == ')';
      const auto times = shaped ? parseCount(part.substr(paren + 2, part.size() - paren - 3)) : std::nullopt;
      usageCheck(times.has_value() && *times > 0, "SLURM_TASKS_PER_NODE: invalid entry \"", part, "\" in \"",
                 tasks, "\" (expected N or N(xK))");
      repeat = *times;
    }
    out.insert(out.end(), repeat, *count);
  }
  usageCheck(!out.empty(), "SLURM_TASKS_PER_NODE is empty");
  return out;
}

std::vector<HostSpec> slurmHosts(const std::string& nodelist, const std::string& tasks_per_node) {
  const auto names = expandSlurmNodelist(nodelist);
  std::vector<int> slots(names.size(), 1);
  if (!tasks_per_node.empty()) {
    slots = expandSlurmTasksPerNode(tasks_per_node);
    usageCheck(slots.size() == names.size(), "SLURM_TASKS_PER_NODE \"", tasks_per_node, "\" describes ",
               slots.size(), " nodes but SLURM_JOB_NODELIST \"", nodelist, "\" has ", names.size());
  }
  std::vector<HostSpec> hosts;
  for (size_t i = 0; i < names.size(); ++i) {
    HostSpec host;
    host.name = names[i];
    host.slots = slots[i];
    addHost(hosts, std::move(host), "SLURM_JOB_NODELIST");
  }
  return hosts;
}

std::vector<Placement> assignRanks(const std::vector<HostSpec>& hosts, int np) {
  usageCheck(np >= 1, "-np must be at least 1, got ", np);
  long total = 0;
  for (const auto& h : hosts) total += h.slots;
  if (np > total) {
    throw UsageError(
        detail::concat("Requested more processes (", np, ") than there are available slots (", total, ")"));
  }
  // local_rank -> hosts having that local rank, in order of first appearance.
  std::map<int, std::vector<std::string>> cross;
  std::vector<std::pair<const HostSpec*, int>> per_host;  // host, ranks on it
  int rank = 0;
  for (const auto& h : hosts) {
    int local = 0;
    for (; local < h.slots && rank < np; ++local, ++rank) cross[local].push_back(h.name);
    per_host.emplace_back(&h, local);
  }
  std::vector<Placement> plan;
  plan.reserve(np);
  rank = 0;
  for (const auto& [host, count] : per_host) {
    for (int local = 0; local < count; ++local) {
      Placement p;
      p.rank = rank++;
      p.size = np;
      p.local_rank = local;
      p.local_size = count;
      const auto& names = cross[local];
      p.cross_rank = static_cast<int>(std::find(names.begin(), names.end(), host->name) - names.begin());
      p.cross_size = static_cast<int>(names.size());
      p.host = *host;
      plan.push_back(std::move(p));
    }
  }
  return plan;
}

std::map<std::string, int> scopeSizes(const std::vector<Placement>& plan) {
  std::map<std::string, int> sizes;
  for (const auto& p : plan) {
    sizes["global"] = p.size;
    sizes["local_" + p.host.name] = p.local_size;
    sizes["cross_" + std::to_string(p.local_rank)] = p.cross_size;
  }
  return sizes;
}

std::string displayName(const HostSpec& host) {
  const bool v6 = host.name.find(':') != std::string::npos;
  return detail::concat(host.user ? *host.user + "@" : "", v6 ? "[" : "", host.name, v6 ? "]" : "");
}

}  // namespace hvd::launcher
