// The authorization table of actors/authorization.hpp and the limits of remote/edge.hpp, tried from
// outside against a real coordinator process over its one port (remote/plane.capnp): outsiders with
// bytes that are not Cap'n Proto, a frame that claims 4 GiB, 2000 idle sockets and an RPC client
// without the token; a client that holds the token and then sends what a node may not; TLS peers
// without a certificate of the run's CA; and an impostor coordinator that records what a node
// sends it. Each refused class is counted by the coordinator, and the run goes on. Loopback only;
// every wait is bounded.
#include <map>
#include <random>
#include <set>
#include <sstream>

#include <doctest/doctest.h>
#include <kj/compat/tls.h>

#include "remote/remote_protocol.hpp"
#include "actors/wire.hpp"
#include "messages/envelope.hpp"
#include "messages/message_types.hpp"
#include "net/auth.hpp"
#include "remote/proof.hpp"
#include "storage/checkpoint_store.hpp"
#include "tests/multisite/plane_peer.hpp"
#include "tests/multisite/process.hpp"
#include "tests/multisite/run_args.hpp"

using namespace multisite;
using namespace archipelago;
using namespace archipelago::actors;

namespace {

int64_t refused(const nlohmann::json& summary, const std::string& reason) {
  return summary["refused"]["by_reason"].value(reason, int64_t{-1});
}

int64_t edge(const nlohmann::json& j, const std::string& counter) { return j["edge"].value(counter, int64_t{-1}); }

fs::path admin_token(const Scratch& s) {
  const auto path = s.dir / "admin-token";
  std::ofstream(path) << "admin-horse-battery-staple-0123456789\n";
  chmod(path.c_str(), 0600);
  return path;
}

net::Secret secret_of(const fs::path& file) {
  auto secret = net::load_token_file(file.string());
  if (!secret) FAIL(secret.error().reason);  // not REQUIRE_MESSAGE: its message is built on success too (-s)
  return *secret;
}

// After an attack: versions keep committing, the coordinator's memory stayed within 256 MiB of
// where it started, and a real node joins within 10 s (then it is SIGKILLed, freeing its slots).
void run_goes_on(const Scratch& s, int port, Process& coordinator, double rss_before, const std::string& attack) {
  CAPTURE(attack);
  const int64_t version = coordinator.last_value("version");
  CHECK_MESSAGE(wait_until([&] { return coordinator.last_value("version") >= version + 2; }, 30), coordinator.all());
  const double rss = rss_mib(coordinator.pid());
  CAPTURE(rss);
  CAPTURE(rss_before);
  CHECK(rss - rss_before < 256);
  const size_t admitted = count_of(coordinator.err(), "admitted node 'node-b'");
  Process b("node-b-after-" + attack, node_args(s, port, "node-b"), s.dir);
  CHECK_MESSAGE(wait_until([&] { return count_of(coordinator.err(), "admitted node 'node-b'") > admitted; }, 10),
                coordinator.all() << b.all());
  b.kill(SIGKILL);
  CHECK_MESSAGE(wait_until([&] { return count_of(coordinator.err(), "node 'node-b' released") > admitted; }, 15),
                coordinator.all());
}

// A join of `learners` learners (from slot `preferred`, -1: any) on `client`'s connection, proved
// with `token`, whose deliveries go to `sink`.
capnp::Response<wire::Gateway::JoinResults> join_with_sink(PlaneClient& client, const net::Secret& token,
                                                           const std::string& sender, const messages::Join& join,
                                                           int learners, int preferred,
                                                           kj::Own<wire::NodeSink::Server> sink) {
  auto call = client.gateway().joinRequest();
  auto bytes = Outbox(sender).wrap(join);
  REQUIRE(bytes.ok());
  call.initRequest().setJoin(bytes_of(*bytes));
  call.getRequest().setLearners(learners);
  call.getRequest().setPreferredFirst(preferred);
  call.getRequest().setProof(bytes_of(remote::prove(token, remote::kJoinPurpose, client.nonce())));
  call.setSink(kj::mv(sink));
  return call.send().wait(client.io().waitScope);
}

// A join of one learner on `client`'s connection, proved with `token`; `stall`: the sink never
// completes a delivery.
capnp::Response<wire::Gateway::JoinResults> send_join(PlaneClient& client, const net::Secret& token,
                                                      const std::string& sender, const messages::Join& join, bool stall) {
  return join_with_sink(client, token, sender, join, 1, -1, kj::heap<QuietSink>(stall));
}

}  // namespace

TEST_CASE("outsiders without the token (bytes, a 4 GiB frame, 16 MiB frames, 2000 idle sockets, an RPC client) are each refused and counted") {
  Scratch s("authz-outsiders");
  const auto admin = admin_token(s);
  const int port = free_port();
  auto run = start_two_learner_run(s, port, {"train.max_seconds=0"}, {"--admin-token-file", admin.string()});
  Process& coordinator = *run.coordinator;
  const std::string target = "127.0.0.1:" + std::to_string(port);
  const double rss_before = rss_mib(coordinator.pid());
  REQUIRE(rss_before > 0);
  auto counters = [&] { return console_answer(s.dir, target, "nodes", admin); };

  // 1. Random bytes: not a Cap'n Proto frame; the connection is cut.
  {
    const auto before = counters();
    std::mt19937_64 random(7);
    std::vector<uint64_t> noise(8192);
    for (auto& word : noise) word = random();
    const int fd = raw_connect(port);
    REQUIRE(fd >= 0);
    (void)raw_send(fd, noise.data(), noise.size() * sizeof(uint64_t));
    CHECK(closed_by_peer(fd, 10));
    ::close(fd);
    CHECK(edge(counters(), "closed_unauthenticated") > edge(before, "closed_unauthenticated"));
    run_goes_on(s, port, coordinator, rss_before, "random-bytes");
  }
  // 2. Four connections, each a frame header that claims one segment of 2^29 words (4 GiB).
  {
    const auto before = counters();
    std::vector<int> fds;
    for (int i = 0; i < 4; ++i) {
      const int fd = raw_connect(port);
      REQUIRE(fd >= 0);
      const uint32_t header[2] = {0, 1u << 29};
      REQUIRE(raw_send(fd, header, sizeof header));
      fds.push_back(fd);
    }
    for (int fd : fds) {
      CHECK(closed_by_peer(fd, 10));
      ::close(fd);
    }
    CHECK(edge(counters(), "closed_unauthenticated") >= edge(before, "closed_unauthenticated") + 4);
    run_goes_on(s, port, coordinator, rss_before, "4GiB-frame");
  }
  // 2b. 32 connections from two addresses, each a frame header that claims 16 MiB (the full message
  //     limit) and 64 KiB of it: before a proof a frame may state 8 KiB (net.pre_auth_kib), so each is
  //     cut at its header and nothing of the 16 MiB is allocated.
  {
    const auto before = counters();
    const double rss_start = rss_mib(coordinator.pid());
    std::vector<int> fds;
    std::vector<char> body(64 << 10, 'x');
    for (int i = 0; i < 32; ++i) {
      const int fd = raw_connect(port, i < 16 ? "127.0.0.2" : "127.0.0.3");
      REQUIRE(fd >= 0);
      const uint32_t header[2] = {0, 2u << 20};  // one segment of 2^21 words
      (void)raw_send(fd, header, sizeof header);
      (void)raw_send(fd, body.data(), body.size());
      fds.push_back(fd);
    }
    const double rss_held = rss_mib(coordinator.pid());
    for (int fd : fds) {
      CHECK(closed_by_peer(fd, 10));
      ::close(fd);
    }
    CAPTURE(rss_start);
    CAPTURE(rss_held);
    CHECK(rss_held - rss_start < 64);
    CHECK(edge(counters(), "frames_refused_unauthenticated") >= edge(before, "frames_refused_unauthenticated") + 32);
    run_goes_on(s, port, coordinator, rss_before, "16MiB-frames");
  }
  // 3. 2000 idle sockets: past the per-address limit they are closed at once, the rest at the
  //    first-byte timeout (1 s: not one byte sent).
  {
    const auto before = counters();
    std::vector<int> fds;
    for (int i = 0; i < 2000; ++i) {
      const int fd = raw_connect(port);
      if (fd >= 0) fds.push_back(fd);
    }
    CHECK(fds.size() > 1900);
    for (int fd : fds) {
      CHECK(closed_by_peer(fd, 15));
      ::close(fd);
    }
    const auto after = counters();
    CHECK(edge(after, "refused_address_limit") >= edge(before, "refused_address_limit") + 1900);
    CHECK(edge(after, "first_byte_timeouts") > edge(before, "first_byte_timeouts"));
    run_goes_on(s, port, coordinator, rss_before, "idle-sockets");
  }
  // 4. An RPC client without the token calls every method it can name.
  {
    const auto before = counters();
    auto outsider = std::make_unique<PlaneClient>(port);
    auto& ws = outsider->io().waitScope;
    const std::string wrong_proof(32, '\0');
    {
      auto call = outsider->gateway().joinRequest();
      auto join = Outbox("outsider").wrap(messages::Join{"", "outsider", "nowhere", "cpu", 0, ""});
      REQUIRE(join.ok());
      call.initRequest().setJoin(bytes_of(*join));
      call.getRequest().setLearners(1);
      call.getRequest().setProof(bytes_of(wrong_proof));
      call.setSink(kj::heap<QuietSink>(false));
      (void)outsider->nonce();
      auto response = call.send().wait(ws);
      CHECK_FALSE(response.hasSession());
      CHECK(response.getAnswer().getConfigToml().size() == 0);  // not even the run's configuration
      auto welcome = unwrap(WireBytes(response.getAnswer().getWelcome().begin(), response.getAnswer().getWelcome().end()));
      REQUIRE(welcome.ok());
      CHECK_FALSE(std::get<messages::Welcome>(welcome->body).accepted);
    }
    {
      auto call = outsider->gateway().openAdminRequest();
      (void)outsider->nonce();
      call.setProof(bytes_of(wrong_proof));
      auto response = call.send().wait(ws);
      CHECK_FALSE(response.getAccepted());
      CHECK_FALSE(response.hasAdmin());
    }
    // A third wrong proof (a join without one) and the connection is cut.
    {
      auto call = outsider->gateway().joinRequest();
      call.initRequest().setLearners(1);
      call.setSink(kj::heap<QuietSink>(false));
      (void)outsider->nonce();
      auto response = call.send().wait(ws);
      CHECK_FALSE(response.hasSession());
    }
    CHECK(outsider->disconnected());
    outsider.reset();  // one kj event loop per thread
    // On a second connection: the methods of capabilities it was never handed, called on the one it
    // holds, are unimplemented there and reach nothing.
    {
      PlaneClient guesser(port);
      auto& gs = guesser.io().waitScope;
      auto bytes = Outbox("learner-0").wrap(messages::Join{"learner-0", "n", "s", "cpu", 0, ""});
      REQUIRE(bytes.ok());
      auto as_session = guesser.client->bootstrap().castAs<wire::Session>();
      auto join = as_session.joinRequest();
      join.setEnvelope(bytes_of(*bytes));
      CHECK_THROWS(join.send().wait(gs));
      CHECK_THROWS(as_session.pingRequest().send().wait(gs));
      auto as_admin = guesser.client->bootstrap().castAs<wire::Admin>();
      auto status = as_admin.requestRequest();
      status.setCommand(bytes_of(*Outbox("outsider").wrap(messages::AdminCommand{1, messages::AdminVerb::status})));
      CHECK_THROWS(status.send().wait(gs));
      auto as_sink = guesser.client->bootstrap().castAs<wire::NodeSink>();
      CHECK_THROWS(as_sink.stopRequest().send().wait(gs));
      CHECK_FALSE(guesser.disconnected());  // still only its Gateway: the handshake timeout will cut it
    }
    const auto after = counters();
    CHECK(edge(after, "proofs_refused") == edge(before, "proofs_refused") + 3);
    CHECK(after["joins_refused"]["wrong_token"].get<int64_t>() == before["joins_refused"]["wrong_token"].get<int64_t>() + 1);
    CHECK(after["joins_refused"]["missing_token"].get<int64_t>() == before["joins_refused"]["missing_token"].get<int64_t>() + 1);
    run_goes_on(s, port, coordinator, rss_before, "rpc-without-token");
  }
  coordinator.kill(SIGTERM);
  REQUIRE(coordinator.wait(60) == 0);
  CAPTURE(coordinator.all());
  auto summary = coordinator.summary();
  CHECK(summary["joins_accepted"].get<int>() == 6);  // node-a and the five node-b
  CHECK(summary["admin_sessions"]["refused"].get<int>() == 1);
  CHECK(summary["rejected_updates"].get<int64_t>() == 0);
}

TEST_CASE("a node holding the token may send only its own learners' messages, each kind by its own method") {
  Scratch s("authz-node");
  const int port = free_port();
  auto run = start_two_learner_run(s, port, {"train.max_seconds=25", "net.max_pending_mib=32"});
  Process& coordinator = *run.coordinator;
  Process& node = *run.node;
  const auto token = secret_of(s.token);

  // Joins as a one-learner node and gets a Session (slot 2: node-a holds 0 and 1).
  auto open_session = [&](PlaneClient& client, const std::string& name, bool stall) {
    auto response = send_join(client, token, name, messages::Join{"", name, "site-x", "cpu", 0, ""}, stall);
    REQUIRE(response.hasSession());
    return std::make_pair(response.getSession(), response.getAnswer().getFirstLearner());
  };
  PlaneClient forger(port);
  auto& ws = forger.io().waitScope;
  auto [session, first] = open_session(forger, "forger", false);
  REQUIRE(first == 2);
  const std::string own = learner_id(first);

  using Send = std::function<void(const WireBytes&)>;
  const std::vector<std::pair<std::string, Send>> methods = {
      {"join", [&](const WireBytes& b) { auto r = session.joinRequest(); r.setLearner(1); r.setEnvelope(bytes_of(b)); r.send().detach([](kj::Exception&&) {}); }},
      {"fragment_update", [&](const WireBytes& b) { auto r = session.updateRequest(); r.setLearner(1); r.setEnvelope(bytes_of(b)); r.send().detach([](kj::Exception&&) {}); }},
      {"fetch", [&](const WireBytes& b) { auto r = session.fetchRequest(); r.setLearner(1); r.setEnvelope(bytes_of(b)); r.send().detach([](kj::Exception&&) {}); }},
      {"heartbeat", [&](const WireBytes& b) { auto r = session.heartbeatRequest(); r.setLearner(1); r.setEnvelope(bytes_of(b)); r.send().detach([](kj::Exception&&) {}); }},
      {"slot_report", [&](const WireBytes& b) { auto r = session.slotReportRequest(); r.setLearner(1); r.setEnvelope(bytes_of(b)); r.send().detach([](kj::Exception&&) {}); }},
      {"leave", [&](const WireBytes& b) { auto r = session.leaveRequest(); r.setLearner(1); r.setToMonitor(true); r.setEnvelope(bytes_of(b)); r.send().detach([](kj::Exception&&) {}); }},
  };
  auto every_kind = [&](const std::string& id) {
    return std::vector<messages::Message>{
        messages::Join{id, "n", "s", "cpu", 0, ""},
        messages::Welcome{5, 4, true, ""},
        messages::FragmentUpdate{id, 0, 1, 1, 1, 1.0f, {}},
        messages::GlobalFragment{0, 5, {}, 0, 0},
        messages::Heartbeat{id, 1, 1.0, 0},
        messages::Persist{999, 0, messages::PersistKind::parameters, {}, ""},
        messages::Persisted{999, true, ""},
        messages::Leave{id, "finished", messages::LeaveCode::finished},
        messages::AdminRequest{1, "status", {}},
        messages::AdminReply{1, true, "", "{}"},
        messages::Fetch{id, {}},
        messages::Restore{1},
        messages::CommitEnd{999, "{}"},
        messages::AdminCommand{1, messages::AdminVerb::status},
        messages::SlotReport{id},
        messages::LearnerControl{1, messages::ControlAction::kill_node, ""},
    };
  };
  REQUIRE(every_kind(own).size() == std::variant_size_v<messages::Message>);
  // 1. Every kind but its own through each method, as its own learner: a Persist of version 999,
  //    a CommitEnd, admin requests, Welcomes and GlobalFragments as if from the coordinator's side.
  int64_t wrong_kind = 0;
  for (const auto& [kind, send] : methods) {
    for (const auto& message : every_kind(own)) {
      if (messages::message_name(message) == kind) continue;
      auto bytes = Outbox(own).wrap(message);
      REQUIRE(bytes.ok());
      send(*bytes);
      wrong_kind += 1;
    }
  }
  REQUIRE(wrong_kind == 6 * 15);
  // 2. Each method's own kind as a learner of node-a, as learner-02 (not canonical) and as learner-999.
  int64_t foreign = 0;
  for (const std::string& id : {learner_id(0), std::string("learner-02"), std::string("learner-999")}) {
    for (const auto& [kind, send] : methods) {
      for (const auto& message : every_kind(id)) {
        if (messages::message_name(message) != kind) continue;
        auto bytes = Outbox(id).wrap(message);
        REQUIRE(bytes.ok());
        send(*bytes);
        foreign += 1;
      }
    }
  }
  REQUIRE(foreign == 3 * 6);
  // 3. A message of a learner incarnation that arrives after the node said it ended (it waited in the
  //    node's emulated link): it goes on as the ended incarnation, never as a new one that the failure
  //    monitor would take for the slot alive again (and count a second death for).
  {
    auto beat = Outbox(own).wrap(messages::Heartbeat{own, 1, 1.0, 0});
    REQUIRE(beat.ok());
    auto r = session.heartbeatRequest();
    r.setLearner(7);
    r.setEnvelope(bytes_of(*beat));
    r.send().wait(ws);
    auto gone = session.learnerGoneRequest();
    gone.setLearner(7);
    gone.setAbnormal(true);
    gone.send().wait(ws);
    auto late = session.heartbeatRequest();
    late.setLearner(7);
    late.setEnvelope(bytes_of(*beat));
    late.send().wait(ws);
  }
  session.pingRequest().send().wait(ws);  // every call above has arrived (calls keep their order)
  {
    // Alive: node-a's two learners, not the forger's ended learner-2 (three with a revived slot).
    const size_t lines = count_of(coordinator.out(), "progress ");
    REQUIRE(wait_until([&] { return count_of(coordinator.out(), "progress ") >= lines + 3; }, 20));
    CHECK(coordinator.last_value("alive") <= 2);
  }
  // 3b. 30 000 joins of learners it does not hold, as fast as it can send them: past its budget
  //     (net.session_calls_per_s, burst and debt bound) the session is cut, long before the
  //     30 000th, and node-a's learners, which beat every 0.2 s on their own session, are never
  //     declared dead (below: none of their updates is refused as from an unknown learner).
  const int64_t foreign_before_flood = foreign;
  for (int i = 0; i < 30000; ++i) {
    const std::string id = learner_id(i == first ? 30000 : i);
    auto bytes = Outbox(id).wrap(messages::Join{id, "n", "s", "cpu", 0, ""});
    REQUIRE(bytes.ok());
    methods[0].second(*bytes);
  }
  bool cut = false;
  try {
    session.pingRequest().send().wait(ws);
  } catch (const kj::Exception&) {
    cut = true;
  }
  CHECK(cut);
  CHECK_MESSAGE(wait_until([&] { return coordinator.err().find("over its inbound budget: more calls than") != std::string::npos; }, 10),
                coordinator.all());

  // 4. A second token holder asks for the whole state 1000 times and never reads a byte of it:
  //    its session is cut when what waits for it passes net.max_pending_mib.
  PlaneClient hoarder(port, &forger.io());
  auto [hoard, hoard_first] = open_session(hoarder, "hoarder", true);
  REQUIRE(hoard_first >= 2);  // the forger's slot is free again once its session was cut
  for (int i = 0; i < 1000; ++i) {
    auto bytes = Outbox(learner_id(hoard_first)).wrap(messages::Fetch{learner_id(hoard_first), {}});
    REQUIRE(bytes.ok());
    auto r = hoard.fetchRequest();
    r.setLearner(1);
    r.setEnvelope(bytes_of(*bytes));
    r.send().detach([](kj::Exception&&) {});
  }
  CHECK_MESSAGE(wait_until([&] {
                  hoarder.io().waitScope.poll();
                  return coordinator.err().find("node 'hoarder' released") != std::string::npos;
                }, 60),
                coordinator.all());

  const int64_t after_attack = coordinator.last_value("version");
  CHECK_MESSAGE(wait_until([&] { return coordinator.last_value("version") >= after_attack + 3; }, 30), coordinator.all());
  CHECK(node.running());
  const int code = coordinator.wait(90);
  CAPTURE(coordinator.all());
  REQUIRE(code == 0);
  CHECK_MESSAGE(node.wait(30) == 0, node.all());
  auto summary = coordinator.summary();
  CHECK(refused(summary, "kind_not_allowed") == wrong_kind);
  // Every call before the flood was counted; of the flood, those read before the cut (at least the
  // burst), never all of it.
  CHECK(refused(summary, "foreign_learner") >= foreign_before_flood + 1000);
  CHECK(refused(summary, "foreign_learner") < foreign_before_flood + 30000);
  CHECK(edge(summary, "budget_cuts") == 1);
  CHECK(edge(summary, "pending_limit_hits") >= 1);
  // Nothing forged reached the syncer (an honest update may still be stale under load).
  CAPTURE(summary["rejected_by_reason"].dump());
  for (const char* reason : {"malformed", "unknown_learner", "unauthenticated", "non_finite", "wrong_shape", "duplicate"}) {
    CHECK(summary["rejected_by_reason"].value(reason, int64_t{-1}) == 0);
  }
  CHECK(summary["final_version"].get<uint64_t>() < 999);
  // Only the honest learners' work was merged, and only they became learners of the run.
  CHECK(summary["learners"].value(own, nlohmann::json::object()).value("contributions_merged", 0) == 0);
  CHECK(summary["learners"].value(learner_id(0), nlohmann::json::object()).value("contributions_merged", 0) > 0);
  CHECK(summary["learners"].size() <= 4);
  // The forged commit never reached the store.
  auto store = storage::CheckpointStore::open((s.dir / "run" / "store").string());
  REQUIRE_MESSAGE(store, store.error().reason);
  auto list = (*store)->list();
  REQUIRE(list);
  for (const auto& info : *list) CHECK(info.version < 999);
}

TEST_CASE("a plaintext listen on an address that is not loopback is refused at start, naming the flag") {
  Scratch s("authz-plaintext");
  const int port = free_port();
  auto args = coordinator_args(s, port, {});
  for (size_t i = 0; i + 1 < args.size(); ++i) {
    if (args[i] == "--listen") args[i + 1] = "0.0.0.0:" + std::to_string(port);
  }
  Process coordinator("coordinator", args, s.dir);
  CHECK(coordinator.wait(60) == 2);
  CHECK_MESSAGE(coordinator.err().find("--insecure-plaintext") != std::string::npos, coordinator.all());
  CHECK(coordinator.out().find("listening on") == std::string::npos);
}

TEST_CASE("a TLS coordinator refuses a plain-TCP node, a node whose certificate another CA signed, and one that joins under another name than its certificate's") {
  Scratch s("authz-tls");
  make_ca_and_certificate(s.dir, "");
  make_ca_and_certificate(s.dir, "other-");
  const int port = free_port();
  const std::vector<std::string> tls{"--config", tls_config(s.dir, "", "").string()};
  Process coordinator("coordinator", coordinator_args(s, port, {"train.max_seconds=0"}, tls), s.dir);
  await_listening(coordinator);

  // Each gives up after 4 s of failed attempts: its TLS (or plain) handshake never completes a join.
  const std::vector<std::string> give_up{"--give-up-after", "4"};
  auto plain_args = node_args(s, port, "plain-node", give_up);
  Process plain("plain-node", plain_args, s.dir);
  auto other = give_up;
  other.push_back("--config");
  other.push_back(tls_config(s.dir, "other-", "other-").string());
  Process foreign("other-ca-node", node_args(s, port, "other-ca-node", other), s.dir);
  const int plain_code = plain.wait(60);
  const int foreign_code = foreign.wait(60);
  CHECK_MESSAGE(plain_code != 0, plain.all());
  CHECK_MESSAGE(plain.err().find("gave up after") != std::string::npos, plain.all());
  CHECK_MESSAGE(foreign_code != 0, foreign.all());
  CHECK_MESSAGE(foreign.err().find("gave up after") != std::string::npos, foreign.all());
  CHECK(coordinator.running());
  // A TLS client that trusts the run's CA but shows no certificate of its own is cut.
  {
    kj::AsyncIoContext io = kj::setupAsyncIo();
    auto ca = read_file(s.dir / "ca" / "ca.pem");
    kj::TlsCertificate trusted(kj::StringPtr(ca.c_str()));
    kj::TlsContext::Options options;
    options.useSystemTrustStore = false;
    options.trustedCertificates = kj::arrayPtr(&trusted, 1);
    kj::TlsContext context(kj::mv(options));
    bool refused_client = false;
    try {
      auto address = io.provider->getNetwork().parseAddress("127.0.0.1", static_cast<uint16_t>(port)).wait(io.waitScope);
      auto stream = context.wrapClient(address->connect().wait(io.waitScope), "127.0.0.1").wait(io.waitScope);
      char byte = 0;
      refused_client = stream->tryRead(&byte, 1, 1).wait(io.waitScope) == 0;
    } catch (kj::Exception&) {
      refused_client = true;
    }
    CHECK(refused_client);
  }
  // A certificate of the run's CA is a node's identity: one named `node` cannot join as node-a (the
  // node stops, exit 3, naming the certificate's name) ...
  Process impostor("node-a-as-node", node_args(s, port, "node-a", tls), s.dir);
  CHECK_MESSAGE(impostor.wait(40) == 3, impostor.all() << coordinator.all());
  CHECK_MESSAGE(impostor.err().find("under TLS a node joins under its certificate's name ('node')") != std::string::npos,
                impostor.all());
  // ... node-a's own certificate can, and a node given no --name takes its certificate's.
  issue_certificate(s.dir, "", "node-a");
  issue_certificate(s.dir, "", "node-b");
  Process good("node-a", node_args(s, port, "node-a", {"--config", tls_config(s.dir, "", "", "node-a").string()}), s.dir);
  CHECK_MESSAGE(wait_until([&] { return count_of(coordinator.err(), "admitted node 'node-a'") == 1; }, 40),
                coordinator.all() << good.all());
  auto unnamed = node_args(s, port, "-", {"--config", tls_config(s.dir, "", "", "node-b").string()});
  unnamed.erase(std::find(unnamed.begin(), unnamed.end(), "--name"), std::find(unnamed.begin(), unnamed.end(), "--name") + 2);
  Process b("node-b", unnamed, s.dir);
  CHECK_MESSAGE(wait_until([&] { return count_of(coordinator.err(), "admitted node 'node-b'") == 1; }, 40),
                coordinator.all() << b.all());
  coordinator.kill(SIGTERM);
  REQUIRE(coordinator.wait(60) == 0);
  CAPTURE(coordinator.all());
  auto summary = coordinator.summary();
  CHECK(summary["joins_accepted"].get<int>() == 2);
  CHECK(summary["joins_refused"]["identity"].get<int>() == 1);
  CHECK(edge(summary, "tls_handshakes_failed") >= 3);  // the plain node, the other CA's, the certless client
  CHECK(coordinator.err().find("admitted node 'plain-node'") == std::string::npos);
  CHECK(coordinator.err().find("admitted node 'other-ca-node'") == std::string::npos);
}

TEST_CASE("the console: an admin session with the admin token answers status, learners, nodes and versions") {
  Scratch s("authz-console");
  const auto admin_token = s.dir / "admin-token";
  std::ofstream(admin_token) << "admin-horse-battery-staple-0123456789\n";
  chmod(admin_token.c_str(), 0600);
  const int port = free_port();
  // A 6 s restart backoff: a killed learner stays `restarting` longer than a console poll takes under load.
  auto run = start_two_learner_run(s, port, {"train.max_seconds=0", "runtime.backoff_initial_s=6",
                                                        "runtime.backoff_max_s=6"},
                                   {"--admin-token-file", admin_token.string()});
  Process& coordinator = *run.coordinator;
  Process& node = *run.node;
  Process node_b("node-b", node_args(s, port, "node-b"), s.dir);  // two nodes, every slot taken

  const std::string target = "127.0.0.1:" + std::to_string(port);
  int opened = 0;  // admin sessions the gateway accepted
  auto console = [&](const std::string& command, const fs::path& token) {
    if (token == admin_token && command != "launch-missiles") opened += 1;
    static int invocation = 0;  // each its own output files
    Process p("console-" + std::to_string(++invocation), {"console", target, "-c", command, "--json", "--admin-token-file", token.string()},
              s.dir);
    const int code = p.wait(30);
    return std::make_tuple(code, p.out(), p.err());
  };
  auto answer = [&](const std::string& command) {
    auto [code, out, err] = console(command, admin_token);
    INFO(command << ": " << out << err);
    REQUIRE(code == 0);
    auto json = nlohmann::json::parse(out.substr(0, out.find('\n')), nullptr, false);
    REQUIRE(json.is_object());
    return json;
  };
  nlohmann::json status;
  REQUIRE_MESSAGE(wait_until([&] { return (status = answer("status"))["learners_alive"] == 4; }, 60),
                  status.dump() << node_b.all());
  CHECK(status["mode"] == "decoupled");
  CHECK(status["committed_version"].get<uint64_t>() >= 3);
  CHECK(status["bytes_up"].get<int64_t>() > 0);
  CHECK(status["bytes_down"].get<int64_t>() > 0);
  CHECK(status["uptime_s"].get<double>() > 0);
  CHECK((status["heldout_loss"].is_null() || status["heldout_loss"].get<double>() > 0));
  CHECK(status["heldout_bits_per_byte"].is_null() == status["heldout_loss"].is_null());

  // A learner counts as alive from its first heartbeat, which comes before its first step (it joins and
  // fetches first): wait until each of the four has stepped before reading their rows.
  nlohmann::json learners;
  REQUIRE_MESSAGE(wait_until([&] {
                    learners = answer("learners")["learners"];
                    if (learners.size() != 4) return false;
                    for (const auto& l : learners) {
                      if (l["step"].get<int64_t>() <= 0 || l["tokens_per_s"].get<double>() <= 0) return false;
                    }
                    return true;
                  }, 60),
                  learners.dump());
  for (const auto& l : learners) {
    CAPTURE(l.dump());
    CHECK(l["node"] == (l["id"] == "learner-0" || l["id"] == "learner-1" ? "node-a" : "node-b"));
    CHECK(l["site"] == "local");
    CHECK(l["state"] == "alive");
    CHECK(l["step"].get<int64_t>() > 0);
    CHECK(l["joins"].get<int>() == 1);
    CHECK(l["restarts"].get<int>() == 0);
    CHECK(l["heartbeat_age_s"].get<double>() >= 0);
    CHECK(l["heartbeat_age_s"].get<double>() < 5);   // it beats every step
    CHECK(l["tokens_per_s"].get<double>() > 0);
    if (l["contributions_merged"].get<int>() > 0) {
      CHECK(l["staleness"].get<int64_t>() >= 0);
    } else {
      CHECK(l["staleness"].is_null());  // not measured before its first merge
    }
  }
  auto nodes = answer("nodes");
  REQUIRE(nodes["nodes"].size() == 2);
  std::set<std::string> node_names;
  for (const auto& n : nodes["nodes"]) {
    node_names.insert(n["node"].get<std::string>());
    CHECK(n["learners"] == 2);
  }
  CHECK(node_names == std::set<std::string>{"node-a", "node-b"});
  CHECK(nodes["learner_slots"] == 4);
  auto versions = answer("versions");
  REQUIRE(versions["versions"].size() >= 3);
  CHECK(versions["latest"].get<uint64_t>() >= 3);
  // Listed first, then the latest asked for: a commit may land in between.
  CHECK(versions["versions"].back()["version"].get<uint64_t>() <= versions["latest"].get<uint64_t>());

  // Mutating commands, each audited before it acts: pin and unpin a version, a pin of a version that
  // does not exist (refused by the store, audited as failed), and a kill of the syncer, which its
  // supervisor restarts from RocksDB.
  const uint64_t v = versions["versions"].back()["version"].get<uint64_t>();
  CHECK(answer("pin " + std::to_string(v))["pinned"] == true);
  auto pinned = [&](uint64_t version) {
    const auto listed = answer("versions");
    for (const auto& e : listed["versions"]) {
      if (e["version"].get<uint64_t>() == version) return e["pinned"].get<bool>();
    }
    return false;
  };
  CHECK(pinned(v));
  CHECK(answer("unpin " + std::to_string(v))["pinned"] == false);
  CHECK_FALSE(pinned(v));
  {
    auto [code, out, err] = console("pin 999999", admin_token);
    CHECK(code == 1);
    CHECK(err.find("pin") != std::string::npos);
  }
  auto killed = answer("kill syncer");
  const uint64_t at_kill = killed["version_at_kill"].get<uint64_t>();
  CHECK(at_kill >= v);
  CHECK_MESSAGE(wait_until([&] { return coordinator.err().find("syncer exited (exit_reason(kill))") != std::string::npos; }, 10),
                coordinator.all());
  nlohmann::json after_kill;
  CHECK_MESSAGE(wait_until([&] {
                  after_kill = answer("status");
                  return after_kill["committed_version"].get<uint64_t>() > at_kill;
                }, 30),
                after_kill.dump() << coordinator.err().substr(coordinator.err().size() > 3000 ? coordinator.err().size() - 3000 : 0));
  auto audit = answer("audit 50")["audit"];
  std::vector<std::string> trail;
  for (const auto& e : audit) {
    const auto& entry = e["entry"];
    CHECK(entry["peer"].get<std::string>().rfind("console@", 0) == 0);
    std::string line = entry["command"]["verb"].get<std::string>() + " " + entry["phase"].get<std::string>();
    if (entry.contains("ok")) line += entry["ok"].get<bool>() ? " ok" : " failed";
    trail.push_back(line);
  }
  const std::vector<std::string> expected = {"pin requested", "pin done ok", "unpin requested", "unpin done ok",
                                             "pin requested", "pin done failed", "kill_syncer requested",
                                             "kill_syncer done ok"};
  CHECK(trail == expected);
  // Amid a running run: every commit after the commands is an event of the same log (ten and more
  // here, beyond the eight per entry asked for that a window over the newest events would read);
  // `audit 1` still answers the newest admin entry, however many other events came after it.
  const uint64_t after_commands = answer("status")["committed_version"].get<uint64_t>();
  REQUIRE(wait_until([&] { return answer("status")["committed_version"].get<uint64_t>() >= after_commands + 10; }, 60));
  auto newest = answer("audit 1")["audit"];
  REQUIRE(newest.size() == 1);
  CHECK(newest[0]["entry"]["command"]["verb"] == "kill_syncer");
  CHECK(newest[0]["entry"]["phase"] == "done");

  // The prompt reads commands from standard input too (libedit; it shows no prompt off a terminal).
  {
    const auto out = s.dir / "prompt.out";
    const std::string command = "printf 'help\\nnodes\\nbogus\\nquit\\n' | " ARCHIPELAGO_BINARY " console " + target +
                                " --admin-token-file " + admin_token.string() + " > " + out.string() + " 2>&1";
    opened += 1;
    CHECK(std::system(command.c_str()) == 0);
    const std::string text = read_file(out);
    CAPTURE(text);
    CHECK(text.find("connected to " + target) != std::string::npos);
    CHECK(text.find("kill learner ID | node NAME | syncer") != std::string::npos);  // help lists the commands
    // nodes, as a person reads it: `key: value` lines and a table, not JSON
    const auto slots = text.find("learner_slots:");
    REQUIRE(slots != std::string::npos);
    CHECK(text.compare(text.find_first_not_of(' ', slots + 14), 2, "4\n") == 0);
    CHECK(text.find("\"learner_slots\"") == std::string::npos);
    CHECK(text.find("unknown command 'bogus'") != std::string::npos);
  }

  // Refused: the join token is not the admin token; an unknown command never reaches the coordinator.
  auto [wrong_code, wrong_out, wrong_err] = console("status", s.token);
  CHECK_MESSAGE(wrong_code == 3, wrong_err);
  CHECK(wrong_err.find("unauthenticated") != std::string::npos);
  CHECK(wrong_err.find("correct-horse") == std::string::npos);  // never the secret
  auto [unknown_code, unknown_out, unknown_err] = console("launch-missiles", admin_token);
  CHECK(unknown_code == 2);
  CHECK(unknown_err.find("unknown command 'launch-missiles'") != std::string::npos);

  // set: a runtime-tunable key changes the syncer's value; a bad value or another key is refused.
  CHECK(status["outer_lr"].get<double>() == doctest::Approx(0.7));
  auto set = answer("set outer.lr 0.5");
  CHECK(set["key"] == "outer.lr");
  CHECK(set["old"] == "0.7");
  CHECK(set["new"] == "0.5");
  CHECK(answer("status")["outer_lr"].get<double>() == doctest::Approx(0.5));
  {
    auto [code, out, err] = console("set outer.lr -1", admin_token);
    CHECK(code == 1);
    CHECK(err.find("outer.lr must be in (0, 10], not -1") != std::string::npos);
    auto [other_code, other_out, other_err] = console("set model.preset big", admin_token);
    CHECK(other_code == 1);
    CHECK(other_err.find("'model.preset' is not runtime-tunable") != std::string::npos);
  }
  CHECK(answer("status")["outer_lr"].get<double>() == doctest::Approx(0.5));  // the refusals changed nothing
  CHECK(answer("set outer.quorum 2")["new"] == "2");
  CHECK(answer("status")["quorum"].get<int>() == 2);

  CHECK(answer("set outer.codec int8")["old"] == "int4_uniform");  // the learners switch: metrics_test.cpp
  auto codec = answer("set outer.downlink_codec int8");
  CHECK(codec["old"] == "int4_uniform");  // config/default.toml
  CHECK(codec["new"] == "int8");
  CHECK(answer("set outer.grace_max_s 3")["new"] == "3");
  {
    auto [code, out, err] = console("set syncer.grace_max_s 4", admin_token);  // its name before
    CHECK(code == 1);
    CHECK(err.find("'syncer.grace_max_s' is called 'outer.grace_max_s'") != std::string::npos);
  }

  // The learners: kill one (as abrupt as a crash), it is restarting, then alive again, one restart more.
  auto state_of = [&](const std::string& id) {
    const auto rows = answer("learners")["learners"];  // named: a range-for over a temporary's member dangles
    for (const auto& l : rows) {
      if (l["id"] == id) return l;
    }
    return nlohmann::json::object();
  };
  CHECK(answer("kill learner learner-1")["sent"][0]["node"] == "node-a");
  std::set<std::string> seen;
  nlohmann::json victim;
  CHECK_MESSAGE(wait_until([&] {
                  victim = state_of("learner-1");
                  seen.insert(victim.value("state", ""));
                  return seen.count("restarting") && victim.value("state", "") == "alive";
                }, 60),
                victim.dump());
  CHECK(victim["restarts"].get<int>() == 1);
  CHECK(victim["deaths"].get<int>() == 1);  // a kill is one death, whatever else the monitor saw
  CHECK(victim["deaths_by_cause"]["exit"].get<int>() == 1);
  CHECK(victim["deaths_by_cause"]["silence"].get<int>() == 0);
  CHECK(state_of("learner-0")["state"] == "alive");  // nobody else was touched
  {
    auto [code, out, err] = console("kill learner learner-9", admin_token);
    CHECK(code == 1);
    CHECK(err.find("not a learner of this run") != std::string::npos);
  }

  // pause stops a learner's steps (it keeps beating: paused, not dead), resume restarts them.
  CHECK(answer("pause learner-0")["sent"].size() == 1);
  nlohmann::json paused;
  CHECK_MESSAGE(wait_until([&] { return (paused = state_of("learner-0")).value("state", "") == "paused"; }, 10),
                paused.dump());
  const int64_t paused_at = paused["step"].get<int64_t>();
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  auto still = state_of("learner-0");
  CHECK(still["state"] == "paused");
  CHECK(still["step"].get<int64_t>() == paused_at);
  CHECK(still["heartbeat_age_s"].get<double>() < 2);
  CHECK(answer("resume")["sent"].size() == 4);  // every learner, on both nodes
  CHECK(wait_until([&] { return state_of("learner-0").value("step", int64_t{0}) > paused_at + 2; }, 20));

  // checkpoint commits what is pending now; version show reads one committed version back.
  auto checkpoint = answer("checkpoint");
  const uint64_t checkpointed = checkpoint["version"].get<uint64_t>();
  CHECK(checkpointed > at_kill);
  CHECK(wait_until([&] { return answer("status")["committed_version"].get<uint64_t>() >= checkpointed; }, 20));
  auto shown = answer("version show " + std::to_string(checkpointed));
  CHECK(shown["version"] == checkpointed);
  CHECK(shown["verified"] == true);
  CHECK(shown["blobs"].size() >= 4);
  CHECK(shown["manifest"].is_object());
  {
    auto [code, out, err] = console("version show 999999", admin_token);
    CHECK(code == 1);
    CHECK(err.find("no committed version 999999") != std::string::npos);
  }
  // events: the death and the rejoin, and the operator's commands.
  auto events = answer("events 200")["events"];
  std::set<std::string> kinds;
  for (const auto& e : events) {
    if (e["subject"] == "learner-1" || e["kind"] == "command") kinds.insert(e["kind"].get<std::string>());
  }
  CHECK_MESSAGE((kinds.count("death") && kinds.count("rejoin") && kinds.count("command")), events.dump());
  // status carries the goodput ledger: goodput and its badput parts add up to one.
  auto ledger = answer("status")["goodput"];
  double shares = ledger["goodput"].get<double>();
  for (const auto& [part, share] : ledger["badput"].items()) shares += share.get<double>();
  CHECK(std::abs(shares - 1) < 1e-9);
  CHECK(ledger["goodput"].get<double>() > 0);
  CHECK(ledger["badput"]["idle"].get<double>() > 0);  // node-b's slots before it joined
  CHECK(ledger["badput"]["restarting"].get<double>() > 0);
  CHECK(ledger["badput"]["paused"].get<double>() > 0);

  // drain: the run ends cleanly, as if its budget were spent.
  CHECK(answer("drain")["draining"] == true);
  REQUIRE(coordinator.wait(60) == 0);
  CAPTURE(coordinator.all());
  CHECK_MESSAGE(node.wait(30) == 0, node.all());
  CHECK_MESSAGE(node_b.wait(30) == 0, node_b.all());
  auto summary = coordinator.summary();
  CHECK(summary["stopped_by"] == "drain");
  CHECK(summary["goodput"].get<double>() > 0);
  CHECK(summary["badput"]["restarting"].get<double>() > 0);
  CHECK(summary["admin_sessions"]["accepted"].get<int>() == opened);
  CHECK(summary["admin_sessions"]["refused"].get<int>() == 1);
  CHECK(coordinator.err().find("admin-horse") == std::string::npos);
}

TEST_CASE("a coordinator without an admin token refuses every admin session") {
  Scratch s("authz-no-admin");
  const int port = free_port();
  Process coordinator("coordinator", coordinator_args(s, port, {"train.max_seconds=0"}), s.dir);
  await_listening(coordinator);
  Process console("console", {"console", "127.0.0.1:" + std::to_string(port), "-c", "status", "--admin-token-file",
                              s.token.string()},
                  s.dir);
  CHECK(console.wait(30) == 3);
  CHECK(console.err().find("no admin token") != std::string::npos);
  coordinator.kill(SIGTERM);
  REQUIRE(coordinator.wait(60) == 0);
  CHECK(coordinator.summary()["admin_sessions"]["refused"].get<int>() == 1);
}

TEST_CASE("kill node: the console SIGKILLs the node that runs a learner and when started again its learners rejoin") {
  Scratch s("authz-kill-node");
  const auto admin_token = s.dir / "admin-token";
  std::ofstream(admin_token) << "admin-horse-battery-staple-0123456789\n";
  chmod(admin_token.c_str(), 0600);
  const int port = free_port();
  auto run = start_two_learner_run(s, port, {"train.max_seconds=0"}, {"--admin-token-file", admin_token.string()});
  const std::string target = "127.0.0.1:" + std::to_string(port);
  auto answer = [&](const std::string& command) { return console_answer(s.dir, target, command, admin_token); };
  {
    auto unknown = console_command(s.dir, target, "kill node node-z", admin_token);
    CHECK(unknown.code == 1);
    CHECK(unknown.err.find("node-z") != std::string::npos);
  }
  CHECK(answer("kill node node-a")["sent"][0]["node"] == "node-a");
  CHECK(run.node->wait(30) == 128 + SIGKILL);  // as abrupt as a crash: no handler ran
  CHECK(run.node->err().find("killed by an operator (kill node): SIGKILL") != std::string::npos);
  CHECK_MESSAGE(wait_until([&] { return answer("nodes")["nodes"].empty(); }, 30), run.coordinator->all());
  const uint64_t version_at_kill = answer("status")["committed_version"].get<uint64_t>();

  // Started again, the node gets its slots back and its learners contribute to new versions.
  Process again("node-a-again", node_args(s, port, "node-a"), s.dir);
  nlohmann::json status;
  CHECK_MESSAGE(wait_until([&] {
                  status = answer("status");
                  return status["learners_alive"] == 2 && status["committed_version"].get<uint64_t>() > version_at_kill + 2;
                }, 90),
                status.dump() << again.all());
  auto audit = answer("audit 10")["audit"];
  bool audited = false;
  for (const auto& e : audit) audited |= e["entry"]["command"].value("verb", "") == "kill_node";
  CHECK(audited);

  CHECK(again.running());
  run.coordinator->kill(SIGTERM);
  REQUIRE(run.coordinator->wait(60) == 0);
  CHECK_MESSAGE(again.wait(30) == 0, again.all());
}

namespace {

// An impostor's Gateway: a nonce, then a refusal of whatever join it is sent.
class ImpostorGateway final : public wire::Gateway::Server {
 public:
  kj::Promise<void> challenge(ChallengeContext context) override {
    context.getResults().setNonce(bytes_of(std::string(32, 'n')));
    return kj::READY_NOW;
  }
  kj::Promise<void> join(JoinContext context) override {
    messages::Welcome refusal{0, 0, false, "unauthenticated: impostor"};
    refusal.refusal = messages::JoinRefusal::unauthenticated;
    auto bytes = Outbox("impostor").wrap(refusal);
    auto answer = context.getResults().initAnswer();
    answer.setWelcome(bytes_of(*bytes));
    answer.setFirstLearner(-1);
    // And it tries the NodeSink it was handed: a stop, before it answers.
    return context.getParams().getSink().stopRequest().send().ignoreResult();
  }
  kj::Promise<void> openAdmin(OpenAdminContext context) override { return kj::READY_NOW; }
};

// Every byte read from the node, then handed to the RPC server.
class RecordingStream final : public kj::AsyncIoStream {
 public:
  RecordingStream(kj::Own<kj::AsyncIoStream> inner, std::string& recorded) : inner_(kj::mv(inner)), recorded_(recorded) {}
  kj::Promise<size_t> tryRead(void* buffer, size_t min_bytes, size_t max_bytes) override {
    return inner_->tryRead(buffer, min_bytes, max_bytes).then([this, buffer](size_t n) {
      recorded_.append(static_cast<const char*>(buffer), n);
      return n;
    });
  }
  kj::Promise<void> write(const void* buffer, size_t size) override { return inner_->write(buffer, size); }
  kj::Promise<void> write(kj::ArrayPtr<const kj::ArrayPtr<const kj::byte>> pieces) override { return inner_->write(pieces); }
  kj::Promise<void> whenWriteDisconnected() override { return inner_->whenWriteDisconnected(); }
  void shutdownWrite() override { inner_->shutdownWrite(); }

 private:
  kj::Own<kj::AsyncIoStream> inner_;
  std::string& recorded_;
};

}  // namespace

TEST_CASE("an impostor coordinator records every byte a node sends it, never sees the token, and its stop is not obeyed") {
  Scratch s("authz-impostor");
  kj::AsyncIoContext io = kj::setupAsyncIo();
  auto listener = io.provider->getNetwork().parseAddress("127.0.0.1", 0).wait(io.waitScope)->listen();
  const int port = static_cast<int>(listener->getPort());
  std::string recorded;
  kj::Own<RecordingStream> stream;
  kj::Own<capnp::TwoPartyVatNetwork> network;
  kj::Own<capnp::RpcSystem<capnp::rpc::twoparty::VatId>> rpc;
  auto serving = listener->accept().then([&](kj::Own<kj::AsyncIoStream> accepted) {
    stream = kj::heap<RecordingStream>(kj::mv(accepted), recorded);
    network = kj::heap<capnp::TwoPartyVatNetwork>(*stream, capnp::rpc::twoparty::Side::SERVER);
    rpc = kj::heap<capnp::RpcSystem<capnp::rpc::twoparty::VatId>>(
        capnp::makeRpcServer(*network, wire::Gateway::Client(kj::heap<ImpostorGateway>())));
  }).eagerlyEvaluate(nullptr);
  Process node("node-a", node_args(s, port, "node-a"), s.dir);
  auto& timer = io.provider->getTimer();
  CHECK(wait_until([&] {
    timer.afterDelay(10 * kj::MILLISECONDS).wait(io.waitScope);
    return !node.running();
  }, 60));
  CHECK_MESSAGE(node.wait(10) == 3, node.all());  // refused: it never joined
  const std::string token = read_file(s.token).substr(0, read_file(s.token).find('\n'));
  REQUIRE(token.size() >= 16);
  CHECK(recorded.find("node-a") != std::string::npos);  // the recording holds the join
  CHECK(recorded.find(token) == std::string::npos);
  CHECK(recorded.find(token.substr(0, 8)) == std::string::npos);
  CHECK(node.err().find("refused this node: unauthenticated: impostor") != std::string::npos);
  CHECK(node.err().find("the coordinator ended the run") == std::string::npos);
}

TEST_CASE("names are data: a Join whose node, site or device name breaks the rule is refused with its reason, join/leave cycles keep memory flat") {
  Scratch s("authz-names");
  const auto admin = admin_token(s);
  const int port = free_port();
  auto run = start_two_learner_run(s, port, {"train.max_seconds=0"}, {"--admin-token-file", admin.string()});
  Process& coordinator = *run.coordinator;
  const auto token = secret_of(s.token);
  const std::string target = "127.0.0.1:" + std::to_string(port);
  // One join on a connection of its own; the welcome it gets. The connection closes on return: a
  // session it opened ends with it.
  auto join_as = [&](const std::string& node, const std::string& site, const std::string& device) {
    PlaneClient client(port);
    auto response = send_join(client, token, "peer", messages::Join{"", node, site, device, 0, ""}, false);
    auto welcome = unwrap(WireBytes(response.getAnswer().getWelcome().begin(), response.getAnswer().getWelcome().end()));
    REQUIRE(welcome.ok());
    const auto* w = std::get_if<messages::Welcome>(&welcome->body);
    REQUIRE_MESSAGE(w, "the answer to a join is a " << messages::message_name(welcome->body));
    CHECK(response.hasSession() == w->accepted);
    return *w;
  };
  const auto before = console_answer(s.dir, target, "nodes", admin);
  const std::string esc = "node\x1b[2J", nul = std::string("node\0x", 6);
  const std::vector<std::tuple<std::string, std::string, std::string, std::string>> bad = {
      {std::string(65, 'n'), "site-x", "cpu", "the node name"},
      {"node\nadmitted node 'x'", "site-x", "cpu", "the node name"},
      {esc, "site-x", "cpu", "the node name"},
      {nul, "site-x", "cpu", "the node name"},
      {"", "site-x", "cpu", "the node name"},
      {"node-x", "site x", "cpu", "the site name"},
      {"node-x", "", "cpu", "the site name"},
      {"node-x", "site-x", "cuda:0\r", "the device name"},
  };
  for (const auto& [node, site, device, field] : bad) {
    CAPTURE(field);
    const auto w = join_as(node, site, device);
    CHECK_FALSE(w.accepted);
    CHECK(w.refusal == messages::JoinRefusal::bad_request);
    CHECK(w.reason.find(field) != std::string::npos);
    CHECK(w.reason.find('\x1b') == std::string::npos);  // the name itself never comes back
  }
  const auto after = console_answer(s.dir, target, "nodes", admin);
  CHECK(after["joins_refused"]["bad_name"].get<int64_t>() ==
        before["joins_refused"]["bad_name"].get<int64_t>() + static_cast<int64_t>(bad.size()));
  CHECK(after["joins_accepted"] == before["joins_accepted"]);
  // The log holds no byte of a refused name: no escape, no forged line; one warning per reason.
  CHECK(coordinator.err().find('\x1b') == std::string::npos);
  CHECK(count_of(coordinator.err(), "admitted node 'x'") == 0);
  CHECK(count_of(coordinator.err(), "refused a node: the node name") == 1);
  // A device with a colon is a device ("cuda:1"); a good name is admitted.
  CHECK(join_as("node-x", "site-x", "cuda:1").accepted);

  // Join/leave cycles under names never seen before: what the coordinator keeps per node is bounded,
  // so its memory comes back to where it was (after a warm-up that sizes its pools). node-a leaves
  // first: a run that commits versions grows its store's memtables, whatever joins.
  run.node->kill(SIGKILL);
  REQUIRE_MESSAGE(wait_until([&] { return count_of(coordinator.err(), "node 'node-a' released") == 1; }, 15), coordinator.all());
  auto cycles = [&](int from, int count) {
    for (int i = from; i < from + count; ++i) {
      // The slot of the session before comes free when the coordinator sees its connection close.
      messages::Welcome w;
      REQUIRE(wait_until([&] {
        w = join_as("cycle-" + std::to_string(i), "site-" + std::to_string(i % 7), "cpu");
        return w.accepted || w.refusal != messages::JoinRefusal::no_free_slots;
      }, 10));
      REQUIRE_MESSAGE(w.accepted, w.reason);
    }
  };
  cycles(0, 500);
  const double rss_warm = rss_mib(coordinator.pid());
  const auto started = std::chrono::steady_clock::now();
  const int kCycles = 10000;
  cycles(500, kCycles);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  const double rss_after = rss_mib(coordinator.pid());
  MESSAGE(kCycles << " join/leave cycles in " << seconds << " s; coordinator RSS " << rss_warm << " -> " << rss_after << " MiB");
  CHECK(rss_after - rss_warm < 10);
  CHECK(console_answer(s.dir, target, "nodes", admin)["joins_accepted"].get<int64_t>() >=
        after["joins_accepted"].get<int64_t>() + 1 + 500 + kCycles);
  coordinator.kill(SIGTERM);
  REQUIRE(coordinator.wait(60) == 0);
}

namespace {

// A NodeSink that keeps, per fragment, the element count and the version of the latest
// GlobalFragment delivered: what any node learns of the model's shape from its first fetch.
class KeepingSink final : public wire::NodeSink::Server {
 public:
  explicit KeepingSink(std::map<uint32_t, std::pair<uint64_t, uint64_t>>* fragments) : fragments_(fragments) {}
  kj::Promise<void> deliver(DeliverContext context) override {
    auto data = context.getParams().getEnvelope();
    auto envelope = unwrap(WireBytes(data.begin(), data.end()));
    if (envelope) {
      if (auto* g = std::get_if<messages::GlobalFragment>(&envelope->body); g && g->chunk.chunk_index == 0) {
        auto& kept = (*fragments_)[g->fragment_id];
        kept = {g->chunk.element_count, std::max(kept.second, g->version)};
      }
    }
    return kj::READY_NOW;
  }
  kj::Promise<void> control(ControlContext) override { return kj::READY_NOW; }
  kj::Promise<void> stop(StopContext) override { return kj::READY_NOW; }

 private:
  std::map<uint32_t, std::pair<uint64_t, uint64_t>>* fragments_;
};

// `key=<number>` of the last stdout line that has it, as a double (NaN when none or a dash).
double last_number(const Process& p, const std::string& key) {
  const auto text = p.out();
  const auto at = text.rfind(" " + key + "=");
  if (at == std::string::npos) return std::nan("");
  const char* start = text.c_str() + at + key.size() + 2;
  char* end = nullptr;
  const double v = std::strtod(start, &end);
  return end == start ? std::nan("") : v;
}

}  // namespace

TEST_CASE("poison: a token holder's int8 update of 1e18, as the run's first and again after honest rounds, leaves the model finite and the run committing") {
  Scratch s("authz-poison");
  const int port = free_port();
  Process coordinator("coordinator", coordinator_args(s, port, {"train.max_seconds=35"}), s.dir);
  await_listening(coordinator);
  const auto token = secret_of(s.token);

  // The attacker: a node of one learner, whose sink keeps what the store tells it of the fragments.
  std::map<uint32_t, std::pair<uint64_t, uint64_t>> fragments;
  PlaneClient attacker(port);
  auto& ws = attacker.io().waitScope;
  auto joined = join_with_sink(attacker, token, "attacker", messages::Join{"", "attacker", "site-x", "cpu", 0, ""}, 1, -1,
                               kj::heap<KeepingSink>(&fragments));
  REQUIRE(joined.hasSession());
  auto session = joined.getSession();
  const std::string own = learner_id(joined.getAnswer().getFirstLearner());
  Outbox out(own);
  auto envelope = [&](const messages::Message& m) {
    auto bytes = out.wrap(m);
    REQUIRE(bytes.ok());
    return *bytes;
  };
  {
    auto r = session.joinRequest();
    r.setLearner(1);
    r.setEnvelope(bytes_of(envelope(messages::Join{own, "attacker", "site-x", "cpu", 0, remote::kSessionJoinToken})));
    r.send().wait(ws);
    auto f = session.fetchRequest();
    f.setLearner(1);
    f.setEnvelope(bytes_of(envelope(messages::Fetch{own, {}})));
    f.send().wait(ws);
  }
  REQUIRE_MESSAGE(wait_until([&] { ws.poll(); return fragments.count(0) > 0; }, 20), coordinator.all());

  // Fragment 0's update of int8 values 1e18 (finite: every decode check passes), after a heartbeat.
  auto poison = [&](uint64_t round) {
    ws.poll();
    const auto [numel, version] = fragments.at(0);
    auto beat = session.heartbeatRequest();
    beat.setLearner(1);
    beat.setEnvelope(bytes_of(envelope(messages::Heartbeat{own, 10 * round + 10, 1.0, 0})));
    beat.send().wait(ws);
    std::vector<float> values(numel, 1e18f);
    std::vector<uint8_t> encoded;
    REQUIRE(messages::encode_tensor(messages::Codec::int8, values.data(), values.size(), encoded).ok());
    auto chunks = out.wrap_tensor(messages::Codec::int8, numel, encoded, [&](messages::TensorChunk chunk) {
      messages::FragmentUpdate u{own, 0, version, 10, 5120, 2.0f, std::move(chunk)};
      u.round = round;
      u.from_step = 10 * round;
      u.to_step = 10 * round + 10;
      u.compute_seconds = 1.0;
      return messages::Message{std::move(u)};
    });
    REQUIRE(chunks.ok());
    for (const auto& bytes : *chunks) {
      auto r = session.updateRequest();
      r.setLearner(1);
      r.setEnvelope(bytes_of(bytes));
      r.send().wait(ws);
    }
    session.pingRequest().send().wait(ws);
  };
  // What a live node does while it waits: reads its deliveries, pings its session and beats for
  // its learner (a session silent for 3 s is cut).
  auto last_beat = std::chrono::steady_clock::now();
  auto tend = [&] {
    ws.poll();
    const auto now = std::chrono::steady_clock::now();
    if (now - last_beat < std::chrono::milliseconds(500)) return;
    last_beat = now;
    session.pingRequest().send().detach([](kj::Exception&&) {});
    auto beat = session.heartbeatRequest();
    beat.setLearner(1);
    beat.setEnvelope(bytes_of(envelope(messages::Heartbeat{own, 10, 1.0, 0})));
    beat.send().detach([](kj::Exception&&) {});
  };
  auto handled = [&] {  // the attacker's updates the syncer bounded or refused, from its log
    return count_of(coordinator.err(), "the update of fragment 0 from " + own);
  };

  // 1. The run's first update.
  poison(0);
  REQUIRE_MESSAGE(wait_until([&] { tend(); return handled() >= 1; }, 20), coordinator.all());
  // 2. An honest node trains; the run commits and scores finite losses.
  Process node("node-a", node_args(s, port, "node-a"), s.dir);
  const int64_t before_honest = std::max<int64_t>(coordinator.last_value("version"), 0);
  CHECK_MESSAGE(wait_until([&] { tend(); return coordinator.last_value("version") >= before_honest + 80; }, 40),
                coordinator.all());
  // 3. Again, once the honest learners' figures are known (tens of their updates of each fragment).
  poison(1);
  CHECK_MESSAGE(wait_until([&] { tend(); return handled() >= 2; }, 20), coordinator.all());
  const int64_t after_second = coordinator.last_value("version");
  CHECK_MESSAGE(wait_until([&] { tend(); return coordinator.last_value("version") >= after_second + 4; }, 30),
                coordinator.all());
  const double scored = last_number(coordinator, "heldout_loss");
  CAPTURE(scored);
  CHECK(std::isfinite(scored));
  // The honest node never took a non-finite step from what it installed.
  CHECK_MESSAGE(node.err().find("non-finite") == std::string::npos, node.all());

  const int code = coordinator.wait(90);
  CAPTURE(coordinator.all());
  REQUIRE(code == 0);
  CHECK_MESSAGE(node.wait(30) == 0, node.all());
  auto summary = coordinator.summary();
  CAPTURE(summary.dump());
  CHECK(std::isfinite(summary["heldout_loss"].get<double>()));
  CHECK(summary["heldout_loss"].get<double>() < summary["initial_heldout_loss"].get<double>());
  CHECK(summary["rejected_by_reason"].value("non_finite_merge", int64_t{-1}) == 0);
  // None of the attacker's work was merged whole: both of its updates were brought down to the
  // absolute bound, and the second, judged against the honest learners' medians, refused.
  CHECK(count_of(coordinator.err(), "bounded the update of fragment 0 from " + own) == 2);
  CHECK(count_of(coordinator.err(), "refused the update of fragment 0 from " + own + " as an outlier") == 1);
  CHECK(summary["rejected_by_reason"].value("outlier", int64_t{-1}) >= 1);
}

TEST_CASE("relay over TLS: a join proof bound to another node's certificate is refused on this connection, one bound to its own is accepted") {
  Scratch s("authz-relay");
  make_ca_and_certificate(s.dir, "");  // the run CA and a certificate named `node`
  const int port = free_port();
  const std::vector<std::string> tls{"--config", tls_config(s.dir, "", "").string()};
  Process coordinator("coordinator", coordinator_args(s, port, {"train.max_seconds=0"}, tls), s.dir);
  await_listening(coordinator);
  const auto token = secret_of(s.token);

  // An impostor holding a certificate of the run's CA (`node`): what node-a proved to it, on a
  // connection whose nonce the impostor fetched from the coordinator, is bound to node-a's name.
  kj::AsyncIoContext io = kj::setupAsyncIo();
  const auto ca = read_file(s.dir / "ca" / "ca.pem");
  const auto certificate = read_file(s.dir / "ca" / "node.pem");
  const auto key = read_file(s.dir / "ca" / "node.key");
  kj::TlsCertificate trusted(kj::StringPtr(ca.c_str()));
  kj::TlsContext::Options options;
  options.useSystemTrustStore = false;
  options.trustedCertificates = kj::arrayPtr(&trusted, 1);
  const kj::TlsKeypair keypair{kj::TlsPrivateKey(kj::StringPtr(key.c_str())),
                               kj::TlsCertificate(kj::StringPtr(certificate.c_str()))};
  options.defaultKeypair = keypair;  // held by reference
  kj::TlsContext context(kj::mv(options));
  auto join_bound_to = [&](const std::string& bound_to) {
    auto address = io.provider->getNetwork().parseAddress("127.0.0.1", static_cast<uint16_t>(port)).wait(io.waitScope);
    auto stream = context.wrapClient(address->connect().wait(io.waitScope), "127.0.0.1").wait(io.waitScope);
    capnp::TwoPartyClient client(*stream);
    auto gateway = client.bootstrap().castAs<wire::Gateway>();
    auto challenge = gateway.challengeRequest().send().wait(io.waitScope);
    const std::string nonce(reinterpret_cast<const char*>(challenge.getNonce().begin()), challenge.getNonce().size());
    auto call = gateway.joinRequest();
    auto bytes = Outbox("node").wrap(messages::Join{"", "node", "site-x", "cpu", 0, ""});
    REQUIRE(bytes.ok());
    call.initRequest().setJoin(bytes_of(*bytes));
    call.getRequest().setLearners(1);
    call.getRequest().setPreferredFirst(-1);
    call.getRequest().setProof(bytes_of(remote::prove(token, remote::join_purpose(bound_to), nonce)));
    call.setSink(kj::heap<QuietSink>(false));
    return call.send().wait(io.waitScope).hasSession();
  };
  CHECK_FALSE(join_bound_to("node-a"));  // relayed: the coordinator saw the certificate `node`
  CHECK_FALSE(join_bound_to(""));        // a plaintext proof, unbound, is not one under TLS
  CHECK(join_bound_to("node"));          // this connection's own
  CHECK(count_of(coordinator.err(), "admitted node 'node'") == 1);
  coordinator.kill(SIGTERM);
  REQUIRE(coordinator.wait(60) == 0);
  auto summary = coordinator.summary();
  CAPTURE(summary.dump());
  CHECK(summary["joins_refused"]["wrong_token"].get<int>() == 2);
}

TEST_CASE("squat: a frozen node's learner slots are held for it for net.slot_grace_s, another node gets others or none, and the node gets its own back") {
  Scratch s("authz-squat");
  const int port = free_port();
  auto run = start_two_learner_run(s, port, {"train.max_seconds=0", "net.slot_grace_s=60"});  // node-a: slots 0..1 of 4
  Process& coordinator = *run.coordinator;
  Process& node = *run.node;
  const auto token = secret_of(s.token);
  auto admitted = [&](const std::string& node_name, const std::string& range) {  // log lines admitting it with that range
    std::istringstream lines(coordinator.err());
    int n = 0;
    for (std::string line; std::getline(lines, line);) {
      n += line.find("admitted node '" + node_name + "'") != std::string::npos &&
           line.find("with learners " + range) != std::string::npos;
    }
    return n;
  };
  REQUIRE(admitted("node-a", "0..1") == 1);

  // node-a freezes (a WAN blip, a paused VM): its session is cut as silent and its slots released.
  node.kill(SIGSTOP);
  REQUIRE_MESSAGE(wait_until([&] { return count_of(coordinator.err(), "node 'node-a' released learners 0..1") == 1; }, 20),
                  coordinator.all());
  // A token holder asks for its range and more: 3 slots are refused (2 free, 2 held), and 2 are
  // given from the free ones, never node-a's.
  auto join = [&](PlaneClient& client, int learners, int preferred) {
    return join_with_sink(client, token, "squatter", messages::Join{"", "squatter", "site-x", "cpu", 0, ""}, learners,
                          preferred, kj::heap<QuietSink>(false));
  };
  PlaneClient greedy(port);
  auto refused_answer = join(greedy, 3, 0);
  CHECK_FALSE(refused_answer.hasSession());
  CHECK(count_of(coordinator.err(), "2 held for nodes that dropped") == 1);
  PlaneClient squatter(port, &greedy.io());
  auto taken = join(squatter, 2, 0);
  REQUIRE(taken.hasSession());
  CHECK(taken.getAnswer().getFirstLearner() == 2);
  // node-a comes back and gets its own range.
  node.kill(SIGCONT);
  CHECK_MESSAGE(wait_until([&] {
                  greedy.io().waitScope.poll();
                  return admitted("node-a", "0..1") == 2;
                }, 30),
                coordinator.all() << node.all());
  CHECK(admitted("squatter", "2..3") == 1);
  coordinator.kill(SIGTERM);
  CHECK(coordinator.wait(60) == 0);
}
