// The hvd-proxy frame codec (launcher/ssh/proxy_protocol.h), and hvd-proxy itself fed bad input.
#include <catch2/catch.hpp>
#include <cstdlib>
#include <string>

#include "launcher/ssh/proxy_protocol.h"
#include "base/error.h"
#include "tests/ssh/sshd_fixture.h"

using namespace hvd::launcher::ssh;
using namespace std::string_literals;

namespace {

std::string u32(uint32_t v) { return PayloadWriter().u32(v).frame(FrameType::kHeartbeat).substr(5); }

}  // namespace

TEST_CASE("frames round-trip, whatever the chunking") {
  SpawnRequest r;
  r.rank = 7;
  r.host = "node-1";
  r.cwd = "/work dir/ü";
  r.argv = {"python", "-c", "print('x')\n", ""};
  r.env = {{"A", "with space"}, {"B", "nl\nquote'\"\0nul"s}, {"EMPTY", ""}};
  r.forward_stdin = true;
  r.bind_index = 3;
  const std::string stream = encodeSpawn(r) + PayloadWriter().frame(FrameType::kHeartbeat) +
                             PayloadWriter().i32(-1).i32(15).frame(FrameType::kSignal);
  for (size_t chunk : {size_t(1), size_t(3), stream.size()}) {
    INFO("chunk " << chunk);
    FrameDecoder d;
    std::vector<Frame> frames;
    for (size_t i = 0; i < stream.size(); i += chunk) {
      d.feed(std::string_view(stream).substr(i, chunk));
      while (auto f = d.next()) frames.push_back(*f);
    }
    REQUIRE(frames.size() == 3);
    CHECK(d.pending() == 0);
    const SpawnRequest back = decodeSpawn(frames[0]);
    CHECK(back.rank == 7);
    CHECK(back.host == r.host);
    CHECK(back.cwd == r.cwd);
    CHECK(back.argv == r.argv);
    CHECK(back.env == r.env);
    CHECK(back.forward_stdin);
    CHECK(back.bind_index == 3);
    CHECK(frames[1].type == FrameType::kHeartbeat);
    PayloadReader sig(frames[2]);
    CHECK(sig.i32() == -1);
    CHECK(sig.i32() == 15);
    CHECK_NOTHROW(sig.end());
  }
}

TEST_CASE("bad frames are clear errors, never a crash") {
  FrameDecoder d;
  SECTION("oversized length") {
    d.feed(u32(kMaxProxyFrame + 1) + "\x01"s);
    CHECK_THROWS_WITH(d.next(),
                      "proxy frame of 16777217 bytes exceeds the limit of 16777216 (garbage on the "
                      "channel?)");
  }
  SECTION("unknown type") {
    d.feed(u32(0) + "\x09"s);
    CHECK_THROWS_WITH(d.next(), "unknown proxy frame type 9");
  }
  SECTION("text instead of frames") {
    d.feed("bash: hvd-proxy: command not found\n");
    CHECK_THROWS_AS(d.next(), hvd::LaunchError);
  }
  SECTION("a truncated stream waits for more and says how much is pending") {
    const std::string f = PayloadWriter().i32(1).bytes("abc").frame(FrameType::kStdin);
    d.feed(f.substr(0, f.size() - 1));
    CHECK_FALSE(d.next());
    CHECK(d.pending() == f.size() - 1);
  }
  SECTION("a payload shorter than its fields") {
    Frame f{FrameType::kSpawn, PayloadWriter().i32(3).u32(100).frame(FrameType::kSpawn).substr(5)};
    CHECK_THROWS_WITH(decodeSpawn(f), "truncated proxy spawn frame: 100 more bytes needed at offset 8 of 8");
  }
  SECTION("a huge count with nothing behind it") {
    Frame f{FrameType::kSpawn,
            PayloadWriter().i32(3).bytes("h").bytes("/").u32(0xffffffffu).frame(FrameType::kSpawn).substr(5)};
    CHECK_THROWS_WITH(decodeSpawn(f), "truncated proxy spawn frame: 4 more bytes needed at offset 18 of 18");
  }
  SECTION("bytes left over") {
    Frame f{FrameType::kSignal, PayloadWriter().i32(1).i32(2).u8(0).frame(FrameType::kSignal).substr(5)};
    PayloadReader in(f);
    in.i32();
    in.i32();
    CHECK_THROWS_WITH(in.end(), "malformed proxy signal frame: 1 unexpected bytes after offset 8");
  }
  SECTION("an empty command") {
    Frame f{FrameType::kSpawn, PayloadWriter()
                                   .i32(2)
                                   .bytes("")
                                   .bytes("/")
                                   .u32(0)
                                   .u32(0)
                                   .u8(0)
                                   .i32(-1)
                                   .frame(FrameType::kSpawn)
                                   .substr(5)};
    CHECK_THROWS_WITH(decodeSpawn(f), "proxy spawn frame for rank 2 has an empty command");
  }
}

TEST_CASE("hvd-proxy given garbage says so in one line and exits 1; EOF alone is a clean exit") {
  const char* build = std::getenv("HVD_BUILD_DIR");
  REQUIRE(build);
  const std::string proxy = std::string(build) + "/hvd-proxy";
  const std::string garbage =
      hvd::test::sh("printf 'GET / HTTP/1.0\\r\\n\\r\\n' | " + proxy + " 2>&1 >/dev/null; echo rc=$?");
  CHECK(garbage.find("hvd-proxy on ") == 0);
  CHECK(garbage.find(": proxy frame of ") != std::string::npos);
  CHECK(garbage.find("\nrc=1\n") != std::string::npos);
  const std::string eof = hvd::test::sh(proxy + " </dev/null | od -c | head -2; echo rc=$?");
  CHECK(eof.find("H   V   D   -   P   R   O   X   Y") != std::string::npos);  // the hello magic
  CHECK(hvd::test::sh(proxy + " --version") == "hvd-proxy protocol " + std::to_string(kProxyVersion) + "\n");
}
