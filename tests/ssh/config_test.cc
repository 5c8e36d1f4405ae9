// Table tests for the ~/.ssh/config reader and the remote shell quoting (no network).
#include <catch2/catch.hpp>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "launcher/ssh/config.h"
#include "launcher/ssh/remote.h"
#include "base/error.h"
#include "tests/common/files.h"

using hvd::launcher::ssh::matchPattern;
using hvd::launcher::ssh::SshConfig;

TEST_CASE("ssh host patterns match like OpenSSH's") {
  struct Row {
    const char* pattern;
    const char* host;
    bool match;
  };
  const Row rows[] = {
      {"*", "anything", true},
      {"node?", "node1", true},
      {"node?", "node12", false},
      {"node*", "node", true},
      {"node*", "node-a.example", true},
      {"*.example.com", "a.example.com", true},
      {"*.example.com", "example.com", false},
      {"NODE1", "node1", true},
      {"n*d*1", "node1", true},
      {"n*d*1", "node2", false},
      {"?", "", false},
      {"", "", true},
      {"a*b*c", "aXbYbZc", true},
      {"10.0.0.*", "10.0.0.7", true},
      {"10.0.0.?", "10.0.0.17", false},
  };
  for (const auto& r : rows) {
    INFO(r.pattern << " vs " << r.host);
    CHECK(matchPattern(r.pattern, r.host) == r.match);
  }
}

TEST_CASE("ssh config: first value wins, IdentityFile accumulates, tokens expand") {
  const auto cfg = SshConfig::parse(
      "# global\n"
      "IdentityFile ~/.ssh/global_key\n"
      "Host gpu? !gpu9\n"
      "  HostName %h.cluster.example\n"
      "  User alice\n"
      "  Port=2200\n"
      "  IdentityFile \"%d/.ssh/key for %r@%h\"\n"
      "Host gpu1\n"
      "  User bob\n"
      "  Port 2201\n"
      "Match host gpu1\n"
      "  User mallory\n"
      "Host *\n"
      "  User carol\n"
      "  Port 22\n"
      "  ForwardAgent yes\n",
      "cfg");
  auto gpu1 = cfg.lookup("gpu1", "root", "/home/root");
  CHECK(gpu1.hostname == "gpu1.cluster.example");
  CHECK(gpu1.user == "alice");
  CHECK(gpu1.port == 2200);
  REQUIRE(gpu1.identity_files.size() == 2);
  CHECK(gpu1.identity_files[0] == "/home/root/.ssh/global_key");
  CHECK(gpu1.identity_files[1] == "/home/root/.ssh/key for alice@gpu1.cluster.example");

  auto gpu9 = cfg.lookup("gpu9", "root", "/home/root");  // negated: only Host * applies
  CHECK(gpu9.hostname == "gpu9");
  CHECK(gpu9.user == "carol");
  CHECK(gpu9.port == 22);

  auto other = cfg.lookup("db", "root", "/home/root");
  CHECK(other.hostname == "db");
  CHECK(other.user == "carol");
}

TEST_CASE("ssh config: empty and missing configs change nothing") {
  auto h = SshConfig::parse("", "empty").lookup("h", "u", "/h");
  CHECK(h.hostname == "h");
  CHECK_FALSE(h.user);
  CHECK_FALSE(h.port);
  CHECK(h.identity_files.empty());
  auto m = SshConfig::load("/nonexistent/hvd/ssh_config").lookup("h", "u", "/h");
  CHECK(m.hostname == "h");
}

TEST_CASE("ssh config: bad lines name file, line and token") {
  struct Row {
    const char* text;
    const char* message;
  };
  const Row rows[] = {
      {"Host a\n  Port 99999\n", "cfg:2: bad Port '99999' (expected 1-65535)"},
      {"Port abc\n", "cfg:1: bad Port 'abc' (expected 1-65535)"},
      {"Port 0\n", "cfg:1: bad Port '0'"},
      {"Host a\nUser\n", "cfg:2: keyword 'user' needs a value"},
      {"Host\n", "cfg:1: keyword 'host' needs a value"},
      {"HostName \"unterminated\n", "cfg:1: unterminated quote"},
  };
  for (const auto& r : rows) {
    INFO(r.text);
    CHECK_THROWS_WITH(SshConfig::parse(r.text, "cfg"), Catch::Contains(r.message));
    CHECK_THROWS_AS(SshConfig::parse(r.text, "cfg"), hvd::UsageError);
  }
}

TEST_CASE("ssh config: Include reads globbed files in place, relative to ~/.ssh, conditionally inside Host") {
  const hvd::test::TempDir tmp("/tmp/hvd-sshcfg-");
  const std::string& home = tmp.path();
  const std::string dir = home + "/.ssh";  // where relative Includes start
  std::filesystem::create_directories(dir + "/config.d");
  auto write = [&](const std::string& name, const std::string& text) { std::ofstream(dir + "/" + name) << text; };
  // Read in lexical order: 10-gpu before 20-all; the first value found wins.
  write("config.d/20-all.conf", "Host *\n  User fallback\n  Port 2200\n");
  write("config.d/10-gpu.conf", "Host gpu*\n  HostName %h.cluster\n  User gpuuser\n");
  // Included from inside `Host db`: applies to db only, even though the file itself says Host *.
  write("db.conf", "Host *\n  Port 5432\n  IdentityFile ~/.ssh/db_key\n");
  write("loop.conf", "Include loop.conf\n");
  // First value wins, in file order: db's block comes before the general includes.
  const std::string main = "User early-wins-for-all\n"
                           "Host db\n"
                           "  Include " + dir + "/db.conf\n"
                           "  HostName db.internal\n"
                           "Host *\n"
                           "  Include config.d/*.conf nothing-matches-*.conf\n";
  const auto cfg = SshConfig::parse(main, dir + "/config", home);
  const auto gpu = cfg.lookup("gpu3", "me", "/home/me");
  CHECK(gpu.hostname == "gpu3.cluster");
  CHECK(*gpu.user == "early-wins-for-all");  // before any Include: it came first
  CHECK(*gpu.port == 2200);
  const auto db = cfg.lookup("db", "me", "/home/me");
  CHECK(db.hostname == "db.internal");  // the line after the Include is still in Host db
  CHECK(*db.port == 5432);
  CHECK(db.identity_files == std::vector<std::string>{"/home/me/.ssh/db_key"});
  const auto web = cfg.lookup("web", "me", "/home/me");
  CHECK(web.hostname == "web");
  CHECK(*web.port == 2200);  // db.conf's Host * did not leak out of Host db
  CHECK(web.identity_files.empty());
  // Inside a Match block (unsupported, never applies) an Include brings nothing either.
  // `~/` is the given home, as for IdentityFile; inside Match the same file brings nothing.
  const auto tilde = SshConfig::parse("Host tilde\n  Include ~/.ssh/db.conf\n", "cfg", home);
  CHECK(*tilde.lookup("tilde", "me", "/home/me").port == 5432);
  const auto in_match = SshConfig::parse("Match user x\n  Include ~/.ssh/db.conf\n", "cfg", home);
  CHECK_FALSE(in_match.lookup("db", "me", "/home/me").port.has_value());
  // A file including itself stops at the depth limit with file:line.
  CHECK_THROWS_WITH(SshConfig::parse("Include loop.conf\n", "cfg", home),
                    Catch::Contains(dir + "/loop.conf:1: Include nested more than 16 deep at 'loop.conf'"));
}

TEST_CASE("shell quoting round-trips through /bin/sh") {
  using hvd::launcher::ssh::shellQuote;
  CHECK(shellQuote("") == "''");
  CHECK(shellQuote("it's") == "'it'\\''s'");
  CHECK(hvd::launcher::ssh::isShellIdentifier("HOROVOD_RANK"));
  CHECK_FALSE(hvd::launcher::ssh::isShellIdentifier("a.b"));
  CHECK_FALSE(hvd::launcher::ssh::isShellIdentifier("1A"));
  CHECK(hvd::launcher::ssh::signalLine(15) == "S15\n");
}
