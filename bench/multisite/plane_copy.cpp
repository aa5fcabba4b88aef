// The plane's RPC alone: remote/plane.capnp's Gateway.join -> Session.update streaming calls,
// set up as remote/server.cpp (start_rpc) and remote/client.cpp (dial) set up theirs: the same
// ReaderOptions (traversal limit max_message_bytes / 8 words, nesting 32), the same flow limit
// (max_pending_bytes / 8 words) on both RpcSystems, kj-tls from remote/tls.hpp when TLS is on, and
// each stream sending its next chunk when flow control lets it, as the node's pump does. The
// bench's Session counts envelope bytes and does nothing else: what is measured is Cap'n Proto,
// kj and TLS, not the bridges to CAF (product_copy measures those).
#include <sys/socket.h>

#include <capnp/message.h>
#include <capnp/orphan.h>
#include <capnp/rpc-twoparty.h>
#include <kj/async-io.h>
#include <kj/compat/tls.h>
#include <kj/timer.h>
#include <kj/vector.h>

#include <cstring>
#include <memory>
#include <stdexcept>
#include <vector>

#include "bench/multisite/transfer_pair.hpp"
#include "remote/plane.capnp.h"
#include "remote/tls.hpp"

namespace multisite_bench {
namespace {

namespace wire = archipelago::remote::wire;
using archipelago::remote::context_of;
using archipelago::remote::TlsHandle;

class CountingSession final : public wire::Session::Server {
 public:
  CountingSession(ByteCount& count, Pair& pair) : count_(count), pair_(pair) {}
  kj::Promise<void> update(UpdateContext context) override {
    count_.add(context.getParams().getEnvelope().size(), pair_);
    return kj::READY_NOW;
  }
  kj::Promise<void> ping(PingContext) override { return kj::READY_NOW; }

 private:
  ByteCount& count_;
  Pair& pair_;
};

// Admits every join (no proof: nothing here is secret) with a fresh counting Session.
class BenchGateway final : public wire::Gateway::Server {
 public:
  BenchGateway(ByteCount& count, Pair& pair) : count_(count), pair_(pair) {}
  kj::Promise<void> join(JoinContext context) override {
    context.getResults().setSession(kj::heap<CountingSession>(count_, pair_));
    return kj::READY_NOW;
  }

 private:
  ByteCount& count_;
  Pair& pair_;
};

// Members are destroyed bottom-up: the RPC system before the network before the stream.
struct RpcConnection {
  kj::Own<kj::AsyncIoStream> stream;
  kj::Own<capnp::TwoPartyVatNetwork> network;
  kj::Own<capnp::RpcSystem<capnp::rpc::twoparty::VatId>> rpc;
};

capnp::ReaderOptions reader_options(const archipelago::remote::EdgeLimits& limits) {
  capnp::ReaderOptions options;
  options.traversalLimitInWords = limits.max_message_bytes / 8;
  options.nestingLimit = 32;
  return options;
}

int connections_of(const TransferSpec& spec) { return spec.fanout == Fanout::connections ? spec.streams : 1; }

void plane_receive(Pair& pair, uint16_t) {
  const auto& spec = pair.spec;
  auto io = kj::setupAsyncIo();
  auto& timer = io.provider->getTimer();
  TlsHandle tls;
  if (spec.tls) {
    auto made = archipelago::remote::make_server_tls(*spec.tls, timer, 30.0);
    if (!made) throw std::runtime_error(made.error().reason);
    tls = std::move(*made);
  }
  auto listener = io.provider->getNetwork().parseAddress("127.0.0.1", 0).wait(io.waitScope)->listen();
  pair.port.set_value(static_cast<uint16_t>(listener->getPort()));
  ByteCount count;
  std::vector<std::unique_ptr<RpcConnection>> served;
  for (int i = 0; i < connections_of(spec); ++i) {
    auto c = std::make_unique<RpcConnection>();
    c->stream = timer.timeoutAfter(30 * kj::SECONDS, listener->accept()).wait(io.waitScope);
    if (tls) c->stream = timer.timeoutAfter(30 * kj::SECONDS, context_of(*tls).wrapServer(kj::mv(c->stream))).wait(io.waitScope);
    c->network = kj::heap<capnp::TwoPartyVatNetwork>(*c->stream, capnp::rpc::twoparty::Side::SERVER, reader_options(spec.limits));
    c->rpc = kj::heap<capnp::RpcSystem<capnp::rpc::twoparty::VatId>>(
        capnp::makeRpcServer(*c->network, wire::Gateway::Client(kj::heap<BenchGateway>(count, pair))));
    c->rpc->setFlowLimit(spec.limits.max_pending_bytes / 8);
    served.push_back(std::move(c));
  }
  const double cpu_at_start = thread_cpu_s();
  turn_loop_until(io, pair, [&] { return count.got >= spec.total_bytes; });
  pair.receiver_cpu_s = thread_cpu_s() - cpu_at_start;
  pair.bytes = count.got;
  if (count.got < spec.total_bytes) pair.fail("the receiver counted " + std::to_string(count.got) + " bytes");
  pair.receiver_done = true;
  turn_loop_until(io, pair, [&] { return pair.sender_done.load(); }, 30);
}

// One stream: each update leaves when the previous one's send() resolves (the stream's flow
// control), then a ping, answered once every update before it was delivered.
// `reference`: the chunk goes into the message by reference (it outlives the transfer), not copied.
kj::Promise<void> upload(wire::Session::Client session, uint32_t learner, uint64_t left, kj::ArrayPtr<const kj::byte> chunk,
                         bool reference) {
  if (left == 0) return session.pingRequest().send().ignoreResult();
  const size_t size = static_cast<size_t>(std::min<uint64_t>(chunk.size(), left));
  auto request = session.updateRequest();
  request.setLearner(learner);
  if (reference) {
    auto orphanage = capnp::Orphanage::getForMessageContaining(wire::Session::UpdateParams::Builder(request));
    request.adoptEnvelope(orphanage.referenceExternalData(capnp::Data::Reader(chunk.begin(), size)));
  } else {
    request.setEnvelope(chunk.slice(0, size));
  }
  return request.send().then([session = kj::mv(session), learner, left, size, chunk, reference]() mutable {
    return upload(kj::mv(session), learner, left - size, chunk, reference);
  });
}

void plane_send(Pair& pair, uint16_t port) {
  const auto& spec = pair.spec;
  auto io = kj::setupAsyncIo();
  auto& timer = io.provider->getTimer();
  TlsHandle tls;
  if (spec.tls) {
    auto made = archipelago::remote::make_client_tls(*spec.tls);
    if (!made) throw std::runtime_error(made.error().reason);
    tls = std::move(*made);
  }
  auto address = io.provider->getNetwork().parseAddress("127.0.0.1", port).wait(io.waitScope);
  std::vector<std::unique_ptr<RpcConnection>> dialled;
  std::vector<wire::Gateway::Client> gateways;
  for (int i = 0; i < connections_of(spec); ++i) {
    auto c = std::make_unique<RpcConnection>();
    c->stream = timer.timeoutAfter(30 * kj::SECONDS, address->connect()).wait(io.waitScope);
    if (spec.send_buffer_bytes > 0) c->stream->setsockopt(SOL_SOCKET, SO_SNDBUF, &spec.send_buffer_bytes, sizeof(int));
    if (tls) c->stream = timer.timeoutAfter(30 * kj::SECONDS, context_of(*tls).wrapClient(kj::mv(c->stream), "127.0.0.1")).wait(io.waitScope);
    c->network = kj::heap<capnp::TwoPartyVatNetwork>(*c->stream, capnp::rpc::twoparty::Side::CLIENT, reader_options(spec.limits));
    c->rpc = kj::heap<capnp::RpcSystem<capnp::rpc::twoparty::VatId>>(capnp::makeRpcClient(*c->network));
    c->rpc->setFlowLimit(spec.limits.max_pending_bytes / 8);
    capnp::MallocMessageBuilder message(8);
    auto vat = message.initRoot<capnp::rpc::twoparty::VatId>();
    vat.setSide(capnp::rpc::twoparty::Side::SERVER);
    gateways.push_back(c->rpc->bootstrap(vat).castAs<wire::Gateway>());
    dialled.push_back(std::move(c));
  }
  std::vector<wire::Session::Client> sessions;
  const int session_count = spec.fanout == Fanout::calls ? 1 : spec.streams;
  for (int s = 0; s < session_count; ++s) {
    auto& gateway = gateways[spec.fanout == Fanout::connections ? s : 0];
    auto joined = timer.timeoutAfter(30 * kj::SECONDS, gateway.joinRequest().send()).wait(io.waitScope);
    sessions.push_back(joined.getSession());
    timer.timeoutAfter(30 * kj::SECONDS, sessions.back().pingRequest().send()).wait(io.waitScope);
  }
  auto chunk = kj::heapArray<kj::byte>(spec.chunk_bytes);
  memset(chunk.begin(), 'x', chunk.size());
  pair.start = Clock::now();
  const double cpu_at_start = thread_cpu_s();
  kj::Vector<kj::Promise<void>> uploads;
  for (int i = 0; i < spec.streams; ++i) {
    auto& session = sessions[spec.fanout == Fanout::calls ? 0 : i];
    uploads.add(upload(session, static_cast<uint32_t>(i), share_of(spec.total_bytes, spec.streams, i), chunk, spec.reference_payload));
  }
  timer.timeoutAfter(300 * kj::SECONDS, kj::joinPromises(uploads.releaseAsArray())).wait(io.waitScope);
  pair.sender_cpu_s = thread_cpu_s() - cpu_at_start;
  int window = 0;
  kj::uint length = sizeof window;
  dialled.front()->stream->getsockopt(SOL_SOCKET, SO_SNDBUF, &window, &length);
  pair.window_bytes = window;
  pair.sender_done = true;
  turn_loop_until(io, pair, [&] { return pair.receiver_done.load(); }, 30);
  sessions.clear();
  gateways.clear();
}

}  // namespace

TransferResult plane_copy(const TransferSpec& spec) { return run_pair(spec, plane_receive, plane_send); }

}  // namespace multisite_bench
