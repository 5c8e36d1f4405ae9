// OutputForwarder: segmenting, tags, partial and overlong lines, files.
#include <fcntl.h>
#include <unistd.h>

#include <catch2/catch.hpp>

#include "launcher/output.h"
#include "tests/launcher/process.h"

using namespace hvd::launcher;

namespace {

// Console streams captured in files.
struct Console {
  const hvd::test::TempDir tmp = test::tempDir();
  const std::string dir = tmp.path();
  int out = ::open((dir + "/out").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  int err = ::open((dir + "/err").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  ~Console() {
    ::close(out);
    ::close(err);
  }
  std::string stdoutText() const { return test::readFile(dir + "/out"); }
  std::string stderrText() const { return test::readFile(dir + "/err"); }
  OutputOptions options(int np) const {
    OutputOptions o;
    o.num_proc = np;
    o.stdout_fd = out;
    o.stderr_fd = err;
    return o;
  }
};

}  // namespace

TEST_CASE("segments end at \\n or \\r, across any chunking", "[output]") {
  Console console;
  OutputForwarder f(console.options(2));
  f.write(0, Stream::kStdout, "he");
  f.write(1, Stream::kStdout, "other\n");
  f.write(0, Stream::kStdout, "llo\nprog 1\rprog 2\r");
  f.write(0, Stream::kStderr, "e1\ne2");
  f.write(0, Stream::kStdout, "tail");
  f.close(0, Stream::kStdout);
  f.close(0, Stream::kStderr);
  f.close(1, Stream::kStdout);
  CHECK(console.stdoutText() == "[1]<stdout>:other\n[0]<stdout>:hello\n[0]<stdout>:prog 1\r[0]<stdout>:prog 2\r"
                                "[0]<stdout>:tail\n");
  CHECK(console.stderrText() == "[0]<stderr>:e1\n[0]<stderr>:e2\n");
}

TEST_CASE("a line longer than kMaxSegment is cut into tagged pieces", "[output]") {
  Console console;
  OutputOptions o = console.options(1);
  OutputForwarder f(o);
  const std::string big(OutputForwarder::kMaxSegment + 10, 'x');
  for (size_t i = 0; i < big.size(); i += 1000) f.write(0, Stream::kStdout, std::string_view(big).substr(i, 1000));
  f.write(0, Stream::kStdout, "\n");
  const std::string expected = "[0]<stdout>:" + std::string(OutputForwarder::kMaxSegment, 'x') + "\n" +
                               "[0]<stdout>:" + std::string(10, 'x') + "\n";
  CHECK(console.stdoutText() == expected);
}

TEST_CASE("tags off, hvdrun's own messages, rank directories", "[output]") {
  Console console;
  OutputOptions o = console.options(1);
  o.tag = false;
  OutputForwarder f(o);
  f.write(0, Stream::kStdout, "plain\n");
  f.message(Stream::kStdout, "hvdrun: note\n");
  CHECK(console.stdoutText() == "plain\nhvdrun: note\n");

  CHECK(OutputForwarder::rankDirectory(0, 1) == "rank.0");
  CHECK(OutputForwarder::rankDirectory(9, 10) == "rank.9");
  CHECK(OutputForwarder::rankDirectory(3, 11) == "rank.03");
  CHECK(OutputForwarder::rankDirectory(7, 101) == "rank.007");
  CHECK(OutputForwarder::rankDirectory(100, 101) == "rank.100");
}

TEST_CASE("output files get the same tagged lines; an unusable directory is named", "[output]") {
  Console console;
  OutputOptions o = console.options(2);
  o.directory = console.dir + "/logs/nested";
  {
    OutputForwarder f(o);
    f.write(1, Stream::kStderr, "boom\n");
  }
  CHECK(test::readFile(console.dir + "/logs/nested/rank.1/stderr") == "[1]<stderr>:boom\n");
  CHECK(test::readFile(console.dir + "/logs/nested/rank.0/stdout").empty());
  o.directory = "/proc/hvd-not-writable";
  CHECK_THROWS_WITH(OutputForwarder(o), Catch::Contains("cannot create directory \"/proc/hvd-not-writable\""));
}

TEST_CASE("lastLine: the last line of a tool's output, trailing newlines ignored", "[output]") {
  CHECK(lastLine("") == "");
  CHECK(lastLine("one") == "one");
  CHECK(lastLine("first\nsecond\n") == "second");
  CHECK(lastLine("first\r\nsecond\r\n\r\n") == "second");
  CHECK(lastLine("\n\n") == "");
  CHECK(lastLine("a\n\nb") == "b");
}
