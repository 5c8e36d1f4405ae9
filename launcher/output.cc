#include "launcher/output.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <ctime>

#include "base/error.h"

namespace hvd::launcher {

namespace {

void makeDirectory(const std::string& path) {
  // mkdir -p: create each component, accepting the ones that exist.
  for (size_t pos = 1; pos <= path.size(); ++pos) {
    if (pos != path.size() && path[pos] != '/') continue;
    const std::string part = path.substr(0, pos);
    if (::mkdir(part.c_str(), 0777) != 0 && errno != EEXIST) {
      throw LaunchError(
          detail::concat("--output-filename: cannot create directory \"", part, "\": ", errnoText(errno)));
    }
  }
}

int openOutput(const std::string& path) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
  if (fd < 0) {
    throw LaunchError(detail::concat("--output-filename: cannot open \"", path, "\": ", errnoText(errno)));
  }
  return fd;
}

// time.asctime(time.localtime()): "Tue Jun  9 20:10:40 2020".
std::string asctimeNow() {
  const std::time_t now = std::time(nullptr);
  std::tm local{};
  ::localtime_r(&now, &local);
  char buf[64];
  const size_t n = std::strftime(buf, sizeof buf, "%a %b %e %H:%M:%S %Y", &local);
  return std::string(buf, n);
}

}  // namespace

std::string lastLine(std::string_view text) {
  while (!text.empty() && (text.back() == '\n' || text.back() == '\r')) text.remove_suffix(1);
  const auto nl = text.rfind('\n');
  return std::string(nl == std::string_view::npos ? text : text.substr(nl + 1));
}

bool writeAll(int fd, std::string_view data) {
  while (!data.empty()) {
    const ssize_t n = ::write(fd, data.data(), data.size());
    if (n >= 0) {
      data.remove_prefix(static_cast<size_t>(n));
    } else if (errno == EAGAIN) {
      pollfd p{fd, POLLOUT, 0};
      ::poll(&p, 1, -1);
    } else if (errno != EINTR) {
      return false;
    }
  }
  return true;
}

std::string OutputForwarder::rankDirectory(int rank, int num_proc) {
  size_t width = 1;
  for (int n = num_proc - 1; n >= 10; n /= 10) ++width;
  std::string digits = std::to_string(rank);
  if (digits.size() < width) digits.insert(0, width - digits.size(), '0');
  return "rank." + digits;
}

OutputForwarder::OutputForwarder(OutputOptions options)
    : options_(std::move(options)), width_ranks_(options_.num_proc), sinks_(static_cast<size_t>(options_.num_proc) * 2) {
  if (!options_.directory) return;
  makeDirectory(*options_.directory);
  for (int rank = 0; rank < options_.num_proc; ++rank) openFiles(rank);
}

void OutputForwarder::openFiles(int rank) {
  const std::string dir = *options_.directory + "/" + rankDirectory(rank, width_ranks_);
  makeDirectory(dir);
  sinks_[rank * 2].file_fd = openOutput(dir + "/stdout");
  sinks_[rank * 2 + 1].file_fd = openOutput(dir + "/stderr");
}

int OutputForwarder::addRank() {
  const int rank = options_.num_proc++;
  sinks_.resize(static_cast<size_t>(options_.num_proc) * 2);
  if (options_.directory) openFiles(rank);
  return rank;
}

OutputForwarder::~OutputForwarder() {
  for (auto& s : sinks_) {
    if (s.file_fd >= 0) ::close(s.file_fd);
  }
}

OutputForwarder::Sink& OutputForwarder::sink(int rank, Stream stream) {
  HVD_INTERNAL_ASSERT(rank >= 0 && rank < options_.num_proc, "output from unknown rank ", rank);
  return sinks_[static_cast<size_t>(rank) * 2 + (stream == Stream::kStderr ? 1 : 0)];
}

void OutputForwarder::emit(int rank, Stream stream, std::string_view segment, bool add_newline,
                           std::string& out) {
  if (options_.timestamp) out += asctimeNow();
  if (options_.tag) {
    out += '[';
    out += std::to_string(rank);
    out += stream == Stream::kStdout ? "]<stdout>:" : "]<stderr>:";
  }
  out.append(segment);
  if (add_newline) out += '\n';
  if (options_.on_segment) {
    std::string_view line = segment;
    while (!line.empty() && (line.back() == '\n' || line.back() == '\r')) line.remove_suffix(1);
    options_.on_segment(rank, stream, line);
  }
}

void OutputForwarder::flush(Stream stream, Sink& sink, const std::string& out) {
  if (out.empty()) return;
  const int idx = stream == Stream::kStderr ? 1 : 0;
  if (!console_broken_[idx]) {
    // A closed console (EPIPE: `hvdrun ... | head`) must not stop the job or the output files.
    console_broken_[idx] = !writeAll(idx ? options_.stderr_fd : options_.stdout_fd, out);
  }
  if (sink.file_fd >= 0 && !writeAll(sink.file_fd, out)) {
    ::close(sink.file_fd);
    sink.file_fd = -1;
  }
}

void OutputForwarder::write(int rank, Stream stream, std::string_view bytes) {
  Sink& s = sink(rank, stream);
  std::string out;  // every complete segment of this chunk, written with one call
  while (!bytes.empty()) {
    const size_t end = bytes.find_first_of("\r\n");
    if (end == std::string_view::npos) {
      const size_t room = kMaxSegment - s.pending.size();
      if (bytes.size() < room) {
        s.pending.append(bytes);
        break;
      }
      s.pending.append(bytes.substr(0, room));
      bytes.remove_prefix(room);
      emit(rank, stream, s.pending, true, out);
      s.pending.clear();
      continue;
    }
    if (s.pending.empty()) {
      emit(rank, stream, bytes.substr(0, end + 1), false, out);
    } else {
      s.pending.append(bytes.substr(0, end + 1));
      emit(rank, stream, s.pending, false, out);
      s.pending.clear();
    }
    bytes.remove_prefix(end + 1);
  }
  flush(stream, s, out);
}

void OutputForwarder::close(int rank, Stream stream) {
  Sink& s = sink(rank, stream);
  if (s.pending.empty()) return;
  std::string out;
  emit(rank, stream, s.pending, true, out);
  std::string().swap(s.pending);  // the stream has ended: give its buffer back
  flush(stream, s, out);
}

void OutputForwarder::message(Stream stream, std::string_view text) {
  const int idx = stream == Stream::kStderr ? 1 : 0;
  if (!console_broken_[idx])
    console_broken_[idx] = !writeAll(idx ? options_.stderr_fd : options_.stdout_fd, text);
}

}  // namespace hvd::launcher
