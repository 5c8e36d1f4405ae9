#include "rendezvous/status_page.h"

namespace hvd::rendezvous {

namespace http = boost::beast::http;

Response handleStatus(const Request& request, const Monitor& monitor, const ServerOptions& options,
                      const PeerInfo& peer) {
  Response res{http::status::not_found, request.version()};
  res.set(http::field::content_type, "text/plain");
  res.body() = "not yet\n";
  res.prepare_payload();
  return res;
}

}  // namespace hvd::rendezvous
