// A reader for the common ~/.ssh/config keywords, so hvdrun resolves host aliases the way `ssh` does.
//
// Supported: Host blocks with patterns (`*`, `?`, `!negation`, several patterns per line), and the
// keywords HostName (with %h and %%), User, Port, IdentityFile (with ~, %d, %h, %r, %u, %%). Keywords are
// case-insensitive, `Keyword value` and `Keyword=value` both work, values may be double-quoted. As in
// OpenSSH the FIRST value found for a keyword wins (so specific Host blocks go before `Host *`), except
// IdentityFile, whose values accumulate in order. Lines before the first Host apply to every host.
// Include (as OpenSSH): each argument is a glob(3) pattern, `~/` the home directory, relative ones
// relative to ~/.ssh; the matching
// files are read in place, in lexical order, at most kMaxIncludeDepth deep; no match is not an error. An
// Include inside a Host block is conditional: what it brings applies only where that block matches.
// Not supported (ignored, documented in docs/ssh.md): Match blocks (their lines, and what they include,
// are skipped), and every other keyword.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace hvd::launcher::ssh {

// What the config says about one host alias. Unset fields: the caller's defaults apply.
struct HostConfig {
  std::string hostname;  // HostName, or the alias itself
  std::optional<std::string> user;
  std::optional<uint16_t> port;
  std::vector<std::string> identity_files;  // expanded (~ and % tokens)
};

// True when `host` matches the ssh pattern `pattern` (`*` any run of characters, `?` one character).
// Matching is case-insensitive, as OpenSSH's match_pattern for host names.
bool matchPattern(std::string_view pattern, std::string_view host);

class SshConfig {
 public:
  static constexpr int kMaxIncludeDepth = 16;  // OpenSSH's READCONF_MAX_DEPTH

  // Parses config text. `origin` names it in errors ("/root/.ssh/config"); `home` is the directory
  // Include paths start from (`~/`, and `home`/.ssh for relative ones), the same home lookup() expands
  // IdentityFile with. Throws UsageError "<origin>:<line>: <what> '<token>'" for a keyword without a
  // value, a bad Port, or Includes nested deeper than kMaxIncludeDepth.
  static SshConfig parse(std::string_view text, const std::string& origin, const std::string& home = "");
  // Reads and parses `path`; a file that does not exist is an empty config.
  static SshConfig load(const std::string& path, const std::string& home = "");

  // Resolves an alias. `local_user` and `home` expand %u and %d / ~ in IdentityFile.
  HostConfig lookup(const std::string& alias, const std::string& local_user, const std::string& home) const;

 private:
  struct Entry {
    std::string keyword;  // lower-case
    std::string value;
  };
  struct Block {
    // Every list must match the alias: the block's own Host patterns, after those of the Host blocks
    // that Included it. None: applies to all (lines before the first Host).
    std::vector<std::vector<std::string>> conditions;
    bool is_match = false;  // a Match block, or included from one: never applies
    std::vector<Entry> entries;
  };
  void parseInto(std::string_view text, const std::string& origin, const std::string& home,
                 const Block& outer, int depth);
  std::vector<Block> blocks_;
};

}  // namespace hvd::launcher::ssh
