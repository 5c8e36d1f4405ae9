#include "launcher/ssh/config.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <fstream>
#include <glob.h>
#include <sstream>

#include "base/error.h"

namespace hvd::launcher::ssh {

namespace {

std::string lower(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(), [](unsigned char c) { return std::tolower(c); });
  return out;
}

bool isBlank(char c) { return c == ' ' || c == '\t' || c == '\r'; }

// Splits the rest of a line into words; "double quoted" words may contain blanks.
std::vector<std::string> words(std::string_view s, const std::string& where) {
  std::vector<std::string> out;
  size_t i = 0;
  while (i < s.size()) {
    while (i < s.size() && isBlank(s[i])) ++i;
    if (i >= s.size()) break;
    if (s[i] == '"') {
      const size_t end = s.find('"', i + 1);
      if (end == std::string_view::npos)
        throw UsageError(where + ": unterminated quote in '" + std::string(s) + "'");
      out.emplace_back(s.substr(i + 1, end - i - 1));
      i = end + 1;
    } else {
      size_t end = i;
      while (end < s.size() && !isBlank(s[end])) ++end;
      out.emplace_back(s.substr(i, end - i));
      i = end;
    }
  }
  return out;
}

bool matchHere(std::string_view p, std::string_view s) {
  // Iterative glob with backtracking on the last '*'.
  size_t pi = 0, si = 0, star = std::string_view::npos, mark = 0;
  while (si < s.size()) {
    if (pi < p.size() && (p[pi] == '?' || std::tolower(static_cast<unsigned char>(p[pi])) ==
                                              std::tolower(static_cast<unsigned char>(s[si])))) {
      ++pi;
      ++si;
    } else if (pi < p.size() && p[pi] == '*') {
      star = pi++;
      mark = si;
    } else if (star != std::string_view::npos) {
      pi = star + 1;
      si = ++mark;
    } else {
      return false;
    }
  }
  while (pi < p.size() && p[pi] == '*') ++pi;
  return pi == p.size();
}

// OpenSSH's Host semantics: the block applies when some positive pattern matches and no negated one does.
bool blockMatches(const std::vector<std::string>& patterns, const std::string& alias) {
  bool positive = false;
  for (const auto& p : patterns) {
    if (!p.empty() && p[0] == '!') {
      if (matchHere(std::string_view(p).substr(1), alias)) return false;
    } else if (matchHere(p, alias)) {
      positive = true;
    }
  }
  return positive;
}

std::string expandTokens(const std::string& value, const std::string& where_keyword, const std::string& host,
                         const std::string& remote_user, const std::string& local_user,
                         const std::string& home, bool allow_user_tokens) {
  std::string out;
  size_t i = 0;
  if (allow_user_tokens && (value == "~" || value.rfind("~/", 0) == 0)) {
    out = home;
    i = 1;
  }
  for (; i < value.size(); ++i) {
    if (value[i] != '%' || i + 1 >= value.size()) {
      out += value[i];
      continue;
    }
    const char t = value[++i];
    if (t == '%')
      out += '%';
    else if (t == 'h')
      out += host;
    else if (allow_user_tokens && t == 'd')
      out += home;
    else if (allow_user_tokens && t == 'r')
      out += remote_user;
    else if (allow_user_tokens && t == 'u')
      out += local_user;
    else
      throw UsageError("ssh config: unsupported token '%" + std::string(1, t) + "' in " + where_keyword +
                       " '" + value + "'");
  }
  return out;
}

}  // namespace

bool matchPattern(std::string_view pattern, std::string_view host) { return matchHere(pattern, host); }

SshConfig SshConfig::parse(std::string_view text, const std::string& origin, const std::string& home) {
  SshConfig cfg;
  cfg.parseInto(text, origin, home, Block{}, 0);
  return cfg;
}

// Appends the blocks of `text`. `outer` is the block an Include appeared in (its conditions and Match-ness
// carry over to everything included); at the top level it is the empty, unconditional block.
void SshConfig::parseInto(std::string_view text, const std::string& origin, const std::string& home,
                          const Block& outer, int depth) {
  blocks_.push_back(Block{outer.conditions, outer.is_match, {}});  // lines before the first Host
  size_t line_no = 0;
  size_t pos = 0;
  while (pos <= text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(pos, end - pos);
    pos = end + 1;
    ++line_no;
    const std::string where = origin + ":" + std::to_string(line_no);
    size_t i = 0;
    while (i < line.size() && isBlank(line[i])) ++i;
    if (i >= line.size() || line[i] == '#') {
      if (end == text.size()) break;
      continue;
    }
    size_t k = i;
    while (k < line.size() && !isBlank(line[k]) && line[k] != '=') ++k;
    const std::string keyword = lower(line.substr(i, k - i));
    while (k < line.size() && isBlank(line[k])) ++k;
    if (k < line.size() && line[k] == '=') ++k;
    const std::vector<std::string> args = words(line.substr(k), where);
    if (args.empty()) throw UsageError(where + ": keyword '" + keyword + "' needs a value");
    if (keyword == "host") {
      Block block{outer.conditions, outer.is_match, {}};
      block.conditions.push_back(args);
      blocks_.push_back(std::move(block));
    } else if (keyword == "match") {
      blocks_.push_back(Block{outer.conditions, true, {}});
    } else if (keyword == "include") {
      if (depth + 1 > kMaxIncludeDepth) {
        throw UsageError(where + ": Include nested more than " + std::to_string(kMaxIncludeDepth) +
                         " deep at '" + args[0] + "'");
      }
      const Block enclosing = blocks_.back();  // the Host (or Match) block the Include sits in
      for (const auto& arg : args) {
        std::string pattern = arg;
        if (pattern.rfind("~/", 0) == 0) {
          pattern = home + pattern.substr(1);
        } else if (pattern[0] != '/') {
          pattern = home + "/.ssh/" + pattern;
        }
        glob_t found{};
        if (::glob(pattern.c_str(), 0, nullptr, &found) == 0) {
          for (size_t f = 0; f < found.gl_pathc; ++f) {
            std::ifstream in(found.gl_pathv[f]);
            if (!in) continue;
            std::stringstream buf;
            buf << in.rdbuf();
            parseInto(buf.str(), found.gl_pathv[f], home, enclosing, depth + 1);
          }
        }
        ::globfree(&found);
      }
      // Lines after the Include still belong to the block it sat in.
      blocks_.push_back(Block{enclosing.conditions, enclosing.is_match, {}});
    } else if (keyword == "hostname" || keyword == "user" || keyword == "port" || keyword == "identityfile") {
      if (keyword == "port") {
        unsigned value = 0;
        const std::string& a = args[0];
        const auto [p, ec] = std::from_chars(a.data(), a.data() + a.size(), value);
        if (ec != std::errc() || p != a.data() + a.size() || value == 0 || value > 65535) {
          throw UsageError(where + ": bad Port '" + a + "' (expected 1-65535)");
        }
      }
      blocks_.back().entries.push_back(Entry{keyword, args[0]});
    }
    // Every other keyword is ignored: hvdrun implements only the ones above.
    if (end == text.size()) break;
  }
}

SshConfig SshConfig::load(const std::string& path, const std::string& home) {
  std::ifstream in(path);
  if (!in) return SshConfig{};
  std::stringstream buf;
  buf << in.rdbuf();
  return parse(buf.str(), path, home);
}

HostConfig SshConfig::lookup(const std::string& alias, const std::string& local_user,
                             const std::string& home) const {
  std::optional<std::string> hostname;
  HostConfig out;
  std::vector<std::string> raw_identities;
  for (const Block& block : blocks_) {
    if (block.is_match) continue;
    if (!std::all_of(block.conditions.begin(), block.conditions.end(),
                     [&](const auto& patterns) { return blockMatches(patterns, alias); })) {
      continue;
    }
    for (const Entry& e : block.entries) {
      if (e.keyword == "hostname" && !hostname)
        hostname = e.value;
      else if (e.keyword == "user" && !out.user)
        out.user = e.value;
      else if (e.keyword == "port" && !out.port)
        out.port = static_cast<uint16_t>(std::stoul(e.value));
      else if (e.keyword == "identityfile")
        raw_identities.push_back(e.value);
    }
  }
  out.hostname = hostname ? expandTokens(*hostname, "HostName", alias, "", "", "", false) : alias;
  const std::string remote_user = out.user.value_or(local_user);
  for (const auto& id : raw_identities) {
    out.identity_files.push_back(
        expandTokens(id, "IdentityFile", out.hostname, remote_user, local_user, home, true));
  }
  return out;
}

}  // namespace hvd::launcher::ssh
