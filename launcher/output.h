// Output forwarding: workers' bytes in, whole tagged segments out, as horovodrun tags them.
//
// Each (rank, stream) has a buffer; a segment ends at '\n' or '\r' and is written, with its terminator,
// as "{timestamp}[rank]<stdout>:{segment}" to hvdrun's stdout (stderr for <stderr>) and, with
// --output-filename, to DIR/rank.N/stdout|stderr. Every segment goes out in one piece, so a line never
// holds bytes of two ranks. Bytes are forwarded as they are (no UTF-8 decoding: horovodrun's reader
// thread dies on invalid UTF-8).
// Deviations from horovodrun, both so that the next rank's tag starts a fresh line:
//   - a final partial line (no newline before EOF) is written with a newline added;
//   - a line longer than kMaxSegment is cut into segments of kMaxSegment bytes, each ending in a newline.
// Threading: not thread-safe; the job calls it from its io_context thread only.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "launcher/launcher.h"

namespace hvd::launcher {

struct OutputOptions {
  bool tag = true;                       // "[rank]<stdout>:" prefix
  bool timestamp = false;                // time.asctime() prefix, no separator, as horovodrun writes it
  std::optional<std::string> directory;  // --output-filename
  int num_proc = 1;                      // for the rank directory padding
  int stdout_fd = 1;
  int stderr_fd = 2;
  // Called with every segment as it is written (without its terminator), e.g. for the status page's last
  // lines of each rank. Optional.
  std::function<void(int rank, Stream stream, std::string_view segment)> on_segment;
};

class OutputForwarder {
 public:
  static constexpr size_t kMaxSegment = 64 * 1024;

  // Creates DIR and DIR/rank.<padded>/{stdout,stderr} for every rank when a directory is set; throws
  // LaunchError naming the path and errno text when that fails.
  explicit OutputForwarder(OutputOptions options);
  ~OutputForwarder();
  OutputForwarder(const OutputForwarder&) = delete;
  OutputForwarder& operator=(const OutputForwarder&) = delete;

  // Makes room for one more rank (numbered num_proc, num_proc + 1, ...; its directory too) and returns its
  // number: an elastic job's workers started after the first ones.
  int addRank();

  void write(int rank, Stream stream, std::string_view bytes);
  // End of a stream: writes its partial segment, if any.
  void close(int rank, Stream stream);
  // hvdrun's own messages (banners), written untagged to the console only.
  void message(Stream stream, std::string_view text);

  // True once writing to hvdrun's stdout failed (EPIPE: `hvdrun ... | head` after head exited).
  bool stdoutBroken() const { return console_broken_[0]; }

  // "rank.<rank zero-padded to the digits of num_proc - 1>" (horovodrun; np = 1 gives width 1).
  static std::string rankDirectory(int rank, int num_proc);

 private:
  struct Sink {
    std::string pending;  // bytes of the unfinished segment
    int file_fd = -1;
  };
  Sink& sink(int rank, Stream stream);
  void openFiles(int rank);
  void emit(int rank, Stream stream, std::string_view segment, bool add_newline, std::string& out);
  void flush(Stream stream, Sink& sink, const std::string& out);

  OutputOptions options_;
  const int width_ranks_;  // the first num_proc: rank directories are padded for it
  std::vector<Sink> sinks_;  // index rank * 2 + stream
  bool console_broken_[2] = {false, false};
};

// Writes all of `data` to `fd`, retrying on EINTR and waiting on EAGAIN. Returns false on any other error.
bool writeAll(int fd, std::string_view data);

// The last line of `text`, trailing newlines (and carriage returns) ignored: a remote tool's output
// reduced to one line for an error message.
std::string lastLine(std::string_view text);

}  // namespace hvd::launcher
