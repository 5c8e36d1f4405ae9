#include "rendezvous/file_store.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <filesystem>
#include <thread>

#include "base/error.h"
#include "base/unique_fd.h"

namespace hvd::rendezvous {

namespace {

constexpr std::chrono::milliseconds kPollMin{1};
constexpr std::chrono::milliseconds kPollMax{20};
// Longest file name most file systems accept (NAME_MAX), minus room for the lock/temp suffixes.
constexpr size_t kMaxName = 255 - 32;

// Temporary and lock files end in '~...', a character the escaping never leaves in a key's file name.
constexpr const char* kLockSuffix = "~lock";

void writeAll(int fd, const char* data, size_t size, const std::string& path) {
  while (size > 0) {
    ssize_t n = ::write(fd, data, size);
    if (n < 0) {
      if (errno == EINTR) continue;
      throw StoreError(detail::concat("cannot write '", path, "': ", errnoText(errno)));
    }
    data += n;
    size -= static_cast<size_t>(n);
  }
}

// The file's content, or nullopt when it does not exist.
std::optional<Bytes> readFile(const std::string& path) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) {
    if (errno == ENOENT) return std::nullopt;
    throw StoreError(detail::concat("cannot open '", path, "': ", errnoText(errno)));
  }
  Bytes out;
  char buf[65536];
  while (true) {
    ssize_t n = ::read(fd.get(), buf, sizeof(buf));
    if (n < 0) {
      if (errno == EINTR) continue;
      throw StoreError(detail::concat("cannot read '", path, "': ", errnoText(errno)));
    }
    if (n == 0) break;
    out.insert(out.end(), buf, buf + n);
  }
  return out;
}

// Writes path atomically: a unique temporary file in the same directory, then rename().
void writeFileAtomic(const std::string& path, const char* data, size_t size) {
  static std::atomic<uint64_t> counter{0};
  const std::string tmp =
      detail::concat(path, "~tmp.", ::getpid(), ".", std::hash<std::thread::id>()(std::this_thread::get_id()), ".",
                     counter++);
  {
    UniqueFd fd(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644));
    if (fd.get() < 0) throw StoreError(detail::concat("cannot create '", tmp, "': ", errnoText(errno)));
    writeAll(fd.get(), data, size, tmp);
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    throw StoreError(detail::concat("cannot rename '", tmp, "' to '", path, "': ", errnoText(err)));
  }
}

}  // namespace

FileStore::FileStore(std::string directory) : directory_(std::move(directory)) {
  std::error_code ec;
  std::filesystem::create_directories(directory_, ec);
  HVD_CHECK(!ec && std::filesystem::is_directory(directory_), StoreError, "cannot create file store directory '",
            directory_, "': ", ec ? ec.message() : "not a directory");
}

std::string FileStore::pathOf(const std::string& key) const {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string name;
  for (unsigned char c : key) {
    if ((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '-') {
      name += static_cast<char>(c);
    } else {
      name += '%';
      name += kHex[c >> 4];
      name += kHex[c & 15];
    }
  }
  HVD_CHECK(!name.empty() && name.size() <= kMaxName, StoreError, "key '", key, "' is too long (or empty) for ",
            describe(), ": its file name would have ", name.size(), " bytes, at most ", kMaxName, " allowed");
  return directory_ + "/" + name;
}

void FileStore::set(const std::string& key, const Bytes& value) {
  writeFileAtomic(pathOf(key), value.data(), value.size());
}

std::optional<Bytes> FileStore::tryGet(const std::string& key) { return readFile(pathOf(key)); }

void FileStore::wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  auto sleep = kPollMin;
  size_t next = 0;
  while (true) {
    while (next < keys.size() && ::access(pathOf(keys[next]).c_str(), F_OK) == 0) ++next;
    if (next == keys.size()) return;
    const auto now = std::chrono::steady_clock::now();
    if (now >= deadline) break;
    std::this_thread::sleep_for(std::min<std::chrono::steady_clock::duration>(sleep, deadline - now));
    sleep = std::min(sleep * 2, kPollMax);
  }
  std::vector<std::string> missing;
  for (size_t i = next; i < keys.size(); ++i) {
    if (::access(pathOf(keys[i]).c_str(), F_OK) != 0) missing.push_back(keys[i]);
  }
  throw RendezvousTimeout(detail::concat("timed out after ", timeout.count(), " ms waiting for key(s) ",
                                         formatKeys(missing), " in ", describe()));
}

int64_t FileStore::add(const std::string& key, int64_t delta) {
  const std::string path = pathOf(key);
  const std::string lock_path = path + kLockSuffix;
  UniqueFd lock(::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644));
  if (lock.get() < 0) throw StoreError(detail::concat("cannot open lock file '", lock_path, "': ", errnoText(errno)));
  while (::flock(lock.get(), LOCK_EX) != 0) {
    if (errno != EINTR) throw StoreError(detail::concat("cannot lock '", lock_path, "': ", errnoText(errno)));
  }
  // Released when lock closes (also if we throw).
  int64_t value = 0;
  if (auto current = readFile(path); current && !current->empty()) {
    try {
      size_t used = 0;
      const std::string text(current->begin(), current->end());
      value = std::stoll(text, &used);
      if (used != text.size()) throw std::invalid_argument(text);
    } catch (const std::exception&) {
      throw StoreError(detail::concat("add(): key '", key, "' in ", describe(), " holds a non-integer value"));
    }
  }
  value += delta;
  const std::string text = std::to_string(value);
  writeFileAtomic(path, text.data(), text.size());
  return value;
}

void FileStore::deleteKey(const std::string& key) {
  const std::string path = pathOf(key);
  if (::unlink(path.c_str()) != 0 && errno != ENOENT) {
    throw StoreError(detail::concat("cannot delete '", path, "': ", errnoText(errno)));
  }
}

}  // namespace hvd::rendezvous
