// The Boost.Asio and Boost.Beast pieces that the rendezvous server (server.cc) and its HTTP client
// (http_store.cc) both use, HTTP/1.1 over one TCP stream, with the short names both write them by.
// Private to this library.
#pragma once

#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/write.hpp>

namespace hvd::rendezvous {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = net::ip::tcp;
using error_code = boost::system::error_code;

}  // namespace hvd::rendezvous
