// Store in a directory: ranks in several processes meet through a (possibly shared) file system, without
// a server. Used by multi-process tests and by jobs whose nodes share a file system.
//
// One file per key; names escape every byte outside [A-Za-z0-9_-] as %XX, so '/' in a key, "." and ".."
// are safe. Writes are atomic (a temporary file, then rename()), so a reader sees the old value or the
// new one, never half a value. add() holds an flock() on a per-key lock file; the kernel drops it if the
// holder dies, so a crashed rank cannot wedge the others.
//
// wait() polls (a short sleep growing from 1 ms to 20 ms) rather than using inotify: inotify does not
// report changes made by other hosts on NFS or Lustre, the shared file systems this store exists for.
// Threading: safe from any number of threads and processes.
#pragma once

#include <string>

#include "rendezvous/store.h"

namespace hvd::rendezvous {

class FileStore final : public Store {
 public:
  // Creates the directory (and parents) when missing. Throws StoreError naming it on failure.
  explicit FileStore(std::string directory);

  void set(const std::string& key, const Bytes& value) override;
  std::optional<Bytes> tryGet(const std::string& key) override;
  // Polls for the keys' files, every 1 ms at first, doubling to every 20 ms.
  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override;
  int64_t add(const std::string& key, int64_t delta) override;
  void deleteKey(const std::string& key) override;
  std::string describe() const override { return "file store '" + directory_ + "'"; }

 private:
  std::string pathOf(const std::string& key) const;

  std::string directory_;
};

}  // namespace hvd::rendezvous
