// The elastic state API and run loop of hvd/hvd.h (hvd_state_*, hvd_elastic_run), written over the rest of
// the C API: a state is a list of registered buffers with a copy of each, and the loop is Horovod's
// (horovod/common/elastic.py, run_fn) with statuses for exceptions.
#include <cstring>
#include <exception>
#include <string>
#include <utility>
#include <vector>

#include "hvd/hvd.h"
#include "runtime/c_api.h"

using hvd::runtime::capi::fail;

struct hvd_state {
  struct Buffer {
    std::string name;
    void* data;
    size_t bytes;
    std::vector<unsigned char> committed;
  };
  std::vector<Buffer> buffers;  // registration order: the order of sync's broadcasts on every rank
  std::vector<std::pair<void (*)(void*), void*>> on_reset;
  // The changes reported by the last hvd_state_commit that returned HVD_ERR_HOSTS_UPDATED (the run loop's
  // skip-sync decision); -1 when the last commit did not.
  int host_changes = -1;
};

namespace {

int nullState(const char* function) {
  return fail(HVD_ERR_INVALID_ARGUMENT, std::string(function) + ": the state is NULL (create it with hvd_state_create)");
}

void commitLocally(hvd_state* state) {
  for (auto& b : state->buffers) std::memcpy(b.committed.data(), b.data, b.bytes);
}

// Whether the run loop restores and resets after train (or a sync) returned status.
bool isInternalError(int status) {
  return status == HVD_ERR_PEER_LOST || status == HVD_ERR_BACKEND || status == HVD_ERR_SHUT_DOWN;
}

}  // namespace

extern "C" {

hvd_state* hvd_state_create(void) {
  try {
    return new hvd_state();
  } catch (const std::exception&) {
    return nullptr;
  }
}

int hvd_state_add(hvd_state* state, const char* name, void* data, size_t bytes) {
  if (!state) return nullState("hvd_state_add");
  if (!name || !*name) {
    return fail(HVD_ERR_INVALID_ARGUMENT, std::string("hvd_state_add: a buffer needs a non-empty name (got ") +
                                              (name ? "\"\"" : "NULL") + ")");
  }
  if (!data) {
    return fail(HVD_ERR_INVALID_ARGUMENT, std::string("hvd_state_add: buffer '") + name + "' of " +
                                              std::to_string(bytes) + " bytes has a NULL data pointer");
  }
  for (const auto& b : state->buffers) {
    if (b.name == name) {
      return fail(HVD_ERR_INVALID_ARGUMENT, std::string("hvd_state_add: the state already has a buffer named '") +
                                                name + "' (" + std::to_string(b.bytes) + " bytes)");
    }
  }
  try {
    hvd_state::Buffer b{name, data, bytes, std::vector<unsigned char>(bytes)};
    std::memcpy(b.committed.data(), data, bytes);
    state->buffers.push_back(std::move(b));
  } catch (const std::exception& e) {
    return fail(HVD_ERR_INTERNAL, std::string("hvd_state_add: buffer '") + name + "' of " + std::to_string(bytes) +
                                      " bytes: " + e.what());
  }
  return HVD_SUCCESS;
}

void hvd_state_free(hvd_state* state) { delete state; }

int hvd_state_commit(hvd_state* state) {
  if (!state) return nullState("hvd_state_commit");
  state->host_changes = -1;
  commitLocally(state);
  int changes = 0;
  const int updated = hvd_elastic_check_host_updates(&changes);
  if (updated < 0) return updated;
  if (updated == 0) return HVD_SUCCESS;
  state->host_changes = changes;
  std::string what;
  if (changes & HVD_HOSTS_REMOVED) what += "workers left";
  if (changes & HVD_HOSTS_ADDED) what += what.empty() ? "workers joined" : " and workers joined";
  return fail(HVD_ERR_HOSTS_UPDATED, "the elastic job is re-forming (" + (what.empty() ? "a new round" : what) +
                                         " after round " + std::to_string(hvd_elastic_round()) +
                                         "); state committed, reset between steps");
}

int hvd_state_restore(hvd_state* state) {
  if (!state) return nullState("hvd_state_restore");
  for (auto& b : state->buffers) std::memcpy(b.data, b.committed.data(), b.bytes);
  return HVD_SUCCESS;
}

int hvd_state_sync(hvd_state* state) {
  if (!state) return nullState("hvd_state_sync");
  if (!hvd_is_initialized()) {
    return fail(HVD_ERR_NOT_INITIALIZED, "hvd_state_sync: libhvd has not been initialized; call hvd_init() first");
  }
  // Every broadcast is queued before any is waited for, so they negotiate (and fuse) together.
  std::vector<int> handles;
  int status = HVD_SUCCESS;
  for (auto& b : state->buffers) {
    const std::string name = "hvd.state." + b.name;
    const int h = hvd_broadcast_async(name.c_str(), b.data, b.bytes, HVD_UINT8, 0);
    if (h < 0) {
      status = h;
      break;
    }
    handles.push_back(h);
  }
  std::string error = status < 0 ? hvd_error_text() : "";
  for (int h : handles) {
    const int s = hvd_wait(h);
    if (s != HVD_SUCCESS && status == HVD_SUCCESS) {
      status = s;
      error = hvd_error_text();
    }
  }
  if (status != HVD_SUCCESS) return fail(status, "hvd_state_sync: " + error);
  commitLocally(state);
  return HVD_SUCCESS;
}

int hvd_state_on_reset(hvd_state* state, void (*fn)(void*), void* arg) {
  if (!state) return nullState("hvd_state_on_reset");
  if (!fn) return fail(HVD_ERR_INVALID_ARGUMENT, "hvd_state_on_reset: the callback is NULL");
  state->on_reset.emplace_back(fn, arg);
  return HVD_SUCCESS;
}

int hvd_elastic_run(hvd_state* state, int (*train)(hvd_state* state, void* arg), void* arg) {
  if (!state) return nullState("hvd_elastic_run");
  if (!train) return fail(HVD_ERR_INVALID_ARGUMENT, "hvd_elastic_run: the training function is NULL");
  bool skip_sync = false;
  for (;;) {
    int status = HVD_SUCCESS;
    if (!skip_sync) status = hvd_state_sync(state);
    if (status == HVD_SUCCESS) {
      state->host_changes = -1;
      status = train(state, arg);
      if (status == HVD_SUCCESS) return status;
    }
    if (!hvd_elastic_enabled()) return status;  // a static job cannot re-form
    if (isInternalError(status)) {
      hvd_state_restore(state);
      skip_sync = false;
    } else if (status == HVD_ERR_HOSTS_UPDATED) {
      // Only removals: every survivor committed the same state at this step, so there is nothing to sync.
      // Unknown changes (train reported the update itself) sync to be safe.
      skip_sync = state->host_changes == HVD_HOSTS_REMOVED;
    } else {
      return status;
    }
    const std::string cause = hvd_error_text();
    hvd_shutdown();
    if (const int init = hvd_init(); init != HVD_SUCCESS) {
      return fail(init, std::string(hvd_error_text()) + " (re-initializing after: " + cause + ")");
    }
    for (const auto& [fn, fn_arg] : state->on_reset) fn(fn_arg);
  }
}

}  // extern "C"
