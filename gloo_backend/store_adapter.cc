#include "gloo_backend/store_adapter.h"

namespace hvd::gloo_backend {

GlooStoreAdapter::GlooStoreAdapter(std::shared_ptr<rendezvous::Store> store,
                                   std::chrono::milliseconds timeout)
    : store_(std::move(store)), timeout_(timeout) {}

void GlooStoreAdapter::set(const std::string& key, const std::vector<char>& data) { store_->set(key, data); }

std::vector<char> GlooStoreAdapter::get(const std::string& key) { return store_->get(key, timeout_); }

void GlooStoreAdapter::wait(const std::vector<std::string>& keys) { store_->wait(keys, timeout_); }

void GlooStoreAdapter::wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) {
  store_->wait(keys, timeout);
}

}  // namespace hvd::gloo_backend
